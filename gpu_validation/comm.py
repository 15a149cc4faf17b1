"""Birder's 1-bit all-reduce over torch.distributed: the hierarchical scheme of Section 4 and the flat one.

The pipeline follows ``birder_ref.schedules.schedule(scheme, layout, padded length)``: each phase of that
schedule is one torch collective (``run_phase``, chosen by the phase's ``Pattern.collective``) over the group
the schedule names, moving the bytes it counts. ``record_phases()`` logs what each rank actually ran, so tests
and ``gpu-validate`` compare it with the schedule. Every element meets the arithmetic and the draws of
``birder_ref.algorithm1.step`` on the workers' gradients ``birder_ref.schemes.worker_gradients``:

1. ``intra_reduce_scatter``: local rank j receives shard j of every GPU of its node (``all_to_all_single``)
   and adds them in local-rank order, ((g_0 + g_1) + g_2) + ..., then divides by float32(G): the node mean,
   as ``worker_gradients`` computes it (NumPy's float32 sum over the GPU axis is that same left fold) and as
   the reference's all-to-all pattern sums. A fixed order makes the mean the same bits on any backend, for any
   data and any bucket layout.
2. Algorithm 1 lines 5-9 on the shard, the node being the worker (worker draws use stream = node index).
3. ``inter_all_to_all`` of packed bits among the GPUs of equal local rank: chunk k of shard j goes to node k.
4. lines 12-13 on chunk k of shard j from the count of +1s (server draws use ``SERVER_STREAM``), then
   ``inter_all_gather`` of the packed u_bar bits (NCCL's ring all-gather).
5. ``intra_all_gather`` of the packed shards; every rank unpacks the whole u_bar.

``flat`` is the same pipeline with one GPU per worker: no intra-node phases, and its ``all_to_all`` /
``all_gather`` run over all ranks (DeepSpeed's two-phase compressed all-reduce, with Birder's quantizer).

Collectives used: ``all_to_all_single``, ``all_gather_single`` (``all_gather_into_tensor`` on older torch)
and ``all_reduce`` (the non-finite flag), all supported by gloo (CPU) and NCCL (CUDA) in torch 2.13.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

import torch
import torch.distributed as dist

from birder_ref.schedules import Layout, OnLayout, Phase, padded_dim, schedule
from gpu_validation import torch_birder as tb

PIPELINE_SCHEMES = ("hierarchical", "flat")  # the schemes of ``birder_ref.schedules.SCHEMES`` the torch code runs

# torch 2.13 deprecates all_gather_into_tensor in favour of all_gather_single (same arguments).
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass(frozen=True)
class Topology(OnLayout):
    """Where this rank sits in ``layout`` (rank = node * gpus_per_node + local rank), and its process groups.

    A *worker* of Algorithm 1 is a node (hierarchical) or a GPU (flat); the ``worker_group`` holds the ranks
    sharing one worker (each keeps one shard of its state), the ``server_group`` the ranks that exchange bits
    (equal local rank across nodes, or everyone). ``None`` stands for a group of one rank. ``world_group`` is a
    group of all ranks made for Birder alone: collectives issued from the hook's thread never interleave with
    those DDP issues on the default group from the autograd thread (find_unused_parameters' bitmap all-reduce).
    """

    scheme: str
    layout: Layout
    rank: int
    worker_group: object
    server_group: object
    world_group: object = None  # Birder's own group of all ranks (None: one rank), apart from DDP's default group

    @property
    def shards_per_worker(self) -> int:
        """How many ranks share one worker's state (G for hierarchical, 1 for flat)."""
        return self.gpus_per_node if self.scheme == "hierarchical" else 1

    @property
    def n_workers(self) -> int:
        return self.n_ranks // self.shards_per_worker

    def worker_of(self, rank: int) -> int:
        """Algorithm 1's worker index of ``rank``: its node (hierarchical) or itself (flat); the draw stream."""
        return rank // self.shards_per_worker

    def shard_of(self, rank: int) -> int:
        """Which shard of its worker's vector ``rank`` holds (its local rank, or 0)."""
        return rank % self.shards_per_worker

    @property
    def worker(self) -> int:
        return self.worker_of(self.rank)


def process_group_timeout(group=None) -> timedelta:
    """The timeout the user gave the default process group (``init_process_group(timeout=...)``).

    ``new_group`` without a timeout falls back to torch's backend default (30 min on gloo), not to the default
    group's: groups made here pass this one on, so a stalled rank fails every collective within it.
    """
    group = group or dist.group.WORLD
    for device in ("cpu", "cuda"):
        try:
            return group._get_backend(torch.device(device)).options._timeout
        except (RuntimeError, AttributeError, ValueError):
            continue
    return dist.distributed_c10d._get_default_timeout(dist.get_backend(group))


def make_topology(scheme: str, n_nodes: int, gpus_per_node: int, timeout: timedelta | None = None) -> Topology:
    """Create the process groups of ``scheme`` on the default group (collective: every rank must call it).

    Every group gets ``timeout`` (default: the default group's own, ``process_group_timeout()``), so a hung or
    dead rank ends each collective on it within that time.
    """
    if scheme not in PIPELINE_SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(PIPELINE_SCHEMES)}")
    n, g = int(n_nodes), int(gpus_per_node)
    if n < 1 or g < 1:
        raise ValueError(f"need nodes >= 1 and gpus per node >= 1, got {n} x {g}")
    layout = Layout(n, g)
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != n * g:
        raise ValueError(f"the process group has {world} ranks, but {n} nodes x {g} GPUs makes {n * g}")
    timeout = process_group_timeout() if timeout is None else timeout
    everyone = dist.new_group(list(range(world)), timeout=timeout) if world > 1 else None
    if scheme == "flat":
        return Topology(scheme, layout, rank, None, everyone, everyone)
    worker_group = server_group = None
    for node in range(n):  # every rank creates every group, in the same order
        group = dist.new_group(list(layout.node_ranks(node)), timeout=timeout)
        if layout.node_of(rank) == node and g > 1:
            worker_group = group
    for local in range(g):
        group = dist.new_group(list(layout.local_rank_group(local)), timeout=timeout)
        if layout.local_rank(rank) == local and n > 1:
            server_group = group
    return Topology(scheme, layout, rank, worker_group, server_group, everyone)


