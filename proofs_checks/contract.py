"""Clauses of the interface, not claims of the paper: dtypes, purity, aliasing, the eps convention, and float32
|m| <= b. They are reported in their own group (``kind="contract"``), so that a user reads "your u_bar is
float64" and not a paper claim failing.

The interface (docs/check_interface.md, `birder check --help`): float32 arrays; ``step`` returns a new state and leaves
the one it was given as it was; what it returns stays valid after later calls (no buffer reused); r = m / (b + eps)
with eps added to b (the paper's footnote 5 bounds b away from zero; adding eps is the convention); m and b
computed with the same operations in the same order, so that |m| <= b holds bit for bit in float32.
"""

from __future__ import annotations

import numpy as np

from proofs_checks.bounds import hunt, ratio_excess, sweep
from proofs_checks.identities import RATIO_SLACK, eps_convention
from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import ImplError
from proofs_checks.trajectories import SPACE, all_records, trajectories

FLOAT32 = "float32"


SHAPE_WORDS = ("shape", "cannot read", "no field", "state field t", "expected the pair")


@check(
    "contract_shapes",
    "Interface: step returns (u_bar, state) with u_bar of shape (d,), m, b_hat, b, e of shape (n, d), server_e of "
    "shape (d,) and an integer t, readable by attribute or key, at every size",
    f"every recorded step of the {SPACE}",
    kind="contract",
)
def shapes(ctx: Context) -> Outcome:
    try:
        runs = trajectories(ctx)
    except ImplError as error:
        if any(word in str(error) for word in SHAPE_WORDS):
            raise
        return Outcome("blocked", f"not judged: {error} (reported by the next check that drives step)")
    steps = sum(len(run) for run in runs)
    return verdict(True, f"u_bar and the state had the interface's shapes on all {steps} recorded steps", "shapes")


@check(
    "contract_dtypes",
    "Interface: u_bar, m, b_hat, b, e and server_e are float32 arrays (as quantize's output), t an integer",
    "the dtype of every returned array on every recorded step of every regime and sampled setting, and of "
    "quantize's output",
    kind="contract",
)
def dtypes(ctx: Context) -> Outcome:
    wrong = {}
    for rec in all_records(ctx):
        for name, dtype in rec.dtypes:
            if name == "t":
                if not ("int" in dtype and "float" not in dtype):
                    wrong.setdefault("t", dtype)
            elif dtype != FLOAT32:
                wrong.setdefault(name, dtype)
    q = ctx.target.run_quantize(np.zeros(4, np.float32), np.full(4, 0.5, np.float32))
    if q.dtype != np.float32:
        wrong.setdefault("quantize output", str(q.dtype))
    if wrong:
        return verdict(False, "; ".join(f"{name} is {dtype}" for name, dtype in wrong.items())
                       + " (the interface is float32 arrays and an integer t)", "wrong dtype")
    return verdict(True, "u_bar, the state's arrays and quantize's output are float32; t is an integer", "float32")


@check(
    "contract_purity",
    "Interface: step returns a new state and leaves the state it was given unchanged, at every size",
    "the input state, gradients and draws re-read after every recorded step of every regime (up to 4099 x 5 and "
    "2 x 70001 elements)",
    kind="contract",
)
def purity(ctx: Context) -> Outcome:
    for rec in all_records(ctx):
        if rec.inputs_changed:
            return verdict(False, f"step modified its {', '.join(rec.inputs_changed)} at {rec.setting.name} step "
                                  f"{rec.new.t}: the caller's arrays are read-only to it", "modified its inputs")
        if rec.input_changed:
            s = rec.setting
            return verdict(False, f"step modified the state it was given (fields {', '.join(rec.input_changed)}) at "
                                  f"{s.name} step {rec.new.t} (n x d = {s.n} x {s.d} = {s.n * s.d} elements): return "
                                  "a new state instead of updating in place", "modified in place")
        if rec.replayed:
            step, fields = rec.replayed
            return verdict(False, f"the state of {rec.setting.name} step {step}, stepped again with the same inputs "
                                  f"after later calls, gave another {', '.join(fields)}: step must be a function of "
                                  "its arguments (no memo by object, no state kept between calls)", "not a function")
    return verdict(True, f"the input state was unchanged after all {len(all_records(ctx))} recorded steps",
                   "unchanged")


