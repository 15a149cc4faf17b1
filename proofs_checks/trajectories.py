"""Drive the implementation along fixed gradient sequences and record every step (state before, inputs, outputs).

Draws are injected: float32 uniforms from a seeded NumPy generator (on the grid k / 2**24), so a run is a pure
function of its setting. The settings are the regimes the identities must survive:

- ``mixed``, ``amsgrad``, ``single``, ``wide``: heterogeneous scales (1e-6 to 1e6), all-zero coordinates (b = 0),
  drifts that push y beyond [-1, 1], heavy tails, AMSGrad (line 7) on and off, 1 to 4 workers, d past 4096;
- ``many``: 257 workers (a prime past 256), with columns where every worker agrees (the sum of the workers' +-1
  reaches n: a vote sum or +1 count kept in int8 or uint8 wraps) and columns split at varying worker counts (a
  server averaging the means of groups of any size differs from the mean: 257 has no equal groups);
- ``huge``: d = 70001 > 2^16 for three steps (a kernel whose grid covers only the first elements);
- ``long``: 300 steps with T0 = 40 (lines 5-7 and t long after a warm-up; a counter in int8 or uint8 wraps);
- ``extreme``: magnitudes from subnormal (1e-45) to 1e30 through lines 5-6 (a silent clamp of m and b).

Each step also records what the contract requires of the call itself: whether the input state was changed
(purity), whether the u_bar returned by the previous call or the state returned two calls ago changed
(aliasing: a reused buffer), and the dtypes returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proofs_checks.registry import Context
from proofs_checks.target import ImplError, StateView, Target, read_state, same_bits, state_dtypes, to_numpy


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
    family: str = "mixed"


SETTINGS = (
    Setting("mixed", n=4, d=64, T=40, beta=0.9, eps=1e-8, T0=None, seed=11),
    Setting("amsgrad", n=3, d=48, T=30, beta=0.95, eps=1e-6, T0=5, seed=12),
    Setting("single", n=1, d=32, T=20, beta=0.5, eps=1e-8, T0=0, seed=13),
    Setting("wide", n=2, d=4099, T=4, beta=0.9, eps=1e-8, T0=2, seed=14),  # past 4096: blocked kernels' edges
    Setting("many", n=257, d=40, T=6, beta=0.9, eps=1e-8, T0=None, seed=15, family="agree"),
    Setting("huge", n=2, d=70001, T=3, beta=0.9, eps=1e-8, T0=1, seed=16),  # past 2^16 elements per worker
    Setting("long", n=3, d=24, T=300, beta=0.9, eps=1e-8, T0=40, seed=17, family="long"),
    Setting("extreme", n=2, d=64, T=30, beta=0.9, eps=1e-8, T0=10, seed=18, family="extreme"),
)
BY_NAME = {s.name: s for s in SETTINGS}
EXTREME_MAGNITUDES = (1e-45, 1e-40, 1e-38, 1e-30, 1e-20, 1e-8, 1.0, 1e8, 1e20, 1e25, 1e28, 1e30)


@dataclass(frozen=True)
class Record:
    """One step: the state before and after, the inputs, the output u_bar, and what the call did to the objects
    the caller holds (field names changed in the input state, in the state returned two calls before, whether
    the previous u_bar changed) and the dtypes it returned."""

    setting: Setting
    prev: StateView
    grads: np.ndarray
    u_worker: np.ndarray
    u_server: np.ndarray
    u_bar: np.ndarray
    new: StateView
    input_changed: tuple[str, ...] = ()
    inputs_changed: tuple[str, ...] = ()
    older_changed: tuple[str, ...] = ()
    previous_u_bar_changed: bool = False
    dtypes: tuple[tuple[str, str], ...] = ()


def mixed_gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
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


def agreeing_gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
    """Many workers: a third of the columns agree (same sign on every worker: y = +-1, so all n outputs agree and
    their sum reaches +-n), a third are split (workers below a column's cut positive, the rest negative; cuts at
    1, 7, 64, 127, 128, 129, 200, 255, 256, 42 workers), a third independent normals."""
    n, d = setting.n, setting.d
    column = np.arange(d)
    sign = np.where(column % 2 == 0, 1.0, -1.0) * (-1.0) ** (t // 3)
    magnitude = 10.0 ** ((column % 7) - 3.0)
    agree = np.broadcast_to(sign * magnitude, (n, d))
    cuts = np.array([1, 7, 64, 127, 128, 129, 200, 255, 256, 42])[column % 10] % n
    split = np.where(np.arange(n)[:, None] < cuts[None, :], 1.0, -1.0) * magnitude
    normal = rng.standard_normal((n, d))
    g = np.select([column % 3 == 0, column % 3 == 1], [agree, split], normal)
    return g.astype(np.float32)


def long_gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
    """300 steps: amplitudes that rise and fall (period 50 + column) so the running maximum of line 7 and b_hat
    keep changing long after T0, with occasional bursts and sign flips."""
    n, d = setting.n, setting.d
    column = np.arange(d)
    amplitude = 1.0 + 0.9 * np.sin(2 * np.pi * t / (50.0 + column))
    burst = np.where(rng.random((n, d)) < 0.02, 20.0, 1.0)
    sign = np.where(rng.random((n, d)) < 0.7, 1.0, -1.0) * np.where(column % 2 == 0, 1.0, -1.0)
    return (amplitude * burst * sign * (0.5 + rng.random((n, d)))).astype(np.float32)


def extreme_gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
    """Magnitudes from 1e-45 (subnormal) to 1e30: constant per column, with constant, alternating or random
    signs; every 13th column also jumps between 1e-30 and 1e30; one column stays zero."""
    n, d = setting.n, setting.d
    column = np.arange(d)
    magnitude = np.array(EXTREME_MAGNITUDES)[column % len(EXTREME_MAGNITUDES)]
    magnitude = np.where(column % 13 == 12, 1e30 if t % 4 < 2 else 1e-30, magnitude)
    pattern = (column // len(EXTREME_MAGNITUDES)) % 3
    random_sign = np.where(rng.random((n, d)) < 0.5, -1.0, 1.0)
    sign = np.select([pattern == 0, pattern == 1], [np.ones((n, d)), np.broadcast_to((-1.0) ** (t + column), (n, d))],
                     random_sign)
    g = (magnitude * sign * (1 + 0.25 * rng.random((n, d)))).astype(np.float32)
    g[:, -1] = 0.0
    return g


GRADIENTS = {"mixed": mixed_gradients, "agree": agreeing_gradients, "long": long_gradients,
             "extreme": extreme_gradients}


def gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
    return GRADIENTS[setting.family](setting, rng, t)


def draws(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.random((n, d), dtype=np.float32), rng.random(d, dtype=np.float32)


def _changed(state, before: StateView, n: int, d: int) -> tuple[str, ...]:
    """The fields of ``state`` (an object the caller holds) that no longer equal the snapshot ``before``."""
    try:
        return tuple(read_state(state, n, d).equals(before))
    except ImplError as error:
        return (f"unreadable ({error})",)


def run(target: Target, setting: Setting) -> list[Record]:
    """The whole trajectory of ``setting``; an ImplError names the step at which the implementation failed."""
    rng = np.random.default_rng(setting.seed)
    n, d = setting.n, setting.d
    state = target.run_init(n, d)
    records = []
    older = None  # (state object, its snapshot) returned two calls back
    previous_u_bar = None  # (u_bar object as returned, a copy of it)
    for t in range(1, setting.T + 1):
        grads = gradients(setting, rng, t)
        u_worker, u_server = draws(rng, n, d)
        given = (grads.copy(), u_worker.copy(), u_server.copy())  # step gets these; the record keeps the originals
        try:
            prev = read_state(state, n, d)
            raw_u_bar, u_bar, new_state = target.call_step(state, given[0], setting.beta, setting.eps, given[1],
                                                           given[2], setting.T0)
            new = read_state(new_state, n, d)
            input_changed = _changed(state, prev, n, d)
            older_changed = _changed(older[0], older[1], n, d) if older else ()
            u_bar_changed = previous_u_bar is not None and not same_bits(to_numpy(previous_u_bar[0]),
                                                                         previous_u_bar[1])
            dtypes = tuple(state_dtypes(new_state).items()) + (("u_bar", str(u_bar.dtype)),)
        except ImplError as error:
            raise ImplError(f"{error} (trajectory {setting.name!r}, step {t})") from error
        inputs_changed = tuple(name for name, mine, theirs in zip(("gradients", "u_worker", "u_server"),
                                                                  (grads, u_worker, u_server), given, strict=True)
                               if not same_bits(mine, theirs))
        records.append(Record(setting, prev, grads, u_worker, u_server, u_bar, new, input_changed, inputs_changed,
                              older_changed, u_bar_changed, dtypes))
        older, previous_u_bar = (state, prev), (raw_u_bar, u_bar)
        state = new_state
    return records


def trajectory(ctx: Context, setting: Setting) -> list[Record]:
    return ctx.shared(("trajectory", setting.name), lambda: run(ctx.target, setting))


def trajectories(ctx: Context) -> list[list[Record]]:
    """Every setting's trajectory, computed once per context."""
    return [trajectory(ctx, s) for s in SETTINGS]


def all_records(ctx: Context) -> list[Record]:
    return [record for trajectory in trajectories(ctx) for record in trajectory]
