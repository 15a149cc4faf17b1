"""`birder gpu-validate` over gloo on CPU: ranks spawned locally, every step compared with birder_ref exactly."""

import functools
import json
import subprocess
import sys

import pytest

from birder.cli import main
from gpu_validation.cli import describe
from gpu_validation.validate import KILLED_EXIT_STATUS, Config, run

CONTRACT_KEYS = ["passed", "steps", "mismatched_elements", "max_abs_diff", "ranks_identical", "backend", "device"]

_STALL_TIMEOUT = 10.0  # long enough for the healthy collectives of a loaded 2-core CI machine
# The stalled run sleeps through the survivor's timeout and the launcher's wait (~30 s, ~3 s of CPU): it runs in
# the background (conftest's ``background``) while this module's other tests run.
BACKGROUND = {"stalled_rank": functools.partial(
    run, Config(nodes=1, gpus_per_node=2, steps=4, hang_at=(2, 0), timeout_s=_STALL_TIMEOUT))}


def test_2x2_is_bit_exact_skips_a_nonfinite_step_everywhere_and_resumes_bit_identically():
    """Both code paths: gpu_validation.Birder as users adopt it, then the expert hook, each against birder_ref."""
    result = run(Config(nodes=2, gpus_per_node=2, steps=5, seed=1, resume_at=2, nonfinite_at=(3, 1)))
    assert list(result.as_dict())[:len(CONTRACT_KEYS)] == CONTRACT_KEYS
    assert result.passed, result
    assert result.checked == ("optimizer", "hook") and result.as_dict()["checked"] == ["optimizer", "hook"]
    for path, found in result.paths.items():  # each path on its own: exact, skipped the NaN step, resumed
        assert found["passed"] and found["mismatched_elements"] == 0 and found["skipped_steps"] == 1, path
        assert found["resume_identical"] is True and found["phases_as_scheduled"], path
    assert result.paths["hook"]["compared_updates"] and not result.paths["optimizer"]["compared_updates"]
    assert result.reference_updates_agree
    assert result.paths["optimizer"]["update_digests"] == list(result.update_digests)
    assert result.mismatched_elements == 0 and result.max_abs_diff == 0.0 and result.ranks_identical
    assert result.skipped_steps == 1 and result.state_mismatched_elements == 0
    assert result.resume_identical is True
    assert result.buckets >= 2, "the run must cross DDP's bucket rebuild"
    assert result.executor_identical, "birder_ref's executor must agree too"
    assert result.phases_as_scheduled, "every rank must run the schedule's collectives, groups and bytes"
    assert len(result.update_digests) == 4
    assert result.config["resume_at"] == 2 and result.seconds > 0


def test_a_node_sum_that_overflows_is_skipped_everywhere_like_a_nan():
    """3e38 on both GPUs of node 1 is finite, their sum is not: birder_ref rejects those node means, so the
    hook must skip the step on every rank (it flags a non-finite m, not only a non-finite gradient)."""
    result = run(Config(nodes=2, gpus_per_node=2, steps=3, seed=2, overflow_at=(2, 1)))
    assert result.passed is True and result.mismatched_elements == 0, result
    assert result.skipped_steps == 1


def test_the_optimizer_path_catches_a_changed_update(monkeypatch, tmp_path):
    """Negative control, in this process (one rank): a Birder whose step() moves one parameter element by one
    ulp more than Algorithm 1 says must fail the comparison; the unchanged Birder passes it."""
    import torch
    import torch.distributed as dist

    from gpu_validation import validate
    from gpu_validation.optimizer import Birder

    class OneUlpOff(Birder):
        def step(self, closure=None):
            loss = super().step(closure)
            with torch.no_grad():
                first = self.param_groups[0]["params"][0].view(-1)
                first[0] = torch.nextafter(first[0], torch.tensor(float("inf")))
            return loss

    cfg = Config(nodes=1, gpus_per_node=1, steps=3, paths=("optimizer",), quiet=True)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        honest = validate.train_and_compare(cfg, 0)
        monkeypatch.setattr(validate, "Birder", OneUlpOff)
        changed = validate.train_and_compare(cfg, 0)
    finally:
        dist.destroy_process_group()
    assert honest.passed and honest.mismatched_elements == 0 and honest.checked == ("optimizer",)
    assert not changed.passed and changed.mismatched_elements >= 1 and 0 < changed.max_abs_diff < 1e-6


def test_paths_must_be_known_and_distinct():
    with pytest.raises(ValueError, match="paths must be"):
        Config(paths=("optimizer", "optimizer")).check()
    with pytest.raises(ValueError, match="paths must be"):
        Config(paths=()).check()
    from gpu_validation.cli import PATHS as CLI_PATHS
    from gpu_validation.validate import PATHS

    assert CLI_PATHS == PATHS


def test_local_runs_refuse_missing_gpus_and_absurd_rank_counts():
    with pytest.raises(ValueError, match="nccl needs one CUDA GPU per rank"):
        Config(backend="nccl", nodes=64, gpus_per_node=8).check_local()
    with pytest.raises(ValueError, match="local gloo ranks"):
        Config(nodes=512, gpus_per_node=8).check_local()
    with pytest.raises(ValueError, match="nccl moves CUDA tensors only"):
        Config(backend="nccl", device="cpu").check()
    if not _gpus():
        with pytest.raises(ValueError, match="gloo on device cuda asked for, but torch sees no CUDA device"):
            Config(device="cuda").check_local()


