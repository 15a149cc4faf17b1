"""Optimizers that follow ``birder_ref.driver.DistributedOptimizer``: Birder over any scheme, SoftSignSGD,
and the full-precision baselines SGDM and Adam/AdamW, whose gradients are all-reduced along the fp32 ring
schedule (``schedules.allreduce``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from birder_ref import algorithm1, draws, schemes
from birder_ref.execute import ByteLog, run_phase
from birder_ref.hyperparameters import DEFAULTS
from birder_ref.schedules import SCHEMES, Layout, allreduce, check_layout
from birder_ref.update import apply_update
from birder_ref.validation import (
    check_array,
    check_coefficients,
    check_int,
    check_lr,
    check_real,
    check_step_number,
    native,
    same_values,
    scalar,
)

SEED_MAX = 2**32 - 1  # draws.stream_key takes 32-bit seeds


def check_step_arguments(params, grads, lr, t) -> tuple[int, int, int]:
    """The driver protocol's step arguments: params float32 (p, d), grads float32 (n, g, d) with n g = p, both
    finite; lr finite >= 0; t an integer >= 1. Returns (n, g, d); raises one ValueError naming the argument."""
    check_lr(lr)
    check_step_number(t)
    if not isinstance(grads, np.ndarray) or grads.ndim != 3 or 0 in grads.shape:
        raise ValueError(f"grads must be a float32 (n_nodes, gpus_per_node, d) array, got "
                         f"{getattr(grads, 'shape', type(grads).__name__)}")
    n, g, d = grads.shape
    check_array("grads", grads, (n, g, d), worker_axes=2)
    check_array("params", params, (n * g, d), worker_axes=1)
    return n, g, d


def check_state_fields(state, cls: type, shapes: dict[str, tuple[int, ...]]) -> None:
    """``state`` is a ``cls`` whose named arrays are float32 of the given shapes and finite."""
    if not isinstance(state, cls):
        raise ValueError(f"state must be a {cls.__name__} (from the optimizer's init), got {type(state).__name__}")
    for name, shape in shapes.items():
        check_array(f"state.{name}", getattr(state, name), shape)


def zero_moments(layout: Layout, dim: int, count: int) -> list[np.ndarray]:
    """``count`` float32 zero vectors of length ``dim``: the moments of an optimizer's first state on ``layout``."""
    check_layout(layout)
    dim = check_int("dim", dim, 1)
    return [np.zeros(dim, np.float32) for _ in range(count)]


