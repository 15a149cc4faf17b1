"""The input space by its structure and the calls by their history (issue 28): where real ports switch paths or keep
narrow integers, caches and buffers, every line of Algorithm 1 is checked again.

- ``structure_shapes``: the per-step checks (dtypes, purity, aliasing, lines 2, 5-9, 12-13, the eps convention) on
  shapes where ports take another path: as many workers as coordinates, d a multiple of 8, 128 and 256 from 1024
  up and a prime beside it, exactly 2^18 and more than 2^18 elements, d = 2^20, power-of-two worker counts from
  16 up to 2^15, more than 8192 workers;
- ``contract_history``: the same checks on call sequences: beta, eps and T0 changing at every call, a second state
  of the same shape with other settings stepped in between, the same state object stepped twice, gradients and
  draws arriving in one reused buffer, an old state stepped again after later ones, beta and eps as NumPy float64
  and T0 as a NumPy integer, T0 in the int16 and past the int32 range;
- ``line2_long_run``: t and line 7 over 65,600 steps (past 2^16) at small d, AMSGrad switching on at T0 = 65,540;
- ``step_draws_anywhere``: lines 8 and 12 against the implementation's own quantize with draws anywhere a float32
  in [0, 1) can be (0, subnormals, off the 2^-24 grid, beside the threshold, the largest below 1), at y from just
  above -1 (a draw of 0 there gives +1) to just below 1;
- ``metamorphic_relations``: relations between two runs of the implementation that hold for every input, each with
  its proof in ``RELATIONS``, on the same shapes.

Every check compares the implementation with itself or with Algorithm 1's identities, never with birder_ref.
"""

from __future__ import annotations

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import ARRAY_FIELDS, ImplError, field, read_count, read_state
from proofs_checks.trajectories import ONE_BELOW, SMALLEST_NORMAL, Setting, anywhere

# ---- the per-step checks, on other settings -----------------------------------------------------------------

PER_STEP = ("contract_shapes", "contract_dtypes", "contract_purity", "contract_aliasing", "line2_step_counter",
            "line5_6_moments", "line7_amsgrad", "line9_worker_error", "line13_server_error", "line8_worker_quantizer",
            "line12_server_quantizer", "contract_eps_convention")

SHAPES = (
    Setting("n_equals_d_12", n=12, d=12, T=5, beta=0.9, eps=1e-8, T0=2, seed=40),
    Setting("n_equals_d_128", n=128, d=128, T=3, beta=0.9, eps=1e-8, T0=1, seed=41, family="agree"),
    Setting("workers_16_d_1024", n=16, d=1024, T=3, beta=0.9, eps=1e-8, T0=1, seed=42, family="agree"),
    Setting("workers_32_d_768", n=32, d=768, T=2, beta=0.95, eps=1e-8, T0=None, seed=43, draws="anywhere"),
    Setting("workers_17_d_1031", n=17, d=1031, T=2, beta=0.9, eps=1e-8, T0=None, seed=44),  # a prime beside 1024
    Setting("elements_2pow18", n=4, d=2**16, T=2, beta=0.9, eps=1e-8, T0=1, seed=45),
    Setting("elements_over_2pow18", n=3, d=2**17 + 5, T=2, beta=0.9, eps=1e-8, T0=1, seed=46),
    Setting("d_2pow20", n=2, d=2**20, T=2, beta=0.9, eps=1e-8, T0=None, seed=47),
    Setting("workers_8195", n=8195, d=3, T=2, beta=0.9, eps=1e-8, T0=None, seed=48, family="agree"),
    Setting("workers_2pow15", n=2**15, d=2, T=2, beta=0.9, eps=1e-8, T0=None, seed=49, family="agree"),
)

