"""Clauses of the interface about how step is called and how its results are read, each checked over a sample of
settings by comparing the implementation with itself (never with another implementation):

- ``contract_calls``: a positional call step(state, grads, beta, eps, u_worker, u_server, T0) gives what the keyword
  call gives (where the signature takes them positionally: keyword-only parameters and ``**kwargs`` are accepted
  conventions), and a state readable both by attribute and by key gives the same fields both ways;
- ``contract_input_layouts``: Fortran-ordered, strided, sliced (offset views), reversed (negative strides) and
  read-only gradients and draws give bit for bit what C-contiguous copies of them give;
- ``contract_two_states``: states driven interleaved (two of one shape and one of another, alive at once) give bit
  for bit what each gives driven alone from its own init.
"""

from __future__ import annotations

import inspect

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import ARRAY_FIELDS, ImplError, StateView, read_state, same_bits, to_numpy
from proofs_checks.trajectories import SMALLEST_NORMAL, draws

# (n, d, beta, eps, T0 per step): small sizes and odd lengths, the beta and eps extremes, T0 off, on and switching.
CASES = (
    (1, 1, 0.999999, SMALLEST_NORMAL, (None, None, None, None)),
    (3, 7, 0.3, 1e-8, (0, 0, 0, 0)),
    (5, 33, 0.9, 1e-12, (1, 1, 2, 10**6)),
    (2, 65, 1e-6, 1e-8, (None, 0, 1, 3)),
)
POSITIONAL = ("beta", "eps", "u_worker", "u_server", "T0")


def case_gradients(rng: np.random.Generator, n: int, d: int, t: int) -> np.ndarray:
    """Magnitudes 1e-40 .. 1e30 by column, random signs, one idle worker (zero row) every third step."""
    magnitude = 10.0 ** np.resize(np.array([-40.0, -8, 0, 3, 30, -1]), d)
    g = (magnitude * rng.standard_normal((n, d))).astype(np.float32)
    if t % 3 == 0:
        g[t % n] = 0.0
    return g


def positional_problem(step) -> str | None:
    """Why step cannot be called positionally (keyword-only parameters: an accepted convention), or None."""
    try:
        signature = inspect.signature(step)
    except (TypeError, ValueError):
        return None  # not inspectable: tried
    try:
        signature.bind(None, None, *([None] * len(POSITIONAL)))
    except TypeError:
        return f"step{signature} takes them by keyword only"
    return None


def _signature(step) -> str:
    try:
        return f"step{inspect.signature(step)}"
    except (TypeError, ValueError):
        return "step"


def _differ(u_bar: np.ndarray, view: StateView, want_u_bar: np.ndarray, want: StateView) -> list[str]:
    return (["u_bar"] if not same_bits(u_bar, want_u_bar) else []) + want.equals(view)


def _both_ways(state) -> list[str]:
    """Fields a state offers both by attribute and by key whose two readings differ."""
    differ = []
    for name in (*ARRAY_FIELDS, "t"):
        try:
            by_attribute, by_key = getattr(state, name), state[name]
        except (AttributeError, KeyError, TypeError, IndexError):
            continue
        a, b = to_numpy(by_attribute), to_numpy(by_key)
        if not (a.shape == b.shape and np.array_equal(a, b, equal_nan=True)):
            differ.append(name)
    return differ


