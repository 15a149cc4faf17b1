"""What Algorithm 1 does with its state and its draws: line 1, line 2's step counter, line 7, the quantizer calls of
lines 8 and 12 (on the trajectories, and with adversarial draws on exact values), and determinism (same state,
gradients and draws give the same outputs; the input state is left as it was).

Lines 8 and 12 are checked against the implementation's own ``quantize`` with the injected draws: an
implementation that draws internally, or quantizes something else, disagrees. On the trajectories its y = m/(b+eps)
+ e is known to us only to rounding, so each comparison evaluates ``quantize`` at y and y +- w, with w = 2^-20
(|r| + |e_prev|) the rounding the implementation's own y may carry (0 where y is exactly 0), and skips the
elements where the three disagree (counted; if more than half are skipped the check fails). No monotonicity in y
is assumed: a quantizer with Eq. 5's law and another draw mapping
(keep the sign of y with probability (1 + |y|)/2) is judged like the contract's ``u < (y + 1)/2``.
``step_exact_draws`` then drives ``step`` where y and z are exact (dyadic gradients, beta = 1/2) with draws chosen
from y itself: u = 0 and u = 1 - 2^-24 at |y| = 1, u on the threshold (y + 1)/2 and one grid step below it, with no
window at all.
"""

from __future__ import annotations

import inspect

import numpy as np

from proofs_checks.identities import derive, eps_mask
from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import ARRAY_FIELDS, Target, read_state, same_bits
from proofs_checks.trajectories import SETTINGS, all_records, draws, gradients, trajectories

# Above this share of skipped elements too little is judged. A quantizer that is not a function of (y, u) (draws
# of its own) is not caught by this share but by mismatches where its three calls happen to agree, and by
# determinism; a correct quantizer that is not monotone in y (another draw mapping) skips a few percent.
AMBIGUOUS_SHARE = 0.5
STEP_KEYWORDS = ("beta", "eps", "u_worker", "u_server", "T0")