_BETAS = (0.9, 0.3, 0.999999, 1e-6, 0.95, 0.5, 0.99, 0.7, 0.9, 0.1, 0.95, 0.8)
_EPS = (1e-8, 1e-30, SMALLEST_NORMAL, 1e-3, 1e-12, 1e-8, 0.5, 1e-20, 1e-6, 1e-8, 1e-4, 1e-8)
HISTORY = (
    Setting("settings_every_call", n=3, d=40, T=12, beta=0.9, eps=1e-8, T0=None, seed=50, beta_path=_BETAS,
            eps_path=_EPS, T0_path=(None, 0, None, 2, 10**6, 1, 5, None, 3, 0, 8, None)),
    Setting("partner_state_same_shape", n=3, d=40, T=8, beta=0.95, eps=1e-6, T0=3, seed=51, history=("partner",)),
    Setting("same_state_twice", n=2, d=33, T=6, beta=0.9, eps=1e-8, T0=2, seed=52, history=("restep",)),
    Setting("reused_buffers", n=4, d=64, T=6, beta=0.9, eps=1e-8, T0=2, seed=53, history=("buffers",)),
    Setting("old_state_again", n=3, d=24, T=6, beta=0.9, eps=1e-8, T0=2, seed=54, history=("replay",)),
    Setting("numpy_scalars", n=2, d=48, T=10, beta=0.9, eps=1e-6, T0=3, seed=55, scalars="numpy"),
    Setting("T0_numpy_int32", n=2, d=40, T=8, beta=0.9, eps=1e-8, T0=np.int32(2), seed=56),
    Setting("T0_int16_range", n=2, d=40, T=6, beta=0.9, eps=1e-8, T0=40000, seed=57),
    Setting("T0_past_int32", n=2, d=40, T=6, beta=0.9, eps=1e-8, T0=2**31 + 7, seed=58),
    Setting("T0_past_uint32", n=2, d=40, T=6, beta=0.9, eps=1e-8, T0=2**32 + 1, seed=59, scalars="numpy"),
)


def per_step_on(ctx: Context, settings: tuple[Setting, ...], what: str) -> Outcome:
    """The per-step checks (``PER_STEP``) on ``settings`` instead of the suite's own: pass when all pass; else
    fail naming each failing check and its detail. A per-step check that already failed (or was not judged) on the
    suite's own settings is not run again: its root cause is reported once, by that check, as is an implementation
    error it already reported; if nothing else fails, this check is not judged."""
    from proofs_checks.runner import run_one, select  # the runner imports this module

    reported = [name for name in PER_STEP if name in ctx.failed]
    sub = Context(ctx.target, settings=settings, failed=set(reported), errors=dict(ctx.errors))
    remaining = [name for name in PER_STEP if name not in reported]
    failed, unjudged = [], 0
    for chk in select(remaining) if remaining else []:  # select([]) would mean every check
        result = run_one(sub, chk)
        if result.status == "fail":
            failed.append(f"{chk.name}: {result.detail}")
        unjudged += result.status == "blocked"
    steps = sum(s.T for s in settings)
    elsewhere = (f"; not run again: {', '.join(reported)}, which fail on the suite's own settings (reported there)"
                 if reported else "")
    if failed:
        return verdict(False, f"on {what}: " + " | ".join(failed) + elsewhere,
                       f"{len(failed)} of {len(PER_STEP)} checks fail")
    if reported or unjudged:
        held = len(PER_STEP) - len(reported) - unjudged
        return Outcome("blocked", f"not judged: {held} of {len(PER_STEP)} per-step checks hold over {len(settings)} "
                                  f"{what} ({steps} steps), the others rest on a failure{elsewhere}",
                       f"{held} of {len(PER_STEP)} hold")
    return verdict(True, f"{len(PER_STEP)} per-step checks hold over {len(settings)} {what} ({steps} steps)",
                   f"{len(settings)} settings")


def _names(settings) -> str:
    return ", ".join(f"{s.name} ({s.n} x {s.d})" for s in settings)


@check(
    "structure_shapes",
    "Algorithm 1 lines 2-13 hold at every size, including where ports switch paths",
    f"the per-step checks ({', '.join(PER_STEP)}) on {_names(SHAPES)}; draws anywhere in [0, 1) in one",
    after=("contract_shapes",),
)
def structure_shapes(ctx: Context) -> Outcome:
    return per_step_on(ctx, SHAPES, "boundary shapes")


