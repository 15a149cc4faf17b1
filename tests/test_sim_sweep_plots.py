"""`birder sweep`'s plots: linear scaling drawn as the naive baseline, and a legend that stays inside the figure."""

import csv
import math

import numpy as np
from matplotlib.image import imread

from sim import plots


def sweep_results() -> list[dict]:
    """Four optimizers x four node counts x three networks (the shape of the trial's bert-large sweep): one node
    gives 400 samples/s; scale_efficiency is throughput over nodes x that."""
    rows = []
    for net, efficiency in (("25gbe", 0.4), ("100gbe", 0.7), ("ib-ndr", 0.97)):
        for opt in ("sgdm", "adam", "onebit-adam", "birder"):
            for nodes in (8, 16, 32, 64):
                throughput = 400 * nodes * efficiency
                rows.append({"network": net, "optimizer": opt, "nodes": nodes, "gpus": 8 * nodes, "model": "m",
                             "batch_per_gpu": 32, "throughput": throughput, "throughput_low": 0.8 * throughput,
                             "throughput_high": 1.2 * throughput, "scale_efficiency": efficiency, "iteration_s": 1.0,
                             "compute_s": efficiency, "compression_s": 0.01, "contention_s": 0.0,
                             "exposed_communication_s": 0.99 - efficiency})
    return rows


def test_throughput_plot_draws_linear_scaling_of_one_node(tmp_path, monkeypatch):
    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: (drawn.append(fig), save(fig, path))[1])
    plots.throughput_vs_gpus(sweep_results(), tmp_path)
    for ax in drawn[0].axes:
        if not ax.get_visible():
            continue
        line = next(line for line in ax.get_lines() if line.get_label() == "linear scaling of one node")
        assert list(line.get_xdata()) == [64, 128, 256, 512]
        assert list(line.get_ydata()) == [3200, 6400, 12800, 25600]  # nodes x 400 samples/s


def test_the_time_breakdown_legend_stays_inside_the_figure(tmp_path):
    """Seven legend entries (three components, four optimizers) on a two-panel-wide figure: a tenth of an inch
    (11 pixels at the plots' 110 dpi) of blank margin at either side, so no entry touches the edge (in one row
    they came within 6 pixels of it)."""
    path = plots.time_breakdown(sweep_results(), tmp_path)[0]
    inked = np.where((imread(path)[..., :3] < 0.95).any(axis=(0, 2)))[0]
    width = imread(path).shape[1]
    assert inked.min() >= 11 and width - 1 - inked.max() >= 11


def test_legend_columns_fit_the_width():
    labels = ["compute", "compression/decompression", "exposed communication", "sgdm", "adam", "onebit-adam", "birder"]
    assert plots.legend_columns(labels, 30.0) == 7
    assert plots.legend_columns(labels, 10.0) == 4  # two rows, filled evenly
    assert plots.legend_columns(labels, 2.0) == 1


def _figures_drawn(monkeypatch) -> list:
    """The figures ``plots`` saves from now on (its ``_save`` observed, then run as it is)."""
    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: (drawn.append(fig), save(fig, path))[1])
    return drawn


def test_every_text_of_the_sweep_and_report_plots_stays_inside_the_figure(tmp_path, monkeypatch):
    """Titles, tick labels and legends measured by matplotlib's renderer against the figure's box, for one network
    (the trial's `sweep --cluster`, whose title and legend were cut), three, and the speed-up panels."""
    drawn = _figures_drawn(monkeypatch)
    one = [r for r in sweep_results() if r["network"] == "25gbe"]
    long_title = "BERT-large, 32 samples per GPU, calibrated on a published single-node throughput: predicted " \
                 "throughput (bands: prediction interval)"
    plots.throughput_vs_gpus(one, tmp_path, prefix="one_", title=long_title)
    plots.time_breakdown(one, tmp_path, prefix="one_", title=long_title)
    plots.throughput_vs_gpus(sweep_results(), tmp_path)
    plots.time_breakdown(sweep_results(), tmp_path)
    curves = {"BERT-large, 32/GPU": [{"network": r["network"], "nodes": r["nodes"], "ratio": 1.1, "low": 0.9,
                                      "high": 1.3} for r in sweep_results() if r["optimizer"] == "birder"]}
    plots.speedup_vs_nodes(curves, tmp_path / "speedup.png", long_title, "best of SGDM/Adam")
    assert len(drawn) == 5
    for fig in drawn:
        assert plots.texts_outside(fig) == [], fig.texts[0].get_text() if fig.texts else fig


def test_sweeps_time_columns_and_breakdown_bars_add_up_to_the_iteration(tmp_path, monkeypatch):
    """sweep.csv's parts of an iteration (contention included) sum to iteration_s, and each stacked bar of the time
    breakdown reaches 1: a 2-node resnet50 on 100gbe spends 7% of its step on GPU work slowed beside collectives,
    which the CSV and the bars had left out (they stopped at 0.93)."""
    from birder.cli import main

    drawn = _figures_drawn(monkeypatch)
    assert main(["sweep", "--model", "resnet50", "--nodes", "2", "--networks", "100gbe", "--optimizers", "sgdm",
                 "--out", str(tmp_path), "--quiet"]) == 0
    row = next(csv.DictReader((tmp_path / "sweep.csv").open()))
    parts = ("compute_s", "compression_s", "contention_s", "exposed_communication_s")
    assert float(row["contention_s"]) > 0.02 * float(row["iteration_s"])
    assert math.isclose(sum(float(row[k]) for k in parts), float(row["iteration_s"]), rel_tol=1e-6)
    breakdown = next(f for f in drawn if "time goes" in f._suptitle.get_text())
    tops = [patch.get_y() + patch.get_height() for patch in breakdown.axes[0].patches]
    assert math.isclose(max(tops), 1.0, rel_tol=1e-9)
