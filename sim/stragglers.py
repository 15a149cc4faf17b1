"""Stragglers: a synchronous data-parallel step runs at the pace of its slowest GPU.

GPUs of one SKU differ in speed (manufacturing and power management; presets/variability.toml, Sinha et al.,
SC'22). Each GPU's forward + backward time is taken as t (1 + cv Z), Z standard normal, one draw per GPU kept for
the whole job (the spread is persistent, not per-step jitter). A step of p GPUs then takes t (1 + cv E[M_p]) in
expectation, M_p the largest of p standard normals. A node measured on its own (``--single-node-throughput``, and
the single-node figures the built-in GPU profiles were read from) already ran at the pace of the slowest of its G
GPUs, so a job of n nodes is slower than that node by

    factor = (1 + cv E[M_{nG}]) / (1 + cv E[M_G])      (1 on one node; grows with n)

E[M_p] is computed from its integral (order statistics; no sampling), by the trapezoidal rule, which converges
geometrically on a smooth integrand that decays at both ends (``expected_max_normal``).

Per-step jitter adds to it: each step each GPU takes t (1 + s_i + e_it), s_i ~ N(0, cv_speed^2) drawn once for the
job, e_it ~ N(0, cv_step^2) fresh each step, all independent. Within one step the GPUs' sums are i.i.d.
N(0, cv_speed^2 + cv_step^2), so the expected step (over both draws) is t (1 + sigma E[M_p]) with
sigma = sqrt(cv_speed^2 + cv_step^2), and the factor above keeps its form with sigma for cv. The per-step cv has no
published source: it is fitted on the validation corpus (presets/step_jitter.toml,
sim/validation/leave_one_source_out.py).

With gradient accumulation a step is K micro-batches between two synchronisations, and the jitter is taken fresh
for each micro-batch (data loading, OS noise and framework hiccups strike a forward + backward, not a
synchronisation), independent across them: a GPU's step is then K t (1 + s_i + mean_k e_ikt), and the mean of K
independent N(0, cv_step^2) draws is N(0, cv_step^2 / K). The persistent spread does not average. So
sigma = sqrt(cv_speed^2 + cv_step^2 / K) (``step_cv``; issue 27 asks for the jitter to average over micro-batches).
"""

from __future__ import annotations

import math
import tomllib
from functools import lru_cache
from pathlib import Path

import numpy as np

with (Path(__file__).parent / "presets" / "variability.toml").open("rb") as _f:
    GPU_SPEED = tomllib.load(_f)["gpu_speed"]

# the generic spread of per-GPU speed, as a coefficient of variation (standard deviation / median)
GPU_SPEED_CV = GPU_SPEED["variation"] / GPU_SPEED["variation_in_sigmas"]
MAX_GPU_SPEED_CV = 0.5  # beyond this a "spread" is no longer GPUs of one SKU: a wrong unit (percent for a share)

with (Path(__file__).parent / "presets" / "step_jitter.toml").open("rb") as _f:
    STEP_JITTER = tomllib.load(_f)["step_jitter"]

# the generic per-step jitter of one GPU's step time (standard deviation / median), FITTED on the corpus
STEP_JITTER_CV = float(STEP_JITTER["cv"])
# the values the fit chooses from, fixed before it was first run
STEP_JITTER_GRID = tuple(round(0.02 * k, 2) for k in range(11))


def _check_cv(value, owner: str, meaning: str, example: float) -> float:
    if not (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= MAX_GPU_SPEED_CV):
        raise ValueError(f"{owner} must be a number from 0 to {MAX_GPU_SPEED_CV:g} (standard deviation / median "
                         f"of {meaning}, e.g. {example:.4f}), got {value!r}")
    return float(value)


def check_gpu_speed_cv(value, owner: str) -> float:
    """``value`` as a coefficient of variation of per-GPU speed (0: GPUs of equal speed), or one ValueError
    naming ``owner``."""
    return _check_cv(value, owner, "per-GPU speed", GPU_SPEED_CV)


