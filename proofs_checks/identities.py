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
from proofs_checks.trajectories import (
    FLOAT32_EXTREME,
    SMALLEST_NORMAL,
    Record,
    all_records,
    judged_trajectories,
    trajectories,
)

# |impl - exact| for line 9 and line 13: r = m / (b + eps) rounds twice (<= 2^-23 as |r| <= 1), y = r + e once
# (|y| <= 3: <= 2^-23), e = y - u once (<= 2^-24): 2^-20 leaves a factor 2.5 (and covers float64 internals).
TOL_ERROR = 2.0**-20
# lines 5-6: two products and a sum, each within half an ulp; 2^-21 relative to beta |m| + (1 - beta) |g|.
TOL_MOMENT = 2.0**-21
TINY = 2.0**-126  # a floor for relative residuals, and slack for subnormal products in Eq. 9
# lines 5-6 in the subnormal range: each rounding (two products and a sum; a lerp's three) is off by at most half of
# the subnormal spacing 2^-149, whatever the order
SUBNORMAL_ROUNDING = 2.0**-147
# |m| <= b (Eq. 4) up to the rounding of lines 5-6 in another operation order (a lerp, an FMA): measured up to
# 57 ulp (2^-17) for a lerp m beside an EMA b over the ratio sweep's 14 betas; a wrong denominator is off by far more.
RATIO_SLACK = 2.0**-16


@dataclass(frozen=True)
class Derived:
    """What one recorded step implies, in float64: r = m / (b + eps) from the new state, y = r + e_prev, the
    workers' outputs u recovered from line 9 (the +-1 nearest y - e_new), their mean, and z = mean + server_e;
    ``y_window`` and ``z_window`` bound how far the implementation's own y and z (rounded in its precision and
    order) can lie from these; ``eps_sensitive`` marks the elements where b < 2^22 eps, the only ones where the
    eps convention (m / (b + eps) against m / max(b, eps), m / b, ...) changes r by more than 2^-22."""

    r: np.ndarray
    y: np.ndarray
    u: np.ndarray
    mean_u: np.ndarray
    z: np.ndarray
    y_window: np.ndarray
    z_window: np.ndarray
    eps_sensitive: np.ndarray


ROUNDING_WINDOW = 2.0**-20  # relative to |r| + |e_prev| (line 8) and |mean| + |e_bar_prev| (line 12)
EPS_SENSITIVE = 2.0**22  # b < EPS_SENSITIVE * eps: the eps convention matters there


def derive_step(prev: StateView, new: StateView, eps: float) -> Derived:
    """Lines 8-13 recomputed from the stored state in float32, in the interface's order (r = m / (b + float32(eps)),
    y = r + e, z = sum(u) / float32(n) + e_bar), then held in float64 for the residuals."""
    b = new.b.astype(np.float64)
    with np.errstate(all="ignore"):
        r32 = new.m.astype(np.float32) / (new.b.astype(np.float32) + np.float32(eps))
        y32 = r32 + prev.e.astype(np.float32)
        r, y = r32.astype(np.float64), y32.astype(np.float64)
        e_prev = prev.e.astype(np.float64)
        u = np.where(y - new.e >= 0, 1.0, -1.0)
        mean_u = (u.astype(np.float32).sum(axis=0) / np.float32(u.shape[0])).astype(np.float64)
        server_prev = prev.server_e.astype(np.float64)
        z = (mean_u.astype(np.float32) + prev.server_e.astype(np.float32)).astype(np.float64)
        y_window = ROUNDING_WINDOW * (np.abs(r) + np.abs(e_prev))
        z_window = ROUNDING_WINDOW * (np.abs(mean_u) + np.abs(server_prev))
    # where eps matters: b < 2^22 eps, and where an earlier such step left a non-finite error behind (0 / 0)
    sensitive = ~(b >= EPS_SENSITIVE * eps) | ~np.isfinite(e_prev)
    return Derived(r, y, u, mean_u, z, y_window, z_window, sensitive)


