"""Per-step jitter (sim/stragglers.py, presets/step_jitter.toml): the combined spread a step waits on, the nested
fit that chooses the generic figure, the stored fit it must equal, and how users set or turn it off."""

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from doc_text import prose

from sim import uncertainty
from sim.network import cluster
from sim.stragglers import (
    GPU_SPEED_CV,
    STEP_JITTER,
    STEP_JITTER_CV,
    STEP_JITTER_GRID,
    combined_cv,
    expected_max_normal,
    step_cv,
    straggler_factor,
)
from sim.validation import corpus_setup
from sim.validation import leave_one_source_out as loso

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("gpus,seed", [(8, 18), (64, 1018)])
def test_expected_step_with_a_persistent_spread_and_per_step_jitter_is_the_combined_sigmas(gpus, seed):
    """Monte Carlo, seeded: jobs draw each GPU's persistent offset s_i once and a fresh e_it every step; the mean
    slowest step over jobs and steps is 1 + sigma E[M_p] with sigma = sqrt(cv_speed^2 + cv_step^2). Job means are
    i.i.d., so their average is normal to within the CLT; a miss beyond 6.5 standard errors has probability
    2 Phi(-6.5) < 1e-10 (each of the two cases; the seed fixes the draw). The plain sum cv_speed + cv_step, and
    the persistent spread alone, lie far outside that band: the test tells the three apart."""
    rng = np.random.default_rng(seed)
    cv_speed, cv_step, jobs, steps = GPU_SPEED_CV, 0.1, 4000, 25
    s = rng.normal(0.0, cv_speed, size=(jobs, 1, gpus))
    e = rng.normal(0.0, cv_step, size=(jobs, steps, gpus))
    job_means = (1 + s + e).max(axis=2).mean(axis=1)
    estimate, stderr = job_means.mean(), job_means.std(ddof=1) / math.sqrt(jobs)
    expected = 1 + combined_cv(cv_speed, cv_step) * expected_max_normal(gpus)
    assert abs(estimate - expected) <= 6.5 * stderr
    for wrong in (cv_speed + cv_step, cv_speed):
        assert abs(estimate - (1 + wrong * expected_max_normal(gpus))) > 20 * stderr


def test_step_factor_against_a_measured_node_keeps_its_form_with_sigma():
    sigma = combined_cv(GPU_SPEED_CV, STEP_JITTER_CV)
    assert sigma == pytest.approx(math.sqrt(GPU_SPEED_CV ** 2 + STEP_JITTER_CV ** 2), rel=1e-15)
    assert cluster("ib-hdr", 4).straggler_cv() == sigma
    assert straggler_factor(32, 8, sigma) == pytest.approx(
        (1 + sigma * expected_max_normal(32)) / (1 + sigma * expected_max_normal(8)), rel=1e-15)


def test_jitter_averages_over_accumulated_micro_batches_and_the_spread_does_not(capsys):
    """Monte Carlo, seeded: each GPU's step of K micro-batches is the sum of K draws of (1 + s_i + e_ik), s_i once
    per job, e_ik fresh each micro-batch; the mean slowest step over K is 1 + sigma E[M_p] with sigma =
    sqrt(cv_speed^2 + cv_step^2 / K) (``step_cv``). Same CLT band as above (false failure < 1e-10); the
    unaveraged sigma lies far outside it. A prediction with K micro-batches reports the factor of that sigma."""
    from birder.cli import main

    rng = np.random.default_rng(2027)
    gpus, k, cv_speed, cv_step, jobs = 64, 16, GPU_SPEED_CV, 0.1, 4000
    s = rng.normal(0.0, cv_speed, size=(jobs, 1, gpus))
    e = rng.normal(0.0, cv_step, size=(jobs, k, gpus)).mean(axis=1, keepdims=True)
    job_slowest = (1 + s + e).max(axis=2)[:, 0]
    estimate, stderr = job_slowest.mean(), job_slowest.std(ddof=1) / math.sqrt(jobs)
    assert abs(estimate - (1 + step_cv(cv_speed, cv_step, k) * expected_max_normal(gpus))) <= 6.5 * stderr
    assert abs(estimate - (1 + combined_cv(cv_speed, cv_step) * expected_max_normal(gpus))) > 20 * stderr
    assert step_cv(cv_speed, cv_step, 1) == combined_cv(cv_speed, cv_step)
    assert step_cv(0.02, 0.0, 7) == 0.02  # no jitter: nothing to average
    with pytest.raises(ValueError, match="micro_batches"):
        step_cv(0.02, 0.04, 0)
    c = cluster("ib-hdr", 16)
    args = ["predict", "--json", "--quiet", "--model", "bert-large", "--nodes", "16", "--network", "ib-hdr",
            "--single-node-throughput", "400", "--accumulation-steps", "4"]
    out = {}
    for jitter in ("0.1", "0"):
        assert main(args + ["--step-jitter-cv", jitter]) == 0
        out[jitter] = json.loads(capsys.readouterr().out)
    assert out["0.1"]["straggler_factor"] == pytest.approx(
        straggler_factor(128, 8, step_cv(c.gpu_speed_cv, 0.1, 4)), rel=1e-12)
    assert out["0.1"]["straggler_factor"] < straggler_factor(128, 8, combined_cv(c.gpu_speed_cv, 0.1))
    assert out["0"]["straggler_factor"] == pytest.approx(straggler_factor(128, 8, c.gpu_speed_cv), rel=1e-12)
    assert not any("micro-batch" in sentence for sentence in out["0.1"]["unmodelled"])


