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
from matplotlib.image import imsave

from birder import report, report_decision, report_grid, report_plots, report_prices, report_verdict, report_words
from birder.report_core import num
from birder.report_grid import ModelGrid, Setting
from birder.report_verdict import sentence, verdict
from birder.report_words import stops_paying_sentence
from sim import api, plots
from sim.network import NETWORKS

ROOT = Path(__file__).resolve().parents[1]


def prediction(network, optimizer, nodes, throughput, comm=0.5):
    return {"network": network, "optimizer": optimizer, "nodes": nodes, "gpus": 8 * nodes, "model": "m",
            "batch_per_gpu": 32, "throughput": throughput, "throughput_low": 0.8 * throughput,
            "throughput_high": 1.2 * throughput, "iteration_s": 1.0, "compute_s": 1 - comm, "compression_s": 0.0,
            "contention_s": 0.0, "exposed_communication_s": comm,
            "inter_node_bytes_per_gpu": 1e6 if optimizer == "birder" else 32e6, "measured_node": False,
            "interval_regime": "communication-bound"}


def toy_grid(birder_on_10gbe: float, birder_elsewhere: float = 1.0) -> ModelGrid:
    networks = ("10gbe", "25gbe", "100gbe")
    sgdm = {"10gbe": 1000.0, "25gbe": 2000.0, "100gbe": 4000.0}
    birder = {"10gbe": birder_on_10gbe, "25gbe": 3850.0 * birder_elsewhere, "100gbe": 3700.0 * birder_elsewhere}
    preds = [prediction(n, "sgdm", k, sgdm[n] * k / 16) for n in networks for k in (2, 16)]
    preds += [prediction(n, "birder", k, birder[n] * k / 16) for n in networks for k in (2, 16)]
    return ModelGrid(Setting("m", "M", 32, "built-in"), "built-in", ("sgdm", "birder"), networks, (1, 2, 16),
                     tuple(preds))


def test_the_verdict_is_computed_from_the_predictions_and_moves_with_them():
    """toy_grid at 16 nodes: SGDM 1,000/2,000/4,000/s on 10gbe/25gbe/100gbe; Birder 3,900/3,850/3,700/s."""
    v = verdict(toy_grid(3900.0), 16)
    # Birder on the cheapest network reaches 95% of the fastest set-up (SGDM on 100gbe): buy it, run Birder
    assert (v.buy.network, v.setup["optimizer"], v.birder_pays, v.rivals) == ("10gbe", "birder", "yes", ())
    assert sentence(v).startswith("buy **10gbe** and run birder: 3,900 samples/s (3,120 to 4,680), 98% of the "
                                  "fastest set-up. Birder pays: 3.90x the best of SGDM/Adam on 10gbe")
    # less Birder throughput on 10gbe: 25gbe becomes the buy, and 10gbe (3,100/s) is not ruled out beside 3,850/s
    # (the stored paired bounds' lower end, about -0.25 in log, holds 1.24x; far below it, 10gbe is ruled out)
    moved = verdict(toy_grid(3100.0), 16)
    assert moved.buy.network == "25gbe" and [r.network for r, _ in moved.rivals] == ["10gbe"]
    assert "Not ruled out, within the uncertainty of it: the cheaper 10gbe (birder 3,100/s)." in sentence(moved)
    assert verdict(toy_grid(2500.0), 16).rivals == ()
    assert moved.too_wide
    # Birder nowhere near: the fastest network with SGDM, and Birder does not pay there
    slow = verdict(toy_grid(100.0, birder_elsewhere=0.1), 16)
    assert (slow.buy.network, slow.setup["optimizer"], slow.birder_pays) == ("100gbe", "sgdm", "no")
    assert sentence(slow).count("buy") == 1 and "Birder does not pay: 0.09x" in sentence(slow)


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


