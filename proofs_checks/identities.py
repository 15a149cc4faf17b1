"""Algorithm 1's update rules and the identities the proof builds on, checked on every recorded step.

The implementation's internal values are rounded (float32 or wider), so each identity is checked in float64 from
the stored state, within a tolerance derived from float32 rounding (module constants below); the errors they are
meant to catch (a missing or flipped error, a server without its error) are of order 1. Lemma 2 is evaluated in
exact rational arithmetic (``fractions.Fraction``) from the stored values.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import StateView
from proofs_checks.trajectories import Record, all_records, trajectories

# |impl - exact| for line 9 and line 13: r = m / (b + eps) rounds twice (<= 2^-23 as |r| <= 1), y = r + e once
# (|y| <= 3: <= 2^-23), e = y - u once (<= 2^-24): 2^-20 leaves a factor 2.5 (and covers float64 internals).
TOL_ERROR = 2.0**-20
# lines 5-6: two products and a sum, each within half an ulp; 2^-21 relative to beta |m| + (1 - beta) |g|.
TOL_MOMENT = 2.0**-21
TINY = 2.0**-126  # slack for subnormal products


@dataclass(frozen=True)
class Derived:
    """What one recorded step implies, in float64: r = m / (b + eps) from the new state, y = r + e_prev, the
    workers' outputs u recovered from line 9 (the +-1 nearest y - e_new), their mean, and z = mean + server_e."""

    r: np.ndarray
    y: np.ndarray
    u: np.ndarray
    mean_u: np.ndarray
    z: np.ndarray


def derive_step(prev: StateView, new: StateView, eps: float) -> Derived:
    r = new.m.astype(np.float64) / (new.b.astype(np.float64) + eps)
    y = r + prev.e.astype(np.float64)
    u = np.where(y - new.e >= 0, 1.0, -1.0)
    mean_u = u.mean(axis=0)
    return Derived(r, y, u, mean_u, mean_u + prev.server_e.astype(np.float64))


def derive(record: Record) -> Derived:
    return derive_step(record.prev, record.new, record.setting.eps)


def _violations(residual: np.ndarray, tolerance) -> int:
    return int((~(np.abs(residual) <= tolerance)).sum())  # NaN counts as a violation


def _summary(count: int, total: int, worst: float, tolerance_text: str) -> tuple[str, str]:
    return (f"{count} of {total} elements outside {tolerance_text}; max |residual| = {worst:.3g}",
            f"max |residual| {worst:.3g}")


def largest_abs(a: np.ndarray) -> float:
    """max |a|, with NaN counted as infinitely large."""
    a = np.abs(a)
    return float("inf") if np.isnan(a).any() else float(a.max(initial=0.0))


@check(
    "line5_6_moments",
    "Algorithm 1 lines 5-6: m = beta m + (1 - beta) g, b_hat = beta b_hat + (1 - beta) |g|",
    "every step of 3 trajectories, float64 recomputation, relative tolerance 2^-21",
)
def moments(ctx: Context) -> Outcome:
    bad = {"m": 0, "b_hat": 0}
    total = 0
    worst = 0.0
    for rec in all_records(ctx):
        beta, g = rec.setting.beta, rec.grads.astype(np.float64)
        for name, drive in (("m", g), ("b_hat", np.abs(g))):
            prev = getattr(rec.prev, name).astype(np.float64)
            expected = beta * prev + (1 - beta) * drive
            scale = beta * np.abs(prev) + (1 - beta) * np.abs(drive)
            residual = getattr(rec.new, name).astype(np.float64) - expected
            bad[name] += _violations(residual, TOL_MOMENT * scale + TINY)
            total += residual.size
            worst = max(worst, largest_abs(residual / np.maximum(scale, TINY)))
    return verdict(not any(bad.values()), f"{bad['m']} (m) and {bad['b_hat']} (b_hat) of {total} elements outside "
                                          f"2^-21 relative; max relative residual {worst:.3g}",
                   f"max |residual| {worst:.3g} relative")


def _per_step(ctx: Context, residual_of, tolerance: float, tolerance_text: str) -> Outcome:
    """An identity on every recorded step: ``residual_of(record, derived)`` must stay within ``tolerance``."""
    bad = total = 0
    worst = 0.0
    for rec in all_records(ctx):
        residual = residual_of(rec, derive(rec))
        bad += _violations(residual, tolerance)
        total += residual.size
        worst = max(worst, largest_abs(residual))
    return verdict(bad == 0, *_summary(bad, total, worst, tolerance_text))