def ring_allreduce_mean(grads: np.ndarray) -> np.ndarray:
    """Every GPU's gradient (n_nodes, gpus_per_node, d) all-reduced along the fp32 ring, divided by float32(p).

    Executes ``schedules.allreduce`` chunk by chunk; every rank must end with the same sum.
    """
    if not isinstance(grads, np.ndarray) or grads.ndim != 3 or 0 in grads.shape:
        raise ValueError(f"grads must be a float32 (n_nodes, gpus_per_node, d) array, got "
                         f"{getattr(grads, 'shape', type(grads).__name__)}")
    n, g, d = grads.shape
    check_array("grads", grads, (n, g, d), worker_axes=2)
    sched = allreduce(Layout(n, g), d)
    p, D = n * g, sched.padded_dim
    rows = np.pad(grads.reshape(p, d), ((0, 0), (0, D - d)))
    buffers = {r: rows[r].reshape(p, D // p).copy() for r in range(p)}
    log = ByteLog()
    for phase in sched.phases:
        run_phase(phase, buffers, log)
    total = buffers[0].reshape(-1)
    for r in range(1, p):
        if not same_values(buffers[r].reshape(-1), total):  # a sum that overflowed is inf or NaN on every rank
            raise AssertionError(f"rank {r} ended the ring all-reduce with a different sum than rank 0")
    return total[:d] / np.float32(p)


@dataclass(frozen=True)
class Birder:
    """Birder (Algorithm 1) over one of the five schemes; x -= lr * (u_bar + weight_decay * x) (line 16)."""

    scheme: str = "hierarchical"
    beta: float = DEFAULTS.beta
    eps: float = DEFAULTS.eps
    T0: int | None = None
    weight_decay: float = 0.0
    seed: int = 0
    name: str = "birder"

    def __post_init__(self) -> None:
        if not isinstance(self.scheme, str) or self.scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {self.scheme!r}; choose one of {', '.join(SCHEMES)}")
        check_coefficients(self.beta, self.eps, self.T0)
        check_real("weight_decay", self.weight_decay, 0.0)
        check_int("seed", self.seed, 0, SEED_MAX)

    def init(self, layout: Layout, dim: int) -> algorithm1.State:
        check_layout(layout)
        workers = layout.n_nodes if self.scheme == "hierarchical" else layout.n_ranks
        return algorithm1.init(workers, dim)

    def step(self, state, params, grads, lr, t):
        params, grads, lr = native(params), native(grads), scalar(lr)  # >f4, 0-d arrays accepted
        check_step_arguments(params, grads, lr, t)
        check_int("t", t, 1, SEED_MAX)  # the draws' step counter is 32 bits
        state = algorithm1.native_state(state)  # a state saved on a big-endian machine
        algorithm1.check_state(state)
        U = draws.worker_uniforms(self.seed, t, state.n_workers, state.dim)
        V = draws.server_uniforms(self.seed, t, state.dim)
        u_bar, state, _ = schemes.step(self.scheme, state, grads, self.beta, self.eps, U, V, self.T0)
        return apply_update(params, u_bar, lr, self.weight_decay), state


@dataclass(frozen=True)
class SoftSignState:
    m: np.ndarray
    b: np.ndarray


@dataclass(frozen=True)
class SoftSignSGD:
    """Uncompressed Birder, BinSGDM paper Algorithm 2: m and b are EMAs of the all-reduced gradient and of
    its absolute value with the same beta; x -= lr * m / (b + eps)."""

    beta: float = DEFAULTS.beta
    eps: float = DEFAULTS.eps
    weight_decay: float = 0.0
    name: str = "softsignsgd"

    def __post_init__(self) -> None:
        check_coefficients(self.beta, self.eps)
        check_real("weight_decay", self.weight_decay, 0.0)

    def init(self, layout: Layout, dim: int) -> SoftSignState:
        return SoftSignState(*zero_moments(layout, dim, 2))

    def step(self, state, params, grads, lr, t):
        params, grads, lr = native(params), native(grads), scalar(lr)  # >f4, 0-d arrays accepted
        _, _, d = check_step_arguments(params, grads, lr, t)
        check_state_fields(state, SoftSignState, {"m": (d,), "b": (d,)})
        if state.b.min() < 0:
            raise ValueError(f"state.b must be >= 0 (an EMA of |g|), got {state.b.min()}")
        g = ring_allreduce_mean(grads)
        m = self.beta * state.m + (1 - self.beta) * g
        b = self.beta * state.b + (1 - self.beta) * np.abs(g)
        update = m / (b + np.float32(self.eps))
        return apply_update(params, update, lr, self.weight_decay), SoftSignState(m, b)


@dataclass(frozen=True)
class SGDMState:
    momentum: np.ndarray


@dataclass(frozen=True)
class SGDM:
    """SGD with heavy-ball momentum as torch.optim.SGD computes it (dampening 0, coupled weight decay):
    g = mean(g_i) + wd * x, buf = momentum * buf + g (buf = g at t = 1), x -= lr * buf."""

    momentum: float = 0.9
    weight_decay: float = 0.0
    name: str = "sgdm"

    def __post_init__(self) -> None:
        check_real("momentum", self.momentum, 0.0, 1.0, high_open=True)
        check_real("weight_decay", self.weight_decay, 0.0)

    def init(self, layout: Layout, dim: int) -> SGDMState:
        return SGDMState(*zero_moments(layout, dim, 1))

    def step(self, state, params, grads, lr, t):
        params, grads, lr = native(params), native(grads), scalar(lr)  # >f4, 0-d arrays accepted
        _, _, d = check_step_arguments(params, grads, lr, t)
        check_state_fields(state, SGDMState, {"momentum": (d,)})
        g = ring_allreduce_mean(grads) + np.float32(self.weight_decay) * params[0]
        buf = g if t == 1 else self.momentum * state.momentum + g
        return params - np.float32(lr) * buf, SGDMState(buf)


@dataclass(frozen=True)
class AdamState:
    m: np.ndarray
    v: np.ndarray


@dataclass(frozen=True)
class Adam:
    """Adam with bias correction (Kingma and Ba, Algorithm 1) on the all-reduced gradient; with
    ``weight_decay`` it is AdamW (decoupled: x -= lr * wd * x). x -= lr * m_hat / (sqrt(v_hat) + eps)."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8  # Kingma and Ba's default
    weight_decay: float = 0.0
    name: str = "adam"

    def __post_init__(self) -> None:
        check_adam_coefficients(self.beta1, self.beta2, self.eps)
        check_real("weight_decay", self.weight_decay, 0.0)

    def init(self, layout: Layout, dim: int) -> AdamState:
        return AdamState(*zero_moments(layout, dim, 2))

    def step(self, state, params, grads, lr, t):
        params, grads, lr = native(params), native(grads), scalar(lr)  # >f4, 0-d arrays accepted
        _, _, d = check_step_arguments(params, grads, lr, t)
        check_adam_state(state, d)
        g = ring_allreduce_mean(grads)
        m = self.beta1 * state.m + (1 - self.beta1) * g
        v = self.beta2 * state.v + (1 - self.beta2) * g * g
        update = (m / (1 - self.beta1**t)) / (np.sqrt(v / (1 - self.beta2**t)) + np.float32(self.eps))
        decay = np.float32(lr * self.weight_decay) * params
        return params - np.float32(lr) * update - decay, AdamState(m, v)


def check_adam_coefficients(beta1, beta2, eps) -> None:
    """Adam's beta1, beta2 in [0, 1) and eps > 0 (finite and non-zero in float32)."""
    check_real("beta1", beta1, 0.0, 1.0, high_open=True)
    check_real("beta2", beta2, 0.0, 1.0, high_open=True)
    check_real("eps", eps, 0.0, low_open=True, float32=True)


def check_adam_state(state, d: int) -> None:
    """An ``AdamState`` for dimension d: finite float32 m and v, v >= 0."""
    check_state_fields(state, AdamState, {"m": (d,), "v": (d,)})
    if state.v.min() < 0:
        raise ValueError(f"state.v must be >= 0 (an EMA of g^2), got {state.v.min()}")
