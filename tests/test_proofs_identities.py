"""Lemma 2 holds exactly (zero residual in rational arithmetic) on an exact run of Algorithm 1, so the identity
the suite checks on implementations is the paper's and not an artefact of rounding; the statistics helper's
Hoeffding bound is checked against exact binomial tails."""

from fractions import Fraction

import numpy as np
from scipy.stats import binom

from proofs_checks.identities import lemma2_residuals
from proofs_checks.theorem import hoeffding_epsilon


def quantize_exact(y: Fraction, u: Fraction) -> Fraction:
    p = (min(max(y, Fraction(-1)), Fraction(1)) + 1) / 2
    return Fraction(1) if u < p else Fraction(-1)


def exact_run(T=10, n=3, d=2, beta=Fraction(9, 10), eps=Fraction(1, 10**6), seed=4):
    """Algorithm 1 in Fractions, with rational draws; returns the per-step means Lemma 2 needs (index from 1)."""
    rng = np.random.default_rng(seed)
    m = [[Fraction(0)] * d for _ in range(n)]
    b = [[Fraction(0)] * d for _ in range(n)]
    e = [[Fraction(0)] * d for _ in range(n)]
    server_e = [Fraction(0)] * d
    out = {key: [None] for key in ("u_bar", "M", "B", "g", "delta", "E")}
    for _ in range(T):
        g = [[Fraction(int(k), 8) for k in rng.integers(-16, 17, d)] for _ in range(n)]
        draws = [[Fraction(int(k), 2**10) for k in rng.integers(0, 2**10, d)] for _ in range(n + 1)]
        E_prev = [sum(e[i][j] for i in range(n)) / n + server_e[j] for j in range(d)]
        u = [[None] * d for _ in range(n)]
        r = [[None] * d for _ in range(n)]
        for i in range(n):
            for j in range(d):
                m[i][j] = beta * m[i][j] + (1 - beta) * g[i][j]
                b[i][j] = beta * b[i][j] + (1 - beta) * abs(g[i][j])
                r[i][j] = m[i][j] / (b[i][j] + eps)
                y = r[i][j] + e[i][j]
                u[i][j] = quantize_exact(y, draws[i][j])
                e[i][j] = y - u[i][j]
        u_bar = []
        for j in range(d):
            z = sum(u[i][j] for i in range(n)) / n + server_e[j]
            u_bar.append(quantize_exact(z, draws[n][j]))
            server_e[j] = z - u_bar[j]
        M = [sum(m[i][j] for i in range(n)) / n for j in range(d)]
        B = [sum(b[i][j] + eps for i in range(n)) / n for j in range(d)]
        out["u_bar"].append(np.array(u_bar, dtype=object))
        out["M"].append(np.array(M, dtype=object))
        out["B"].append(np.array(B, dtype=object))
        out["g"].append(np.array([sum(g[i][j] for i in range(n)) / n for j in range(d)], dtype=object))
        out["delta"].append(np.array([sum(r[i][j] for i in range(n)) / n - M[j] / B[j] for j in range(d)],
                                     dtype=object))
        out["E"].append(np.array(E_prev, dtype=object))
    out["E"].append(np.array([sum(e[i][j] for i in range(n)) / n + server_e[j] for j in range(d)], dtype=object))
    return out


def alphas(T, c=Fraction(1, 10)):
    """Any positive sequence with alpha_0 = alpha_1 will do for the algebra; this one decreases like 1/t."""
    return [c] + [c / t for t in range(1, T + 1)]


def test_lemma2_is_exact_in_rational_arithmetic():
    run = exact_run()
    residuals = lemma2_residuals(alphas(10), Fraction(9, 10), run["u_bar"], run["M"], run["B"], run["g"],
                                 run["delta"], run["E"])
    assert len(residuals) == 10
    assert all(value == 0 for r in residuals for value in r)
    assert any(value != 0 for d in run["delta"][1:] for value in d)  # delta is not trivially zero here


def test_lemma2_check_can_fail_without_the_server_error():
    """Dropping the server's error from e_t (Eq. 12) breaks the identity: the check is not vacuous."""
    run = exact_run()
    worker_only = [None] + [E - E for E in run["E"][1:]]
    residuals = lemma2_residuals(alphas(10), Fraction(9, 10), run["u_bar"], run["M"], run["B"], run["g"],
                                 run["delta"], worker_only)
    assert any(value != 0 for r in residuals for value in r)


def test_hoeffding_epsilon_matches_the_notes_and_bounds_exact_binomial_tails():
    # Hoeffding, two-sided, values in [-1, 1], alpha = 1e-9, n = 1e5 -> 0.0207
    assert abs(hoeffding_epsilon(10**5, 1e-9 / 2, value_range=2.0) - 0.0207) < 5e-5
    for n, p in ((4096, 0.5), (4096, 0.05), (1000, 0.9)):
        eps = hoeffding_epsilon(n, 1e-9)
        k = int(np.ceil(n * (p + eps)))
        assert binom.sf(k - 1, n, p) <= 1e-9  # P(mean >= p + eps) for a mean of n Bernoulli(p) values
