"""`birder validate` on the corpus: each source left out of every fit, the two naive baselines on the same rows,
skipped rows listed, and intervals whose quantiles never see the row's own source."""

import json
import math
import random
import re
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from bad_input_harness import strict_json

from birder.cli import main
from sim import api, uncertainty
from sim.hardware import cluster
from sim.validation import claims as paper_claims
from sim.validation import corpus_setup, figures, paper, site_fit
from sim.validation import leave_one_source_out as loso
from sim.validation import order as optimizer_order
from sim.validation.corpus import load_corpus
from sim.workload import predict


@pytest.fixture(scope="module")
def public():
    """The Birder paper's rows of the corpus (its public tables)."""
    return tuple(r for r in load_corpus() if r.source == corpus_setup.PAPER_SOURCE)


def test_the_papers_rows_are_the_site_profiles_rows(public):
    """18 multi-node rows whose single-node throughput is the public CSV's 8-GPU row of the same optimizer."""
    assert len(public) == 18 and {r.nodes for r in public} == {2, 4, 8}
    table = paper.rows()
    for r in public:
        one = [t for t in table if (t.network, t.optimizer, t.gpus) == (
            {"tcp": "10gbe", "ib": "ib-hdr"}[r.transport], r.optimizer, 8)]
        assert r.single_node_throughput == one[0].throughput
        assert (r.source, r.transport, float(r.line_rate_gbps)) in corpus_setup.SITE_OF_SETUP
    sgdm_64_tcp = next(r for r in public if (r.transport, r.optimizer, r.nodes) == ("tcp", "sgdm", 8))
    assert corpus_setup.linear_scaling(sgdm_64_tcp) == 8 * 3693


def test_alpha_beta_baseline_by_hand(public):
    """SGDM, 4 nodes over 10 GbE: one node's 256 samples in 256/3693 s, then a ring all-reduce of 25,557,032
    fp32 gradients among 4 nodes at 1.25 GB/s with 6 messages of 22.4 us."""
    row = next(r for r in public if (r.transport, r.optimizer, r.nodes) == ("tcp", "sgdm", 4))
    allreduce = 6 * 22.4e-6 + 2 * 3 / 4 * 25_557_032 * 4 / 1.25e9
    assert corpus_setup.alpha_beta(row) == pytest.approx(4 * 256 / (256 / 3693 + allreduce))
    one_bit = replace(row, optimizer="birder", single_node_throughput=3462)
    assert corpus_setup.alpha_beta(one_bit) > corpus_setup.alpha_beta(replace(one_bit, optimizer="sgdm"))
    accumulating = replace(row, notes="grad_accum=4")  # one all-reduce per four micro-batches
    assert corpus_setup.alpha_beta(accumulating) > corpus_setup.alpha_beta(row)


def test_a_source_left_out_loses_its_site_fit_and_its_interval_never_sees_it(public):
    """The paper's rows left out are predicted with generic hardware data (its site profiles were fitted on
    them) and the per-step jitter fitted on the other source's rows; another source's predictions and intervals
    come from the other sources' rows only: changing one source's measurements moves the other's interval (and
    jitter), never its own."""
    ib = [r for r in public if r.transport == "ib"]
    other = [replace(r, source="other") for r in public if r.transport == "tcp"]
    cv = loso.corpus_validation(tuple(ib + other), "test")
    paper_rows = [p for p in cv.rows if p.source == corpus_setup.PAPER_SOURCE]
    row = ib[0]
    site = predict(cluster("birder-paper-ib", row.nodes), model="resnet50", optimizer=row.optimizer,
                   single_node_throughput=row.single_node_throughput).throughput
    jitter = cv.step_jitter["by_held_out_source"]
    generic = predict(replace(cluster("ib-hdr", row.nodes), step_jitter_cv=jitter[corpus_setup.PAPER_SOURCE]),
                      model="resnet50", optimizer=row.optimizer,
                      single_node_throughput=row.single_node_throughput).throughput
    assert paper_rows[0].in_sample == pytest.approx(site) and paper_rows[0].left_out == pytest.approx(generic)
    # no site profile of theirs: in-sample and left out differ only by the jitter fitted with and without them
    same_jitter = cv.step_jitter["all_sources"] == jitter["other"]
    assert all((p.in_sample == p.left_out) == same_jitter for p in cv.rows if p.source == "other")
    halved = loso.corpus_validation(tuple(ib + [replace(r, throughput=r.throughput / 2) for r in other]), "test")
    assert halved.step_jitter["by_held_out_source"]["other"] == jitter["other"]
    for before, after in zip(cv.rows, halved.rows, strict=True):
        if before.source == corpus_setup.PAPER_SOURCE:
            assert (after.low, after.high) != (before.low, before.high)
        else:
            assert after.left_out == before.left_out and (after.low, after.high) == (before.low, before.high)
    assert cv.mape("left_out", source="other") == pytest.approx(
        sum(abs(p.left_out - p.measured) / p.measured for p in cv.rows if p.source == "other") / len(other))


