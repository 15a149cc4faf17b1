"""Section 4 and the other communication schemes: each one computes Algorithm 1 exactly, and the hierarchical
scheme moves the volumes Section 4 states.

These checks need the target's ``schemes`` (``birder_ref.schemes`` for the reference); for an implementation
without schemes they report "n/a". They judge the schemes the target lists in ``schemes.SCHEMES`` (hierarchical
alone, the paper's scheme, when it lists none). Equality is with the target's own ``step``, never with another
implementation, and volumes are judged by Section 4's formulas, never by birder_ref's closed forms or padding.
"""

from __future__ import annotations

import math

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import read_state, same_bits, to_numpy

LAYOUTS = ((2, 2), (3, 2), (2, 4), (1, 3), (3, 1), (4, 2))  # (n_nodes, gpus_per_node)
DIM = 37  # not a multiple of 8 * ranks: padding is exercised
STEPS = 3
VOLUME_DIM = 4099  # the executed volumes: the padding allowed (below) is under 7% of it on every layout
PAD_PER_RANK = 32  # padding allowed: fewer than 32 elements per rank (whole 32-bit words of 1-bit data per rank)
# Section 4's steps (i), (iii) 1), (iii) 2), (iv), by the keys of the target's log.bytes_per_gpu
SECTION4_PHASES = ("intra_reduce_scatter", "inter_all_to_all", "inter_all_gather", "intra_all_gather")


def _not_offered(ctx: Context) -> Outcome | None:
    if ctx.target.schemes is None or not callable(getattr(ctx.target.schemes, "step", None)):
        return Outcome("n/a", "the implementation offers no schemes (an attribute `schemes` with "
                              "step(scheme, state, grads, ...))")
    return None


def scheme_names(ctx: Context) -> tuple[str, ...]:
    """The schemes the target lists (``schemes.SCHEMES``); the paper's hierarchical scheme when it lists none."""
    return tuple(getattr(ctx.target.schemes, "SCHEMES", ("hierarchical",)))


def exact_node_gradients(rng: np.random.Generator, n_nodes: int, gpus_per_node: int, d: int) -> np.ndarray:
    """Gradients (n_nodes, gpus_per_node, d) in steps of 1/64 whose sum over each node's GPUs is a multiple of
    gpus_per_node / 64: every partial sum, in any order, and the node mean are exact in float32."""
    k = rng.integers(-256, 257, (n_nodes, gpus_per_node, d))
    k[:, -1] -= k.sum(axis=1) % gpus_per_node
    return (k / 64).astype(np.float32)


def node_mean(grads: np.ndarray) -> np.ndarray:
    """Section 4 step (i): node k's worker gradient is the mean of its GPUs' gradients, their sum / m.

    Written from the paper here, not imported from ``birder_ref.schemes.worker_gradients``: the check judges any
    implementation's schemes, birder_ref's among them, so what the workers of Algorithm 1 must be fed comes from
    the paper's definition, not from one of the implementations being judged. On ``exact_node_gradients`` it is
    exact, so no summation order or rounding convention of the target is assumed.
    """
    return grads.sum(axis=1, dtype=np.float64).astype(np.float32) / np.float32(grads.shape[1])


@check(
    "schemes_equal_algorithm1",
    "Section 4 / appendix A: the schemes exchange data 'essentially equivalent' to the parameter-server "
    "Algorithm 1, the All-to-All giving 'exactly the average' (not only in expectation): hierarchical = "
    "Algorithm 1 over node means, ps/ring/flat/allgather = Algorithm 1 over GPUs",
    f"bit-exact u_bar and state vs the target's step, {len(LAYOUTS)} layouts x the schemes it lists x {STEPS} "
    f"steps, d = {DIM}, T0 = 1, dyadic gradients with exact node means",
    needs=("init", "step"),
)
def schemes_equal(ctx: Context) -> Outcome:
    missing = _not_offered(ctx)
    if missing:
        return missing
    target, runs, wrong = ctx.target, 0, []
    for scheme in scheme_names(ctx):
        for n_nodes, g in LAYOUTS:
            rng = np.random.default_rng(7 * n_nodes + g)
            n = n_nodes if scheme == "hierarchical" else n_nodes * g
            state = target.run_init(n, DIM)
            for t in range(1, STEPS + 1):
                grads = exact_node_gradients(rng, n_nodes, g, DIM)
                workers = node_mean(grads) if scheme == "hierarchical" else grads.reshape(n, DIM)
                u_worker, u_server = rng.random((n, DIM), dtype=np.float32), rng.random(DIM, dtype=np.float32)
                u_bar, new_state, _ = target.schemes.step(scheme, state, grads, 0.9, 1e-8, u_worker, u_server, 1)
                want_u_bar, want_state = target.run_step(state, workers, 0.9, 1e-8, u_worker, u_server, 1)
                differ = read_state(new_state, n, DIM).equals(read_state(want_state, n, DIM))
                if not same_bits(to_numpy(u_bar), want_u_bar) or differ:
                    wrong.append(f"{scheme} on {n_nodes}x{g} step {t}" + (f" ({', '.join(differ)})" if differ else ""))
                    break
                state = want_state
                runs += 1
    return verdict(not wrong, f"{runs} scheme steps of {', '.join(scheme_names(ctx))} equal Algorithm 1 bit for bit"
                   if not wrong else "differ: " + "; ".join(wrong[:4]), f"{len(wrong)} differing runs")


