"""Algorithm 1 executed over each of the five communication schemes, by moving chunks along its schedule.

``step(scheme, state, grads, ...)`` takes gradients shaped (n_nodes, gpus_per_node, d). In ``hierarchical``
the workers of Algorithm 1 are the nodes, fed their node-mean gradient (sum over the node's GPUs divided by
float32(gpus_per_node)); in the other four every GPU is a worker. Given the same draws, each returns exactly
what ``algorithm1.step`` returns for those workers' gradients (``worker_gradients``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from birder_ref import algorithm1
from birder_ref.algorithm1 import State, mean_of_signs, server_step, worker_step
from birder_ref.execute import ByteLog, run_phase
from birder_ref.hyperparameters import DEFAULTS
from birder_ref.schedules import SCHEMES, Layout, Schedule, schedule
from birder_ref.validation import check_array, native, scalar


@dataclass(frozen=True)
class StepLog:
    """What one step moved: ``bytes_per_gpu[phase]`` (the most any GPU sent) and every endpoint's bytes."""

    schedule: Schedule
    bytes_per_gpu: dict[str, int]
    bytes_sent: dict[str, dict[int, int]]


def worker_gradients(scheme: str, grads: np.ndarray) -> np.ndarray:
    """The (n_workers, d) gradients Algorithm 1 sees under ``scheme``: node means, or every GPU's own."""
    n, g, d = grads.shape
    if scheme != "hierarchical":
        return grads.reshape(n * g, d)
    with np.errstate(over="ignore"):  # a node sum past float32 is inf, which ``step`` names
        return grads.sum(axis=1, dtype=np.float32) / np.float32(g)


def _refuse_overflowed_node_sums(grads: np.ndarray, worker_grads: np.ndarray) -> None:
    """One ValueError where finite gradients (checked) have a node mean that is not: their float32 node sum
    overflowed, which the user's gradients alone would not show."""
    if not algorithm1._finite_sum(worker_grads):  # one pass, no temporary, in the usual all-finite case
        node, element = (int(i) for i in np.argwhere(~np.isfinite(worker_grads))[0])
        raise ValueError(f"grads: node {node}, element ({element},): the sum over the node's {grads.shape[1]} GPUs "
                         "overflows float32 (the intra-node reduce-scatter sums in float32 before dividing by "
                         "gpus_per_node, as NCCL does), so no node mean is exact; scale the gradients down")


def _pad(x: np.ndarray, length: int, value: float = 0.0) -> np.ndarray:
    widths = [(0, 0)] * (x.ndim - 1) + [(0, length - x.shape[-1])]
    return np.pad(x, widths, constant_values=value)


WORKER_FIELDS = ("m", "b_hat", "b", "e")  # State's per-worker (n, d) arrays; server_e is (d,)


def _map_state(state: State, worker, server) -> State:
    """The state with ``worker`` applied to each per-worker array and ``server`` to the server error."""
    return replace(state, server_e=server(state.server_e), **{f: worker(getattr(state, f)) for f in WORKER_FIELDS})


def _padded_state(state: State, length: int) -> State:
    return _map_state(state, lambda a: _pad(a, length), lambda a: _pad(a, length))


def _slice_state(state: State, rows, cols: slice) -> State:
    return _map_state(state, lambda a: a[rows, cols], lambda a: a[cols])


def _one_buffer_per_rank(rows: np.ndarray, n_chunks: int, dtype=np.int64) -> dict[int, np.ndarray]:
    return {rank: row.reshape(n_chunks, -1).astype(dtype) for rank, row in enumerate(rows)}


def _assemble(buffers: dict[int, np.ndarray], ranks: range) -> np.ndarray:
    """Every rank's full vector; they must agree, then one copy is returned."""
    first = buffers[ranks[0]].reshape(-1)
    for r in ranks:
        if not np.array_equal(buffers[r].reshape(-1), first):
            raise AssertionError(f"rank {r} ended the step with a different u_bar than rank {ranks[0]}")
    return first


def _server_on_counts(counts: np.ndarray, n_workers: int, server_e: np.ndarray, u_server: np.ndarray):
    """Lines 12-13 from exact counts of +1: returns (u_bar as 0/1 counts, new server error)."""
    u_bar, new_e = server_step(mean_of_signs(counts, n_workers), server_e, u_server)
    return (u_bar > 0).astype(np.int64), new_e


def step(
    scheme: str,
    state: State,
    grads: np.ndarray,
    beta: float = DEFAULTS.beta,
    eps: float = DEFAULTS.eps,
    u_worker: np.ndarray | None = None,
    u_server: np.ndarray | None = None,
    T0: int | None = None,
) -> tuple[np.ndarray, State, StepLog]:
    """One Birder step over ``scheme``; returns (u_bar, new state, byte log). See the module docstring."""
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    grads, u_worker, u_server = native(grads), native(u_worker), native(u_server)  # >f4 as float32
    beta, eps, T0 = scalar(beta), scalar(eps), scalar(T0)  # 0-d arrays as Python numbers
    state = algorithm1.native_state(state)
    algorithm1.check_state(state)
    if not isinstance(grads, np.ndarray) or grads.ndim != 3 or grads.shape[0] < 1 or grads.shape[1] < 1:
        raise ValueError(f"grads must be a (n_nodes, gpus_per_node, d) array, got {getattr(grads, 'shape', grads)}")
    layout = Layout(grads.shape[0], grads.shape[1])
    check_array("grads", grads, (*grads.shape[:2], state.dim), worker_axes=2)
    workers = layout.n_nodes if scheme == "hierarchical" else layout.n_ranks
    if workers != state.n_workers:
        raise ValueError(f"grads of shape {grads.shape} give {workers} workers under {scheme!r}, but the state has "
                         f"{state.n_workers}")
    worker_grads = worker_gradients(scheme, grads)
    if scheme == "hierarchical":  # the other schemes' workers see the (checked) gradients themselves
        _refuse_overflowed_node_sums(grads, worker_grads)
    algorithm1.check_step_inputs(state, worker_grads, u_worker, u_server, beta, eps, T0, state_checked=True)
    with algorithm1.overflow_guard():
        return _step(scheme, layout, state, grads, worker_grads, beta, eps, u_worker, u_server, T0)


