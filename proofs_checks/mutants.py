"""Deliberately wrong implementations: each breaks one line of Algorithm 1 or one property of Eq. 5, and names
the check that must reject it (tests/test_proofs_mutants.py asserts it does; ``birder check --impl
proofs_checks.mutants:NAME`` shows it). They are ``independent.Birder`` with one method overridden.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from proofs_checks.independent import Birder
from proofs_checks.mutants_regimes import implementations_by_name


class SignQuantizer(Birder):
    """Deterministic sign(y): biased (E[Q(y)] = sign(y) != y)."""

    def quantize(self, y, u):
        return np.where(np.asarray(y) >= 0, 1.0, -1.0).astype(np.float32)


class BiasedQuantizer(Birder):
    """P(+1) = (y + 1)/2 + 2^-10: a bias of 0.002 in E[Q]."""

    def quantize(self, y, u):
        p = (np.clip(np.asarray(y, np.float64), -1, 1) + 1) / 2 + 2.0**-10
        return np.where(np.asarray(u) < p, 1.0, -1.0).astype(np.float32)


class SlightlyBiasedQuantizer(Birder):
    """P(+1) = p (1 + 2^-20): a bias below 1e-6, visible only on the full 2^24 grid of draws."""

    def quantize(self, y, u):
        p = (np.clip(np.asarray(y, np.float64), -1, 1) + 1) / 2 * (1 + 2.0**-20)
        return np.where(np.asarray(u, np.float64) < p, 1.0, -1.0).astype(np.float32)


class InclusiveThreshold(Birder):
    """+1 when u <= p: Q(-1, u=0) = +1 although P(Q(-1) = +1) = 0."""

    def quantize(self, y, u):
        p = (np.clip(np.asarray(y, np.float64), -1, 1) + 1) / 2
        return np.where(np.asarray(u, np.float64) <= p, 1.0, -1.0).astype(np.float32)


class NoWorkerError(Birder):
    """Line 9 dropped: the worker keeps no error."""

    def worker_error(self, y, u):
        return np.zeros_like(y)


class FlippedWorkerError(Birder):
    """Line 9 with the sign flipped: e = u - y."""

    def worker_error(self, y, u):
        return u - y


class ClippedWorkerError(Birder):
    """Line 9 clipped to [-1, 1]."""

    def worker_error(self, y, u):
        return np.clip(y - u, -1, 1)


class NoServerError(Birder):
    """Lines 12-13 without the server's error: u_bar = Q(mean u), e_bar stays 0."""

    def server_input(self, u, server_e):
        return u.mean(axis=0)

    def server_error(self, z, u_bar):
        return np.zeros_like(z)


class ServerErrorNotAdded(Birder):
    """The server updates its error but quantizes the bare mean."""

    def server_input(self, u, server_e):
        self._server_e = server_e
        return u.mean(axis=0)

    def server_error(self, z, u_bar):
        return z + self._server_e - u_bar


class SumNotMean(Birder):
    """Line 12 with the sum of the workers' outputs instead of their mean."""

    def server_input(self, u, server_e):
        return u.sum(axis=0) + server_e


class ServerUsesWorkerDraws(Birder):
    """The server quantizes with worker 0's draws instead of its own."""

    def server_quantize(self, z, u_server, u_worker):
        return self.quantize(z, u_worker[0])


class SquaredDenominator(Birder):
    """Line 6 tracks g^2 (Adam's v without the square root): m/b is no longer bounded by 1."""

    def moments(self, state, g, beta):
        m, _ = super().moments(state, g, beta)
        b_hat = beta * state["b_hat"].astype(np.float64) + (1 - beta) * g * g
        return m, np.minimum(b_hat, np.finfo(np.float32).max).astype(np.float32)


class RootMeanSquareDenominator(Birder):
    """Line 6 as sqrt(EMA of g^2) (Adam with beta2 = beta): |m| <= b still holds, but b is not Eq. 4's b."""

    def moments(self, state, g, beta):
        m, _ = super().moments(state, g, beta)
        v = beta * state["b_hat"].astype(np.float64) ** 2 + (1 - beta) * g * g
        return m, np.sqrt(v).astype(np.float32)


class LerpMomentum(Birder):
    """Line 5 as a lerp in float32, m + (1 - beta)(g - m), as torch's lerp_ does: at ordinary magnitudes |m| > b by
    an ulp at times (rounding, which ``contract_float32_ratio`` accepts), but g - m overflows to inf for finite g and
    m of opposite signs near the largest float32, where beta m + (1 - beta) g is finite: a warning
    (``contract_float32_extremes``), which fails only under ``birder check --strict``."""

    def moments(self, state, g, beta):
        _, b_hat = super().moments(state, g, beta)
        with np.errstate(over="ignore", invalid="ignore"):
            m = state["m"] + np.float32(1 - beta) * (g.astype(np.float32) - state["m"])
        b_hat = state["b_hat"] * np.float32(beta) + np.float32(1 - beta) * np.abs(g.astype(np.float32))
        return m.astype(np.float32), b_hat.astype(np.float32)