@check(
    "contract_calls",
    "Interface: step(state, grads, beta, eps, u_worker, u_server, T0) called positionally equals the keyword call "
    "step(state, grads, beta=, eps=, u_worker=, u_server=, T0=); a state offering its fields both by attribute and "
    "by key gives the same values both ways",
    f"{len(CASES)} sampled cases (n 1..5, d 1..65, beta 1e-6..0.999999, eps down to the smallest normal float32, T0 "
    "off, on and switching between calls) x 4 steps: u_bar and state bit for bit; every field of every state "
    "read both ways; keyword-only signatures are accepted",
    kind="contract",
    after=("contract_shapes", "determinism"),  # a step that keeps state between calls differs from itself anyway
)
def calls(ctx: Context) -> Outcome:
    target = ctx.target
    keyword_only = positional_problem(target.step)
    steps = 0
    for k, (n, d, beta, eps, T0s) in enumerate(CASES):
        rng = np.random.default_rng(500 + k)
        state = target.run_init(n, d)
        for t, T0 in enumerate(T0s, start=1):
            grads = case_gradients(rng, n, d, t)
            u_worker, u_server = draws(rng, n, d)
            if t == 1 and _both_ways(state):
                return verdict(False, f"the state from init({n}, {d}) gives other {', '.join(_both_ways(state))} "
                                      "by key than by attribute", "attribute != key")
            u_bar, new = target.run_step(state, grads, beta, eps, u_worker, u_server, T0)
            want = read_state(new, n, d)
            differ = _both_ways(new)
            if differ:
                return verdict(False, f"after step {t} (n = {n}, d = {d}) the state gives other {', '.join(differ)} "
                                      "by key than by attribute: a user reading state['e'] gets another state than "
                                      "one reading state.e", "attribute != key")
            if keyword_only is None:
                try:
                    out = target.step(state, grads, beta, eps, u_worker, u_server, T0)
                    got_u_bar, got = to_numpy(out[0]), read_state(out[1], n, d)
                except Exception as error:  # the positional call itself fails (an ImplError from reading it too)
                    return verdict(False, f"the positional call step(state, grads, beta, eps, u_worker, u_server, T0) "
                                          f"raised {type(error).__name__}: {error} where the keyword call works "
                                          f"({_signature(target.step)})", "positional call fails")
                differ = _differ(got_u_bar, got, u_bar, want)
                if differ:
                    return verdict(False, f"step(state, grads, beta, eps, u_worker, u_server, T0) positionally gives "
                                          f"other {', '.join(differ)} than the keyword call (n = {n}, d = {d}, step "
                                          f"{t}): {_signature(target.step)} does not take its arguments in the "
                                          "interface's order", "positional != keyword")
            state, steps = new, steps + 1
    how = f"positional calls not offered ({keyword_only}): accepted" if keyword_only else \
        "positional and keyword calls agree bit for bit"
    return verdict(True, f"{steps} steps: {how}; fields read by attribute and by key agree", "calls agree")