def derive(record: Record) -> Derived:
    """``derive_step`` for a recorded step, computed once per record (every identity check reads it)."""
    derived = record.__dict__.get("_derived")
    if derived is None:
        derived = derive_step(record.prev, record.new, record.setting.eps)
        object.__setattr__(record, "_derived", derived)  # a cache beside the frozen fields, not one of them
    return derived


def line9_residual(rec: Record, d: Derived) -> np.ndarray:
    with np.errstate(all="ignore"):
        return rec.new.e - (d.y - d.u)


def eps_convention(ctx: Context) -> dict:
    """Line 9 split by where eps matters: counts of broken elements with b >= 2^22 eps (``plain``) and below it
    (``sensitive``), and which other convention fits the broken sensitive elements. Computed once per context."""

    def compute():
        plain = sensitive = sensitive_total = 0
        fits = {name: 0 for name in ALTERNATIVE_CONVENTIONS}  # broken sensitive elements each convention explains
        fits_all = dict(fits)  # broken elements, sensitive or not, each convention explains
        first = ""
        for rec in all_records(ctx):
            d = derive(rec)
            broken = ~(np.abs(line9_residual(rec, d)) <= TOL_ERROR)
            plain += int((broken & ~d.eps_sensitive).sum())
            bad = broken & d.eps_sensitive
            sensitive += int(bad.sum())
            sensitive_total += int(d.eps_sensitive.sum())
            if broken.any():
                if bad.any() and not first:
                    i, j = np.argwhere(bad)[0]
                    first = (f"first at {rec.setting.name} step {rec.new.t}, worker {i}, element {j}: m = "
                             f"{rec.new.m[i, j]:.9g}, b = {rec.new.b[i, j]:.9g}, eps = {rec.setting.eps:g}")
                m, b, eps = rec.new.m.astype(np.float64), rec.new.b.astype(np.float64), rec.setting.eps
                # a convention explains an element only from a finite m and b: where the implementation's own m or b
                # overflowed, every convention gives NaN as its error does, and none of them is the cause
                finite = np.isfinite(m) & np.isfinite(b)
                for name, ratio in ALTERNATIVE_CONVENTIONS.items():
                    with np.errstate(all="ignore"):
                        y = ratio(m, b, eps) + rec.prev.e
                        predicted = y - np.where(y - rec.new.e >= 0, 1.0, -1.0)
                        fit = finite & ((np.abs(rec.new.e - predicted) <= TOL_ERROR)
                                        | (np.isnan(rec.new.e) & np.isnan(predicted)))
                    fits[name] += int((bad & fit).sum())
                    fits_all[name] += int((broken & fit).sum())
        return {"plain": plain, "sensitive": sensitive, "sensitive_total": sensitive_total, "fits": fits,
                "fits_all": fits_all, "first": first}

    return ctx.shared("eps_convention", compute)


ALTERNATIVE_CONVENTIONS = {
    "m / max(b, eps)": lambda m, b, eps: m / np.maximum(b, eps),
    "m / b (no eps)": lambda m, b, eps: m / b,
    "m / (b + eps^2)": lambda m, b, eps: m / (b + eps * eps),
    "m / sqrt(b^2 + eps^2)": lambda m, b, eps: m / np.sqrt(b * b + eps * eps),
    "m / (b + eps) with eps in float16": lambda m, b, eps: m / (b + float(np.float16(eps))),
    "m / (b + 1e-8), the usual eps whatever eps is given (or eps floored there)": lambda m, b, eps: m / (b + 1e-8),
}


def eps_mask(ctx: Context, d: Derived) -> np.ndarray | None:
    """The worker elements the identities leave to ``contract_eps_convention`` (those where b < 2^22 eps) when
    that clause fails and line 9 holds everywhere else; None when nothing is left out."""
    found = eps_convention(ctx)
    if found["sensitive"] and not found["plain"]:
        return d.eps_sensitive
    return None