def test_rows_the_simulator_cannot_express_are_listed_as_skipped(public):
    no_gpu = replace(public[0], gpu="m40", source="other")  # a GPU gpus.toml has no entry for
    no_single = replace(public[1], single_node_throughput=None, source="other")
    cv = loso.corpus_validation((*public, no_gpu, no_single), "test")
    assert len(cv.rows) == 18 and len(cv.skipped) == 2
    assert "m40" in cv.skipped[0].reason and "single-node" in cv.skipped[1].reason
    assert cv.summary()["skipped_rows"] == 2


def test_conformal_bounds_are_order_statistics():
    """n = 99 values 1..99 at 80%: k = floor(100 x 0.1) = 10 from either end; n = 5 is too few to bound."""
    values = [math.log(x) for x in range(1, 100)]
    assert uncertainty.log_ratio_quantiles(values) == (math.log(10), math.log(90))
    assert uncertainty.log_ratio_quantiles(values[:5]) == (-math.inf, math.inf)


def test_a_capped_compute_bound_interval_spends_its_whole_miss_budget_below():
    """n = 99 values 1..99 at 80% where the intervals are capped at linear scaling (a measured node): a
    compute-bound one puts the whole 20% below, k = floor(100 x 0.2) = 20, and its top is the largest value (the cap
    bounds it); a communication-bound one and the regimes pooled keep half on each side, as an uncapped fit does.
    Too few values still bound nothing below, and none nothing at all."""
    values = [math.log(x) for x in range(1, 100)]
    pairs = [(regime, x) for regime in uncertainty.REGIMES for x in values]
    capped, even = (uncertainty.interval_quantiles(pairs, 0.8, capped=c) for c in (True, False))
    assert capped["compute-bound"] == (math.log(20), math.log(99))
    assert capped["communication-bound"] == even["communication-bound"] == even["compute-bound"] == (
        math.log(10), math.log(90))
    assert capped["all"] == even["all"]
    assert uncertainty.interval_quantiles([("compute-bound", x) for x in values[:3]], 0.8, capped=True)[
        "compute-bound"] == (-math.inf, math.log(3))
    assert uncertainty.interval_quantiles([("communication-bound", 0.0)], 0.8, capped=True)["compute-bound"] == (
        -math.inf, math.inf)  # no value: nothing bounded on either side


def test_the_level_is_calibrated_on_whole_sources_left_out():
    """Ten sources of 20 rows each, every source's errors shifted by its own offset (-0.45 .. +0.45 in log units)
    around a spread of +-0.1: the rows' own 80% quantiles, judged source by source, cover 72% (a
    new source's shift is outside most of the others' spread); the calibrated level raises them until they do,
    and a held-out source's own errors never enter its bounds or its level."""
    errors = [uncertainty.LoggedError(f"s{s}", "compute-bound", 0.1 * (s - 4.5) + 0.01 * (k - 9.5))
              for s in range(10) for k in range(20)]
    groups = {f"s{s}": frozenset({f"s{s}"}) for s in range(10)}
    assert uncertainty.source_coverage(errors, groups, 0.8) == pytest.approx(0.72)
    levels = uncertainty.source_calibrated_levels(errors, groups)
    assert levels["compute-bound"] > 0.8 and uncertainty.source_coverage(errors, groups, levels) >= 0.8
    bounds = uncertainty.left_out_bounds(errors, groups)
    moved = [replace(e, log_ratio=e.log_ratio + 5) if e.source == "s3" else e for e in errors]
    assert uncertainty.left_out_bounds(moved, groups)[groups["s3"]] == bounds[groups["s3"]]
    assert uncertainty.left_out_bounds(moved, groups)[groups["s4"]] != bounds[groups["s4"]]


