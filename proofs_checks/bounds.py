"""Bounds: |m/b| <= 1 (Eq. 4), the error bounds error feedback keeps, and how often Lemma 1's premise |y| <= 1
fails along real trajectories.

The paper states |m/b| <= 1 "rigorously", in exact arithmetic. ``ratio_bound`` holds the stored state to it up to
the rounding of lines 5-6 (|m| <= b (1 + 2^-16)): an implementation with a wrong denominator is off by far more.
Bit for bit in float32 (|m| <= b, no tolerance) it holds when line 5 and line 6 round the same way, i.e. m and b
are computed with the same operations in the same order (beta * m + (1 - beta) * g beside beta * b + (1 - beta)
|g|); a lerp m + (1 - beta)(g - m) gets |m| > b by a few ulp at times (``mutants.LerpMomentum``; g = 3 for 14
steps at beta = 0.9). That is the interface's clause ``contract_float32_ratio``, which reports such an excess and
accepts it: correct in the paper's sense, it moves m/(b + eps) by rounding only.

Error bounds, derived for this Algorithm 1. Suppose |r| = |m/(b+eps)| <= 1 and |e_{t-1}| <= 2, so
y = r + e_{t-1} lies in [-3, 3]. If y > 1, Q(y) = +1 and e_t = y - 1 lies in (0, 2]; if y < -1, e_t = y + 1 lies in
[-2, 0); if |y| <= 1, e_t = y -+ 1 lies in [-2, 2]. With e_0 = 0, |e_t| <= 2 for all t, and the same argument
with the mean of +-1 values (|.| <= 1) in place of r gives |e_bar_t| <= 2. Rounding is monotone, so the bounds
hold exactly in floating point too.
"""

from __future__ import annotations

import numpy as np

from proofs_checks.identities import ORDER_ROUNDING, RATIO_SLACK, derive, largest_abs
from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import ImplError, Target, read_state
from proofs_checks.theorem import theorem_run
from proofs_checks.trajectories import all_records, judged_trajectories

SWEEP_BETAS = (0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1 / 3, 0.7, 0.123456789, 0.999999, 0.8, 0.875, 0.3, 0.6)
SWEEP_STEPS = 40
SWEEP_MAGNITUDES = (3.0, 1.0, 0.1, 7.0, 1e-3, 1e30, 1e-30, 1e-45, 123.456, 2.0**-20, 0.3, 5.0, 9.99, 1e7, 6e-8,
                    65504.0)
HUNT_EXAMPLES = 120
ALIKE_COLUMNS = len(SWEEP_MAGNITUDES)  # the sweep's first family: each column one constant positive gradient
# Lines 5 and 6 fed alike (g = |g| > 0 from the zero state) in two float32 orders of the one formula: each step's
# result within 4 ulps (ORDER_ROUNDING) on either line, positive terms (no cancellation), the earlier steps' gaps
# carried by a weighted mean (never grown): at most 2 x 4 ulps a step over the sweep's steps
ALIKE_SLACK = 2 * ORDER_ROUNDING * SWEEP_STEPS


