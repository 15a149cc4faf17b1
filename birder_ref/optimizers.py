"""Optimizers that follow ``birder_ref.driver.DistributedOptimizer``: Birder over any scheme, SoftSignSGD,
and the full-precision baselines SGDM and Adam/AdamW, whose gradients are all-reduced along the fp32 ring
schedule (``schedules.allreduce``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from birder_ref import algorithm1, draws, schemes
from birder_ref.execute import ByteLog, run_phase
from birder_ref.schedules import SCHEMES, Layout, allreduce


def ring_allreduce_mean(grads: np.ndarray) -> np.ndarray:
    """Every GPU's gradient (n_nodes, gpus_per_node, d) all-reduced along the fp32 ring, divided by float32(p).

    Executes ``schedules.allreduce`` chunk by chunk; every rank must end with the same sum.
    """
    n, g, d = grads.shape
    sched = allreduce(Layout(n, g), d)
    p, D = n * g, sched.padded_dim
    rows = np.pad(grads.reshape(p, d), ((0, 0), (0, D - d)))
    buffers = {r: rows[r].reshape(p, D // p).copy() for r in range(p)}
    log = ByteLog()
    for phase in sched.phases:
        run_phase(phase, buffers, log)
    total = buffers[0].reshape(-1)
    for r in range(1, p):
        if not np.array_equal(buffers[r].reshape(-1), total):
            raise AssertionError(f"rank {r} ended the ring all-reduce with a different sum than rank 0")
    return total[:d] / np.float32(p)



@dataclass(frozen=True)
class Birder:
    """Birder (Algorithm 1) over one of the five schemes; x -= lr * (u_bar + weight_decay * x) (line 16)."""

    scheme: str = "hierarchical"
    beta: float = 0.95
    eps: float = 1e-8
    T0: int | None = None
    weight_decay: float = 0.0
    seed: int = 0
    name: str = "birder"

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {self.scheme!r}; choose one of {', '.join(SCHEMES)}")

    def init(self, layout: Layout, dim: int) -> algorithm1.State:
        workers = layout.n_nodes if self.scheme == "hierarchical" else layout.n_ranks
        return algorithm1.init(workers, dim)

    def step(self, state, params, grads, lr, t):
        U = draws.worker_uniforms(self.seed, t, state.n_workers, state.dim)
        V = draws.server_uniforms(self.seed, t, state.dim)
        u_bar, state, _ = schemes.step(self.scheme, state, grads, self.beta, self.eps, U, V, self.T0)
        return params - np.float32(lr) * (u_bar + np.float32(self.weight_decay) * params), state


@dataclass(frozen=True)
class SoftSignState:
    m: np.ndarray
    b: np.ndarray


@dataclass(frozen=True)
class SoftSignSGD:
    """Uncompressed Birder, BinSGDM paper Algorithm 2: m and b are EMAs of the all-reduced gradient and of
    its absolute value with the same beta; x -= lr * m / (b + eps)."""

    beta: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0
    name: str = "softsignsgd"

    def init(self, layout: Layout, dim: int) -> SoftSignState:
        return SoftSignState(np.zeros(dim, np.float32), np.zeros(dim, np.float32))

    def step(self, state, params, grads, lr, t):
        g = ring_allreduce_mean(grads)
        m = self.beta * state.m + (1 - self.beta) * g
        b = self.beta * state.b + (1 - self.beta) * np.abs(g)
        update = m / (b + np.float32(self.eps))
        return params - np.float32(lr) * (update + np.float32(self.weight_decay) * params), SoftSignState(m, b)


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

    def init(self, layout: Layout, dim: int) -> SGDMState:
        return SGDMState(np.zeros(dim, np.float32))

    def step(self, state, params, grads, lr, t):
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
    eps: float = 1e-8
    weight_decay: float = 0.0
    name: str = "adam"

    def init(self, layout: Layout, dim: int) -> AdamState:
        return AdamState(np.zeros(dim, np.float32), np.zeros(dim, np.float32))

    def step(self, state, params, grads, lr, t):
        g = ring_allreduce_mean(grads)
        m = self.beta1 * state.m + (1 - self.beta1) * g
        v = self.beta2 * state.v + (1 - self.beta2) * g * g
        update = (m / (1 - self.beta1**t)) / (np.sqrt(v / (1 - self.beta2**t)) + np.float32(self.eps))
        decay = np.float32(lr * self.weight_decay) * params
        return params - np.float32(lr) * update - decay, AdamState(m, v)
