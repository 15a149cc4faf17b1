"""The digits comparison: the MLP's backward pass, and the quick report section as a user gets it."""

import numpy as np
import pytest

from birder import comparison


def test_backpropagation_matches_central_differences():
    data = comparison.load()
    w = comparison.initial_parameters() + np.float32(0.05)
    x, y = data.x_train[:20], data.y_train[:20]
    g = comparison.gradient(w, x, y)
    rng = np.random.default_rng(0)
    for j in rng.choice(w.size, 25, replace=False):
        step = np.zeros_like(w, dtype=np.float64)
        step[j] = 1e-3
        wide = w.astype(np.float64)
        numeric = (comparison.loss(wide + step, x, y) - comparison.loss(wide - step, x, y)) / 2e-3
        assert abs(g[j] - numeric) <= 1e-3 * max(1.0, abs(numeric))


def test_shards_partition_the_training_set_and_the_test_set_is_held_out():
    data = comparison.load()
    joined = np.sort(np.concatenate(data.shards))
    assert np.array_equal(joined, np.arange(len(data.y_train)))
    assert len(data.y_test) == 360 and len(data.y_train) == 1437


def test_quick_section_trains_every_optimizer_and_reports_it(quick_report):
    """comparison.section as ``birder report --quick`` writes it (conftest's ``quick_report``)."""
    markdown = quick_report.section("Baselines on a real task")
    png = quick_report.folder / "baselines_digits_loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in comparison.learning_rates():
        assert f"| {name} |" in markdown
    assert "Birder's test accuracy is" in markdown


def test_quick_results_learn_and_one_bit_optimizers_send_less():
    results = {r.name: r for r in comparison.run(quick=True)}
    for r in results.values():
        assert np.isfinite(r.final_loss) and r.final_loss < 0.7 * r.losses[0], r.name
        assert r.test_accuracy > 0.5, r.name
    adam_inter = results["adam"].bytes_per_gpu[1]
    for name in ("birder", "onebit-adam", "zero-one-adam", "marsit"):
        assert results[name].bytes_per_gpu[1] < adam_inter / 3, name


def test_seed_command_rejects_zero_seeds():
    with pytest.raises(SystemExit) as exit_info:
        comparison.main(["--seeds", "0"])
    assert exit_info.value.code == 2
