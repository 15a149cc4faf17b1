"""The GPU check (`make gpu-check`, gpu_check/) on a CPU machine, run as a user runs it: its dry run, and the CPU
forms of its parts, so that the check cannot rot before a GPU is at hand. The CUDA forms need a GPU
(docs/gpu_check.md); the CUDA-marked tests it runs there are the suite's own."""

import json
import os
import subprocess
import sys
from pathlib import Path

from gpu_check import plan

ROOT = Path(__file__).resolve().parents[1]


def _gpu_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpu_check", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_dry_run_lists_every_part_and_names_missing_wheels_in_one_line(tmp_path):
    out = tmp_path / "out"
    done = _gpu_check(str(out), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert all(f"{part.name} " in done.stdout for part in plan.PARTS)
    assert "everything the check needs is here" in done.stdout and not out.exists()  # a dry run writes nothing
    empty = tmp_path / "wheels"
    empty.mkdir()
    done = _gpu_check(str(out), "--dry-run", "--require-wheels", "--wheels", str(empty))
    error = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in error and "Traceback" not in error
    assert error.startswith("gpu-check: missing: wheel(s) simpy==") and "make gpu-wheels" in error


def test_cpu_forms_of_the_parts_run_and_write_json_and_markdown(tmp_path):
    """check_adapter and cuda_tests are left out here (a torch import each, ~7 s): the suite runs birder check on
    the adapter and the CUDA-marked files already; `make gpu-check` on a CPU machine runs all seven."""
    out = tmp_path / "out"
    done = _gpu_check(str(out), "--device", "cpu", "--parts", "validate", "bench", "step_time", "largest_model",
                      "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "gpu_check.json").read_text())
    parts = result["parts"]
    assert result["device"] == "cpu" and list(parts) == ["env", "validate", "bench", "step_time", "largest_model"]
    assert {name: r["status"] for name, r in parts.items()} == dict.fromkeys(parts, "ok")
    assert parts["env"]["cuda_available"] is False and parts["env"]["packages"]["simpy"]["version"]
    run = parts["validate"]["runs"]["gloo_cpu_1x2"]
    assert run["passed"] and run["mismatched_elements"] == 0 and run["ranks"] == 2
    assert parts["bench"]["kernels"][0]["elements"] == 2**16 and Path(parts["bench"]["plot"]).is_file()
    assert parts["step_time"]["rows"][0]["birder_ms_per_step"] > 0
    for optimizer in ("adamw", "birder"):  # the search ran up to its cap: 4 layers of 64 x 64 + 64
        assert parts["largest_model"][optimizer]["largest_layers"] == 4 and parts["largest_model"][optimizer][
            "bounded_by_cap"]
    summary = (out / "gpu_check.md").read_text()
    assert all(f"| {name} | ok |" in summary for name in parts)
    assert not list((out / "parts").glob("*.partial.json"))  # finished parts keep only their result


def test_a_largest_model_trial_in_a_fresh_process_reports_its_own_step():
    """On CUDA each largest_model trial runs in a process of its own (so that its peak is its own); here, on CPU,
    that path trains one step of a one-layer model on its own gloo rank and returns the trial's dict, its process's
    start counted in ``wall_s`` apart from the step's ``seconds``."""
    import torch

    from gpu_check.parts import _trial_in_fresh_process

    trial = _trial_in_fresh_process("birder", 1, 64, torch.device("cpu"), 120)
    assert trial["fit"] and trial["layers"] == 1 and trial["parameters"] == 64 * 64 + 64
    assert trial["peak_bytes"] is None and trial["wall_s"] >= trial["seconds"] > 0


def test_the_largest_model_search_brackets_the_true_size_from_its_prediction():
    """The search around a prediction (pure: a fit predicate stands for the trials): from too high it steps down by
    1, 2, 4 ... then bisects; from too low it steps up; an exact bracket where the trials allow, never above the
    cap, and it stops where a trial says there is no time."""
    from gpu_check.parts import search_layers

    def trials_of(largest):
        tried = []

        def attempt(layers):
            tried.append(layers)
            return layers <= largest
        return tried, attempt

    for largest, predicted, want in ((92, 92, (92, 93)), (90, 92, (90, 91)), (86, 92, (86, 87)), (68, 66, (68, 69))):
        tried, attempt = trials_of(largest)
        assert search_layers(attempt, predicted, 559, 2, 7) == want, (largest, predicted, tried)
        assert len(tried) <= 7 and max(tried) <= 559
    tried, attempt = trials_of(1000)
    assert search_layers(attempt, 557, 559, 2, 5) == (559, None) and tried == [557, 558, 559]
    assert search_layers(lambda layers: None, 92, 559, 2, 5) == (2, None)


def test_the_readmes_gpu_figures_are_those_of_the_recorded_runs():
    """The README's CUDA figures are rendered from the runs recorded in gpu_check/runs (what came back from the
    GPU machine, unedited), not typed."""
    from gpu_check.summary import RUNS, readme_paragraph

    runs = ROOT / RUNS
    result = json.loads((runs / "2026-11-28-h200-2-gpu-pieces.json").read_text())
    largest = json.loads((runs / "2026-11-28-h200-3-largest-model-fresh-processes.json").read_text())
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- gpu:", 1)[1].split("-->", 1)[1].split("<!-- end gpu -->", 1)[0].strip()
    assert block == readme_paragraph(result, largest)
    assert all(trial.get("wall_s") for trial in largest["birder"]["trials"])  # each trial had a process of its own
