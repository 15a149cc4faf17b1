"""``gpu_validation.Birder``, the torch optimizer: real DDP on gloo, bit for bit against birder_ref.

Multi-rank cases run in ``tests/gpu_scenarios/training.py`` (one spawn of 4 ranks covers GradScaler with and without
unscale_, clipping, accumulation without no_sync, frozen parameters, an overflow, the skip limit and both
checkpoint forms); one-rank cases (argument checks, the state-dict refusals) run in this process.
"""

import copy
import functools
import tempfile
import warnings

import numpy as np
import pytest
import torch
from gpu_scenarios import faults, training
from torch import nn

from birder_ref import algorithm1
from birder_ref.draws import server_uniforms, worker_uniforms
from birder_ref.update import apply_update
from gpu_validation import Birder, launch
from gpu_validation.validate import batch, make_model

# The stall runs sleep out the 10 s process-group timeout (and the launcher's wait for a rank that never ends): each
# takes 15-30 s with ~3 s of CPU, so they run together in the background (conftest's ``background``) while this
# module's other tests run. Each is exactly the launch its test made before.
_STALL_TIMEOUT = 10.0
BACKGROUND = {
    "inside_all_to_all": functools.partial(launch.launch, training.stall, ("hierarchical", 2, 1,
                                           "inter-node all-to-all"), 4, "gloo", _STALL_TIMEOUT, 90),
    "before_backward": functools.partial(launch.launch, faults.peer_fault, ("stall", 1), 3, "gloo",
                                         _STALL_TIMEOUT, 120),
    "buffers_inside": functools.partial(launch.launch, faults.ddp_fault, ("buffers_inside", "stall", 1), 3, "gloo",
                                        _STALL_TIMEOUT, 120),
}


@pytest.fixture(scope="module")
def four_ranks():
    """The 4-rank (2 x 2) checks, then 2 ranks (2 x 1) loading the full checkpoint the 4 ranks saved."""
    with tempfile.TemporaryDirectory() as folder:
        outcome = launch.launch(training.exactness_and_checkpoint, ("hierarchical", 2, 3, folder), 4, "gloo", 30, 240)
        assert not outcome.describe_failures(), outcome.describe_failures()
        elsewhere = launch.launch(training.reshard, (folder,), 2, "gloo", 30, 120)
        assert not elsewhere.describe_failures(), elsewhere.describe_failures()
    return {**outcome.reports[0]["result"], "reshard": elsewhere.reports[0]["result"]}


@pytest.mark.parametrize("case", training.CASES)
def test_every_training_loop_habit_gives_algorithm1_bit_for_bit(four_ranks, case):
    """GradScaler (with/without unscale_), clip_grad_norm_ on the raw gradient, accumulation without no_sync."""
    assert four_ranks[case]["mismatched"] == 0
    assert four_ranks[case]["t"] == 3
    # the node's exchange started during backward and was used, unless .grad changed after backward (clipping,
    # unscaling, a scale to divide out): then every rank of the node exchanged again (exact both ways)
    changed = case in ("clip", "grad_scaler", "grad_scaler_unscale")
    assert (four_ranks[case]["overlapped_steps"], four_ranks[case]["overlap_fallbacks"]) == ((0, 3) if changed
                                                                                           else (3, 0))


def test_frozen_parameters_carry_no_state(four_ranks):
    plain, frozen = four_ranks["plain"], four_ranks["frozen"]
    assert frozen["dim"] == plain["dim"] - (8 * 16 + 16)
    assert frozen["state_elements"] < plain["state_elements"]


def test_an_overflow_skips_everywhere_and_every_scaler_backs_off(four_ranks):
    overflow = four_ranks["overflow"]
    assert overflow["scales"] == [[65536.0, 32768.0, 32768.0]] * 4
    assert overflow["t"] == 2 and overflow["skipped"] == 1 and overflow["bad_ranks"] == [1]


def test_finite_gradients_whose_node_sum_overflows_are_skipped_everywhere(four_ranks):
    overflow = four_ranks["node_sum_overflow"]
    assert overflow["finite_gradients"] and overflow["t"] == 0 and overflow["skipped"] == 1
    assert overflow["bad_ranks"] == [0, 1]  # node 0's two ranks hold the overflowed shards


def test_consecutive_skips_raise_at_the_limit_naming_the_rank(four_ranks):
    limit = four_ranks["skip_limit"]
    assert limit["raised_at"] == 3 and limit["skipped"] == 3
    assert "max_consecutive_skips=3" in limit["message"] and "rank(s) [1]" in limit["message"]


def test_rank0_full_checkpoint_and_sharded_checkpoints_resume_bit_identically(four_ranks):
    assert four_ranks["checkpoint"]["identical"] == {"full": True, "sharded": True}


def test_a_full_checkpoint_loads_on_another_world_size_with_the_same_workers_and_refuses_others(four_ranks):
    reshard = four_ranks["reshard"]
    assert reshard["intact"] and reshard["t"] == 4  # 2 x 2 ranks saved it at t = 3; 2 x 1 ranks stepped once more
    assert "n_workers=2, this run has 1" in reshard["refusal"]


def test_flat_scheme_on_two_ranks_is_bit_exact():
    outcome = launch.launch(training.exactness, ("flat", 1, 2), 2, "gloo", 30, 120)
    assert not outcome.describe_failures(), outcome.describe_failures()
    result = outcome.reports[0]["result"]
    assert all(result[case]["mismatched"] == 0 for case in training.CASES)


