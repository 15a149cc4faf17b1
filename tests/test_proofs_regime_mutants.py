"""The suite's second, unseen test (proofs_checks/mutants_regimes.py, written after the checks): every wrong
implementation is rejected with the named check as its one root cause (every other check passes or is "not
judged"), and every correct alternative, the template `birder check --template` prints included, passes all."""

import pytest

from proofs_checks import mutants_regimes, structure
from proofs_checks.registry import CHECKS
from proofs_checks.runner import run_checks, select
from proofs_checks.target import load_target

# The Theorem 1 run, the 2^24-draw grids and the Hypothesis hunts for |m| > b judge quantize, the long-run behaviour
# and lines 5-6 at length, which none of these mutants touches; leaving them out keeps each mutant's run near a
# second. Correct ones run every check.
HEAVY = {"theorem1_bound", "theorem1_decay_measured", "long_run_identities", "lemma1_error_second_moment",
         "premise_frequency", "eq5_probability_exact", "lemma1_moments", "eq5_support", "ratio_bound",
         "contract_float32_ratio"} | set(structure.SLOW)
KIND = {c.name: c.kind for c in CHECKS}


@pytest.mark.parametrize("name", list(mutants_regimes.MUTANTS))
def test_regime_mutant_is_rejected_by_its_check_as_the_one_root_cause(name):
    impl, expected = mutants_regimes.MUTANTS[name]
    report = run_checks(load_target(impl), names=[c.name for c in select() if c.name not in HEAVY], progress=False)
    failed = [r.name for r in report.results if r.status == "fail"]
    assert failed == [expected], (failed, [r.detail for r in report.results if r.status == "fail"])
    assert not report.passed
    assert all(r.status in ("pass", "n/a", "info", "blocked") for r in report.results if r.name != expected)


def test_the_root_causes_name_the_line_or_the_clause():
    """A user reads the cause: a contract clause for dtypes, purity, aliasing and eps; a line of Algorithm 1
    otherwise."""
    assert {KIND[check] for name, (_, check) in mutants_regimes.MUTANTS.items()
            if name.startswith(("float64", "in_place", "reused", "max_b"))} == {"contract"}
    assert KIND["line13_server_error"] == KIND["step_exact_draws"] == "paper"
    report = run_checks(load_target(mutants_regimes.MUTANTS["max_b_eps"][0]), names=["contract_eps_convention"],
                        progress=False)
    assert "r is not m / (b + eps)" in report.results[0].detail and "m / max(b, eps)" in report.results[0].detail
    report = run_checks(load_target(mutants_regimes.MUTANTS["no_eps_nan"][0]), names=["contract_eps_convention"],
                        progress=False)
    assert "fit r = m / b (no eps)" in report.results[0].detail and "NaN" not in report.results[0].detail
    report = run_checks(load_target(mutants_regimes.MUTANTS["wrapping_step_counter"][0]),
                        names=["line2_step_counter"], progress=False)
    assert "wraps" in report.results[0].detail


# The structural checks (seconds each) are run on correct ports in tests/test_proofs_structure_mutants.py.
EVERY = [c.name for c in select() if c.name not in structure.SLOW]


@pytest.mark.parametrize("name", list(mutants_regimes.CORRECT))
def test_correct_alternative_passes_every_check(name):
    report = run_checks(load_target(mutants_regimes.CORRECT[name]), names=EVERY, progress=False)
    assert report.passed, [(r.name, r.detail) for r in report.results if not r.passed]


def test_the_template_passes_every_check_from_its_file_path():
    from proofs_checks.cli import TEMPLATE

    report = run_checks(load_target(str(TEMPLATE)), names=EVERY, progress=False)
    assert report.passed, [(r.name, r.detail) for r in report.results if not r.passed]


def test_the_template_keeps_float32_under_numpy_scalar_coefficients():
    """A trial's `birder check --impl` of the printed template failed contract_history: a NumPy float64 beta (the
    interface allows NumPy floats) made its float32 arrays float64 under NumPy 2's promotion. The template is "a
    minimal correct implementation to start from", so it takes beta and eps as Python floats."""
    from proofs_checks.cli import TEMPLATE

    report = run_checks(load_target(str(TEMPLATE)), names=["contract_history"], progress=False)
    assert report.passed, [(r.name, r.detail) for r in report.results if not r.passed]