@check(
    "contract_history",
    "Interface: step is a function of its arguments whatever came before: settings that change at every call, "
    "states of one shape with other settings, one state stepped twice, reused input buffers, old states stepped "
    "again, NumPy scalars and T0 in and past the int16/int32 ranges",
    f"the per-step checks on {', '.join(s.name for s in HISTORY)}",
    kind="contract",
    after=("contract_shapes", "determinism"),  # a step that is not a function of its arguments is reported there
)
def contract_history(ctx: Context) -> Outcome:
    return per_step_on(ctx, HISTORY, "call histories")


# ---- t and line 7 past 2^16 steps -------------------------------------------------------------------------------

LONG_T, LONG_T0, LONG_N, LONG_D = 65_600, 65_540, 1, 3
LONG_READ = 64  # the whole state is read at the first and at the last LONG_READ steps before T0 and after; t always


def long_run(ctx: Context) -> dict:
    """65,600 steps on 1 x 3 elements with T0 = 65,540 (an int and a numpy.int64 in turn): t after every step; b
    and b_hat at the first steps and around T0 (reading the state costs more than a step at this size)."""

    def compute():
        target, rng = ctx.target, np.random.default_rng(60)
        # amplitudes that rise and fall (periods 97, 1009, 65,537 steps) so the running maximum matters after T0
        steps = np.arange(1, LONG_T + 1)[:, None]
        amplitude = 1.0 + 0.9 * np.sin(2 * np.pi * steps / np.array([97.0, 1009.0, 65_537.0]))
        grads = (amplitude * rng.standard_normal((LONG_T, LONG_D))).astype(np.float32)
        u_worker = rng.random((LONG_T, LONG_D), dtype=np.float32)
        u_server = rng.random((LONG_T, LONG_D), dtype=np.float32)
        state = target.run_init(LONG_N, LONG_D)
        t_seen, views = np.zeros(LONG_T, np.int64), {0: read_state(state, LONG_N, LONG_D)}
        for k in range(LONG_T):
            T0 = LONG_T0 if k % 2 else np.int64(LONG_T0)
            try:
                _, state = target.run_step(state, grads[k:k + 1], 0.9, 1e-8, u_worker[k:k + 1], u_server[k], T0)
                t_seen[k] = read_count(field(state, "t"))
                if k < LONG_READ or k >= LONG_T0 - LONG_READ:
                    views[k + 1] = read_state(state, LONG_N, LONG_D)
            except ImplError as error:
                raise ImplError(f"{error} (65,600-step run, step {k + 1})") from error
            if t_seen[k] != k + 1:  # a counter that wraps or stops: judged from here, no need to go on
                return {"t": t_seen[:k + 1], "views": views}
        return {"t": t_seen, "views": views}

    return ctx.shared("long_run", compute)


@check(
    "line2_long_run",
    "Algorithm 1 lines 2 and 7 past 2^16 steps: t counts every step, b = b_hat while t <= T0 and max(b, b_hat) after",
    f"{LONG_T:,} steps on {LONG_N} x {LONG_D} elements, T0 = {LONG_T0:,} (as int and numpy.int64 in turn): t after "
    f"every step (a counter in 16 bits or in float16 wraps or stops); line 7 bit for bit against the "
    f"implementation's own b_hat over the first {LONG_READ} steps and the {LONG_READ} before T0 to the end",
    after=("line2_step_counter", "line7_amsgrad"),  # what fails in a short run is reported there
)
def long_run_check(ctx: Context) -> Outcome:
    run = long_run(ctx)
    wrong_t = np.flatnonzero(run["t"] != np.arange(1, run["t"].size + 1))
    if wrong_t.size:
        k = int(wrong_t[0])
        return verdict(False, f"after step {k + 1} the state's t is {run['t'][k]}: the step counter wraps or stops",
                       "t wrong")
    views, wrong, switched = run["views"], [], 0
    for t in sorted(views)[1:]:
        if t - 1 not in views:
            continue
        prev, new = views[t - 1], views[t]
        rule = np.maximum(prev.b, new.b_hat) if t > LONG_T0 else new.b_hat
        if not np.array_equal(new.b, rule):
            which = "max(b_{t-1}, b_hat_t)" if t > LONG_T0 else "b_hat_t"
            wrong.append(f"step {t}: b = {new.b[0].tolist()} where it must be {which} = {rule[0].tolist()}")
        switched += bool(t > LONG_T0 and np.any(new.b != new.b_hat))
    if wrong:
        return verdict(False, f"line 7 broken (T0 = {LONG_T0}) at {len(wrong)} steps; first {wrong[0]}",
                       f"{len(wrong)} steps wrong")
    return verdict(True, f"t = 1 .. {LONG_T:,} and line 7 held at every step read; the running maximum differed from "
                         f"b_hat at {switched} of the {LONG_T - LONG_T0} steps after T0", f"{LONG_T:,} steps")