def test_source_coverage_on_the_level_grid_is_the_one_counted_row_by_row():
    """``source_coverage`` counts each held-out group's rows at every level of the grid at once; counted row by row
    from ``interval_quantiles`` (each group's bounds without it, a regime of too few rows falling back to the
    pooled bounds, the upper end capped at linear scaling and stretched to hold the prediction) it is the same at
    every level, off the grid too, per regime and pooled. Two sources held out together; seeded, deterministic."""
    rng = random.Random(27)
    errors = [uncertainty.LoggedError(f"s{s}", "compute-bound", rng.gauss(0.05 * s, 0.1),
                                      rng.choice((math.inf, rng.uniform(0.0, 0.3)))) for s in range(9)
              for _ in range(rng.randint(3, 12))]
    errors += [uncertainty.LoggedError(f"s{s}", "communication-bound", rng.gauss(-0.1, 0.3)) for s in (1, 4, 7)
               for _ in range(2)]  # too few to bound without their own: the pooled bounds
    groups = {f"s{s}": frozenset({f"s{s}"}) for s in range(9)} | {s: frozenset({"s2", "s3"}) for s in ("s2", "s3")}

    def by_hand(level, regime):
        shares = {}
        for held in set(groups.values()):
            q = uncertainty.interval_quantiles([(e.regime, e.log_ratio) for e in errors if e.source not in held],
                                               level, capped=True)  # some rows' intervals are capped
            rows = [e for e in errors if e.source in held and regime in (None, e.regime)]
            if rows:
                inside = [min(uncertainty.regime_bounds(q, e.regime)[0], 0) <= e.log_ratio
                          <= min(max(uncertainty.regime_bounds(q, e.regime)[1], 0), max(e.cap, 0)) for e in rows]
                shares[held] = sum(inside) / len(inside)
        return statistics.fmean(shares.values())

    for level in (*uncertainty.LEVEL_GRID, 0.83):
        for regime in (*uncertainty.REGIMES, None):
            assert uncertainty.source_coverage(errors, groups, level, regime) == pytest.approx(
                by_hand(level, regime), abs=1e-12), (level, regime)


def test_each_stratum_of_sources_is_covered_as_promised_not_only_the_strata_pooled():
    """Fourteen sources of 20 rows: eight predicted within +-0.02 ("easy", as a log of well-run clusters) and six
    shifted by their own offsets (-0.2 .. +0.2) around a spread of +-0.1 ("hard"). Calibrated on the sources
    pooled (level 87%), they are covered as promised on average (80.7%) but the hard ones only at 55%: the easy
    ones carry the average. With each stratum covered as promised the level rises (96.5%) and the hard ones are
    covered too. Deterministic rows: no false-failure probability."""
    errors = [uncertainty.LoggedError(f"e{s}", "compute-bound", 0.002 * (k - 9.5)) for s in range(8)
              for k in range(20)]
    errors += [uncertainty.LoggedError(f"h{s}", "compute-bound", 0.08 * (s - 2.5) + 0.01 * (k - 9.5))
               for s in range(6) for k in range(20)]
    groups = {e.source: frozenset({e.source}) for e in errors}
    strata = {source: source[0] for source in groups}
    pooled = uncertainty.source_calibrated_levels(errors, groups)
    hard = [e for e in errors if e.source.startswith("h")]
    assert uncertainty.source_coverage(errors, groups, pooled) == pytest.approx(0.807, abs=1e-3)
    assert uncertainty.source_coverage(errors, groups, pooled, strata=strata) == pytest.approx(0.55)
    by_stratum = uncertainty.source_calibrated_levels(errors, groups, strata=strata)
    assert (pooled["compute-bound"], by_stratum["compute-bound"]) == (0.87, 0.965)
    assert uncertainty.source_coverage(errors, groups, by_stratum, strata=strata) >= 0.8

    def hard_covered(bounds):  # the hard rows inside their intervals, each calibrated without its source
        return statistics.fmean(bounds[groups[e.source]][1]["compute-bound"][0] <= e.log_ratio
                                <= bounds[groups[e.source]][1]["compute-bound"][1] for e in hard)

    assert hard_covered(uncertainty.left_out_bounds(errors, groups, strata=strata)) > hard_covered(
        uncertainty.left_out_bounds(errors, groups))