# ---- one rank, in this process ----

def _trained(steps: int = 2, **options):
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=0.01, weight_decay=1e-3, seed=3, **options)
    for step in range(1, steps + 1):
        x, y = batch(3, step, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    return model, ddp, opt


def test_one_rank_equals_algorithm1_and_line16(one_rank):
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=0.01, weight_decay=1e-3, seed=3)
    x = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    ref = algorithm1.init(1, opt.dim)
    for step in range(1, 4):
        inputs, targets = batch(3, step, 0)
        nn.functional.mse_loss(ddp(inputs), targets).backward()
        grad = np.concatenate([p.grad.reshape(-1).numpy() for p in model.parameters()])
        opt.step()
        opt.zero_grad()
        u_bar, ref = algorithm1.step(ref, grad[None], 0.95, 1e-8, worker_uniforms(3, step, 1, opt.dim),
                                     server_uniforms(3, step, opt.dim))
        x = apply_update(x, u_bar, 0.01, 1e-3)
        np.testing.assert_array_equal(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy(), x)
    state = opt.state_dict()["state"]
    for name, ref_name in (("m", "m"), ("b_hat", "b_hat"), ("e", "e")):
        np.testing.assert_array_equal(state[name].numpy(), getattr(ref, ref_name))
    np.testing.assert_array_equal(state["server_error"].numpy(), ref.server_e)


def test_step_without_a_backward_through_ddp_is_refused(one_rank):
    model, ddp, opt = _trained(1)
    with pytest.raises(RuntimeError, match="no backward pass through the DDP model"):
        opt.step()
    with pytest.raises(ValueError, match="add_param_group is refused"):
        opt.add_param_group({"params": [torch.zeros(2, requires_grad=True)]})


def test_the_hook_keys_its_records_by_bucket_and_keeps_the_sample_as_backward_left_it(one_rank):
    """What step() reads from backward: the largest |gradient| per bucket index (an int: the bucket's number) and
    each sampled parameter's elements as the bucket held them, untouched by a clip after backward."""
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0005)  # several buckets
    opt = Birder(ddp, lr=0.01, seed=3)
    for step in (1, 2):  # DDP rebuilds its buckets to the cap after the first iteration
        x, y = batch(3, step, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        if step == 1:
            opt.step()
            opt.zero_grad()
    hook = opt._hook_state
    assert len(hook.largest) > 1 and sorted(hook.largest) == list(range(len(hook.largest)))
    before = [p.grad.reshape(-1)[index].clone() for p, index in opt._sample]
    nn.utils.clip_grad_value_(model.parameters(), 1e-6)
    assert all(torch.equal(kept, seen) for kept, seen in zip(hook.backward_sample, before, strict=True))
    opt.step()  # not refused: one rank


def test_step_advances_the_parameters_autograd_version(one_rank):
    """step() writes the parameters through NumPy views on CPU: a graph that saved a parameter before step() must
    still refuse to backward through it afterwards, as after any in-place update."""
    model, ddp, opt = _trained(1)
    x, y = batch(3, 2, 0)
    nn.functional.mse_loss(ddp(x), y).backward()
    saved = sum((p ** 2).sum() for p in model.parameters())  # pow saves each parameter itself
    versions = [p._version for p in model.parameters()]
    opt.step()
    assert all(p._version > v for p, v in zip(model.parameters(), versions, strict=True))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()


def test_an_error_of_the_models_own_in_forward_keeps_torchs_message(one_rank):
    """Birder's forward hook rewrites only errors raised by DDP's own collectives: a shape error in the model
    reaches the caller as torch wrote it, and the next forward and step work."""
    model, ddp, opt = _trained(1)
    with pytest.raises(RuntimeError, match=r"^mat1 and mat2 shapes cannot be multiplied"):
        ddp(torch.zeros(4, 5))
    x, y = batch(3, 2, 0)
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    assert opt.t == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"ddp_model": "model"}, "ddp_model must be"),
    ({"lr": 0.0}, "lr must be > 0"),
    ({"lr": "0.1"}, "lr must be a finite real"),
    ({"lr": float("nan")}, "lr must be a finite real"),
    ({"weight_decay": -1.0}, "weight_decay must be >= 0"),
    ({"beta": 1.0}, "beta must be > 0.0 and < 1.0"),
    ({"eps": 0.0}, "eps must be > 0"),
    # within bounds as a Python float, not once rounded to float32, where the update computes with it
    ({"beta": 1 - 1e-9}, "beta=0.999999999 is 1.0 in float32.*must lie in \\(0, 1\\) there too"),
    ({"eps": 1e-50}, "eps=1e-50 is 0.0 in float32.*must be > 0 there too"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"seed": True}, "seed must be an integer"),
    ({"seed": 2**32}, "seed must be below 2\\*\\*32"),
    ({"scheme": "ring"}, "scheme must be one of"),
    ({"gpus_per_node": 0}, "gpus_per_node must be an integer >= 1"),
    ({"max_consecutive_skips": 0}, "max_consecutive_skips must be an integer >= 1"),
    ({"overlap": "yes"}, "overlap must be True or False"),
])
def test_bad_arguments_are_one_value_error_naming_the_parameter(one_rank, kwargs, message):
    ddp = nn.parallel.DistributedDataParallel(make_model(0))
    args = {"ddp_model": ddp, **kwargs}
    with pytest.raises(ValueError, match=message):
        Birder(**args)


