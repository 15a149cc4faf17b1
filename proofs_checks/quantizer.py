"""Eq. 5 and Lemma 1: the stochastic 1-bit quantizer, checked exactly on grids of float32 draws (no sampling).

With the draw u uniform on the grid k / 2**B (k = 0 .. 2**B - 1), the probability that Q(y, u) = +1 is exactly
(number of grid points giving +1) / 2**B. Every float32 uniform an implementation can be fed lies on the grid
k / 2**24, so the 2**24 grid gives the implementation's exact P(Q(y) = +1); coarser grids are subsets of it.
Eq. 5 then requires |P - (y + 1) / 2| <= 2**-B (one grid step) + 2**-24 (float32 rounding of (y + 1) / 2).
"""

from __future__ import annotations

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict

FULL_BITS = 24
FULL_GRID_YS = np.array([0.1, -1 / 3, 0.5], np.float32)
COARSE_BITS = 14
CHUNK_ROWS = 128  # rows of the coarse sweep per quantize call (2M elements)
THRESHOLD_ROUNDING = 2.0**-24


def grid(bits: int) -> np.ndarray:
    """Every float32 k / 2**bits in [0, 1)."""
    return np.arange(2**bits, dtype=np.float32) * np.float32(2.0**-bits)


def sweep_ys() -> np.ndarray:
    """1024 float32 values in [-1, 1]: an even sweep, the ends and their neighbours, tiny and subnormal values."""
    one_minus = np.float32(1) - np.float32(2.0**-24)
    special = np.array([1, -1, one_minus, -one_minus, 0.0, -0.0, 2.0**-24, 1e-8, 1e-30, 1e-45, 1 - 2.0**-23, 0.5,
                        1 / 3], np.float32)
    special = np.concatenate([special, -special])
    even = np.linspace(-1, 1, 513, dtype=np.float32)
    rest = 1024 - even.size - special.size
    random = np.random.default_rng(5).uniform(-1, 1, rest).astype(np.float32)
    return np.concatenate([even, special, random])