def test_the_first_screen_is_the_decision_and_cites_the_simulators_predictions(tmp_path):
    """The overview (--quick: two models at 16 and 64 nodes) fits the first screen: one row per question, each the
    verdict's, its set-up predicted again through sim.api; then each verdict's figure."""
    section = report_decision.decision_section(tmp_path, quick=True)
    screen = section.summary["decision"].splitlines()
    assert len(screen) <= report_decision.SCREEN_LINES - 2
    assert section.markdown.splitlines()[:len(screen)] == screen  # report.md's first lines are the terminal's
    g = report_grid.grid(quick=True)
    answers = report_verdict.verdicts(g, report_grid.Question(), None)
    assert [v.label for _, v in answers] == ["ResNet-50", "ResNet-50", "BERT-base", "BERT-base"]
    for m, v in answers:
        row = next(line for line in screen if line.startswith(f"| {v.label} | {v.nodes} |"))
        assert f"| **{v.buy.network}** | {v.setup['optimizer']} | {num(v.setup['throughput'])} (" in row
        again = api.predict_config(m.setting.model, v.nodes, v.buy.network, v.setup["optimizer"], batch_per_gpu=32,
                                   single_node_throughput=v.setup["single_node_throughput"] if v.setup[
                                       "measured_node"] else None)
        assert f"{num(again['throughput'])} ({num(again['throughput_low'])}-{num(again['throughput_high'])})" in row
        assert sentence(v) in section.markdown
        assert (tmp_path / f"decision_{m.setting.model}_{v.nodes}_nodes.png").stat().st_size > 10_000
    assert "fit (in-sample)" in section.markdown and "prediction (cross-validated)" in section.markdown
    assert set(section.summary) == {"prediction error", "headline", "decision"}


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
        imsave(outdir / "new.png", np.zeros((2, 2)))  # a whole PNG: what is written is read back before the swap
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


def test_a_signal_that_python_turns_into_another_exception_still_exits_as_the_signal(tmp_path, monkeypatch):
    """SIGTERM inside a C extension's import comes back as "ImportError: initialization failed" (matplotlib's _image,
    once a faster start-up moved the signal there): the run still exits 128 + 15, no traceback, nothing written."""
    from birder.cli import main

    def interrupted_inside_an_import(out, quick, progress):
        try:
            report._terminate(signal.SIGTERM, None)
        except SystemExit:
            raise ImportError("initialization failed") from None

    monkeypatch.setattr(report, "write_report", interrupted_inside_an_import)
    with pytest.raises(SystemExit) as exited:
        main(["report", "--quick", "--quiet", "--out", str(tmp_path / "report")])
    assert exited.value.code == 128 + signal.SIGTERM and not (tmp_path / "report").exists()
    monkeypatch.setattr(report, "write_report", lambda out, quick, progress: (_ for _ in ()).throw(ImportError("x")))
    with pytest.raises(ImportError):  # with no signal, the error is the error
        main(["report", "--quick", "--quiet", "--out", str(tmp_path / "report")])


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


def test_a_sigterm_python_swallowed_still_stops_the_swap(tmp_path):
    """Trial t7: SIGTERM landing in a gc or weakref callback printed 'Exception ignored ... SystemExit: 143', the run
    went on and replaced the old report, exit 0. A section that swallows the exit stands in for that callback."""
    out = tmp_path / "report"
    before = _earlier_report(out)

    def swallowed(tmp, quick):
        try:
            report._terminate(signal.SIGTERM, None)
        except SystemExit:
            pass  # what Python does with an exception raised in a gc callback
        return "## a section"

    try:
        with pytest.raises(SystemExit) as stopped:
            report.write_report(out, quick=True, sections=(swallowed,))
    finally:
        report._TERMINATED.clear()
    assert stopped.value.code == 128 + signal.SIGTERM
    assert sorted(os.listdir(tmp_path)) == ["report"] and sorted(os.listdir(out)) == before


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