def _mutations():
    """At least 30 distinct bad state dicts: (name, function making it from a good one)."""
    def put(key, value):
        def change(sd):
            sd["state"][key] = value
        return change

    def tensor(key, fn):
        def change(sd):
            sd["state"][key] = fn(sd["state"][key].clone())
        return change

    def drop(key):
        return lambda sd: sd["state"].pop(key)

    def group(key, value):
        def change(sd):
            sd["param_groups"][0][key] = value
        return change

    def at(t, i, v):
        t[(0,) * (t.dim() - 1) + (i,)] = v
        return t

    return [
        ("not a dict", lambda sd: sd.clear() or sd.update({"oops": 1})),
        ("extra top key", lambda sd: sd.update({"extra": 1})),
        ("state a list", lambda sd: sd.update({"state": []})),
        ("param_groups a dict", lambda sd: sd.update({"param_groups": {}})),
        ("two param groups", lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0]))),
        ("lr a string", group("lr", "0.01")),
        ("lr negative", group("lr", -0.01)),
        ("lr NaN", group("lr", float("nan"))),
        ("weight decay negative", group("weight_decay", -1.0)),
        ("params wrong", group("params", [0, 1])),
        ("group key not a name", group(1, 0.9)),  # a scheduler's named keys (initial_lr) load, as in torch
        ("format", put("format", "birder-ddp-hook-state/1")),
        ("missing m", drop("m")),
        ("missing t", drop("t")),
        ("unknown key", put("v", torch.zeros(3))),
        ("t negative", put("t", -1)),
        ("t fractional", put("t", 1.5)),
        ("t a string", put("t", "2")),
        ("t a bool", put("t", True)),
        ("skipped negative", put("skipped_steps", -2)),
        ("consecutive above skipped", put("consecutive_skips", 5)),
        ("seed differs", put("seed", 4)),
        ("seed a string", put("seed", "3")),
        ("beta differs", put("beta", 0.9)),
        ("eps differs", put("eps", 1e-6)),
        ("scheme differs", put("scheme", "flat")),
        ("another number of workers", put("n_workers", 2)),
        ("dim differs", put("dim", 466)),
        ("m float64", tensor("m", lambda t: t.double())),
        ("m wrong shape", tensor("m", lambda t: t[:, :-1])),
        ("m one-dimensional", tensor("m", lambda t: t[0])),
        ("m not a tensor", tensor("m", lambda t: t.numpy())),
        ("m NaN", tensor("m", lambda t: at(t, 3, float("nan")))),
        ("b negative", tensor("b_hat", lambda t: at(t, 5, -1e-3))),
        ("b NaN", tensor("b_hat", lambda t: at(t, 5, float("nan")))),
        ("b infinite", tensor("b_hat", lambda t: at(t, 5, float("inf")))),
        ("e outside [-2, 2]", tensor("e", lambda t: at(t, 7, 2.5))),
        ("server error infinite", tensor("server_error", lambda t: at(t, 0, float("-inf")))),
        ("server error wrong shape", tensor("server_error", lambda t: t[None])),
        ("server error beyond 2", tensor("server_error", lambda t: at(t, 1, -3.0))),
        ("parameters not a list", put("parameters", "0.weight")),
        ("a parameter's shape", lambda sd: sd["state"]["parameters"][0].__setitem__(1, [8, 16])),
        ("two parameters swapped", lambda sd: sd["state"]["parameters"].insert(0, sd["state"]["parameters"].pop(1))),
        ("a parameter fewer", lambda sd: sd["state"]["parameters"].pop()),
        ("stepped while frozen not a list", put("stepped_while_frozen", {0})),
        ("stepped while frozen out of range", put("stepped_while_frozen", [6])),
        ("stepped while frozen twice", put("stepped_while_frozen", [1, 1])),
    ]


@pytest.mark.parametrize("name, mutate", _mutations(), ids=[m[0] for m in _mutations()])
def test_load_state_dict_refuses_each_bad_state_and_changes_nothing(one_rank, name, mutate):
    model, ddp, opt = _trained(2)
    good = opt.state_dict()
    before = copy.deepcopy(good)
    bad = copy.deepcopy(good)
    mutate(bad)
    with pytest.raises(ValueError):
        opt.load_state_dict(bad)
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for key, value in before["state"].items():
        now = after["state"][key]
        same = torch.equal(now, value) if isinstance(value, torch.Tensor) else now == value
        assert same, key


class _TwoLayers(nn.Module):
    """The same modules, names and shapes, defined in either order (a refactor): element order follows definition."""

    def __init__(self, body_first: bool, prefix: str = ""):
        super().__init__()
        torch.manual_seed(0)
        for name in (("body", "head") if body_first else ("head", "body")):
            setattr(self, prefix + name, nn.Linear(8, 16) if name == "body" else nn.Linear(16, 3))
        self.names = prefix + "body", prefix + "head"

    def forward(self, x):
        body, head = (getattr(self, n) for n in self.names)
        return head(torch.tanh(body(x)))


