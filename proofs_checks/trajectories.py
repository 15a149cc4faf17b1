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
- ``extreme``: magnitudes from subnormal (1e-45) to 1e30 through lines 5-6 (a silent clamp of m and b);
- ``workers_4099``: 4099 workers on d = 5, vote sums reaching +-4099 (a float16 sum is exact only to 2048);
- ``restart_1000``: 1010 steps with T0 = 1000 (AMSGrad switching on after a thousand steps: a T0 kept in 8 bits);
- ``float32_max``: magnitudes up to the largest finite float32 with alternating signs (g - m overflows);
- ``sampled_K``: a seeded, stratified sample (``sampled_settings``) of the space of settings: beta in (0, 1) with
  its extremes, eps from the smallest normal float32 up, T0 in {None, 0, 1, t, beyond t} or changing per call,
  n and d from 1 up, magnitudes 1e-45 up to the largest finite float32, idle workers (zero gradient rows) and
  constant draws.

Each step also records what the contract requires of the call itself: whether the input state was changed
(purity), whether the u_bar returned by the previous call or the state returned two calls ago changed
(aliasing: a reused buffer), and the dtypes returned; at the end of a trajectory every u_bar and state it returned is
re-read (``Record.earlier_changed`` of its last record: buffers reused in a ring).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    T0_path: tuple = ()  # T0 given at each step (T0 changing between calls); empty: T0 at every step
    draws: str = "uniform"  # "constant": every draw of a step the same value (0, 1/2, 1 - 2^-24 or random)
    idle_workers: int = 0  # this many workers (rows) get an all-zero gradient at each step
    log10_range: tuple[float, float] = (-3.0, 3.0)  # the "sampled" family's magnitudes, 10^lo .. 10^hi
    beta_path: tuple = ()  # beta given at each step (changing between calls); empty: beta at every step
    eps_path: tuple = ()  # eps given at each step; empty: eps at every step
    scalars: str = "python"  # "numpy": beta and eps given as numpy.float64, T0 as numpy.int64
    history: tuple[str, ...] = ()  # what else happens around each call (``HISTORIES``)

    def T0_at(self, t: int):
        """The T0 given at step t."""
        return self.T0_path[t - 1] if self.T0_path else self.T0

    def at(self, t: int) -> Setting:
        """The setting as step t saw it: beta and eps of that call (the identities read them from the record)."""
        if not (self.beta_path or self.eps_path):
            return self
        return replace(self, beta=self.beta_path[t - 1] if self.beta_path else self.beta,
                       eps=self.eps_path[t - 1] if self.eps_path else self.eps)


# What a trajectory may do around each call of step, to judge purity by the history of calls:
# "restep": the same state object is first stepped with other gradients and draws (and that answer dropped);
# "buffers": the gradients and draws arrive in one buffer each, overwritten every step (as a training loop does);
# "partner": a second state of the same shape, with other beta, eps and T0, is stepped between the calls;
# "replay": the state of two steps before is stepped again with its inputs, and must give what it gave then.
HISTORIES = ("restep", "buffers", "partner", "replay")


SETTINGS = (
    Setting("mixed", n=4, d=64, T=40, beta=0.9, eps=1e-8, T0=None, seed=11),
    Setting("amsgrad", n=3, d=48, T=30, beta=0.95, eps=1e-6, T0=5, seed=12),
    Setting("single", n=1, d=32, T=20, beta=0.5, eps=1e-8, T0=0, seed=13),
    Setting("wide", n=2, d=4099, T=4, beta=0.9, eps=1e-8, T0=2, seed=14),  # past 4096: blocked kernels' edges
    Setting("many", n=257, d=40, T=6, beta=0.9, eps=1e-8, T0=None, seed=15, family="agree"),
    Setting("huge", n=2, d=70001, T=3, beta=0.9, eps=1e-8, T0=1, seed=16),  # past 2^16 elements per worker
    Setting("long", n=3, d=24, T=300, beta=0.9, eps=1e-8, T0=40, seed=17, family="long"),
    Setting("extreme", n=2, d=64, T=30, beta=0.9, eps=1e-8, T0=10, seed=18, family="extreme"),
    Setting("workers_4099", n=4099, d=5, T=3, beta=0.9, eps=1e-8, T0=None, seed=19, family="agree", idle_workers=1),
    Setting("restart_1000", n=2, d=6, T=1010, beta=0.9, eps=1e-8, T0=1000, seed=20, family="long"),
    Setting("float32_max", n=3, d=24, T=12, beta=0.7, eps=1e-8, T0=4, seed=21, family="sampled",
            log10_range=(38.3, 38.5318)),
)
FLOAT32_MAX = float(np.finfo(np.float32).max)
SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)
SAMPLE_SEED, SAMPLE_COUNT = 2026, 24
# The strata each sampled setting cycles through (so every edge is present whatever the seed), beside a random draw.
BETA_EDGES = (0.999999, 1e-6, 0.3, 0.499, 1 - 2.0**-24, 0.95)
EPS_EDGES = (SMALLEST_NORMAL, 1e-30, 1e-12, 1e-8)
T0_MODES = ("None", "0", "1", "t", "beyond", "per-call")