def column_mask(ctx: Context, d: Derived) -> np.ndarray | None:
    """``eps_mask`` per column (any worker): what server-side identities leave out."""
    mask = eps_mask(ctx, d)
    return None if mask is None else mask.any(axis=0)


LEFT_OUT = " (elements with b < 2^22 eps left to contract_eps_convention, which fails)"


def _violations(residual: np.ndarray, tolerance) -> int:
    return int((~(np.abs(residual) <= tolerance)).sum())  # NaN counts as a violation


def _summary(count: int, total: int, worst: float, tolerance_text: str) -> tuple[str, str]:
    return (f"{count} of {total} elements outside {tolerance_text}; max |residual| = {worst:.3g}",
            f"max |residual| {worst:.3g}")


def largest_abs(a: np.ndarray) -> float:
    """max |a|, with NaN counted as infinitely large."""
    a = np.abs(a)
    return float("inf") if np.isnan(a).any() else float(a.max(initial=0.0))


def _first_where(bad: np.ndarray, rec: Record, what: str) -> str:
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"first at {rec.setting.name} step {rec.new.t}, {what} {index}"


def contract_moments(prev: StateView, grads: np.ndarray, beta: float) -> dict:
    """Lines 5-6 as the interface states them, in float32 with NumPy 2 promotion (a Python-float beta becomes
    float32(beta), 1 - beta float32(1 - beta)), in its order: the oracle for m and b_hat."""
    g = np.asarray(grads, np.float32)
    with np.errstate(all="ignore"):
        return {"m": beta * prev.m.astype(np.float32) + (1 - beta) * g,
                "b_hat": beta * prev.b_hat.astype(np.float32) + (1 - beta) * np.abs(g)}


# Lines 5-6 in another order: beta and 1 - beta rounded either way (1 - float32(1 - beta), as torch's lerp computes
# it for a weight above 1/2, is off by 1% at beta = 1e-6, yet by at most 2^-24 absolute), and m + w (g - m) rounding
# g - m, the product and the sum: up to 4 ulps of the operands |m_{t-1}| + |g|, however small the result.
ORDER_ROUNDING = 2.0**-22

def moment_breaks(ctx: Context) -> dict:
    """Lines 5-6 on every recorded step against the float32 recomputation in the interface's order: overflows
    (non-finite m or b_hat) counted apart where |m_{t-1}| + |g| (or |b_hat_{t-1}| + |g|) reaches
    ``FLOAT32_EXTREME``, with the rest of their trajectory (what follows is not judged), and so are subnormal
    results flushed to zero (``flushed``: both values below the smallest normal float32)."""

    def compute():
        found = {part: {"m": 0, "b_hat": 0, "first_m": "", "first_b_hat": ""} for part in ("ordinary", "extreme")}
        found["flushed"] = 0
        total, worst = 0, 0.0
        for trajectory in trajectories(ctx):
            overflowed = False  # once m or b_hat overflowed at an extreme, the rest of the trajectory follows it
            for rec in trajectory:
                beta, g = rec.setting.beta, rec.grads.astype(np.float64)
                contract = contract_moments(rec.prev, rec.grads, beta)
                extremes = {}
                for name, drive in (("m", g), ("b_hat", np.abs(g))):
                    prev = getattr(rec.prev, name).astype(np.float64)
                    expected = contract[name].astype(np.float64)
                    scale = beta * np.abs(prev) + (1 - beta) * np.abs(drive)
                    got = getattr(rec.new, name).astype(np.float64)
                    with np.errstate(all="ignore"):
                        exact = beta * prev + (1 - beta) * drive  # where the float32 recomputation overflows
                        residual = np.where(got == expected, 0.0, got - expected)
                        slack = TOL_MOMENT * scale + ORDER_ROUNDING * (np.abs(prev) + np.abs(drive))
                        broken = ~(np.abs(residual) <= slack + SUBNORMAL_ROUNDING) & ~(np.abs(got - exact) <= slack)
                        extreme = (~(np.abs(prev) + np.abs(drive) < FLOAT32_EXTREME) & ~np.isfinite(got)) | overflowed
                        # a subnormal result stored as another subnormal or 0: flushed to zero (a GPU's -ftz)
                        flushed = broken & (np.abs(expected) < SMALLEST_NORMAL) & (np.abs(got) < SMALLEST_NORMAL)
                    extremes[name] = broken & extreme
                    found["flushed"] += int((flushed & ~extreme).sum())
                    parts = (("ordinary", broken & ~extreme & ~flushed), ("extreme", broken & (extreme | flushed)))
                    for part, mask in parts:
                        if mask.any() and not found[part][f"first_{name}"]:
                            i, j = np.argwhere(mask)[0]
                            found[part][f"first_{name}"] = (
                                f"{name} first wrong at {rec.setting.name} step {rec.new.t}, worker {i}, element "
                                f"{j}: {getattr(rec.new, name)[i, j]:.9g}, expected {expected[i, j]:.9g}")
                        found[part][name] += int(mask.sum())
                    total += residual.size
                    with np.errstate(all="ignore"):
                        worst = max(worst, largest_abs(np.where(extreme | flushed, 0.0, residual) /
                                                       np.maximum(scale, TINY)))
                overflowed = overflowed or any(bool(np.any(e)) for e in extremes.values())
        return {**found, "total": total, "worst": worst}

    return ctx.shared("moment_breaks", compute)


