"""System layer: collectives as NCCL runs them, timed on the network layer's flows.

(Over 600 lines: NCCL's tuner (latencies, algorithm and protocol choice), collectives as flows and the
training step's schedule of them form one cost model; a split along those three lines is possible and not
yet made.)

``birder_ref.schedules`` is the single source of who sends what. An NCCL operation (one all-reduce, or one phase
of a 1-bit schedule: a reduce-scatter, an all-to-all, an all-gather) is pipelined: its bytes stream over every
link at once, so its time is NCCL's latency, paid once per operation, plus the time its flows take on shared
links (``sim.network``: max-min fair sharing, recomputed as flows start and end), divided by the protocol's
bandwidth factor:

    T(op) = latency(algorithm, protocol) + T_flows / factor(protocol)            (NCCL src/graph/tuning.cc)

with the protocol (LL, LL128, Simple) that makes it fastest, as NCCL's tuner tries to. Latencies are tuning.cc's
per algorithm and protocol: a base latency per operation, a hardware latency per pipeline step (NVLink / PCI for
steps inside a node, NET for steps between nodes, plus the transport's own per-hop latency), NCCL's per-step net
overhead for multi-node rings, and the ring plateau factor. Point-to-point operations (all-to-all, direct
all-gather, push, pull) pay a published per-peer cost. A site profile adds what only that site showed (per-step
and per-message overheads, TCP incast timeouts).

Symmetry. Every node of a data-parallel job runs the same schedule, so one representative node's links carry
the busiest counts of every kind of link (a flow of multiplicity k adds k on each link it crosses), and the
flows arriving at its receive ports mirror those leaving its transmit ports. ``expanded_flow_time`` builds every
link and every message of the whole cluster instead; tests check the two agree. Rings over several GPUs per node
use every NIC (NCCL's channels, rail-aligned: GPU i on NIC i * count // G), so the node's ring traffic is spread
over its NICs. Counting costs O(p) per phase, never the p^2 messages of a flat all-to-all.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import simpy

from birder_ref.registry import simulated_spec
from birder_ref.schedules import (
    Layout,
    Phase,
    Schedule,
    allreduce,
    hybrid_shard_reduce,
    padded_dim,
    tree_allreduce,
)
from sim.hardware import GPUS, Cluster, framework_preset, nccl_channels
from sim.network import Link, transfer_time

PROTOCOLS = ("LL", "LL128", "Simple")

# ------------------------------------------------------------------- NCCL's constants (src/graph/tuning.cc, master)
BASE_LATENCY_US = {"tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}, "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}}
HW_LATENCY_US = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}},
    "pci": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
}
# [assumption, unsourced] no figure here gives the small-message latency of a push-pull library's own transport
# (BytePS's ps-lite, TensorFlow's gRPC); its one hop to the servers is charged NCCL's Simple ring base latency plus one
# NET hop (the figures above) and the NIC's own latency and per-peer cost, as a point-to-point NCCL step would be
SERVERS_LATENCY_PROTOCOL = "Simple"
NET_OVERHEAD_US = 1.0  # getNetOverhead on x86 Intel (2.0 on AMD), x3 for Simple: posting a network step
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4}  # Simple ring all-reduce latency factor, multi-node
# bandwidth factors: LL moves 4 data bytes per 8-byte line; LL128 120 of 128; tree all-reduce busBw * 0.92, and
# * 0.85 for the plain TREE pattern; tree LL busBw / 3.8, tree LL128 * 120/128
RING_FACTOR = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
TREE_FACTOR = {"LL": 1 / 3.8, "LL128": 120 / 128, "Simple": 0.92 * 0.85}
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MB: NCCL's static correction of tree bandwidth
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}


# ------------------------------------------- NCCL's channels (NVIDIA/nccl 2.30.7, src/enqueue.cc, graph/tuning.cc)
# An operation runs on channels, each a ring (or tree) of its own with 1/nChannels of the bandwidth: tuning.cc
# models busBw = nChannels x per-channel bandwidth, capped per channel and protocol as below.
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}  # NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS (src/include/device.h)
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}  # NCCL_*_THREAD_THRESHOLD bytes per thread (include/comm.h);
# tuning.cc multiplies the ring's LL threshold by nRanks
# GB/s of bus bandwidth (tuning.cc's ncclTunerConstantsDefaults). llMaxBws: LL's ceiling, by GPU arch on one
# node, by CPU on several (row Intel: NET_OVERHEAD_US assumes Intel hosts too), 2 nodes / more.
LL_MAX_BW = {"single": {"volta": 39.0, "ampere": 87.7, "hopper": 141.0}, "intel": (39.0, 20.4)}
PER_CHANNEL_MAX_BW = {  # (2 nodes, more than 2 nodes) per channel
    ("ring", "LL128"): {"volta": (20.0, 20.0), "ampere": (20.0, 20.0), "hopper": (36.7, 36.7)},
    ("tree", "LL128"): {"volta": (20.0, 20.0), "ampere": (20.0, 20.0), "hopper": (36.7, 29.0)},
    ("tree", "Simple"): {"volta": (18.5, 10.0), "ampere": (23.6, 17.8), "hopper": (41.4, 36.0)},  # perChMaxTreeBws
}
PER_CHANNEL_MAX_BW[("tree", "LL")] = PER_CHANNEL_MAX_BW[("tree", "Simple")]  # tree all-reduce: every protocol


def channels_used(nbytes: float, channels: int, protocol: str, algorithm: str, ranks: int) -> int:
    """enqueue.cc topoGetAlgoInfo: while the operation's bytes are below channels x threads x the protocol's
    bytes per thread, one channel fewer (at least one). Small operations run on few channels, each with its
    share of the bandwidth."""
    threshold = THREAD_THRESHOLD[protocol] * (ranks if (algorithm == "ring" and protocol == "LL") else 1)
    per_channel = MAX_THREADS[protocol] * threshold
    return max(1, min(channels, int(nbytes // per_channel)))


def bus_bandwidth_cap(cluster: Cluster, algorithm: str, protocol: str, channels: int) -> float:
    """Bytes/s of bus bandwidth tuning.cc lets ``channels`` channels reach with this algorithm and protocol on
    several nodes (math.inf where it sets none): LL's ceiling, and LL128's and the tree's per-channel ceilings."""
    arch, two = _arch(cluster), cluster.n_nodes <= 2
    cap = math.inf
    if protocol == "LL":
        cap = LL_MAX_BW["intel"][0 if two else 1] * 1e9
    per_channel = PER_CHANNEL_MAX_BW.get((algorithm, protocol), {}).get(arch)
    if per_channel is not None:
        cap = min(cap, channels * per_channel[0 if two else 1] * 1e9)
    return cap


def protocols(cluster: Cluster, multi_node: bool) -> tuple[str, ...]:
    """LL128 runs on NVLink/PCI paths and over verbs, not over sockets (NCCL enables it per path type)."""
    return PROTOCOLS if (not multi_node or cluster.nic.transport == "ib") else ("LL", "Simple")


def tree_correction(protocol: str, nbytes: float) -> float:
    log = int(math.log2(nbytes / 64)) if nbytes >= 64 else -1
    return TREE_CORRECTION[protocol][log] if 0 <= log < 23 else 1.0


# ------------------------------------------------------------------------------------------------ counting
@dataclass(frozen=True)
class RoundLoad:
    """Message counts of one phase's round, at the busiest place of each kind (flow multiplicities; NIC counts
    are fractional where a ring's node-crossing edge is spread over the node's NICs by NCCL's channels)."""

    gpu_tx: float = 0  # intra-node messages the busiest GPU sends
    gpu_rx: float = 0  # ... receives
    fabric: float = 0  # intra-node messages of the busiest node (its fabric's load)
    nic_tx: float = 0  # inter-node messages leaving the busiest NIC
    nic_rx: float = 0  # inter-node messages arriving at the busiest NIC
    node_tx: float = 0  # messages leaving the busiest leaf switch for the spine (its uplinks' load)
    node_rx: float = 0  # messages arriving at the busiest leaf switch from the spine (its downlinks' load)
    gpu_net_tx: int = 0  # inter-node messages the busiest GPU sends (its proxy posts them one by one)
    gpu_net_rx: int = 0  # ... receives
    intra_total: int = 0  # intra-node messages sent by GPUs in the whole cluster
    inter_total: int = 0  # inter-node messages sent by GPUs (not parameter servers) in the whole cluster
    pcie_tx: float = 0  # messages, intra- and inter-node, the busiest GPU sends through its own link
    pcie_rx: float = 0  # ... receives

    @property
    def empty(self) -> bool:
        return self.fabric == 0 and self.nic_tx == 0 and self.nic_rx == 0