def sweep_gradients(rng: np.random.Generator, t: int, d: int) -> np.ndarray:
    """Two workers x d columns: constant magnitudes (the classic lerp counterexample g = 3 with beta = 0.9 among
    them), alternating and random signs at those magnitudes, log-uniform magnitudes over 1e-30..1e30, zeros."""
    mags = np.resize(np.array(SWEEP_MAGNITUDES), d)
    family = (np.arange(d) // len(SWEEP_MAGNITUDES)) % 4
    alternating = (-1.0) ** (t + np.arange(d))
    random_sign = np.where(rng.random((2, d)) < 0.5, -1.0, 1.0)
    wild = 10.0 ** rng.uniform(-30, 30, (2, d)) * random_sign
    g = np.select([family == 0, family == 1, family == 2], [np.broadcast_to(mags, (2, d)), mags * alternating,
                                                            mags * random_sign], wild)
    g[:, -1] = 0.0 if t % 3 else g[:, -1]
    return g.astype(np.float32)


def ratio_excess(view) -> tuple[float, float, int]:
    """(max of (|m| - b) / b and (|m| - b_hat) / b_hat, max excess in ulp of b, count of elements with |m| > b or
    |m| > b_hat) in the stored precision; NaN counts as an infinite excess."""
    m = np.abs(view.m).astype(np.float64)
    worst, ulps, count = -np.inf, 0.0, 0
    for b in (view.b.astype(np.float64), view.b_hat.astype(np.float64)):
        with np.errstate(all="ignore"):
            excess = m - b
            over = ~(excess <= 0)
            relative = np.where(over, excess / np.maximum(b, np.finfo(np.float32).tiny), excess)
            spacing = np.spacing(np.maximum(b, np.finfo(np.float32).tiny).astype(np.float32)).astype(np.float64)
        if np.isnan(relative).any():
            return float("inf"), float("inf"), int(over.sum())
        worst = max(worst, float(relative.max(initial=-np.inf)))
        count += int(over.sum())
        if over.any():
            ulps = max(ulps, float((excess[over] / spacing[over]).max()))
    return worst, ulps, count


def run_sequence(target: Target, grads: np.ndarray, beta: float, T0, eps: float = 1e-8, seed: int = 0):
    """Feed grads (T, n, d) to a fresh state with seeded draws; return the state after each step."""
    T, n, d = grads.shape
    rng = np.random.default_rng(seed)
    state = target.run_init(n, d)
    views = []
    for t in range(T):
        _, state = target.run_step(state, np.ascontiguousarray(grads[t]), beta, eps,
                                       rng.random((n, d), dtype=np.float32), rng.random(d, dtype=np.float32), T0)
        views.append(read_state(state, n, d))
    return views


def alike_gap(view, columns: int) -> float:
    """The largest relative gap between |m| and b_hat over the first ``columns`` columns (where b_hat is a normal
    float32; below, both are rounding of nothing)."""
    m, b = np.abs(view.m[:, :columns]).astype(np.float64), view.b_hat[:, :columns].astype(np.float64)
    normal = b >= np.finfo(np.float32).tiny
    with np.errstate(all="ignore"):
        gap = np.where(normal, np.abs(m - b) / np.where(normal, b, 1.0), 0.0)
    return float("inf") if np.isnan(gap).any() else float(gap.max(initial=0.0))


def sweep(ctx: Context) -> dict:
    """The seeded sweep, once per context: worst ratio excess, worst |e| and |e_bar|, the widest gap between |m|
    and b_hat on the columns of one constant positive gradient (``ALIKE_COLUMNS``), and where."""

    def compute():
        worst, where, e_max, server_max, count, ulps = -np.inf, "", 0.0, 0.0, 0, 0.0
        gap, gap_where = 0.0, ""
        d = 4 * len(SWEEP_MAGNITUDES) + 1
        for i, beta in enumerate(SWEEP_BETAS):
            rng = np.random.default_rng(100 + i)
            grads = np.stack([sweep_gradients(rng, t, d) for t in range(1, SWEEP_STEPS + 1)])
            T0 = (None, 0, SWEEP_STEPS // 2)[i % 3]
            for t, view in enumerate(run_sequence(ctx.target, grads, beta, T0, seed=i), start=1):
                excess, view_ulps, over = ratio_excess(view)
                count += over
                ulps = max(ulps, view_ulps)
                if excess > worst:
                    worst, where = excess, f"beta={beta:.9g}, T0={T0}, step {t}"
                e_max = max(e_max, largest_abs(view.e))
                server_max = max(server_max, largest_abs(view.server_e))
                view_gap = alike_gap(view, ALIKE_COLUMNS)
                if view_gap > gap:
                    gap, gap_where = view_gap, f"beta={beta:.9g}, step {t}"
        return {"excess": worst, "where": where, "e": e_max, "server_e": server_max, "count": count, "ulps": ulps,
                "gap": gap, "gap_where": gap_where}

    return ctx.shared("ratio_sweep", compute)


def hunt(target: Target, relative: float = 0.0) -> str | None:
    """Hypothesis ``find`` (derandomized, at most HUNT_EXAMPLES examples): the smallest gradient sequence after
    which |m| > b (1 + relative) or |m| > b_hat (1 + relative), or None when it finds none. Hypothesis is imported
    here: it is a test extra, and without it ``ratio_bound`` says it ran the sweep alone (ImportError)."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis import strategies as st
    from hypothesis.errors import NoSuchExample
    from hypothesis.extra.numpy import arrays

    @st.composite
    def gradient_sequences(draw):
        n, d, T = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 12))
        beta = draw(st.one_of(st.sampled_from(SWEEP_BETAS), st.floats(0.01, 0.999)))
        T0 = draw(st.one_of(st.none(), st.integers(0, 12)))
        limit = float(np.float32(1e30))  # a float32-exact bound (Hypothesis rejects others at width=32)
        elements = st.floats(-limit, limit, width=32, allow_nan=False, allow_infinity=False)
        return draw(arrays(np.float32, (T, n, d), elements=elements, fill=st.nothing())), beta, T0

    errors = []

    def violates(example) -> bool:
        grads, beta, T0 = example
        try:
            return any(ratio_excess(v)[0] > relative for v in run_sequence(target, grads, beta, T0))
        except ImplError as error:
            errors.append(str(error))
            return True

    config = settings(max_examples=HUNT_EXAMPLES, derandomize=True, database=None, deadline=None,
                      phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck))
    try:
        grads, beta, T0 = find(gradient_sequences(), violates, settings=config)
    except NoSuchExample:
        return None
    text = np.array2string(grads, precision=9, separator=",").replace("\n", "")
    return f"beta={beta!r}, T0={T0}, grads (T, n, d) = {text}" + (f"; raised: {errors[-1]}" if errors else "")


@check(
    "ratio_bound",
    "Eq. 4: the elements of m_t and b_t rigorously satisfy -1 <= (m_t)_j / (b_t)_j <= 1 (and so m / b_hat, b >= "
    "b_hat); held on the stored state up to the rounding of lines 5-6, |m| <= b (1 + 2^-16)",
    "every stored state: a seeded sweep (14 betas x 40 steps x 65 columns, magnitudes 1e-45..1e30, T0 off/0/20), "
    f"every regime's trajectory, and Hypothesis find (derandomized, {HUNT_EXAMPLES} sequences, float32 elements up "
    "to 1e30)",
    after=("line5_6_moments", "line7_amsgrad"),
)
def ratio_bound(ctx: Context) -> Outcome:
    swept = sweep(ctx)
    worst, where = swept["excess"], f"sweep {swept['where']}"
    for rec in all_records(ctx):
        excess = ratio_excess(rec.new)[0]
        if excess > worst:
            worst, where = excess, f"{rec.setting.name} step {rec.new.t}"
    if not worst <= RATIO_SLACK:
        return verdict(False, f"|m| exceeds b by {worst:.3g} relative at {where} (rounding allows {RATIO_SLACK:.3g})",
                       f"excess {worst:.3g}")
    try:
        found, searched = hunt(ctx.target, RATIO_SLACK), f"or in {HUNT_EXAMPLES} Hypothesis sequences"
    except ImportError:
        found, searched = None, "(Hypothesis is not installed: the sweep and trajectories alone)"
    if found:
        return verdict(False, f"Hypothesis found |m| > b (1 + {RATIO_SLACK:.3g}): {found}", "violation found")
    return verdict(True, f"|m| <= b (1 + {RATIO_SLACK:.3g}) everywhere (largest (|m| - b)/b = {worst:.3g}) {searched}",
                   "|m| <= b")


@check(
    "line5_6_one_average",
    "Algorithm 1 lines 5-6 take one exponential average, of g and of |g|: where every gradient is positive, b_hat = m "
    "(in exact arithmetic), so that r = m / (b + eps) is the paper's ratio and not a ratio of two averages",
    "the ratio sweep's columns of one constant positive gradient (14 betas up to 0.999999 x 40 steps x 16 "
    "magnitudes 1e-45..1e30) from the zero state: |m - b_hat| / b_hat within what two float32 orders of one formula "
    f"can part by over 40 steps ({ALIKE_SLACK:.3g}; 1 - float32(beta) on one line is 1.3% off at beta = 0.999999)",
    after=("line5_6_moments",),
)
def one_average(ctx: Context) -> Outcome:
    swept = sweep(ctx)
    gap, where = swept["gap"], swept["gap_where"]
    if not gap <= ALIKE_SLACK:
        return verdict(False, f"line 6 does not average |g| as line 5 averages g: for one constant positive gradient "
                              f"b_hat and m part by {gap:.3g} relative at {where} (rounding allows {ALIKE_SLACK:.3g}): "
                              "the two lines use other coefficients (e.g. 1 - float32(beta) on one, float32(1 - beta) "
                              "on the other), which biases r = m / (b + eps)", f"gap {gap:.3g}")
    return verdict(True, f"b_hat = m within {gap:.3g} relative for every constant positive gradient (allowed "
                         f"{ALIKE_SLACK:.3g})", f"gap {gap:.3g}")


ERROR_BOUND = 2 + 2.0**-14  # 2, plus the rounding a last-ulp |m| > b may add over many saturated steps


@check(
    "error_bounds",
    "Error feedback keeps |e_t| <= 2 and |e_bar_t| <= 2 (derived in proofs_checks/bounds.py from |m/b| <= 1 and "
    "line 7-13; Lemma 1's E||e||^2 <= d rests on such a bound)",
    "max |e| and |e_bar| over every regime's trajectory and the ratio sweep; 2 + 2^-14 for rounding",
    after=("eq5_probability_exact", "eq5_saturation", "ratio_bound", "line9_worker_error", "line13_server_error",
           "line8_worker_quantizer", "line12_server_quantizer", "contract_eps_convention"),
)
def error_bounds(ctx: Context) -> Outcome:
    swept = sweep(ctx)
    e = max([swept["e"]] + [largest_abs(r.new.e) for r in all_records(ctx)])
    server = max([swept["server_e"]] + [largest_abs(r.new.server_e) for r in all_records(ctx)])
    ok = e <= ERROR_BOUND and server <= ERROR_BOUND
    return verdict(ok, f"max |e| = {e:.9g}, max |e_bar| = {server:.9g} (bound 2)", f"{e:.4g} / {server:.4g}")


def premise_share(records) -> tuple[float, float]:
    """Shares of worker y = m/(b+eps) + e_prev and server z = mean u + e_bar_prev with |.| > 1."""
    outside_y = outside_z = count_y = count_z = 0
    for rec in records:
        d = derive(rec)
        outside_y += int((np.abs(d.y) > 1).sum())
        outside_z += int((np.abs(d.z) > 1).sum())
        count_y += d.y.size
        count_z += d.z.size
    return outside_y / count_y, outside_z / count_z


@check(
    "premise_frequency",
    "Lemma 1 assumes -1 <= (u_t)_j <= 1, but lines 8 and 12 quantize m/b + e and mean(u) + e_bar, which leave "
    "[-1, 1]; there Q is deterministic and biased (E[Q(y)] = sign(y) != y)",
    "measured (not bounded by the paper): share of |y| > 1 and |z| > 1 along the recorded trajectories and the "
    "Theorem 1 runs",
)
def premise_frequency(ctx: Context) -> Outcome:
    parts = []
    for trajectory in judged_trajectories(ctx):
        y_share, z_share = premise_share(trajectory)
        parts.append(f"{trajectory[0].setting.name} (beta {trajectory[0].setting.beta}): {y_share:.1%} / {z_share:.1%}")
    run = theorem_run(ctx)
    parts.append(f"Theorem 1 run: {run['premise_y']:.1%} / {run['premise_z']:.1%}")
    return Outcome("info", "share of worker y with |y| > 1 / of server z with |z| > 1: " + "; ".join(parts),
                   f"{run['premise_y']:.1%} / {run['premise_z']:.1%} (Theorem 1 run)")