def padded_length(topology: Topology, dim: int) -> int:
    """The length the pipeline moves: ``dim`` rounded up to a multiple of 8 * n_ranks (as the reference)."""
    return padded_dim(dim, topology.n_ranks)


def shard_slice(topology: Topology, length: int, rank: int | None = None) -> slice:
    """The elements of a padded vector whose worker state ``rank`` keeps (shard j of its worker)."""
    rank = topology.rank if rank is None else rank
    size = length // topology.shards_per_worker
    j = topology.shard_of(rank)
    return slice(j * size, (j + 1) * size)


def chunk_slice(topology: Topology, length: int, rank: int | None = None) -> slice:
    """The elements of a padded vector whose server error ``rank`` keeps (chunk k of its shard j)."""
    rank = topology.rank if rank is None else rank
    shard = shard_slice(topology, length, rank)
    size = (shard.stop - shard.start) // (topology.n_ranks // topology.shards_per_worker)
    k = topology.worker_of(rank)  # the rank's position in its server group: its node (or itself, in flat)
    return slice(shard.start + k * size, shard.start + (k + 1) * size)


def rank_order_sum(rows: torch.Tensor) -> torch.Tensor:
    """The rows of (G, n) added in order, ((row 0 + row 1) + row 2) + ..., in float32, never reassociated."""
    total = rows[0].clone()
    for row in rows[1:]:
        total += row
    return total


# ------------------------------------------------------------------------------- the schedule, phase by phase
@dataclass(frozen=True)
class PipelinePhases:
    """The schedule's phases in the order the pipeline runs them; None where the scheme has no such phase
    (``flat``'s worker is one GPU: nothing moves inside it)."""

    intra_reduce_scatter: Phase | None
    inter_all_to_all: Phase
    inter_all_gather: Phase
    intra_all_gather: Phase | None


_PHASE_NAMES = {  # the schedule's phase names, in PipelinePhases' order
    "hierarchical": ("intra_reduce_scatter", "inter_all_to_all", "inter_all_gather", "intra_all_gather"),
    "flat": (None, "all_to_all", "all_gather", None),
}


@lru_cache(maxsize=256)
def _pipeline_phases(scheme: str, layout: Layout, length: int) -> PipelinePhases:
    by_name = {ph.name: ph for ph in schedule(scheme, layout, length).phases}
    names = _PHASE_NAMES[scheme]
    if set(by_name) != set(names) - {None}:
        raise RuntimeError(f"the {scheme} schedule has the phases {sorted(by_name)}; the torch pipeline runs "
                           f"{sorted(set(names) - {None})}")
    return PipelinePhases(*(None if name is None else by_name[name] for name in names))


