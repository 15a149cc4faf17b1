"""The third set of wrong implementations (proofs_checks/mutants_sampled.py, one per class of bug that showed only
away from the suite's old fixed points): each is rejected by the check that names its class; each correct
alternative convention (a read-only mapping state, keyword-only calls, a state read both ways, a fused line 5)
passes. And the sampled space holds the edges the checks claim to cover."""

import numpy as np
import pytest

from proofs_checks import mutants_sampled, structure
from proofs_checks.runner import run_checks, select
from proofs_checks.target import load_target
from proofs_checks.trajectories import FLOAT32_MAX, SETTINGS, SMALLEST_NORMAL, sampled_settings

# The quantizer grids, the Theorem 1 run and the Hypothesis hunts judge quantize and lines 5-6 at length, which the
# conventions below do not touch; fused_momentum, which changes line 5, runs every check.
HEAVY = {"theorem1_bound", "theorem1_decay_measured", "long_run_identities", "lemma1_error_second_moment",
         "premise_frequency", "eq5_probability_exact", "lemma1_moments", "eq5_support", "ratio_bound",
         "contract_float32_ratio"} | set(structure.SLOW)


@pytest.mark.parametrize("name", list(mutants_sampled.MUTANTS))
def test_sampled_mutant_is_rejected_by_the_check_naming_its_class(name):
    impl, clause = mutants_sampled.MUTANTS[name]
    report = run_checks(load_target(impl), names=[clause], progress=False)
    assert report.results[0].status == "fail", report.results[0].detail


@pytest.mark.parametrize("name", [n for n in mutants_sampled.CORRECT if n != "fused_momentum"])
def test_correct_convention_passes(name):
    report = run_checks(load_target(mutants_sampled.CORRECT[name]),
                        names=[c.name for c in select() if c.name not in HEAVY], progress=False)
    assert report.passed, [(r.name, r.detail) for r in report.results if not r.passed]


def test_a_fused_line5_passes_the_checks_on_lines_5_6_with_its_ulp_excess_reported():
    names = ["line5_6_moments", "ratio_bound", "eq14_decomposition", "error_bounds", "contract_float32_ratio"]
    report = run_checks(load_target(mutants_sampled.CORRECT["fused_momentum"]), names=names, progress=False)
    assert report.passed, [(r.name, r.detail) for r in report.results if not r.passed]
    ratio = next(r for r in report.results if r.name == "contract_float32_ratio")
    assert ratio.detail.startswith("accepted: |m| > b by a last ulp")


def test_the_positional_and_key_mutants_name_what_differs():
    report = run_checks(load_target(mutants_sampled.MUTANTS["positional_order_swapped"][0]), names=["contract_calls"],
                        progress=False)
    assert "u_server=None, u_worker=None" in report.results[0].detail
    report = run_checks(load_target(mutants_sampled.MUTANTS["stale_keys"][0]), names=["contract_calls"],
                        progress=False)
    assert "by key than by attribute" in report.results[0].detail


def test_the_sampled_space_holds_its_edges():
    """What the checks' descriptions claim: the extremes of beta and eps, every T0 mode, big n and d, long runs,
    idle workers, constant draws, odd lengths and magnitudes up to the largest finite float32."""
    assert sampled_settings() == sampled_settings()  # seeded
    betas = {s.beta for s in SETTINGS}
    assert {0.999999, 1e-6, 0.3} <= betas and min(betas) < 0.5
    assert min(s.eps for s in SETTINGS) == SMALLEST_NORMAL
    T0s = {T0 for s in SETTINGS for T0 in (s.T0_path or (s.T0,))}
    assert {None, 0, 1, 1000, 10**6} <= T0s and any(s.T0_path for s in SETTINGS)
    assert any(s.T0 is not None and s.T0 > s.T for s in SETTINGS)  # T0 beyond the run
    assert max(s.n for s in SETTINGS) > 4096 and max(s.d for s in SETTINGS) > 65536
    assert max(s.T for s in SETTINGS) > 1000
    assert any(s.idle_workers for s in SETTINGS) and any(s.draws == "constant" for s in SETTINGS)
    assert any(s.d % 2 for s in SETTINGS if s.d > 1) and min(s.d for s in SETTINGS) == 1
    assert np.log10(FLOAT32_MAX) in [s.log10_range[1] for s in SETTINGS] or any(
        s.log10_range[1] >= np.log10(FLOAT32_MAX) - 0.01 for s in SETTINGS)