@check(
    "contract_aliasing",
    "Interface: what step returns stays valid: the u_bar of one call and a state already passed on are not "
    "overwritten by later calls (no reused output buffer)",
    "after every recorded step, the previous call's u_bar and the state returned two calls before are re-read, and "
    "at the end of every trajectory (up to 1010 calls) every u_bar and state it returned, each compared with a copy "
    "taken when it was returned",
    kind="contract",
    after=("contract_purity",),
)
def aliasing(ctx: Context) -> Outcome:
    for rec in all_records(ctx):
        s = rec.setting
        if rec.earlier_changed:
            return verdict(False, f"{len(rec.earlier_changed)} outputs returned earlier changed by the end of {s.name} "
                                  f"({rec.new.t} calls; first: {', '.join(rec.earlier_changed[:3])}): step reuses "
                                  "buffers it returned (a ring); return new arrays", "earlier output overwritten")
        if rec.previous_u_bar_changed:
            return verdict(False, f"the u_bar returned by step {rec.new.t - 1} changed during step {rec.new.t} "
                                  f"({s.name}, d = {s.d}): u_bar is a buffer step reuses; return a new array",
                           "u_bar overwritten")
        if rec.older_changed:
            return verdict(False, f"a state returned earlier changed during step {rec.new.t} ({s.name}; fields "
                                  f"{', '.join(rec.older_changed)}): step writes into buffers it returned before",
                           "state overwritten")
    return verdict(True, "no returned u_bar or state changed during later calls", "no aliasing")


@check(
    "contract_eps_convention",
    "Interface: r = m / (b + eps), eps added to b (the paper's m/b with footnote 5's b >= rho > 0 made safe)",
    "line 9's residual with r = m / (b + eps) on the elements where b < 2^22 eps, the only ones where the "
    "convention matters (there m / max(b, eps) or m / b differ by more than rounding; m / b gives 0 / 0 = NaN at "
    "b = 0), and where such a step left a non-finite error; tolerance 2^-20",
    kind="contract",
)
def eps_clause(ctx: Context) -> Outcome:
    found = eps_convention(ctx)
    if found["plain"]:
        broken = found["plain"] + found["sensitive"]
        name, count = max(found["fits_all"].items(), key=lambda item: item[1])
        if count == broken:
            return verdict(False, f"r is not m / (b + eps): all {broken} elements that break line 9 (also where b >= "
                                  f"2^22 eps) fit r = {name}", "r != m / (b + eps)")
        return Outcome("blocked", "not judged: line 9 fails also where eps plays no part (line9_worker_error)")
    if found["sensitive"]:
        name, count = max(found["fits"].items(), key=lambda item: item[1])
        share = count / found["sensitive"]
        cause = (f"; {'all' if share == 1 else f'{share:.0%}'} of them fit r = {name}" if share >= 0.9 else "")
        return verdict(False, f"r is not m / (b + eps): {found['sensitive']} of {found['sensitive_total']} elements "
                              f"with b < 2^22 eps break line 9 with r = m / (b + eps){cause}; {found['first']}",
                       "r != m / (b + eps)")
    return verdict(True, f"r = m / (b + eps) on all {found['sensitive_total']} elements where eps matters",
                   f"{found['sensitive_total']} elements")


def _ulps(excess: float, b: float) -> float:
    return excess / float(np.spacing(np.float32(max(b, np.finfo(np.float32).tiny))))


@check(
    "contract_float32_ratio",
    "Interface: |m| <= b and |m| <= b_hat bit for bit in float32, which holds when lines 5 and 6 are computed with "
    "the same operations in the same order (beta * m + (1 - beta) * g beside beta * b_hat + (1 - beta) * |g|); "
    "another order (a lerp x + (1 - beta)(g - x), an FMA) may exceed it by a few ulp, which is accepted: it moves "
    "m/(b + eps) by rounding only, and Q saturates above 1",
    "every stored state of the ratio sweep and the trajectories, no tolerance, and Hypothesis find (derandomized); "
    f"an excess within {RATIO_SLACK:.3g} relative is reported, a larger one fails ratio_bound",
    kind="contract",
    after=("ratio_bound",),
)
def float32_ratio(ctx: Context) -> Outcome:
    swept = sweep(ctx)
    worst, where, count = swept["excess"], swept["where"], swept["count"]
    worst_ulps = swept["ulps"]
    for rec in all_records(ctx):
        excess, ulps, n_over = ratio_excess(rec.new)
        count += n_over
        if excess > worst:
            worst, where = excess, f"{rec.setting.name} step {rec.new.t}"
        worst_ulps = max(worst_ulps, ulps)
    found = None
    if count == 0:
        try:
            found = hunt(ctx.target, relative=0.0)
        except ImportError:
            found = None
    if count == 0 and not found:
        return verdict(True, "|m| <= b and |m| <= b_hat bit for bit on every stored state (sweep, trajectories, "
                             "Hypothesis)", "|m| <= b")
    example = f"{count} stored elements, up to {worst_ulps:.0f} ulp at {where}" if count else f"Hypothesis: {found}"
    return verdict(True, f"accepted: |m| > b by a last ulp ({example}): lines 5 and 6 do not use the same operations "
                         "in the same order (a lerp or fused form rounds differently); the excess is rounding, within "
                         f"{RATIO_SLACK:.3g} relative, and Q saturates above 1", f"|m| > b by <= {worst_ulps:.0f} ulp")