def rail(layout: Layout, endpoint: int, nic_count: int) -> int:
    """The NIC a GPU uses: GPU i of a node uses NIC i * count // G (rail-aligned)."""
    return layout.local_rank(endpoint) * nic_count // layout.gpus_per_node


class _Counts:
    """Accumulates the messages of one round by GPU, node and NIC (endpoint = node * G + local rank)."""

    def __init__(self, layout: Layout, nic_count: int, leaf: int = 1):
        self.layout, self.nic_count, self.leaf = layout, nic_count, leaf
        self.gpu_tx, self.gpu_rx, self.fabric = Counter(), Counter(), Counter()
        self.nic_tx, self.nic_rx, self.node_tx, self.node_rx = Counter(), Counter(), Counter(), Counter()
        self.gpu_net_tx, self.gpu_net_rx = Counter(), Counter()
        self.pcie_tx, self.pcie_rx = Counter(), Counter()
        self.intra_total = self.inter_total = 0

    def nic(self, endpoint: int) -> tuple[int, int]:
        return self.layout.node_of(endpoint), rail(self.layout, endpoint, self.nic_count)

    def send(self, src: int, dst: int, spread: bool = False, weight: float = 1.0) -> None:
        """One message (of ``weight``: 1, or its bytes); ``spread``: a ring edge that NCCL's channels spread over
        all NICs of both nodes."""
        src_node, dst_node = self.layout.node_of(src), self.layout.node_of(dst)
        self.pcie_tx[src] += weight
        self.pcie_rx[dst] += weight
        if src_node == dst_node:
            self.gpu_tx[src] += weight
            self.gpu_rx[dst] += weight
            self.fabric[src_node] += weight
            self.intra_total += 1
            return
        if spread:
            for j in range(self.nic_count):
                self.nic_tx[(src_node, j)] += weight / self.nic_count
                self.nic_rx[(dst_node, j)] += weight / self.nic_count
        else:
            self.nic_tx[self.nic(src)] += weight
            self.nic_rx[self.nic(dst)] += weight
        if src_node // self.leaf != dst_node // self.leaf:  # crosses the spine
            self.node_tx[src_node // self.leaf] += weight
            self.node_rx[dst_node // self.leaf] += weight
        self.gpu_net_tx[src] += 1
        self.gpu_net_rx[dst] += 1
        self.inter_total += src < self.layout.n_ranks  # a GPU's, not a server's

    def everyone_to_everyone(self, group: tuple[int, ...], weight: float = 1.0) -> None:
        """One message from every member to every other member, counted in O(len(group))."""
        node_of, q = self.layout.node_of, len(group)
        on_node = Counter(node_of(ep) for ep in group)
        on_leaf = Counter(node // self.leaf for node in on_node.elements())
        for ep in group:
            node = node_of(ep)
            local, remote = on_node[node] - 1, q - on_node[node]
            far = q - on_leaf[node // self.leaf]
            self.gpu_tx[ep] += local * weight
            self.gpu_rx[ep] += local * weight
            self.pcie_tx[ep] += (q - 1) * weight
            self.pcie_rx[ep] += (q - 1) * weight
            self.fabric[node] += local * weight
            self.intra_total += local
            self.nic_tx[self.nic(ep)] += remote * weight
            self.nic_rx[self.nic(ep)] += remote * weight
            self.node_tx[node // self.leaf] += far * weight
            self.node_rx[node // self.leaf] += far * weight
            self.gpu_net_tx[ep] += remote
            self.gpu_net_rx[ep] += remote
            self.inter_total += remote

    def stars(self, groups, inward: bool, weight: float = 1.0) -> None:
        """Every group's members each send one message to its root (its last member; ``inward``) or receive one
        from it: what ``send`` counts message by message, counted with arrays (the same keys and, added in the
        same order, the same sums) for a parameter server's push and pull, whose groups span every node."""
        sizes = np.fromiter((len(grp) - 1 for grp in groups), dtype=np.int64)
        if not sizes.sum():
            return
        members = np.fromiter((ep for grp in groups for ep in grp[:-1]), dtype=np.int64, count=int(sizes.sum()))
        roots = np.repeat(np.fromiter((grp[-1] for grp in groups), dtype=np.int64, count=len(sizes)), sizes)
        src, dst = (members, roots) if inward else (roots, members)
        layout, ranks = self.layout, self.layout.n_ranks
        src_node, dst_node = layout.node_of(src), layout.node_of(dst)  # both take arrays as they take endpoints

        def add(counter: Counter, keys: np.ndarray, weights: float = weight, key_of=lambda key: key) -> None:
            unique, index = np.unique(keys, return_inverse=True)
            sums = np.bincount(index, weights=np.full(keys.shape, weights, dtype=float))
            for key, value in zip(unique.tolist(), sums.tolist(), strict=True):
                counter[key_of(key)] += value

        def add_nics(counter: Counter, nodes: np.ndarray, endpoints: np.ndarray) -> None:
            # (node, rail) keys as one integer each, node x nic_count + rail (``_Counts.nic``)
            add(counter, nodes * self.nic_count + rail(layout, endpoints, self.nic_count),
                key_of=lambda key: divmod(key, self.nic_count))

        add(self.pcie_tx, src)
        add(self.pcie_rx, dst)
        local = src_node == dst_node
        add(self.gpu_tx, src[local])
        add(self.gpu_rx, dst[local])
        add(self.fabric, src_node[local])
        self.intra_total += int(local.sum())
        far = ~local
        s, d, sn, dn = src[far], dst[far], src_node[far], dst_node[far]
        add_nics(self.nic_tx, sn, s)
        add_nics(self.nic_rx, dn, d)
        spine = sn // self.leaf != dn // self.leaf
        add(self.node_tx, sn[spine] // self.leaf)
        add(self.node_rx, dn[spine] // self.leaf)
        add(self.gpu_net_tx, s, 1)
        add(self.gpu_net_rx, d, 1)
        self.inter_total += int((s < ranks).sum())

    def load(self) -> RoundLoad:
        def top(c: Counter) -> float:
            return max(c.values(), default=0)

        return RoundLoad(top(self.gpu_tx), top(self.gpu_rx), top(self.fabric), top(self.nic_tx), top(self.nic_rx),
                         top(self.node_tx), top(self.node_rx), top(self.gpu_net_tx), top(self.gpu_net_rx),
                         self.intra_total, self.inter_total, top(self.pcie_tx), top(self.pcie_rx))


def ring_spreads(group: tuple[int, ...], layout: Layout) -> bool:
    """Whether NCCL's channels spread this ring's node crossings over every NIC: a ring through several GPUs of
    a node (a flat ring) crosses nodes once per channel, each channel through another NIC."""
    return layout.nodes_spanned(group) < len(group)


def messages(phase: Phase, layout: Layout, group: tuple[int, ...]):
    """(src, dst) of every message of one group in one pipelined round (a tree: all levels at once)."""
    return phase.pattern.edges(phase, group)


def _count_into(counts: _Counts, phase: Phase, layout: Layout, weight: float = 1.0) -> None:
    if phase.pattern.name in ("push", "pull"):
        counts.stars([grp for grp in phase.groups if len(grp) >= 2], phase.pattern.name == "push", weight)
        return
    for group in phase.groups:
        if len(group) < 2:
            continue
        if phase.pattern.everyone_to_everyone:
            counts.everyone_to_everyone(group, weight)
            continue
        spread = phase.pattern.is_ring and ring_spreads(group, layout)
        for src, dst in messages(phase, layout, group):
            counts.send(src, dst, spread, weight)


LINK_KINDS = ("gpu_tx", "gpu_rx", "fabric", "nic_tx", "nic_rx", "node_tx", "node_rx", "pcie_tx", "pcie_rx")


@lru_cache(maxsize=1024)
def _phase_counts(phase: Phase, layout: Layout, nic_count: int, leaf: int = 1) -> _Counts:
    """Messages of one phase (structure only) on every link of every kind, by link: counted once, read by the
    joint byte load of an operation and by the phase's own load."""
    counts = _Counts(layout, nic_count, leaf)
    _count_into(counts, phase, layout)
    return counts


def _link_counters(phase: Phase, layout: Layout, nic_count: int, leaf: int = 1) -> dict[str, Counter]:
    counts = _phase_counts(phase, layout, nic_count, leaf)
    return {kind: getattr(counts, kind) for kind in LINK_KINDS}


@lru_cache(maxsize=256)
def _joint_counts(phases: tuple[Phase, ...], layout: Layout, nic_count: int, leaf: int = 1) -> dict[str, np.ndarray]:
    """Per link kind, the messages each phase (structure only) puts on each link (a share where NICs split them):
    a links x phases matrix, rows over the links any phase uses (counted once per structure; buckets of every size
    read it)."""
    counters = [_link_counters(ph, layout, nic_count, leaf) for ph in phases]
    out = {}
    for kind in LINK_KINDS:
        links = list(dict.fromkeys(key for counter in counters for key in counter[kind]))
        out[kind] = np.array([[counter[kind].get(key, 0) for counter in counters] for key in links],
                             dtype=np.float64).reshape(len(links), len(phases))
    return out


def _joint_bytes(phases: tuple[Phase, ...], weights: tuple[int, ...], layout: Layout, nic_count: int,
                 leaf: int = 1) -> RoundLoad:
    """Bytes on the busiest link of each kind when the phases stream at once (one pipelined operation): summed
    link by link, so that the busiest place is busiest for the sum of the phases, not for each one apart. The sum
    runs phase by phase in order, as one float per link would (a matrix product may round otherwise)."""
    busiest = {}
    for kind, counts in _joint_counts(phases, layout, nic_count, leaf).items():
        total = np.zeros(len(counts))
        for column, weight in enumerate(weights):
            total += counts[:, column] * weight
        busiest[kind] = float(total.max()) if len(total) else 0
    return RoundLoad(**busiest)


def _is_server_phase(phase: Phase) -> bool:
    return isinstance(phase.groups, ServerGroups)


@lru_cache(maxsize=64)
def _server_placement(groups: ServerGroups, nic_count: int, leaf: int) -> tuple[int, int, int, tuple]:
    """What the closed form needs of a placement: the most servers on one endpoint and on one NIC, the most
    worker GPUs on one rail of a node, and (workers, servers) under each leaf switch. O(nodes + servers)."""
    layout = groups.layout
    n, g = layout.n_nodes, layout.gpus_per_node
    on_endpoint = Counter(groups.servers)
    on_nic = Counter((layout.node_of(sv), rail(layout, sv, nic_count)) for sv in groups.servers)
    on_rail = Counter(rail(layout, ep, nic_count) for ep in layout.node_ranks(0))
    workers_on_leaf = Counter(node // leaf for node in range(n))
    servers_on_leaf = Counter(layout.node_of(sv) // leaf for sv in groups.servers)
    leaves = tuple((g * workers_on_leaf[k], servers_on_leaf[k]) for k in set(workers_on_leaf) | set(servers_on_leaf))
    return max(on_endpoint.values()), max(on_nic.values()), max(on_rail.values()), leaves


def server_load(groups: ServerGroups, push: float, pull: float, intra: RoundLoad, layout: Layout, nic_count: int,
                leaf: int = 1) -> RoundLoad:
    """The busiest link of each kind when every worker pushes ``push`` bytes to every server and pulls ``pull``
    bytes from each, while intra-node phases load each worker GPU and node as ``intra`` does (already in bytes).
    Exact, equal to counting message by message, because the pattern is symmetric: servers sit on machines of
    their own (no worker link carries server traffic, no server link worker-to-worker traffic), every one of
    the W = n G workers sends the same bytes to every one of the S servers, so a worker GPU carries S x push out
    and S x pull in, a worker NIC that times its GPUs on that rail, an endpoint or NIC with m servers m x W x
    pull out and m x W x push in, and a leaf with w workers and s servers w (S - s) push + s (W - w) pull up to
    the spine (the same with push and pull swapped down). Every count is an integer times the bytes, so the sums
    are the same floats in any order."""
    per_endpoint, per_nic, per_rail, leaves = _server_placement(groups, nic_count, leaf)
    workers, servers = layout.n_ranks, len(groups.servers)
    return RoundLoad(
        gpu_tx=intra.gpu_tx, gpu_rx=intra.gpu_rx, fabric=intra.fabric,
        nic_tx=max(per_rail * servers * push, per_nic * workers * pull),
        nic_rx=max(per_rail * servers * pull, per_nic * workers * push),
        node_tx=max(w * (servers - s) * push + s * (workers - w) * pull for w, s in leaves),
        node_rx=max(w * (servers - s) * pull + s * (workers - w) * push for w, s in leaves),
        pcie_tx=max(intra.pcie_tx + servers * push, per_endpoint * workers * pull),
        pcie_rx=max(intra.pcie_rx + servers * pull, per_endpoint * workers * push))


def _server_byte_load(live: tuple[Phase, ...], layout: Layout, nic_count: int, leaf: int) -> RoundLoad | None:
    """``byte_load`` of summation servers on machines of their own in closed form (``server_load``), or None
    where the phases are not that pattern (their push and pull over the same ``ServerGroups``, with only
    intra-node phases beside them that load every worker GPU alike)."""
    servers = [ph for ph in live if _is_server_phase(ph)]
    if not servers:
        return None
    groups = servers[0].groups
    if any(ph.groups != groups or ph.pattern.name not in ("push", "pull") for ph in servers):
        return None
    nodes = tuple(layout.node_ranks(k) for k in range(layout.n_nodes))
    intra = {kind: 0 for kind in ("gpu_tx", "gpu_rx", "fabric", "pcie_tx", "pcie_rx")}
    for ph in live:
        if _is_server_phase(ph):
            continue
        if not (ph.pattern.is_ring and ph.groups == nodes):  # a ring inside each node: every GPU sends one edge
            return None
        load, nbytes = phase_load(ph, layout, nic_count, leaf), edge_bytes(ph)
        for kind in intra:
            intra[kind] += getattr(load, kind) * nbytes
    push = sum(edge_bytes(ph) for ph in servers if ph.pattern.name == "push")
    pull = sum(edge_bytes(ph) for ph in servers if ph.pattern.name == "pull")
    return server_load(groups, push, pull, RoundLoad(**intra), layout, nic_count, leaf)


def byte_load(phases: tuple[Phase, ...], layout: Layout, nic_count: int, leaf: int = 1) -> RoundLoad:
    """Bytes the busiest link of each kind carries in one operation of ``phases`` (all at once)."""
    live = tuple(ph for ph in phases if ph.n_rounds)
    closed = _server_byte_load(live, layout, nic_count, leaf)
    if closed is not None:
        return closed
    if len(live) == 1:  # one phase: its message counts (cached by structure) times its edge bytes
        load, nbytes = phase_load(live[0], layout, nic_count, leaf), edge_bytes(live[0])
        return RoundLoad(**{kind: getattr(load, kind) * nbytes for kind in LINK_KINDS})
    structure = tuple(_structure_key(ph) for ph in live)
    return _joint_bytes(structure, tuple(edge_bytes(ph) for ph in live), layout, nic_count, leaf)


@lru_cache(maxsize=4096)
def _phase_load(phase: Phase, layout: Layout, nic_count: int, leaf: int = 1) -> RoundLoad:
    if phase.n_rounds and _is_server_phase(phase):  # one message per edge: the closed form's counts
        groups, push = phase.groups, phase.pattern.name == "push"
        load = server_load(groups, int(push), int(not push), RoundLoad(), layout, nic_count, leaf)
        per_endpoint, workers, servers = (_server_placement(groups, nic_count, leaf)[0], layout.n_ranks,
                                          len(groups.servers))
        return replace(load, gpu_net_tx=servers if push else per_endpoint * workers,
                       gpu_net_rx=per_endpoint * workers if push else servers,
                       inter_total=workers * servers if push else 0)
    return _phase_counts(phase, layout, nic_count, leaf).load() if phase.n_rounds else RoundLoad()


@lru_cache(maxsize=4096)
def _structure_key(phase: Phase) -> Phase:
    """The phase with its byte sizes normalised, so buckets of different sizes share one count: made once per
    phase (a phase hashes its every-rank groups once, ``Phase.__hash__``), so that the key's hash is computed once
    too."""
    return Phase(phase.name, phase.pattern, phase.groups, 8, (8,) * phase.n_rounds, phase.op, 0)


def phase_load(phase: Phase, layout: Layout, nic_count: int, leaf: int = 1) -> RoundLoad:
    return _phase_load(_structure_key(phase), layout, nic_count, leaf)


def edge_bytes(phase: Phase) -> int:
    """Bytes one edge of the phase carries in all: a ring edge every round's chunk, a tree edge its piece once
    (pipelined), a point-to-point message its chunk."""
    return phase.pattern.edge_bytes(phase) if phase.n_rounds else 0


@dataclass(frozen=True)
class Traffic:
    """Bytes the GPUs send per collective, averaged per GPU, split by where they go."""

    intra_node_bytes_per_gpu: float
    inter_node_bytes_per_gpu: float


def traffic(schedule: Schedule, nic_count: int = 1) -> Traffic:
    p = schedule.layout.n_ranks
    intra = inter = 0
    for phase in schedule.phases:
        load = phase_load(phase, schedule.layout, nic_count)
        nbytes = edge_bytes(phase)
        intra += load.intra_total * nbytes
        inter += load.inter_total * nbytes
    return Traffic(intra / p, inter / p)


# ---------------------------------------------------------------------------------------------- the flows
class NodeLinks:
    """The links of the representative node: a GPU's port each way, the node's intra fabric, one of its NICs
    each way, and its leaf switch's spine uplink and downlink (the leaf's nodes x NICs x bandwidth /
    oversubscription; absent if non-blocking)."""

    def __init__(self, cluster: Cluster):
        intra = cluster.intra
        self.gpu_tx, self.gpu_rx = Link("gpu_tx", intra.port_bandwidth), Link("gpu_rx", intra.port_bandwidth)
        self.fabric = Link("fabric", intra.fabric_bandwidth) if math.isfinite(intra.fabric_bandwidth) else None
        bw = cluster.rail_bandwidth  # one rail: a NIC, or the several NICs of one GPU
        self.nic_tx, self.nic_rx = Link("nic_tx", bw), Link("nic_rx", bw)
        spine = cluster.nodes_per_leaf * cluster.rails * bw / cluster.oversubscription
        self.shared_pcie = intra.kind == "pci"  # a PCIe node: a GPU's own link carries its NIC traffic too
        oversubscribed = cluster.oversubscription > 1
        self.up = Link("switch_uplink", spine) if oversubscribed else None
        self.down = Link("switch_downlink", spine) if oversubscribed else None

    def flows(self, load: RoundLoad, nbytes: float) -> list[tuple[float, dict[Link, float]]]:
        out = []
        if load.gpu_tx or load.gpu_rx:
            path = {self.gpu_tx: load.gpu_tx, self.gpu_rx: load.gpu_rx}
            if self.fabric is not None:
                path[self.fabric] = load.fabric
            out.append((nbytes, path))
        if load.nic_tx or load.nic_rx:
            path = {self.nic_tx: load.nic_tx, self.nic_rx: load.nic_rx}
            if self.shared_pcie:  # what the busiest GPU's link carries beyond its intra-node messages
                for port, extra in ((self.gpu_tx, load.pcie_tx - load.gpu_tx),
                                    (self.gpu_rx, load.pcie_rx - load.gpu_rx)):
                    if extra > 0:
                        path[port] = extra
            if self.up is not None:
                path[self.up], path[self.down] = load.node_tx, load.node_rx
            out.append((nbytes, path))
        return out


def flow_time(phases: tuple[Phase, ...], layout: Layout, cluster: Cluster) -> float:
    """Seconds the phases' bytes take when they stream at once over the representative node's links (one flow
    of one byte whose multiplicity on each link is the bytes the busiest such link carries)."""
    load = byte_load(phases, layout, cluster.rails, cluster.nodes_per_leaf)
    return transfer_time(NodeLinks(cluster).flows(load, 1.0))


def expanded_flow_time(phases: tuple[Phase, ...], layout: Layout, cluster: Cluster) -> float:
    """The same as ``flow_time`` with every link of every node and every message of the cluster (for tests at
    small sizes: the representative node is exact where the schedule is symmetric)."""
    k, nic_bw = cluster.rails, cluster.rail_bandwidth
    links: dict[tuple, Link] = {}

    def link(*key) -> Link:
        if key not in links:
            kind = key[0]
            bw = {"gpu_tx": cluster.intra.port_bandwidth, "gpu_rx": cluster.intra.port_bandwidth,
                  "fabric": cluster.intra.fabric_bandwidth, "nic_tx": nic_bw, "nic_rx": nic_bw,
                  "up": cluster.nodes_per_leaf * k * nic_bw / cluster.oversubscription,
                  "down": cluster.nodes_per_leaf * k * nic_bw / cluster.oversubscription}[kind]
            links[key] = Link(str(key), bw)
        return links[key]

    flows = []
    for phase in phases:
        nbytes = edge_bytes(phase)
        for group in phase.groups:
            if len(group) < 2:
                continue
            spread = phase.pattern.is_ring and ring_spreads(group, layout)
            for src, dst in messages(phase, layout, group):
                a, b = layout.node_of(src), layout.node_of(dst)
                if a == b:
                    path = {link("gpu_tx", src): 1, link("gpu_rx", dst): 1}
                    if math.isfinite(cluster.intra.fabric_bandwidth):
                        path[link("fabric", a)] = 1
                    flows.append((nbytes, path))
                    continue
                rails = [(j, j) for j in range(k)] if spread else [(rail(layout, src, k), rail(layout, dst, k))]
                for ja, jb in rails:
                    path = {link("nic_tx", a, ja): 1, link("nic_rx", b, jb): 1}
                    if cluster.intra.kind == "pci":  # the GPUs' own PCIe links carry it to and from the NICs
                        path[link("gpu_tx", src)], path[link("gpu_rx", dst)] = 1, 1
                    leaf_a, leaf_b = a // cluster.nodes_per_leaf, b // cluster.nodes_per_leaf
                    if cluster.oversubscription > 1 and leaf_a != leaf_b:
                        path[link("up", leaf_a)], path[link("down", leaf_b)] = 1, 1
                    flows.append((nbytes / len(rails), path))
    return transfer_time(flows)


# ---------------------------------------------------------------------------------------------- latencies
def _arch(cluster: Cluster) -> str:
    return GPUS.get(cluster.gpu, {}).get("arch", "ampere")


def ring_latency(cluster: Cluster, protocol: str, steps: int, inter_steps: int, allreduce_op: bool) -> float:
    """tuning.cc's ring latency of one operation: base once, then each step's hardware latency (a multi-node
    ring's intra steps at least the net overhead), NET steps plus the transport's hop latency, the plateau."""
    multi = inter_steps > 0
    intra = HW_LATENCY_US[cluster.intra.kind]["ring"][protocol]
    if multi:
        intra = max(intra, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
    ppn1 = cluster.gpus_per_node == 1
    inter = HW_LATENCY_US["net"]["tree" if ppn1 else "ring"][protocol] + cluster.nic.latency * 1e6
    lat = BASE_LATENCY_US["ring"][protocol] + (steps - inter_steps) * intra + inter_steps * inter
    lat += steps * cluster.nic.step_overhead * 1e6 if multi else 0.0
    if allreduce_op and multi and protocol == "Simple":
        lat *= RING_PLATEAU.get(_arch(cluster), 1.4)
    return lat * 1e-6


def tree_latency(cluster: Cluster, protocol: str) -> float:
    """tuning.cc's tree all-reduce latency: base + 2 ((G - 1) intra + log2(n) NET) steps."""
    g, n = cluster.gpus_per_node, cluster.n_nodes
    intra = HW_LATENCY_US[cluster.intra.kind]["tree"][protocol]
    inter = HW_LATENCY_US["net"]["tree"][protocol] + cluster.nic.latency * 1e6
    depth = int(math.log2(n)) if n > 1 else 0
    steps = 2 * ((g - 1) + depth)
    lat = BASE_LATENCY_US["tree"][protocol] + 2 * ((g - 1) * intra + depth * inter)
    return (lat + steps * cluster.nic.step_overhead * 1e6) * 1e-6


def p2p_latency(cluster: Cluster, protocol: str, crosses_nodes: bool, remote_peers: int) -> float:
    """One point-to-point group (all-to-all, direct all-gather, push, pull): a base latency, one hop, and the
    published per-peer cost for each remote peer."""
    hop = (HW_LATENCY_US["net"]["ring"][protocol] + cluster.nic.latency * 1e6) if crosses_nodes else \
        HW_LATENCY_US[cluster.intra.kind]["ring"][protocol]
    return (BASE_LATENCY_US["ring"][protocol] + hop) * 1e-6 + remote_peers * cluster.nic.peer_overhead


# ------------------------------------------------------------------------------------------------ incast
TCP_INITIAL_WINDOW_BYTES = 10 * 1448  # Linux initial congestion window: 10 segments (RFC 6928) of 1448 B payload


def burst_bytes(load: RoundLoad, nbytes: float) -> float:
    """Bytes a round's synchronised senders push into the busiest NIC's switch port before any ACK returns: each
    of its ``nic_rx`` flows sends at most one window (TCP incast: Phanishayee et al., FAST 2008)."""
    return load.nic_rx * min(nbytes, TCP_INITIAL_WINDOW_BYTES)


def incast_timeouts(burst: float, onset: float, certain: float) -> float:
    """Expected TCP retransmission timeouts of one burst into one switch port: none up to ``onset`` bytes, one
    from ``certain`` on, linear in between."""
    if burst <= onset:
        return 0.0
    if burst >= certain:
        return 1.0
    return (burst - onset) / (certain - onset)


def incast_bracket(cluster: Cluster) -> tuple[float, float]:
    """(onset, certain) burst bytes into one switch port: a site's fitted bracket where it has one; else the
    switch's shared buffer under dynamic thresholds (Choudhury and Hahne, 1998): with N ports congested at
    once each queue may grow to alpha B / (1 + N alpha). In a point-to-point phase every NIC of the job
    receives at once, so N is the job's NICs on one switch (a leaf's where leaves are given). A burst up to
    that threshold never loses a packet; from twice it every burst loses one (linear between, as a site's)."""
    nic = cluster.nic
    if math.isfinite(nic.incast_onset_bytes) or not math.isfinite(nic.switch_buffer_bytes):
        return nic.incast_onset_bytes, nic.incast_certain_bytes
    nodes = cluster.n_nodes if cluster.nodes_per_leaf == 1 else min(cluster.n_nodes, cluster.nodes_per_leaf)
    ports = nodes * nic.count
    onset = nic.buffer_alpha * nic.switch_buffer_bytes / (1 + ports * nic.buffer_alpha)
    return onset, 2 * onset


def switch_buffer_assumed(cluster: Cluster) -> bool:
    """Whether ``incast_bracket`` rests on a switch the user has not named: a preset's (or a transport default's)
    buffer, not a site's fitted onset nor a cluster file's own ``switch_buffer_bytes``."""
    nic = cluster.nic
    return (not math.isfinite(nic.incast_onset_bytes) and math.isfinite(nic.switch_buffer_bytes)
            and not any(what == "switch buffer" for what, _ in cluster.provenance))


def incast_basis(cluster: Cluster) -> str:
    """Where ``incast_bracket``'s onset comes from, in words: a site's fitted bracket, or the preset switch's
    buffer share over the job's congested ports (an assumed switch: its buffer decides the timeouts)."""
    nic = cluster.nic
    onset, _ = incast_bracket(cluster)
    if math.isfinite(nic.incast_onset_bytes):
        return f"{nic.name}'s fitted incast onset, {onset / 1e6:.2f} MB bursts into one switch port"
    nodes = cluster.n_nodes if cluster.nodes_per_leaf == 1 else min(cluster.n_nodes, cluster.nodes_per_leaf)
    named = "an assumed" if switch_buffer_assumed(cluster) else "the cluster file's"
    return (f"{named} switch buffer of {nic.switch_buffer_bytes / 1e6:.0f} MB shared by {nodes * nic.count} "
            f"congested ports: bursts above {onset / 1e6:.2f} MB into one port lose packets; "
            f"a deeper-buffered switch or a lossless fabric would not")


# ------------------------------------------------------------------------------------------------ operations
@dataclass(frozen=True)
class OpTime:
    seconds: float
    algorithm: str  # "ring", "tree" or "p2p"
    protocol: str
    incast_timeouts: float = 0.0


def operations(schedule: Schedule) -> list[tuple[str, tuple[Phase, ...]]]:
    """The NCCL operations of a schedule: an all-reduce (ring or tree) is one pipelined operation; every phase of
    any other schedule is an operation of its own (its own NCCL call)."""
    phases = tuple(ph for ph in schedule.phases if ph.n_rounds)
    if schedule.scheme in ("allreduce", "ring-allreduce"):
        return [("ring_allreduce", phases)] if phases else []
    if schedule.scheme in ("tree_allreduce", "tree-allreduce"):
        return [("tree_allreduce", phases)] if phases else []
    if schedule.scheme == SUMMATION_SERVERS:
        return [("servers", phases)] if phases else []
    if schedule.scheme == "hybrid_shard_reduce":  # a reduce-scatter in the node, then one all-reduce across nodes
        intra = tuple(ph for ph in phases if ph.name.startswith("intra"))
        inter = tuple(ph for ph in phases if ph.name.startswith("inter"))
        return [(kind, part) for kind, part in (("ring", intra), ("ring_allreduce", inter)) if part]
    return [("ring" if ph.pattern.is_ring else "p2p", (ph,)) for ph in phases]


def channel_time(cluster: Cluster, algorithm: str, protocol: str, t_bytes: float, buffer: float, bus_bytes: float,
                 ranks: int, multi_node: bool) -> float:
    """The bytes' time of a multi-node ring or tree on the channels NCCL gives it: ``t_bytes`` (all channels'
    share of the links) stretched by channels / channels used (enqueue.cc), and at least the bus bytes at
    tuning.cc's per-channel and LL ceilings. Within a node NCCL's channels are NVLink's and are not modelled."""
    if not multi_node:
        return t_bytes
    channels = nccl_channels(cluster)
    used = channels_used(buffer, channels, protocol, algorithm, ranks)
    return max(t_bytes * channels / used, bus_bytes / bus_bandwidth_cap(cluster, algorithm, protocol, used))


def op_time(kind: str, phases: tuple[Phase, ...], layout: Layout, cluster: Cluster,
            protocol: str | None = None) -> OpTime:
    """Seconds one NCCL operation takes alone on the cluster, with the fastest protocol (or ``protocol``)."""
    g = layout.gpus_per_node
    t_flow = flow_time(phases, layout, cluster)
    multi = any(layout.nodes_spanned(grp) > 1 for ph in phases for grp in ph.groups)
    choices = (protocol,) if protocol else (SERVERS_LATENCY_PROTOCOL,) if kind == "servers" else \
        protocols(cluster, multi)
    nic = cluster.nic
    best: OpTime | None = None
    for proto in choices:
        if kind == "tree_allreduce":
            piece = edge_bytes(phases[1]) if len(phases) > 1 else edge_bytes(phases[0])
            factor = TREE_FACTOR[proto] * tree_correction(proto, piece * 2 * g)
            # tuning.cc counts a tree all-reduce's bus bytes as twice the buffer (its busBw x 0.5 = algBw)
            t_bytes = channel_time(cluster, "tree", proto, t_flow / factor, piece * 2 * g, 2 * piece * 2 * g,
                                   layout.n_ranks, multi)
            t = tree_latency(cluster, proto) + t_bytes
            algorithm, timeouts = "tree", 0.0
        elif kind == "servers":  # a push-pull library's own transport, pipelined over its partitions: no NCCL
            # protocol; one hop's latency (SERVERS_LATENCY_PROTOCOL's, an assumption) and each worker's per-peer
            # cost to the servers
            t = p2p_latency(cluster, proto, True, server_messages(phases, layout, cluster)) + t_flow
            algorithm, timeouts = "servers", 0.0
        elif kind in ("ring_allreduce", "ring"):
            steps = sum(ph.n_rounds for ph in phases)
            inter = sum(layout.nodes_spanned(ph.groups[0]) - 1 for ph in phases)
            ring_bytes = sum(edge_bytes(ph) for ph in phases)  # what one ring edge carries: nccl-tests' bus bytes
            ranks = len(phases[0].groups[0])
            buffer = max(ph.message_bytes(0) for ph in phases) * ranks
            t_bytes = channel_time(cluster, "ring", proto, t_flow / RING_FACTOR[proto], buffer, ring_bytes, ranks,
                                   multi)
            t = ring_latency(cluster, proto, steps, inter, kind == "ring_allreduce") + t_bytes
            algorithm, timeouts = "ring", 0.0
        else:
            (ph,) = phases
            load = phase_load(ph, layout, cluster.rails, cluster.nodes_per_leaf)
            posts = max(load.gpu_net_tx, load.gpu_net_rx)
            t_bytes = t_flow / RING_FACTOR[proto]
            if nic.message_overhead > 0 and posts:  # a site's per-message cost, posted one peer after another
                t_bytes = max(nic.message_overhead + t_bytes, posts * nic.message_overhead + t_bytes / posts)
            timeouts = incast_timeouts(burst_bytes(load, edge_bytes(ph)), *incast_bracket(cluster)) \
                if load.nic_rx else 0.0
            t = p2p_latency(cluster, proto, load.nic_tx > 0, int(posts)) + t_bytes
            t += timeouts * nic.retransmission_timeout
            algorithm = "p2p"
        if best is None or t < best.seconds:
            best = OpTime(t, algorithm, proto, timeouts)
    return best


# ---------------------------------------------------------------- reduction in the switch: NVLS and CollNet
NVLS_LATENCY_US = 25.0  # tuning.cc: NVLS base latency 0, hwLatencies[NVLINK][NVLS][Simple] 25 us
COLLNET_LATENCY_US = {"net": 31.0, "intra": 3.7, "arity": 0.4}  # tuning.cc CollNetDirect: NET 31, NVLink 3.7, and
# "0.4 us arity serialization latency" per local rank
ALLREDUCE_SCHEMES = ("allreduce", "ring-allreduce", "tree_allreduce", "tree-allreduce")


def switch_allreduce(cluster: Cluster, nbytes: float) -> OpTime | None:
    """An all-reduce the switches reduce, where the hardware can (None elsewhere). Closed forms, exact for the
    bytes: each GPU sends its buffer into the switch once and receives the sum once, half the 2(p-1)/p buffers
    a ring moves. One node with NVLink SHARP (NVLS): the NVSwitch's measured all-reduce rate. Several nodes with
    InfiniBand SHARP (CollNet Direct): each node's NICs send the node's buffer up once and receive the result
    once, at the NICs' reduction rate, while NVLink still moves about twice the buffer inside the node
    (sjeaugey, NVIDIA/nccl issue 320); latencies are tuning.cc's."""
    g, nic = cluster.gpus_per_node, cluster.nic
    if cluster.n_nodes == 1:
        if g < 2 or not cluster.intra.nvls_bandwidth:
            return None
        return OpTime(NVLS_LATENCY_US * 1e-6 + nbytes / cluster.intra.nvls_bandwidth, "nvls", "Simple")
    if not nic.collnet_bandwidth:
        return None
    nics = nic.count * min(nic.collnet_bandwidth, cluster.nic_bandwidth)
    algbw = min(nics, cluster.intra.port_bandwidth / 2) if g > 1 else nics
    lat = COLLNET_LATENCY_US
    latency = 2 * (min(1, g - 1) * lat["intra"] + (g - 1) * lat["arity"]) + lat["net"] + nic.latency * 1e6
    return OpTime(latency * 1e-6 + nbytes / algbw, "collnet", "Simple")


def _schedule_key(schedule: Schedule, cluster: Cluster) -> tuple:
    return (schedule.scheme, schedule.layout, schedule.padded_dim, cluster,
            tuple((ph.name, ph.pattern, ph.chunk_elements, ph.bits_per_element, ph.header_bytes)
                  for ph in schedule.phases))


@lru_cache(maxsize=8192)
def _collective(key: tuple, schedule: Schedule, cluster: Cluster,
                in_switch: bool = True) -> tuple[float, float, tuple[OpTime, ...]]:
    ops = tuple(op_time(kind, phases, schedule.layout, cluster) for kind, phases in operations(schedule))
    if in_switch and ops and schedule.scheme in ALLREDUCE_SCHEMES:  # NCCL's NVLS / CollNet where they are faster
        # the first phase that moves bytes (a tree over one-GPU nodes has no intra-node phase)
        bits = next(ph.bits_per_element[0] for ph in schedule.phases if ph.n_rounds)
        switch = switch_allreduce(cluster, schedule.padded_dim * bits / 8)
        if switch is not None and switch.seconds < sum(o.seconds for o in ops):
            ops = (switch,)
    return sum(o.seconds for o in ops), sum(o.incast_timeouts for o in ops), ops


def collective_ops(schedule: Schedule, cluster: Cluster, in_switch: bool = True) -> tuple[OpTime, ...]:
    """The NCCL operations of one collective with their times; ``in_switch``: an all-reduce may be reduced in
    the switches where the hardware can (False: the ring or tree asked for)."""
    return _collective(_schedule_key(schedule, cluster), schedule, cluster, in_switch)[2]


def operation_spans(schedule: Schedule, cluster: Cluster) -> list[tuple[str, tuple[str, ...], OpTime]]:
    """The NCCL operations of one collective as ``Fabric.run`` times them, each with its name (its phases') and the
    link classes it crosses (``intra``: the node's fabric, ``inter``: the NICs), for a trace of the step."""
    ops = collective_ops(schedule, cluster)
    named = operations(schedule)
    if len(ops) != len(named):  # reduced in the switches (NVLS, CollNet): one operation for the whole all-reduce
        return [(f"{schedule.scheme} in the switches ({ops[0].algorithm})",
                 ("intra",) if cluster.n_nodes == 1 else ("intra", "inter"), ops[0])] if ops else []
    out = []
    for (kind, phases), op in zip(named, ops, strict=True):
        loads = [phase_load(ph, schedule.layout, cluster.rails) for ph in phases]
        tracks = tuple(t for t, used in (("intra", any(x.intra_total for x in loads)),
                                          ("inter", any(x.inter_total for x in loads))) if used)
        out.append((" + ".join(ph.name for ph in phases) or kind, tracks or ("intra",), op))
    return out


def collective_time(schedule: Schedule, cluster: Cluster) -> float:
    """Seconds one collective (a schedule: its NCCL operations one after another) takes alone on the cluster."""
    return _collective(_schedule_key(schedule, cluster), schedule, cluster)[0]


class Fabric:
    """The network as the workload layer sees it: a collective takes its time on the communication stream
    (DDP and the 1-bit hooks run one collective at a time, so each has the network to itself). With a
    ``collective_pace`` below 1 (a what-if: ``Cluster.collective_pace``), a collective in flight moves at that share
    of its own pace while the GPU runs work beside it (``gpu_busy``, which the workload sets), so its end moves
    whenever the GPU starts or stops."""

    def __init__(self, env: simpy.Environment, cluster: Cluster):
        self.env, self.cluster = env, cluster
        self.incast_timeouts = 0.0  # expected retransmission timeouts charged so far
        self.busy_until = 0.0  # when the collective in flight ends (GPU work beside it is slowed: sim.workload)
        self.started = env.event()  # succeeds when a collective starts, then is replaced
        self.pace = cluster.collective_pace
        self.gpu_busy = False
        self._left = 0.0  # the collective in flight's time still to go at its own pace
        self._since = 0.0  # when ``_left`` was last counted
        self._moved = env.event()  # succeeds when the collective in flight's end moves, then is replaced

    def _rate(self) -> float:
        return self.pace if self.gpu_busy else 1.0

    def set_gpu_busy(self, busy: bool) -> None:
        """The GPU starts (``busy``) or stops running work: a collective in flight changes pace from now, and
        ``busy_until`` moves at once (the GPU work reads it to know how long it is slowed)."""
        if self.pace < 1 and busy != self.gpu_busy and self.env.now < self.busy_until:
            self._left -= (self.env.now - self._since) * self._rate()
            self._since, self.gpu_busy = self.env.now, busy
            self.busy_until = self.env.now + max(self._left, 0.0) / self._rate()
            moved, self._moved = self._moved, self.env.event()
            moved.succeed()
        self.gpu_busy = busy

    def run(self, schedule: Schedule, cluster: Cluster | None = None):
        """Run one collective; ``cluster``: the one that times it, where it is not the whole cluster (a
        collective inside one node: ``sharded_schedules``)."""
        on = cluster or self.cluster
        seconds, timeouts, _ = _collective(_schedule_key(schedule, on), schedule, on)
        self.incast_timeouts += timeouts
        self._left, self._since = seconds, self.env.now
        self.busy_until = self.env.now + seconds / self._rate()
        started, self.started = self.started, self.env.event()
        started.succeed()
        if self.pace >= 1:
            yield self.env.timeout(seconds)
            return
        while True:  # until the end, moved whenever the GPU starts or stops, comes
            moved = self._moved
            yield self.env.timeout(max(0.0, self.busy_until - self.env.now)) | moved
            if not moved.triggered:
                break
        self._left = 0.0


# ---------------------------------------------------------------------------------------- NCCL's algorithm choice
def nccl_model_time(cluster: Cluster, nbytes: float, algorithm: str, protocol: str) -> float:
    """NCCL's own estimate (ncclTopoGetAlgoTime) of an all-reduce of ``nbytes``, in us, fed the achieved NIC
    bandwidth (the paper's NCCL 2.10.3: no two-node tree preference)."""
    n, p = cluster.n_nodes, cluster.n_gpus
    bus = min(cluster.nic.count * cluster.nic_bandwidth, cluster.intra.port_bandwidth) / 1e9 if n > 1 \
        else cluster.intra.port_bandwidth / 1e9  # GB/s = bytes per ns
    cap = bus_bandwidth_cap(cluster, algorithm, protocol, nccl_channels(cluster)) / 1e9 if n > 1 else math.inf
    if algorithm == "ring":
        bw = min(bus * RING_FACTOR[protocol], cap) * p / (2 * (p - 1))
        lat = ring_latency(cluster, protocol, 2 * (p - 1), 2 * (n - 1), True) * 1e6
    else:
        bw = min(bus * TREE_FACTOR[protocol], cap) * 0.5 * tree_correction(protocol, nbytes)
        lat = tree_latency(cluster, protocol) * 1e6
    return lat + nbytes / (1000 * bw)


def nccl_allreduce_algorithm(cluster: Cluster, nbytes: float) -> str:
    """'ring' or 'tree', whichever NCCL's own cost model says is faster over its protocols."""
    if cluster.n_nodes == 1:
        return "ring"
    allowed = protocols(cluster, True)
    ring = min(nccl_model_time(cluster, nbytes, "ring", pr) for pr in allowed)
    tree = min(nccl_model_time(cluster, nbytes, "tree", pr) for pr in allowed)
    return "tree" if tree < ring else "ring"


def fp32_allreduce(cluster: Cluster, dim: int, bits: int = 32) -> Schedule:
    """The all-reduce DDP asks NCCL for (``bits`` per element on the wire), with the algorithm NCCL would pick."""
    if nccl_allreduce_algorithm(cluster, bits // 8 * dim) == "tree":
        return tree_allreduce(cluster.layout, dim, bits)
    return allreduce(cluster.layout, dim, bits)


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


SUMMATION_SERVERS = "summation_servers"


class ServerGroups:
    """The push/pull groups of summation servers on machines of their own, made on demand: group s * G + j is
    the GPUs of local rank j on every worker node, then server s (the last member, the pattern's root). The
    same sequence as the tuple of those groups, but O(servers) to hold and to hash: the tuple has servers x G x
    nodes ranks (4e9 at 65,536 GPUs)."""

    def __init__(self, layout: Layout, servers: tuple[int, ...]):
        self.layout, self.servers = layout, servers

    def __len__(self) -> int:
        return len(self.servers) * self.layout.gpus_per_node

    def __getitem__(self, index: int) -> tuple[int, ...]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        g = self.layout.gpus_per_node
        return self.layout.local_rank_group(index % g) + (self.servers[index // g],)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __eq__(self, other) -> bool:
        return isinstance(other, ServerGroups) and (self.layout, self.servers) == (other.layout, other.servers)

    def __hash__(self) -> int:
        return hash((ServerGroups, self.layout, self.servers))

    def __repr__(self) -> str:
        return f"ServerGroups({self.layout!r}, servers={self.servers!r})"


def server_messages(phases: tuple[Phase, ...], layout: Layout, cluster: Cluster) -> int:
    """The servers one node's root process sends a tensor to, each paying the per-peer cost: the tensor's
    partitions (the framework's ``partition_bytes``; one if it sends tensors whole), at most one per server it
    reaches. The bytes are spread evenly over those servers all the same (``summation_servers``)."""
    push = [ph for ph in phases if ph.pattern.name == "push"]
    servers = {m for ph in push
               for m in (ph.groups.servers if _is_server_phase(ph) else (grp[-1] for grp in ph.groups))}
    partition = framework_preset(cluster.framework).partition_bytes
    tensor_bytes = sum(edge_bytes(ph) for ph in push) * layout.gpus_per_node * len(servers)
    return min(len(servers), math.ceil(tensor_bytes / partition) if partition else 1)


@lru_cache(maxsize=512)
def _server_groups(layout: Layout, nics: int, colocated: bool, count: int) -> tuple[tuple[int, ...], tuple, tuple]:
    """``summation_servers``' first ``count`` servers, the nodes and the push/pull groups: they depend on the
    layout and on how many servers a tensor reaches, not on its size, so they are built once per pair. Servers
    on machines of their own get ``ServerGroups`` (every worker pushes to every server: the closed form of
    ``server_load`` times them);
    servers on the worker nodes get the groups spelled out (a node's own server is left out of its groups, so
    the flows share the links differently: the message-by-message count times them, O(n^2 g))."""
    n, g = layout.n_nodes, layout.gpus_per_node
    first_node = 0 if colocated else n
    servers = tuple((first_node + s // nics) * g + (s % nics) * g // nics for s in range(count))
    nodes = tuple(layout.node_ranks(k) for k in range(n))
    if not colocated:
        return servers, nodes, ServerGroups(layout, servers)
    groups = tuple(tuple(ep for ep in layout.local_rank_group(j) if layout.node_of(ep) != layout.node_of(server))
                   + (server,) for server in servers for j in range(g))
    return servers, nodes, tuple(grp for grp in groups if len(grp) > 1)


def summation_servers(cluster: Cluster, dim: int, bits: int = 32) -> Schedule:
    """Push-pull through summation servers (BytePS, Jiang et al., OSDI 2020, Section 3; a TensorFlow parameter
    server): the GPUs of a node reduce-scatter inside it, each GPU pushes its shard, split evenly, to the
    servers, which sum and send the result back (pull), and the node all-gathers. As many server NICs as worker
    NICs (BytePS's rule: the servers' bandwidth at least the workers') unless ``cluster.servers`` says how many,
    on machines of their own or, with the framework's ``servers_on_workers``, on the worker nodes, one NIC each
    (what a node pushes to its own server stays inside it). A worker NIC so carries the gradient once each way,
    where a ring all-reduce carries it 2(p-1)/p times; fewer servers than worker NICs load the servers' NICs
    more. One pipelined operation: the libraries partition tensors and push, sum and pull the pieces concurrently.
    Each tensor is spread evenly over the servers, the steady state of BytePS hashing the 4,096,000-byte
    partitions of the many tensors in flight over every server (byteps/common/global.cc)."""
    layout, nics = cluster.layout, cluster.nic.count
    n, g = layout.n_nodes, layout.gpus_per_node
    colocated = framework_preset(cluster.framework).servers_on_workers
    count = cluster.servers or n * nics
    if colocated and count > n * nics:
        raise ValueError(f"{count} parameter servers on {n} worker nodes of {nics} NICs: at most one per NIC")
    # every GPU's shard split over the servers in pieces of whole elements (whole bytes): a tensor smaller than
    # G x servers elements uses only as many servers as give each a piece of one element, so the bytes on the
    # wire are the tensor's plus at most one element per message, never padded to the worker count
    whole_bytes = 8 // math.gcd(bits, 8)
    engaged = min(count, max(1, math.ceil(dim / (g * whole_bytes))))
    servers, nodes, groups = _server_groups(layout, nics, colocated, engaged)
    piece = whole_bytes * max(1, math.ceil(dim / (g * engaged * whole_bytes)))
    D = g * engaged * piece
    intra = (bits,) * (g - 1)
    phases = (
        Phase("intra_reduce_scatter", "ring_reduce_scatter", nodes, D // g, intra, "reduce"),
        Phase("push", "push", groups, piece, (bits,) if groups else (), "reduce"),
        Phase("pull", "pull", groups, piece, (bits,) if groups else (), "copy"),
        Phase("intra_all_gather", "ring_all_gather", nodes, D // g, intra, "copy"),
    )
    return Schedule(SUMMATION_SERVERS, layout, int(dim), D, phases)


def host_staging_s(cluster: Cluster, nbytes: float) -> float:
    """Seconds an all-reduce of ``nbytes`` per GPU spends outside the wire where the framework stages it through
    host memory (``Framework.host_reduce_bandwidth`` > 0: Horovod's MPI backend, an MPI_Allreduce on host
    buffers), 0 where NCCL reduces on the GPUs. Added to the wire's time, in series: Horovod's background thread
    copies the fused buffer to the host, calls MPI_Allreduce, and copies the sum back, one after another.

        t = 2 nbytes / PCIe  +  3 (p - 1) / p  nbytes / B_core

    two copies over the GPU's PCIe link (gpus.toml ``pcie_gbytes_per_s``, NCCL's count of an x16 link), and the
    CPU reduction of a ring all-reduce over the p ranks: each rank sums (p - 1) / p of the buffer, reading two
    operands and writing one (3 bytes of memory traffic a byte), on its one core at ``B_core``. The wire is
    timed as NCCL's ring on the same links [assumption: no published figure separates MPI's TCP or RoCE
    throughput from NCCL's; its shared-memory steps inside a node cost more than NVLink's and are not counted]."""
    bandwidth = framework_preset(cluster.framework).host_reduce_bandwidth
    p = cluster.n_gpus
    if bandwidth <= 0 or p == 1:
        return 0.0
    pcie = GPUS[cluster.gpu]["pcie_gbytes_per_s"] * 1e9
    return 2 * nbytes / pcie + 3 * (p - 1) / p * nbytes / bandwidth


def busiest_server_share(tensors: tuple[int, ...], servers: int) -> float:
    """The share of a model's parameters on its most loaded parameter server when whole variables are placed as
    TensorFlow's benchmarks place them: in creation order, each on the server holding the fewest elements so far,
    ties to the first (tensorflow/benchmarks scripts/tf_cnn_benchmarks variable_mgr ``ParamServerDeviceSetter``:
    "assign variables on the least loaded ps-device"; ``tf.train.replica_device_setter``'s default round-robin
    gives the same or a worse maximum). A variable is never split, so one large tensor (VGG-16's fc6, 74% of
    its parameters) sits on one server whatever their number."""
    if servers < 1 or not tensors:
        raise ValueError(f"busiest_server_share: need servers >= 1 and tensors, got {servers} and {len(tensors)}")
    loads = [(0, index) for index in range(servers)]
    for size in tensors:
        load, index = heapq.heappop(loads)
        heapq.heappush(loads, (load + size, index))
    return max(load for load, _ in loads) / sum(tensors)


@lru_cache(maxsize=256)
def whole_variable_servers(tensors: tuple[int, ...], servers: int) -> int:
    """The k servers ``summation_servers`` spreads each tensor over so that every one carries about what the
    busiest carries under whole-variable placement (``busiest_server_share`` f): 1 / k the nearest to f in ratio
    (floor or ceil of 1 / f), at most ``servers``. The bytes a worker sends stay the model's; the busiest
    server's NIC carries 1 / k of every worker's gradient instead of f (VGG-16 on 8 servers: 1 for 0.75;
    ResNet-50 on 2: 2 for 0.52, on 8: 6 for 0.16)."""
    share = busiest_server_share(tensors, servers)
    below, above = max(1, math.floor(1 / share)), max(1, math.ceil(1 / share))
    nearest = below if (1 / below) / share <= share / (1 / above) else above
    return min(servers, nearest)


def rpc_copy_s(cluster: Cluster, nbytes: float) -> float:
    """Seconds a worker's RPC stack spends on a tensor of ``nbytes`` it pushes and then pulls back through
    summation servers (``Framework.rpc_bandwidth`` > 0: TensorFlow's gRPC), in series with the wire:
    2 nbytes / rpc_bandwidth. The servers' side handles the workers' RPCs on threads of their own [assumption],
    so only the worker's stack is charged. 0 on one node (no servers) or without an RPC cost."""
    bandwidth = framework_preset(cluster.framework).rpc_bandwidth
    if bandwidth <= 0 or cluster.n_nodes == 1:
        return 0.0
    return 2 * nbytes / bandwidth


def unmodelled(cluster: Cluster, accumulation_steps: int = 1) -> list[str]:
    """What the simulator does not model for this configuration, one sentence each (``birder predict --json`` key
    ``unmodelled``; empty where every mechanism it uses is modelled): the framework's own (presets/frameworks.toml
    ``unmodelled``, where more than one node talks through it) and the assumptions a setting leans on."""
    out = list(framework_preset(cluster.framework).unmodelled) if cluster.n_nodes > 1 else []
    if cluster.nic.placement_group and cluster.comm_library == "nccl-before-2.4.8" and cluster.n_nodes > 1:
        out.append("The EC2 per-flow cap inside a placement group with NCCL before 2.4.8 is checked by no published "
                   "row: one thread reports a 13% gain where the model gives 60-70%.")
    return out


def check_optimizer_framework(optimizer: str, framework: str) -> None:
    """Refuse a compressed optimizer (``birder_ref.registry``) with a summation-server or sharded framework
    (presets/frameworks.toml): its 1-bit steps run as a communication hook among the GPUs on whole gradients
    (Birder's schedule, DeepSpeed's compressed all-reduce), never through the framework's servers, which sum
    full-precision tensors, nor through a sharded framework's reduce-scatters; no such run exists to predict."""
    if not simulated_spec(optimizer).compressed:
        return
    pattern = framework_preset(framework).pattern
    if pattern == "sharded":
        raise ValueError(f"optimizer {optimizer!r} runs as a DDP communication hook on whole gradients; {framework} "
                         "shards parameters and reduce-scatters gradients, where no 1-bit hook runs: use an "
                         "all-reduce framework (e.g. ddp) or an uncompressed optimizer")
    if pattern == "summation-servers":
        raise ValueError(f"optimizer {optimizer!r} sends its 1-bit messages through its own hook among the GPUs, "
                         f"not through {framework}'s summation servers: use an all-reduce framework (e.g. ddp) "
                         "or an uncompressed optimizer")


def sharded_schedules(cluster: Cluster, dim: int, bits: int = 32) -> tuple[tuple[Schedule, Cluster],
                                                                             tuple[Schedule, Cluster]]:
    """The two collectives of one unit of a sharded framework (presets/frameworks.toml, pattern "sharded"), each
    with the cluster that times it: the all-gather of the unit's ``dim`` parameters and the reduction of its
    gradients, ``bits`` per element on the wire.

    Sharded over every GPU (FSDP FULL_SHARD and SHARD_GRAD_OP, ZeRO-3): NCCL's ring all-gather and ring
    reduce-scatter among all ranks, each moving (p-1)/p of the unit per GPU (nccl-tests doc/PERFORMANCE.md).
    Sharded inside each node (HYBRID_SHARD) on several nodes: the all-gather among the node's GPUs, timed on one
    node, and the gradients reduce-scattered inside the node, then each shard all-reduced by ring across the
    nodes (``birder_ref.schedules.hybrid_shard_reduce``; NCCL may take a tree for it at many nodes)."""
    node = framework_preset(cluster.framework).shard_group == "node" and cluster.n_nodes > 1
    gather_on = cluster.with_nodes(1) if node else cluster
    gather = (collective_schedule("all-gather", gather_on.layout, dim, bits), gather_on)
    reduce = (hybrid_shard_reduce(cluster.layout, dim, bits) if node else
              collective_schedule("reduce-scatter", cluster.layout, dim, bits))
    return gather, (reduce, cluster)


def step_schedule(optimizer: str, cluster: Cluster, dim: int, scheme: str | None = None,
                  full_precision: bool = False, grad_bits: int = 32) -> Schedule:
    """The schedule one communicating step of ``optimizer`` runs (its ``birder_ref.registry`` spec): the
    framework's full-precision exchange (DDP's all-reduce, or its summation servers) for full-precision steps,
    unless the optimizer has a full-precision schedule of its own."""
    spec = simulated_spec(optimizer)
    if not spec.compressed or (full_precision and not spec.own_full_precision):
        if cluster.n_nodes > 1 and framework_preset(cluster.framework).pattern == "summation-servers":
            return summation_servers(cluster, dim, grad_bits)
        return fp32_allreduce(cluster, dim, grad_bits)
    options = {"full_precision": True} if full_precision else {}
    return spec.schedule(cluster.layout, dim, scheme=scheme, **options)