@check(
    "line9_worker_error",
    "Algorithm 1 lines 8-9: e_t = e_{t-1} + m_t / b_t - u_t with u_t = +-1",
    "every step: e_prev + m/(b+eps) - e_new must lie within 2^-20 of +1 or -1",
)
def worker_error(ctx: Context) -> Outcome:
    return _per_step(ctx, lambda rec, d: rec.new.e - (d.y - d.u), TOL_ERROR, "2^-20")


@check(
    "line13_server_error",
    "Algorithm 1 line 13: e_bar_t = e_bar_{t-1} + (1/n) sum_i u_t^(i) - u_bar_t, with u_bar = +-1",
    "every step, with the workers' u recovered from line 9; tolerance 2^-20",
)
def server_error(ctx: Context) -> Outcome:
    def residual(rec: Record, d: Derived) -> np.ndarray:
        signs_ok = np.isin(rec.u_bar, (-1.0, 1.0))
        return np.where(signs_ok, rec.new.server_e - (d.z - rec.u_bar), np.nan)  # NaN: not a sign

    return _per_step(ctx, residual, TOL_ERROR, "2^-20 (or u_bar not +-1)")


@check(
    "telescoping_sums",
    "Lines 9 and 13 summed over t (e_0 = e_bar_0 = 0): sum_t u_t = sum_t m_t/b_t - e_T per worker; "
    "sum_t u_bar_t = sum_t mean_i u_t - e_bar_T; hence sum_t u_bar_t = sum_t mean_i m_t/b_t - (mean_i e_T + e_bar_T)",
    "whole trajectories from init; tolerance T x 2^-20 (rounding adds up)",
)
def telescoping(ctx: Context) -> Outcome:
    worst_ratio, parts = 0.0, []
    for trajectory in trajectories(ctx):
        derived = [derive(rec) for rec in trajectory]
        T, last = len(trajectory), trajectory[-1].new
        tol = T * TOL_ERROR
        if trajectory[0].prev.e.any() or trajectory[0].prev.server_e.any():
            return verdict(False, "init did not start from e = e_bar = 0 (Algorithm 1 line 1)")
        sum_u = sum(d.u for d in derived)
        sum_r = sum(d.r for d in derived)
        sum_mean_u = sum(d.mean_u for d in derived)
        sum_u_bar = sum(rec.u_bar.astype(np.float64) for rec in trajectory)
        residuals = (
            sum_u - (sum_r - last.e),
            sum_u_bar - (sum_mean_u - last.server_e),
            sum_u_bar - (sum_r.mean(axis=0) - (last.e.astype(np.float64).mean(axis=0) + last.server_e)),
        )
        worst = max(largest_abs(r) for r in residuals)
        worst_ratio = max(worst_ratio, worst / tol)
        parts.append(f"{trajectory[0].setting.name}: max |residual| {worst:.3g} (tolerance {tol:.3g})")
    return verdict(worst_ratio <= 1, "; ".join(parts), f"max residual / tolerance {worst_ratio:.3g}")


def means(rec: Record, d: Derived) -> dict:
    """Eqs. 8-12 for one step: g, m, b, delta, and the combined errors before (e_prev) and after (e_new)."""
    s = rec.setting
    M = rec.new.m.astype(np.float64).mean(axis=0)
    B = (rec.new.b.astype(np.float64) + s.eps).mean(axis=0)
    return {
        "g": rec.grads.astype(np.float64).mean(axis=0),
        "M": M,
        "M_prev": rec.prev.m.astype(np.float64).mean(axis=0),
        "B": B,
        "delta": d.r.mean(axis=0) - M / B,
        "E_prev": rec.prev.e.astype(np.float64).mean(axis=0) + rec.prev.server_e,
        "E_new": rec.new.e.astype(np.float64).mean(axis=0) + rec.new.server_e,
    }


@check(
    "eq7_update",
    "Eq. 7: u_bar_t = (1/n) sum_i m_t/b_t + (1/n) sum_i (e_{t-1} - e_t) + e_bar_{t-1} - e_bar_t",
    "every step, float64; tolerance 2 x 2^-20 (line 9 averaged plus line 13)",
)
def eq7(ctx: Context) -> Outcome:
    def residual(rec: Record, d: Derived) -> np.ndarray:
        q = means(rec, d)
        return rec.u_bar - (d.r.mean(axis=0) + q["E_prev"] - q["E_new"])

    return _per_step(ctx, residual, 2 * TOL_ERROR, "2 x 2^-20")