def test_each_source_counts_once_in_the_calibration_however_many_rows_it_has():
    """One source of 200 rows near 0 and four of 5 rows each, two at +0.3 and two at -0.3 (issue 27: each source
    weighted equally, not each row). At the nominal level the big source's rows, left out, are covered and the
    small ones' not: 91% of the rows but 1 source in 5. The calibration counts each source once, so it raises the
    level until the small sources are covered too. Deterministic rows: no false-failure probability."""
    offsets = {"s1": 0.3, "s2": 0.3, "s3": -0.3, "s4": -0.3}
    errors = [uncertainty.LoggedError("big", "compute-bound", 0.0001 * (k - 99.5)) for k in range(200)]
    errors += [uncertainty.LoggedError(s, "compute-bound", off + 0.005 * (k - 2)) for s, off in offsets.items()
               for k in range(5)]
    groups = {s: frozenset({s}) for s in ("big", *offsets)}
    bounds = uncertainty.left_out_bounds(errors, groups)
    nominal = {held: uncertainty.interval_quantiles(
        [(e.regime, e.log_ratio) for e in errors if e.source not in held], 0.8)["compute-bound"] for held in bounds}
    rows_inside = statistics.fmean(nominal[groups[e.source]][0] <= e.log_ratio <= nominal[groups[e.source]][1]
                                   for e in errors)
    assert rows_inside == pytest.approx(200 / 220) and uncertainty.source_coverage(errors, groups, 0.8) == 0.2
    levels = uncertainty.source_calibrated_levels(errors, groups)
    assert levels["compute-bound"] > 0.9 and uncertainty.source_coverage(errors, groups, levels) >= 0.8


def test_the_calibration_target_is_itself_calibrated_on_sources_left_out():
    """Twelve sources of 20 rows, each shifted by its own offset (-0.55 .. +0.55) around a spread of +-0.095. Levels
    calibrated on eleven sources (``source_calibrated_levels``) cover only 78.3% of the twelfth's rows, source by
    source: the least level that covers the sources at hand is chosen on them. Calibrating the target of that
    choice the same way (``nested_calibrated_levels``, which ``left_out_bounds`` uses) covers 80.8%, at a level no
    lower. Deterministic rows: no false-failure probability."""
    errors = [uncertainty.LoggedError(f"s{s}", "compute-bound", 0.1 * (s - 5.5) + 0.01 * (k - 9.5))
              for s in range(12) for k in range(20)]
    groups = {f"s{s}": frozenset({f"s{s}"}) for s in range(12)}
    bounds = uncertainty.left_out_bounds(errors, groups)

    def held_out_coverage(quantiles_of):
        return statistics.fmean(
            lo <= e.log_ratio <= hi for held in set(groups.values())
            for lo, hi in [quantiles_of(held)["compute-bound"]] for e in errors if e.source in held)

    def single(held):
        others = [e for e in errors if e.source not in held]
        return uncertainty.interval_quantiles([(e.regime, e.log_ratio) for e in others],
                                              uncertainty.source_calibrated_levels(others, groups))

    assert held_out_coverage(single) == pytest.approx(0.783, abs=1e-3)
    assert held_out_coverage(lambda held: bounds[held][1]) == pytest.approx(0.808, abs=1e-3)
    assert (uncertainty.nested_calibrated_levels(errors, groups)["compute-bound"]
            >= uncertainty.source_calibrated_levels(errors, groups)["compute-bound"])


