"""The suite bites: each deliberately wrong implementation is rejected by the check named for it."""

import numpy as np
import pytest

from proofs_checks.mutants import MUTANTS
from proofs_checks.runner import run_checks
from proofs_checks.target import load_target


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_is_rejected_by_its_check(name):
    impl, catching = MUTANTS[name]
    report = run_checks(load_target(impl), names=list(catching), progress=False)
    for result in report.results:
        assert not result.passed, f"{name} passed {result.name}: {result.detail}"
    assert not report.passed


def test_mutants_are_reachable_from_the_command_line_name():
    target = load_target("proofs_checks.mutants:lerp_momentum")
    assert target.obj is MUTANTS["lerp_momentum"][0]


def test_lerp_counterexample_of_the_notes_is_a_real_float32_violation():
    """g = 3.0 for 14 steps with beta = 0.9 (notes/anchor_verify.md §2.5): lerp gives |m| > b, the EMA does not."""
    from proofs_checks.bounds import run_sequence

    grads = np.full((14, 1, 1), 3.0, np.float32)
    lerp = run_sequence(load_target(MUTANTS["lerp_momentum"][0]), grads, 0.9, None)
    plain = run_sequence(load_target("proofs_checks.independent"), grads, 0.9, None)
    assert any(abs(v.m[0, 0]) > v.b[0, 0] for v in lerp)
    assert all(abs(v.m[0, 0]) <= v.b[0, 0] for v in plain)


def test_the_hypothesis_hunt_finds_the_lerp_violation_on_its_own_and_nothing_on_the_reference():
    """ratio_bound's seeded sweep already catches lerp; the derandomized Hypothesis search must too, by itself."""
    from proofs_checks.bounds import hunt

    found = hunt(load_target(MUTANTS["lerp_momentum"][0]))
    assert found is not None and found.startswith("beta=")
    assert hunt(load_target()) is None