def _keyword_problem(function) -> str | None:
    """Which of step's keyword arguments its signature cannot take, or None (also when it cannot be inspected)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    missing = [k for k in STEP_KEYWORDS if k not in parameters]
    return ", ".join(missing) if missing else None


@check(
    "interface",
    "The interface exists: quantize(y, u), init(n, d) and step(state, grads, beta=, eps=, u_worker=, u_server=, T0=) "
    "(Algorithm 1 through the injected draws)",
    "quantize, init and step are callable and step's signature takes the keywords beta, eps, u_worker, u_server and "
    "T0; what they return is judged by the other checks (a wrong shape or a t that never advances is a failed "
    "check, not an implementation that cannot be judged)",
    needs=(),
    kind="contract",
)
def interface(ctx: Context) -> Outcome:
    missing = ctx.target.missing(("quantize", "init", "step"))
    if missing:
        return verdict(False, f"the implementation has no callable {', '.join(missing)}")
    keywords = _keyword_problem(ctx.target.step)
    if keywords:
        return verdict(False, f"step does not take the keyword argument(s) {keywords}: yours is "
                              f"step{inspect.signature(ctx.target.step)}; the interface requires "
                              "step(state, grads, beta, eps, u_worker, u_server, T0=None)")
    return verdict(True, "quantize, init and step are callable; step takes beta, eps, u_worker, u_server, T0",
                   "quantize, init, step")


INIT_SIZES = ((1, 1), (3, 5), (4099, 2), (2, 65537))


@check(
    "line1_init",
    "Algorithm 1 line 1: m_0 = b_0 = e_0 = 0 on every worker and e_bar_0 = 0, at t = 0",
    f"init(n, d) for n x d in {', '.join(f'{n} x {d}' for n, d in INIT_SIZES)}: every field zero and of its "
    "shape, t = 0",
    needs=("init",),
)
def line1_init(ctx: Context) -> Outcome:
    for n, d in INIT_SIZES:
        view = read_state(ctx.target.run_init(n, d), n, d)
        nonzero = [f for f in ARRAY_FIELDS if np.any(getattr(view, f) != 0)]
        if nonzero or view.t != 0:
            return verdict(False, f"init({n}, {d}): " + (f"nonzero {', '.join(nonzero)}" if nonzero else "")
                           + (f"{'; ' if nonzero else ''}t = {view.t}, expected 0" if view.t != 0 else ""),
                           "not zero")
    return verdict(True, f"zero fields and t = 0 at {len(INIT_SIZES)} sizes", "zero state")


@check(
    "line2_step_counter",
    "Algorithm 1 line 2: t = 1, ..., T counts the steps (line 7 compares it with T0)",
    "t after every recorded step equals the number of steps taken, up to 1010 (a counter in int8 or uint8 wraps)",
)
def step_counter(ctx: Context) -> Outcome:
    for trajectory in trajectories(ctx):
        for t, rec in enumerate(trajectory, start=1):
            if rec.new.t != t:
                return verdict(False, f"{rec.setting.name}: after step {t} the state's t is {rec.new.t}"
                               + (" (the counter wraps: a small integer type?)" if rec.new.t < rec.prev.t else ""),
                               "wrong t")
    longest = max(len(trajectory) for trajectory in trajectories(ctx))
    return verdict(True, f"t counts every step, up to {longest}", "t counts steps")


@check(
    "line7_amsgrad",
    "Algorithm 1 line 7: b_t = b_hat_t while t <= T0 (always when T0 is not set), b_t = max(b_{t-1}, b_hat_t) "
    "once t > T0",
    "bit-exact on every step of every regime, with the state's own t: T0 = None, 0, 1, 2, 5, 10, 40 (300 steps) and "
    "1000 (1010 steps), and in the sampled settings T0 in {None, 0, 1, a step t, beyond the run} or given anew at "
    "every call; changing gradients make the maximum differ from b_hat",
)
def amsgrad(ctx: Context) -> Outcome:
    wrong, exercised, total = [], 0, 0
    for rec in all_records(ctx):
        T0, t = rec.T0, rec.new.t
        running_max = np.maximum(rec.prev.b, rec.new.b_hat)
        expected = running_max if T0 is not None and t > T0 else rec.new.b_hat
        exercised += int((running_max != rec.new.b_hat).sum()) if T0 is not None and t > T0 else 0
        total += 1
        if not same_bits(rec.new.b.astype(expected.dtype), expected):
            rule = "max(b_prev, b_hat)" if T0 is not None and t > T0 else "b_hat"
            wrong.append(f"{rec.setting.name} (T0={T0}) step {t}: b != {rule}")
    detail = (f"{total} steps; the running maximum differed from b_hat in {exercised} elements"
              if not wrong else "; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else ""))
    return verdict(not wrong, detail, f"{len(wrong)} wrong steps")


def quantize_window(target: Target, y: np.ndarray, u: np.ndarray, window: np.ndarray):
    """Q at y - w, y and y + w (float32): (the value at y, mask of elements where the three disagree)."""
    with np.errstate(all="ignore"):
        outs = [target.run_quantize(np.asarray(y + s * window, np.float32), u) for s in (-1, 0, 1)]
    ambiguous = (outs[0] != outs[1]) | (outs[1] != outs[2])
    return outs[1], ambiguous


def _quantizer_calls(ctx: Context, argument_of, draws_of, output_of, what: str, mask_of) -> Outcome:
    """On every recorded step, ``output_of(record, derived)`` must equal the target's quantize applied to
    ``argument_of(derived)`` (value, window) with ``draws_of(record)``, wherever that is unambiguous."""
    mismatched = ambiguous = total = 0
    first = ""
    for rec in all_records(ctx):
        d = derive(rec)
        value, window = argument_of(d)
        expected, amb = quantize_window(ctx.target, value, draws_of(rec), window)
        mask = mask_of(ctx, d)
        if mask is not None:
            amb = amb & ~mask
            expected = np.where(mask, output_of(rec, d), expected)
        wrong = ~amb & (expected != output_of(rec, d))
        if wrong.any() and not first:
            index = tuple(int(i) for i in np.argwhere(wrong)[0])
            first = (f"; first at {rec.setting.name} step {rec.new.t}, element {index}: argument "
                     f"{value[index]:.9g}, draw {draws_of(rec)[index]:.9g}, output {output_of(rec, d)[index]:g}, "
                     f"quantize gives {expected[index]:g}")
        mismatched += int(wrong.sum())
        ambiguous += int(amb.sum())
        total += expected.size
    ok = mismatched == 0 and ambiguous <= AMBIGUOUS_SHARE * total
    return verdict(ok, f"{mismatched} of {total} {what} differ from quantize with the injected draws, "
                       f"{ambiguous} skipped as within rounding of a change of quantize's output{first}",
                   f"{mismatched} mismatches, {ambiguous} skipped")


def _server_mask(ctx: Context, d):
    mask = eps_mask(ctx, d)
    return None if mask is None else mask.any(axis=0)


@check(
    "line8_worker_quantizer",
    "Algorithm 1 line 8: u_t = Q(m_t/b_t + e_{t-1}) with the worker's draws (Eq. 5)",
    "u recovered from line 9 equals the implementation's quantize(y, u_worker) on every element of every regime",
    needs=("quantize", "init", "step"),
    after=("eq5_probability_exact", "line9_worker_error", "determinism"),
)
def worker_quantizer(ctx: Context) -> Outcome:
    return _quantizer_calls(ctx, lambda d: (d.y, d.y_window), lambda rec: rec.u_worker, lambda rec, d: d.u,
                            "worker outputs", eps_mask)


@check(
    "line12_server_quantizer",
    "Algorithm 1 line 12: u_bar_t = Q((1/n) sum_i u_t^(i) + e_bar_{t-1}) with the server's draws",
    "u_bar equals the implementation's quantize(mean of the workers' u + server error, u_server) on every element",
    needs=("quantize", "init", "step"),
    after=("eq5_probability_exact", "line9_worker_error", "line13_server_error", "determinism",
           "line8_worker_quantizer"),  # a quantizer inside step that breaks line 8 is reported there, once
)
def server_quantizer(ctx: Context) -> Outcome:
    return _quantizer_calls(ctx, lambda d: (d.z, d.z_window), lambda rec: rec.u_server, lambda rec, d: rec.u_bar,
                            "server outputs", _server_mask)


# step_exact_draws: beta = 1/2, |g| = 2^(k+1) at step 1 and 2^k after, so b_hat = 2^k exactly from step 1 on and
# m/b, y = m/b + e, the mean of n = 4 workers' +-1 and z are dyadic with few bits: exact in float32 and float64,
# in any operation order, with eps = 2^-100 (b + eps rounds to b).
EXACT_N, EXACT_T, EXACT_BETA, EXACT_EPS = 4, 12, 0.5, 2.0**-100
EXACT_DS = (48, 45, 1)  # an even length and odd ones: a last element treated apart meets a tie or u = 0 at y = -1
ONE_BELOW = np.float32(1) - np.float32(2.0**-24)


def _exact_gradients(rng: np.random.Generator, t: int, d: int) -> np.ndarray:
    column = np.arange(d)
    k = (column % 5) - 2.0  # b = 2^k, k from -2 to 2
    magnitude = 2.0 ** (k + (1 if t == 1 else 0))
    agree = column % 4 == 0  # every worker the same fixed sign: y = +-1 at every step, sums reach +-n
    fixed = np.where(column % 8 == 0, 1.0, -1.0)
    sign = np.where(agree, fixed, np.where(rng.random((EXACT_N, d)) < 0.5, -1.0, 1.0))
    return (sign * magnitude).astype(np.float32)


def _adversarial(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Draws for exact arguments x: at |x| >= 1, 0 or 1 - 2^-24; inside, the threshold (x + 1)/2 itself, one grid
    step below it, 0 or 1 - 2^-24, in turn."""
    p = ((x + 1) / 2).astype(np.float32)
    choice = rng.integers(0, 4, x.shape)
    inside = np.select([choice == 0, choice == 1, choice == 2],
                       [p, np.maximum(p - np.float32(2.0**-24), 0), np.zeros_like(p)], ONE_BELOW)
    extreme = np.where(rng.random(x.shape) < 0.5, np.float32(0), ONE_BELOW)
    return np.where(np.abs(x) >= 1, extreme, inside).astype(np.float32)