def test_3x2_command_line_is_bit_exact():
    """The CI command, as a user runs it."""
    out = subprocess.run([sys.executable, "-m", "birder.cli", "gpu-validate", "--backend", "gloo", "--nodes", "3",
                          "--gpus-per-node", "2", "--steps", "4", "--json"], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert list(result)[:len(CONTRACT_KEYS)] == CONTRACT_KEYS and result["checked"] == ["optimizer", "hook"]
    assert result["passed"] and result["mismatched_elements"] == 0 and result["ranks_identical"]
    assert (result["backend"], result["device"], result["steps"]) == ("gloo", "cpu", 4)


def test_three_gpus_per_node_give_the_reference_node_means():
    """With three GPUs per node the float32 node sum depends on its order; the state shows any difference, and
    birder_ref's executor, moving the data along the same schedule, sums in the same order."""
    result = run(Config(nodes=1, gpus_per_node=3, steps=3))
    assert result.passed and result.mismatched_elements == 0 and result.state_mismatched_elements == 0
    assert result.executor_identical and result.phases_as_scheduled


def test_flat_scheme_is_bit_exact():
    result = run(Config(nodes=1, gpus_per_node=2, steps=3, scheme="flat"))
    assert result.passed and result.mismatched_elements == 0, result


def test_a_dead_rank_stops_the_others_with_an_error_within_the_timeout():
    timeout = 15.0
    result = run(Config(nodes=2, gpus_per_node=1, steps=4, kill_at=(2, 1), timeout_s=timeout))
    assert result.passed is True and result.fault_handled is True  # the fault was handled as designed
    assert "PASSED" in describe(result) and "FAILED" not in describe(result)
    assert result.exit_codes == {"0": 1, "1": KILLED_EXIT_STATUS}
    assert "rank 1 died" in result.error
    assert "stopped at step 2" in result.rank_errors["0"]  # the survivor stopped itself, naming the step
    assert result.seconds_to_stop_after_failure < timeout
    as_json = result.as_dict()  # the contract's keys, null where nothing was compared, then the fault's
    assert list(as_json)[:len(CONTRACT_KEYS)] == CONTRACT_KEYS and as_json["mismatched_elements"] is None
    assert as_json["fault_handled"] is True and list(as_json)[-2:] == ["seconds", "config"]


def test_a_stalled_rank_makes_the_others_time_out_with_an_error(background):
    timeout = _STALL_TIMEOUT
    result = background["stalled_rank"].result()
    assert result.passed is True and result.fault_handled and result.killed_by_launcher == (0,)
    assert "rank 0 hung" in result.error and "stopped at step 2" in result.rank_errors["1"]
    assert f"Timed out waiting {timeout * 1000:.0f}ms" in result.rank_errors["1"]  # gloo's words, our timeout
    # the survivor's timeout, the launcher's wait for the hung rank (one timeout + 5 s), start-up and scheduling:
    # well short of the run's backstop (120 s + a timeout per step), so survivors that hung would fail here
    assert result.seconds < 2 * timeout + 40


@pytest.mark.parametrize("argv", [
    ["gpu-validate", "--nodes", "0"],
    ["gpu-validate", "--steps", "3", "--resume-at", "3"],
    ["gpu-validate", "--kill-at", "two"],
    ["gpu-validate", "--backend", "mpi"],
    ["gpu-validate", "--paths", "update"],
])
def test_bad_arguments_are_one_line_and_exit_2(argv, capsys):
    try:
        status = main(argv)
    except SystemExit as exit_info:  # argparse's own errors
        status = exit_info.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.cuda
@pytest.mark.skipif(_gpus() < 1, reason="needs a CUDA GPU")
def test_nccl_on_one_gpu_is_bit_exact():
    result = run(Config(backend="nccl", nodes=1, gpus_per_node=1, steps=4, resume_at=2, nonfinite_at=(3, 0)))
    assert result.passed and result.device != "cpu", result


@pytest.mark.cuda
@pytest.mark.skipif(_gpus() < 1, reason="needs a CUDA GPU")
def test_gloo_with_cuda_tensors_2x3_on_one_gpu_is_bit_exact():
    """Six ranks share one GPU over gloo (NCCL refuses two ranks on one GPU); G = 3 divides the node sums by 3,
    which a reciprocal multiply on CUDA would get wrong in the last bit."""
    result = run(Config(backend="gloo", device="cuda", nodes=2, gpus_per_node=3, steps=4, resume_at=2,
                        nonfinite_at=(3, 4)))
    assert result.passed and result.mismatched_elements == 0 and result.device != "cpu", result


@pytest.mark.cuda
@pytest.mark.skipif(_gpus() < 4, reason="needs 4 CUDA GPUs")
def test_nccl_2x2_is_bit_exact():
    result = run(Config(backend="nccl", nodes=2, gpus_per_node=2, steps=5, resume_at=2, nonfinite_at=(3, 1)))
    assert result.passed and result.mismatched_elements == 0, result
