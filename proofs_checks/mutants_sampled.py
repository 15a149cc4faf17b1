"""A third set of wrong implementations, one per class of bug that survived checks at fixed points (issue 20): each
is right at ordinary settings and wrong only in a corner of the space the suite now samples (beta or eps at their
extremes, T0 past a thousand steps, outputs re-read much later, two states alive, idle workers, an odd length's
last element, more than 2048 workers, magnitudes near the largest float32, other memory layouts, positional calls,
a state read by key, constant draws), or returns a wrong shape or never advances t (a verdict, exit 1, not "cannot
judge"). Beside them, correct implementations with other conventions the interface allows, which must pass.
tests/test_proofs_sampled_mutants.py asserts both.

They are ``mutants_regimes.Plain`` (Algorithm 1 as the interface states it) with one method overridden.
``birder check --impl proofs_checks.mutants_sampled:NAME`` shows any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from proofs_checks.mutants_regimes import Plain, PlainState, implementations_by_name


class ClampedBeta(Plain):
    """beta clamped to [0.5, 0.999] "for stability": right at 0.9 and 0.95, wrong at 0.3 or 0.999999."""

    def moments(self, state, g, beta, t):
        return super().moments(state, g, min(max(beta, 0.5), 0.999), t)


class EpsFloor(Plain):
    """eps raised to at least 1e-8: right at the usual eps, wrong below it."""

    def ratio(self, m, b, eps):
        return super().ratio(m, b, max(eps, 1e-8))


class T0InEightBits(Plain):
    """T0 kept in a uint8 field: T0 = 1000 becomes 232, so AMSGrad starts 768 steps early."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        return super().step(state, grads, beta, eps, u_worker, u_server, None if T0 is None else int(T0) % 256)


class UBarRing(Plain):
    """u_bar written into a ring of three buffers per size: an output read again three calls later has changed."""

    def __init__(self):
        self._rings = {}

    def finish(self, state, new, u_bar):
        ring = self._rings.setdefault(u_bar.shape, [np.empty(u_bar.shape, np.float32) for _ in range(3)] + [0])
        buffer = ring[ring[3] % 3]
        ring[3] += 1
        buffer[...] = u_bar
        return buffer, new


class ResidentState(Plain):
    """Keeps the last state it returned "on the device" and, when given a state at that step, uses its resident
    copy instead of reading the state it was given: right with one state at a time, wrong with two alive."""

    def init(self, n_workers, dim):
        self._resident = {}
        return super().init(n_workers, dim)

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        resident = self._resident.get((int(state.t), np.shape(state.m)), state)
        u_bar, new = super().step(resident, grads, beta, eps, u_worker, u_server, T0)
        self._resident = {(int(new.t), np.shape(new.m)): new}
        return u_bar, new


class IdleWorkersLeftOut(Plain):
    """Line 12 averages over the workers whose gradient is not all zero (an idle worker "did not vote")."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        self._active = np.any(np.asarray(grads) != 0, axis=1)
        return super().step(state, grads, beta, eps, u_worker, u_server, T0)

    def mean(self, u):
        active = self._active if self._active.any() else np.ones(u.shape[0], bool)
        return u[active].sum(axis=0) / np.float32(active.sum())


class OddTailInclusive(Plain):
    """A vectorized kernel on pairs of elements; an odd length's last element goes through a scalar path that
    quantizes with u <= p: Q(-1, u = 0) = +1 there, and a draw on the threshold gives +1."""

    def _tail(self, y, draws):
        q = self.quantize(y, draws)
        if y.shape[-1] % 2:
            p = (np.clip(y[..., -1], -1, 1) + np.float32(1)) / np.float32(2)
            q[..., -1] = np.where(draws[..., -1] <= p, np.float32(1), np.float32(-1))
        return q

    def worker_quantize(self, y, u_worker):
        return self._tail(y, np.asarray(u_worker, np.float32))

    def server_quantize(self, z, u_server):
        return self._tail(z, np.asarray(u_server, np.float32))


class Float16VoteSum(Plain):
    """The workers' +-1 summed in float16 (exact only up to 2048): wrong with more than 2048 agreeing workers."""

    def mean(self, u):
        return u.astype(np.float16).sum(axis=0, dtype=np.float16).astype(np.float32) / np.float32(u.shape[0])


class LerpEmas(Plain):
    """Lines 5-6 as torch's lerp, x + (1 - beta)(g - x), for m and b_hat: within an ulp or so of the interface's
    order at ordinary magnitudes, but g - m overflows to inf for finite g and m of opposite signs near the largest
    float32 (where beta m + (1 - beta) g is finite): a warning (exit 1 only under ``birder check --strict``)."""

    def moments(self, state, g, beta, t):
        c = np.float32(1 - beta)
        with np.errstate(over="ignore", invalid="ignore"):
            return state.m + c * (g - state.m), state.b_hat + c * (np.abs(g) - state.b_hat)


class ZeroCopyGradients(Plain):
    """Reads the gradients through their buffer (np.frombuffer, "zero copy"): Fortran-ordered and strided arrays
    raise (NumPy 2 refuses a buffer that is not C-contiguous); a refused layout is a warning (--strict fails it)."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        flat = np.frombuffer(grads, dtype=np.float32)
        return super().step(state, flat.reshape(np.shape(grads)), beta, eps, u_worker, u_server, T0)


class PositionalOrderSwapped(Plain):
    """The signature lists u_server before u_worker: keyword calls are right, positional calls swap the draws."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_server=None, u_worker=None, T0=None):
        return super().step(state, grads, beta, eps, u_worker, u_server, T0)