def _moments_detail(part: dict, total: int) -> tuple[str, str]:
    where = "; ".join(part[f] for f in ("first_m", "first_b_hat") if part[f])
    lines = " and ".join(line for line, name in (("line 5 (m)", "m"), ("line 6 (b_hat)", "b_hat")) if part[name])
    return (f"{lines} broken: " if lines else ""), (f"{part['m']} (m) and {part['b_hat']} (b_hat) of {total} elements "
                                                    "outside 2^-21 relative" + (f"; {where}" if where else ""))


@check(
    "line5_6_moments",
    "Algorithm 1 lines 5-6: m = beta m + (1 - beta) g, b_hat = beta b_hat + (1 - beta) |g|",
    "every step of every regime and of the sampled settings (beta 1e-6 .. 1 - 2^-24, up to 4099 workers, d = "
    "70001, 1010 steps, magnitudes 1e-45 up to the largest finite float32, idle workers) against the float32 "
    "recomputation in the interface's order; relative tolerance 2^-21 (+ 2^-147 for subnormals, + 2^-22 (|m| + "
    "|g|) for another order's rounding: a lerp); where that "
    "recomputation overflows, the exact value is also accepted; an overflow where it is finite fails (where "
    "|m| + |g| reaches 2^127, and where a subnormal result is flushed, contract_float32_extremes judges instead)",
)
def moments(ctx: Context) -> Outcome:
    found = moment_breaks(ctx)
    part = found["ordinary"]
    lines, detail = _moments_detail(part, found["total"])
    return verdict(not (part["m"] or part["b_hat"]), lines + detail + f"; max relative residual {found['worst']:.3g}",
                   f"max |residual| {found['worst']:.3g} relative")


@check(
    "contract_float32_extremes",
    "Interface (robustness): lines 5-6 hold at float32's extremes: finite where beta m + (1 - beta) g is, also where "
    "|m| + |g| reaches 2^127 (half the largest float32), and subnormal where it is (no flush to zero)",
    "the elements line5_6_moments leaves out (the float32_max regime and sampled magnitudes up to the largest "
    "float32; subnormal results stored as 0 or another subnormal); a warning: another operation order (a lerp's "
    "g - m) overflows only there, and a flush to zero (a GPU's -ftz) moves only values below 2^-126, yet where eps "
    "is as small r = m / (b + eps) moves with them",
    kind="contract",
    after=("line5_6_moments",),
    severity="warning",
)
def float32_extremes(ctx: Context) -> Outcome:
    found = moment_breaks(ctx)
    part = found["extreme"]
    lines, detail = _moments_detail(part, found["total"])
    flushed = f"; {found['flushed']} subnormal results flushed to zero or off" if found["flushed"] else ""
    return verdict(not (part["m"] or part["b_hat"]), lines + detail + flushed, f"{part['m'] + part['b_hat']} elements")


