"""What Algorithm 1 does with its state and its draws: line 1, line 7, the quantizer calls of lines 8 and 12, and
determinism (same state, gradients and draws give the same outputs; the input state is left as it was).

Lines 8 and 12 are checked against the implementation's own ``quantize`` with the injected draws: an
implementation that draws internally, or quantizes something else, disagrees. Its y = m/(b+eps) + e is known to
us only to rounding, so each comparison evaluates ``quantize`` at y and y +- 2^-20 and skips the rare elements
whose draw sits within that window of the threshold (counted; a quantizer that is not a function of (y, u) makes
most elements "ambiguous" and fails).
"""

from __future__ import annotations

import copy

import numpy as np

from proofs_checks.identities import TOL_ERROR, derive
from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import ARRAY_FIELDS, Target, read_state, same_bits
from proofs_checks.trajectories import SETTINGS, all_records, draws, gradients

AMBIGUOUS_SHARE = 0.01  # above this share of skipped elements the quantizer is not a function of (y, u)


@check(
    "interface",
    "Algorithm 1 line 1: m_0 = b_0 = e_0 = 0 on every worker and e_bar_0 = 0 (t = 0), through quantize/init/step",
    "quantize, init and step are callable; init(3, 5) has zero fields of shapes (3, 5) and (5,), t = 0",
    needs=(),
)
def interface(ctx: Context) -> Outcome:
    missing = ctx.target.missing(("quantize", "init", "step"))
    if missing:
        return verdict(False, f"the implementation has no callable {', '.join(missing)}")
    view = read_state(ctx.target.run_init(3, 5), 3, 5)
    nonzero = [f for f in ARRAY_FIELDS if np.any(getattr(view, f) != 0)]
    ok = not nonzero and view.t == 0
    return verdict(ok, "init state is all zero with t = 0" if ok else f"init: nonzero {nonzero}, t = {view.t}")