# ---- lines 8 and 12 with draws anywhere in [0, 1) ---------------------------------------------------------------

DRAW_N = 3
DRAW_C = (1, 1, 3, 5, 2**12 - 1, None, None, None)  # c of each call (None: a random odd c); c = 1 reaches -1 + 2^-24
DRAW_CALLS = len(DRAW_C)


def _exact_columns(rng: np.random.Generator, c: int | None) -> tuple[float, np.ndarray]:
    """eps and b per column for step 1 with beta = 1/2 (g = +-2b: m = +-b, b_hat = b) where y = m / (b + eps) is
    exact in float32 and float64 alike: eps = c 2^(-24-J) (c odd) and b = 2^-j - eps, so b + eps = 2^-j and
    y = -+(1 - c 2^(J-j-24)): from y = -1 + c 2^-24 just above -1 (a draw of 0 must give +1 there) to y = -1/2."""
    c = int(rng.integers(0, 2**12)) * 2 + 1 if c is None else c
    J = int(rng.integers(0, 12))
    eps = c * 2.0 ** (-24 - J)
    B = 2.0 ** -np.arange(J, J + 24)
    b = np.tile((B - eps)[B > eps], 8)  # each exact y eight times, with other draws
    b = np.concatenate([b, 2.0 ** rng.uniform(-30, 0, 100)])  # and columns where y is not exact
    return eps, b.astype(np.float32)


def _draws_at(rng: np.random.Generator, p: np.ndarray) -> np.ndarray:
    """A draw per element: 0, the smallest subnormal, tiny values, the threshold p itself and the float32 values
    just below and above it, a value off the 2^-24 grid inside p's grid cell, anywhere in [0, 1), or 1 - 2^-24."""
    p = p.astype(np.float32)
    cell = np.floor(p.astype(np.float64) * 2**24) * 2.0**-24
    inside_cell = (cell + (p.astype(np.float64) - cell) * rng.uniform(1.0, 2.0, p.shape)).astype(np.float32)
    choices = np.stack([
        np.zeros_like(p), np.full_like(p, 1e-45), np.full_like(p, 2.0**-30), p,
        np.nextafter(p, np.float32(0)), np.nextafter(p, np.float32(1)), inside_cell, anywhere(rng, p.shape),
        np.full_like(p, ONE_BELOW)])
    pick = rng.integers(0, len(choices), p.shape)
    u = np.take_along_axis(choices, pick[None], axis=0)[0]
    return np.clip(u, 0, np.float32(ONE_BELOW)).astype(np.float32)