def plus_counts(ctx: Context, ys: np.ndarray, bits: int) -> tuple[np.ndarray, int]:
    """For each y, how many grid draws give +1; and how many outputs were not +-1 at all."""
    u = grid(bits)
    counts, not_sign = np.zeros(ys.size, np.int64), 0
    rows = max(1, CHUNK_ROWS * 2**COARSE_BITS // u.size)
    for start in range(0, ys.size, rows):
        y = np.repeat(ys[start:start + rows, None], u.size, axis=1)
        q = ctx.target.run_quantize(y, np.broadcast_to(u, y.shape).copy())
        counts[start:start + rows] = (q == 1).sum(axis=1)
        not_sign += int((~((q == 1) | (q == -1))).sum())
    return counts, not_sign


def exact_probabilities(ctx: Context) -> dict:
    """P(Q(y) = +1) on the full grid for a few y and on the 2**14 grid for 1024 y, computed once per context."""

    def compute():
        full, full_bad = plus_counts(ctx, FULL_GRID_YS, FULL_BITS)
        sweep = sweep_ys()
        coarse, coarse_bad = plus_counts(ctx, sweep, COARSE_BITS)
        return {
            "ys": (FULL_GRID_YS, sweep),
            "P": (full / 2.0**FULL_BITS, coarse / 2.0**COARSE_BITS),
            "tolerance": (2.0**-FULL_BITS + THRESHOLD_ROUNDING, 2.0**-COARSE_BITS + THRESHOLD_ROUNDING),
            "not_sign": full_bad + coarse_bad,
        }

    return ctx.shared("exact_probabilities", compute)


def grids(ctx: Context):
    """(label, y values, exact P(Q(y) = +1), tolerance) for the full and the coarse grid."""
    exact = exact_probabilities(ctx)
    return zip((f"2^{FULL_BITS} grid", f"2^{COARSE_BITS} grid"), exact["ys"], exact["P"], exact["tolerance"],
               strict=True)


@check(
    "eq5_support",
    "Eq. 5: Q(y) takes only the values +1 and -1, for any y (|y| > 1 included) and any draw",
    "every float32 output over 1052 y x 1028 grid and edge draws, in 1-D and 2-D shapes",
    needs=("quantize",),
)
def support(ctx: Context) -> Outcome:
    big = np.array([1 + 2.0**-23, 1.5, 2, 3, 1e3, 1e30, np.finfo(np.float32).max], np.float32)
    ys = np.concatenate([sweep_ys(), big, -big])
    us = np.concatenate([grid(10), np.array([2.0**-24, 0.5 - 2.0**-24, 1 - 2.0**-24], np.float32)])
    y, u = np.meshgrid(ys, us, indexing="ij")
    q = ctx.target.run_quantize(y.astype(np.float32), u.astype(np.float32))
    q2 = ctx.target.run_quantize(y[:, 0].astype(np.float32), u[:, 0].astype(np.float32))  # 1-D
    bad = int((~((q == 1) | (q == -1))).sum()) + int((~((q2 == 1) | (q2 == -1))).sum())
    bad += exact_probabilities(ctx)["not_sign"]
    return verdict(bad == 0, f"{bad} outputs outside {{-1, +1}} (the exact-probability grids included)",
                   f"{bad} non-sign outputs")


@check(
    "eq5_probability_exact",
    "Eq. 5: P(Q(y) = +1) = (y + 1) / 2 for -1 <= y <= 1",
    "exact counts over every grid draw: 2^24 draws for 3 y, 2^14 draws for 1024 y; tolerance one grid step "
    "+ 2^-24",
    needs=("quantize",),
)
def probability_exact(ctx: Context) -> Outcome:
    worst, parts = 0.0, []
    for label, ys, P, tol in grids(ctx):
        error = np.abs(P - (ys.astype(np.float64) + 1) / 2)
        k = int(np.argmax(error))
        worst = max(worst, float(error[k] / tol))
        parts.append(f"{label}: max |P - (y+1)/2| = {error[k]:.3g} at y = {ys[k]:.9g} (tolerance {tol:.3g})")
    return verdict(worst <= 1, "; ".join(parts), f"max |P - (y+1)/2| = {worst:.3g} x (grid step + 2^-24)")


@check(
    "lemma1_moments",
    "Lemma 1 (Eqs. 16-18): E[Q(y)] = y and E[(y - Q(y))^2] = 1 - y^2 <= 1 for |y| <= 1",
    "computed exactly from the grid counts of eq5_probability_exact; tolerance from one grid step",
    needs=("quantize",),
    after=("eq5_probability_exact",),
)
def lemma1_moments(ctx: Context) -> Outcome:
    worst_mean = worst_var = 0.0
    for _, ys, P, tol in grids(ctx):
        y = ys.astype(np.float64)
        mean = 2 * P - 1  # E[Q] for a +-1 variable
        second = P * (y - 1) ** 2 + (1 - P) * (y + 1) ** 2  # E[(y - Q)^2]
        worst_mean = max(worst_mean, float(np.max(np.abs(mean - y) / (2 * tol))))
        worst_var = max(worst_var, float(np.max(np.abs(second - (1 - y * y)) / (4 * np.abs(y) * tol + 1e-15))))
    ok = worst_mean <= 1 and worst_var <= 1
    return verdict(ok, f"E[Q] - y within {worst_mean:.3g} of its tolerance 2(step + 2^-24); "
                       f"E[(y-Q)^2] - (1 - y^2) within {worst_var:.3g} of 4|y|(step + 2^-24)",
                   f"mean {worst_mean:.3g}, variance {worst_var:.3g} x their tolerances")


@check(
    "eq5_saturation",
    "Eq. 5 at p = 1 and p = 0, and its clipped extension: |y| >= 1 gives sign(y) for every draw",
    "y = +-1, +-(1 + 2^-23), ..., +-FLT_MAX against all 2^16 grid draws and 1 - 2^-24",
    needs=("quantize",),
    after=("eq5_probability_exact",),
)
def saturation(ctx: Context) -> Outcome:
    magnitudes = np.array([1, 1 + 2.0**-23, 1.5, 2, 3, 1e3, 1e30, np.finfo(np.float32).max], np.float32)
    ys = np.concatenate([magnitudes, -magnitudes])
    us = np.concatenate([grid(16), np.array([1 - 2.0**-24], np.float32)])
    y, u = np.meshgrid(ys, us, indexing="ij")
    q = ctx.target.run_quantize(y, u)
    wrong = q != np.sign(y)
    if not wrong.any():
        return verdict(True, f"{q.size} outputs all equal sign(y)", "0 wrong")
    i, j = np.argwhere(wrong)[0]
    return verdict(False, f"{int(wrong.sum())} of {q.size} outputs differ from sign(y); first: Q({y[i, j]:.9g}, "
                          f"u={u[i, j]:.9g}) = {q[i, j]:g}", f"{int(wrong.sum())} wrong")