def test_each_regime_is_calibrated_on_its_own_rows():
    """Mondrian calibration (Vovk et al. 2005, ch. 4): ten sources, each with 20 compute-bound rows that every
    source shares (errors -0.05, 0 or +0.05: ties at the quantiles, so their intervals cover them all) and 20
    communication-bound rows spread +-0.1 around the source's own offset (-0.45 .. +0.45), as in the test above.
    One level for both regimes, calibrated on the rows pooled, stays at the nominal 80% (86% of the rows
    covered, leave-one-source-out) and covers only 72% of the communication-bound rows: the compute-bound rows'
    easy coverage hides them. Per regime, each regime's rows are covered as promised; the compute-bound level
    stays nominal. Deterministic rows: no false-failure probability."""
    groups = {f"s{s}": frozenset({f"s{s}"}) for s in range(10)}
    errors = [uncertainty.LoggedError(f"s{s}", "compute-bound", -0.05 if k < 2 else 0.05 if k >= 18 else 0.0)
              for s in range(10) for k in range(20)]
    errors += [uncertainty.LoggedError(f"s{s}", "communication-bound", 0.1 * (s - 4.5) + 0.01 * (k - 9.5))
               for s in range(10) for k in range(20)]
    comm = "communication-bound"
    pooled = min(level for level in uncertainty.LEVEL_GRID if uncertainty.source_coverage(errors, groups, level) >= 0.8)
    assert pooled == 0.8 and uncertainty.source_coverage(errors, groups, pooled, comm) == pytest.approx(0.72)
    levels = uncertainty.source_calibrated_levels(errors, groups)
    assert levels["compute-bound"] == 0.8 and levels[comm] > pooled and levels["all"] == levels[comm]
    assert all(uncertainty.source_coverage(errors, groups, levels, reg) >= 0.8 for reg in uncertainty.REGIMES)
    held, q = groups["s9"], uncertainty.left_out_bounds(errors, groups)[groups["s9"]][1]
    others = [e for e in errors if e.source not in held]
    assert q == uncertainty.interval_quantiles([(e.regime, e.log_ratio) for e in others],
                                               uncertainty.nested_calibrated_levels(others, groups))


def test_validate_reports_skill_coverage_and_width_beside_the_baselines(capsys):
    """The whole corpus (the same run as the stored intervals): each row predicted or listed as skipped; the
    80% intervals, fitted without each row's source, cover at least 78.5% of all the rows left out (issue 18's
    goal is 80%: met on the first 289 rows, missed by about a point since; with EC2's cap per TCP flow the
    p3.16xlarge rows of horovod/horovod#396 are inside their intervals and those of aws-samples/
    deep-learning-models#2 above theirs, one row fewer covered than without the cap; sim/validation/README.md,
    Caveats)."""
    assert main(["validate", "--json", "--no-cross-validation"]) == 0
    out = json.loads(capsys.readouterr().out)["corpus_validation"]
    assert out["rows"] + out["skipped_rows"] == len(load_corpus())
    assert len({p["source"] for p in out["predictions"]}) >= 5
    assert out["coverage"] >= 0.785  # per regime it may fall short: the READMEs quote those figures as they are
    levels, covered = out["conformal_levels"], out["conformal_level_coverage"]  # per regime (Mondrian)
    assert all(set(v) == {*uncertainty.REGIMES, "all"} and v["all"] == max(v[r] for r in uncertainty.REGIMES)
               for v in levels.values())
    assert out["conformal_levels_short"] == [f"{key} {reg}" for key, by_regime in covered.items()
                                             for reg, c in by_regime.items() if c < out["interval_level"]]
    assert all(c >= out["interval_level"] or levels[key][reg] == uncertainty.LEVEL_GRID[-1]
               for key, by_regime in covered.items() for reg, c in by_regime.items())
    stored = json.loads(uncertainty.CROSS_VALIDATION_FILE.read_text())["intervals"]["summary"]
    assert figures.corpus_figures_markdown(out) == figures.corpus_figures_markdown(stored)  # the READMEs' too
    assert out["skill"] == pytest.approx(out["mape_left_out"] / out["mape_linear"])
    groups = {(t["group"], t["name"]) for t in out["table"]}
    assert {("all", "all"), ("regime", "compute-bound"), ("regime", "communication-bound")} <= groups
    assert all({"mape_in_sample", "mape_left_out", "mape_linear", "mape_alpha_beta"} <= set(t) for t in out["table"])
    assert 0 <= out["coverage"] <= 1
    speedup = out["speedup"]  # the paired speed-up intervals, beside the naive ones, on the pairs left out
    assert speedup["pairs"] == len(out["pairs"]) > 0
    assert speedup["coverage"] == pytest.approx(sum(p["covered"] for p in out["pairs"]) / speedup["pairs"])
    assert speedup["naive_coverage"] == pytest.approx(
        sum(p["naive_covered"] for p in out["pairs"]) / speedup["pairs"])
    assert speedup["median_half_width"] > 0 and speedup["naive_median_half_width"] > 0
    assert set(out["speedup_by_regime"]) == {"compute-bound", "communication-bound"}
    assert sum(f["pairs"] for f in out["speedup_by_source"].values()) == speedup["pairs"]
    assert main(["validate", "--no-cross-validation", "--quiet"]) == 0  # the second run reuses the first's
    text = capsys.readouterr().out
    assert "skill (left-out MAPE / linear scaling's)" in text and "median half-width" in text
    assert f"speed-ups, all ({speedup['pairs']} pairs of rows of one table): 80% paired intervals cover " \
           f"{100 * speedup['coverage']:.1f}%, median half-width {100 * speedup['median_half_width']:.1f}%" in text
    assert "in-sample and left out are equal by construction for every source but birder-neurips2023" in text
    header = next(line for line in text.splitlines() if line.startswith("group "))
    rows = [line for line in text.splitlines() if line.split(" ", 1)[0] in ("all", "regime", "source")]
    assert len(rows) == len(out["table"]) and "deepspeed-onebit-adam-blog" in text  # a name longer than "name"'s
    assert {len(line) for line in rows} == {len(header)}  # every column in line, however long a source's name