def draws_anywhere_run(ctx: Context) -> dict:
    """Step 1 from init where y is exact (``_exact_columns``), so every correct implementation quantizes the same y
    whatever its precision, with adversarial draws (``_draws_at``); step's workers' outputs recovered from
    e = y - u; the server's z = mean of the workers' +-1 judged where one ulp of z does not change Q."""

    def compute():
        target, rng = ctx.target, np.random.default_rng(61)
        counts = {"worker": 0, "worker_total": 0, "server": 0, "server_total": 0}
        first = ""
        for c in DRAW_C:
            eps, b = _exact_columns(rng, c)
            sign = np.where(rng.random((DRAW_N, b.size)) < 0.5, -1.0, 1.0)
            g = (sign * 2 * b.astype(np.float64)).astype(np.float32)
            y64 = sign * b.astype(np.float64) / (b.astype(np.float64) + eps)
            y = y64.astype(np.float32)
            p64 = (y64 + 1) / 2
            exact = (y == y64) & (np.float32(b) + np.float32(eps) == b.astype(np.float64) + eps) & (
                p64.astype(np.float32) == p64)
            u_worker = _draws_at(rng, p64.astype(np.float32))
            u_server = _draws_at(rng, rng.choice(np.array([0.0, 1 / 3, 2 / 3, 1.0], np.float32), b.size))
            state = target.run_init(DRAW_N, b.size)
            u_bar, state = target.run_step(state, g, 0.5, eps, u_worker, u_server, None)
            new = read_state(state, DRAW_N, b.size)
            with np.errstate(all="ignore"):
                got_u = np.where(y.astype(np.float64) - new.e > 0, np.float32(1), np.float32(-1))
            want_u = target.run_quantize(y, u_worker)
            judged = exact & np.isfinite(new.e)
            wrong_u = judged & (got_u != want_u)
            z = got_u.sum(axis=0) / np.float32(DRAW_N)
            window = [target.run_quantize(np.nextafter(z, np.float32(s * np.inf)).astype(np.float32), u_server)
                      for s in (-1, 1)]
            want_bar = target.run_quantize(z, u_server)
            clear = judged.all(axis=0) & (window[0] == want_bar) & (window[1] == want_bar)
            wrong_bar = clear & (u_bar != want_bar)
            counts["worker"] += int(wrong_u.sum())
            counts["worker_total"] += int(judged.sum())
            counts["server"] += int(wrong_bar.sum())
            counts["server_total"] += int(clear.sum())
            if not first and wrong_u.any():
                i, j = np.argwhere(wrong_u)[0]
                first = (f"first at worker {i}, element {j}: y = {y[i, j]:.9g}, u = {u_worker[i, j]:.9g}: step "
                         f"gave {got_u[i, j]:+g} where the implementation's own quantize(y, u) gives {want_u[i, j]:+g}")
            elif not first and wrong_bar.any():
                j = int(np.argwhere(wrong_bar)[0][0])
                first = (f"first at the server, element {j}: z = {z[j]:.9g}, u = {u_server[j]:.9g}: step gave "
                         f"{u_bar[j]:+g} where quantize(z, u) gives {want_bar[j]:+g}")
        return {**counts, "first": first}

    return ctx.shared("draws_anywhere", compute)


@check(
    "step_draws_anywhere",
    "Eq. 5 inside step (lines 8 and 12) for every float32 draw in [0, 1): step's outputs are its own Q(y, u) with "
    "the injected draw, also off the 2^-24 grid, at 0 and subnormal draws and just above y = -1",
    f"step 1 x {DRAW_CALLS} (beta = 1/2, eps = c 2^(-24-J)), {DRAW_N} workers: y = +-(1 - c 2^-24 ...), exact in "
    "any precision, from just above -1 to -1/2 and from 1/2 to just below 1; draws 0, 1e-45, 2^-30, the threshold "
    "and its float32 neighbours, inside its grid cell, anywhere, 1 - 2^-24; workers bit for bit where y and "
    "(y + 1)/2 are exact, the server where one ulp of z does not change Q",
    needs=("quantize", "init", "step"),
    after=("line5_6_moments", "line9_worker_error", "contract_eps_convention", "line8_worker_quantizer",
           "line12_server_quantizer"),
)
def step_draws_anywhere(ctx: Context) -> Outcome:
    run = draws_anywhere_run(ctx)
    ok = run["worker"] == 0 and run["server"] == 0 and run["worker_total"] > 0
    detail = (f"{run['worker']} of {run['worker_total']} worker outputs and {run['server']} of "
              f"{run['server_total']} server outputs differ from quantize"
              + (f"; {run['first']}" if run["first"] else ""))
    return verdict(ok, detail, f"{run['worker']} + {run['server']} wrong")