def test_one_question_fits_the_first_screen_with_its_table_verdict_and_what_would_narrow_it(tmp_path):
    """Every network in the table, the network to buy marked, one verdict, and (the range too wide) how to narrow
    it: within the 28 lines below the report's title, also with a price file (its columns and NIC count said)."""
    g = toy_grid(3000.0)
    path = tmp_path / "prices.toml"
    path.write_text('currency = "EUR"\nnode = 1000\nyears = 3\n[nic]\n10gbe = 0\n25gbe = 1000\n'
                    '[switch_port]\n10gbe = 0\n25gbe = 500\n')
    summary = {"corpus_validation": {"summary": {"median_half_width": 0.137,
                                                 "unmeasured_node": {"median_half_width": 1.88}}}}
    for prices in (None, report_prices.load_prices(path)):
        v = verdict(g, 16, prices)
        screen = report_decision.first_screen(report_grid.Grid((g,), summary, g.networks), [(g, v)],
                                              report_grid.Question(("m",), (16,)), prices, "a100")
        assert len(screen) <= report_decision.SCREEN_LINES - 2
        text = "\n".join(screen)
        assert text.count("(buy)") == 1 and f"**Verdict:** {sentence(v)}" in screen
        assert all(f"| {r.network} |" in text or f"| **{r.network}** (buy) |" in text for r in v.rows)
        assert "1 NIC per node on every network" in text
        assert ("--single-node-throughput" in text and "birder calibrate" in text) == v.too_wide
    assert "EUR per 1M samples" in text and "paid off over 3 years" in text and "| not priced | |" in text


def test_a_price_file_prices_the_simulated_nics_per_node(tmp_path):
    """Cost = nodes x (node + NICs per node x (NIC + switch port)), with the NICs per node the prediction was
    simulated with (never an assumed one): two NICs cost twice; an unpriced network has no cost."""
    path = tmp_path / "prices.toml"
    path.write_text('currency = "EUR"\nnode = 1000\n[nic]\n10gbe = 0\n100gbe = 3000\n'
                    '[switch_port]\n10gbe = 0\n100gbe = 1000\n')
    prices = report_prices.load_prices(path)
    g = toy_grid(3900.0)
    rows = {r.network: r for r in report_verdict.rows_of(g, 16, prices)}
    assert rows["100gbe"].cost == 16 * (1000 + 4000) and rows["25gbe"].cost is None
    two = ModelGrid(g.setting, g.calibration, g.optimizers, g.networks, g.nodes,
                    tuple({**p, "nics_per_node": 2} for p in g.predictions))
    rows = {r.network: r for r in report_verdict.rows_of(two, 16, prices)}
    assert rows["100gbe"].cost == 16 * (1000 + 2 * 4000) and rows["100gbe"].nics_per_node == 2


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