def ib_rows(tmp_path):
    """The public InfiniBand rows alone: a group cross-validation of one site, cheap enough for a test."""
    lines = paper.PUBLIC_CSV.read_text().splitlines()
    path = tmp_path / "ib.csv"
    path.write_text("\n".join(line for line in lines if "ib-hdr" in line or line.startswith("model")) + "\n")
    return path


def test_validate_prints_fit_and_group_cross_validation_of_whole_groups(tmp_path, capsys):
    """`birder validate --csv`: the fit, and each optimizer and each GPU count left out in turn (the site refitted
    without it predicts it); columns with one value (model, batch, network here) are reported as untestable, not
    silently skipped. One run of the command serves both (each group cross-validation refits the site six times),
    and the strict-JSON check of the default path, through cross-validation and the corpus (whose constants include
    infinite ones: no incast onset), which browsers' JSON.parse must read."""
    assert main(["validate", "--json", "--csv", str(ib_rows(tmp_path))]) == 0
    out = strict_json(capsys.readouterr().out)
    assert out["fit_mape"] < 0.10 and out["cross_validated_mape"] > out["fit_mape"]
    assert {t["gpus"] for t in out["speedup_trend"]} == {8, 16, 32, 64}
    cv = site_fit.CrossValidation.from_dict(out["cross_validation"])
    assert json.dumps(cv.as_dict()) == json.dumps(out["cross_validation"])  # the JSON round-trips
    assert {(g.left_out, str(g.value)) for g in cv.groups} == {
        ("optimizer", "birder"), ("optimizer", "onebit-adam"), ("optimizer", "sgdm"),
        ("gpus", "16"), ("gpus", "32"), ("gpus", "64")}
    assert set(cv.untestable_columns) == {"model", "batch_per_gpu", "network"}
    for g in cv.groups:
        assert g.rows == 3 and "birder-paper-ib" in g.constants
        held = [r for r in cv.rows if r.left_out == f"{g.left_out}={g.value}"]
        assert len(held) == 3 and all(str(getattr(r, g.left_out)) == str(g.value) for r in held)
    assert cv.mape == pytest.approx(paper.mape(cv.rows))
    assert 0 < cv.mape < 0.25
    table = paper.rows(ib_rows(tmp_path))
    assert list(cv.rows[0].as_dict())[-1] == "left_out"  # a held-out row says which group; a plain row does not
    assert "left_out" not in paper.compare(table[:1], table=table)[0].as_dict()
    assert main(["validate", "--json", "--no-cross-validation"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "cross_validation" not in out and out["fit_mape"] < 0.10
    # the same run carries the order check and the paper's claims on both bases (site profiles, generic presets)
    table = paper.rows()
    checks = [optimizer_order.order_check(table, basis) for basis in optimizer_order.BASES]
    assert [c["basis"] for c in out["claims_check"]] == list(optimizer_order.BASES)
    for got in out["claims_check"]:
        assert got["claims"] == len(paper_claims.claims()) == len(got["verdicts"])
        assert got["held"] == sum(v["holds"] for v in got["verdicts"])
    assert [c["basis"] for c in out["order_check"]] == list(optimizer_order.BASES)
    for got, check in zip(out["order_check"], checks, strict=True):
        assert got["orders_wrong"] == check.orders_wrong
        assert got["mape_multi_node"] == pytest.approx(paper.mape(check.multi_node))


def test_predict_intervals_follow_the_regime_and_the_measured_node():
    """A prediction on a fast network and one on a slow network take their regime's bounds times their own
    propagated widths (the slow one's wider); the interval always holds the prediction."""
    fast = api.predict_config("resnet50", 4, "ib-ndr", single_node_throughput=3693)
    slow = api.predict_config("gpt2", 8, "10gbe", single_node_throughput=300)
    unmeasured = api.predict_config("gpt2", 8, "10gbe")
    assert fast["interval_basis"].startswith("compute-bound by an alpha-beta ring, measured node")
    assert slow["interval_basis"].startswith("communication-bound by an alpha-beta ring, measured node")
    assert "unmeasured node" in unmeasured["interval_basis"]
    for out in (fast, slow, unmeasured):
        assert out["throughput_low"] <= out["throughput"] <= out["throughput_high"]
        assert out["interval_level"] == 0.8
    assert slow["relative_error"] > fast["relative_error"]
    low, _ = uncertainty.stored_intervals()["measured_node"]["compute-bound"]  # on the normalised residual
    down = fast["interval_model_width"][0]
    assert fast["throughput_low"] == pytest.approx(min(fast["throughput"], fast["throughput"] * math.exp(
        low * down if low < 0 else low * fast["interval_model_width"][1])))


@pytest.mark.parametrize("readme", ["docs/predict.md", "sim/README.md"])
def test_readme_figures_are_the_stored_runs(readme):
    """The READMEs quote the corpus figures as sim.figures.corpus_figures_markdown writes them from the stored
    run (which test_validate_reports_skill_coverage_and_width_beside_the_baselines checks against a fresh one)."""
    root = Path(__file__).resolve().parents[1]
    text = (root / readme).read_text()
    block = text.split("tests/test_sim_corpus_validation.py -->\n", 1)[1].split("\n<!-- end corpus figures -->")[0]
    stored = json.loads(uncertainty.CROSS_VALIDATION_FILE.read_text())["intervals"]["summary"]
    assert block == figures.corpus_figures_markdown(stored)


def test_the_site_constants_table_is_sites_toml():
    """sim/README.md's table of fitted constants against sim/presets/sites.toml: every row, each value equal to
    the stored constant at the precision the table prints (so a stale figure fails even when it is close)."""
    from sim.hardware import SITES

    text = (Path(__file__).resolve().parents[1] / "sim" / "README.md").read_text()
    table = text.split("## Site profiles", 1)[1].split("| constant | where | value |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 7
    quoted_keys = set()
    for row in rows:
        keys, site, values = re.fullmatch(r"\| (`\w+`(?:, `\w+`)*) \| `\[([\w-]+)\]` \| ([^|]+) \|.*", row).groups()
        keys = re.findall(r"`(\w+)`", keys)
        printed = [v.strip() for v in values.split(",")]
        assert len(keys) == len(printed), row
        quoted_keys |= {(site, key) for key in keys}
        for key, quoted in zip(keys, printed, strict=True):
            number, _, unit = quoted.partition(" ")
            stored = SITES[site][key] / (1e6 if unit == "MB" else 1.0)
            decimals = len(number.partition(".")[2])
            assert f"{stored:.{decimals}f}" == number, (key, site, quoted)
    assert {(site, key) for site, keys in site_fit.FITTED.items() for key in keys} <= quoted_keys  # none unquoted


def test_the_512_node_table_of_the_sim_readme_is_the_simulators():
    """sim/README.md's ResNet-50 at 512 nodes, each cell as `birder predict` gives it now (to 0.1%)."""
    text = (Path(__file__).resolve().parents[1] / "sim" / "README.md").read_text()
    rows = re.findall(r"^\| `([\w-]+)` \| ([\d,]+) \| ([\d,]+) \|$", text, flags=re.M)
    assert {net for net, _, _ in rows} == {"10gbe", "100gbe", "ib-ndr", "birder-paper-10gbe"}
    for net, birder, sgdm in rows:
        for optimizer, quoted in (("birder", birder), ("sgdm", sgdm)):
            predicted = api.predict_config("resnet50", 512, net, optimizer)["throughput"]
            assert float(quoted.replace(",", "")) == pytest.approx(predicted, rel=1e-3), (net, optimizer)


@pytest.mark.parametrize("model, network, measured", [("resnet50", "ib-ndr", 3693), ("bert-large", "ib-hdr", 500),
                                                      ("gpt2", "10gbe", 300)])
def test_a_measured_node_bounds_the_interval(model, network, measured):
    """On the measured node itself the prediction is the measurement, with no interval; on n such nodes the upper
    end never exceeds n times the measurement (linear scaling), however wide the regime's bounds."""
    one = api.predict_config(model, 1, network, single_node_throughput=measured)
    assert one["throughput_low"] == one["throughput"] == one["throughput_high"] == pytest.approx(measured)
    for nodes in (2, 8, 64):
        out = api.predict_config(model, nodes, network, single_node_throughput=measured)
        assert out["throughput_low"] <= out["throughput"] <= out["throughput_high"] <= nodes * measured * (1 + 1e-12)


def test_the_p3_16xlarge_thread_rows_are_predicted_on_ec2s_flow_cap_not_at_the_line_rate():
    """sim/validation/README.md's caveat on horovod/horovod#396: without EC2's cap per TCP flow (the rows' network
    as a generic 25 GbE preset, no cloud) every row is predicted far above its figure; with the cap and NCCL's one
    socket per connection before 2.4.8 (the simulator's prediction now) each comes within 6%. The cap inside a
    cluster placement group (10 Gb/s, which the thread's rows do not state) would raise each prediction by about
    53-57% (the READMEs quote these ranges: 62-74% too high at the line rate)."""
    rows = [r for r in load_corpus() if r.source == "horovod-issue-396"]
    assert len(rows) == 7
    for row in rows:
        no_cloud = replace(row, notes=row.notes.replace("cloud=ec2", "no cloud"))
        in_group = replace(row, notes=row.notes + " placement_group=yes")
        capped = corpus_setup.corpus_predict(row, False).throughput
        assert 1.615 < corpus_setup.corpus_predict(no_cloud, False).throughput / row.throughput < 1.74
        assert abs(capped / row.throughput - 1) < 0.06
        assert 1.53 < corpus_setup.corpus_predict(in_group, False).throughput / capped < 1.575


def _extra(log_ratio: float, groups: dict) -> dict:
    """Ten first-contact-like rows of one source "fc-x", already predicted (``first_contact.calibration_rows``'
    shape), half of each interval regime, all with the same normalised residual."""
    rows = [{"source": "fc-x", "regime": uncertainty.REGIMES[i % 2], "log_ratio": log_ratio, "cap": math.inf,
             "measured_regime": uncertainty.REGIMES[i % 2], "down": 0.1, "up": 0.1, "predicted": 100.0,
             "measured": 100.0 * math.exp(0.1 * log_ratio), "linear": 1e9} for i in range(10)]
    return {"sources": ["fc-x"], "rows": rows, "groups": groups}


def test_first_contact_rows_calibrate_beside_the_corpus_but_never_their_own_interval(public):
    """Rows already scored at first contact join the corpus's calibration (``calibration_extra``): moving their
    residuals moves a corpus source's interval, never their own; a first-contact source that names a corpus
    source in ``independent_of`` is held out with it, so then that corpus source's interval does not move."""
    ib = [r for r in public if r.transport == "ib"]
    corpus = tuple(ib + [replace(r, source="other") for r in public if r.transport == "tcp"])
    runs = {(ratio, linked): loso.corpus_validation(corpus, "test", calibration_extra=_extra(
        ratio, {"fc-x": ["fc-x", "other"] if linked else ["fc-x"]})) for ratio in (-3.0, 3.0) for linked in (0, 1)}
    for linked in (0, 1):
        low, high = runs[-3.0, linked], runs[3.0, linked]
        assert [r[4:6] for r in low.calibration_extra] == [r[4:6] for r in high.calibration_extra]  # their own
        moved = {p.source for a, p in zip(low.rows, high.rows, strict=True) if (a.low, a.high) != (p.low, p.high)}
        assert ("other" in moved) == (not linked)
        figures_of = low.summary()["first_contact_left_out"]
        assert figures_of["rows"] == 10 and figures_of["sources"] == 1
    assert loso.corpus_validation(corpus, "test").summary()["first_contact_left_out"] is None