def _per_step(ctx: Context, residual_of, tolerance: float, tolerance_text: str, mask_of=None) -> Outcome:
    """An identity on every recorded step: ``residual_of(record, derived)`` must stay within ``tolerance``;
    ``mask_of(ctx, derived)`` gives elements left out (the eps convention's, when that clause fails)."""
    bad = total = left_out = 0
    worst = 0.0
    first = ""
    for rec in all_records(ctx):
        d = derive(rec)
        residual = residual_of(rec, d)
        mask = mask_of(ctx, d) if mask_of else None
        if mask is not None:
            residual = np.where(mask, 0.0, residual)
            left_out += int(mask.sum())
        broken = ~(np.abs(residual) <= tolerance)
        if broken.any() and not first:
            first = "; " + _first_where(broken, rec, "element")
        bad += int(broken.sum())
        total += residual.size
        worst = max(worst, largest_abs(residual))
    detail, statistic = _summary(bad, total, worst, tolerance_text)
    return verdict(bad == 0, detail + first + (LEFT_OUT.replace("elements", f"{left_out} elements")
                                               if left_out else ""), statistic)


@check(
    "line9_worker_error",
    "Algorithm 1 lines 8-9: e_t = e_{t-1} + m_t / b_t - u_t with u_t = +-1",
    "every step of every regime and sampled setting: e_prev + m/(b+eps) - e_new (float32, the interface's order) "
    "must lie within 2^-20 of +1 or -1",
    after=("line5_6_moments",),
)
def worker_error(ctx: Context) -> Outcome:
    return _per_step(ctx, line9_residual, TOL_ERROR, "2^-20", eps_mask)


@check(
    "line13_server_error",
    "Algorithm 1 lines 12-13: e_bar_t = e_bar_{t-1} + (1/n) sum_i u_t^(i) - u_bar_t, with u_bar = +-1 and the "
    "plain mean over all n workers",
    "every step of every regime (1 to 4099 workers, sums reaching +-n, idle workers), with the workers' u recovered "
    "from line 9; "
    "tolerance 2^-20: a residual means the server's average is not (1/n) sum_i u_i or its error is updated otherwise",
    after=("line9_worker_error",),
)
def server_error(ctx: Context) -> Outcome:
    def residual(rec: Record, d: Derived) -> np.ndarray:
        signs_ok = np.isin(rec.u_bar, (-1.0, 1.0))
        with np.errstate(all="ignore"):
            return np.where(signs_ok, rec.new.server_e - (d.z - rec.u_bar), np.nan)  # NaN: not a sign

    return _per_step(ctx, residual, TOL_ERROR, "2^-20 (or u_bar not +-1)", column_mask)


# The stored value of each line against the float32 result of the interface's operations on the implementation's own
# stored inputs of that line: (line, stored, recomputed, the magnitude of the line's largest operand, for ulps).
def _line_results(rec: Record, d: Derived) -> tuple[tuple[str, np.ndarray, np.ndarray, np.ndarray], ...]:
    beta = float(rec.setting.beta)
    moments = contract_moments(rec.prev, rec.grads, beta)
    g = np.abs(np.asarray(rec.grads, np.float64))
    with np.errstate(all="ignore"):
        e = d.y.astype(np.float32) - d.u.astype(np.float32)
        server_e = d.z.astype(np.float32) - np.asarray(rec.u_bar, np.float32)
        m_scale = np.maximum(beta * np.abs(rec.prev.m.astype(np.float64)), (1 - beta) * g)
        b_scale = np.maximum(beta * np.abs(rec.prev.b_hat.astype(np.float64)), (1 - beta) * g)
    return (("line 5 (m)", rec.new.m, moments["m"], m_scale),
            ("line 6 (b_hat)", rec.new.b_hat, moments["b_hat"], b_scale),
            ("line 9 (e)", rec.new.e, e, np.abs(d.y)),
            ("line 13 (server_e)", rec.new.server_e, server_e, np.abs(d.z)))


