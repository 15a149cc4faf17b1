"""A second, unseen test of the suite, written after its checks: wrong implementations whose bug shows only in
some regime (many workers, large d, long runs, extreme magnitudes, ties), contract breaches, and correct
alternatives the suite must accept. tests/test_proofs_regime_mutants.py asserts that each wrong one is rejected,
with the named check as the one root cause, and that each correct one passes every check.

They are ``Plain`` (Algorithm 1 as the interface states it, float32, written here without birder_ref) with one
method overridden. ``birder check --impl proofs_checks.mutants_regimes:NAME`` shows any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PlainState:
    m: np.ndarray
    b_hat: np.ndarray
    b: np.ndarray
    e: np.ndarray
    server_e: np.ndarray
    t: int


class Plain:
    """Algorithm 1 lines 5-13 in float32, each line one method."""

    def quantize(self, y, u):
        """Eq. 5: +1 where u < (clip(y, -1, 1) + 1)/2."""
        y = np.asarray(y, np.float32)
        return np.where(np.asarray(u, np.float32) < (np.clip(y, -1, 1) + np.float32(1)) / np.float32(2),
                        np.float32(1), np.float32(-1))

    def init(self, n_workers, dim):
        zeros = np.zeros((n_workers, dim), np.float32)
        return PlainState(zeros, zeros.copy(), zeros.copy(), zeros.copy(), np.zeros(dim, np.float32), 0)

    def counter(self, t):
        return t + 1

    def moments(self, state, g, beta, t):
        """Lines 5-6, beta a Python float (a NumPy float64 beta would promote the arrays to float64)."""
        beta = float(beta)
        return beta * state.m + (1 - beta) * g, beta * state.b_hat + (1 - beta) * np.abs(g)

    def ratio(self, m, b, eps):
        """r = m / (b + eps)."""
        return m / (b + np.float32(eps))

    def worker_quantize(self, y, u_worker):
        return self.quantize(y, u_worker)

    def mean(self, u):
        """Line 12's average of the workers' +-1."""
        return u.sum(axis=0) / np.float32(u.shape[0])

    def server_quantize(self, z, u_server):
        return self.quantize(z, u_server)

    def finish(self, state, new, u_bar):
        """What step hands back: (u_bar, the new state)."""
        return u_bar, new

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        t = self.counter(state.t)
        m, b_hat = self.moments(state, grads, beta, t)
        b = np.maximum(state.b, b_hat) if T0 is not None and t > T0 else b_hat
        y = self.ratio(m, b, eps) + state.e
        u = self.worker_quantize(y, u_worker)
        z = self.mean(u) + state.server_e
        u_bar = self.server_quantize(z, u_server)
        return self.finish(state, PlainState(m, b_hat, b, y - u, z - u_bar, t), u_bar)


# ---- wrong in some regime -------------------------------------------------------------------------------------


class GroupMeanServer(Plain):
    """The server averages the means of groups of 4 workers (one per GPU of a node, say): equal to the mean only
    when n is a multiple of 4 or the workers agree."""

    def mean(self, u):
        groups = [u[i:i + 4].mean(axis=0) for i in range(0, u.shape[0], 4)]
        return np.mean(groups, axis=0).astype(np.float32)


class Int8VoteSum(Plain):
    """The vote sum kept in int8: wraps past 127 agreeing workers."""

    def mean(self, u):
        return u.astype(np.int8).sum(axis=0, dtype=np.int8).astype(np.float32) / np.float32(u.shape[0])


class Uint8PlusCount(Plain):
    """The count of +1 votes kept in uint8 (mean = 2 count / n - 1): wraps past 255 agreeing workers."""

    def mean(self, u):
        plus = (u > 0).astype(np.uint8).sum(axis=0, dtype=np.uint8)
        return np.float32(2) * plus.astype(np.float32) / np.float32(u.shape[0]) - np.float32(1)


class PartialGridKernel(Plain):
    """Lines 5-6 launched on a grid covering only the first 2^16 elements of each worker."""

    def moments(self, state, g, beta, t):
        m, b_hat = super().moments(state, g, beta, t)
        m[:, 65536:], b_hat[:, 65536:] = state.m[:, 65536:], state.b_hat[:, 65536:]
        return m, b_hat


class FrozenBHatAfterWarmup(Plain):
    """b_hat stops being updated after step 40 (a "warm-up" that was never in the paper)."""

    def moments(self, state, g, beta, t):
        m, b_hat = super().moments(state, g, beta, t)
        return m, (state.b_hat.copy() if t > 40 else b_hat)


class WrappingCounter(Plain):
    """The step counter stored in int8: after 127 steps it wraps to -128 (and line 7's t > T0 turns false)."""

    def counter(self, t):
        return np.int8((int(t) + 1 + 128) % 256 - 128)


class ClampedMoments(Plain):
    """A "safety" clamp of m and b to 1e20: |m| <= b still holds, lines 5-6 do not."""

    def moments(self, state, g, beta, t):
        m, b_hat = super().moments(state, g, beta, t)
        return np.clip(m, -1e20, 1e20).astype(np.float32), np.minimum(b_hat, np.float32(1e20))


class InPlaceAboveSize(Plain):
    """Updates the caller's state in place when it holds more than 2^16 elements (to save memory)."""

    def init(self, n_workers, dim):
        zeros = np.zeros((n_workers, dim), np.float32)
        return {"m": zeros, "b_hat": zeros.copy(), "b": zeros.copy(), "e": zeros.copy(),
                "server_e": np.zeros(dim, np.float32), "t": 0}

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        view = PlainState(**state)
        u_bar, new = super().step(view, grads, beta, eps, u_worker, u_server, T0)
        fields = {"m": new.m, "b_hat": new.b_hat, "b": new.b, "e": new.e, "server_e": new.server_e, "t": new.t}
        if state["m"].size > 2**16:
            for name, value in fields.items():
                if isinstance(value, np.ndarray):
                    state[name][...] = value
                else:
                    state[name] = value
            return u_bar, state
        return u_bar, fields


class ReusedUBarBuffer(Plain):
    """u_bar written into one buffer per size, returned every call: the next call overwrites the last result."""

    def __init__(self):
        self._buffers = {}

    def finish(self, state, new, u_bar):
        buffer = self._buffers.setdefault(u_bar.shape, np.empty(u_bar.shape, np.float32))
        buffer[...] = u_bar
        return buffer, new


class Float64UBar(Plain):
    """Returns u_bar as float64 (values right, dtype wrong)."""

    def finish(self, state, new, u_bar):
        return u_bar.astype(np.float64), new


class Float64State(Plain):
    """Keeps the state in float64 (a "more precise" port)."""

    def init(self, n_workers, dim):
        zeros = np.zeros((n_workers, dim), np.float64)
        return PlainState(zeros, zeros.copy(), zeros.copy(), zeros.copy(), np.zeros(dim, np.float64), 0)


class FusedInclusiveQuantizer(Plain):
    """step quantizes with its own fused kernel using u <= p, while quantize() itself is right: Q(-1, u=0) = +1
    inside step, and a draw on the threshold gives +1."""

    def worker_quantize(self, y, u_worker):
        p = (np.clip(y, -1, 1) + np.float32(1)) / np.float32(2)
        return np.where(u_worker <= p, np.float32(1), np.float32(-1))

    server_quantize = worker_quantize


class MaxEps(Plain):
    """r = m / max(b, eps) instead of m / (b + eps)."""

    def ratio(self, m, b, eps):
        return m / np.maximum(b, np.float32(eps))


class NoEps(Plain):
    """r = m / b: 0 / 0 = NaN where b = 0, and a NaN error from then on."""

    def ratio(self, m, b, eps):
        with np.errstate(all="ignore"):
            return m / b


# ---- correct alternatives --------------------------------------------------------------------------------------


class MirroredDraws(Plain):
    """Eq. 5's law with another draw mapping: keep the sign of y with probability (1 + |y|)/2, i.e. sign(y) where
    u < (1 + |y|)/2 (y = -0.0 counts as negative). P(+1) = (y + 1)/2 for every y; not monotone in y at 0."""

    def quantize(self, y, u):
        y = np.asarray(y, np.float32)
        keep = np.asarray(u, np.float32) < (np.minimum(np.abs(y), 1) + np.float32(1)) / np.float32(2)
        sign = np.where(np.signbit(y), np.float32(-1), np.float32(1))
        return np.where(keep, sign, -sign)


# name -> (implementation, the check that must reject it, as the one root cause)
MUTANTS = {
    "group_mean_server": (GroupMeanServer(), "line13_server_error"),
    "int8_vote_sum": (Int8VoteSum(), "line13_server_error"),
    "uint8_plus_count": (Uint8PlusCount(), "line13_server_error"),
    "partial_grid_kernel": (PartialGridKernel(), "line5_6_moments"),
    "frozen_b_hat_after_40": (FrozenBHatAfterWarmup(), "line5_6_moments"),
    "wrapping_step_counter": (WrappingCounter(), "line2_step_counter"),
    "clamped_m_and_b": (ClampedMoments(), "line5_6_moments"),
    "in_place_above_size": (InPlaceAboveSize(), "contract_purity"),
    "reused_u_bar_buffer": (ReusedUBarBuffer(), "contract_aliasing"),
    "float64_u_bar": (Float64UBar(), "contract_dtypes"),
    "float64_state": (Float64State(), "contract_dtypes"),
    "fused_inclusive_quantizer": (FusedInclusiveQuantizer(), "line8_worker_quantizer"),  # constant draws u = 0
    "max_b_eps": (MaxEps(), "contract_eps_convention"),
    "no_eps_nan": (NoEps(), "contract_eps_convention"),
}

# name -> a correct implementation the suite must accept
CORRECT = {
    "plain": Plain(),
    "mirrored_draws": MirroredDraws(),
}


def implementations_by_name(module: str, mutants: dict, correct: dict):
    """A module's ``__getattr__`` resolving ``--impl MODULE:NAME`` to the wrong implementation NAME (``mutants``:
    name -> (implementation, ...)) or the correct one (``correct``: name -> implementation)."""
    def resolve(name: str):
        if name in mutants:
            return mutants[name][0]
        if name in correct:
            return correct[name]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return resolve


__getattr__ = implementations_by_name(__name__, MUTANTS, CORRECT)
