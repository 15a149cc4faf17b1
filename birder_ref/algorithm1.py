"""Birder, Algorithm 1 of the paper, in its parameter-server form: state in, new state out."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from birder_ref.hyperparameters import DEFAULTS
from birder_ref.quantize import quantize, quantize_unchecked
from birder_ref.validation import check_array, check_coefficients, check_draws, check_int, native, scalar

# `birder check` judges a module offering quantize, init and step: this one, by default.
__all__ = ["State", "init", "step", "quantize", "worker_step", "server_step", "mean_of_signs", "check_step_inputs",
           "check_state"]


@dataclass(frozen=True)
class State:
    """Per-worker m, b_hat, b, e of shape (n, d); the server's error (d,); the step count t. Where line 7 makes b
    equal to b_hat (no T0, or t <= T0) a step returns one array for both: ``b is b_hat``, so writing into one
    writes into the other (a step never writes into a state's arrays)."""

    m: np.ndarray
    b_hat: np.ndarray
    b: np.ndarray
    e: np.ndarray
    server_e: np.ndarray
    t: int = 0

    @property
    def n_workers(self) -> int:
        return self.m.shape[0]

    @property
    def dim(self) -> int:
        return self.m.shape[1]


def init(n_workers: int, dim: int) -> State:
    """Algorithm 1 line 1: m_0 = b_0 = e_0 = 0 on every worker and a zero server error."""
    n_workers, dim = check_int("n_workers", n_workers, 1), check_int("dim", dim, 1)
    try:
        zeros = np.zeros((n_workers, dim), np.float32)
        return State(zeros, zeros.copy(), zeros.copy(), zeros.copy(), np.zeros(dim, np.float32), 0)
    except (MemoryError, ValueError):  # NumPy: "array is too big" or the allocation failed
        raise ValueError(f"n_workers x dim = {n_workers} x {dim} float32 elements (x4 arrays) do not fit in "
                         "memory") from None


def _finite_sum(x: np.ndarray) -> bool:
    """True when every element is finite, in one pass: a sum is finite unless an element is not (or it overflows,
    when the exact test decides)."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(x, axis=None)
    return bool(np.isfinite(total)) or bool(np.isfinite(x).all())


FLOAT32_INF_BITS = 0x7F800000  # float32 +inf as uint32; >= 0 finite floats lie below it, -x and NaN at or above


def _nonnegative_finite(x: np.ndarray) -> bool:
    """True when every element is finite and >= 0, in one pass over x's bits (-0.0 is decided exactly)."""
    if int(x.view(np.uint32).max()) < FLOAT32_INF_BITS:
        return True
    return bool(np.isfinite(x).all()) and bool(x.min() >= 0)


def check_state(state) -> State:
    """A state that Algorithm 1 can continue from, or one ValueError naming the field; nothing is modified.

    m, b_hat, b, e: float32 (n, d), finite; b_hat, b >= 0 (EMAs of |g|); server_e float32 (d,), finite; t an
    integer >= 0. Costs one read of each array (b is skipped when it is b_hat itself).
    """
    if not isinstance(state, State):
        raise ValueError(f"state must be an algorithm1.State (from algorithm1.init or a previous step), "
                         f"got {type(state).__name__}")
    m = state.m
    if not isinstance(m, np.ndarray) or m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        raise ValueError(f"state.m must be a float32 array of shape (n_workers, dim), got "
                         f"{getattr(m, 'shape', type(m).__name__)}")
    n, d = m.shape
    check_int("state.t", state.t, 0)
    for name in ("m", "b_hat", "b", "e"):
        x = getattr(state, name)
        if name == "b" and x is state.b_hat:
            continue
        if type(x) is not np.ndarray or x.dtype != np.float32 or x.shape != (n, d):
            check_array(f"state.{name}", x, (n, d))  # raises the type (or subclass), dtype or shape error
        if name in ("b_hat", "b"):
            if not _nonnegative_finite(x):
                check_array(f"state.{name}", x, (n, d), worker_axes=1)  # names a non-finite element
                index = tuple(int(i) for i in np.argwhere(x < 0)[0])
                raise ValueError(f"state.{name}: worker {index[0]}, element ({index[1]},) is {x[index]} (an EMA of "
                                 "|g| cannot be negative)")
        elif not _finite_sum(x):
            check_array(f"state.{name}", x, (n, d), worker_axes=1)  # names the first non-finite element
    if (type(state.server_e) is not np.ndarray or state.server_e.dtype != np.float32 or state.server_e.shape != (d,)
            or not _finite_sum(state.server_e)):
        check_array("state.server_e", state.server_e, (d,))
    return state


def native_state(state):
    """A state whose arrays are float32 in the other byte order (saved on a big-endian machine) with native
    float32 arrays of the same values; any other state as given, for ``check_state`` to judge."""
    if not isinstance(state, State):
        return state
    fields = {f.name: native(getattr(state, f.name)) for f in dataclasses.fields(state) if f.name != "t"}
    if all(fields[name] is getattr(state, name) for name in fields):
        return state
    if state.b is state.b_hat:  # one array for both (no AMSGrad): keep them one
        fields["b"] = fields["b_hat"]
    return dataclasses.replace(state, **fields)


def check_step_inputs(state: State, grads, u_worker, u_server, beta: float, eps: float, T0: int | None = None,
                      state_checked: bool = False) -> None:
    """Every input of one step, checked before anything is computed (the state is never touched)."""
    if not state_checked:
        check_state(state)
    check_coefficients(beta, eps, T0)
    n, d = state.n_workers, state.dim
    check_array("grads", grads, (n, d), worker_axes=1)
    check_draws("u_worker", u_worker, (n, d), worker_axes=1)
    check_draws("u_server", u_server, (d,))


@contextmanager
def overflow_guard():
    """Floating-point overflow or an invalid operation inside a step becomes one ValueError naming the state.

    NumPy reads the processor's floating-point flags after each operation, so this costs no extra pass. From a
    state Algorithm 1 produces nothing overflows (|m| <= b_hat, so |m / (b + eps)| < 1, and |e| stays bounded);
    a state built by hand may, and its step must not return inf silently.
    """
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            yield
    except FloatingPointError as error:
        raise ValueError(f"state: a step from this state overflows float32 ({error}); Algorithm 1 keeps |m| <= b_hat "
                         "and |e| bounded, so it did not produce this state") from None


def worker_step(state: State, grads: np.ndarray, beta: float, eps: float, u_worker: np.ndarray, T0: int | None):
    """Lines 5-9 on every worker: returns (u, m, b_hat, b, e) with u the quantized updates (n, d).

    Inputs are assumed checked. Each line is computed in the contract's order with float32 arrays and
    Python-float coefficients (NumPy 2 casts them to float32), in place where a buffer can be reused; the
    result is bit-identical to the plain expressions. Without AMSGrad, b is the same array as b_hat.
    """
    beta, eps = float(beta), float(eps)  # a NumPy float64 beta would make every array float64 (NumPy 2 promotion)
    t = state.t + 1
    scratch = np.abs(grads)
    scratch *= 1 - beta
    b_hat = np.multiply(state.b_hat, beta)
    b_hat += scratch  # line 6: beta * b_hat + (1 - beta) * |g|
    np.multiply(grads, 1 - beta, out=scratch)
    m = np.multiply(state.m, beta)
    m += scratch  # line 5: beta * m + (1 - beta) * g
    b = np.maximum(state.b, b_hat) if T0 is not None and t > T0 else b_hat  # line 7
    np.add(b, np.float32(eps), out=scratch)
    e = np.divide(m, scratch)
    e += state.e  # y = m / (b + eps) + e
    u = quantize_unchecked(e, u_worker, out=scratch)  # line 8
    e -= u  # line 9: e = y - u
    return u, m, b_hat, b, e


def server_step(mean_u: np.ndarray, server_e: np.ndarray, u_server: np.ndarray):
    """Lines 12-13 on (a slice of) the server: z = mean + error, u_bar = Q(z), new error z - u_bar."""
    z = mean_u + server_e
    u_bar = quantize_unchecked(z, u_server)
    return u_bar, z - u_bar


def mean_of_signs(plus_counts: np.ndarray, n_workers: int) -> np.ndarray:
    """(1/n) sum_i u_i from the count of +1s, as float32 exactly equal to ``u.sum(axis=0) / float32(n)``."""
    return (2 * plus_counts.astype(np.float32) - np.float32(n_workers)) / np.float32(n_workers)


def step(
    state: State,
    grads: np.ndarray,
    beta: float = DEFAULTS.beta,
    eps: float = DEFAULTS.eps,
    u_worker: np.ndarray | None = None,
    u_server: np.ndarray | None = None,
    T0: int | None = None,
) -> tuple[np.ndarray, State]:
    """One step of Algorithm 1 (lines 5-13); returns u_bar (d,) of +-1 and the new state.

    Lines 5-7: m = beta m + (1-beta) g, b_hat = beta b_hat + (1-beta)|g|, b = max(b, b_hat) once t > T0
    (AMSGrad, off when T0 is None). Line 8: u = Q(m / (b + eps) + e). Line 9: e = m/(b+eps) + e - u.
    Lines 12-13: u_bar = Q(mean(u) + server_e), server_e = mean(u) + server_e - u_bar.
    The update x -= lr * u_bar (line 16) is the caller's.
    """
    grads, u_worker, u_server = native(grads), native(u_worker), native(u_server)  # >f4 as float32
    beta, eps, T0 = scalar(beta), scalar(eps), scalar(T0)  # 0-d arrays as Python numbers
    state = native_state(state)
    check_step_inputs(state, grads, u_worker, u_server, beta, eps, T0)
    with overflow_guard():
        u, m, b_hat, b, e = worker_step(state, grads, beta, eps, u_worker, T0)
        mean_u = u.sum(axis=0) / np.float32(state.n_workers)
        u_bar, server_e = server_step(mean_u, state.server_e, u_server)
    return u_bar, State(m, b_hat, b, e, server_e, state.t + 1)
