"""Birder where people train: the layout checked against the hosts, refusals of a bypassed 1-bit exchange and of a
DDP subgroup, the way out to AdamW, and the Lightning and Accelerate recipes bit for bit against birder_ref."""

import gc
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from gpu_validation import adoption, launch, layout
from gpu_validation.optimizer import Birder
from gpu_validation.validate import batch, make_model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
_AT_ONCE = 5.0  # seconds: a refusal comes before any collective could wait out a timeout (60 s here)


def test_the_layout_follows_the_hosts_and_every_bypass_is_refused_at_once():
    outcome = launch.launch(adoption.refusals, (), 4, "gloo", 60, 300)
    assert not outcome.describe_failures(), outcome.describe_failures()
    for rank, report in outcome.reports.items():
        seen = report["result"]
        assert seen["hosts_2x2"]["result"] == [2, 2]  # no gpus_per_node, no LOCAL_WORLD_SIZE: from the hosts
        assert seen["one_host_given_2"]["result"] == [2, 2] and seen["one_host_default"]["result"] == [1, 4]
        for case, says in (("given_1_on_2x2", "gpus_per_node=1 says 4 node(s) of 1"),
                           ("local_world_size_4_on_2x2", "LOCAL_WORLD_SIZE=4 says 1 node(s) of 4")):
            assert seen[case]["error"].startswith(f"ValueError: Birder: {says}, but the ranks run on 2 hosts of 2 "
                                                  "(host0: ranks [0, 1]; host1: ranks [2, 3])"), seen[case]
            assert seen[case]["seconds"] < _AT_ONCE
        for case in ("own_all_reduce", "own_all_reduce_unscaled", "outer_ddp"):
            assert seen[case]["error"].startswith("RuntimeError: Birder step 1: the ranks' gradients differed in "
                                                  "backward but are the same in step()"), seen[case]
            assert seen[case]["seconds"] < _AT_ONCE
        subgroup = seen["subgroup"]
        if rank < 2:
            assert subgroup["error"].startswith("ValueError: Birder: this DDP model runs over a process group of "
                                                "ranks 0, 1 out of 4"), subgroup
            assert subgroup["seconds"] < _AT_ONCE
        else:
            assert subgroup == {"result": None, "seconds": subgroup["seconds"]}


def test_hosts_that_cannot_be_a_layout_are_refused_with_one_line():
    assert layout.verified_gpus_per_node(["a", "a", "b", "b"], None, None) == 2
    assert layout.verified_gpus_per_node(["a"] * 4, 2, "4") == 2  # one host: simulated nodes, the argument first
    assert layout.verified_gpus_per_node(["a"] * 4, None, "1") == 1 and layout.verified_gpus_per_node(["a"] * 4,
                                                                                                       None, None) == 4
    with pytest.raises(ValueError, match=r"the ranks run on 2 hosts with different numbers of ranks \(a: ranks "
                                         r"\[0, 1, 2\]; b: ranks \[3\]\)"):
        layout.verified_gpus_per_node(["a", "a", "a", "b"], None, None)
    with pytest.raises(ValueError, match=r"the ranks are not numbered node by node \(a: ranks \[0, 2\]; b: ranks "
                                         r"\[1, 3\]\)"):
        layout.verified_gpus_per_node(["a", "b", "a", "b"], None, None)


def test_a_plain_module_is_refused_naming_the_client_recipes(one_rank):
    with pytest.raises(ValueError, match=r"got Sequential; .*Lightning: Birder\(self\.trainer\.strategy\.model.*"
                                         r"Accelerate: model = accelerator\.prepare\(model\) first"):
        Birder(make_model(0), lr=0.01)