class AttrDict(dict):
    """A dict whose keys read as attributes; setting an attribute does not set the key (a common helper's trap)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as error:
            raise AttributeError(name) from error


class StaleKeys(Plain):
    """The state is an AttrDict built from the old one with the new fields set as attributes: state.e is right,
    state["e"] still holds the previous step's values."""

    def init(self, n_workers, dim):
        plain = super().init(n_workers, dim)
        return AttrDict(m=plain.m, b_hat=plain.b_hat, b=plain.b, e=plain.e, server_e=plain.server_e, t=0)

    def finish(self, state, new, u_bar):
        fresh = AttrDict(state)
        for name in ("m", "b_hat", "b", "e", "server_e", "t"):
            object.__setattr__(fresh, name, getattr(new, name))
        return u_bar, fresh


class RedrawsConstantDraws(Plain):
    """Takes worker draws that are all equal for a placeholder and draws its own."""

    def worker_quantize(self, y, u_worker):
        u_worker = np.asarray(u_worker, np.float32)
        if u_worker.size > 1 and np.all(u_worker == u_worker.flat[0]):
            u_worker = np.random.default_rng(0).random(u_worker.shape, dtype=np.float32)
        return self.quantize(y, u_worker)


class UBarKeepsWorkerAxis(Plain):
    """Returns u_bar of shape (1, d) (a sum with keepdims): the values are right, the shape is not."""

    def finish(self, state, new, u_bar):
        return u_bar[None, :], new


class CounterNeverAdvances(Plain):
    """Returns the state with t unchanged."""

    def counter(self, t):
        return t


# ---- correct alternatives: other conventions the interface allows ----------------------------------------------


class ReadOnlyMappingState(Plain):
    """The state is a read-only mapping (types.MappingProxyType): read by key; it cannot be copied or pickled."""

    def init(self, n_workers, dim):
        return self._wrap(super().init(n_workers, dim))

    def _wrap(self, s):
        return MappingProxyType({"m": s.m, "b_hat": s.b_hat, "b": s.b, "e": s.e, "server_e": s.server_e, "t": s.t})

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        u_bar, new = super().step(PlainState(**state), grads, beta, eps, u_worker, u_server, T0)
        return u_bar, self._wrap(new)


class KeywordOnlyStep(Plain):
    """step(state, grads, *, beta, eps, u_worker, u_server, T0=None): keyword calls only."""

    def step(self, state, grads, *, beta, eps, u_worker, u_server, T0=None):
        return super().step(state, grads, beta, eps, u_worker, u_server, T0)


class KeywordsOnlyThroughKwargs(Plain):
    """step(state, grads, **options): the options by name, as a wrapper forwarding them would take them."""

    def step(self, state, grads, **options):
        return super().step(state, grads, **options)


@dataclass(frozen=True)
class BothWaysState(PlainState):
    """A state readable by attribute and by key, the same values both ways."""

    def __getitem__(self, name):
        return getattr(self, name)


class AttributeAndKeyState(Plain):
    def init(self, n_workers, dim):
        s = super().init(n_workers, dim)
        return BothWaysState(s.m, s.b_hat, s.b, s.e, s.server_e, s.t)

    def finish(self, state, new, u_bar):
        return u_bar, BothWaysState(new.m, new.b_hat, new.b, new.e, new.server_e, new.t)


class FusedMomentum(Plain):
    """Line 5 rounded once (as a fused multiply-add would), line 6 in the interface's order: m may exceed b_hat by
    an ulp, which the interface accepts."""

    def moments(self, state, g, beta, t):
        _, b_hat = super().moments(state, g, beta, t)
        m = (np.float64(np.float32(beta)) * state.m + np.float64(np.float32(1 - beta)) * g.astype(np.float64))
        return m.astype(np.float32), b_hat


# name -> (implementation, the check that rejects it)
MUTANTS = {
    "clamped_beta": (ClampedBeta(), "line5_6_moments"),
    "eps_floor": (EpsFloor(), "contract_eps_convention"),
    "T0_in_eight_bits": (T0InEightBits(), "line7_amsgrad"),
    "u_bar_ring": (UBarRing(), "contract_aliasing"),
    "resident_state": (ResidentState(), "contract_two_states"),
    "idle_workers_left_out": (IdleWorkersLeftOut(), "line13_server_error"),
    "odd_tail_inclusive": (OddTailInclusive(), "line8_worker_quantizer"),
    "float16_vote_sum": (Float16VoteSum(), "line13_server_error"),
    "lerp_overflow": (LerpEmas(), "contract_float32_extremes"),
    "zero_copy_gradients": (ZeroCopyGradients(), "contract_input_layouts"),
    "positional_order_swapped": (PositionalOrderSwapped(), "contract_calls"),
    "stale_keys": (StaleKeys(), "contract_calls"),
    "redraws_constant_draws": (RedrawsConstantDraws(), "line8_worker_quantizer"),
    "u_bar_keeps_worker_axis": (UBarKeepsWorkerAxis(), "contract_shapes"),
    "counter_never_advances": (CounterNeverAdvances(), "line2_step_counter"),
}

CORRECT = {
    "read_only_mapping_state": ReadOnlyMappingState(),
    "keyword_only_step": KeywordOnlyStep(),
    "keywords_through_kwargs": KeywordsOnlyThroughKwargs(),
    "attribute_and_key_state": AttributeAndKeyState(),
    "fused_momentum": FusedMomentum(),
}


__getattr__ = implementations_by_name(__name__, MUTANTS, CORRECT)
