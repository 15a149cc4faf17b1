"""`birder report`: the answer first, generated from the predictions it cites; networks in order of speed; the
report directory swapped whole; no torch in the report's process."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from birder import report, report_decision, report_grid, report_prices, report_words
from birder.report_core import num
from birder.report_grid import ModelGrid, Setting, decide
from birder.report_words import decision_sentence, stops_paying_sentence
from sim import api, plots
from sim.network import NETWORKS

ROOT = Path(__file__).resolve().parents[1]


def prediction(network, optimizer, nodes, throughput, comm=0.5):
    return {"network": network, "optimizer": optimizer, "nodes": nodes, "gpus": 8 * nodes, "model": "m",
            "batch_per_gpu": 32, "throughput": throughput, "throughput_low": 0.8 * throughput,
            "throughput_high": 1.2 * throughput, "iteration_s": 1.0, "compute_s": 1 - comm, "compression_s": 0.0,
            "exposed_communication_s": comm, "inter_node_bytes_per_gpu": 1e6 if optimizer == "birder" else 32e6,
            "measured_node": False, "interval_regime": "communication-bound"}


def toy_grid(birder_on_10gbe: float, birder_elsewhere: float = 1.0) -> ModelGrid:
    networks = ("10gbe", "25gbe", "100gbe")
    sgdm = {"10gbe": 1000.0, "25gbe": 2000.0, "100gbe": 4000.0}
    birder = {"10gbe": birder_on_10gbe, "25gbe": 3850.0 * birder_elsewhere, "100gbe": 3700.0 * birder_elsewhere}
    preds = [prediction(n, "sgdm", k, sgdm[n] * k / 16) for n in networks for k in (2, 16)]
    preds += [prediction(n, "birder", k, birder[n] * k / 16) for n in networks for k in (2, 16)]
    return ModelGrid(Setting("m", "M", 32, "built-in"), "built-in", ("sgdm", "birder"), networks, (1, 2, 16),
                     tuple(preds))


def test_the_decision_is_computed_from_the_predictions_and_moves_with_them():
    sentence = decision_sentence(toy_grid(3900.0), decide(toy_grid(3900.0), 16))
    # sgdm on the fastest network is the reference; Birder reaches 95% of it on the cheapest network
    assert "without Birder buy 100gbe (sgdm 4,000/s (3,200 to 4,800), 100% of the fastest)" in sentence
    assert "with Birder 10gbe is enough (birder 3,900/s (3,120 to 4,680), 98%)" in sentence
    assert "the fastest uncompressed set-up is sgdm on 100gbe, 4,000/s (3,200 to 4,800)" in sentence
    # less Birder throughput on 10gbe: the cheapest network that is enough becomes 25gbe
    moved = decision_sentence(toy_grid(3000.0), decide(toy_grid(3000.0), 16))
    assert "with Birder 25gbe is enough (birder 3,850/s (3,080 to 4,620), 96%)" in moved
    # Birder nowhere near: the sentence says to buy the fastest network either way
    slow = toy_grid(100.0, birder_elsewhere=0.1)
    never = decide(slow, 16)
    assert never.with_birder is None and never.without["network"] == "100gbe"
    assert decision_sentence(slow, never).startswith(
        "**16 nodes (128 GPUs):** buy 100gbe with or without Birder: sgdm there 4,000/s (3,200 to 4,800), 100% of "
        "the fastest")


def test_where_one_bit_stops_paying_is_read_off_the_grid():
    text = stops_paying_sentence(toy_grid(3900.0))
    assert "on 10gbe at every count (2-16 nodes)" in text and "on 25gbe at every count" in text
    assert "never on 100gbe" in text
    # Birder at 3,700/s against SGDM's 4,000/s on 100gbe: 0.93x, closer to 1 than the speed-ups' paired bounds
    # (wider than 8% either way in every regime): within the uncertainty, and the sentence says so
    assert report_grid.tied_counts(toy_grid(3900.0), "100gbe") == [2, 16]
    assert "never on 100gbe (per-message costs; within the uncertainty at 2-16)" in text
    # Birder behind at 2 nodes on 25gbe only: the counts where it does not pay are named, with the reason
    partial = stops_paying_sentence(toy_grid(3900.0, birder_elsewhere=0.9))
    assert "on 25gbe at 16 nodes (not at 2: " in partial or "never on 25gbe" not in partial


def test_networks_are_ordered_by_line_rate_not_by_name():
    assert plots.speed_order(["100gbe", "10gbe", "25gbe", "my-cluster"]) == ["10gbe", "25gbe", "100gbe", "my-cluster"]
    rates = [NETWORKS[n]["line_rate_gbps"] * NETWORKS[n].get("count", 1) for n in report_grid.buying_networks()]
    assert rates == sorted(rates) and len(rates) >= 3


def test_num_keeps_three_significant_figures():
    assert [num(x) for x in (61234, 4.567, 0.01234, 190764)] == ["61,200", "4.57", "0.0123", "191,000"]


def test_the_first_screen_cites_the_simulators_predictions(tmp_path):
    section = report_decision.decision_section(tmp_path, quick=True)
    first_screen = "\n".join(section.markdown.splitlines()[:40])
    grid = report_grid.grid(quick=True)
    resnet = grid.models[0]
    assert resnet.setting.model == "resnet50" and resnet.title in first_screen
    networks = first_screen.split("to the fastest: ")[1].split(".")[0].split(", ")
    assert networks == list(grid.networks)
    for nodes in (16, 64):
        d = decide(resnet, nodes)
        assert decision_sentence(resnet, d) in first_screen
        # the reference throughput, predicted again through sim.api with the paper's single-node figure
        published = next(r["published"] for r in grid.summary["rows"] if r["gpus"] == 8
                         and r["optimizer"] == d.reference["optimizer"])
        again = api.predict_config("resnet50", nodes, grid.networks[-1], d.reference["optimizer"], batch_per_gpu=32,
                                   single_node_throughput=published)
        assert f"{num(again['throughput'])}/s ({num(again['throughput_low'])} to {num(again['throughput_high'])})" \
            in first_screen
    assert "fit (in-sample)" in section.markdown and "prediction (cross-validated)" in section.markdown
    assert set(section.summary) == {"prediction error", "headline"}


def _earlier_report(out):
    """A report directory as an earlier run leaves it: report.md (holding "old") and the manifest of what it
    wrote."""
    report.write_report(out, sections=(lambda outdir, quick: "old",))
    assert "old" in (out / "report.md").read_text()
    return sorted(os.listdir(out))


def test_a_failing_section_leaves_the_old_report_and_no_stray_files(tmp_path):
    out = tmp_path / "report"
    before = _earlier_report(out)

    def fine(outdir, quick):
        (outdir / "new.png").write_bytes(b"png")
        return "fine"

    def boom(outdir, quick):
        raise ValueError("a section failed")

    with pytest.raises(ValueError, match="a section failed"):
        report.write_report(out, quick=True, sections=(fine, boom))
    assert "old" in (out / "report.md").read_text() and sorted(os.listdir(tmp_path)) == ["report"]
    assert sorted(os.listdir(out)) == before == [".birder-manifest", "report.md"]
    written = report.write_report(out, quick=True, sections=(fine,))
    assert written.path.read_text().startswith("# Birder toolkit report") and (out / "new.png").exists()
    assert "| section | seconds |" in written.path.read_text()


def test_a_directory_that_is_not_a_report_is_never_replaced(tmp_path):
    (tmp_path / "precious.txt").write_text("mine")
    with pytest.raises(ValueError, match="no earlier run wrote"):
        report.write_report(tmp_path, quick=True, sections=())
    assert (tmp_path / "precious.txt").read_text() == "mine"
    out = tmp_path / "report"
    _earlier_report(out)
    (out / "report.md").write_text("the user's own notes, kept in the report folder")
    (out / "thesis.tex").write_text("mine")
    with pytest.raises(ValueError, match="thesis.tex"):
        report.write_report(out, quick=True, sections=())
    assert (out / "thesis.tex").read_text() == "mine"


def test_an_interrupted_report_run_leaves_the_old_report_whole(tmp_path):
    out = tmp_path / "report"
    before = _earlier_report(out)
    proc = subprocess.Popen([sys.executable, "-m", "birder.cli", "report", "--quick", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not any(
            p.name.startswith(".report.") and p.is_dir() for p in tmp_path.iterdir()):
        time.sleep(0.05)
    time.sleep(0.5)  # inside the first section
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert sorted(os.listdir(tmp_path)) == ["report"] and sorted(os.listdir(out)) == before
    assert "old" in (out / "report.md").read_text()


def test_the_report_process_never_imports_torch_and_ends_with_a_summary(quick_report):
    """The whole ``report --quick`` in a fresh process (conftest's ``quick_report``, which the sections' own tests
    read too)."""
    result = quick_report.done
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "no torch"
    assert [line.split(":")[0] for line in lines[-4:-1]] == ["checks", "prediction error", "headline"]
    assert re.fullmatch(r"checks: \d+ checks pass, 0 fail, 0 not judged, \d+ not applicable on "
                        r"birder_ref\.algorithm1 \(all hold\)", lines[-4]), lines[-4]
    assert "fit" in lines[-3] and "cross-validated" in lines[-3]
    assert result.stderr == ""  # no progress bars when stderr is not a terminal
    text = (quick_report.folder / "report.md").read_text()
    assert text.index("The answer first") < text.index("The paper's claims as checks")
    assert "about 1e-10" not in text and "| NO |" not in text
    for line in text.splitlines():
        if line.startswith("![") and "](" in line:
            assert (quick_report.folder / line.split("](")[1].rstrip(")")).stat().st_size > 10_000, line


def test_sections_follow_the_reports_progress_choice(tmp_path):
    seen = []

    def records(outdir, quick):
        seen.append(report.show_progress())
        return ""

    report.write_report(tmp_path / "a", sections=(records,), progress=False)
    report.write_report(tmp_path / "b", sections=(records,), progress=True)
    assert seen == [False, True]


def test_a_symlinked_out_is_followed_and_a_killed_runs_leftovers_are_cleaned(tmp_path):
    real = tmp_path / "real"
    _earlier_report(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    dead_pid = 2**30  # beyond any pid_max: no such process
    (tmp_path / f".real.{dead_pid}.abcd1234.tmp").mkdir()  # what SIGKILL during a run leaves
    report.write_report(link, sections=(lambda outdir, quick: "new",))
    assert link.is_symlink() and link.resolve() == real
    assert "new" in (real / "report.md").read_text()
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_the_report_leaves_no_hypothesis_folder_in_the_working_directory(tmp_path, monkeypatch):
    """Hypothesis's folder goes to a temporary directory, removed after the report (its default is the working
    directory at import time)."""
    monkeypatch.chdir(tmp_path)
    used = []

    def hunts(outdir, quick):
        from hypothesis import configuration

        storage = configuration.storage_directory("constants")
        storage.create_if_missing()  # what a Hypothesis run does
        used.append(storage.home_directory)
        return ""

    report.write_report(tmp_path / "r", sections=(hunts,))
    assert sorted(os.listdir(tmp_path)) == ["r"]
    assert used[0].name.startswith("birder-report-hypothesis-") and not used[0].exists()


def test_a_report_from_before_manifests_is_replaced_but_not_with_a_users_file_in_it(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text("# Birder toolkit report\n\n![a plot](figure8.png)\n")
    (out / "figure8.png").write_bytes(b"png")
    report.write_report(out, sections=(lambda outdir, quick: "new",))
    assert sorted(os.listdir(out)) == [".birder-manifest", "report.md"]
    (out / ".birder-manifest").unlink()
    (out / "report.md").write_text("# Birder toolkit report\n")
    (out / "thesis.png").write_bytes(b"mine, and the report does not show it")
    with pytest.raises(ValueError, match="no earlier run wrote"):
        report.write_report(out, sections=())
    assert (out / "thesis.png").exists()


def test_overlapping_intervals_say_pick_the_cheaper():
    """toy_grid's intervals are +-20%: Birder's 3,900/s on 10gbe overlaps SGDM's 4,000/s on 100gbe, so 10gbe is
    named; with Birder far below, nothing cheaper overlaps and the sentence says so."""
    sentence = decision_sentence(toy_grid(3900.0), decide(toy_grid(3900.0), 16))
    assert "10gbe (birder 3,900/s (3,120 to 4,680)) and 100gbe (sgdm 4,000/s (3,200 to 4,800)) are within the " \
           "uncertainty: pick the cheaper, 10gbe." in sentence
    apart = toy_grid(100.0, birder_elsewhere=0.1)
    apart = ModelGrid(apart.setting, apart.calibration, apart.optimizers, apart.networks, apart.nodes, tuple(
        p if p["network"] == "100gbe" or p["optimizer"] == "birder" else {**p, "throughput": p["throughput"] / 4,
                                                                           "throughput_low": p["throughput_low"] / 4,
                                                                           "throughput_high": p["throughput_high"] / 4}
        for p in apart.predictions))
    assert "Every cheaper network is slower than the fastest beyond the uncertainty" in decision_sentence(
        apart, decide(apart, 16))


def test_a_price_file_ranks_networks_by_samples_per_unit_cost(tmp_path):
    """Cost = nodes x (node + NICs x (NIC + switch port)); the ranking follows samples/s per 1,000 of cost, and
    a network the file does not price is listed apart."""
    path = tmp_path / "prices.toml"
    path.write_text('currency = "EUR"\nnode = 1000\n[nic]\n10gbe = 0\n100gbe = 3000\n'
                    '[switch_port]\n10gbe = 0\n100gbe = 1000\n')
    prices = report_prices.load_prices(path)
    assert prices.cluster_cost("100gbe", 16, 1) == 16 * (1000 + 4000)
    lines = report_prices.cost_ranking(toy_grid(3900.0), 16, prices)
    table = [line for line in lines if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert "| 1 | 10gbe | birder |" in table[0] and "| 2 | 100gbe | sgdm |" in table[1]
    assert num(3900 / 16000 * 1e3) in table[0]  # 3,900 samples/s for 16 nodes x 1,000 EUR
    assert lines[-1] == "Not priced (no NIC or switch port price): 25gbe."


@pytest.mark.parametrize("text, message", [
    ("[nic]\n10gbe = 1\n", "expected node = PRICE"),
    ("node = 0\n", "node must be a positive number"),
    ("node = 10\n[nic]\n10gbe = -1\n", r"\[nic\] 10gbe must be a non-negative number"),
    ("node = 10\nnic = 3\n", r"\[nic\] must be a table"),
    ("node = 10\nbogus = 1\n", "expected node = PRICE"),
    ("node = [\n", "cannot read the price file"),
])
def test_bad_price_files_are_one_error(tmp_path, text, message):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        report_prices.load_prices(path)


def test_a_bad_price_file_stops_the_report_before_it_starts(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("node = -5\n")
    run = subprocess.run([sys.executable, "-m", "birder.cli", "report", "--quick", "--out", str(tmp_path / "r"),
                          "--prices", str(bad)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "node must be a positive number" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_the_network_choice_plot_is_drawn(tmp_path):
    rows = [{"nodes": 16, "network": n, "label": lab, "throughput": t, "low": 0.9 * t, "high": 1.05 * t}
            for n, t in (("10gbe", 3900.0), ("100gbe", 4000.0)) for lab in ("best of sgdm", "birder")]
    path = plots.network_choice(rows, tmp_path / "choice.png", "toy")
    png = path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert 300 <= width <= 4000 and 300 <= height <= 4000 and 5_000 <= len(png) <= 2_000_000
    # every network given is drawn: per series, one bar of its colour per network (columns of the image above the
    # legend, which sits at the bottom, holding that exact colour form one run per bar)
    pixels = np.rint(imread(path)[: int(0.9 * height), :, :3] * 255).astype(int)
    for label, style in plots.styles(["best of sgdm", "birder"]).items():
        rgb = np.rint(np.array(to_rgb(style["color"])) * 255).astype(int)
        colour = (pixels == rgb).all(axis=2).any(axis=0)
        bars = int(colour[0]) + int(np.count_nonzero(colour[1:] & ~colour[:-1]))
        assert bars == 2, (label, bars)


def test_a_report_the_user_edited_is_not_replaced(tmp_path):
    """The manifest keeps each file's SHA-256: a report.md changed since the run that wrote it (the user's notes
    added to it) is refused before any work, and the edit is kept."""
    out = tmp_path / "report"
    _earlier_report(out)
    edited = (out / "report.md").read_text() + "\nMY NOTES\n"
    (out / "report.md").write_text(edited)
    with pytest.raises(ValueError, match="report.md changed since the earlier run wrote it"):
        report.write_report(out, sections=(lambda outdir, quick: "new",))
    assert (out / "report.md").read_text() == edited
    (out / "report.md").unlink()  # a file of the report removed: nothing of the user's is at stake
    report.write_report(out, sections=(lambda outdir, quick: "new",))
    assert "new" in (out / "report.md").read_text()


@pytest.mark.parametrize("coverage, cautioned", [(0.734, True), (0.85, False)])
def test_speedup_words_quote_the_paired_check_and_caution_below_nominal(coverage, cautioned):
    speedup = {"pairs": 214, "coverage": coverage, "median_half_width": 0.213, "naive_coverage": 0.874,
               "naive_median_half_width": 0.295, "decided": 0.383, "decided_right": 0.976}
    summary = {"corpus_validation": {"summary": {"interval_level": 0.8, "speedup": speedup}}}
    words = report_words.speedup_words(report_grid.Grid((), summary, ()))
    assert (f"(214 pairs: they covered {100 * coverage:.1f}% of the pairs left out with a median half-width of 21%, "
            "against 87.4% and 30% for the two intervals divided end by end; the 38% that excluded 1 named the faster "
            "as measured in 98% of cases)") in words
    assert ("read a named faster one as likely, not certain" in words) == cautioned


def test_with_a_price_file_the_decision_ranks_the_priced_networks_by_value(tmp_path):
    """A price file for 10gbe and 25gbe only: the decision names the best samples/s per unit cost among those two,
    says that 100gbe (the fastest, unpriced) was left out, and picks the cheaper of a tie by the prices, not by
    line rate; without a price file the wording is today's."""
    g = toy_grid(3900.0)
    d = decide(g, 16)
    path = tmp_path / "prices.toml"
    path.write_text("node = 1000\n[nic]\n10gbe = 0\n25gbe = 1000\n[switch_port]\n10gbe = 0\n25gbe = 500\n")
    sentence = decision_sentence(g, d, report_prices.load_prices(path))
    assert "100gbe left out" in sentence and "buy 100gbe" not in sentence
    # sgdm: 1,000/s for 16,000 (62.5 per 1,000) on 10gbe against 2,000/s for 40,000 (50) on 25gbe
    assert "without Birder buy 10gbe (sgdm 1,000/s (800 to 1,200), 62.5/s per 1,000 units)" in sentence
    assert "with Birder buy 10gbe (birder 3,900/s (3,120 to 4,680), 244/s per 1,000 units, 3.90x" in sentence
    assert "pick the cheaper by the prices, 10gbe." in sentence and "taken as the cheapest" not in sentence
    # 10gbe made dear: value and the tie-break follow the prices, not the line rate
    path.write_text("node = 1000\n[nic]\n10gbe = 5000\n25gbe = 1000\n[switch_port]\n10gbe = 0\n25gbe = 500\n")
    dear = decision_sentence(g, d, report_prices.load_prices(path))
    assert "with Birder buy 25gbe (birder 3,850/s" in dear and "pick the cheaper" not in dear
    assert "No priced network cheaper than the fastest priced one, 25gbe" in dear
    assert decision_sentence(g, d) == decision_sentence(g, d, None) and "left out" not in decision_sentence(g, d)