@check(
    "eq14_decomposition",
    "Eq. 14 with Eqs. 8-12: u_bar_t = m_t/b_t + delta_t + e_t - e_{t+1} (means over workers), m_t = beta m_{t-1} "
    "+ (1 - beta) g_t (Eq. 9), and the facts (vi) of Eq. 34 uses: |(m_t/b_t)_j| <= 1, |(delta_t)_j| <= 2",
    "every step, float64 from the stored state; tolerances as lines 5-13, none on |m/b| <= 1 (as ratio_bound: "
    "stricter than exact arithmetic, it needs m and b computed with the same operation order)",
)
def eq14(ctx: Context) -> Outcome:
    bad_update = bad_eq9 = bad_facts = total = 0
    worst_ratio = worst_delta = 0.0
    for rec in all_records(ctx):
        d = derive(rec)
        q = means(rec, d)
        beta = rec.setting.beta
        residual = rec.u_bar - (q["M"] / q["B"] + q["delta"] + q["E_prev"] - q["E_new"])
        bad_update += _violations(residual, 2 * TOL_ERROR)
        per_worker_scale = (beta * np.abs(rec.prev.m) + (1 - beta) * np.abs(rec.grads)).mean(axis=0)
        bad_eq9 += _violations(q["M"] - (beta * q["M_prev"] + (1 - beta) * q["g"]),
                               TOL_MOMENT * per_worker_scale + TINY)
        ratio = q["M"] / q["B"]
        bad_facts += int((~(np.abs(ratio) <= 1)).sum() + (~(np.abs(q["delta"]) <= 2)).sum())
        total += residual.size
        worst_ratio = max(worst_ratio, largest_abs(ratio))
        worst_delta = max(worst_delta, largest_abs(q["delta"]))
    ok = bad_update == bad_eq9 == bad_facts == 0
    return verdict(ok, f"over {total} elements: {bad_update} break the update, {bad_eq9} break Eq. 9, {bad_facts} "
                       f"break |m/b| <= 1 or |delta| <= 2; max |m/b| = {worst_ratio:.9g}, max |delta| = "
                       f"{worst_delta:.3g}", f"max |delta| {worst_delta:.3g}")


def fractions(a: np.ndarray) -> np.ndarray:
    """An object array of exact Fractions of the float values of ``a``."""
    flat = [Fraction(float(v)) for v in np.asarray(a, np.float64).ravel()]
    return np.array(flat, dtype=object).reshape(np.shape(a))


def lemma2_residuals(alpha: list, beta, u_bar: list, M: list, B: list, g: list, delta: list, E: list) -> list:
    """z_{t+1} - z_t minus the right-hand side of Lemma 2, for t = 1 .. T (lists indexed from t = 1; index 0 of
    ``alpha`` is alpha_0 = alpha_1; ``E`` runs to T + 1 with E[1] the error entering step 1).

    z_1 = x_1 + alpha_1 (delta_1 - e_1) (Eq. 20); z_t = x_t + beta/(1-beta) (x_t - x_{t-1}) + alpha_{t-1}/(1-beta)
    (delta_{t-1} + beta e_{t-1} - e_t) (Eq. 21), with x_0 = x_1 and x_{t+1} = x_t - alpha_t u_bar_t (line 16).
    t = 1 follows Eq. 23 (z_2 - z_1 = -alpha_1 g_1/b_1 - alpha_1 delta_1: Eq. 22 read at t = 1 would need the
    undefined delta_0); t >= 2 follows Eq. 22. Works on floats or on exact Fractions.
    """
    T = len(u_bar) - 1
    k = beta / (1 - beta)
    x = [None, u_bar[1] * 0]
    for t in range(1, T + 1):
        x.append(x[t] - alpha[t] * u_bar[t])
    x[0] = x[1]
    z = [None, x[1] + alpha[1] * (delta[1] - E[1])]
    for t in range(2, T + 2):
        z.append(x[t] + k * (x[t] - x[t - 1]) + alpha[t - 1] / (1 - beta) * (delta[t - 1] + beta * E[t - 1] - E[t]))
    residuals = [z[2] - z[1] - (-alpha[1] * g[1] / B[1] - alpha[1] * delta[1])]
    for t in range(2, T + 1):
        rhs = (k * (alpha[t - 1] / B[t - 1] - alpha[t] / B[t]) * M[t - 1] - alpha[t] * g[t] / B[t]
               - alpha[t - 1] * delta[t - 1] - (alpha[t] - alpha[t - 1]) * E[t])
        residuals.append(z[t + 1] - z[t] - rhs)
    return residuals