def exact_run(ctx: Context) -> dict:
    """Drive step where y and z are exact, with draws chosen from them; count where its outputs differ from
    sign(x) at |x| >= 1 (Eq. 5 saturated) or from the implementation's quantize(x, u) (lines 8 and 12)."""

    def compute():
        target, rng = ctx.target, np.random.default_rng(31)
        counts = {"worker": 0, "server": 0, "worker_total": 0, "server_total": 0, "saturated": 0, "ties": 0}
        first = ""
        for D, t in ((D, t) for D in EXACT_DS for t in range(1, EXACT_T + 1)):
            if t == 1:
                state = target.run_init(EXACT_N, D)
            prev = read_state(state, EXACT_N, D)
            g = _exact_gradients(rng, t, D).astype(np.float64)
            m = EXACT_BETA * prev.m + (1 - EXACT_BETA) * g
            b_hat = EXACT_BETA * prev.b_hat + (1 - EXACT_BETA) * np.abs(g)
            y = m / b_hat + prev.e  # T0 unset: b = b_hat
            exact = (b_hat == 2.0 ** np.round(np.log2(b_hat))) & (y.astype(np.float32) == y)
            u_worker = _adversarial(rng, y)
            expected_u = np.where(np.abs(y) >= 1, np.sign(y),
                                  target.run_quantize(y.astype(np.float32), u_worker).astype(np.float64))
            z = expected_u.mean(axis=0) + prev.server_e
            u_server = _adversarial(rng, z)
            expected_bar = np.where(np.abs(z) >= 1, np.sign(z),
                                    target.run_quantize(z.astype(np.float32), u_server).astype(np.float64))
            u_bar, state = target.run_step(state, g.astype(np.float32), EXACT_BETA, EXACT_EPS, u_worker, u_server,
                                           None)
            new = read_state(state, EXACT_N, D)
            with np.errstate(all="ignore"):
                got_u = np.where(y - new.e >= 0, 1.0, -1.0)  # line 9 at an exact y: e = y - u
            wrong_u = exact & (got_u != expected_u)
            server_exact = exact.all(axis=0) & (z.astype(np.float32) == z) & ~(got_u != expected_u).any(axis=0)
            wrong_bar = server_exact & (u_bar != expected_bar)
            counts["worker"] += int(wrong_u.sum())
            counts["server"] += int(wrong_bar.sum())
            counts["worker_total"] += int(exact.sum())
            counts["server_total"] += int(server_exact.sum())
            counts["saturated"] += int((exact & (np.abs(y) >= 1)).sum() + (server_exact & (np.abs(z) >= 1)).sum())
            counts["ties"] += int((exact & (u_worker == ((y + 1) / 2))).sum())
            if not first and (wrong_u.any() or wrong_bar.any()):
                if wrong_u.any():
                    i, j = np.argwhere(wrong_u)[0]
                    x, u, got, want = y[i, j], u_worker[i, j], got_u[i, j], expected_u[i, j]
                    where = f"line 8, worker {i}"
                else:
                    j = int(np.argwhere(wrong_bar)[0][0])
                    x, u, got, want = z[j], u_server[j], u_bar[j], expected_bar[j]
                    where = "line 12, server"
                rule = ("Eq. 5 gives sign(y) (p = 0 or 1)" if abs(x) >= 1
                        else "the implementation's own quantize(y, u) gives")
                first = (f"first at d = {D} step {t}, {where}, element {j}: y = {x:.9g}, u = {u:.9g}: step gave "
                         f"{got:+g} where {rule} {want:+g}")
        return {**counts, "first": first}

    return ctx.shared("exact_run", compute)