@check(
    "line7_amsgrad",
    "Algorithm 1 line 7: b_t = b_hat_t while t <= T0 (always when T0 is not set), b_t = max(b_{t-1}, b_hat_t) "
    "once t > T0; t counts steps",
    "bit-exact on every step with T0 = None, 5 and 0; shrinking gradients make the maximum differ from b_hat",
)
def amsgrad(ctx: Context) -> Outcome:
    wrong, exercised, total = [], 0, 0
    for rec in all_records(ctx):
        T0, t = rec.setting.T0, rec.prev.t + 1
        if rec.new.t != t:
            wrong.append(f"{rec.setting.name}: t went from {rec.prev.t} to {rec.new.t}")
            continue
        running_max = np.maximum(rec.prev.b, rec.new.b_hat)
        expected = running_max if T0 is not None and t > T0 else rec.new.b_hat
        exercised += int((running_max != rec.new.b_hat).sum()) if T0 is not None and t > T0 else 0
        total += 1
        if not same_bits(rec.new.b.astype(expected.dtype), expected):
            rule = "max(b_prev, b_hat)" if T0 is not None and t > T0 else "b_hat"
            wrong.append(f"{rec.setting.name} (T0={T0}) step {t}: b != {rule}")
    detail = (f"{total} steps; the running maximum differed from b_hat in {exercised} elements"
              if not wrong else "; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else ""))
    return verdict(not wrong, detail, f"{len(wrong)} wrong steps")


def quantize_window(target: Target, y: np.ndarray, u: np.ndarray, tolerance: float):
    """Q at y - tol, y and y + tol (float32): (the agreed value, mask of elements where the three disagree)."""
    outs = [target.run_quantize(np.asarray(y + s * tolerance, np.float32), u) for s in (-1, 0, 1)]
    ambiguous = (outs[0] != outs[1]) | (outs[1] != outs[2])
    return outs[1], ambiguous


def _quantizer_calls(ctx: Context, argument_of, draws_of, output_of, what: str) -> Outcome:
    """On every recorded step, ``output_of(record, derived)`` must equal the target's quantize applied to
    ``argument_of(derived)`` with ``draws_of(record)``, wherever that is unambiguous."""
    mismatched = ambiguous = total = 0
    first = ""
    for rec in all_records(ctx):
        d = derive(rec)
        expected, amb = quantize_window(ctx.target, argument_of(d), draws_of(rec), TOL_ERROR)
        wrong = ~amb & (expected != output_of(rec, d))
        if wrong.any() and not first:
            first = f"; first at {rec.setting.name} step {rec.new.t}"
        mismatched += int(wrong.sum())
        ambiguous += int(amb.sum())
        total += expected.size
    ok = mismatched == 0 and ambiguous <= AMBIGUOUS_SHARE * total
    return verdict(ok, f"{mismatched} of {total} {what} differ from quantize with the injected draws, "
                       f"{ambiguous} skipped as within 2^-20 of the threshold{first}",
                   f"{mismatched} mismatches, {ambiguous} skipped")


@check(
    "line8_worker_quantizer",
    "Algorithm 1 line 8: u_t = Q(m_t/b_t + e_{t-1}) with the worker's draws (Eq. 5)",
    "u recovered from line 9 equals the implementation's quantize(y, u_worker) on every element",
    needs=("quantize", "init", "step"),
)
def worker_quantizer(ctx: Context) -> Outcome:
    return _quantizer_calls(ctx, lambda d: d.y, lambda rec: rec.u_worker, lambda rec, d: d.u, "worker outputs")


@check(
    "line12_server_quantizer",
    "Algorithm 1 line 12: u_bar_t = Q((1/n) sum_i u_t^(i) + e_bar_{t-1}) with the server's draws",
    "u_bar equals the implementation's quantize(mean of the workers' u + server error, u_server) on every element",
    needs=("quantize", "init", "step"),
)
def server_quantizer(ctx: Context) -> Outcome:
    return _quantizer_calls(ctx, lambda d: d.z, lambda rec: rec.u_server, lambda rec, d: rec.u_bar, "server outputs")


@check(
    "determinism",
    "Algorithm 1 with injected draws is a function: the same state, gradients and draws give the same u_bar and "
    "state; the input state and arrays are left unchanged",
    "each of 8 steps called twice on the same state object and once on a deep copy; quantize called twice",
    needs=("quantize", "init", "step"),
)
def determinism(ctx: Context) -> Outcome:
    target, setting = ctx.target, SETTINGS[0]
    n, d = 2, 16
    rng = np.random.default_rng(99)
    y = rng.uniform(-1.5, 1.5, (n, d)).astype(np.float32)
    u = rng.random((n, d), dtype=np.float32)
    y_in, u_in = y.copy(), u.copy()
    if not same_bits(target.run_quantize(y_in, u_in), target.run_quantize(y_in, u_in)):
        return verdict(False, "quantize gave two different outputs for the same (y, u)")
    if not (same_bits(y_in, y) and same_bits(u_in, u)):
        return verdict(False, "quantize modified its inputs")
    state = target.run_init(n, d)
    for t in range(1, 9):
        grads = gradients(setting, rng, t)[:n, :d].copy()
        u_worker, u_server = draws(rng, n, d)
        inputs = (grads, u_worker, u_server)
        saved = tuple(a.copy() for a in inputs)
        before = read_state(state, n, d)
        twin = copy.deepcopy(state)
        calls = []
        for s in (state, state, twin):
            u_bar, new = target.run_step(s, grads, setting.beta, setting.eps, u_worker, u_server, 2)
            calls.append((u_bar, read_state(new, n, d)))
            changed = read_state(state, n, d).equals(before)
            if changed:
                return verdict(False, f"step {t} modified its input state (fields {', '.join(changed)})")
            if not all(same_bits(a, b) for a, b in zip(inputs, saved, strict=True)):
                return verdict(False, f"step {t} modified its gradients or draws")
        for u_bar, view in calls[1:]:
            if not same_bits(u_bar, calls[0][0]) or view.equals(calls[0][1]):
                return verdict(False, f"step {t}: the same state, gradients and draws gave different outputs")
        state = new
    return verdict(True, "8 steps x 3 calls identical bit for bit; inputs unchanged", "identical")
