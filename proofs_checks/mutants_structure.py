"""A fourth set of wrong implementations, written before the suite was extended for issue 28 and run against it first.
First contact (`birder check` at commit 59c0b3c, the suite before issue 28): 6 of the 22 wrong ports rejected
(reciprocal_lanes, coefficients_per_shape, eps_from_first_call, resident_server_error, float16_counter,
T0_zero_is_off), 2 of the 4 correct ports accepted (torch_lerp and torch_no_copy rejected: negative strides refused,
g - m overflowing near the largest float32). Each wrong one is now rejected by the check in ``MUTANTS``, each correct
one passes (with warnings for the two torch ports). Each is a bug a real port
has in the general case - an aligned fast path, a cache, a narrow integer type, a layout guess - that shows only in
one part of the input space (a shape, a draw, a history of calls, a scalar type). Beside them, correct ports the
suite must accept: torch with lerp, a torch port that copies nothing, another valid draw mapping, moments rounded
once from float64 (an FMA's rounding).

They are ``mutants_regimes.Plain`` (Algorithm 1 as the interface states it) with one method overridden, except the
torch ports. ``birder check --impl proofs_checks.mutants_structure:NAME`` shows any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proofs_checks.mutants_regimes import Plain, PlainState, implementations_by_name

# ---- shapes: fast paths and layout guesses ----------------------------------------------------------------------


class LayoutGuess(Plain):
    """Accepts gradients and draws laid out (d, n) too, recognised by their first dimension equalling d: with as
    many workers as coordinates the (n, d) arrays are transposed."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        grads, u_worker = np.asarray(grads), np.asarray(u_worker)
        if grads.shape[0] == state.m.shape[1]:
            grads, u_worker = grads.T, u_worker.T
        return super().step(state, grads, beta, eps, u_worker, u_server, T0)


