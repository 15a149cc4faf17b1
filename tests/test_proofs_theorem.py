"""The Theorem 1 problem has the constants the check uses, the check is informative, and the paper's printed
constants cannot hold for c < 1 (the c vs 1/c slip in the proof's last step), shown without any randomness."""

import math

import numpy as np

from proofs_checks import theorem


def test_problem_constants_hold_on_a_dense_grid():
    u = np.linspace(-60, 60, 2_000_001)
    k = theorem.problem_constants()
    f_prime = theorem.F_prime(u)
    f_second = np.gradient(f_prime, u) / theorem.SCALE  # f''(x) = F''(u) / s
    assert np.abs(f_prime).max() <= k["G"]
    assert np.abs(f_second).max() <= k["L"]
    assert f_second.min() < 0  # non-convex
    assert np.argmin(theorem.F(u)) == np.argmin(np.abs(u))  # the global minimum is at u = 0
    assert abs(theorem.F_prime(theorem.START_U)) > 0.98


def test_the_bound_check_is_informative_at_the_last_checkpoint():
    k = theorem.problem_constants()
    C1, C2 = theorem.paper_constants(theorem.C, k["G"], k["L"], k["d"], theorem.BETA, k["rho"], k["f_gap"])
    eps = theorem.hoeffding_epsilon(theorem.PROBLEMS, theorem.FALSE_FAILURE / len(theorem.CHECKPOINTS))
    assert theorem.bound(theorem.STEPS, C1, C2) + eps < 1.0  # below the largest possible E[X^2]


def test_printed_constants_fail_for_small_c_while_the_corrected_ones_hold():
    """With alpha_t = c/sqrt(t), |x_t - x_1| <= 2c sqrt(T), so X_T >= min |f'| over that reach, surely.
    At c = 0.05 and T = 64 that exceeds the printed bound; the bound with C1, C2 divided by c^2 (Eq. 39 with
    T alpha_T = c sqrt(T)) stays above it."""
    c, T = 0.05, 64
    k = theorem.problem_constants()
    gap = theorem.SCALE * (theorem.F(theorem.START_U) - theorem.F(0.0)) + 2 * c
    C1, C2 = theorem.paper_constants(c, k["G"], k["L"], k["d"], theorem.BETA, k["rho"], gap)
    reach = 2 * c * math.sqrt(T) / theorem.SCALE
    u = np.linspace(theorem.START_U - reach, theorem.START_U + reach, 10_001)
    surely_at_least = float(np.abs(theorem.F_prime(u)).min()) ** 2
    assert surely_at_least > theorem.bound(T, C1, C2)
    assert surely_at_least <= theorem.bound(T, C1 / c**2, C2 / c**2)
