"""Drive the implementation along fixed gradient sequences and record every step (state before, inputs, outputs).

Draws are injected: float32 uniforms from a seeded NumPy generator (on the grid k / 2**24), so a run is a pure
function of its setting. The settings cover what the identities must survive: heterogeneous scales (1e-6 to 1e6),
all-zero coordinates (b = 0), drifts that push y beyond [-1, 1], heavy tails, and AMSGrad (line 7) on and off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proofs_checks.registry import Context
from proofs_checks.target import ImplError, StateView, Target, read_state


@dataclass(frozen=True)
class Setting:
    name: str
    n: int
    d: int
    T: int
    beta: float
    eps: float
    T0: int | None
    seed: int


SETTINGS = (
    Setting("mixed", n=4, d=64, T=40, beta=0.9, eps=1e-8, T0=None, seed=11),
    Setting("amsgrad", n=3, d=48, T=30, beta=0.95, eps=1e-6, T0=5, seed=12),
    Setting("single", n=1, d=32, T=20, beta=0.5, eps=1e-8, T0=0, seed=13),
    Setting("wide", n=2, d=4099, T=4, beta=0.9, eps=1e-8, T0=2, seed=14),  # past 4096: blocked kernels' edges
)


@dataclass(frozen=True)
class Record:
    """One step: the state before and after, the inputs, and the output u_bar."""

    setting: Setting
    prev: StateView
    grads: np.ndarray
    u_worker: np.ndarray
    u_server: np.ndarray
    u_bar: np.ndarray
    new: StateView


def gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
    """Eight column families (the last one all zero); amplitudes decay in ``amsgrad`` so the maximum matters."""
    n, d = setting.n, setting.d
    normal = rng.standard_normal((n, d))
    family = np.arange(d) % 8
    scale = np.select(
        [family == 1, family == 2, family == 4, family == 5, family == 6, family == 7],
        [1.0, 1.0, 1.0, 1e-6, 1e6, 0.0],
        1.0,
    )
    g = normal * scale
    g = np.where(family == 1, 0.6 + 0.3 * normal, g)  # drift: y leaves [-1, 1]
    g = np.where(family == 2, np.clip(rng.standard_cauchy((n, d)), -1e4, 1e4), g)  # heavy tails
    g = np.where(family == 3, normal * (rng.random((n, d)) < 0.2), g)  # sparse
    g = np.where(family == 4, np.abs(normal) * (-1.0) ** (t // 5), g)  # constant sign in blocks of 5 steps
    if setting.name == "amsgrad":
        g = g * np.exp(-t / 6.0) * np.where(rng.random((n, d)) < 0.1, 8.0, 1.0)
    return g.astype(np.float32)


def draws(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.random((n, d), dtype=np.float32), rng.random(d, dtype=np.float32)


def run(target: Target, setting: Setting) -> list[Record]:
    """The whole trajectory of ``setting``; an ImplError names the step at which the implementation failed."""
    rng = np.random.default_rng(setting.seed)
    n, d = setting.n, setting.d
    state = target.run_init(n, d)
    records = []
    for t in range(1, setting.T + 1):
        grads = gradients(setting, rng, t)
        u_worker, u_server = draws(rng, n, d)
        try:
            prev = read_state(state, n, d)
            u_bar, state = target.run_step(state, grads, setting.beta, setting.eps, u_worker, u_server, setting.T0)
            new = read_state(state, n, d)
        except ImplError as error:
            raise ImplError(f"{error} (trajectory {setting.name!r}, step {t})") from error
        records.append(Record(setting, prev, grads, u_worker, u_server, u_bar, new))
    return records


def trajectories(ctx: Context) -> list[list[Record]]:
    """Every setting's trajectory, computed once per context."""
    return [ctx.shared(("trajectory", s.name), lambda s=s: run(ctx.target, s)) for s in SETTINGS]


def all_records(ctx: Context) -> list[Record]:
    return [record for trajectory in trajectories(ctx) for record in trajectory]