def layouts(a: np.ndarray) -> dict[str, np.ndarray]:
    """The same values as ``a`` in other memory layouts, each a view the implementation must read correctly."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
    wide[..., 1::2] = a
    padded = np.zeros(tuple(s + 2 for s in a.shape), a.dtype)
    padded[(slice(1, -1),) * a.ndim] = a
    reversed_ = np.ascontiguousarray(a[(slice(None, None, -1),) * a.ndim])[(slice(None, None, -1),) * a.ndim]
    read_only = a.copy()
    read_only.flags.writeable = False
    return {"Fortran-ordered": np.asfortranarray(a), "strided (every other element)": wide[..., 1::2],
            "sliced (an offset view)": padded[(slice(1, -1),) * a.ndim], "reversed (negative strides)": reversed_,
            "read-only": read_only}


def layouts_run(ctx: Context) -> dict:
    """Every layout of ``layouts`` through step and quantize against C-contiguous copies: the first refusal (an
    error raised for a layout), the first different result, and how many calls agreed."""

    def compute():
        target, found = ctx.target, {"refused": "", "differs": "", "compared": 0}
        for k, (n, d, beta, eps, T0s) in enumerate(CASES):
            rng = np.random.default_rng(600 + k)
            state = target.run_init(n, d)
            for t, T0 in enumerate(T0s[:3], start=1):
                grads = case_gradients(rng, n, d, t)
                u_worker, u_server = draws(rng, n, d)
                u_bar, new = target.run_step(state, grads.copy(), beta, eps, u_worker.copy(), u_server.copy(), T0)
                want = read_state(new, n, d)
                variants = [layouts(a) for a in (grads, u_worker, u_server)]
                for name in variants[0]:
                    given = [v[name] for v in variants]
                    try:
                        got_u_bar, got = target.run_step(state, *given[:1], beta, eps, *given[1:], T0)
                        differ = _differ(got_u_bar, read_state(got, n, d), u_bar, want)
                    except ImplError as error:
                        found["refused"] = found["refused"] or f"{name} inputs (n = {n}, d = {d}): {error}"
                        continue
                    if differ and not found["differs"]:
                        found["differs"] = (f"{name} gradients and draws give other {', '.join(differ)} than "
                                            f"C-contiguous copies of the same values (n = {n}, d = {d}, step {t}): "
                                            "step reads the memory, not the array")
                    found["compared"] += not differ
                state = new
            y = (rng.uniform(-1.5, 1.5, (n, d))).astype(np.float32)
            u = rng.random((n, d), dtype=np.float32)
            want_q = target.run_quantize(y.copy(), u.copy())
            for (name, y_view), u_view in zip(layouts(y).items(), layouts(u).values(), strict=True):
                try:
                    q = target.run_quantize(y_view, u_view)
                except ImplError as error:
                    found["refused"] = found["refused"] or f"quantize with {name} inputs ({n} x {d}): {error}"
                    continue
                if not same_bits(q, want_q) and not found["differs"]:
                    found["differs"] = (f"quantize gives other outputs for {name} y and u than for C-contiguous "
                                        f"copies ({n} x {d}): it reads the memory, not the array")
                found["compared"] += same_bits(q, want_q)
        return found

    return ctx.shared("layouts", compute)


@check(
    "contract_input_layouts",
    "Interface (robustness): step and quantize accept any float32 array the caller passes: Fortran-ordered, "
    "strided, sliced, reversed or read-only gradients and draws are read, not refused",
    f"{len(CASES)} sampled cases x 3 steps x 5 layouts of grads, u_worker and u_server together, and quantize's y "
    "and u in the same 5 layouts; a warning when one is refused with an error (the algorithm is not in question)",
    kind="contract",
    after=("contract_shapes", "contract_purity"),
    severity="warning",
)
def input_layouts(ctx: Context) -> Outcome:
    found = layouts_run(ctx)
    if found["refused"]:
        return verdict(False, f"refused: {found['refused']}; copy such inputs (numpy.ascontiguousarray) before "
                              "handing them on", "layout refused")
    return verdict(True, f"{found['compared']} calls of step and quantize with Fortran-ordered, strided, sliced, "
                         "reversed and read-only inputs were read", "layouts read")


@check(
    "contract_layouts_same_result",
    "Interface: an input layout never changes the result: Fortran-ordered, strided, sliced, reversed or read-only "
    "gradients and draws give bit for bit the u_bar and state (and quantize the output) of C-contiguous ones",
    "the calls of contract_input_layouts that were not refused, each against the call with C-contiguous copies",
    kind="contract",
    after=("contract_shapes", "contract_purity", "determinism"),
)
def layouts_same_result(ctx: Context) -> Outcome:
    found = layouts_run(ctx)
    if found["differs"]:
        return verdict(False, found["differs"], "layout changes the result")
    return verdict(True, f"{found['compared']} calls with other layouts equal the C-contiguous calls", "layouts agree")


TWO_STATES = ((3, 9), (3, 9), (2, 5))  # two of one shape, one of another
# which state steps at each call: the states run at staggered step counts, so one may be given a t another has just
# reached
SCHEDULE = (1, 0, 1, 0, 2, 0, 1, 2, 2, 0, 1, 1, 2, 0, 0, 1)


@check(
    "contract_two_states",
    "Interface: the state is all step depends on: several states alive at once, driven interleaved, each give what "
    "they give alone",
    "two states of one shape and one of another (n x d = 3 x 9, 3 x 9, 2 x 5) stepped in a staggered order (16 "
    "calls, each state at its own t), with their own gradients and draws, T0 = 2; each compared step by step with the "
    "same state driven alone, bit for bit",
    kind="contract",
    after=("contract_shapes", "determinism"),
)
def two_states(ctx: Context) -> Outcome:
    target = ctx.target
    rng = np.random.default_rng(700)
    inputs = [[(case_gradients(rng, n, d, t), *draws(rng, n, d)) for t in range(1, 8)] for n, d in TWO_STATES]

    def alone(i: int) -> list:
        n, d = TWO_STATES[i]
        state, out = target.run_init(n, d), []
        for grads, u_worker, u_server in inputs[i][:SCHEDULE.count(i)]:
            u_bar, state = target.run_step(state, grads, 0.9, 1e-8, u_worker, u_server, 2)
            out.append((u_bar, read_state(state, n, d)))
        return out

    expected = [alone(i) for i in range(len(TWO_STATES))]
    states = [target.run_init(n, d) for n, d in TWO_STATES]
    taken = [0] * len(TWO_STATES)
    for i in SCHEDULE:
        (n, d), t = TWO_STATES[i], taken[i]
        grads, u_worker, u_server = inputs[i][t]
        u_bar, states[i] = target.run_step(states[i], grads, 0.9, 1e-8, u_worker, u_server, 2)
        taken[i] += 1
        differ = _differ(u_bar, read_state(states[i], n, d), *expected[i][t])
        if differ:
            return verdict(False, f"state {i} ({n} x {d}) driven interleaved with {len(TWO_STATES) - 1} other states "
                                  f"gives other {', '.join(differ)} at its step {t + 1} than driven alone: step "
                                  "carries something from one state to another", "states interfere")
    return verdict(True, f"{len(TWO_STATES)} states interleaved over {len(SCHEDULE)} calls equal each driven alone",
                   "independent")