def order_differences(ctx: Context) -> dict:
    """Per line, the finite stored elements that differ from the interface's float32 result computed from the
    implementation's own inputs of that line (so each line is judged alone), the largest difference in ulp of
    the line's largest operand and the first place; non-finite values are the extremes' and error checks' to judge."""

    def compute():
        found = {}
        for rec in all_records(ctx):
            d = derive(rec)
            for line, got, expected, scale in _line_results(rec, d):
                got = np.asarray(got, np.float32)
                with np.errstate(all="ignore"):
                    differ = np.isfinite(got) & np.isfinite(expected) & (got != expected)
                entry = found.setdefault(line, {"count": 0, "total": 0, "ulps": 0.0, "first": ""})
                entry["total"] += got.size
                if differ.any():
                    largest = np.maximum(np.abs(expected[differ]), scale[differ]).astype(np.float32)
                    ulps = np.abs(got[differ].astype(np.float64) - expected[differ]) / np.spacing(largest)
                    entry["count"] += int(differ.sum())
                    entry["ulps"] = max(entry["ulps"], float(ulps.max()))
                    if not entry["first"]:
                        index = tuple(int(i) for i in np.argwhere(differ)[0])
                        entry["first"] = (f"{rec.setting.name} step {rec.new.t}, element {index}: "
                                          f"{got[index]:.9g}, the interface's order gives {expected[index]:.9g}")
        return found

    return ctx.shared("order_differences", compute)


@check(
    "contract_operation_order",
    "Interface (robustness): each stored m, b_hat, e and server_e is the float32 result of the interface's "
    "operations in its order, so two implementations fed the same draws agree bit for bit",
    "every recorded step: lines 5-6, 9 and 13 recomputed in float32 in the interface's order (m / (b + float32(eps)), "
    "sum(u) / float32(n), NumPy 2 promotion) from the implementation's own stored inputs of each line, compared bit "
    "for bit; a warning: another order (a reciprocal, a float64 intermediate, a lerp, an FMA) moves a last ulp, "
    "within the error checks' tolerance, yet can flip a sign where y or z lies within an ulp of a draw's threshold",
    kind="contract",
    after=("contract_dtypes", "line5_6_moments", "line9_worker_error", "line13_server_error",
           "contract_eps_convention"),
    severity="warning",
)
def operation_order(ctx: Context) -> Outcome:
    found = order_differences(ctx)
    lines = [(line, entry) for line, entry in found.items() if entry["count"]]
    total = sum(entry["total"] for entry in found.values())
    if not lines:
        return verdict(True, f"all {total} stored elements of lines 5, 6, 9 and 13 are bit for bit the interface's "
                             "float32 order", "bit for bit")
    parts = [f"{line}: {entry['count']} of {entry['total']} elements, up to {entry['ulps']:.2g} ulp of its largest "
             f"operand, first at {entry['first']}" for line, entry in lines]
    worst = max(entry["ulps"] for _, entry in lines)
    return verdict(False, "another operation order than the interface's: " + "; ".join(parts),
                   f"{sum(entry['count'] for _, entry in lines)} elements, <= {worst:.2g} ulp")


