"""Speed-up intervals calibrated on paired rows: two rows of one published table (same set-up and node count)
give one error of a predicted ratio; the ratio's interval comes from those errors on other sources' pairs, and
`birder report`/`sweep` decide (a faster one named) only where it excludes 1."""

import json
import math
import random
from dataclasses import replace

import pytest

from sim import api, uncertainty
from sim.validation import corpus_setup
from sim.validation import leave_one_source_out as loso
from sim.validation import pairs as speedup_pairs
from sim.validation.corpus import load_corpus


@pytest.fixture(scope="module")
def public():
    return tuple(r for r in load_corpus() if r.source == corpus_setup.PAPER_SOURCE)


def test_pairs_are_rows_of_one_table_and_node_count_that_differ_in_what_is_compared(public):
    """The paper's Table 3: 2 networks x 3 optimizers at each of 3 node counts, so C(6, 2) = 15 pairs per count;
    a row at another node count or batch size is never paired, nor a repeat of the same set-up."""
    pairs = speedup_pairs.paired_rows(list(public))
    assert len(pairs) == 3 * 15
    for i, j in pairs:
        a, b = public[i], public[j]
        assert all(getattr(a, k) == getattr(b, k) for k in speedup_pairs.PAIR_KEY)
        assert any(getattr(a, c) != getattr(b, c) for c in speedup_pairs.PAIR_COLUMNS)
    row = public[0]
    assert speedup_pairs.paired_rows([row, replace(row, nodes=row.nodes * 2, optimizer="adam")]) == []
    assert speedup_pairs.paired_rows([row, replace(row, batch_per_gpu=64, optimizer="adam")]) == []
    assert speedup_pairs.paired_rows([row, replace(row, notes="a second reading")]) == []
    assert speedup_pairs.paired_rows([row, replace(row, optimizer="adam")]) == [(0, 1)]


def test_a_pairs_error_is_the_difference_of_its_rows_and_its_interval_never_sees_its_source(public):
    """log(measured ratio / predicted ratio) = the faster row's log error minus the slower's; the predicted ratio
    is at least 1; the naive interval is the two rows' intervals divided end by end. Changing one optimizer's
    measurements in one source moves the other source's speed-up intervals, never its own."""
    # neither source set the A100's compute figure (the paper's rows did): both enter the unmeasured-node pairs
    ib = [replace(r, source="ib-source") for r in public if r.transport == "ib"]
    other = [replace(r, source="other") for r in public if r.transport == "tcp"]
    cv = loso.corpus_validation(tuple(ib + other), "test")
    rows = {(p.source, p.optimizer, p.nodes): p for p in cv.rows}
    assert len(cv.pairs) == 2 * 3 * 3
    for pair in cv.pairs:
        faster = rows[pair.source, pair.faster.split("=")[1], pair.nodes]
        slower = rows[pair.source, pair.slower.split("=")[1], pair.nodes]
        assert pair.predicted == pytest.approx(faster.left_out / slower.left_out) and pair.predicted >= 1
        assert math.log(pair.measured / pair.predicted) == pytest.approx(
            math.log(faster.measured / faster.left_out) - math.log(slower.measured / slower.left_out))
        assert (pair.naive_low, pair.naive_high) == pytest.approx((faster.low / slower.high, faster.high / slower.low))
        assert pair.low <= pair.predicted <= pair.high
    moved = [replace(r, throughput=r.throughput * 0.7) if r.optimizer == "birder" else r for r in other]
    after = loso.corpus_validation(tuple(ib + moved), "test")
    for mine, theirs in ((cv.pairs, after.pairs), (cv.unmeasured_pairs, after.unmeasured_pairs)):
        changed_ib = False  # with a measured node and without (built-in GPU profiles) alike
        assert len(mine) == len(theirs) == 18
        for before, now in zip(mine, theirs, strict=True):
            if before.source == "other":
                assert (now.low, now.high, now.predicted) == (before.low, before.high, before.predicted)
            else:
                changed_ib |= (now.low, now.high) != (before.low, before.high)
        assert changed_ib
    unmeasured = cv.unmeasured_figures()
    assert unmeasured["rows"] == len(cv.unmeasured_rows) == 18
    assert unmeasured["coverage"] == sum(low <= m <= high for _, _, low, high, m in cv.unmeasured_rows) / 18


def test_correlated_errors_give_a_narrower_ratio_interval_that_still_covers():
    """Synthetic exchangeable pairs whose two log errors share a set-up term (sd 0.3) and add their own (sd
    0.05): the split-conformal interval of the ratio's errors (n = 49, so (n + 1) x 10% = 5 from each end) covers
    a new pair with probability exactly 0.8 for continuous errors; the worst-case division of the two rows'
    own intervals is wider. Over 2,000 independent trials (seed 18), Hoeffding bounds the chance that the covered
    share falls below 0.8 - 0.073 by exp(-2 x 2000 x 0.073^2) < 1e-9. The width comparison holds in every trial
    unless the shared term's spread were below the rows' own (not drawn here: 0.3 against 0.05)."""
    rng = random.Random(18)
    covered = narrower = 0
    trials = 2000
    for _ in range(trials):
        draws = []
        for _ in range(50):
            shared = rng.gauss(0, 0.3)
            draws.append((shared + rng.gauss(0, 0.05), shared + rng.gauss(0, 0.05)))
        (test_a, test_b), calibration = draws[0], draws[1:]
        low, high = uncertainty.log_ratio_quantiles([a - b for a, b in calibration])
        row_low, row_high = uncertainty.log_ratio_quantiles([x for pair in calibration for x in pair])
        covered += low <= test_a - test_b <= high
        narrower += high - low < (row_high - row_low) * 2
    assert covered / trials >= 0.8 - 0.073
    assert narrower == trials