def _T0_path(mode: str, T: int, rng: np.random.Generator) -> tuple:
    """T0 at each of T steps: fixed (None, 0, 1), equal to a step t inside the run, beyond its end, or per call
    one of None, 0, 1, t - 1, t, t + 1 or far beyond (T0 given anew at every call)."""
    if mode == "per-call":
        return tuple((None, 0, 1, t - 1, t, t + 1, 10**6)[int(rng.integers(7))] for t in range(1, T + 1))
    fixed = {"None": None, "0": 0, "1": 1, "t": int(rng.integers(1, T + 1)), "beyond": T + int(rng.integers(1, 50))}
    return (fixed[mode],) * T


def sampled_settings(count: int = SAMPLE_COUNT, seed: int = SAMPLE_SEED) -> tuple[Setting, ...]:
    """A seeded, stratified sample of the settings space: setting k takes beta, eps and T0's mode from the edge
    lists above in turn on every other setting (a random beta in (0, 1), a log-uniform eps in [smallest normal,
    1e-2] otherwise), n from 1 to 128 and d from 1 to 600 log-uniformly (odd lengths included; d = 1 every
    seventh), 1 to 60 steps,
    magnitudes log-uniform over a random part of 1e-45 .. the largest float32, a third with idle workers, a fifth
    with constant draws."""
    rng = np.random.default_rng(seed)
    settings = []
    for k in range(count):
        random = k % 2 == 1
        beta = float(rng.uniform(1e-6, 1 - 1e-6)) if random else BETA_EDGES[(k // 2) % len(BETA_EDGES)]
        eps = float(10 ** rng.uniform(np.log10(SMALLEST_NORMAL), -2)) if random else EPS_EDGES[(k // 2) % 4]
        n, d = int(round(2 ** rng.uniform(0, 7))), int(round(2 ** rng.uniform(0, 9.3)))
        d = 1 if k % 7 == 3 else d  # a single element: the last one and the first
        T = int(rng.integers(1, 61))
        lo = float(rng.uniform(-45, 20))
        hi = float(min(rng.uniform(lo, 40), np.log10(FLOAT32_MAX)))
        path = _T0_path(T0_MODES[k % len(T0_MODES)], T, rng)
        idle = int(rng.integers(1, n + 1)) if k % 3 == 2 else 0
        settings.append(Setting(f"sampled_{k}", n=n, d=d, T=T, beta=beta, eps=eps, T0=path[0], seed=1000 + k,
                                family="sampled", T0_path=path if len(set(path)) > 1 else (),
                                draws="constant" if k % 5 == 4 else "uniform", idle_workers=idle,
                                log10_range=(lo, hi)))
    return tuple(settings)


FIXED = len(SETTINGS)
SETTINGS = SETTINGS + sampled_settings()
BY_NAME = {s.name: s for s in SETTINGS}
SPACE = (f"{FIXED} fixed regimes and {len(SETTINGS) - FIXED} sampled settings (seed {SAMPLE_SEED}): "
         f"{min(s.n for s in SETTINGS)} to {max(s.n for s in SETTINGS)} workers, d {min(s.d for s in SETTINGS)} to "
         f"{max(s.d for s in SETTINGS)}, up to {max(s.T for s in SETTINGS)} steps, beta "
         f"{min(s.beta for s in SETTINGS):g} to {max(s.beta for s in SETTINGS):.8g}, eps down to "
         f"{min(s.eps for s in SETTINGS):.3g}, T0 None, 0, 1, a step t, beyond the run or given anew per call, "
         "magnitudes 1e-45 to the largest float32, idle workers, constant draws")
EXTREME_MAGNITUDES = (1e-45, 1e-40, 1e-38, 1e-30, 1e-20, 1e-8, 1.0, 1e8, 1e20, 1e25, 1e28, 1e30)


@dataclass(frozen=True)
class Record:
    """One step: the state before and after, the inputs, the output u_bar, and what the call did to the objects
    the caller holds (field names changed in the input state, in the state returned two calls before, whether
    the previous u_bar changed) and the dtypes it returned."""

    setting: Setting
    T0: int | None
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
    earlier_changed: tuple[str, ...] = ()  # last record only: every output returned before, re-read at the end
    replayed: tuple | None = None  # "replay": (step, fields) where stepping that step's state again gave another answer


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


def sampled_gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
    """Per column a magnitude log-uniform in 10^log10_range (capped at the largest float32) and a sign pattern:
    constant, alternating in t, random, or one random sign shared by every worker (vote sums reach +-n); amplitudes
    rise and fall (period 7 + column) so line 7's running maximum differs from b_hat."""
    n, d = setting.n, setting.d
    lo, hi = setting.log10_range
    column = np.arange(d)
    log_magnitude = np.random.default_rng(setting.seed).uniform(lo, hi, d)
    wave = 1 + 0.9 * np.sin(2 * np.pi * t / (7.0 + column))
    magnitude = np.minimum(10.0**log_magnitude * wave * (0.75 + 0.25 * rng.random((n, d))), FLOAT32_MAX)
    pattern = column % 4
    shared = np.where(rng.random(d) < 0.5, -1.0, 1.0)
    sign = np.select([pattern == 0, pattern == 1, pattern == 2],
                     [np.ones((n, d)), np.broadcast_to((-1.0) ** (t + column), (n, d)),
                      np.where(rng.random((n, d)) < 0.5, -1.0, 1.0)], np.broadcast_to(shared, (n, d)))
    return (magnitude * sign).astype(np.float32)


GRADIENTS = {"mixed": mixed_gradients, "agree": agreeing_gradients, "long": long_gradients,
             "extreme": extreme_gradients, "sampled": sampled_gradients}


def gradients(setting: Setting, rng: np.random.Generator, t: int) -> np.ndarray:
    """The setting's gradients at step t, with its idle workers' rows set to zero."""
    g = GRADIENTS[setting.family](setting, rng, t)
    if setting.idle_workers:
        g[rng.choice(setting.n, setting.idle_workers, replace=False)] = 0.0
    return g


CONSTANT_DRAWS = (0.0, 0.5, 1 - 2.0**-24)
ONE_BELOW = float(np.nextafter(np.float32(1), np.float32(0)))


def anywhere(rng: np.random.Generator, shape) -> np.ndarray:
    """float32 draws anywhere in [0, 1), not only on the 2^-24 grid a float32 generator gives: a third at full
    float32 resolution (uniform in [0, 1) rounded down to a float32), a third log-uniform from the smallest
    subnormal 1e-45 to 1, and 0, the largest float32 below 1, 2^-24 and 1/2 for a twelfth each."""
    full = rng.random(shape)
    full32 = full.astype(np.float32)
    full32 = np.where(full32.astype(np.float64) > full, np.nextafter(full32, np.float32(0)), full32)  # round down
    tiny = (10.0 ** rng.uniform(-45, 0, shape)).astype(np.float32)
    fixed = np.array([0.0, ONE_BELOW, 2.0**-24, 0.5], np.float32)[rng.integers(0, 4, shape)]
    kind = rng.integers(0, 3, shape)
    return np.minimum(np.select([kind == 0, kind == 1], [full32, tiny], fixed), np.float32(ONE_BELOW))


def draws(rng: np.random.Generator, n: int, d: int, kind: str = "uniform") -> tuple[np.ndarray, np.ndarray]:
    """Uniform float32 draws (worker, server); ``constant``: each array one value, 0, 1/2, 1 - 2^-24 or random;
    ``anywhere``: float32 values anywhere in [0, 1) (``anywhere``)."""
    if kind == "constant":
        worker, server = (float(np.float32(rng.choice(CONSTANT_DRAWS + (rng.random(),)))) for _ in range(2))
        return np.full((n, d), worker, np.float32), np.full(d, server, np.float32)
    if kind == "anywhere":
        return anywhere(rng, (n, d)), anywhere(rng, (d,))
    return rng.random((n, d), dtype=np.float32), rng.random(d, dtype=np.float32)


def _scalars(setting: Setting, beta: float, eps: float, T0):
    """beta, eps and T0 as the setting passes them: Python float and int, or NumPy float64 and int64."""
    if setting.scalars == "numpy":
        return np.float64(beta), np.float64(eps), None if T0 is None else np.int64(T0)
    return beta, eps, T0


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
    returned = []  # every (u_bar as returned, its copy, state as returned, its snapshot), re-read at the end
    history = set(setting.history)
    buffers = None  # "buffers": the one gradient and draw buffers, overwritten every step
    partner = target.run_init(n, d) if "partner" in history else None
    replay = []  # "replay": (state object, its inputs, what it returned) of the last steps
    for t in range(1, setting.T + 1):
        replayed = None
        grads = gradients(setting, rng, t)
        u_worker, u_server = draws(rng, n, d, setting.draws)
        T0 = setting.T0_at(t)
        at = setting.at(t)
        beta, eps, T0_given = _scalars(setting, at.beta, at.eps, T0)
        given = (grads.copy(), u_worker.copy(), u_server.copy())  # step gets these; the record keeps the originals
        if "buffers" in history:
            if buffers is None:
                buffers = given
            else:
                for buffer, value in zip(buffers, given, strict=True):
                    np.copyto(buffer, value)
            given = buffers
        try:
            prev = read_state(state, n, d)
            if "restep" in history:  # the same state object first stepped with other inputs, that answer dropped
                other_w, other_s = draws(rng, n, d)
                target.call_step(state, -2 * grads[::-1].copy(), 1 - at.beta / 2, at.eps * 3, other_w, other_s,
                                 None if T0 is None else T0 + 1)
            if partner is not None:  # a second state of the same shape, other settings, stepped in between
                other_w, other_s = draws(rng, n, d)
                partner = target.call_step(partner, grads[::-1].copy(), at.beta / 2, at.eps * 7, other_w, other_s,
                                           None if T0 is not None else 1)[2]
            raw_u_bar, u_bar, new_state = target.call_step(state, given[0], beta, eps, given[1], given[2], T0_given)
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
        if "replay" in history:
            replay.append((state, (grads, beta, eps, u_worker, u_server, T0_given), u_bar, new))
            if len(replay) > 2:  # the state of two steps before, stepped again with its inputs
                old_state, inputs, old_u_bar, old_new = replay.pop(0)
                copies = [x.copy() if isinstance(x, np.ndarray) else x for x in inputs]
                try:
                    again_u_bar, again = target.run_step(old_state, *copies)
                    differ = _differ_again(again_u_bar, read_state(again, n, d), old_u_bar, old_new)
                except ImplError as error:
                    raise ImplError(f"{error} (trajectory {setting.name!r}, step {t - 2} again)") from error
                if differ:
                    replayed = (t - 2, tuple(differ))
        records.append(Record(at, T0, prev, grads, u_worker, u_server, u_bar, new, input_changed, inputs_changed,
                              older_changed, u_bar_changed, dtypes, replayed=replayed))
        older, previous_u_bar = (state, prev), (raw_u_bar, u_bar)
        returned.append((raw_u_bar, u_bar, new_state, new))
        state = new_state
    earlier = tuple(f"u_bar of step {t}" for t, (raw, copy, _, _) in enumerate(returned, start=1)
                    if not same_bits(to_numpy(raw), copy))
    earlier += tuple(f"state of step {t} ({', '.join(fields)})" for t, (_, _, obj, view) in enumerate(returned, start=1)
                     if (fields := _changed(obj, view, n, d)))
    if earlier:
        records[-1] = replace(records[-1], earlier_changed=earlier)
    return records


def _differ_again(u_bar: np.ndarray, view: StateView, want_u_bar: np.ndarray, want: StateView) -> list[str]:
    """What a repeated call gave differently: u_bar and the state's fields, bit for bit."""
    return (["u_bar"] if not same_bits(u_bar, want_u_bar) else []) + want.equals(view)


def trajectory(ctx: Context, setting: Setting) -> list[Record]:
    return ctx.shared(("trajectory", setting.name), lambda: run(ctx.target, setting))


def trajectories(ctx: Context) -> list[list[Record]]:
    """Every setting's trajectory (``ctx.settings``, or ``SETTINGS``), computed once per context."""
    return [trajectory(ctx, s) for s in (ctx.settings or SETTINGS)]


FLOAT32_EXTREME = 2.0**127  # half the largest float32: |m_{t-1}| + |g| beyond it lets another order overflow


def overflows_at_extremes(trajectory: list[Record]) -> bool:
    """Whether m or b_hat became non-finite at an element where |m_{t-1}| + |g| (or |b_hat_{t-1}| + |g|) reached
    ``FLOAT32_EXTREME`` while beta m + (1 - beta) g stays finite: a lerp's g - m overflows there."""
    for rec in trajectory:
        g = np.abs(rec.grads.astype(np.float64))
        for name in ("m", "b_hat"):
            prev = np.abs(getattr(rec.prev, name).astype(np.float64))
            with np.errstate(all="ignore"):
                extreme = ~(prev + g < FLOAT32_EXTREME) & (rec.setting.beta * prev + (1 - rec.setting.beta) * g
                                                             < float(np.finfo(np.float32).max))
            if extreme.any() and not np.isfinite(getattr(rec.new, name)[extreme]).all():
                return True
    return False


def judged_trajectories(ctx: Context) -> list[list[Record]]:
    """Every trajectory but those that overflowed only at float32's extremes (left to contract_float32_extremes, a
    warning: what follows such an overflow is not the algorithm's to judge)."""
    return ctx.shared("judged_trajectories", lambda: [t for t in trajectories(ctx) if not overflows_at_extremes(t)])


def all_records(ctx: Context) -> list[Record]:
    """The records of ``judged_trajectories``."""
    return [record for trajectory in judged_trajectories(ctx) for record in trajectory]