def test_the_verdict_figure_draws_what_the_verdict_rests_on_and_its_text_fits(tmp_path):
    """One figure per verdict: the network to buy and the one not ruled out both drawn, the buy named in the title,
    and every text inside the figure (matplotlib's renderer against the figure's box)."""
    v = verdict(toy_grid(3100.0), 16)
    fig = report_plots.draw_verdict(v, v.rows)
    title = fig.axes[0].get_title()
    assert "buy 25gbe, run birder" in title and "not ruled out: 10gbe" in title
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["10gbe", "buy: 25gbe", "100gbe"]
    assert plots.texts_outside(fig) == []
    path = report_plots.verdict_figure(v, v.rows, tmp_path / "v.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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


def test_with_a_price_file_the_verdict_is_the_best_value_among_the_priced_networks(tmp_path):
    """Prices for 10gbe and 25gbe only: the verdict is the best samples/s per unit of cost among those two (100gbe,
    the fastest, is unpriced) and follows the prices, not the line rate, when 10gbe is made dear."""
    g = toy_grid(3900.0)
    path = tmp_path / "prices.toml"
    path.write_text("node = 1000\n[nic]\n10gbe = 0\n25gbe = 1000\n[switch_port]\n10gbe = 0\n25gbe = 500\n")
    v = verdict(g, 16, report_prices.load_prices(path))
    # Birder: 3,900/s for 16,000 (244 per 1,000) on 10gbe against 3,850/s for 40,000 (96) on 25gbe
    assert (v.by, v.buy.network, v.setup["optimizer"], v.birder_pays) == ("value", "10gbe", "birder", "yes")
    assert "the most samples/s per 1,000 units (244)" in sentence(v)
    path.write_text("node = 1000\n[nic]\n10gbe = 5000\n25gbe = 1000\n[switch_port]\n10gbe = 0\n25gbe = 500\n")
    dear = verdict(g, 16, report_prices.load_prices(path))
    assert dear.buy.network == "25gbe" and sentence(dear).count("buy") == 1




def test_a_table_too_small_for_every_rival_keeps_the_closest_ones():
    """A trial's table of 5 networks showed the four cheapest rivals and dropped ib-hdr, the one closest to the
    network to buy, which the sentence below it named. The rivals now enter closest first."""
    networks = ("10gbe", "25gbe", "40gbe", "100gbe", "ib-edr", "ib-hdr", "ib-ndr")
    speeds = dict(zip(networks, (8000.0, 8200.0, 8400.0, 8600.0, 8800.0, 9400.0, 10000.0), strict=True))
    preds = tuple(prediction(n, "sgdm", 16, speeds[n]) for n in networks)
    g = ModelGrid(Setting("m", "M", 32, "built-in"), "built-in", ("sgdm",), networks, (16,), preds)
    v = verdict(g, 16)
    assert v.buy.network == "ib-ndr" and len(v.rivals) == 6
    shown = [r.network for r in report_verdict.shown_rows(v, 5)]
    assert shown == ["40gbe", "100gbe", "ib-edr", "ib-hdr", "ib-ndr"], shown


@pytest.mark.parametrize("prices, cluster, message", [
    ("currency = 'USD'\nnode = 265000\n[nic]\nib-ndr = 2500\n", None,
     "prices both a NIC and a switch port for none of the networks compared (10gbe, "),
    ("currency = 'USD'\nnode = 265000\n[nic]\nib-ndr = 2500\n[switch_port]\nib-ndr = 1500\n",
     "name = 'mine'\nnodes = 8\ngpus_per_node = 8\ngpu = 'h100'\n[network]\ntransport = 'ib'\nline_rate_gbps = 400\n",
     "names no network preset, so no price applies to it; add `preset = NAME` under its [network]"),
])
def test_a_price_file_that_prices_none_of_the_compared_networks_is_refused_before_any_work(tmp_path, capsys, prices,
                                                                                           cluster, message):
    """A trial got "buy: the most samples/s per unit of cost" over a table of "not priced" networks, and a network
    to buy chosen by throughput. Now one error line, exit 2, and no report directory."""
    (tmp_path / "prices.toml").write_text(prices)
    _report_refused_in_one_line(tmp_path, capsys, ["--nodes", "8", "--prices", str(tmp_path / "prices.toml")],
                                cluster, message)


def _report_refused_in_one_line(tmp_path, capsys, argv: list[str], cluster: str | None, message: str) -> None:
    """`birder report --model bert-large ARGV` (with CLUSTER as its --cluster file, if given) exits 2 with MESSAGE in
    one line on stderr, and writes no report directory."""
    from birder.cli import main

    argv = ["report", "--model", "bert-large", *argv, "--out", str(tmp_path / "out"), "--quiet"]
    if cluster:
        (tmp_path / "cluster.toml").write_text(cluster)
        argv += ["--cluster", str(tmp_path / "cluster.toml")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, cluster, message", [
    (["--nodes", "1"], None, "--nodes: one node has no inter-node network to decide on"),
    (["--nodes", "1,16"], None, "--nodes: one node has no inter-node network to decide on"),
    (["--nodes", "0"], None, "--nodes: each count must be 2 to"),
    ([], "name = 'one'\nnodes = 1\n[network]\npreset = 'ib-hdr'\n", "the file has one node, which has no inter-node"),
])
def test_a_report_for_one_node_is_refused_not_a_network_bought_for_it(tmp_path, capsys, argv, cluster, message):
    """A trial's `report --nodes 1` bought 10gbe for a single node (every network gave the measured node's 472
    samples/s, intervals of zero width, a title of "1 nodes"): one node crosses no network. Now one line, exit 2,
    no report directory."""
    _report_refused_in_one_line(tmp_path, capsys, argv, cluster, message)
