"""System layer: collectives as the schedules of ``birder_ref.schedules`` say, timed on the network layer.

``birder_ref.schedules`` is the single source of who sends what: this module never invents a message. For
each phase it counts, round by round, the messages every node sends and receives (``RoundLoad``), and then
simulates one round of the busiest node: an intra-node flow that stands for the busiest GPU port's messages and
an inter-node flow that stands for the busiest NIC's messages, each with its multiplicity on the links it
crosses (``sim.network``). How that stays exact:

* ring, all-to-all and direct all-gather patterns: every node does the same in every round, so the busiest
  node is any node and its receive load mirrors its transmit load; rounds whose messages are the same size
  are simulated once and the rest take the same time (a collective has the network to itself: DDP and the
  1-bit hooks run one collective at a time on their communication stream);
* push/pull (parameter server): the server node's NIC is counted as a node of its own, so its incast (p
  flows) is what the round waits for;
* binary trees (NCCL's tree all-reduce): NCCL pipelines a tree in pieces of ``TREE_PIECE_BYTES``; in steady
  state every level of the tree is busy at once, so one pipelined round carries all levels' messages and a
  phase takes depth + pieces - 1 such rounds (the busiest node is an inner node of one tree).

Counting costs O(p) per phase, never the p^2 messages of a flat all-to-all.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import simpy

from birder_ref.schedules import (
    Layout,
    Phase,
    Schedule,
    allreduce,
    optimizer_schedule,
    padded_dim,
    tree_allreduce,
)
from sim.network import Cluster, FlowNetwork, Link

TREE_PIECE_BYTES = 512 * 1024  # NCCL Simple protocol: a 4 MiB buffer in NCCL_STEPS = 8 slots (src/include/device.h)
# Patterns that run as the steps of one collective kernel (NCCL's ring and tree): each step costs the NIC
# ``step_overhead``. All-to-all, direct all-gather, push and pull are point-to-point send/recv operations: the
# proxy thread of each GPU posts one per peer, ``message_overhead`` each (sim/README.md, "per-message costs").
COLLECTIVE_KERNEL_PATTERNS = frozenset({"ring", "ring_reduce_scatter", "ring_all_gather", "binary_tree"})


@dataclass(frozen=True)
class RoundLoad:
    """Message counts of one round, at the busiest place of each kind (multiplicities of the flows)."""

    gpu_tx: int = 0  # intra-node messages the busiest GPU sends
    gpu_rx: int = 0  # ... receives
    fabric: int = 0  # intra-node messages of the busiest node (its fabric's load)
    nic_tx: int = 0  # inter-node messages leaving the busiest NIC
    nic_rx: int = 0  # inter-node messages arriving at the busiest NIC
    node_tx: int = 0  # inter-node messages leaving the busiest node (its switch uplink's load)
    gpu_net_tx: int = 0  # inter-node messages the busiest GPU sends (its proxy posts them one by one)
    gpu_net_rx: int = 0  # ... receives
    intra_total: int = 0  # intra-node messages sent by GPUs in the whole cluster
    inter_total: int = 0  # inter-node messages sent by GPUs (not the parameter server) in the whole cluster

    @property
    def empty(self) -> bool:
        return self.fabric == 0 and self.nic_tx == 0 and self.nic_rx == 0


@dataclass(frozen=True)
class PhasePlan:
    """How a phase runs: lock-step rounds of given loads and message sizes."""

    name: str
    rounds: tuple[tuple[RoundLoad, int, int], ...]  # (load, message bytes, how many identical rounds in a row)


class _Counts:
    """Accumulates the messages of one round by GPU, node and NIC (endpoint = node * G + local rank)."""

    def __init__(self, layout: Layout, nic_count: int):
        self.layout, self.nic_count = layout, nic_count
        self.gpu_tx, self.gpu_rx, self.fabric = Counter(), Counter(), Counter()
        self.nic_tx, self.nic_rx, self.node_tx = Counter(), Counter(), Counter()
        self.gpu_net_tx, self.gpu_net_rx = Counter(), Counter()
        self.intra_total = self.inter_total = 0

    def nic(self, endpoint: int) -> tuple[int, int]:
        g = self.layout.gpus_per_node
        return endpoint // g, (endpoint % g) * self.nic_count // g

    def send(self, src: int, dst: int) -> None:
        g = self.layout.gpus_per_node
        if src // g == dst // g:
            self.gpu_tx[src] += 1
            self.gpu_rx[dst] += 1
            self.fabric[src // g] += 1
            self.intra_total += 1
        else:
            self.nic_tx[self.nic(src)] += 1
            self.nic_rx[self.nic(dst)] += 1
            self.node_tx[src // g] += 1
            self.gpu_net_tx[src] += 1
            self.gpu_net_rx[dst] += 1
            self.inter_total += src != self.layout.server

    def everyone_to_everyone(self, group: tuple[int, ...]) -> None:
        """One message from every member to every other member, counted in O(len(group))."""
        g, q = self.layout.gpus_per_node, len(group)
        on_node = Counter(ep // g for ep in group)
        for ep in group:
            node = ep // g
            local, remote = on_node[node] - 1, q - on_node[node]
            self.gpu_tx[ep] += local
            self.gpu_rx[ep] += local
            self.fabric[node] += local
            self.intra_total += local
            self.nic_tx[self.nic(ep)] += remote
            self.nic_rx[self.nic(ep)] += remote
            self.node_tx[node] += remote
            self.gpu_net_tx[ep] += remote
            self.gpu_net_rx[ep] += remote
            self.inter_total += remote

    def load(self) -> RoundLoad:
        def top(c: Counter) -> int:
            return max(c.values(), default=0)

        return RoundLoad(top(self.gpu_tx), top(self.gpu_rx), top(self.fabric), top(self.nic_tx), top(self.nic_rx),
                         top(self.node_tx), top(self.gpu_net_tx), top(self.gpu_net_rx), self.intra_total,
                         self.inter_total)


def _count(phase: Phase, layout: Layout, nic_count: int, all_tree_levels: bool = False) -> RoundLoad:
    """Loads of one round (every round of these patterns has the same senders and receivers), or of a
    pipelined tree round with all levels busy."""
    counts = _Counts(layout, nic_count)
    for group in phase.groups:
        q = len(group)
        if q < 2:
            continue
        if phase.pattern in ("all_to_all", "direct_all_gather"):
            counts.everyone_to_everyone(group)
        elif phase.pattern.startswith("ring"):
            for i in range(q):
                counts.send(group[i], group[(i + 1) % q])
        elif phase.pattern == "push":
            for src in group[:-1]:
                counts.send(src, group[-1])
        elif phase.pattern == "pull":
            for dst in group[:-1]:
                counts.send(group[-1], dst)
        else:  # binary_tree
            for messages in phase.group_rounds(group):
                for m in messages:
                    counts.send(m.src, m.dst)
    return counts.load()


@lru_cache(maxsize=4096)
def _phase_loads(phase: Phase, layout: Layout, nic_count: int) -> tuple[RoundLoad, ...]:
    """Per round loads of a phase (pipelined trees: one steady-state load with every level busy)."""
    if phase.n_rounds == 0:
        return ()
    if phase.pattern == "binary_tree":
        return (_count(phase, layout, nic_count),)
    return (_count(phase, layout, nic_count),) * phase.n_rounds


def _structure_key(phase: Phase) -> Phase:
    """The phase with its byte sizes normalised, so buckets of different sizes share one count."""
    return Phase(phase.name, phase.pattern, phase.groups, 8, (8,) * phase.n_rounds, phase.op, 0)


def phase_plan(phase: Phase, layout: Layout, nic_count: int) -> PhasePlan:
    loads = _phase_loads(_structure_key(phase), layout, nic_count)
    if not loads:
        return PhasePlan(phase.name, ())
    if phase.pattern == "binary_tree":
        message = phase.message_bytes(0)
        pieces = max(1, math.ceil(message / TREE_PIECE_BYTES))
        piece = math.ceil(message / pieces)
        return PhasePlan(phase.name, ((loads[0], piece, phase.n_rounds + pieces - 1),))
    rounds: list[tuple[RoundLoad, int, int]] = []
    for r, load in enumerate(loads):
        nbytes = phase.message_bytes(r)
        if rounds and rounds[-1][0] == load and rounds[-1][1] == nbytes:
            rounds[-1] = (load, nbytes, rounds[-1][2] + 1)
        else:
            rounds.append((load, nbytes, 1))
    return PhasePlan(phase.name, tuple(rounds))


@dataclass(frozen=True)
class Traffic:
    """Bytes the GPUs send per collective, averaged per GPU, split by where they go."""

    intra_node_bytes_per_gpu: float
    inter_node_bytes_per_gpu: float


def traffic(schedule: Schedule, nic_count: int = 1) -> Traffic:
    p = schedule.layout.n_ranks
    intra = inter = 0
    for phase in schedule.phases:
        plan = phase_plan(phase, schedule.layout, nic_count)
        if phase.pattern == "binary_tree":  # count the real messages, not the pipelined pieces
            load = plan.rounds[0][0] if plan.rounds else RoundLoad()
            intra += load.intra_total * phase.message_bytes(0)
            inter += load.inter_total * phase.message_bytes(0)
            continue
        for load, nbytes, repeat in plan.rounds:
            intra += load.intra_total * nbytes * repeat
            inter += load.inter_total * nbytes * repeat
    return Traffic(intra / p, inter / p)


# ------------------------------------------------------------------------------------------------ simulation
TCP_INITIAL_WINDOW_BYTES = 10 * 1448  # Linux initial congestion window: 10 segments (RFC 6928) of 1448 B payload


def burst_bytes(load: RoundLoad, nbytes: float) -> float:
    """Bytes a round's synchronised senders push into the busiest NIC's switch port before any ACK returns: each
    of its ``nic_rx`` flows sends at most one window (TCP incast: Phanishayee et al., FAST 2008)."""
    return load.nic_rx * min(nbytes, TCP_INITIAL_WINDOW_BYTES)


def incast_timeouts(burst: float, onset: float, certain: float) -> float:
    """Expected TCP retransmission timeouts of one burst of ``burst`` bytes into one switch port: none up to
    ``onset`` bytes, one from ``certain`` on, linear in between (the chance that the buffer overflows and a flow
    loses its whole window grows with the overflow)."""
    if burst <= onset:
        return 0.0
    if burst >= certain:
        return 1.0
    return (burst - onset) / (certain - onset)


class Fabric:
    """The links of the busiest node inside one simpy environment."""

    def __init__(self, env: simpy.Environment, cluster: Cluster):
        self.env, self.cluster = env, cluster
        self.net = FlowNetwork(env)
        intra, nic = cluster.intra, cluster.nic
        self.gpu_tx = Link("gpu_tx", intra.port_bandwidth)
        self.gpu_rx = Link("gpu_rx", intra.port_bandwidth)
        self.fabric = Link("fabric", intra.fabric_bandwidth) if math.isfinite(intra.fabric_bandwidth) else None
        self.nic_tx = Link("nic_tx", nic.bandwidth)
        self.nic_rx = Link("nic_rx", nic.bandwidth)
        uplink = nic.count * nic.bandwidth / cluster.oversubscription
        self.uplink = Link("switch_uplink", uplink) if cluster.oversubscription > 1 else None
        self.memo: dict[tuple, tuple[float, float]] = {}  # collective -> (seconds, expected incast timeouts)
        self.incast_timeouts = 0.0  # expected retransmission timeouts charged so far

    def round(self, load: RoundLoad, nbytes: int, pattern: str):
        """One lock-step round of a phase of ``pattern``: the busiest GPU port's and the busiest NIC's messages,
        concurrently."""
        env, nic, procs = self.env, self.cluster.nic, []
        if load.gpu_tx or load.gpu_rx:
            path = {self.gpu_tx: load.gpu_tx, self.gpu_rx: load.gpu_rx}
            if self.fabric is not None:
                path[self.fabric] = load.fabric
            path = {link: k for link, k in path.items() if k}
            procs.append(env.process(self.net.message(nbytes, path, self.cluster.intra.latency)))
        if load.nic_tx or load.nic_rx:
            path = {self.nic_tx: load.nic_tx, self.nic_rx: load.nic_rx}
            if self.uplink is not None:
                path[self.uplink] = load.node_tx
            path = {link: k for link, k in path.items() if k}
            timeouts = incast_timeouts(burst_bytes(load, nbytes), nic.incast_onset_bytes, nic.incast_certain_bytes)
            self.incast_timeouts += timeouts
            if pattern in COLLECTIVE_KERNEL_PATTERNS:  # one step of a collective: a step's cost at each NIC
                overhead, posts = nic.step_overhead, max(load.nic_tx, load.nic_rx)
            else:  # point-to-point operations, which each GPU's proxy thread posts one by one, per peer
                overhead, posts = nic.message_overhead, max(load.gpu_net_tx, load.gpu_net_rx)
            procs.append(env.process(self.net.message(nbytes, path, nic.latency, overhead, posts,
                                                      timeouts * nic.retransmission_timeout)))
        yield env.all_of(procs)

    def run(self, schedule: Schedule):
        """Process: the schedule's phases one after another (memoised: identical collectives take equal time)."""
        key = (schedule.scheme, schedule.layout, schedule.padded_dim,
               tuple((ph.name, ph.chunk_elements, ph.bits_per_element, ph.header_bytes) for ph in schedule.phases))
        if key in self.memo:
            seconds, timeouts = self.memo[key]
            self.incast_timeouts += timeouts
            yield self.env.timeout(seconds)
            return
        start, timeouts_before = self.env.now, self.incast_timeouts
        for phase in schedule.phases:
            for load, nbytes, repeat in phase_plan(phase, schedule.layout, self.cluster.nic.count).rounds:
                if load.empty:
                    continue
                first, timeouts = self.env.now, self.incast_timeouts
                yield from self.round(load, nbytes, phase.pattern)
                if repeat > 1:  # the same round again on the same idle links takes the same time
                    self.incast_timeouts += (repeat - 1) * (self.incast_timeouts - timeouts)
                    yield self.env.timeout((repeat - 1) * (self.env.now - first))
        self.memo[key] = (self.env.now - start, self.incast_timeouts - timeouts_before)