def _stepped(model: nn.Module, steps: int) -> Birder:
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=0.01, seed=3)
    for step in range(1, steps + 1):
        x, y = batch(3, step, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    return opt


@pytest.mark.parametrize("save", ["state_dict", "sharded_state_dict"])
def test_a_state_saved_for_another_parameter_order_is_refused_not_loaded_onto_other_elements(one_rank, save):
    """t13: a refactor that defines the head before the body keeps names and counts (model.load_state_dict matches
    by name), and Birder's element-order m, b_hat and e loaded onto the wrong parameters without a word."""
    saved = getattr(_stepped(_TwoLayers(body_first=True), 2), save)()
    with pytest.raises(ValueError, match="another parameter layout \\('body.weight' was parameter 0 and is now 2\\)"):
        _stepped(_TwoLayers(body_first=False), 0).load_state_dict(copy.deepcopy(saved))
    _stepped(_TwoLayers(body_first=True), 0).load_state_dict(copy.deepcopy(saved))  # the same layout loads
    _stepped(_TwoLayers(body_first=True, prefix="block_"), 0).load_state_dict(copy.deepcopy(saved))  # renamed too
    before = copy.deepcopy(saved)
    del before["state"]["parameters"]  # saved before the layout was: loads as it did
    opt = _stepped(_TwoLayers(body_first=False), 0)
    opt.load_state_dict(before)
    assert opt.t == 2


def test_a_torch_optimizers_state_is_refused_saying_what_it_is(one_rank):
    """t13: torch.optim.Adam's state dict loaded into Birder said only "format None"."""
    _, _, opt = _trained(0)
    other = make_model(0)  # Adam's own model: Birder refuses a second optimizer on its parameters
    adam = torch.optim.Adam(other.parameters(), lr=0.01)
    nn.functional.mse_loss(other(batch(3, 1, 0)[0]), batch(3, 1, 0)[1]).backward()
    adam.step()
    with pytest.raises(ValueError, match="this is a torch optimizer's state_dict \\(per-parameter exp_avg, "
                                         "exp_avg_sq, step\\), not Birder's"):
        opt.load_state_dict(adam.state_dict())


def test_full_and_sharded_round_trips_and_another_layout_is_refused(one_rank):
    model, ddp, opt = _trained(2)
    full, shard = opt.state_dict(), opt.sharded_state_dict()
    _, _, fresh = _trained(0)
    fresh.load_state_dict(full)
    assert fresh.t == 2 and torch.equal(fresh.m, opt.m) and torch.equal(fresh.server_error, opt.server_error)
    _, _, fresh = _trained(0)
    fresh.load_state_dict(shard)
    assert fresh.t == 2 and torch.equal(fresh.e, opt.e)
    moved = copy.deepcopy(shard)
    moved["state"]["rank"] = 1
    with pytest.raises(ValueError, match="sharded checkpoint loads only on the layout that saved it"):
        fresh.load_state_dict(moved)
    two_workers = copy.deepcopy(full)
    two_workers["state"]["n_workers"] = 2
    for name in ("m", "b_hat", "e"):
        two_workers["state"][name] = two_workers["state"][name].repeat(2, 1)
    with pytest.raises(ValueError, match="n_workers=2, this run has 1 .*cannot be split or merged"):
        fresh.load_state_dict(two_workers)


def _params_after_steps(**ddp_options) -> torch.Tensor:
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model, **ddp_options)
    opt = Birder(ddp, lr=0.01, seed=3)
    schedule = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    for step in range(1, 5):
        x, y = batch(3, step, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
        schedule.step()
    assert opt.param_groups[0]["lr"] == 0.0025
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_ddp_options_and_an_lr_scheduler_leave_the_bits_alone(one_rank):
    base = _params_after_steps()
    for options in ({"gradient_as_bucket_view": True}, {"static_graph": True}, {"find_unused_parameters": True},
                    {"bucket_cap_mb": 0.0003}):
        assert torch.equal(_params_after_steps(**options), base), options


def test_the_overlapped_exchange_equals_the_plain_one_under_ddp_options():
    """Two ranks on one node (the exchange that overlaps is the node's): several buckets, gradient_as_bucket_view,
    static_graph, find_unused_parameters; every step overlapped, the same bits as overlap=False."""
    outcome = launch.launch(training.overlap_under_ddp_options, (), 2, "gloo", 30, 120)
    assert not outcome.describe_failures(), outcome.describe_failures()
    for name, row in outcome.reports[0]["result"].items():
        assert row == {"equal": True, "overlapped_steps": 4}, name


# ---- nothing outside Birder acts on local gradients; faults name the failed rank; rank-0 state_dict ----

def test_ranks_whose_parameters_drift_apart_raise_on_every_rank_naming_the_parameters():
    """Each rank moves the last layer by its own local .grad (a hand-written SGD step no hook sees): the next
    step raises on every rank, from the parameter checksums the ranks exchange in backward."""
    outcome = launch.launch(faults.drift, (), 2, "gloo", 30, 120)
    assert not outcome.describe_failures(), outcome.describe_failures()
    for report in outcome.reports.values():
        message = report["result"]["raised"]
        assert "the ranks' copies of 2 parameter(s) differ: 4.weight (ranks [0] | [1]), 4.bias" in message


def _seconds(message: str) -> float:
    return float(message.split("after ")[1].split(" s")[0])


# A crashed peer must be named "at once", not after the process-group timeout: with a 600 s timeout the bound is a
# tenth of it (60 s), so the error provably comes at least 540 s before the timeout would have raised, and a machine
# loaded to 10-20 still has a minute to deliver it (measured: a few seconds). A survivor that did wait for the
# timeout is killed by the launch's 120 s backstop and fails the test too.
_CRASH_TIMEOUT = 600.0
_AT_ONCE = _CRASH_TIMEOUT / 10


def _within(kind: str, timeout: float) -> float:
    """The bound on a survivor's seconds to the error: a stall's timeout + 10 s (the report window, a quarter of the
    timeout, and scheduling), a crash's ``_AT_ONCE``."""
    return timeout + 10.0 if kind == "stall" else _AT_ONCE


def _state(kind: str) -> str:
    """How a survivor names the failed rank: a stalled one is alive (its heartbeat goes on), a crashed one dead."""
    return "hung: alive, silent for 2.5 s" if kind == "stall" else "dead: no heartbeat for 5 s"


@pytest.mark.parametrize("kind, timeout", [("raise", _CRASH_TIMEOUT), ("exit", _CRASH_TIMEOUT),
                                           ("stall", _STALL_TIMEOUT)])
def test_a_peer_that_fails_before_backward_is_named_by_every_survivor(kind, timeout, background):
    """Rank 1 of 3 raises, exits or stalls before its forward pass: the survivors' backward raises Birder's own
    message naming rank 1 (from who reported failing, never from the unfilled all-gather buffer). After a crash
    at once: within a tenth of the 600 s timeout (``_CRASH_TIMEOUT``: a margin of 540 s before the timeout);
    after a stall within the 10 s timeout + 10 s (report window, scheduling)."""
    outcome = (background["before_backward"].result() if kind == "stall"
               else launch.launch(faults.peer_fault, (kind, 1), 3, "gloo", timeout, 120))
    survivors = {r: m for r, m in outcome.errors.items() if r != 1}
    assert sorted(survivors) == [0, 2], outcome.describe_failures()
    for message in survivors.values():
        assert "Birder step 3: the all-gather in backward (Birder's hook)" in message, message
        assert f"rank(s) [1] did not reach it ({_state(kind)}" in message and "grew after backward" not in message
        assert _seconds(message) < _within(kind, timeout)


def test_a_rank_stalled_inside_birders_collectives_ends_every_rank_naming_it(background):
    """Rank 1 hangs before the inter-node all-to-all (a group of ranks 1 and 3, not WORLD). The timeout (10 s) is
    long enough for the healthy collectives of a loaded 2-core machine (2 s timed out healthy ranks at a load of 20);
    the bound, the timeout + 10 s, covers the 2.5 s report window and scheduling and still catches a rank that hangs."""
    timeout = _STALL_TIMEOUT
    outcome = background["inside_all_to_all"].result()
    assert outcome.killed == (1,)
    assert sorted(outcome.errors) == [0, 2, 3]
    for message in outcome.errors.values():
        assert "rank(s) [1] did not reach it" in message and f"{timeout:g} s process-group timeout" in message
        seconds = float(message.split("after ")[1].split(" s")[0])
        assert seconds < timeout + 10.0


_BEFORE_DDP = "the record all-gather before DDP's collectives in forward"
_IN_DDP = "the bucket rebuild or buffer broadcast (DDP's own collective in forward)"
_IN_HOOK = "the all-gather in backward (Birder's hook)"


@pytest.mark.parametrize("where, kind, timeout, phases", [
    ("rebuild", "exit", _CRASH_TIMEOUT, {0: _BEFORE_DDP, 2: _BEFORE_DDP}),
    ("unused", "exit", _CRASH_TIMEOUT, {0: _IN_HOOK, 2: _IN_HOOK}),
    # rank 0, the root, fails inside DDP's broadcast; rank 2 has its buffers and fails next, in Birder's hook
    ("buffers_inside", "exit", _CRASH_TIMEOUT, {0: _IN_DDP, 2: _IN_HOOK}),
    ("buffers_inside", "stall", _STALL_TIMEOUT, {0: _IN_DDP, 2: _IN_HOOK}),
])
def test_a_peer_that_fails_at_ddps_own_collectives_is_named_by_every_survivor(where, kind, timeout, phases,
                                                                              background):
    """Rank 1 of 3 fails where the others enter one of DDP's own collectives (faults.ddp_fault): its bucket
    rebuild (step 2's forward), its find_unused_parameters bitmap all-reduce (backward), or inside the buffer
    broadcast of a BatchNorm model, after Birder's record exchange (a peer failing before that exchange meets it
    as in the rebuild case; the state_dict test below shows the exchange runs before the broadcast). Every
    survivor raises
    Birder's message naming rank 1 (never torch's bare gloo error), at once after a crash (within a tenth of the
    600 s timeout: a margin of 540 s before it), within the 10 s timeout + 10 s after a stall."""
    outcome = (background["buffers_inside"].result() if kind == "stall"
               else launch.launch(faults.ddp_fault, (where, kind, 1), 3, "gloo", timeout, 120))
    survivors = {r: m for r, m in outcome.errors.items() if r != 1}
    assert sorted(survivors) == [0, 2], outcome.describe_failures()
    for rank, message in survivors.items():
        step = 2 if where == "rebuild" else 3
        assert f"Birder step {step}: {phases[rank]} over ranks [0, 1, 2] failed on rank {rank}" in message, message
        assert f"rank(s) [1] did not reach it ({_state(kind)}" in message, message
        assert _seconds(message) < _within(kind, timeout)


def test_a_live_rank_slower_than_the_report_window_is_not_named_with_the_dead_one():
    """Rank 1 exits inside step 3's forward; rank 0, the root of DDP's buffer broadcast, fails there at once, while
    rank 2 has its buffers and then pauses past rank 0's whole report window (``faults.SLOW_S``) before it reaches
    its own failing collective. Rank 2's heartbeat goes on, rank 1's stopped: rank 0 names rank 1 alone, dead
    (with a fixed window alone it named [1, 2]: the flaky CI failure this replaces), and so does rank 2."""
    body = functools.partial(faults.ddp_fault, slow=2)
    outcome = launch.launch(body, ("buffers_inside", "exit", 1), 3, "gloo", _CRASH_TIMEOUT, 120)
    survivors = {r: m for r, m in outcome.errors.items() if r != 1}
    assert sorted(survivors) == [0, 2], outcome.describe_failures()
    for rank, message in survivors.items():
        assert f"failed on rank {rank}" in message and "rank(s) [1] did not reach it (dead: " in message, message
        assert _seconds(message) < _AT_ONCE
    assert _seconds(survivors[2]) > faults.SLOW_S  # rank 2 did pause past rank 0's window


def test_state_dict_on_rank_0_alone_fails_at_once_on_every_rank_with_one_line():
    """The other ranks go on into DDP's bucket rebuild (after step 1), DDP's buffer broadcast (a BatchNorm model)
    or the next step's backward: their record meets rank 0's before any collective of DDP's, so every rank raises
    at once instead of waiting for the timeout: within a tenth of the 600 s timeout (a margin of 540 s)."""
    outcome = launch.launch(faults.rank0_state_dict, (), 2, "gloo", _CRASH_TIMEOUT, 120)
    assert not outcome.describe_failures(), outcome.describe_failures()
    for report in outcome.reports.values():
        raised = report["result"]
        assert sorted(raised) == ["backward", "buffers", "rebuild"]
        for where, (seconds, message) in raised.items():
            others = "backward" if where == "backward" else "forward"
            assert f"rank(s) [0] called state_dict(); rank(s) [1] called {others}. state_dict() is collective" \
                in message, message
            assert seconds < _AT_ONCE


def test_a_model_with_buffers_exchanges_one_forward_record_per_step_not_per_forward():
    """DDP broadcasts a BatchNorm's buffers in every forward; Birder's record before that broadcast runs once after
    construction, each step() and load_state_dict() (4 in 11 forwards of 4 steps with accumulation), not in every
    micro-batch's forward (an all-gather and a host sync each)."""
    outcome = launch.launch(faults.forward_records, (), 2, "gloo", 30, 120)
    assert not outcome.describe_failures(), outcome.describe_failures()
    for report in outcome.reports.values():
        assert report["result"] == {"forwards": 11, "forward_records": 4, "state_dict_records": 1, "t": 4}


def test_a_second_optimizer_on_birders_parameters_is_refused_naming_them(one_rank):
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = Birder(ddp, lr=0.01, seed=3)
    head = torch.optim.AdamW(model[-1].parameters(), lr=1e-3)
    elsewhere = torch.optim.AdamW(make_model(1).parameters(), lr=1e-3)  # another model's: no refusal
    x, y = batch(3, 1, 0)
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    elsewhere.step()
    before = model[-1].weight.detach().clone()
    with pytest.raises(ValueError, match=r"AdamW.step\(\): it holds 2 parameter\(s\) that Birder also updates "
                                         r"\(4.weight, 4.bias\).*LOCAL gradient"):
        head.step()
    assert torch.equal(model[-1].weight, before)  # refused before it moved anything


def test_a_newer_birder_on_a_new_ddp_wrapper_supersedes_a_live_one(one_rank):
    """Trial t8: Lightning's lr_find then fit (or a plain rebuild whose old Birder a scheduler keeps alive) wraps the
    same module in a new DDP and builds a new Birder; the old one's guard refused the new one's step, telling the
    user to give the parameters to Birder."""
    model = make_model(0)
    old = Birder(nn.parallel.DistributedDataParallel(model), lr=0.01, seed=3)
    keeps_it_alive = torch.optim.lr_scheduler.StepLR(old, step_size=10)
    ddp = nn.parallel.DistributedDataParallel(model)
    new = Birder(ddp, lr=0.01, seed=3)
    x, y = batch(3, 1, 0)
    nn.functional.mse_loss(ddp(x), y).backward()
    new.step()
    assert new.t == 1
    before = model[-1].weight.detach().clone()
    with pytest.raises(ValueError, match=r"Birder.step\(\): a newer Birder was built on 6 of its parameter\(s\) "
                                         r"\(0.weight, .*\), which supersedes this one"):
        old.step()
    assert torch.equal(model[-1].weight, before) and keeps_it_alive.last_epoch == 0
    with pytest.raises(ValueError, match=r"AdamW.step\(\): it holds 2 parameter\(s\) that Birder also updates"):
        torch.optim.AdamW(model[-1].parameters(), lr=1e-3).step()  # any other optimizer still refused


def test_a_padding_row_is_said_to_move_and_moves_by_lr(one_rank):
    """Trial t8: nn.Embedding(padding_idx=...)'s row, never given a gradient, moved by +-lr with no word (the sign
    of a zero gradient is a fair coin): Algorithm 1 as it is, now said when Birder is built."""
    model = nn.Sequential(nn.Embedding(6, 4, padding_idx=0), nn.Flatten(), nn.Linear(8, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    with pytest.warns(UserWarning, match=r"the padding rows of 0 \(padding_idx=0\) too.*jitters by \+-lr") as seen:
        opt = Birder(ddp, lr=0.01, seed=3)
    assert seen[0].filename == __file__  # it points at the user's line
    before = model[0].weight.detach().clone()
    nn.functional.mse_loss(ddp(torch.tensor([[0, 3], [0, 5]])), torch.ones(2, 1)).backward()
    assert not model[0].weight.grad[0].any()
    opt.step()
    assert torch.allclose((model[0].weight[0] - before[0]).abs(), torch.full((4,), 0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no padding_idx: no warning
        Birder(nn.parallel.DistributedDataParallel(nn.Sequential(nn.Embedding(6, 4), nn.Flatten())), lr=0.01)


def _expert(clip: float | None = None, scaler: bool = False, steps: int = 2):
    from gpu_validation.comm import make_topology
    from gpu_validation.hook import BirderState, BirderUpdate, birder_hook

    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    state = BirderState(model.parameters(), make_topology("hierarchical", 1, 1), seed=3)
    ddp.register_comm_hook(state, birder_hook)
    opt = BirderUpdate(model.parameters(), lr=0.01, hook_state=state)
    amp = torch.amp.GradScaler("cpu") if scaler else None
    for step in range(1, steps + 1):
        x, y = batch(3, step, 0)
        loss = nn.functional.mse_loss(ddp(x), y)
        (amp.scale(loss) if amp else loss).backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        if amp:
            amp.step(opt)
            amp.update()
        else:
            opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_the_expert_hook_path_refuses_clipping_and_grad_scaler_and_keeps_a_clip_that_does_not_bite(one_rank):
    for options in ({"clip": 1.0}, {"scaler": True}):
        with pytest.raises(RuntimeError, match=r"\.grad no longer holds the \+-1 u_bar that birder_hook wrote"):
            _expert(**options)
    assert torch.equal(_expert(clip=1e9), _expert())


def test_param_groups_follow_their_own_lr_and_weight_decay_exactly(one_rank):
    """Weights at lr 0.01 with decay 1e-3, biases (a group of their own) at lr 0.02 without decay: Algorithm 1
    and line 16 per group, bit for bit; a scheduler with one lambda per group; the groups survive a checkpoint."""
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model)
    biases = [p for name, p in model.named_parameters() if name.endswith("bias")]
    opt = Birder(ddp, lr=0.01, weight_decay=1e-3, seed=3, param_groups=[{"params": biases, "lr": 0.02,
                                                                          "weight_decay": 0.0}])
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, [lambda s: 0.5 ** s, lambda s: 1.0])
    x = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    ref = algorithm1.init(1, opt.dim)
    for step in range(1, 4):
        inputs, targets = batch(3, step, 0)
        nn.functional.mse_loss(ddp(inputs), targets).backward()
        grad = np.concatenate([p.grad.reshape(-1).numpy() for p in model.parameters()])
        rates = [(g["lr"], g["weight_decay"]) for g in opt.param_groups]
        opt.step()
        opt.zero_grad()
        schedule.step()
        u_bar, ref = algorithm1.step(ref, grad[None], 0.95, 1e-8, worker_uniforms(3, step, 1, opt.dim),
                                     server_uniforms(3, step, opt.dim))
        start = 0
        for name, p in model.named_parameters():
            lr, decay = rates[0] if name.endswith("bias") else rates[1]  # the given group first, then the rest
            part = slice(start, start + p.numel())
            x[part] = apply_update(x[part], u_bar[part], lr, decay)
            start += p.numel()
        np.testing.assert_array_equal(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy(), x)
    assert [g["lr"] for g in opt.param_groups] == [0.02 * 0.5 ** 3, 0.01]
    saved = opt.state_dict()
    fresh = Birder(nn.parallel.DistributedDataParallel(model), lr=0.5, seed=3,
                   param_groups=[{"params": biases}])
    fresh.load_state_dict(saved)
    assert [(g["lr"], g["weight_decay"]) for g in fresh.param_groups] == [(0.02 * 0.5 ** 3, 0.0), (0.01, 1e-3)]
    with pytest.raises(ValueError, match="1 group"):
        Birder(nn.parallel.DistributedDataParallel(make_model(0)), lr=0.01, seed=3).load_state_dict(saved)


@pytest.mark.parametrize("groups, message", [
    (lambda w: "weights", "param_groups must be a list of dicts"),
    (lambda w: [{"lr": 0.1}], "needs 'params'"),
    (lambda w: [{"params": [w], "momentum": 0.9}], "takes only 'lr' and 'weight_decay'"),
    (lambda w: [{"params": []}], "holds no parameters"),
    (lambda w: [{"params": [torch.zeros(2, requires_grad=True)]}], "not a trainable parameter of the DDP model"),
    (lambda w: [{"params": [w]}, {"params": [w]}], "'0.weight' is in two of param_groups"),
    (lambda w: [{"params": [w], "lr": -1.0}], r"param_groups\[0\]\['lr'\] must be > 0"),
])
def test_bad_param_groups_are_one_value_error(one_rank, groups, message):
    model = make_model(0)
    with pytest.raises(ValueError, match=message):
        Birder(nn.parallel.DistributedDataParallel(model), lr=0.01, param_groups=groups(model[0].weight))


def _scaled_steps(ddp, opt, scaler, steps: int, loss_factor: float, nan_input: bool, unscale_and_clip: bool):
    for step in range(1, steps + 1):
        x, y = batch(3, step, 0)
        if nan_input:
            x[0, 0] = float("nan")
        scaler.scale(nn.functional.mse_loss(ddp(x), y) * loss_factor).backward()
        if unscale_and_clip:  # the usual way to clip under a GradScaler
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()


@pytest.mark.parametrize("unscale_and_clip", [False, True])
def test_grad_scaler_back_offs_do_not_count_towards_the_skip_limit(one_rank, unscale_and_clip):
    """A loss of about 2**40 at a scale of 2**100 overflows float32 for many steps: the GradScaler backs off each
    time and training goes on past max_consecutive_skips=3. A gradient that is NaN whatever the scale (a NaN in
    the model's input) still raises, once the scale has fallen to 1: at scales 4 and 2 the skips are back-offs,
    at 1, 0.5, 0.25 they count. The same with scaler.unscale_ and clipping before scaler.step (then the scaler
    passes Birder no scale: Birder reads the calling scaler's)."""
    model, ddp, opt = _trained(0, max_consecutive_skips=3)
    _scaled_steps(ddp, opt, torch.amp.GradScaler("cpu", init_scale=2.0**100), 24, 2.0**40, False, unscale_and_clip)
    assert opt.skipped_steps >= 10 and opt.t == 24 - opt.skipped_steps > 0
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    with pytest.raises(RuntimeError, match="3 consecutive steps skipped.*GradScaler") as raised:
        _scaled_steps(ddp, opt, scaler, 9, 1.0, True, unscale_and_clip)
    assert scaler.get_scale() == 0.25 and "rank(s) [0]" in str(raised.value)


def test_back_offs_are_told_apart_when_grad_scaler_step_is_wrapped(one_rank, monkeypatch):
    """Were torch to wrap GradScaler.step in a decorator (its ``__code__`` is then the wrapper's, whose locals are
    args and kwargs), Birder still finds the calling scaler after unscale_: by the frame of a function named step
    whose ``self`` is a GradScaler. The back-offs at a scale of 2**100 do not count, and training goes past
    max_consecutive_skips=3 as without the wrapper."""
    torch_step = torch.amp.GradScaler.step

    def wrapper(*args, **kwargs):  # the shape of a functools.wraps decorator
        return torch_step(*args, **kwargs)

    monkeypatch.setattr(torch.amp.GradScaler, "step", functools.wraps(torch_step)(wrapper))
    model, ddp, opt = _trained(0, max_consecutive_skips=3)
    _scaled_steps(ddp, opt, torch.amp.GradScaler("cpu", init_scale=2.0**100), 24, 2.0**40, False, True)
    assert opt.skipped_steps >= 10 and opt.t == 24 - opt.skipped_steps > 0


def test_a_layer_frozen_after_build_then_unfrozen_is_refused_with_one_line(one_rank):
    """A layer frozen after 2 steps (DDP with find_unused_parameters) stays put in step 3, but Algorithm 1 moves
    its m, b and e on a zero gradient; unfrozen for step 4 it is refused on the spot, naming it, and nothing
    moves. Frozen and unfrozen between two steps (no update saw it frozen) is fine."""
    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    opt = Birder(ddp, lr=0.01, seed=3)

    def step(t: int) -> None:
        x, y = batch(3, t, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()

    step(1)
    model[0].requires_grad_(False)
    model[0].requires_grad_(True)
    step(2)
    model[0].requires_grad_(False)
    step(3)
    model[0].requires_grad_(True)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(RuntimeError, match=r"parameter\(s\) 0.weight, 0.bias were frozen after Birder was built "
                                           r"and have requires_grad=True again") as raised:
        step(4)
    assert "\n" not in str(raised.value) and opt.t == 3
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("save", ["state_dict", "sharded_state_dict"])
def test_the_record_of_a_layer_stepped_while_frozen_survives_a_checkpoint(one_rank, save):
    """t13: the refusal to unfreeze a layer an update found frozen went away across a checkpoint taken while it was
    frozen (the record was not saved); a state saved before the record was kept loads with none, as it did."""
    def run(model, ddp, opt, t):
        x, y = batch(3, t, 0)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()

    model = make_model(0)
    ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    opt = Birder(ddp, lr=0.01, seed=3)
    run(model, ddp, opt, 1)
    model[0].requires_grad_(False)
    run(model, ddp, opt, 2)
    saved = getattr(opt, save)()
    assert saved["state"]["stepped_while_frozen"] == [0, 1]
    for record in (True, False):
        fresh_model = make_model(0)
        fresh_ddp = nn.parallel.DistributedDataParallel(fresh_model, find_unused_parameters=True)
        fresh = Birder(fresh_ddp, lr=0.01, seed=3)
        state = copy.deepcopy(saved)
        if not record:
            del state["state"]["stepped_while_frozen"]
        fresh.load_state_dict(state)
        fresh_model.load_state_dict(model.state_dict())
        if record:
            with pytest.raises(RuntimeError, match=r"0.weight, 0.bias were frozen after Birder was built"):
                run(fresh_model, fresh_ddp, fresh, 3)
        else:
            run(fresh_model, fresh_ddp, fresh, 3)
            assert fresh.t == 3