@check(
    "step_exact_draws",
    "Eq. 5 inside step (lines 8 and 12): Q(y) = sign(y) for |y| >= 1 whatever the draw (p = 0 or 1), and step's "
    "outputs are Q of its argument with the injected draw, also with the draw on the threshold",
    f"{EXACT_T} steps, {EXACT_N} workers x d = {', '.join(map(str, EXACT_DS))} (odd lengths: a last element treated "
    "apart): dyadic gradients with beta = 1/2, eps = 2^-100, so y and z "
    "are exact; draws u = 0 and 1 - 2^-24 at |y| = 1, u = (y + 1)/2 and one grid step below inside; no window",
    needs=("quantize", "init", "step"),
    after=("eq5_saturation", "line5_6_moments", "line9_worker_error", "line8_worker_quantizer",
           "line12_server_quantizer"),
)
def exact_draws(ctx: Context) -> Outcome:
    run = exact_run(ctx)
    ok = run["worker"] == 0 and run["server"] == 0 and run["worker_total"] > 0
    detail = (f"{run['worker']} of {run['worker_total']} worker outputs and {run['server']} of {run['server_total']} "
              f"server outputs at exact arguments differ ({run['saturated']} saturated, {run['ties']} draws on the "
              "threshold)" + (f"; {run['first']}" if run["first"] else ""))
    return verdict(ok, detail, f"{run['worker']} + {run['server']} wrong")