def _pair(optimizer_a: str, optimizer_b: str, nodes: int, network: str = "10gbe") -> tuple[dict, dict]:
    single = {"birder": 3462.0, "sgdm": 3693.0}
    return tuple(api.predict_config("resnet50", nodes, network, o, single_node_throughput=single[o])
                 for o in (optimizer_a, optimizer_b))


@pytest.mark.parametrize("measured", [True, False])
def test_a_speedup_interval_is_the_supported_method_mirrored_and_decided(measured):
    """Birder over SGDM on 16 nodes of 25 GbE (no incast on its preset switch: an assumed buffer's incast takes
    the end-by-end interval, test_sim_incast_shown), with and without measured nodes: the interval is the method the
    stored left-out pairs support for its kind (``speedup_pairs.speedup_method``): the stored paired bounds around the
    predicted ratio (the faster over the slower), or the two intervals divided end by end; its mirror the other
    way round; the verdict names the faster only where the interval excludes 1."""
    birder, sgdm = _pair("birder", "sgdm", 16, "25gbe") if measured else (
        api.predict_config("resnet50", 16, "25gbe", o) for o in ("birder", "sgdm"))
    assert birder["incast_s"] == sgdm["incast_s"] == 0
    forward, backward = uncertainty.speedup_interval(birder, sgdm), uncertainty.speedup_interval(sgdm, birder)
    assert forward["ratio"] == pytest.approx(birder["throughput"] / sgdm["throughput"])
    assert (forward["low"], forward["high"]) == pytest.approx((1 / backward["high"], 1 / backward["low"]))
    q = uncertainty.stored_intervals()
    key = "measured_node" if measured else "unmeasured_node"
    regime = uncertainty.pair_regime(birder["interval_regime"], sgdm["interval_regime"])
    if q["speedup_methods"][key][regime] == "paired":
        faster = max(forward["ratio"], 1 / forward["ratio"])
        expected = uncertainty.interval_around(faster, uncertainty.regime_bounds(q[f"speedup_{key}"], regime))
        shown = (forward["low"], forward["high"]) if forward["ratio"] >= 1 else (
            1 / forward["high"], 1 / forward["low"])
        assert shown == pytest.approx(expected) and forward["basis"].startswith(f"paired: {regime} pairs")
    else:
        assert (forward["low"], forward["high"]) == pytest.approx(
            (birder["throughput_low"] / sgdm["throughput_high"], birder["throughput_high"] / sgdm["throughput_low"]))
        assert forward["basis"].startswith("the two intervals divided end by end")
    for r in (forward, backward):
        assert r["verdict"] == ("faster" if r["low"] > 1 else "slower" if r["high"] < 1 else "within the uncertainty")
    assert {forward["verdict"], backward["verdict"]} in ({"faster", "slower"}, {"within the uncertainty"})


@pytest.mark.parametrize("figures, method", [
    ({"pairs": 0}, "naive"),
    ({"pairs": 9, "coverage": 0.85, "naive_coverage": 0.9, "median_half_width": 0.2, "naive_median_half_width": 0.3},
     "paired"),
    ({"pairs": 9, "coverage": 0.85, "naive_coverage": 0.9, "median_half_width": 0.4, "naive_median_half_width": 0.3},
     "naive"),
    ({"pairs": 9, "coverage": 0.7, "naive_coverage": 0.9, "median_half_width": 0.1, "naive_median_half_width": 0.3},
     "naive"),
    ({"pairs": 9, "coverage": 0.85, "naive_coverage": 0.7, "median_half_width": 0.4, "naive_median_half_width": 0.3},
     "paired"),
    ({"pairs": 9, "coverage": 0.75, "naive_coverage": 0.7, "median_half_width": 0.4, "naive_median_half_width": 0.3},
     "paired"),
])
def test_the_supported_method_covers_as_promised_then_is_the_narrower(figures, method):
    assert speedup_pairs.speedup_method(figures) == method


def test_a_speedup_across_set_ups_or_of_measured_nodes_says_how_it_was_made():
    birder, _ = _pair("birder", "sgdm", 16)
    _, sgdm_8 = _pair("birder", "sgdm", 8)
    across = uncertainty.speedup_interval(birder, sgdm_8)  # two node counts: no pair of the corpus is like it
    assert across["basis"].startswith("different set-ups")
    assert (across["low"], across["high"]) == pytest.approx(
        (birder["throughput_low"] / sgdm_8["throughput_high"], birder["throughput_high"] / sgdm_8["throughput_low"]))
    one = uncertainty.speedup_interval(*_pair("birder", "sgdm", 1))  # the measured nodes themselves
    assert one["low"] == one["ratio"] == one["high"] == pytest.approx(3462 / 3693) and one["verdict"] == "slower"