def collective_time(schedule: Schedule, cluster: Cluster) -> float:
    """Seconds one collective takes alone on an idle cluster."""
    env = simpy.Environment()
    fabric = Fabric(env, cluster)
    env.process(fabric.run(schedule))
    env.run()
    return env.now


# ---------------------------------------------------------------------------------------- NCCL's algorithm choice
# NCCL 2.10-era Simple-protocol constants from src/graph/tuning.cc (anchor_sim.md sec. 2), microseconds.
NCCL_BASE_LATENCY = {"ring": 8.4, "tree": 8.4}
NCCL_HW_LATENCY = {"nvlink": {"ring": 3.4, "tree": 4.0}, "pci": {"ring": 5.7, "tree": 4.0},
                   "net": {"ring": 14.0, "tree": 14.0}}
NCCL_TREE_BW_FACTOR = 0.92 * 0.85  # tree all-reduce: busBw * 0.92, then * 0.85 for the plain TREE pattern
NCCL_RING_PLATEAU = 1.4  # multi-node Simple ring all-reduce latency factor on sm80+


def nccl_allreduce_algorithm(cluster: Cluster, nbytes: float) -> str:
    """'ring' or 'tree', whichever NCCL's own cost model (ncclTopoGetAlgoTime) says is faster."""
    n, g = cluster.n_nodes, cluster.gpus_per_node
    p = n * g
    if n == 1:
        return "ring"  # NCCL's tree needs several nodes to pay off; inside one node the ring wins
    link = "pci" if "pcie" in cluster.intra.name else "nvlink"
    bus = min(cluster.nic.count * cluster.nic.bandwidth, cluster.intra.port_bandwidth) / 1e6  # bytes per us
    ring_lat = NCCL_BASE_LATENCY["ring"] + (2 * (p - 1) - 2 * (n - 1)) * NCCL_HW_LATENCY[link]["ring"] \
        + 2 * (n - 1) * NCCL_HW_LATENCY["net"]["ring"]
    ring = NCCL_RING_PLATEAU * ring_lat + nbytes / (bus * p / (2 * (p - 1)))
    tree_lat = NCCL_BASE_LATENCY["tree"] + 2 * ((g - 1) * NCCL_HW_LATENCY[link]["tree"]
                                                + math.log2(n) * NCCL_HW_LATENCY["net"]["tree"])
    tree = tree_lat + nbytes / (bus * NCCL_TREE_BW_FACTOR * 0.5)
    return "tree" if tree < ring else "ring"