LEMMA2_COLUMNS = 8  # one column of each gradient family of the "mixed" trajectory
LEMMA2_LR = 0.1


@check(
    "lemma2_z_sequence",
    "Lemma 2 (Eqs. 20-23): with x_0 = x_1, alpha_0 = alpha_1 and alpha_t = c/sqrt(t), the sequence z_t satisfies "
    "z_{t+1} = z_t + beta/(1-beta)(alpha_{t-1}/b_{t-1} - alpha_t/b_t) m_{t-1} - alpha_t g_t/b_t - alpha_{t-1} "
    "delta_{t-1} - (alpha_t - alpha_{t-1}) e_t",
    "exact Fractions over the 40 steps of the 4-worker trajectory (8 columns); residual within what the rounding "
    "of lines 5, 9, 13 allows (zero in exact arithmetic: tests/test_proofs_identities.py)",
)
def lemma2(ctx: Context) -> Outcome:
    trajectory = trajectories(ctx)[0]
    beta = trajectory[0].setting.beta
    cols = slice(0, LEMMA2_COLUMNS)
    alpha = [Fraction(LEMMA2_LR / np.sqrt(max(t, 1))) for t in range(len(trajectory) + 1)]
    lists = {key: [None] for key in ("u_bar", "M", "B", "g", "delta", "E")}
    tolerance = [None]
    for t, rec in enumerate(trajectory, start=1):
        q = means(rec, derive(rec))
        for key, value in (("u_bar", rec.u_bar), ("M", q["M"]), ("B", q["B"]), ("g", q["g"]),
                           ("delta", q["delta"]), ("E", q["E_prev"])):
            lists[key].append(fractions(value[cols]))
        a_t, a_prev = float(alpha[t]), float(alpha[t - 1])
        scale = (beta * np.abs(rec.prev.m) + (1 - beta) * np.abs(rec.grads)).mean(axis=0)[cols]
        tolerance.append(((a_t + beta * a_prev) * 2 * TOL_ERROR + a_t * (TOL_MOMENT * scale + TINY) / q["B"][cols])
                         / (1 - beta))
    lists["E"].append(fractions(means(trajectory[-1], derive(trajectory[-1]))["E_new"][cols]))
    residuals = lemma2_residuals(alpha, Fraction(beta), lists["u_bar"], lists["M"], lists["B"], lists["g"],
                                 lists["delta"], lists["E"])
    worst = max(float(np.max(np.abs(r.astype(np.float64)) / tol)) for r, tol in zip(residuals, tolerance[1:],
                                                                                   strict=True))
    largest = max(float(np.max(np.abs(r.astype(np.float64)))) for r in residuals)
    return verdict(worst <= 1, f"{len(residuals)} steps x {LEMMA2_COLUMNS} columns, c = {LEMMA2_LR}: max |residual| "
                               f"= {largest:.3g}, at most {worst:.3g} of its rounding tolerance",
                   f"residual / tolerance {worst:.3g}")


@check(
    "eq32_step_sizes_nonincreasing",
    "Eqs. 32 (iii), 35 (v), 36 (iv): alpha_{t-1}/(b_{t-1})_j - alpha_t/(b_t)_j >= 0 for alpha_t = c/sqrt(t); this "
    "needs line 7's running maximum (t > T0), which the paper says is 'commonly not implemented in practice'",
    "every step past T0 of the AMSGrad trajectories must satisfy it (b + eps as b); measured without AMSGrad",
)
def step_sizes_nonincreasing(ctx: Context) -> Outcome:
    broken = checked = free_broken = free_total = 0
    for rec in all_records(ctx):
        s, t = rec.setting, rec.new.t
        if t < 2:
            continue
        ratio_prev = 1 / np.sqrt(t - 1) / (rec.prev.b.astype(np.float64) + s.eps)
        ratio_now = 1 / np.sqrt(t) / (rec.new.b.astype(np.float64) + s.eps)
        increasing = ~(ratio_prev >= ratio_now)
        if s.T0 is not None and t - 1 > s.T0:  # both b_{t-1} and b_t come from the running maximum
            broken += int(increasing.sum())
            checked += increasing.size
        elif s.T0 is None:
            free_broken += int(increasing.sum())
            free_total += increasing.size
    share = free_broken / free_total if free_total else float("nan")
    return verdict(broken == 0, f"{broken} of {checked} elements past T0 break it; without AMSGrad (T0 unset) "
                                f"{share:.1%} of {free_total} elements do, so the proof needs line 7",
                   f"{broken} broken past T0; {share:.1%} without AMSGrad")