def test_fit_picks_the_unbiased_grid_value_and_leaves_each_group_out():
    """Two sources: a's rows are unbiased at 0.04, b's at 0.12; together their median is at 0.08. Each source's
    nested value is the other's, never its own; a group that holds every source leaves nothing to fit on: no
    jitter (0), never its own rows' value."""
    grid = STEP_JITTER_GRID
    measured = [100.0] * 6
    sources = ["a"] * 3 + ["b"] * 3

    # each source optimistic below its unbiased value, pessimistic above it
    predicted = {cv: [100.0 * math.exp(0.04 - cv)] * 3 + [100.0 * math.exp(0.12 - cv)] * 3 for cv in grid}
    groups = {"a": frozenset({"a"}), "b": frozenset({"b"})}
    fit = loso.nested_step_jitter(sources, measured, predicted, groups)
    assert fit["a"] == 0.12 and fit["b"] == 0.04
    assert fit["all"] == 0.08  # the median of six: midway between the middle two
    linked = {"a": frozenset({"a", "b"}), "b": frozenset({"a", "b"})}
    assert loso.nested_step_jitter(sources, measured, predicted, linked) == {"all": 0.08, "a": 0.0, "b": 0.0}
    with pytest.raises(ValueError, match="no rows"):
        loso.step_jitter_fit([], {cv: [] for cv in grid})


def test_shipped_figure_is_the_stored_fit_on_every_source():
    """presets/step_jitter.toml holds what the corpus fit on all sources chose (sim/presets/cross_validation.json,
    regenerated by `python -m sim.validation.stored`), with the provenance's row and source counts."""
    intervals = json.loads(uncertainty.CROSS_VALIDATION_FILE.read_text())["intervals"]
    stored = intervals["summary"]["step_jitter"]
    assert stored["grid"] == list(STEP_JITTER_GRID) and stored["criterion"] == loso.STEP_JITTER_CRITERION
    assert STEP_JITTER_CV == stored["all_sources"]
    assert STEP_JITTER["provenance"] == (f"fitted on the validation corpus, {stored['rows']} rows, "
                                         f"{stored['sources']} sources; evaluated leave-one-source-out")
    assert set(stored["by_held_out_source"]) == {t["name"] for t in intervals["table"] if t["group"] == "source"}
    assert len(stored["by_held_out_source"]) == stored["sources"]
    with (ROOT / "sim" / "presets" / "step_jitter.toml").open("rb") as f:
        assert tomllib.load(f)["step_jitter"]["cv"] == STEP_JITTER_CV
    readme = prose("sim", "README.md")
    assert f"The shipped figure, the fit on all sources, is cv_step = {STEP_JITTER_CV:.2f}" in readme


def test_site_profiles_take_no_generic_jitter():
    """A site profile's fitted constants absorb its own step-to-step noise (setting the jitter on the command line
    or in a cluster file: tests/test_sim_stragglers.py, with the speed spread)."""
    site = cluster("birder-paper-10gbe", 4)
    assert site.step_jitter_cv == 0.0 and ("step jitter", "0 (site profile: its fitted constants absorb its "
                                           "step-to-step noise)") in site.provenance


def test_stored_fits_give_the_figures_of_a_fresh_fit():
    """`birder validate` reads the stored fits instead of predicting every row on the whole grid: on a two-source
    corpus, feeding a fresh run's fits back gives the same rows, intervals and summary."""
    from dataclasses import replace

    from sim.validation.corpus import load_corpus

    public = [r for r in load_corpus() if r.source == corpus_setup.PAPER_SOURCE]
    corpus = tuple(r for r in public if r.transport == "ib") + tuple(
        replace(r, source="other") for r in public if r.transport == "tcp")
    fresh = loso.corpus_validation(corpus, "test")
    assert set(fresh.step_jitter["fitted_without"]) == {"birder-neurips2023|other"}
    again = loso.corpus_validation(corpus, "test", step_jitter_fits=json.loads(json.dumps(fresh.step_jitter)))
    assert again.rows == fresh.rows and again.summary() == fresh.summary()
