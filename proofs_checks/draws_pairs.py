"""Pair tests of the counter-based draws (``birder_ref.draws``): 16 x 16 chi-square tests on disjoint pairs of
draws, the measurement behind the draws docstring's quality paragraph.

    python -m proofs_checks.draws_pairs               # the lag set at 2**22 draws (3 seeds, 174 tests; ~15 s)
    python -m proofs_checks.draws_pairs --log2-draws 24  # d = 2**b, 12 <= b < 24, at 2**24 draws (72 tests; ~30 s)

Each test's statistic exceeds the chi2(255) quantile at 1 - 1e-9 with probability 1e-9 for independent uniform
draws; the draws are fixed by their seeds, so the outcome is too.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from birder_ref import draws

SEEDS = (2024, 7, 99)
FALSE_FAILURE = 1e-9
# the other draw of a pair at the same index: (step, stream) against step 1, stream 0
OTHER_KEYS = {"next stream": (1, 1), "next step": (2, 0), "server stream": (1, draws.SERVER_STREAM)}


def pair_chi_square(u: np.ndarray, v: np.ndarray, bits: str) -> float:
    """The 16 x 16 chi-square statistic of the pairs (u_j, v_j), binned on the draws' top 4 bits ("high") or on
    bits 4-7 of their 24 ("low"); chi2(255) distributed when u and v are independent uniforms."""
    shift = 20 if bits == "high" else 16
    a, b = ((np.floor(x * 2**24).astype(np.int64) >> shift) & 15 for x in (u, v))
    counts = np.bincount(a * 16 + b, minlength=256)
    expected = u.size / 256
    return float(((counts - expected) ** 2 / expected).sum())


def lag_pairs(u: np.ndarray, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint pairs (u(i), u(i + lag)): i runs over the indices whose block of ``lag`` is even."""
    first = np.flatnonzero((np.arange(u.size) // lag) % 2 == 0)
    first = first[first + lag < u.size]
    return u[first], u[first + lag]


def default_lags(log2_draws: int) -> list[int]:
    """Every power of two below 2**22 and 3, 65535, 65537, 1000003 at 2**22 draws or fewer; past that the powers
    2**b, 12 <= b < log2_draws."""
    if log2_draws <= 22:
        return [2**b for b in range(log2_draws)] + [d for d in (3, 65535, 65537, 1000003) if d < 2**log2_draws]
    return [2**b for b in range(12, log2_draws)]


def run(log2_draws: int, lags: list[int], key_pairs: bool) -> list[tuple[int, str, str, float]]:
    """(seed, pair, bits, statistic) of every test: each lag and, if ``key_pairs``, each of ``OTHER_KEYS``."""
    n = 1 << log2_draws
    rows = []
    for seed in SEEDS:
        u = draws.uniforms(seed, 1, 0, n)
        pairs = {f"d={lag}": lag_pairs(u, lag) for lag in lags}
        if key_pairs:
            pairs |= {name: (u[: n // 2], draws.uniforms(seed, step, stream, n // 2))
                      for name, (step, stream) in OTHER_KEYS.items()}
        rows += [(seed, name, bits, pair_chi_square(a, b, bits)) for name, (a, b) in pairs.items()
                 for bits in ("high", "low")]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2-draws", type=int, default=22, choices=range(8, 27), metavar="{8..26}",
                        help="draws per seed, as a power of two (default 22)")
    args = parser.parse_args(argv)
    rows = run(args.log2_draws, default_lags(args.log2_draws), key_pairs=args.log2_draws <= 22)
    limit = stats.chi2.isf(FALSE_FAILURE, 255)
    failed = [r for r in rows if r[3] >= limit]
    print(f"2**{args.log2_draws} draws, seeds {SEEDS}: {len(rows) - len(failed)} of {len(rows)} pair tests pass; "
          f"largest statistic {max(r[3] for r in rows):.1f} against the chi2(255) quantile {limit:.1f} at 1 - 1e-9")
    for seed, name, bits, statistic in failed:
        print(f"  FAILED seed {seed}, {name}, {bits} bits: {statistic:.1f}")


if __name__ == "__main__":
    main()