def check_step_jitter_cv(value, owner: str) -> float:
    """``value`` as a coefficient of variation of one GPU's step time from step to step (0: no jitter), or one
    ValueError naming ``owner``."""
    return _check_cv(value, owner, "one GPU's step time from step to step", STEP_JITTER_CV)


def combined_cv(gpu_speed_cv: float, step_jitter_cv: float) -> float:
    """sigma of one GPU's step within one step: the persistent spread and the per-step jitter, independent."""
    return math.hypot(gpu_speed_cv, step_jitter_cv)


def step_cv(gpu_speed_cv: float, step_jitter_cv: float, micro_batches: int = 1) -> float:
    """sigma of one GPU's optimizer step of ``micro_batches`` micro-batches relative to its mean (module docstring):
    the persistent spread, and the per-micro-batch jitter averaged over the micro-batches, sqrt(cv_speed^2 +
    cv_step^2 / K)."""
    if not (isinstance(micro_batches, int) and not isinstance(micro_batches, bool) and micro_batches >= 1):
        raise ValueError(f"step_cv: micro_batches must be a positive integer, got {micro_batches!r}")
    return combined_cv(gpu_speed_cv, step_jitter_cv / math.sqrt(micro_batches))


# the trapezoidal rule's grid for E[M_p]: step 2^-7 (exact in binary) on [-12, 20], outside of which the integrand's
# mass is below phi(12) = 5e-32 on the left and p phi(20) = p 5.5e-88 on the right
_GRID_STEP = 2.0 ** -7
_GRID_LO, _GRID_HI = -12, 20
MAX_EXPECTED_MAX_N = 10**60  # where p phi(20) would no longer be negligible (p 5.5e-88 > 5e-28)


@lru_cache(maxsize=1)
def _normal_on_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid x, the standard normal density phi(x) and log Phi(x), each to a few ulps (log Phi from erfc: no
    cancellation in either tail)."""
    x = np.arange(_GRID_LO / _GRID_STEP, _GRID_HI / _GRID_STEP + 1) * _GRID_STEP
    log_cdf = np.array([math.log(0.5 * math.erfc(-v / math.sqrt(2))) if v < 0
                        else math.log1p(-0.5 * math.erfc(v / math.sqrt(2))) for v in x])
    return x, np.exp(-x * x / 2) / math.sqrt(2 * math.pi), log_cdf


@lru_cache(maxsize=1024)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals], to about 1e-14 absolute:

    E[M_n] = integral x n phi(x) Phi(x)^(n-1) dx over the real line   (the density of the largest of n draws).

    The integrand is analytic and falls off like a Gaussian on both sides, so the trapezoidal rule on a uniform grid
    converges geometrically in the step (Trefethen & Weideman, "The exponentially convergent trapezoidal rule", SIAM
    Review 56(3), 2014, section 5): a step of 2^-7 against a peak at least 1/sqrt(2 ln n) wide leaves the rounding
    of the sum. Checked against adaptive quadrature in tests/test_sim_stragglers.py."""
    if not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_EXPECTED_MAX_N):
        raise ValueError(f"expected_max_normal: n must be an integer from 1 to {MAX_EXPECTED_MAX_N:.0e}, got {n!r}")
    x, pdf, log_cdf = _normal_on_grid()
    return float(_GRID_STEP * np.dot(x, n * pdf * np.exp((n - 1) * log_cdf)))


def straggler_factor(n_gpus: int, gpus_per_node: int, cv: float) -> float:
    """How much longer the job's slowest GPU takes than one measured node's slowest (>= 1; 1 for one node)."""
    if cv == 0 or n_gpus <= gpus_per_node:
        return 1.0
    return (1 + cv * expected_max_normal(n_gpus)) / (1 + cv * expected_max_normal(gpus_per_node))