def section4_bytes(n: int, m: int, P: float) -> dict[str, float]:
    """Section 4's per-GPU volumes for n nodes of m GPUs and P bytes of float32 data per GPU (steps i-iv)."""
    return {
        "intra_reduce_scatter": (m - 1) * P / m,
        "inter_all_to_all": (n - 1) * P / (32 * m * n),
        "inter_all_gather": (n - 1) * P / (32 * m * n),
        "intra_all_gather": (m - 1) * P / (32 * m),
    }


def section4_byte_ranges(n: int, m: int, d: int) -> dict[str, tuple[int, int]]:
    """Per phase, the whole bytes Section 4 allows one GPU to send for a d-element vector: P = 4D with the padded
    length D anywhere in [d, d + PAD_PER_RANK * n * m), each formula rounded outwards to whole bytes."""
    low, high = section4_bytes(n, m, 4 * d), section4_bytes(n, m, 4 * (d + PAD_PER_RANK * n * m - 1))
    return {phase: (math.floor(low[phase]), math.ceil(high[phase])) for phase in SECTION4_PHASES}


@check(
    "section4_volumes",
    "Section 4: per GPU (m-1)P/m intra reduce-scatter, (n-1)P/(32mn) all-to-all and all-gather between nodes, "
    "(m-1)P/(32m) intra all-gather; across nodes 2(n-1)P/32 in all vs m^2 n(n-1)P/32 for a plain All-Gather",
    f"the target's hierarchical scheme executed (d = {VOLUME_DIM}, {len(LAYOUTS)} layouts): its logged bytes per "
    f"GPU per phase within the formulas for any padding below {PAD_PER_RANK} elements per rank; the other schemes "
    "have no per-GPU volume in the paper (All-Gather's is an across-node total)",
    needs=("init", "step"),
)
def section4_volumes(ctx: Context) -> Outcome:
    missing = _not_offered(ctx)
    if missing:
        return missing
    others = [s for s in scheme_names(ctx) if s != "hierarchical"]
    unjudged = f"; {', '.join(others)}: no per-GPU volume in the paper, not judged" if others else ""
    if "hierarchical" not in scheme_names(ctx):
        return Outcome("n/a", "Section 4 states volumes for the hierarchical scheme alone, which the implementation "
                              f"does not list (it lists {', '.join(others)})")
    wrong = []
    for n_nodes, g in LAYOUTS:
        rng = np.random.default_rng(1)
        grads = rng.standard_normal((n_nodes, g, VOLUME_DIM)).astype(np.float32)
        u_worker = rng.random((n_nodes, VOLUME_DIM), dtype=np.float32)
        u_server = rng.random(VOLUME_DIM, dtype=np.float32)
        _, _, log = ctx.target.schemes.step("hierarchical", ctx.target.run_init(n_nodes, VOLUME_DIM), grads, 0.9,
                                            1e-8, u_worker, u_server, None)
        moved = dict(log.bytes_per_gpu)
        allowed = section4_byte_ranges(n_nodes, g, VOLUME_DIM)
        outside = {phase: moved.get(phase, 0) for phase, (low, high) in allowed.items()
                   if not low <= moved.get(phase, 0) <= high}
        outside |= {phase: sent for phase, sent in moved.items() if phase not in allowed and sent}
        if outside:
            limits = {phase: allowed.get(phase, (0, 0)) for phase in outside}
            wrong.append(f"{n_nodes}x{g}: moved {outside}, Section 4 allows {limits}")
    return verdict(not wrong, f"hierarchical on {len(LAYOUTS)} layouts moves Section 4's bytes per GPU per phase"
                              f"{unjudged}" if not wrong else "; ".join(wrong[:3]),
                   f"{len(wrong)} mismatches")