def test_a_site_profile_takes_its_own_rows_bounds():
    """Each of the paper's site profiles has 18 rows left out of its fit in the group cross-validation: enough
    for finite 80% bounds of its own, which its predictions use (and say so)."""
    q = uncertainty.stored_intervals()
    for site in ("birder-paper-10gbe", "birder-paper-ib"):
        out = api.predict_config("resnet50", 4, site, "sgdm")
        rows = q["site_profile_rows"][site]
        assert out["interval_basis"].startswith(f"site profile {site}: its own public rows ({rows})")
        low, high = q["site_profile_by_site"][site]
        assert (out["throughput_low"], out["throughput_high"]) == pytest.approx(
            uncertainty.interval_around(out["throughput"], (low, high)))


def test_sweep_prints_and_returns_each_speedup_over_the_first_optimizer(tmp_path, capsys):
    from birder.cli import main

    argv = ["sweep", "--nodes", "1,16", "--optimizers", "sgdm,birder", "--networks", "10gbe,ib-ndr", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "a"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(s["network"], s["nodes"], s["optimizer"], s["baseline"]) for s in out["speedups"]] == [
        (net, n, "birder", "sgdm") for net in ("10gbe", "ib-ndr") for n in (1, 16)]
    results = {(r["network"], r["optimizer"], r["nodes"]): r for r in out["results"]}
    for s in out["speedups"]:
        # of the whole predictions (the table leaves out what a speed-up needs, such as incast_free_throughput)
        birder, sgdm = (api.predict_config(results[s["network"], opt, s["nodes"]]["model"], s["nodes"], s["network"],
                                           opt) for opt in ("birder", "sgdm"))
        assert (birder["throughput"], sgdm["throughput"]) == pytest.approx(
            (results[s["network"], "birder", s["nodes"]]["throughput"], results[s["network"], "sgdm", s["nodes"]][
                "throughput"]), rel=1e-12)
        expected = uncertainty.speedup_interval(birder, sgdm)
        assert (s["verdict"], s["basis"]) == (expected["verdict"], expected["basis"])
        ends = ("ratio", "low", "high")
        assert [s[k] for k in ends] == pytest.approx([expected[k] for k in ends])
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    first = out["speedups"][1]
    verdict = first["verdict"] + ("" if first["verdict"].startswith("within") else " beyond the uncertainty")
    assert (f"speed-up over sgdm, 10gbe 16 nodes: birder {first['ratio']:.2f}x ({first['low']:.2f} to "
            f"{first['high']:.2f}, {verdict})") in text


def test_two_predictions_equal_within_rounding_get_a_symmetric_interval_whatever_the_last_digit(monkeypatch):
    """Adam and SGDM send the same bytes: their predictions differ in a last digit, either way. Lopsided paired
    bounds (-0.47, +0.25) oriented by that digit gave 0.78-1.60 one way and 0.63-1.28 the other; equal within
    rounding, the wider tail is taken both ways, so both orders give the same 0.63-1.60 (to the digit)."""
    stored = uncertainty.stored_intervals()
    bounds = {"compute-bound": (-0.47, 0.25), "communication-bound": (-0.47, 0.25), "all": (-0.47, 0.25)}
    lopsided = {**stored, "speedup_measured_node": bounds,
                "speedup_methods": {**stored["speedup_methods"],
                                    "measured_node": {"compute-bound": "paired", "communication-bound": "paired"}}}
    monkeypatch.setattr(uncertainty, "stored_intervals", lambda: lopsided)
    setup = {"model": "bert-large", "batch_per_gpu": 32, "nodes": 16, "gpus_per_node": 8, "measured_node": True,
             "interval_regime": "communication-bound", "throughput_low": 800.0, "throughput_high": 1200.0}
    sgdm = {**setup, "optimizer": "sgdm", "throughput": 1000.0}
    shown = set()
    for digit in (1 + 1e-6, 1 - 1e-6):
        adam = {**setup, "optimizer": "adam", "throughput": 1000.0 * digit}
        r = uncertainty.speedup_interval(adam, sgdm)
        assert r["low"] == pytest.approx(math.exp(-0.47), rel=1e-5) and r["high"] == pytest.approx(math.exp(0.47),
                                                                                                    rel=1e-5)
        shown.add((f"{r['low']:.2f}", f"{r['high']:.2f}"))
    assert shown == {("0.63", "1.60")}
    # a real difference (1.01x) keeps the paired bounds oriented by the faster
    r = uncertainty.speedup_interval({**setup, "optimizer": "adam", "throughput": 1010.0}, sgdm)
    assert r["low"] == pytest.approx(1.01 * math.exp(-0.47)) and r["high"] == pytest.approx(1.01 * math.exp(0.25))