@check(
    "determinism",
    "Algorithm 1 with injected draws is a function: the same state, gradients and draws give the same u_bar and "
    "state; the input state and arrays are left unchanged",
    "each of 8 steps called twice on the same state object and once on a twin state (its own init, fed the same "
    "inputs: no copy of the state is assumed possible); quantize called twice",
    needs=("quantize", "init", "step"),
    kind="contract",
    after=("contract_purity",),
)
def determinism(ctx: Context) -> Outcome:
    target, setting = ctx.target, SETTINGS[0]
    n, d = 2, 16
    rng = np.random.default_rng(99)
    y = rng.uniform(-1.5, 1.5, (n, d)).astype(np.float32)
    u = rng.random((n, d), dtype=np.float32)
    y_in, u_in = y.copy(), u.copy()
    if not same_bits(target.run_quantize(y_in, u_in), target.run_quantize(y_in, u_in)):
        return verdict(False, "quantize gave two different outputs for the same (y, u)")
    if not (same_bits(y_in, y) and same_bits(u_in, u)):
        return verdict(False, "quantize modified its inputs")
    state, twin = target.run_init(n, d), target.run_init(n, d)  # the twin: its own init, fed the same inputs
    for t in range(1, 9):
        grads = gradients(setting, rng, t)[:n, :d].copy()
        u_worker, u_server = draws(rng, n, d)
        inputs = (grads, u_worker, u_server)
        saved = tuple(a.copy() for a in inputs)
        before = read_state(state, n, d)
        calls, returned = [], []
        for s in (state, state, twin):
            u_bar, new = target.run_step(s, grads, setting.beta, setting.eps, u_worker, u_server, 2)
            calls.append((u_bar, read_state(new, n, d)))
            returned.append(new)
            changed = read_state(state, n, d).equals(before)
            if changed:
                return verdict(False, f"step {t} modified its input state (fields {', '.join(changed)})")
            if not all(same_bits(a, b) for a, b in zip(inputs, saved, strict=True)):
                return verdict(False, f"step {t} modified its gradients or draws")
        for u_bar, view in calls[1:]:
            if not same_bits(u_bar, calls[0][0]) or view.equals(calls[0][1]):
                return verdict(False, f"step {t}: the same state, gradients and draws gave different outputs")
        state, twin = returned[0], returned[2]
    return verdict(True, "8 steps x 3 calls identical bit for bit; inputs unchanged", "identical")