# ---- metamorphic relations --------------------------------------------------------------------------------------

RELATION_SHAPES = ((12, 12), (16, 1024), (32, 768), (8195, 3))  # structure_shapes covers the larger sizes
RELATION_T = 3


def _drive(target, n: int, d: int, steps) -> tuple[list, object]:
    """Run ``steps`` (grads, u_worker, u_server, beta, eps, T0) from init; (u_bars, the last state's view)."""
    state = target.run_init(n, d)
    u_bars = []
    for grads, u_worker, u_server, beta, eps, T0 in steps:
        u_bar, state = target.run_step(state, grads, beta, eps, u_worker, u_server, T0)
        u_bars.append(u_bar)
    return u_bars, read_state(state, n, d)


def _inputs(rng: np.random.Generator, n: int, d: int) -> list:
    """T steps of gradients (magnitudes 2^-20 .. 2^20, random signs, a share of agreeing columns), grid draws."""
    steps = []
    for t in range(1, RELATION_T + 1):
        magnitude = 2.0 ** rng.uniform(-20, 20, (1, d))
        agree = rng.random(d) < 0.3
        sign = np.where(agree, np.where(rng.random(d) < 0.5, -1.0, 1.0), np.where(rng.random((n, d)) < 0.5, -1, 1))
        grads = (magnitude * sign * rng.uniform(0.5, 1.5, (n, d))).astype(np.float32)
        steps.append((grads, rng.random((n, d), dtype=np.float32), rng.random(d, dtype=np.float32), 0.9, 1e-8,
                      1 if t > 1 else None))
    return steps


def _permute_workers(steps, perm):
    return [(g[perm], w[perm], s, *rest) for g, w, s, *rest in steps]


def _permute_columns(steps, perm):
    return [(g[:, perm], w[:, perm], s[perm], *rest) for g, w, s, *rest in steps]


def _scale(steps, k: int):
    return [(g * np.float32(2.0**k), w, s, beta, eps * 2.0**k, T0) for g, w, s, beta, eps, T0 in steps]


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal up to a reordering's last ulps: 2^-20 relative, or 2^-40 absolute for values near 0."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        return bool(np.all((a == b) | (np.abs(a - b) <= 2.0**-20 * np.maximum(np.abs(a), np.abs(b)) + 2.0**-40)))


def _mismatch(u_bars, view, want_u_bars, want_view, column=None, row=None, scale=1.0) -> list[str]:
    """Which outputs of the transformed run differ from the original run transformed (u_bar exactly)."""
    differ = []
    for t, (got, want) in enumerate(zip(u_bars, want_u_bars, strict=True), start=1):
        want = want if column is None else want[column]
        if not np.array_equal(got, want):
            differ.append(f"u_bar of step {t} ({int((got != want).sum())} elements)")
            break
    for name in ARRAY_FIELDS:
        got, want = getattr(view, name), getattr(want_view, name)
        if column is not None:
            want = want[..., column]
        if row is not None and name != "server_e":
            want = want[row]
        if name in ("m", "b_hat", "b"):
            want = want * np.float32(scale)
        if not _close(got, want):
            differ.append(name)
    return differ


# Each relation: (name, proof sketch). The proofs use only that lines 5-11 act on each (worker, coordinate) element
# alone, line 12 on each coordinate alone, and that a float32 sum of +-1 values is exact in any order (n < 2^24).
RELATIONS = {
    "workers permuted": "Lines 5-11 act on each worker's row alone and line 12's mean is a sum of +-1 (exact in "
                        "any order): permuting the rows of the gradients and worker draws permutes m, b_hat, b, e "
                        "and leaves u_bar and server_e unchanged.",
    "coordinates permuted with their draws": "Every line acts on each coordinate alone (its gradients, draws, "
                                             "state): permuting the columns of the gradients, both draws permutes "
                                             "every output the same way.",
    "d split in two side by side": "For the same reason, a problem of d = d1 + d2 coordinates gives, on its first "
                                   "d1 coordinates, what the problem of those d1 coordinates alone gives (and the "
                                   "last d2 likewise).",
    "gradients and eps scaled by 2^k": "Multiplying by a power of two is exact in float32 away from underflow and "
                                       "overflow, and lines 5-7 are homogeneous: m, b_hat, b scale by 2^k and "
                                       "r = m / (b + eps) is unchanged when eps scales too, so u_bar, e, server_e "
                                       "are unchanged (gradients 2^-20 .. 2^20, k = +-8).",
}