class Blocked128Draws(Plain):
    """For d a multiple of 128 the server kernel works on a (128, d / 128) tile and reads its draws in the tile's
    column order: each coordinate gets another coordinate's draw."""

    def server_quantize(self, z, u_server):
        d = z.shape[0]
        if d % 128 == 0:
            u_server = np.asarray(u_server).reshape(128, d // 128).T.reshape(-1)
        return self.quantize(z, u_server)


class Tiles256(Plain):
    """For d a multiple of 256, lines 5-6 run tile by tile, 256 coordinates at a time; the loop stops one tile
    early (range(0, d - 256, 256))."""

    def moments(self, state, g, beta, t):
        d = g.shape[1]
        if d % 256:
            return super().moments(state, g, beta, t)
        m, b_hat = state.m.copy(), state.b_hat.copy()
        for start in range(0, d - 256, 256):
            cols = slice(start, start + 256)
            m[:, cols] = beta * state.m[:, cols] + (1 - beta) * g[:, cols]
            b_hat[:, cols] = beta * state.b_hat[:, cols] + (1 - beta) * np.abs(g[:, cols])
        return m, b_hat


def _rcp12(x: np.ndarray) -> np.ndarray:
    """1 / x to 12 bits of mantissa, as an approximate-reciprocal instruction (rcpps) returns it."""
    inverse = (np.float32(1) / x).astype(np.float32)
    return (inverse.view(np.uint32) & np.uint32(0xFFFFF800)).view(np.float32)


class ReciprocalLanes(Plain):
    """For d >= 1024 with d % 8 == 0 the ratio runs in 8-wide vector lanes as m * rcp(b + eps), the fast
    approximate reciprocal (12 bits), without the Newton step."""

    def ratio(self, m, b, eps):
        if m.shape[1] >= 1024 and m.shape[1] % 8 == 0:
            return m * _rcp12(b + np.float32(eps))
        return super().ratio(m, b, eps)


class HalfErrorWhenLarge(Plain):
    """Above 2^18 elements the workers' error (line 9) is stored in float16 to save memory."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        u_bar, new = super().step(state, grads, beta, eps, u_worker, u_server, T0)
        if new.e.size > 2**18:
            new = PlainState(new.m, new.b_hat, new.b, new.e.astype(np.float16).astype(np.float32), new.server_e,
                             new.t)
        return u_bar, new


class ChunkedServerError(Plain):
    """From d = 2^20 on, lines 12-13 run in chunks of 2^19 coordinates; every chunk reads the server error from
    the first chunk's offset."""

    CHUNK = 2**19

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        d = np.shape(grads)[1]
        if d < 2**20:
            return super().step(state, grads, beta, eps, u_worker, u_server, T0)
        index = np.arange(d) % self.CHUNK
        wrong = PlainState(state.m, state.b_hat, state.b, state.e, state.server_e[index], state.t)
        return super().step(wrong, grads, beta, eps, u_worker, u_server, T0)


class BlockMeanWorkers(Plain):
    """The vote reduction runs in blocks of at most 8192 workers (one thread block each) and averages the blocks'
    means: the mean only when every block is full."""

    def mean(self, u):
        n = u.shape[0]
        if n <= 8192:
            return super().mean(u)
        blocks = [u[i:i + 8192].sum(axis=0) / np.float32(len(u[i:i + 8192])) for i in range(0, n, 8192)]
        return (np.sum(blocks, axis=0) / np.float32(len(blocks))).astype(np.float32)


class ShiftMeanPowerOfTwo(Plain):
    """For a power-of-two worker count of 16 or more the mean is the sum times 2^-log2(n), with log2(n) taken as
    n.bit_length() (one too many)."""

    def mean(self, u):
        n = u.shape[0]
        if n >= 16 and n & (n - 1) == 0:
            return u.sum(axis=0) * np.float32(2.0 ** -n.bit_length())
        return super().mean(u)


# ---- draws anywhere in [0, 1) -------------------------------------------------------------------------------


class StepFixedPointDraws(Plain):
    """step's fused kernel compares the draw as a 24-bit integer, floor(u 2^24) < p 2^24 (exact for every draw on
    the 2^-24 grid); quantize() itself is u < p. Off the grid, step's Q is not the interface's Q."""

    def worker_quantize(self, y, u_worker):
        p = (np.clip(y, -1, 1) + np.float32(1)) / np.float32(2)
        k = np.floor(np.asarray(u_worker, np.float64) * 2**24)
        return np.where(k < p.astype(np.float64) * 2**24, np.float32(1), np.float32(-1))

    server_quantize = worker_quantize


class StepClampsZeroDraw(Plain):
    """step raises every draw to at least 2^-24 first ("keep u in (0, 1)"); quantize() is u < p: a draw of 0 just
    above y = -1 gives -1 in step."""

    def worker_quantize(self, y, u_worker):
        return self.quantize(y, np.maximum(np.asarray(u_worker, np.float32), np.float32(2.0**-24)))

    def server_quantize(self, z, u_server):
        return self.quantize(z, np.maximum(np.asarray(u_server, np.float32), np.float32(2.0**-24)))


# ---- call histories -----------------------------------------------------------------------------------------


class CoefficientsPerShape(Plain):
    """beta and 1 - beta as float32 constants prepared once per state shape (a "constant buffer"): a later call,
    or a second state of that shape, with another beta uses the first one."""

    def __init__(self):
        self._coefficients = {}

    def moments(self, state, g, beta, t):
        b, one_minus = self._coefficients.setdefault(g.shape, (np.float32(beta), np.float32(1 - beta)))
        return b * state.m + one_minus * g, b * state.b_hat + one_minus * np.abs(g)


class EpsFromFirstCall(Plain):
    """eps read once, at the first call, and kept (like a hyperparameter of the optimizer's constructor)."""

    def __init__(self):
        self._eps = None

    def ratio(self, m, b, eps):
        if self._eps is None:
            self._eps = eps
        return super().ratio(m, b, self._eps)


class MemoisedByState(Plain):
    """Remembers the result for each state object (by id and step) so that a second call on the same state is
    free: stepping one state twice with other gradients or draws returns the first answer."""

    def __init__(self):
        self._memo = {}

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        key = (id(state), int(state.t))
        if key not in self._memo:
            self._memo[key] = (state, super().step(state, grads, beta, eps, u_worker, u_server, T0))
        return self._memo[key][1]


class AbsGradientPerBuffer(Plain):
    """|g| kept per gradient buffer (by id), recomputed only for a new buffer: a caller that writes each step's
    gradients into one buffer gets the first step's |g| forever."""

    def __init__(self):
        self._abs = {}

    def moments(self, state, g, beta, t):
        self._abs.setdefault(id(g), (g, np.abs(g)))
        absolute = self._abs[id(g)][1]
        return beta * state.m + (1 - beta) * g, beta * state.b_hat + (1 - beta) * absolute

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        self._given = grads
        t = self.counter(state.t)
        m, b_hat = self.moments(state, grads, beta, t)  # grads as given: its id is the caller's buffer
        b = np.maximum(state.b, b_hat) if T0 is not None and t > T0 else b_hat
        y = self.ratio(m, b, eps) + state.e
        u = self.worker_quantize(y, u_worker)
        z = self.mean(u) + state.server_e
        u_bar = self.server_quantize(z, u_server)
        return u_bar, PlainState(m, b_hat, b, y - u, z - u_bar, t)


class ResidentServerError(Plain):
    """The server's error lives on "the server" per shape; a state's own server_e is read only at t = 0. Right
    while one state per shape moves forward; wrong for a state reused after a later one."""

    def __init__(self):
        self._server = {}

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        shape = np.shape(state.m)
        server_e = state.server_e if int(state.t) == 0 else self._server.get(shape, state.server_e)
        given = PlainState(state.m, state.b_hat, state.b, state.e, server_e, state.t)
        u_bar, new = super().step(given, grads, beta, eps, u_worker, u_server, T0)
        self._server[shape] = new.server_e
        return u_bar, new


# ---- integer widths: t and T0 -------------------------------------------------------------------------------


class Uint16Counter(Plain):
    """t kept as numpy.uint16 (a compact state): after 65,535 steps it wraps to 0."""

    def counter(self, t):
        return np.uint16((int(t) + 1) % 2**16)


class Float16Counter(Plain):
    """t kept as a float16 tensor beside the half-precision state: it stops advancing at 2048."""

    def counter(self, t):
        return np.float16(np.float16(t) + np.float16(1))


class T0Int16(Plain):
    """T0 stored in an int16 config field: 32,768 .. 65,535 wrap negative and AMSGrad starts at once."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        T0 = None if T0 is None else int(np.array(T0).astype(np.int16))
        return super().step(state, grads, beta, eps, u_worker, u_server, T0)


class T0Int32(Plain):
    """T0 converted to int32 (a C int): from 2^31 on it wraps negative and AMSGrad starts at once."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        T0 = None if T0 is None else int(np.array(T0, np.int64).astype(np.int32))
        return super().step(state, grads, beta, eps, u_worker, u_server, T0)


class T0OnlyPythonInt(Plain):
    """AMSGrad on only when T0 is a Python int (isinstance(T0, int)): a NumPy integer T0 turns line 7 off."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        return super().step(state, grads, beta, eps, u_worker, u_server, T0 if isinstance(T0, int) else None)


class T0ZeroIsOff(Plain):
    """``if T0 and t > T0``: T0 = 0 (AMSGrad from the first step) is taken as "not set"."""

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        return super().step(state, grads, beta, eps, u_worker, u_server, T0 if T0 else None)


# ---- scalar types ---------------------------------------------------------------------------------------------


class UncastScalars(Plain):
    """beta and eps used as given, without float32(): with Python floats the arrays stay float32 (NumPy 2), with
    NumPy float64 scalars the whole state silently becomes float64."""

    def moments(self, state, g, beta, t):
        return beta * state.m + (1 - beta) * g, beta * state.b_hat + (1 - beta) * np.abs(g)

    def ratio(self, m, b, eps):
        return m / (b + eps)


# ---- correct ports ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchState:
    m: object
    b_hat: object
    b: object
    e: object
    server_e: object
    t: int


class TorchLerp:
    """A torch CPU port with lines 5-6 as torch's lerp (m.lerp(g, 1 - beta)): right up to last-ulp rounding, and
    g - m overflows only near the largest float32. Inputs copied (torch.tensor)."""

    def __init__(self, copy: bool = True):
        self.copy = copy

    @property
    def torch(self):
        import torch  # imported on first use: torch is an optional extra

        return torch

    def _tensor(self, x):
        if isinstance(x, self.torch.Tensor):
            return x
        return self.torch.tensor(x) if self.copy else self.torch.from_numpy(x)

    def quantize(self, y, u):
        torch = self.torch
        y, u = self._tensor(y), self._tensor(u)
        p = (torch.clamp(y, -1, 1) + 1) / 2
        return torch.where(u < p, torch.tensor(1.0), torch.tensor(-1.0))

    def init(self, n_workers, dim):
        zeros = self.torch.zeros
        return TorchState(zeros(n_workers, dim), zeros(n_workers, dim), zeros(n_workers, dim), zeros(n_workers, dim),
                          zeros(dim), 0)

    def moments(self, state, g, beta):
        return state.m.lerp(g, 1 - beta), state.b_hat.lerp(g.abs(), 1 - beta)

    def step(self, state, grads, beta=0.95, eps=1e-8, u_worker=None, u_server=None, T0=None):
        torch = self.torch
        g, uw, us = self._tensor(grads), self._tensor(u_worker), self._tensor(u_server)
        t = state.t + 1
        m, b_hat = self.moments(state, g, beta)
        b = torch.maximum(state.b, b_hat) if T0 is not None and t > T0 else b_hat
        y = m / (b + torch.tensor(eps, dtype=torch.float32)) + state.e
        u = self.quantize(y, uw)
        z = u.sum(dim=0) / torch.tensor(float(u.shape[0])) + state.server_e
        u_bar = self.quantize(z, us)
        return u_bar, TorchState(m, b_hat, b, y - u, z - u_bar, t)


class TorchNoCopy(TorchLerp):
    """A torch CPU port that copies nothing: torch.from_numpy on the caller's arrays (which refuses negative
    strides), lines 5-6 as written (beta m + (1 - beta) g)."""

    def __init__(self):
        super().__init__(copy=False)

    def moments(self, state, g, beta):
        return beta * state.m + (1 - beta) * g, beta * state.b_hat + (1 - beta) * g.abs()


class ComplementDraws(Plain):
    """Eq. 5 with the draws counted from the top: +1 where u >= 1 - p. P(+1) = p for every y (up to the rounding
    of 1 - p); the same mapping in quantize and in step."""

    def quantize(self, y, u):
        y = np.asarray(y, np.float32)
        p = (np.clip(y, -1, 1) + np.float32(1)) / np.float32(2)
        return np.where(np.asarray(u, np.float32) >= np.float32(1) - p, np.float32(1), np.float32(-1))


class MomentsRoundedOnce(Plain):
    """Lines 5-6 computed in float64 and rounded once to float32, as a fused multiply-add does: last-ulp
    differences from the two-rounding float32 expression, nothing else."""

    def moments(self, state, g, beta, t):
        m = beta * state.m.astype(np.float64) + (1 - beta) * g.astype(np.float64)
        b_hat = beta * state.b_hat.astype(np.float64) + (1 - beta) * np.abs(g.astype(np.float64))
        return m.astype(np.float32), b_hat.astype(np.float32)


# name -> (implementation, the check that names its cause, the regime of that check that shows it, its class)
MUTANTS = {
    "layout_guess_n_equals_d": (LayoutGuess(), "structure_shapes", "n_equals_d_12", "n == d"),
    "blocked_128_draws": (Blocked128Draws(), "structure_shapes", "workers_32_d_768", "d a multiple of 128"),
    "tiles_256_last_skipped": (Tiles256(), "structure_shapes", "workers_32_d_768", "d a multiple of 256"),
    "reciprocal_lanes": (ReciprocalLanes(), "structure_shapes", "workers_16_d_1024", "d >= 1024, d % 8 == 0"),
    "half_error_when_large": (HalfErrorWhenLarge(), "structure_shapes", "elements_over_2pow18",
                              "more than 2^18 elements"),
    "chunked_server_error": (ChunkedServerError(), "structure_shapes", "d_2pow20", "d >= 2^20"),
    "block_mean_workers": (BlockMeanWorkers(), "structure_shapes", "workers_8195", "more than 8192 workers"),
    "shift_mean_power_of_two": (ShiftMeanPowerOfTwo(), "structure_shapes", "workers_16_d_1024",
                                "power-of-two n >= 16"),
    "step_fixed_point_draws": (StepFixedPointDraws(), "step_draws_anywhere", None, "draws off the 2^-24 grid"),
    "step_clamps_zero_draw": (StepClampsZeroDraw(), "step_draws_anywhere", None, "u = 0 just above y = -1"),
    "coefficients_per_shape": (CoefficientsPerShape(), "contract_history", "settings_every_call",
                               "beta changing between calls / states"),
    "eps_from_first_call": (EpsFromFirstCall(), "contract_history", "settings_every_call",
                            "eps changing between calls"),
    "memoised_by_state": (MemoisedByState(), "contract_history", "same_state_twice", "one state stepped twice"),
    "abs_gradient_per_buffer": (AbsGradientPerBuffer(), "contract_history", "reused_buffers",
                                "a gradient buffer reused"),
    "resident_server_error": (ResidentServerError(), "contract_history", "old_state_again",
                              "a state reused after a later one"),
    "uint16_counter": (Uint16Counter(), "line2_long_run", None, "more than 65,535 steps"),
    "float16_counter": (Float16Counter(), "line2_long_run", None, "more than 2048 steps"),
    "T0_int16": (T0Int16(), "contract_history", "T0_int16_range", "T0 in [32768, 65535]"),
    "T0_int32": (T0Int32(), "contract_history", "T0_past_int32", "T0 >= 2^31"),
    "T0_only_python_int": (T0OnlyPythonInt(), "contract_history", "T0_numpy_int32", "T0 a NumPy integer"),
    "T0_zero_is_off": (T0ZeroIsOff(), "contract_history", "settings_every_call", "T0 = 0"),
    "uncast_scalars": (UncastScalars(), "contract_history", "numpy_scalars", "beta, eps as NumPy float64 scalars"),
}

# name -> a correct implementation the suite must accept (exit 0; warnings allowed)
CORRECT = {
    "torch_lerp": TorchLerp(),
    "torch_no_copy": TorchNoCopy(),
    "complement_draws": ComplementDraws(),
    "moments_rounded_once": MomentsRoundedOnce(),
}

__getattr__ = implementations_by_name(__name__, MUTANTS, CORRECT)
