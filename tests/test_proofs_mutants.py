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


PORT = '''
import numpy as np
F = np.float32
def quantize(y, u):
    return np.where(u < (np.clip(y, -1, 1) + F(1)) / F(2), F(1), F(-1))
def init(n, d):
    z = lambda: np.zeros((n, d), F)
    return dict(m=z(), b_hat=z(), b=z(), e=z(), server_e=np.zeros(d, F), t=0)
def step(state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
    beta, g = BETA, GRADS
    t = state["t"] + 1
    m = MOMENT
    b_hat = beta * state["b_hat"] + (1 - beta) * np.abs(g)
    b = np.maximum(state["b"], b_hat) if T0 is not None and t > T0 else b_hat
    y = RATIO + state["e"]
    u = quantize(y, u_worker)
    z = MEAN + state["server_e"]
    ub = quantize(z, u_server)
    return ub, dict(m=m, b_hat=b_hat, b=b, e=y - u, server_e=SERVER_E, t=t)
'''
AS_STATED = {"BETA": "float(beta)", "GRADS": "grads", "MOMENT": 'beta * state["m"] + (1 - beta) * g',
             "RATIO": "m / (b + F(eps))", "MEAN": "u.sum(axis=0) / F(u.shape[0])", "SERVER_E": "z - ub"}


def port(tmp_path, name: str, **lines: str):
    """A NumPy port written as the CONTRACT states Algorithm 1, with ``lines`` (keys of ``AS_STATED``) replaced."""
    source = PORT
    for key, text in {**AS_STATED, **lines}.items():
        source = source.replace(key, text)
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_target(str(path))


def test_an_overflow_upstream_is_not_blamed_on_the_eps_convention(tmp_path):
    """Gradients summed over the workers before dividing (a DDP habit) overflow float32 where the interface's
    lines are finite: m and b are inf or NaN there, every convention of r then gives NaN as the error does, and a
    trial found contract_eps_convention blaming r = m / max(b, eps), which the implementation does not use. The
    cause is line 5-6's (which fails); the eps clause is not judged, and the warning resting on it is counted
    as not judged, not as a warning."""
    # the sum overflows at huge |g|
    target = port(tmp_path, "sum_then_divide",
                  GRADS="np.broadcast_to(grads.sum(axis=0) / F(grads.shape[0]), grads.shape)")
    names = ["line5_6_moments", "line9_worker_error", "contract_eps_convention", "contract_float32_extremes"]
    report = run_checks(target, names=names, progress=False)
    by_name = {r.name: r for r in report.results}
    assert by_name["line5_6_moments"].status == "fail"
    assert by_name["contract_eps_convention"].status == "blocked", by_name["contract_eps_convention"].detail
    assert "max(b, eps)" not in by_name["contract_eps_convention"].detail
    assert by_name["contract_float32_extremes"].status == "blocked"
    assert report.warnings == []


@pytest.mark.parametrize("beta", ["float(beta)", "beta"])
def test_one_root_cause_is_reported_once_not_again_by_the_checks_that_rerun_it(tmp_path, beta):
    """A trial found line 13's flipped sign reported three times: by line13_server_error, and again by
    structure_shapes and contract_history, which rerun the per-step checks on other shapes and call histories.
    They now leave a per-step check that fails on the suite's own settings to the check that reported it (not
    judged), and still fail on a cause of their own: with beta kept as given, m turns float64 under
    contract_history's NumPy-scalar beta."""
    from proofs_checks.structure import PER_STEP

    target = port(tmp_path, "server_error_sign", BETA=beta, SERVER_E="ub - z")  # line 13 with its sign flipped
    report = run_checks(target, names=[*PER_STEP, "structure_shapes", "contract_history"], progress=False)
    by_name = {r.name: r for r in report.results}
    failed = sorted(r.name for r in report.results if r.status == "fail")
    assert by_name["structure_shapes"].status == "blocked", by_name["structure_shapes"].detail
    assert "not run again: line13_server_error" in by_name["structure_shapes"].detail
    if beta == "float(beta)":
        assert failed == ["line13_server_error"], failed
    else:
        assert failed == ["contract_history", "line13_server_error"], failed
        assert by_name["contract_history"].detail.startswith("on call histories: contract_dtypes: m is float64")


ORDER_CHECKS = ["line5_6_moments", "line9_worker_error", "line13_server_error", "contract_eps_convention",
                "contract_operation_order"]