def _step(scheme: str, layout: Layout, state: State, grads, worker_grads, beta, eps, u_worker, u_server, T0):
    """``step`` on checked inputs."""
    sched = schedule(scheme, layout, state.dim)
    D, p = sched.padded_dim, layout.n_ranks
    padded = _padded_state(state, D)
    worker_grads, u_worker, u_server = _pad(worker_grads, D), _pad(u_worker, D), _pad(u_server, D)
    log = ByteLog()
    phases = {ph.name: ph for ph in sched.phases}

    if scheme == "hierarchical":
        u_bar, new = _hierarchical(sched, phases, padded, grads, beta, eps, u_worker, u_server, T0, log)
    else:
        u, m, b_hat, b, e = worker_step(padded, worker_grads, beta, eps, u_worker, T0)
        plus = (u > 0).astype(np.int64)
        server_e = padded.server_e.copy()
        if scheme == "ps":
            buffers = {r: plus[r].reshape(1, D) for r in range(p)}
            buffers[layout.server] = np.zeros((1, D), np.int64)
            run_phase(phases["push"], buffers, log)
            bits, server_e = _server_on_counts(buffers[layout.server][0], p, server_e, u_server)
            buffers[layout.server][0] = bits
            run_phase(phases["pull"], buffers, log)
        elif scheme == "allgather":
            buffers = {r: np.zeros((p, D), np.int64) for r in range(p)}
            for r in range(p):
                buffers[r][r] = plus[r]
            run_phase(phases["all_gather"], buffers, log)
            results = [_server_on_counts(buffers[r].sum(axis=0), p, server_e, u_server) for r in range(p)]
            for r, (bits, _) in enumerate(results):  # every rank replays the server step on everything
                buffers[r] = bits.reshape(1, D)
            server_e = results[0][1]
        else:  # ring or flat: reduce counts to chunk owners, server step per chunk, 1-bit all-gather
            first, second = sched.phases
            buffers = _one_buffer_per_rank(plus, p)
            run_phase(first, buffers, log)
            c = D // p
            for owner in range(p):
                cols = slice(owner * c, (owner + 1) * c)
                bits, server_e[cols] = _server_on_counts(buffers[owner][owner], p, server_e[cols], u_server[cols])
                buffers[owner][owner] = bits
            run_phase(second, buffers, log)
        u_bar = np.where(_assemble(buffers, range(p)) > 0, np.float32(1), np.float32(-1))
        new = replace(padded, m=m, b_hat=b_hat, b=b, e=e, server_e=server_e, t=padded.t + 1)

    d = state.dim
    new_state = _slice_state(new, slice(None), slice(None, d))
    return u_bar[:d], new_state, StepLog(sched, log.bytes_per_gpu(p), log.sent)


def _hierarchical(sched, phases, padded: State, grads, beta, eps, u_worker, u_server, T0, log: ByteLog):
    """Section 4: intra reduce-scatter (mean), worker step per shard, inter all-to-all, server step,
    inter all-gather, intra all-gather."""
    layout, D = sched.layout, sched.padded_dim
    n, g = layout.n_nodes, layout.gpus_per_node
    shard = D // g  # GPU (k, j) holds shard j of node k's vector after the reduce-scatter
    chunk = D // (g * n)  # and, after the all-to-all, chunk k of shard j for all nodes
    flat_grads = _pad(grads.reshape(n * g, -1), D)
    buffers = {r: flat_grads[r].reshape(g, shard).copy() for r in range(n * g)}
    run_phase(phases["intra_reduce_scatter"], buffers, log)

    m, b_hat, b, e = (np.empty_like(a) for a in (padded.m, padded.b_hat, padded.b, padded.e))
    server_e = padded.server_e.copy()
    bit_buffers = {}
    for j in range(g):
        cols = slice(j * shard, (j + 1) * shard)
        node_mean = np.stack([buffers[k * g + j][j] for k in range(n)]) / np.float32(g)
        sub = _slice_state(padded, slice(None), cols)
        u, m[:, cols], b_hat[:, cols], b[:, cols], e[:, cols] = worker_step(
            sub, node_mean, beta, eps, u_worker[:, cols], T0)
        for k in range(n):
            bit_buffers[k * g + j] = (u[k] > 0).astype(np.int64).reshape(n, chunk)
    run_phase(phases["inter_all_to_all"], bit_buffers, log)

    for j in range(g):
        for k in range(n):
            cols = slice(j * shard + k * chunk, j * shard + (k + 1) * chunk)
            owner = bit_buffers[k * g + j]
            owner[k], server_e[cols] = _server_on_counts(owner[k], n, server_e[cols], u_server[cols])
    run_phase(phases["inter_all_gather"], bit_buffers, log)

    shards = {}
    for k in range(n):
        for j in range(g):
            shards[k * g + j] = np.zeros((g, shard), np.int64)
            shards[k * g + j][j] = bit_buffers[k * g + j].reshape(-1)
    run_phase(phases["intra_all_gather"], shards, log)
    u_bar = np.where(_assemble(shards, range(n * g)) > 0, np.float32(1), np.float32(-1))
    return u_bar, replace(padded, m=m, b_hat=b_hat, b=b, e=e, server_e=server_e, t=padded.t + 1)