@check(
    "telescoping_sums",
    "Lines 9 and 13 summed over t (e_0 = e_bar_0 = 0): sum_t u_t = sum_t m_t/b_t - e_T per worker; "
    "sum_t u_bar_t = sum_t mean_i u_t - e_bar_T; hence sum_t u_bar_t = sum_t mean_i m_t/b_t - (mean_i e_T + e_bar_T)",
    "whole trajectories from init; tolerance T x 2^-20 (rounding adds up)",
    after=("line9_worker_error", "line13_server_error"),
)
def telescoping(ctx: Context) -> Outcome:
    worst_ratio, parts = 0.0, []
    for trajectory in judged_trajectories(ctx):
        derived = [derive(rec) for rec in trajectory]
        T, last = len(trajectory), trajectory[-1].new
        tol = T * TOL_ERROR
        if trajectory[0].prev.e.any() or trajectory[0].prev.server_e.any():
            return verdict(False, "init did not start from e = e_bar = 0 (Algorithm 1 line 1)")
        masks = [eps_mask(ctx, d) for d in derived]
        left_out = np.zeros(derived[0].r.shape[1], bool)
        for mask in masks:
            if mask is not None:
                left_out |= mask.any(axis=0)
        sum_u = sum(d.u for d in derived)
        sum_r = sum(d.r for d in derived)
        sum_mean_u = sum(d.mean_u for d in derived)
        sum_u_bar = sum(rec.u_bar.astype(np.float64) for rec in trajectory)
        with np.errstate(all="ignore"):
            residuals = (
                sum_u - (sum_r - last.e),
                sum_u_bar - (sum_mean_u - last.server_e),
                sum_u_bar - (sum_r.mean(axis=0) - (last.e.astype(np.float64).mean(axis=0) + last.server_e)),
            )
        worst = max(largest_abs(np.where(left_out, 0.0, r)) for r in residuals)
        worst_ratio = max(worst_ratio, worst / tol)
        parts.append(f"{trajectory[0].setting.name}: {worst:.3g} (tolerance {tol:.3g})"
                     + (f", {int(left_out.sum())} columns left out" if left_out.any() else ""))
    return verdict(worst_ratio <= 1, "max |residual|: " + "; ".join(parts),
                   f"max residual / tolerance {worst_ratio:.3g}")


def means(rec: Record, d: Derived) -> dict:
    """Eqs. 8-12 for one step: g, m, b, delta, and the combined errors before (e_prev) and after (e_new)."""
    s = rec.setting
    M = rec.new.m.astype(np.float64).mean(axis=0)
    B = (rec.new.b.astype(np.float64) + s.eps).mean(axis=0)
    with np.errstate(all="ignore"):
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
    after=("line9_worker_error", "line13_server_error"),
)
def eq7(ctx: Context) -> Outcome:
    def residual(rec: Record, d: Derived) -> np.ndarray:
        q = means(rec, d)
        return rec.u_bar - (d.r.mean(axis=0) + q["E_prev"] - q["E_new"])

    return _per_step(ctx, residual, 2 * TOL_ERROR, "2 x 2^-20", column_mask)