def relation_failures(ctx: Context, shapes=RELATION_SHAPES) -> list[str]:
    """Each relation of ``RELATIONS`` at each shape: the list of (relation, shape, what differs) that fail."""
    target, rng = ctx.target, np.random.default_rng(62)
    failures = []
    for n, d in shapes:
        steps = _inputs(rng, n, d)
        base_u_bars, base = _drive(target, n, d, steps)
        rows, cols = rng.permutation(n), rng.permutation(d)
        half = d // 2
        cases = [("workers permuted", _permute_workers(steps, rows), dict(row=rows)),
                 ("coordinates permuted with their draws", _permute_columns(steps, cols), dict(column=cols))]
        if d > 1:
            cases += [("d split in two side by side", _permute_columns(steps, np.arange(half)),
                       dict(column=np.arange(half))),
                      ("d split in two side by side", _permute_columns(steps, np.arange(half, d)),
                       dict(column=np.arange(half, d)))]
        k = 8 if rng.random() < 0.5 else -8
        cases.append(("gradients and eps scaled by 2^k", _scale(steps, k), dict(scale=2.0**k)))
        for name, transformed, how in cases:
            width = len(how["column"]) if "column" in how else d
            u_bars, view = _drive(target, n, width, transformed)
            differ = _mismatch(u_bars, view, base_u_bars, base, **how)
            if differ:
                failures.append(f"{name} at n = {n}, d = {d}: {', '.join(differ)} differ")
                break
    return failures


@check(
    "metamorphic_relations",
    "Algorithm 1 is elementwise per worker and per coordinate, its mean a sum of +-1 and its lines homogeneous: "
    + " ".join(f"{name}: {proof}" for name, proof in RELATIONS.items()),
    f"{RELATION_T} steps at n x d = {', '.join(f'{n} x {d}' for n, d in RELATION_SHAPES)}: each transformed run "
    "against the original run transformed, u_bar bit for bit, the state within 2^-20 relative",
    after=("contract_shapes", "line5_6_moments", "line9_worker_error", "line13_server_error",
           "line8_worker_quantizer", "line12_server_quantizer"),  # a wrong line breaks the relations too
)
def metamorphic(ctx: Context) -> Outcome:
    failures = relation_failures(ctx)
    if failures:
        return verdict(False, "; ".join(failures), f"{len(failures)} relations broken")
    return verdict(True, f"{len(RELATIONS)} relations hold at {len(RELATION_SHAPES)} shapes", "all hold")


REGIMES = {s.name: s for s in SHAPES + HISTORY}


def judge_in(ctx: Context, name: str, regime: str | None = None) -> Outcome:
    """The check ``name`` of this module, on one of its regimes only (a setting of ``SHAPES`` or ``HISTORY``, or
    "N x D" for ``metamorphic_relations``); None: all of them. Tests use it to keep each mutant's run short."""
    if regime is None:
        return next(c for c in _checks() if c.name == name).run(ctx)
    if name == "metamorphic_relations":
        n, d = (int(x) for x in regime.split(" x "))
        failures = relation_failures(ctx, ((n, d),))
        return verdict(not failures, "; ".join(failures) or "the relations hold")
    return per_step_on(ctx, (REGIMES[regime],), regime)


def _checks():
    from proofs_checks.registry import CHECKS

    return [c for c in CHECKS if c.run.__module__ == __name__]


# The checks of this module that drive the implementation at length (seconds each): tests that judge another
# concern leave them out, and `birder report --quick` leaves out the 65,600-step run.
SLOW = ("structure_shapes", "contract_history", "line2_long_run", "metamorphic_relations")

