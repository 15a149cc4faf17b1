"""Section 4 and the other communication schemes: each one computes Algorithm 1 exactly, and the hierarchical
scheme moves the volumes Section 4 states.

These checks need the target's ``schemes`` (``birder_ref.schemes`` for the reference); for an implementation
without schemes they report "n/a". Equality is with the target's own ``step``, never with another implementation.
"""

from __future__ import annotations

import numpy as np

from proofs_checks.registry import Context, Outcome, check, verdict
from proofs_checks.target import read_state, same_bits, to_numpy

LAYOUTS = ((2, 2), (3, 2), (2, 4), (1, 3), (3, 1), (4, 2))  # (n_nodes, gpus_per_node)
DIM = 37  # not a multiple of 8 * ranks: padding is exercised
STEPS = 3
VOLUME_LAYOUTS = ((2, 2), (4, 8), (3, 4), (8, 8), (16, 8))
VOLUME_DIM = 1_000_003


def _not_offered(ctx: Context) -> Outcome | None:
    if ctx.target.schemes is None or not callable(getattr(ctx.target.schemes, "step", None)):
        return Outcome("n/a", "the implementation offers no schemes (an attribute `schemes` with "
                              "step(scheme, state, grads, ...))")
    return None


def scheme_names(ctx: Context) -> tuple[str, ...]:
    from birder_ref.schedules import SCHEMES

    return tuple(getattr(ctx.target.schemes, "SCHEMES", SCHEMES))


def node_mean(grads: np.ndarray) -> np.ndarray:
    """Section 4 step (i): each node's GPUs reduce-scatter the mean of their gradients."""
    return grads.sum(axis=1, dtype=np.float32) / np.float32(grads.shape[1])


@check(
    "schemes_equal_algorithm1",
    "Section 4 / appendix A: the schemes exchange data 'essentially equivalent' to the parameter-server "
    "Algorithm 1, the All-to-All giving 'exactly the average' (not only in expectation): hierarchical = "
    "Algorithm 1 over node means, ps/ring/flat/allgather = Algorithm 1 over GPUs",
    f"bit-exact u_bar and state vs the target's step, {len(LAYOUTS)} layouts x 5 schemes x {STEPS} steps, "
    f"d = {DIM}, T0 = 1, dyadic gradients (exact node sums)",
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
                grads = (rng.integers(-256, 257, (n_nodes, g, DIM)) / 64).astype(np.float32)
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
    return verdict(not wrong, f"{runs} scheme steps equal Algorithm 1 bit for bit" if not wrong
                   else "differ: " + "; ".join(wrong[:4]), f"{len(wrong)} differing runs")


def section4_bytes(n: int, m: int, P: int) -> dict[str, int]:
    """Section 4's per-GPU volumes for n nodes of m GPUs and P bytes of float32 data per GPU (steps i-iv)."""
    return {
        "intra_reduce_scatter": (m - 1) * P // m,
        "inter_all_to_all": (n - 1) * P // (32 * m * n),
        "inter_all_gather": (n - 1) * P // (32 * m * n),
        "intra_all_gather": (m - 1) * P // (32 * m),
    }


def inter_node_bytes(sched) -> int:
    """Bytes crossing between nodes in one step, summed over all GPUs, from the schedule's messages."""
    layout = sched.layout
    return sum(msg.nbytes for phase in sched.phases for messages in phase.rounds() for msg in messages
               if layout.node_of(msg.src) != layout.node_of(msg.dst))


@check(
    "section4_volumes",
    "Section 4: per GPU (m-1)P/m intra reduce-scatter, (n-1)P/(32mn) all-to-all and all-gather between nodes, "
    "(m-1)P/(32m) intra all-gather; across nodes 2(n-1)P/32 in all vs m^2 n(n-1)P/32 for a plain All-Gather",
    "bytes logged while executing each scheme (d = 37, 6 layouts) vs the closed forms; inter-node totals from the "
    "schedules' messages (d = 1e6, up to 16 x 8 GPUs)",
    needs=("init", "step"),
)
def section4_volumes(ctx: Context) -> Outcome:
    missing = _not_offered(ctx)
    if missing:
        return missing
    from birder_ref.schedules import Layout, padded_dim, paper_bytes_per_gpu, schedule

    wrong, compared = [], 0
    for scheme in scheme_names(ctx):
        for n_nodes, g in LAYOUTS:
            rng = np.random.default_rng(1)
            n = n_nodes if scheme == "hierarchical" else n_nodes * g
            grads = rng.standard_normal((n_nodes, g, DIM)).astype(np.float32)
            u_worker, u_server = rng.random((n, DIM), dtype=np.float32), rng.random(DIM, dtype=np.float32)
            _, _, log = ctx.target.schemes.step(scheme, ctx.target.run_init(n, DIM), grads, 0.9, 1e-8, u_worker,
                                                u_server, None)
            layout = Layout(n_nodes, g)
            expected = paper_bytes_per_gpu(scheme, layout, DIM)
            if scheme == "hierarchical":
                paper = section4_bytes(n_nodes, g, 4 * padded_dim(DIM, layout.n_ranks))
                if paper != expected:
                    wrong.append(f"birder_ref's closed form {expected} != Section 4 {paper} on {n_nodes}x{g}")
            measured = {k: v for k, v in log.bytes_per_gpu.items() if v or expected.get(k)}
            if measured != {k: v for k, v in expected.items() if v}:
                wrong.append(f"{scheme} on {n_nodes}x{g}: moved {log.bytes_per_gpu}, closed form {expected}")
            compared += 1
    for n_nodes, g in VOLUME_LAYOUTS:
        layout = Layout(n_nodes, g)
        P = 4 * padded_dim(VOLUME_DIM, layout.n_ranks)
        hier = inter_node_bytes(schedule("hierarchical", layout, VOLUME_DIM))
        gather = inter_node_bytes(schedule("allgather", layout, VOLUME_DIM))
        if hier != 2 * (n_nodes - 1) * P // 32 or gather != g * g * n_nodes * (n_nodes - 1) * P // 32:
            wrong.append(f"{n_nodes}x{g}: inter-node {hier} and {gather} bytes, Section 4 says "
                         f"{2 * (n_nodes - 1) * P // 32} and {g * g * n_nodes * (n_nodes - 1) * P // 32}")
    n_nodes, g = VOLUME_LAYOUTS[-1]
    return verdict(not wrong, f"{compared} executed steps match the closed forms; inter-node totals match on "
                              f"{len(VOLUME_LAYOUTS)} layouts (hierarchical is {g * g * n_nodes // 2}x smaller than "
                              f"All-Gather at {n_nodes}x{g})" if not wrong else "; ".join(wrong[:3]),
                   f"{len(wrong)} mismatches")