@check(
    "eq14_decomposition",
    "Eq. 14 with Eqs. 8-12: u_bar_t = m_t/b_t + delta_t + e_t - e_{t+1} (means over workers), m_t = beta m_{t-1} "
    "+ (1 - beta) g_t (Eq. 9), and the facts (vi) of Eq. 34 uses: |(m_t/b_t)_j| <= 1, |(delta_t)_j| <= 2",
    "every step, float64 from the stored state; tolerances as lines 5-13, and 2^-16 relative on |m/b| <= 1 "
    "(rounding of lines 5-6; ratio_bound)",
    after=("line5_6_moments", "eq7_update"),
)
def eq14(ctx: Context) -> Outcome:
    bad_update = bad_eq9 = bad_facts = total = 0
    worst_ratio = worst_delta = 0.0
    for rec in all_records(ctx):
        d = derive(rec)
        q = means(rec, d)
        beta = rec.setting.beta
        keep = column_mask(ctx, d)
        keep = np.ones(rec.u_bar.shape, bool) if keep is None else ~keep
        with np.errstate(all="ignore"):
            residual = rec.u_bar - (q["M"] / q["B"] + q["delta"] + q["E_prev"] - q["E_new"])
            per_worker_scale = (beta * np.abs(rec.prev.m.astype(np.float64))
                                + (1 - beta) * np.abs(rec.grads.astype(np.float64))).mean(axis=0)
            eq9 = q["M"] - (beta * q["M_prev"] + (1 - beta) * q["g"])
            ratio = q["M"] / q["B"]
        bad_update += _violations(residual[keep], 2 * TOL_ERROR)
        bad_eq9 += _violations(eq9, TOL_MOMENT * per_worker_scale + TINY)
        bad_facts += int((~(np.abs(ratio) <= 1 + RATIO_SLACK)).sum() + (~(np.abs(q["delta"]) <= 2 + RATIO_SLACK)).sum())
        total += residual.size
        worst_ratio = max(worst_ratio, largest_abs(ratio))
        worst_delta = max(worst_delta, largest_abs(q["delta"]))
    ok = bad_update == bad_eq9 == bad_facts == 0
    return verdict(ok, f"over {total} elements: {bad_update} break the update, {bad_eq9} break Eq. 9 (line 5), "
                       f"{bad_facts} break |m/b| <= 1 or |delta| <= 2; max |m/b| = {worst_ratio:.9g}, max |delta| = "
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
    after=("eq14_decomposition", "contract_eps_convention"),
)
def lemma2(ctx: Context) -> Outcome:
    trajectory = trajectories(ctx)[0]
    beta = trajectory[0].setting.beta
    left_out = np.zeros(LEMMA2_COLUMNS, bool)
    for rec in trajectory:
        mask = column_mask(ctx, derive(rec))
        if mask is not None:
            left_out |= mask[:LEMMA2_COLUMNS]
        for name in ("m", "b", "e", "server_e"):
            values = getattr(rec.new, name)[..., :LEMMA2_COLUMNS]
            if not np.isfinite(values.astype(np.float64)).all():
                return verdict(False, f"{name} is not finite at {rec.setting.name} step {rec.new.t} (Lemma 2 needs "
                                      "finite m, b, e and e_bar)", "non-finite state")
    cols = np.flatnonzero(~left_out)
    if cols.size == 0:
        return verdict(True, "every column is left to contract_eps_convention, which fails", "not evaluated")
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
    return verdict(worst <= 1, f"{len(residuals)} steps x {cols.size} columns, c = {LEMMA2_LR}: max |residual| "
                               f"= {largest:.3g}, at most {worst:.3g} of its rounding tolerance",
                   f"residual / tolerance {worst:.3g}")


@check(
    "eq32_step_sizes_nonincreasing",
    "Eqs. 32 (iii), 35 (v), 36 (iv): alpha_{t-1}/(b_{t-1})_j - alpha_t/(b_t)_j >= 0 for alpha_t = c/sqrt(t); this "
    "needs line 7's running maximum (t > T0), which the paper says is 'commonly not implemented in practice'",
    "every step past T0 of the AMSGrad trajectories must satisfy it (b + eps as b); measured without AMSGrad",
    after=("line2_step_counter", "line7_amsgrad"),
)
def step_sizes_nonincreasing(ctx: Context) -> Outcome:
    broken = checked = free_broken = free_total = 0
    for rec, t in ((rec, t) for trajectory in judged_trajectories(ctx) for t, rec in enumerate(trajectory, start=1)):
        s = rec.setting
        if t < 2:
            continue
        ratio_prev = 1 / np.sqrt(t - 1) / (rec.prev.b.astype(np.float64) + s.eps)
        ratio_now = 1 / np.sqrt(t) / (rec.new.b.astype(np.float64) + s.eps)
        increasing = ~(ratio_prev >= ratio_now)
        if s.T0_path:  # T0 changes between calls: the proof's fixed T0 does not apply
            continue
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
