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