@pytest.mark.parametrize("name, lines, differing", [
    ("reciprocal_multiply", {"RATIO": "m * (F(1) / (b + F(eps)))"}, "line 9 (e)"),
    ("ratio_in_float64", {"RATIO": "(m.astype(np.float64) / (b.astype(np.float64) + eps)).astype(F)"}, "line 9 (e)"),
    ("mean_by_reciprocal", {"MEAN": "u.sum(axis=0) * F(1 / u.shape[0])"}, "line 13 (server_e)"),
    ("momentum_rounded_once", {"MOMENT": '(beta * state["m"].astype(np.float64) + (1 - beta) * '
                                         'g.astype(np.float64)).astype(F)'}, "line 5 (m)"),
])
def test_a_last_ulp_reordering_is_a_warning_naming_its_line(tmp_path, name, lines, differing):
    """A trial found a reciprocal multiply and a float64 ratio passing without a word, though the CONTRACT makes
    last-ulp reorderings warnings: within the error checks' 2^-20 they are right, yet two implementations fed
    the same draws no longer agree bit for bit. contract_operation_order recomputes each line from the
    implementation's own inputs and warns, naming the line (exit 0; 1 under --strict)."""
    report = run_checks(port(tmp_path, name, **lines), names=ORDER_CHECKS, progress=False)
    order = report.results[-1]
    assert report.passed and report.warnings == ["contract_operation_order"], [r.detail for r in report.results]
    assert order.detail.startswith("another operation order than the interface's: " + differing), order.detail
    assert not replace(report, strict=True).passed


@pytest.mark.parametrize("lines", [{}, {"MEAN": "np.mean(u, axis=0)"}, {"RATIO": "np.divide(m, b + F(eps))"}])
def test_the_interface_order_written_otherwise_is_bit_for_bit_and_not_warned(tmp_path, lines):
    """np.mean divides the exact sum once (in float64, then rounded: the same float32 as sum / float32(n))."""
    report = run_checks(port(tmp_path, "as_stated", **lines), names=ORDER_CHECKS, progress=False)
    assert report.passed and report.warnings == [], [r.detail for r in report.results if not r.passed]


def test_a_signature_without_the_keywords_is_shown_as_the_users_beside_the_one_required():
    """A trial read "the signature is step(state, grads, beta, ...)" as a description of its own step; the message
    now shows the implementation's signature and, apart, the one the interface requires."""
    from types import SimpleNamespace

    from proofs_checks.target import target_from_object

    reference = load_target()

    def step(state, grads, b1, eps, uw, us, T0=None):
        return reference.step(state, grads, b1, eps, uw, us, T0)

    impl = SimpleNamespace(quantize=reference.quantize, init=reference.init, step=step)
    report = run_checks(target_from_object(impl, "renamed"), names=["interface"], progress=False)
    assert report.results[0].detail == (
        "step does not take the keyword argument(s) beta, u_worker, u_server: yours is "
        "step(state, grads, b1, eps, uw, us, T0=None); the interface requires "
        "step(state, grads, beta, eps, u_worker, u_server, T0=None)")


def test_a_flush_to_zero_of_subnormal_moments_is_a_warning_at_float32s_extremes(tmp_path):
    """A trial's GPU habit (-ftz: subnormal results stored as 0) passed every check: lines 5-6 allowed 2^-126
    absolute. Where eps is as small as the smallest normal float32 (which the interface allows), r = m / (b + eps)
    moves with those values. Now the slack is the subnormal rounding (2^-147), and a flush is reported by the
    float32 extremes' warning, not as a wrong line 5 (exit 0; 1 under --strict)."""
    flush = 'np.where(np.abs(x := beta * state["m"] + (1 - beta) * g) < np.finfo(F).tiny, F(0), x)'
    names = ["line5_6_moments", "contract_float32_extremes"]
    report = run_checks(port(tmp_path, "flush_to_zero", MOMENT=flush), names=names, progress=False)
    moments, extremes = report.results
    assert moments.status == "pass" and report.passed and report.warnings == ["contract_float32_extremes"]
    assert "subnormal results flushed to zero or off" in extremes.detail and "line 5 (m) broken" in extremes.detail
    assert not replace(report, strict=True).passed


def test_a_step_that_updates_the_callers_state_is_reported_once_by_purity():
    """A trial's ports that kept state between calls (a returned buffer reused, a held state) failed purity or
    determinism and again contract_history (and contract_calls), each naming another cause. Those now rest on
    determinism, which rests on purity."""
    from proofs_checks.structure import PER_STEP

    names = [*PER_STEP, "determinism", "contract_calls", "contract_layouts_same_result", "contract_history"]
    report = run_checks(load_target(MUTANTS["mutating_step"][0]), names=names, progress=False)
    assert [r.name for r in report.results if r.status == "fail"] == ["contract_purity"]
    blocked = {r.name for r in report.results if r.status == "blocked"}
    assert {"determinism", "contract_calls", "contract_layouts_same_result", "contract_history"} <= blocked


def test_eq9_broken_names_line_5(tmp_path):
    """A trial's port took beta as float32 on both lines (1 - float32(beta), 1.3% above 1 - beta at beta =
    0.999999): Eq. 14's check failed with "break Eq. 9", naming no line of Algorithm 1. Now it says line 5."""
    report = run_checks(port(tmp_path, "float32_beta", BETA="F(beta)"), names=["eq14_decomposition"],
                        progress=False)
    assert not report.results[0].passed and "break Eq. 9 (line 5)" in report.results[0].detail