def fp32_allreduce(cluster: Cluster, dim: int) -> Schedule:
    """The fp32 all-reduce DDP asks NCCL for, with the algorithm NCCL would pick."""
    layout = Layout(cluster.n_nodes, cluster.gpus_per_node)
    if nccl_allreduce_algorithm(cluster, 4 * dim) == "tree":
        return tree_allreduce(layout, dim)
    return allreduce(layout, dim)


COLLECTIVES = ("ring-allreduce", "tree-allreduce", "reduce-scatter", "all-gather", "all-to-all", "parameter-server")


def collective_schedule(name: str, layout: Layout, dim: int, bits: int = 32) -> Schedule:
    """A standalone collective over every rank, from ``birder_ref.schedules``' patterns: ring or NCCL-tree
    all-reduce, ring reduce-scatter, ring all-gather, all-to-all, or a parameter server (push, then pull)."""
    if name == "ring-allreduce":
        return allreduce(layout, dim, bits)
    if name == "tree-allreduce":
        return tree_allreduce(layout, dim, bits)
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r}; choose one of {', '.join(COLLECTIVES)}")
    p = layout.n_ranks
    D = padded_dim(dim, p)
    everyone = (tuple(range(p)),)
    widths = (bits,) * (p - 1)
    if name == "reduce-scatter":
        phases = (Phase("reduce_scatter", "ring_reduce_scatter", everyone, D // p, widths, "reduce"),)
    elif name == "all-gather":
        phases = (Phase("all_gather", "ring_all_gather", everyone, D // p, widths, "copy"),)
    elif name == "all-to-all":
        phases = (Phase("all_to_all", "all_to_all", everyone, D // p, (bits,) if p > 1 else (), "copy"),)
    else:
        with_server = (tuple(range(p)) + (layout.server,),)
        phases = (Phase("push", "push", with_server, D, (bits,), "reduce"),
                  Phase("pull", "pull", with_server, D, (bits,), "copy"))
    return Schedule(name, layout, int(dim), D, phases)


def step_schedule(optimizer: str, cluster: Cluster, dim: int, scheme: str | None = None,
                  full_precision: bool = False) -> Schedule:
    """The schedule one communicating step of ``optimizer`` runs (from ``birder_ref.schedules``)."""
    if optimizer in ("sgdm", "adam") or (full_precision and optimizer != "marsit"):
        return fp32_allreduce(cluster, dim)
    layout = Layout(cluster.n_nodes, cluster.gpus_per_node)
    if optimizer == "birder":
        return optimizer_schedule(optimizer, layout, dim, scheme=scheme)
    options = {"full_precision": True} if full_precision else {}
    return optimizer_schedule(optimizer, layout, dim, **options)