def test_leaving_birder_for_adamw_and_foreign_optimizers_refusing_its_state(one_rank):
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=0.01, weight_decay=1e-3, seed=3, beta=0.9)
    for step in (1, 2):
        x, y = batch(3, step, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    birder_state, adamw_state = opt.state_dict(), opt.to_adamw_state_dict(betas=(0.9, 0.99))
    m, b, t = opt.m.clone(), opt.b_hat.clone(), opt.t
    params = list(model.parameters())
    del opt, ddp
    gc.collect()  # Birder gone: its refusal of other optimizers on its parameters with it
    for cls in (torch.optim.AdamW, torch.optim.Adam, torch.optim.RMSprop):  # fail at load, naming Birder
        with pytest.raises(ValueError, match=r"gpu_validation\.Birder's optimizer state: torch optimizers cannot "
                                             r"load it; convert it with Birder\.to_adamw_state_dict\(\)"):
            cls(params, lr=0.01).load_state_dict(birder_state)
    adamw = torch.optim.AdamW(params, lr=0.5)
    adamw.load_state_dict(adamw_state)
    group = adamw.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"]) == (0.01, 1e-3, (0.9, 0.99))
    first = adamw.state[params[0]]
    n = params[0].numel()
    assert float(first["step"]) == t
    # AdamW's bias-corrected moments are Birder's (trial t8: uncorrected, AdamW stepped 0.34x as far after 100)
    birder_bias = 1 - 0.9**t
    assert torch.allclose(first["exp_avg"].reshape(-1) / (1 - 0.9**t), m[:n] / birder_bias, rtol=1e-6)
    assert torch.allclose(first["exp_avg_sq"].reshape(-1) / (1 - 0.99**t), (b[:n] / birder_bias).square(),
                          rtol=1e-5)
    x, y = batch(3, 3, 0)
    nn.functional.mse_loss(model(x), y).backward()
    adamw.step()  # it runs on, from Birder's moments
    assert all(torch.isfinite(p).all() for p in params)


def _client_recipe(script: str, package: str, *args: str) -> dict:
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the {package} extra is not installed (pip install -e '.[{package}]')")
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          timeout=400)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_lightning_recipe_on_two_hosts_is_bit_exact_with_the_hosts_layout():
    """2 simulated hosts x 1 rank, Lightning's launcher environment (no LOCAL_WORLD_SIZE): Layout 2 x 1, every
    step (with gradient clipping) equal to birder_ref's, ranks identical."""
    result = _client_recipe("lightning_birder.py", "lightning", "--nodes", "2", "--gpus-per-node", "1", "--steps", "3")
    assert result["passed"], result
    assert [r["layout"] for r in result["ranks"]] == [[2, 1], [2, 1]]


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_lightning_mixed_precision_with_clipping_through_birders_plugin_is_bit_exact(precision):
    """Lightning's own MixedPrecision refuses gradient_clip_val with Birder (it reads _step_supports_amp_scaling as
    a fused optimizer's); ``lightning_precision.mixed_precision`` unscales, clips, and every step equals
    birder_ref's on the gradients step() saw."""
    result = _client_recipe("lightning_birder.py", "lightning", "--nodes", "2", "--gpus-per-node", "1", "--steps", "3",
                            "--precision", precision)
    assert result["passed"] and result["precision"] == precision, result


def test_the_mixed_precision_plugin_refuses_another_precision():
    from gpu_validation.lightning_precision import mixed_precision

    with pytest.raises(ValueError, match="precision must be '16-mixed' or 'bf16-mixed'"):
        mixed_precision("16-true")


def test_the_accelerate_recipe_on_two_hosts_of_two_is_bit_exact():
    """2 simulated hosts x 2 ranks, with accumulation and clipping: every step equal to birder_ref's (the double DDP
    of prepare(DDP(model), Birder(...)) is refused in the test above, as adoption.outer_ddp builds it)."""
    result = _client_recipe("accelerate_birder.py", "accelerate", "--nodes", "2", "--gpus-per-node", "2",
                            "--steps", "3")
    assert result["passed"], result
    assert {tuple(r["layout"]) for r in result["ranks"]} == {(2, 2)}