class Float32BetaOnLine6(Birder):
    """Line 6 as a kernel given beta as a float32 argument computes it, with 1 - float32(beta) in float32 (1.3% above
    1 - beta at beta = 0.999999), beside line 5's 1 - beta: every step within lines 5-6's tolerance, yet b_hat
    averages |g| 1.3% higher than m averages g, and r = m / (b + eps) is that much smaller."""

    def moments(self, state, g, beta):
        m, _ = super().moments(state, g, beta)
        beta32 = np.float32(beta)
        b_hat = beta32 * state["b_hat"] + (np.float32(1) - beta32) * np.abs(g.astype(np.float32))
        return m, b_hat.astype(np.float32)


class InternalRandom(Birder):
    """Ignores the injected worker draws and draws its own."""

    def worker_draws(self, u_worker, t):
        return np.random.default_rng().random(np.shape(u_worker), dtype=np.float32)


class SeededInternalRandom(Birder):
    """Draws its own worker draws from a fixed seed per step: deterministic, but not the injected draws."""

    def worker_draws(self, u_worker, t):
        return np.random.default_rng(t).random(np.shape(u_worker), dtype=np.float32)


class AmsgradAlways(Birder):
    """Line 7 ignoring T0: the running maximum from the first step."""

    def denominator(self, state, b_hat, t, T0):
        return np.maximum(state["b"], b_hat)


class AmsgradOffByOne(Birder):
    """Line 7 switching at t >= T0 instead of t > T0."""

    def denominator(self, state, b_hat, t, T0):
        return np.maximum(state["b"], b_hat) if T0 is not None and t >= T0 else b_hat


class MutatingStep(Birder):
    """Updates the caller's state in place (as a torch optimizer would) and returns it."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        u_bar, new = super().step(state, grads, beta, eps, u_worker, u_server, T0)
        for key, value in new.items():
            if isinstance(value, np.ndarray):
                state[key][...] = value
            else:
                state[key] = value
        return u_bar, state


class StaleMomentum(Birder):
    """Line 8 quantizes with the previous step's m/b."""

    def worker_input(self, m, b, e, eps):
        return self._previous + e

    def moments(self, state, g, beta):
        self._previous = state["m"].astype(np.float64) / (state["b"].astype(np.float64) + 1e-8)
        return super().moments(state, g, beta)


class AscentStep(Birder):
    """Returns -u_bar: the caller's x -= lr * u_bar climbs. Theorem 1's bound with the printed constants is loose
    enough on the check's problem that this climb stays under it (theorem1_decay_measured shows a positive slope);
    line 12 rejects it."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        u_bar, new = super().step(state, grads, beta, eps, u_worker, u_server, T0)
        return -u_bar, new


def _without_quantize() -> SimpleNamespace:
    birder = Birder()
    return SimpleNamespace(init=birder.init, step=birder.step)


# name -> (implementation, the checks that must reject it)
MUTANTS = {
    "sign_quantizer": (SignQuantizer(), ("eq5_probability_exact",)),
    "biased_quantizer": (BiasedQuantizer(), ("eq5_probability_exact",)),
    "slightly_biased_quantizer": (SlightlyBiasedQuantizer(), ("eq5_probability_exact",)),
    "inclusive_threshold": (InclusiveThreshold(), ("eq5_saturation",)),
    "no_worker_error": (NoWorkerError(), ("line9_worker_error",)),
    "flipped_worker_error": (FlippedWorkerError(), ("line9_worker_error",)),
    "clipped_worker_error": (ClippedWorkerError(), ("line9_worker_error",)),
    "no_server_error": (NoServerError(), ("line13_server_error",)),
    "server_error_not_added": (ServerErrorNotAdded(), ("line12_server_quantizer",)),
    "sum_not_mean": (SumNotMean(), ("line12_server_quantizer",)),
    "server_uses_worker_draws": (ServerUsesWorkerDraws(), ("line12_server_quantizer",)),
    "squared_denominator": (SquaredDenominator(), ("ratio_bound",)),
    "root_mean_square_denominator": (RootMeanSquareDenominator(), ("line5_6_moments",)),
    "internal_random": (InternalRandom(), ("line8_worker_quantizer",)),
    "seeded_internal_random": (SeededInternalRandom(), ("line8_worker_quantizer",)),
    "amsgrad_always": (AmsgradAlways(), ("line7_amsgrad",)),
    "amsgrad_off_by_one": (AmsgradOffByOne(), ("line7_amsgrad",)),
    "mutating_step": (MutatingStep(), ("determinism",)),
    "stale_momentum": (StaleMomentum(), ("line9_worker_error",)),
    "ascent_step": (AscentStep(), ("line12_server_quantizer",)),
    "lerp_momentum": (LerpMomentum(), ("contract_float32_extremes",)),
    "float32_beta_on_line6": (Float32BetaOnLine6(), ("line5_6_one_average",)),
    "missing_quantize": (_without_quantize(), ("interface",)),
}



__getattr__ = implementations_by_name(__name__, MUTANTS, {})