def pipeline_phases(topology: Topology, length: int) -> PipelinePhases:
    """The phases of ``birder_ref.schedules.schedule`` for this topology and a padded vector of ``length``."""
    return _pipeline_phases(topology.scheme, topology.layout, length)


@dataclass(frozen=True)
class PhaseRecord:
    """One collective a rank ran: the schedule's phase it stood for, the torch call it made, the ranks of the
    group it ran on, and the bytes it sent (from the tensors it passed)."""

    phase: Phase
    collective: str
    ranks: tuple[int, ...]
    bytes_sent: int


_recording: list[PhaseRecord] | None = None


@contextmanager
def record_phases() -> Iterator[list[PhaseRecord]]:
    """Within the block, every phase this process runs is appended to the list yielded."""
    global _recording
    outer, _recording = _recording, []
    try:
        yield _recording
    finally:
        _recording = outer


def note_phase(phase: Phase | None, group, collective: str, bytes_sent: int) -> None:
    """Log one ``collective`` call for ``phase`` over ``group`` (when ``record_phases`` is active)."""
    if _recording is not None and phase is not None and group is not None:
        _recording.append(PhaseRecord(phase, collective, tuple(dist.get_process_group_ranks(group)), int(bytes_sent)))


def phases_of_rank(phases: tuple[Phase, ...], rank: int) -> list[Phase]:
    """The phases in which ``rank`` exchanges anything (its group has another member), in order."""
    return [ph for ph in phases if any(rank in g and len(g) > 1 for g in ph.groups)]


def trace_mismatches(records: list[PhaseRecord], topology: Topology, rank: int | None = None) -> list[str]:
    """Where what ``rank`` ran (``records``, whole steps one after another) differs from the schedule: each step
    must run, in order, the schedule's phases in which ``rank`` exchanges anything, each as the torch collective
    its pattern names, over the group the schedule gives ``rank``, sending the bytes the schedule counts for it.
    Empty when every step ran the schedule."""
    rank = topology.rank if rank is None else rank
    layout, problems, i = topology.layout, [], 0
    while i < len(records):
        first = records[i].phase
        sizes = {first.chunk_elements * k for k in (layout.gpus_per_node, layout.n_ranks)}
        found = [s for s in (schedule(topology.scheme, layout, d) for d in sorted(sizes)) if first in s.phases]
        if not found:
            return problems + [f"record {i}: {first.name} is no phase of the {topology.scheme} schedule"]
        live = phases_of_rank(found[0].phases, rank)
        step = records[i:i + len(live)]
        if [r.phase for r in step] != live:
            return problems + [f"records {i}..: phases {[r.phase.name for r in step]}, the schedule runs "
                               f"{[ph.name for ph in live]}"]
        for record, phase in zip(step, live, strict=True):
            group = next(g for g in phase.groups if rank in g)
            expected = (phase.pattern.collective, group, phase.bytes_sent()[rank])
            ran = (record.collective, record.ranks, record.bytes_sent)
            if ran != expected:
                problems.append(f"{phase.name}: ran {ran}, the schedule says {expected} (collective, ranks, bytes)")
        i += len(live)
    return problems


def all_gather_rows(x: torch.Tensor, group, members: int, out: torch.Tensor | None = None,
                    phase: Phase | None = None) -> torch.Tensor:
    """Every member's ``x`` stacked (members, n), in group order (into ``out``, of members * n, when given);
    ``group`` None is a group of one rank. Sends ``x`` to each of the other members (NCCL: along a ring)."""
    if group is None:
        return x.reshape(1, -1)
    out = torch.empty(members * x.numel(), dtype=x.dtype, device=x.device) if out is None else out
    note_phase(phase, group, "all_gather_single", x.numel() * x.element_size() * (members - 1))
    _all_gather(out, x.contiguous(), group=group)
    return out.view(members, -1)


