"""The training example in examples/ runs as a user runs it (a tiny version: 2 ranks, 3 steps per method)."""

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits_ddp.py"


def test_digits_example_trains_birder_and_adamw_and_plots(tmp_path):
    out = tmp_path / "digits.png"
    done = subprocess.run([sys.executable, str(EXAMPLE), "--ranks", "2", "--epochs", "1", "--max-steps", "3",
                           "--methods", "birder", "adamw", "--out", str(out)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.with_suffix(".json").read_text())
    assert [r["method"] for r in figures["results"]] == ["birder", "adamw"]
    for r in figures["results"]:
        assert r["steps"] == 3 and r["median_step_ms"] > 0
        assert 0.0 <= r["history"][-1]["test_accuracy"] <= 1.0 and r["history"][-1]["train_loss"] > 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


STUDY = EXAMPLE.with_name("convergence_study.py")


def _study_module():
    import importlib.util

    if "convergence_study" not in sys.modules:  # its dataclasses look their module up there
        spec = importlib.util.spec_from_file_location("convergence_study", STUDY)
        module = importlib.util.module_from_spec(spec)
        sys.modules["convergence_study"] = module
        spec.loader.exec_module(module)
    return sys.modules["convergence_study"]


def test_convergence_study_smoke_runs_every_method_on_both_tasks(tmp_path):
    """The study script end to end at its smoke budget (3 steps a run): every phase, method and task recorded,
    the ranks identical, the table and the plot made. Nothing is concluded from these figures."""
    out = tmp_path / "study.png"
    done = subprocess.run([sys.executable, str(STUDY), "--smoke", "--out", str(out)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.with_suffix(".json").read_text())
    study = _study_module()
    runs = {(r["phase"], r["task"], r["method"]) for r in result["records"]}
    assert runs == {(phase, task, method) for phase in ("sweep", "final") for task in study.TASKS
                    for method in study.METHODS} | {("ablation", task, "birder") for task in study.TASKS}
    assert all(r["ranks_identical"] and r["failure"] is None and r["steps"] == 3 for r in result["records"])
    assert result["tasks"]["lm"]["source"].startswith("scikit-learn") and result["tasks"]["lm"]["bytes"]["test"] > 0
    assert "| byte LM, 3 steps | gpu_validation.Birder (2 x 1) |" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lr_schedules_warm_up_then_hold_or_decay_to_zero():
    study = _study_module()
    factors = [study.lr_factor("cosine", s, 100, 5) for s in range(100)]
    assert factors[:5] == [0.2, 0.4, 0.6, 0.8, 1.0] and factors[5] == 1.0
    assert all(a >= b for a, b in zip(factors[4:], factors[5:], strict=False)) and factors[-1] < 1e-3
    assert {study.lr_factor("constant", s, 100, 5) for s in range(4, 100)} == {1.0}
    assert study.lr_factor("cosine", 0, 100, 0) == 1.0

