"""The suite bites: each deliberately wrong implementation is rejected by the check named for it."""

from dataclasses import replace

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
    assert not replace(report, strict=True).passed  # lerp_momentum only under --strict: its check is a warning
    assert report.passed is all(r.severity == "warning" for r in report.results)


def test_mutants_are_reachable_from_the_command_line_name():
    target = load_target("proofs_checks.mutants:no_server_error")
    assert target.obj is MUTANTS["no_server_error"][0]
    assert load_target("proofs_checks.mutants:lerp_momentum").obj is MUTANTS["lerp_momentum"][0]


def test_lerp_counterexample_of_the_notes_is_a_real_float32_violation():
    """g = 3.0 for 14 steps with beta = 0.9 (a known float32 counterexample): lerp gives |m| > b, the EMA does not."""
    from proofs_checks.bounds import run_sequence

    grads = np.full((14, 1, 1), 3.0, np.float32)
    lerp = run_sequence(load_target(MUTANTS["lerp_momentum"][0]), grads, 0.9, None)
    plain = run_sequence(load_target("proofs_checks.independent"), grads, 0.9, None)
    assert any(abs(v.m[0, 0]) > v.b[0, 0] for v in lerp)
    assert all(abs(v.m[0, 0]) <= v.b[0, 0] for v in plain)


def test_the_hypothesis_hunt_finds_the_lerp_ulp_excess_on_its_own_and_nothing_on_the_reference():
    """The derandomized Hypothesis search finds lerp's last-ulp |m| > b by itself (what contract_float32_ratio
    reports), finds nothing beyond ratio_bound's rounding slack, and nothing at all on the reference."""
    from proofs_checks.bounds import hunt
    from proofs_checks.identities import RATIO_SLACK

    lerp = load_target(MUTANTS["lerp_momentum"][0])
    found = hunt(lerp)
    assert found is not None and found.startswith("beta=")
    assert hunt(lerp, RATIO_SLACK) is None
    assert hunt(load_target()) is None


def test_lerp_momentum_is_only_warned_where_g_minus_m_overflows():
    """Lerp's last-ulp excess is rounding (accepted), and its overflow of g - m near the largest float32, where the
    interface's beta m + (1 - beta) g is finite, is a warning: exit 0, exit 1 only under --strict."""
    names = ["line5_6_moments", "contract_float32_extremes"]
    report = run_checks(load_target(MUTANTS["lerp_momentum"][0]), names=names, progress=False)
    moments, extremes = report.results
    assert moments.passed and report.passed and report.warnings == ["contract_float32_extremes"]
    assert not extremes.passed and extremes.severity == "warning" and "first wrong at float32_max" in extremes.detail
    assert "-inf" in extremes.detail or " inf" in extremes.detail
    assert not replace(report, strict=True).passed


SUM_THEN_DIVIDE = '''
import numpy as np
F = np.float32
def quantize(y, u):
    return np.where(u < (np.clip(y, -1, 1) + F(1)) / F(2), F(1), F(-1))
def init(n, d):
    z = lambda: np.zeros((n, d), F)
    return dict(m=z(), b_hat=z(), b=z(), e=z(), server_e=np.zeros(d, F), t=0)
def step(state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
    g = np.broadcast_to(grads.sum(axis=0) / F(grads.shape[0]), grads.shape)  # the sum overflows at huge |g|
    t = state["t"] + 1
    m = beta * state["m"] + (1 - beta) * g
    b_hat = beta * state["b_hat"] + (1 - beta) * np.abs(g)
    b = np.maximum(state["b"], b_hat) if T0 is not None and t > T0 else b_hat
    y = m / (b + F(eps)) + state["e"]
    u = quantize(y, u_worker)
    z = u.sum(axis=0) / F(u.shape[0]) + state["server_e"]
    ub = quantize(z, u_server)
    return ub, dict(m=m, b_hat=b_hat, b=b, e=y - u, server_e=z - ub, t=t)
'''


def test_an_overflow_upstream_is_not_blamed_on_the_eps_convention(tmp_path):
    """Gradients summed over the workers before dividing (a DDP habit) overflow float32 where the interface's
    lines are finite: m and b are inf or NaN there, every convention of r then gives NaN as the error does, and a
    trial found contract_eps_convention blaming r = m / max(b, eps), which the implementation does not use. The
    cause is line 5-6's (which fails); the eps clause is not judged, and the warning resting on it is counted
    as not judged, not as a warning."""
    path = tmp_path / "sum_then_divide.py"
    path.write_text(SUM_THEN_DIVIDE)
    names = ["line5_6_moments", "line9_worker_error", "contract_eps_convention", "contract_float32_extremes"]
    report = run_checks(load_target(str(path)), names=names, progress=False)
    by_name = {r.name: r for r in report.results}
    assert by_name["line5_6_moments"].status == "fail"
    assert by_name["contract_eps_convention"].status == "blocked", by_name["contract_eps_convention"].detail
    assert "max(b, eps)" not in by_name["contract_eps_convention"].detail
    assert by_name["contract_float32_extremes"].status == "blocked"
    assert report.warnings == []