def all_to_all_rows(x: torch.Tensor, group, members: int, out: torch.Tensor | None = None,
                    phase: Phase | None = None) -> torch.Tensor:
    """Piece j of ``x`` (cut into ``members`` equal pieces) goes to member j; returns (members, n / members):
    row i is what member i sent here (into ``out``, like ``x``, when given)."""
    if group is None:
        return x.reshape(1, -1)
    out = torch.empty_like(x) if out is None else out
    note_phase(phase, group, "all_to_all_single", x.numel() * x.element_size() * (members - 1) // members)
    dist.all_to_all_single(out, x.contiguous(), group=group)
    return out.view(members, -1)


_TORCH_COLLECTIVES = {"all_to_all_single": all_to_all_rows, "all_gather_single": all_gather_rows}


def run_phase(phase: Phase | None, x: torch.Tensor, group, out: torch.Tensor | None = None) -> torch.Tensor:
    """This rank's part of one phase of the schedule, as the torch collective its pattern names, over ``group``
    (this rank's group of the phase; None: a group of one, nothing moves). Returns the (members, n) rows."""
    if group is None:
        return x.reshape(1, -1)
    run = _TORCH_COLLECTIVES.get(phase.pattern.collective) if phase is not None else None
    if run is None:
        raise ValueError(f"the torch pipeline runs no {getattr(phase, 'pattern', None)!r} phase")
    return run(x, group, phase.group_size, out, phase=phase)


def node_mean_shard(topology: Topology, grad: torch.Tensor) -> torch.Tensor:
    """Phase 1: this rank's shard of its worker's gradient (the node mean in hierarchical, its own in flat)."""
    g = topology.shards_per_worker
    if g == 1:
        return grad
    phase = pipeline_phases(topology, grad.numel()).intra_reduce_scatter
    received = run_phase(phase, grad, topology.worker_group)
    return tb.true_divide(rank_order_sum(received), float(g))


def one_bit_allreduce(
    topology: Topology,
    grad: torch.Tensor,
    index: torch.Tensor,
    worker_state: tb.WorkerState,
    server_error: torch.Tensor,
    seed: int,
    t: int,
    beta: float,
    eps: float,
    T0: int | None = None,
) -> tuple[torch.Tensor, tb.WorkerState, torch.Tensor]:
    """One Birder step over ``topology`` on a padded float32 vector; returns (u_bar, worker state, server error).

    ``grad`` is this rank's local gradient (padded length D), ``index`` the int64 element index of every
    position (drives the draws), ``worker_state`` this rank's shard of its worker's state, ``server_error``
    its chunk's server error; ``t`` is the Algorithm 1 step being computed (1-based). Every rank returns the
    same u_bar (D,) of +-1. Collective over every rank of the topology; runs the schedule's phases in order.
    """
    shard, chunk = shard_slice(topology, grad.numel()), chunk_slice(topology, grad.numel())
    phases = pipeline_phases(topology, grad.numel())
    servers = topology.n_workers

    # Phases 1-2: node mean of this shard, then Algorithm 1 lines 5-9 with this worker's draws.
    worker_grad = node_mean_shard(topology, grad)
    u_worker = tb.uniforms(seed, t, topology.worker, index[shard])
    u, worker_state = tb.worker_step(worker_state, worker_grad, beta, eps, u_worker, t, T0)

    # Phase 3: chunk k of the packed shard to node k; phase 4: lines 12-13 on the chunk this rank serves.
    received = run_phase(phases.inter_all_to_all, tb.pack_signs(u), topology.server_group)
    mean_u = tb.mean_of_signs(tb.count_plus(received), servers)
    u_server = tb.uniforms(seed, t, tb.SERVER_STREAM, index[chunk])
    u_bar_chunk, server_error = tb.server_step(mean_u, server_error, u_server)
    shard_bits = run_phase(phases.inter_all_gather, tb.pack_signs(u_bar_chunk), topology.server_group)

    # Phase 5: the node's shards to every GPU of the node.
    all_bits = run_phase(phases.intra_all_gather, shard_bits.reshape(-1), topology.worker_group)
    return tb.unpack_signs(all_bits.reshape(-1)), worker_state, server_error


def any_nonfinite(tensor: torch.Tensor, group=None) -> tuple[torch.Tensor, object]:
    """Start a MAX all-reduce over ``group`` (all ranks; None: one rank) of 1.0 if ``tensor`` holds a NaN or an
    infinity here, else 0.0.

    Returns (flag, work): ``work.wait()`` (or None when there is one rank) before reading ``flag``.
    """
    flag = (~torch.isfinite(tensor)).any().to(torch.float32).reshape(1)
    if group is None:
        return flag, None
    return flag, dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group, async_op=True)
