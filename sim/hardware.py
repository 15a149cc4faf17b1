"""Network layer, hardware as data: NICs, intra-node fabrics, GPUs, clusters, and where their figures come from.

(Over 600 lines: one parser per preset file and for the cluster TOML, sharing the unit conversions and the
provenance records; each is short.)

Generic presets (``presets/networks.toml``, ``intra.toml``, ``gpus.toml``) hold physical constants with their
sources only. Site profiles (``presets/sites.toml``) are one cluster's measured behaviour: a generic preset plus
constants FITTED to that cluster's published rows; they say so (``Nic.fitted``) and nothing generic inherits
them. Units are converted once, here, at parse time: the dataclasses hold bytes/s, bits/s and seconds.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from birder_ref.schedules import Layout, OnLayout
from safeio.inputs import read_text_bounded
from sim.stragglers import GPU_SPEED_CV, STEP_JITTER_CV, check_gpu_speed_cv, check_step_jitter_cv, step_cv

GPU_SPEED_DEFAULT = ("gpu speed spread", f"{GPU_SPEED_CV:.4f} of the median per GPU (default: Sinha et al., SC'22)")


def default_step_jitter(nic: Nic) -> tuple[float, tuple[str, str]]:
    """The per-step jitter a cluster on ``nic`` takes unless told, with its provenance: the generic figure FITTED
    on the corpus (presets/step_jitter.toml), or 0 on a site profile, whose constants were fitted on its own
    multi-node training steps and so already absorb that site's step-to-step noise (counting it again would double
    it). A network ``birder calibrate`` fitted on nccl-tests output (fitted, but on no training rows) saw no
    training steps, so it takes the generic figure."""
    if nic.fitted and nic.fitted_on:
        return 0.0, ("step jitter", "0 (site profile: its fitted constants absorb its step-to-step noise)")
    return STEP_JITTER_CV, ("step jitter", f"{STEP_JITTER_CV:.2f} of the median step per GPU (default: FITTED on "
                                           "the validation corpus, sim/presets/step_jitter.toml)")

PRESETS = Path(__file__).with_name("presets")

with (PRESETS / "multinode_loss.toml").open("rb") as _f:
    MULTINODE_LOSS = tomllib.load(_f)["multinode_loss"]
# the generic multi-node loss scale: a factor on the simulated step time beyond one node's (presets/multinode_loss.toml:
# 1, as simulated; its fit on every source seen, MULTINODE_LOSS_FITTED, failed its prospective test and is a what-if)
MULTINODE_LOSS_SCALE = float(MULTINODE_LOSS["scale"])
MULTINODE_LOSS_FITTED = float(MULTINODE_LOSS["fitted"])
MAX_MULTINODE_LOSS_SCALE = 10.0  # ten times the simulated loss: beyond any source seen (sim/validation/multinode_loss)


def default_multinode_loss_scale(nic: Nic) -> tuple[float, tuple[str, str]]:
    """The multi-node loss scale a cluster on ``nic`` takes unless told, with its provenance: the generic figure
    (presets/multinode_loss.toml), or 1 on a site profile, whose constants were fitted on its own multi-node
    training steps (scaling its loss again would count what they absorbed twice)."""
    if nic.fitted and nic.fitted_on:
        return 1.0, ("multi-node loss scale", "1 (site profile: its fitted constants absorb its multi-node loss)")
    return MULTINODE_LOSS_SCALE, ("multi-node loss scale", f"{MULTINODE_LOSS_SCALE:g} x the simulated step time "
                                  "beyond one node's (default; the fit on every source seen, "
                                  f"{MULTINODE_LOSS_FITTED:g}, failed its prospective test: "
                                  "sim/presets/multinode_loss.toml)")


def check_multinode_loss_scale(value: Any, owner: str) -> float:
    """A factor on the simulated multi-node loss: a number from 1 (as simulated: the loss it adds to is a step's
    simulated events, which a factor under 1 could not shorten) to ``MAX_MULTINODE_LOSS_SCALE``; one ValueError
    naming ``owner`` otherwise."""
    if not (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and 1 <= value <= MAX_MULTINODE_LOSS_SCALE):
        raise ValueError(f"{owner} must be a number from 1 to {MAX_MULTINODE_LOSS_SCALE:g} (a factor on the "
                         f"simulated step time beyond one node's; 1: as simulated), got {value!r}")
    return float(value)


# ----------------------------------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class Intra:
    """The fabric inside a node: each GPU's port (per direction) and the node-wide switch behind it."""

    name: str
    port_bandwidth: float  # bytes/s a GPU moves per direction inside the node (NCCL's achieved bus bandwidth)
    fabric_bandwidth: float  # bytes/s the whole node's intra fabric carries per direction (inf: non-blocking)
    latency: float  # s: NCCL's per-step hardware latency of the link (tuning.cc hwLatencies, Simple)
    kind: str = "nvlink"  # "nvlink" or "pci": which of tuning.cc's latency rows applies
    source: str = ""
    nvls_bandwidth: float = 0.0  # bytes/s of algorithm bandwidth of an all-reduce the NVSwitch reduces (NVLink
    # SHARP, NCCL's NVLS algorithm); 0: the fabric cannot reduce

    def __post_init__(self) -> None:
        _positive(self.name, port_bandwidth=self.port_bandwidth, fabric_bandwidth=self.fabric_bandwidth)
        _non_negative(self.name, latency=self.latency, nvls_bandwidth=self.nvls_bandwidth)
        if self.kind not in ("nvlink", "pci"):
            raise ValueError(f"intra-node fabric {self.name!r}: kind must be 'nvlink' or 'pci', got {self.kind!r}")


FRAMEWORK_PATTERNS = ("allreduce", "summation-servers", "sharded")  # how a framework's gradients cross the network
SHARD_GROUPS = ("all", "node")  # a sharded framework's parameters are split over every GPU, or over a node's


@dataclass(frozen=True)
class Framework:
    """How a data-parallel framework hands gradients to the network (presets/frameworks.toml)."""

    name: str
    bucket_cap_bytes: float  # gradient bytes (fp32) fused into one operation (0: every tensor on its own)
    first_bucket_bytes: float  # ... into the first (the last layers' gradients)
    overlaps_backward: bool  # an operation may start while the backward pass runs
    cycle: float = 0.0  # s: a background loop launches what is ready once per cycle (0: at once)
    source: str = ""
    pattern: str = "allreduce"  # "allreduce" among the GPUs, or "summation-servers" (push to servers, pull back)
    servers_on_workers: bool = False  # summation servers run on the worker nodes (else on machines of their own)
    fusion_splits: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (model, tensor indices where a fusion group
    # starts): groups by parameter index instead of caps, for the models a framework's scripts split so
    partition_bytes: float = 0.0  # summation servers: a tensor goes out in pieces of at most this, each to one
    # server (0: whole, to one server)
    host_reduce_bandwidth: float = 0.0  # bytes/s of one CPU core summing in host memory where the all-reduce is
    # staged through the host (an MPI backend: sim.system.host_staging_s); 0: NCCL on the GPUs, nothing staged
    whole_variables: bool = False  # summation servers: each variable lives whole on one server, placed greedily
    # on the least-loaded one (sim.system.whole_variable_servers); else every tensor is spread over all servers
    rpc_bandwidth: float = 0.0  # bytes/s one process's RPC stack (serialise, copy) moves a tensor at
    # (sim.system.rpc_copy_s); 0: no software cost beyond the wire
    unmodelled: tuple[str, ...] = ()  # one sentence each: what the simulator does not model for this framework
    shard_group: str = "all"  # sharded: the GPUs a unit's parameters are split over ("node": HYBRID_SHARD)
    gather_in_backward: bool = True  # sharded: a unit's parameters are all-gathered again for its backward
    # (FULL_SHARD, ZeRO-3); False: kept from the forward (SHARD_GRAD_OP, ZeRO-2)

    def __post_init__(self) -> None:
        _non_negative(f"framework {self.name!r}", bucket_cap_bytes=self.bucket_cap_bytes,
                      first_bucket_bytes=self.first_bucket_bytes, cycle=self.cycle,
                      partition_bytes=self.partition_bytes, host_reduce_bandwidth=self.host_reduce_bandwidth,
                      rpc_bandwidth=self.rpc_bandwidth)
        if self.pattern not in FRAMEWORK_PATTERNS:
            raise ValueError(f"framework {self.name!r}: pattern must be one of {', '.join(FRAMEWORK_PATTERNS)}, "
                             f"got {self.pattern!r}")
        if self.shard_group not in SHARD_GROUPS:
            raise ValueError(f"framework {self.name!r}: shard_group must be one of {', '.join(SHARD_GROUPS)}, "
                             f"got {self.shard_group!r}")
        for model, starts in self.fusion_splits:
            if list(starts) != sorted(set(starts)) or any(not isinstance(i, int) or i < 1 for i in starts):
                raise ValueError(f"framework {self.name!r}: fusion split of {model!r} must be increasing positive "
                                 f"tensor indices, got {list(starts)!r}")

    def split_of(self, model: str) -> tuple[int, ...] | None:
        """The tensor indices where this framework's fusion groups of ``model`` start, or None (use the caps)."""
        return dict(self.fusion_splits).get(model)


@dataclass(frozen=True)
class Nic:
    """The network interfaces of one node; GPU i uses NIC i * count // gpus_per_node (rail-aligned)."""

    name: str
    transport: str  # "socket" (NCCL over TCP) or "ib" (NCCL over verbs: InfiniBand or RoCE)
    line_rate: float  # bits/s of one NIC
    efficiency: float  # share of the line rate NCCL moves as payload
    latency: float  # s per inter-node hop beyond tuning.cc's NET latency (the transport's own stack)
    peer_overhead: float = 0.0  # s per remote peer of a point-to-point operation (published per-peer cost)
    count: int = 1
    # Constants a site profile may fit (zero / infinite in every generic preset):
    message_overhead: float = 0.0  # s a GPU's proxy spends per point-to-point send/recv, one peer after another
    step_overhead: float = 0.0  # s per step of a collective kernel at the NIC (NCCL's "net overhead" on that site)
    incast_onset_bytes: float = math.inf  # burst into one port (bytes, see system.burst_bytes) that never times out
    incast_certain_bytes: float = math.inf  # ... from which every burst loses one retransmission timeout
    retransmission_timeout: float = 0.0  # s one such timeout costs (Linux TCP_RTO_MIN)
    # Hardware limits of the path behind the NIC (presets/transports.toml, networks.toml, gpus.toml):
    host_bandwidth: float = math.inf  # bytes/s one NIC's host-staged socket path moves (NCCL over TCP)
    share_at_8_gpus: float = 1.0  # share of that left when 8 GPUs' proxies share one socket NIC (1 GPU: all)
    pcie_bandwidth: float = math.inf  # bytes/s of the GPU-NIC PCIe path (inf: the GPU's, gpus.toml)
    collnet_bandwidth: float = 0.0  # bytes/s one NIC's switch reduces (InfiniBand SHARP, NCCL's CollNet); 0: none
    switch_buffer_bytes: float = math.inf  # shared packet buffer of the Ethernet switch the NICs plug into
    buffer_alpha: float = 1.0  # its dynamic-threshold factor: one queue may hold alpha x the free buffer
    # A set-up's measured link rate (set-up data, like a measured single node; never fitted): bits/s of payload
    # one host-to-host stream carried on this cluster (iperf over TCP, perftest over verbs). It replaces the wire
    # term (line rate x payload share); the limits behind the NIC (sockets shared by GPUs, host staging, PCIe)
    # still apply on top (Cluster.nic_limits). None: not measured.
    measured_rate: float | None = None
    # A cloud network's cap on one TCP flow (one 5-tuple), bits/s, outside and inside a cluster placement group
    # (presets/networks.toml ec2-*, from the provider's documentation; inf: no such cap), which of the two applies,
    # and the NIC's maker as NCCL's socket transport reads it (PCI vendor: "aws" for ENA, 0x1d0f; "" otherwise)
    flow_rate: float = math.inf
    placement_group_flow_rate: float = math.inf
    placement_group: bool = False
    vendor: str = ""
    fitted: bool = False  # True for a site profile: some constants were fitted to that site's rows
    fitted_on: tuple[tuple[str, tuple], ...] = ()  # (what, values) the fit saw: models, batches, gpus
    source: str = ""

    def __post_init__(self) -> None:
        if self.transport not in ("socket", "ib"):
            raise ValueError(f"network {self.name!r}: transport must be 'socket' or 'ib', got {self.transport!r}")
        _positive(self.name, line_rate=self.line_rate, efficiency=self.efficiency,
                  incast_onset_bytes=self.incast_onset_bytes, incast_certain_bytes=self.incast_certain_bytes,
                  host_bandwidth=self.host_bandwidth, share_at_8_gpus=self.share_at_8_gpus,
                  pcie_bandwidth=self.pcie_bandwidth, switch_buffer_bytes=self.switch_buffer_bytes,
                  buffer_alpha=self.buffer_alpha, flow_rate=self.flow_rate,
                  placement_group_flow_rate=self.placement_group_flow_rate)
        _count(self.name, "count", self.count)
        if not isinstance(self.placement_group, bool):
            raise ValueError(f"network {self.name!r}: placement_group must be true or false, got "
                             f"{self.placement_group!r}")
        if self.vendor not in NIC_VENDORS:
            raise ValueError(f"network {self.name!r}: nic_vendor must be one of {', '.join(map(repr, NIC_VENDORS))}, "
                             f"got {self.vendor!r}")
        if self.placement_group and not math.isfinite(self.placement_group_flow_rate):
            raise ValueError(f"network {self.name!r}: placement_group = true needs per_flow_gbps_placement_group (the "
                             "provider's cap on one flow inside a cluster placement group)")
        if self.incast_certain_bytes < self.incast_onset_bytes:
            raise ValueError(f"network {self.name!r}: incast_certain_bytes must be >= incast_onset_bytes")
        if self.efficiency > 1:
            raise ValueError(f"network {self.name!r}: efficiency must be at most 1, got {self.efficiency}")
        _non_negative(self.name, latency=self.latency, peer_overhead=self.peer_overhead,
                      message_overhead=self.message_overhead, step_overhead=self.step_overhead,
                      retransmission_timeout=self.retransmission_timeout, collnet_bandwidth=self.collnet_bandwidth)
        if self.collnet_bandwidth and self.transport != "ib":
            raise ValueError(f"network {self.name!r}: collnet_gbytes_per_s needs switches that reduce (InfiniBand "
                             "SHARP, transport 'ib'); sockets have none")
        if self.measured_rate is not None:
            check_measured_rate(self.measured_rate / 1e9, self.line_rate / 1e9, f"network {self.name!r} measured_gbps")

    @property
    def wire_bandwidth(self) -> float:
        """Payload bytes/s of one NIC per direction at the wire: line rate x payload share."""
        return self.line_rate * self.efficiency / 8

    @property
    def bandwidth(self) -> float:
        """Payload bytes/s of one NIC per direction before the limits of the path behind it: the measured
        host-to-host rate where one was measured, else the wire's (``wire_bandwidth``)."""
        return self.wire_bandwidth if self.measured_rate is None else self.measured_rate / 8

    @property
    def per_flow_rate(self) -> float:
        """Bits/s one TCP flow may carry on this network: the cloud's cap inside a cluster placement group where
        the nodes are in one, else outside (inf: no cap)."""
        return self.placement_group_flow_rate if self.placement_group else self.flow_rate

    @property
    def link_rate(self) -> float:
        """Bits/s a plain alpha-beta model sends at: the measured rate where one was measured, else the line
        rate (the baselines then use the same set-up data as the simulator)."""
        return self.line_rate if self.measured_rate is None else self.measured_rate

    def socket_share(self, gpus_per_nic: float) -> float:
        """Share of one GPU's socket throughput left when ``gpus_per_nic`` GPUs' proxies share the NIC: 1 for
        one GPU, ``share_at_8_gpus`` from 8 on, linear in log2 between (NCCL's socket threads and host
        staging contend; the two ends are published, the curve between is an interpolation)."""
        if gpus_per_nic <= 1:
            return 1.0
        return 1.0 - (1.0 - self.share_at_8_gpus) * min(math.log2(gpus_per_nic) / 3.0, 1.0)


# Bounds of what the simulator answers, checked where values enter (command line, TOML, Python API).
MAX_NICS_PER_GPU = 8  # an HGX H100 tray wires one 400G NIC per GPU; 2 x 200G per GPU exists; 8 is far beyond any
MAX_GPUS = 65_536  # the largest count benchmarks/sim_scaling.py holds to its target (10 s); past it, minutes
MAX_OVERSUBSCRIPTION = 64.0  # a spine taper of 64:1 already leaves each node 1/64 of its NIC across the spine;
# beyond it the fabric is no longer the two-level fat tree the flow model describes (a bound of the model)
MAX_LINE_RATE_GBPS = 3200.0  # twice 1.6 Tb/s, the fastest Ethernet port standard (IEEE 802.3dj): a larger value is
# bits/s typed into the Gb/s key
MIN_LINE_RATE_GBPS = 0.01  # 10 Mb/s, 10BASE-T (IEEE 802.3i), the slowest Ethernet still in the standard: a smaller
# value is no cluster network (often Tb/s or bytes typed into the Gb/s key)
MAX_CLUSTER_FILE_BYTES = 1 << 20  # a cluster TOML is a few hundred bytes; a larger file is the wrong file
MAX_TIME_US = 1e6  # 1 s per message or step: light in fibre (2e8 m/s) crosses half the Earth (20,000 km) in 0.1 s;
# a larger latency or overhead is no cluster network (often seconds typed as microseconds' digits)
MAX_RETRANSMISSION_TIMEOUT_S = 120.0  # Linux's TCP_RTO_MAX (include/net/tcp.h): no TCP stack waits longer
MAX_INTRA_GBYTES_PER_S = 3600.0  # twice NVLink 5's 1.8 TB/s per GPU (NVIDIA B200 datasheet), as MAX_LINE_RATE_GBPS
MEASURED_OVER_LINE_RATE = 0.01  # a measured link rate may exceed the line rate by rounding only (1%: a 2-3 digit
# figure such as "9.9" or "100"); payload above the line rate is no measurement of that link
MIN_NONZERO_LATENCY_US = 0.01  # 10 ns: light covers 2 m of fibre in that time; a smaller nonzero latency is
# seconds typed into the us key
MIN_SHARE = 0.01  # a payload share (efficiency, share_at_8_gpus) under 1% of the line rate is a broken link, not a
# network to plan on (and a share of 1e-300 turns a step into 1e298 s)
MAX_SWITCH_BYTES = 1e12  # 1 TB: 100x the deepest switch buffer sold (Broadcom Jericho2, 8 GB of HBM); more is bits
# or a typo (byte keys: switch_buffer_bytes, incast_*_bytes; inf where the key allows it)
MIN_GBYTES_PER_S = 1e-6  # 1 kB/s: under it no data path (a CPU loopback measured by `birder bench` gives ~1e-3)
MAX_BUFFER_ALPHA = 64.0  # switches' dynamic-threshold factor alpha runs from 1/128 to 8 (Broadcom's DT settings);
# 64 leaves room for other vendors


def check_nics_per_node(nics: int, gpus_per_node: int, option: str) -> None:
    """The NICs of a node serve its GPUs evenly: at most one NIC per GPU, or the same number for every GPU, and at
    most ``MAX_NICS_PER_GPU`` each; ``option`` names where the count came from in the one-line error."""
    if (nics > gpus_per_node and nics % gpus_per_node) or nics > MAX_NICS_PER_GPU * gpus_per_node:
        raise ValueError(f"{option} = {nics} NICs for {gpus_per_node} GPUs per node: at most one NIC per GPU, or "
                         f"the same number for every GPU (a multiple of {gpus_per_node}), at most {MAX_NICS_PER_GPU} "
                         "NICs per GPU")



def check_measured_rate(measured_gbps: Any, line_rate_gbps: float, owner: str) -> float:
    """A measured link rate in Gb/s (``owner``: the key or option that gave it), checked against physics: a
    positive finite number, at least 10 Mb/s (as a line rate) and at most the NIC's line rate plus rounding
    (``MEASURED_OVER_LINE_RATE``). One ValueError naming ``owner``, the unit and both rates otherwise."""
    if not (isinstance(measured_gbps, int | float) and not isinstance(measured_gbps, bool)
            and math.isfinite(measured_gbps) and measured_gbps > 0):
        raise ValueError(f"{owner} must be a positive number (Gb/s a host-to-host stream carried, measured with "
                         f"iperf or perftest), got {measured_gbps!r}")
    if measured_gbps < MIN_LINE_RATE_GBPS:
        raise ValueError(f"{owner} = {measured_gbps!r} Gb/s is below {MIN_LINE_RATE_GBPS:g} Gb/s (10 Mb/s), no "
                         "cluster network (the figure is in Gb/s)")
    if measured_gbps > line_rate_gbps * (1 + MEASURED_OVER_LINE_RATE):
        raise ValueError(f"{owner} = {measured_gbps:g} Gb/s exceeds the NIC's line rate of {line_rate_gbps:g} "
                         "Gb/s: a measured rate is at most the line rate (Gb/s per NIC, one host-to-host stream)")
    return float(measured_gbps)


def layout_of(n_nodes: int, gpus_per_node: int) -> Layout:
    """The ranks of a cluster of ``n_nodes`` nodes of ``gpus_per_node`` GPUs (``birder_ref.schedules.Layout``, the
    one layout the reference, the simulator and the torch code share), each count checked with the cluster's
    message."""
    _count("cluster", "n_nodes", n_nodes)
    _count("cluster", "gpus_per_node", gpus_per_node)
    return Layout(n_nodes, gpus_per_node)


@dataclass(frozen=True)
class Cluster(OnLayout):
    """A layout of nodes x GPUs, an intra-node fabric, NICs, and a switch oversubscribed by a factor."""

    layout: Layout  # n_nodes x gpus_per_node; rank = node * gpus_per_node + local rank, as the schedules number them
    nic: Nic
    intra: Intra
    oversubscription: float = 1.0  # 1: non-blocking; f > 1: a leaf's spine uplinks carry 1/f of its nodes' NICs
    gpu: str = "a100"
    name: str = ""
    provenance: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # (figure, where it came from)
    nodes_per_leaf: int = 1  # nodes under one leaf switch; traffic between them never crosses the spine
    framework: str = "ddp"  # the training framework (presets/frameworks.toml): its buckets, overlap and cycle
    servers: int = 0  # summation / parameter servers of a push-pull framework (0: its own rule, one per worker NIC)
    comm_library: str = "nccl"  # the collective library's release (presets/comm_libraries.toml): its TCP flows
    sockets_per_connection: int | None = None  # set on the cluster (NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS);
    # None: the library's default for the NIC's vendor
    gpu_speed_cv: float = GPU_SPEED_CV  # spread of per-GPU speed (sim/stragglers.py); 0: every GPU equally fast
    step_jitter_cv: float = STEP_JITTER_CV  # per-step jitter of each GPU's step (sim/stragglers.py); 0: none
    # share of the path's payload rate (nic_limits: what a collective benchmark reaches) that training's collectives
    # reach between nodes; 1 (the default): all of it. A what-if input (birder predict --collective-efficiency),
    # not a hardware constant: no published figure gives it
    collective_efficiency: float = 1.0
    # share of its own pace a collective keeps while GPU work runs beside it (its kernels and copies share the SMs
    # and memory with the compute); 1 (the default): not slowed. A what-if input (birder predict --collective-pace,
    # sim/validation/overlap_evidence.py), not shipped
    collective_pace: float = 1.0
    # factor on the simulated step time beyond one node's (presets/multinode_loss.toml); 1: as simulated
    multinode_loss_scale: float = MULTINODE_LOSS_SCALE

    def __post_init__(self) -> None:
        if not isinstance(self.layout, Layout):
            raise ValueError(f"cluster: layout must be a birder_ref.schedules.Layout (sim.hardware.layout_of), "
                             f"got {self.layout!r}")
        if self.n_gpus > MAX_GPUS:
            raise ValueError(f"cluster: {self.n_nodes} nodes x {self.gpus_per_node} GPUs per node = {self.n_gpus} GPUs "
                             f"exceeds {MAX_GPUS:,} GPUs, the largest cluster the simulator answers in seconds "
                             "(sim/README.md, benchmarks/sim_scaling.py)")
        if not (isinstance(self.oversubscription, int | float) and not isinstance(self.oversubscription, bool)
                and 1 <= self.oversubscription <= MAX_OVERSUBSCRIPTION):
            raise ValueError(f"switch oversubscription must be a number >= 1 and <= {MAX_OVERSUBSCRIPTION:g}, "
                             f"got {self.oversubscription!r}")
        _count("cluster", "nodes_per_leaf", self.nodes_per_leaf)
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {self.framework!r}; choose one of {', '.join(FRAMEWORKS)}")
        if not (isinstance(self.servers, int) and not isinstance(self.servers, bool) and self.servers >= 0):
            raise ValueError(f"cluster: servers must be a non-negative integer, got {self.servers!r}")
        check_nics_per_node(self.nic.count, self.gpus_per_node, "[network] count")
        if self.comm_library not in COMM_LIBRARIES:
            raise ValueError(f"unknown comm library {self.comm_library!r}; choose one of {', '.join(COMM_LIBRARIES)}")
        if self.sockets_per_connection is not None:
            check_sockets_per_connection(self.sockets_per_connection, "cluster: sockets_per_connection")
        check_gpu_speed_cv(self.gpu_speed_cv, "cluster: gpu_speed_cv")
        check_step_jitter_cv(self.step_jitter_cv, "cluster: step_jitter_cv")
        check_collective_efficiency(self.collective_efficiency, "cluster: collective_efficiency")
        check_collective_pace(self.collective_pace, "cluster: collective_pace")
        check_multinode_loss_scale(self.multinode_loss_scale, "cluster: multinode_loss_scale")

    @property
    def n_gpus(self) -> int:
        return self.layout.n_ranks

    def straggler_cv(self, micro_batches: int = 1) -> float:
        """sigma of one GPU's step of ``micro_batches`` micro-batches within a step: the speed spread and the
        per-step jitter, which averages over the micro-batches (``sim.stragglers.step_cv``)."""
        return step_cv(self.gpu_speed_cv, self.step_jitter_cv, micro_batches)

    @property
    def rails(self) -> int:
        """Rails of a node: a NIC per rail where GPUs share NICs, the NICs of one GPU where it has several (GPU i
        on rail i * rails // gpus_per_node; NCCL runs a channel through each of a GPU's NICs)."""
        return min(self.nic.count, self.gpus_per_node)

    @property
    def rail_bandwidth(self) -> float:
        """Payload bytes/s one rail moves per direction in training: its NICs together, times the share of
        their rate training's collectives reach (``collective_efficiency``)."""
        return self.nic_bandwidth * self.nic.count / self.rails * self.collective_efficiency

    def nic_limits(self) -> dict[str, float]:
        """Bytes/s one NIC moves per direction under each limit of its path: the wire (line rate x payload
        share) or, where the set-up's link rate was measured host to host, that rate in its place; the sockets
        shared by the GPUs behind it (socket transport: a share of the wire, NVIDIA/nccl issue 209); the
        host-staged socket path; the GPU-NIC PCIe link; on a cloud that caps each TCP flow, its flows times the
        cap (``tcp_flows_per_nic``).

        A measured rate is a ceiling of its own, not scaled by the sockets' share: iperf and perftest measure one
        host-to-host stream, and NCCL's socket transport opens one TCP socket per connection on one helper
        thread outside AWS and GCP (src/transport/net_socket.cc, ncclNetSocketGetNsockNthread: 1 x 1 unless the
        NIC's PCI vendor is AWS's, 2 threads x 8 sockets, or GCP's), so it moves at most what one stream does;
        the share of the wire that the GPUs' proxies reach when they contend is a separate limit. (MPI's
        point-to-point messages open one TCP connection per pair of ranks and may exceed one stream; no
        measured figure says by how much, so none is modelled.)"""
        nic = self.nic
        gpus_per_nic = self.gpus_per_node / nic.count
        if framework_preset(self.framework).pattern == "summation-servers":
            # one process per node sends for all its GPUs, so its NIC's sockets are not shared among GPUs' proxies:
            # only BytePS's local root process of a machine starts ps-lite's worker ("only the root need to do
            # networking", byteps/common/global.cc, BytePSGlobal::Init, role LOCAL_ROOT), and tf_cnn_benchmarks'
            # distributed_replicated ran one worker task per instance over all its GPUs (TensorFlow benchmarks page,
            # EC2 distributed section, May 2017)
            gpus_per_nic = 1.0
        pcie = nic.pcie_bandwidth if math.isfinite(nic.pcie_bandwidth) else GPUS[self.gpu]["pcie_gbytes_per_s"] * 1e9
        nics_per_gpu = max(nic.count // self.gpus_per_node, 1)  # a GPU's several NICs share its own PCIe link
        limits = {"wire" if nic.measured_rate is None else "measured": nic.bandwidth, "pcie": pcie / nics_per_gpu}
        if nic.transport == "socket":
            limits["sockets"] = nic.wire_bandwidth * nic.socket_share(gpus_per_nic)
            limits["host"] = nic.host_bandwidth
            if math.isfinite(nic.per_flow_rate):  # a cloud's cap on each TCP flow (AWS: 5 or 10 Gb/s)
                limits["flows"] = self.tcp_flows_per_nic() * nic.per_flow_rate / 8
        return limits

    def tcp_flows_per_nic(self) -> float:
        """TCP flows one NIC carries per direction under NCCL's socket transport: the connections through it (a
        ring's node crossing each; ``rings_per_nic`` of the comm library where it fixes them, else the channels
        NCCL runs today, ``nccl_channels``) times the sockets each connection opens (the cluster's setting, else
        the library's default for the NIC's vendor)."""
        library = COMM_LIBRARIES[self.comm_library]
        sockets = library["sockets_per_connection"]
        per_connection = self.sockets_per_connection or sockets.get(self.nic.vendor, sockets["default"])
        connections = library.get("rings_per_nic", nccl_channels(self) / self.nic.count)
        return connections * per_connection

    @property
    def nic_bandwidth(self) -> float:
        """Payload bytes/s one NIC of this cluster moves per direction: the least of its path's limits."""
        return min(self.nic_limits().values())

    def with_nodes(self, n_nodes: int) -> Cluster:
        """The same cluster with ``n_nodes`` nodes (a new layout of as many GPUs per node)."""
        return replace(self, layout=layout_of(n_nodes, self.gpus_per_node))


MAX_CHANNELS = 32  # the ring graph's maxChannels (MAXCHANNELS 64 / 2, src/graph/search.cc)


def nccl_channels(cluster: Cluster) -> int:
    """Channels of a multi-node ring: the graph search finds one ring per NIC (src/graph/search.cc), and
    ncclTopoDupChannels doubles them where the intra-node path is fast (NVLink between the node's GPUs; with
    one GPU or over PCIe it stays one per NIC: a simplification of its 25 GB/s test); at most MAX_CHANNELS."""
    per_nic = 2 if cluster.intra.kind == "nvlink" and cluster.gpus_per_node > 1 else 1
    return min(per_nic * cluster.nic.count, MAX_CHANNELS)


def check_collective_efficiency(value: Any, owner: str) -> float:
    """A share of the inter-node payload rate that training's collectives reach: a number in (0, 1]; one
    ValueError naming ``owner`` otherwise."""
    if not (isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1):
        raise ValueError(f"{owner} must be a number in (0, 1] (a share of the link's payload rate), got {value!r}")
    return float(value)


MIN_COLLECTIVE_PACE = 0.05  # below it a collective beside compute all but stops: a broken set-up, not a what-if


def check_collective_pace(value: Any, owner: str) -> float:
    """A share of its own pace a collective keeps while GPU work runs beside it: a number in
    [``MIN_COLLECTIVE_PACE``, 1]; one ValueError naming ``owner`` otherwise."""
    if not (isinstance(value, int | float) and not isinstance(value, bool) and MIN_COLLECTIVE_PACE <= value <= 1):
        raise ValueError(f"{owner} must be a number in [{MIN_COLLECTIVE_PACE:g}, 1] (a share of the collective's own "
                         f"pace), got {value!r}")
    return float(value)


MAX_SOCKETS_PER_CONNECTION = 64  # NCCL's MAX_SOCKETS (src/transport/net_socket.cc): it caps the product there


def check_sockets_per_connection(value: Any, owner: str) -> int:
    """TCP sockets NCCL opens per connection (NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS): an integer from 1
    to NCCL's MAX_SOCKETS; one ValueError naming ``owner`` otherwise."""
    if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SOCKETS_PER_CONNECTION):
        raise ValueError(f"{owner} must be an integer from 1 to {MAX_SOCKETS_PER_CONNECTION} (NCCL_NSOCKS_PERTHREAD x "
                         f"NCCL_SOCKET_NTHREADS; NCCL caps the product at {MAX_SOCKETS_PER_CONNECTION}), got {value!r}")
    return value


def sockets_setting(value: Any, nic: Nic, owner: str, origin: str) -> tuple[int, tuple[str, str]]:
    """A sockets-per-connection setting checked against the network it would act on, and its provenance entry.
    NCCL opens TCP sockets per connection only on its socket transport (src/transport/net_socket.cc; the IB
    plugin moves data over verbs), so on any other transport the setting is refused; on a socket network without
    a cloud's cap per TCP flow the model has nothing it acts on (``Cluster.nic_limits``), and the entry says so
    (the socket path's own uncertainty stays in the interval, ``input_ranges``)."""
    sockets = check_sockets_per_connection(value, owner)
    if nic.transport != "socket":
        raise ValueError(f"{owner}: NCCL opens TCP sockets per connection only on its socket transport; network "
                         f"{nic.name!r} runs over {nic.transport}, where NCCL_NSOCKS_PERTHREAD and "
                         "NCCL_SOCKET_NTHREADS do not act")
    note = "" if math.isfinite(nic.per_flow_rate) else (
        f"; not modelled here: only a cloud's cap per TCP flow depends on it, and {nic.name} has none")
    return sockets, ("sockets", f"{sockets} per connection ({origin}){note}")


def _positive(owner: str, **values: float) -> None:
    for key, value in values.items():
        if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
            raise ValueError(f"{owner}: {key} must be a positive number, got {value!r}")


def _non_negative(owner: str, **values: float) -> None:
    for key, value in values.items():
        if not (isinstance(value, int | float) and not isinstance(value, bool) and value >= 0):
            raise ValueError(f"{owner}: {key} must be a non-negative number, got {value!r}")


def _count(owner: str, key: str, value: Any) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{owner}: {key} must be a positive integer, got {value!r}")


# --------------------------------------------------------------------------------------------------- presets
def _load(name: str) -> dict[str, dict[str, Any]]:
    with (PRESETS / name).open("rb") as f:
        return tomllib.load(f)


GENERIC_NETWORKS = _load("networks.toml")
SITES = _load("sites.toml")
TRANSPORTS = _load("transports.toml")
# what a preset holds for its transport, not for its wire: replaced when a cluster file names another transport
# (the payload share, the socket path's limits, the TCP flows' caps and the NIC maker NCCL's socket transport reads)
TRANSPORT_DEPENDENT_KEYS = frozenset(k for t in TRANSPORTS.values() for k in t) | {
    "per_flow_gbps", "per_flow_gbps_placement_group", "nic_vendor"}
INTRA = _load("intra.toml")
GPUS = _load("gpus.toml")
FRAMEWORKS = _load("frameworks.toml")
COMM_LIBRARIES = _load("comm_libraries.toml")
NIC_VENDORS = ("", "aws")  # PCI vendors NCCL's socket transport tells apart (0x1d0f: AWS ENA); "": any other
NETWORKS = {**GENERIC_NETWORKS, **SITES}  # every --network name: generic presets, then site profiles

# TOML key -> (Nic field, factor to SI). The units of every key are in its name.
NIC_KEYS = {"line_rate_gbps": ("line_rate", 1e9), "efficiency": ("efficiency", 1.0),
            "latency_us": ("latency", 1e-6), "peer_overhead_us": ("peer_overhead", 1e-6), "count": ("count", 1),
            "message_overhead_us": ("message_overhead", 1e-6), "step_overhead_us": ("step_overhead", 1e-6),
            "incast_onset_bytes": ("incast_onset_bytes", 1.0), "incast_certain_bytes": ("incast_certain_bytes", 1.0),
            "retransmission_timeout_s": ("retransmission_timeout", 1.0),
            "host_gbytes_per_s": ("host_bandwidth", 1e9), "share_at_8_gpus": ("share_at_8_gpus", 1.0),
            "pcie_gbytes_per_s": ("pcie_bandwidth", 1e9), "switch_buffer_bytes": ("switch_buffer_bytes", 1.0),
            "buffer_alpha": ("buffer_alpha", 1.0), "measured_gbps": ("measured_rate", 1e9),
            "collnet_gbytes_per_s": ("collnet_bandwidth", 1e9), "per_flow_gbps": ("flow_rate", 1e9),
            "per_flow_gbps_placement_group": ("placement_group_flow_rate", 1e9)}
UNITS = {"line_rate_gbps": "Gb/s", "efficiency": "share of line rate", "latency_us": "us", "peer_overhead_us": "us",
         "count": "NICs per node", "message_overhead_us": "us", "step_overhead_us": "us",
         "incast_onset_bytes": "bytes", "incast_certain_bytes": "bytes", "retransmission_timeout_s": "s",
         "host_gbytes_per_s": "GB/s", "share_at_8_gpus": "share", "pcie_gbytes_per_s": "GB/s",
         "switch_buffer_bytes": "bytes", "buffer_alpha": "factor", "collnet_gbytes_per_s": "GB/s",
         "measured_gbps": "Gb/s measured host to host (iperf, perftest), not fitted",
         "per_flow_gbps": "Gb/s one TCP flow may carry (a cloud's cap)",
         "per_flow_gbps_placement_group": "Gb/s one TCP flow may carry inside a cluster placement group",
         "port_gbytes_per_s": "GB/s", "fabric_gbytes_per_s": "GB/s", "oversubscription": "factor >= 1",
         "nodes": "nodes", "gpus_per_node": "GPUs", "nodes_per_leaf": "nodes under one leaf switch"}
SITE_ONLY_KEYS = ("message_overhead_us", "step_overhead_us", "incast_onset_bytes", "incast_certain_bytes")


def network_spec(name: str) -> dict[str, Any]:
    """The TOML values of a network name: a generic preset over its transport's, or a site over its base."""
    if name in GENERIC_NETWORKS:
        spec = GENERIC_NETWORKS[name]
        return TRANSPORTS[spec["transport"]] | spec
    if name in SITES:
        site = SITES[name]
        return network_spec(site["base"]) | {k: v for k, v in site.items() if k != "base"}
    raise ValueError(f"unknown network {name!r}; choose one of {', '.join(NETWORKS)} or pass --cluster FILE")


NIC_RANGES = {"line_rate_gbps": "positive", "efficiency": "share", "count": "count", "incast_onset_bytes": "positive",
              "incast_certain_bytes": "positive", "host_gbytes_per_s": "positive", "share_at_8_gpus": "share",
              "pcie_gbytes_per_s": "positive", "switch_buffer_bytes": "positive",
              "buffer_alpha": "positive", "measured_gbps": "positive", "per_flow_gbps": "positive",
              "per_flow_gbps_placement_group": "positive"}  # every other NIC key: a non-negative number


INFINITE_OK = ("incast_onset_bytes", "incast_certain_bytes", "switch_buffer_bytes", "per_flow_gbps",
               "per_flow_gbps_placement_group")  # inf: no such limit


def _outside_physical_range(key: str, kind: str, value: float) -> str:
    """Where a [network] value lies outside what hardware has (the bounds above), in words; "" if inside."""
    if kind == "share" and value < MIN_SHARE:
        return f"below {MIN_SHARE:g}"
    if UNITS[key] == "bytes" and math.isfinite(value) and value > MAX_SWITCH_BYTES:
        return f"above {MAX_SWITCH_BYTES:g}"
    if UNITS[key] == "bytes" and value < 1:
        return "below 1 (a buffer holds whole bytes)"
    if UNITS[key] == "GB/s" and value and not MIN_GBYTES_PER_S <= value <= MAX_INTRA_GBYTES_PER_S:
        return f"outside [{MIN_GBYTES_PER_S:g}, {MAX_INTRA_GBYTES_PER_S:g}]"
    if key == "buffer_alpha" and not 1 / 128 <= value <= MAX_BUFFER_ALPHA:
        return f"outside [1/128, {MAX_BUFFER_ALPHA:g}]"
    if key.startswith("per_flow") and math.isfinite(value) and value > MAX_LINE_RATE_GBPS:
        return f"above {MAX_LINE_RATE_GBPS:g}"
    return ""


def make_nic(name: str, spec: dict[str, Any], owner: str | None = None) -> Nic:
    """A NIC from TOML values (units in the key names), checked in those units (errors name the key, its unit and
    the value as written), then converted to SI once."""
    owner = owner or f"network {name!r}"
    values: dict[str, Any] = {}
    for key, (attr, factor) in NIC_KEYS.items():
        if key not in spec:
            continue
        value, kind = spec[key], NIC_RANGES.get(key, "non-negative")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        finite_ok = number and (math.isfinite(value) or (key in INFINITE_OK and value == math.inf))
        if kind == "count":
            ok, wanted = isinstance(value, int) and not isinstance(value, bool) and value >= 1, "a positive integer"
        elif kind == "share":
            ok, wanted = finite_ok and 0 < value <= 1, "a number in (0, 1]"
        elif kind == "positive":
            ok, wanted = finite_ok and value > 0, "a positive number"
        else:
            ok, wanted = finite_ok and value >= 0, "a non-negative number"
        if not ok:
            raise ValueError(f"{owner} {key} must be {wanted} ({UNITS[key]}), got {value!r}")
        if key == "line_rate_gbps" and value < MIN_LINE_RATE_GBPS:
            raise ValueError(f"{owner} line_rate_gbps = {value!r} Gb/s is below {MIN_LINE_RATE_GBPS:g} Gb/s (10 Mb/s "
                             "Ethernet), no cluster network (the key is in Gb/s)")
        if key == "line_rate_gbps" and value > MAX_LINE_RATE_GBPS:
            raise ValueError(f"{owner} line_rate_gbps = {value!r} Gb/s exceeds {MAX_LINE_RATE_GBPS:g} Gb/s per NIC "
                             "(the key is in Gb/s, not bits/s)")
        if UNITS[key] == "us" and value > MAX_TIME_US:
            raise ValueError(f"{owner} {key} = {value!r} us exceeds {MAX_TIME_US:g} us (1 s), longer than light takes "
                             "around the Earth: no cluster network (the key is in microseconds)")
        if key == "retransmission_timeout_s" and value > MAX_RETRANSMISSION_TIMEOUT_S:
            raise ValueError(f"{owner} {key} = {value!r} s exceeds {MAX_RETRANSMISSION_TIMEOUT_S:g} s, Linux's "
                             "largest TCP retransmission timeout")
        outside = _outside_physical_range(key, kind, value)
        if outside:
            raise ValueError(f"{owner} {key} = {value!r:.40} ({UNITS[key]}) is {outside}: no cluster network has it "
                             "(the bounds and their sources are in sim/hardware.py)")
        if key == "latency_us" and 0 < value < MIN_NONZERO_LATENCY_US:
            raise ValueError(f"{owner} latency_us = {value!r} us is below {MIN_NONZERO_LATENCY_US:g} us (10 ns) "
                             "and not 0 (the key is in microseconds, not seconds)")
        values[attr] = value * factor if key != "count" else value
    for key, (attr, _) in NIC_KEYS.items():
        if key in ("line_rate_gbps", "efficiency", "latency_us") and attr not in values:
            raise ValueError(f"{owner}: needs {key} ({UNITS[key]}) or a preset")
    fitted_on = tuple((k, tuple(v)) for k, v in spec.get("fitted_on", {}).items())
    if not isinstance(spec.get("placement_group", False), bool):
        raise ValueError(f"{owner} placement_group must be true or false (whether the nodes are in one cluster "
                         f"placement group), got {spec['placement_group']!r}")
    try:
        return Nic(name=name, transport=spec.get("transport", ""), fitted=bool(spec.get("fitted", False)),
                   fitted_on=fitted_on, source=spec.get("source", ""),
                   placement_group=spec.get("placement_group", False), vendor=spec.get("nic_vendor", ""), **values)
    except ValueError as error:
        raise ValueError(str(error).replace(f"network {name!r}", owner)) from None


def nic_preset(name: str, **overrides: Any) -> Nic:
    """A network preset or site profile by name, with TOML-style overrides."""
    return make_nic(name, network_spec(name) | overrides)


def intra_preset(name: str) -> Intra:
    if name not in INTRA:
        raise ValueError(f"unknown intra-node fabric {name!r}; choose one of {', '.join(INTRA)}")
    spec = INTRA[name]
    return Intra(name, spec["port_gbytes_per_s"] * 1e9, spec.get("fabric_gbytes_per_s", math.inf) * 1e9,
                 spec["latency_us"] * 1e-6, spec.get("kind", "nvlink"), spec.get("source", ""),
                 spec.get("nvls_gbytes_per_s", 0.0) * 1e9)


@lru_cache(maxsize=64)
def framework_preset(name: str) -> Framework:
    """A training framework by name (presets/frameworks.toml), its figures converted to bytes and seconds."""
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose one of {', '.join(FRAMEWORKS)}")
    spec = FRAMEWORKS[name]
    splits = tuple((model, tuple(starts)) for model, starts in spec.get("fusion_splits", {}).items())
    return Framework(name, spec["bucket_cap_mb"] * 2**20, spec["first_bucket_mb"] * 2**20,
                     bool(spec["overlaps_backward"]), spec["cycle_ms"] * 1e-3, spec.get("source", ""),
                     spec.get("pattern", "allreduce"), bool(spec.get("servers_on_workers", False)), splits,
                     float(spec.get("partition_bytes", 0)), float(spec.get("host_reduce_gbytes_per_s", 0)) * 1e9,
                     bool(spec.get("whole_variables", False)), float(spec.get("rpc_gbytes_per_s", 0)) * 1e9,
                     tuple(spec.get("unmodelled", ())), str(spec.get("shard_group", "all")),
                     bool(spec.get("gather_in_backward", True)))


def default_intra(gpu: str) -> str:
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; choose one of {', '.join(GPUS)}")
    return GPUS[gpu]["intra"]


def cluster(network: str, n_nodes: int, gpus_per_node: int = 8, intra: str | None = None, gpu: str = "a100",
            oversubscription: float = 1.0, nic_count: int | None = None, framework: str = "ddp") -> Cluster:
    """A cluster from preset names (``network``: a generic preset or a site profile; ``framework``: a training
    framework of presets/frameworks.toml)."""
    nic = nic_preset(network) if nic_count is None else nic_preset(network, count=nic_count)
    intra_name = intra or default_intra(gpu)
    jitter_cv, jitter_prov = default_step_jitter(nic)
    loss_scale, loss_prov = default_multinode_loss_scale(nic)
    prov = (("network", f"preset {network}" + (" (site profile, FITTED)" if nic.fitted else "")),
            ("intra", f"preset {intra_name}"), ("gpu", gpu), ("nodes", "argument"), ("framework", framework),
            GPU_SPEED_DEFAULT, jitter_prov, loss_prov)
    fabric = intra_preset(intra_name)
    return Cluster(layout_of(n_nodes, gpus_per_node), nic, fabric, oversubscription, gpu, network, prov,
                   framework=framework, step_jitter_cv=jitter_cv, multinode_loss_scale=loss_scale)


CLUSTER_KEYS = {"nodes", "gpus_per_node", "gpu", "network", "intra", "switch", "name", "framework", "comm_library",
                "sockets_per_connection", "gpu_speed_cv", "step_jitter_cv"}
INTRA_KEYS = {"preset", "port_gbytes_per_s", "fabric_gbytes_per_s", "latency_us", "kind"}


def load_cluster(path: str | Path, n_nodes: int | None = None, gpus_per_node: int | None = None,
                 gpu: str | None = None, oversubscription: float | None = None,
                 framework: str | None = None) -> Cluster:
    """A cluster described by a TOML file (``sim/presets/example_cluster.toml``); one ValueError naming the file,
    the key and its unit if malformed. The arguments given (the command line's) win over the file's values.

    Keys: ``name``, ``nodes``, ``gpus_per_node``, ``gpu``; ``[network]`` with ``preset`` (any ``--network`` name)
    and/or ``transport``, ``line_rate_gbps``, ``efficiency``, ``latency_us``, ``peer_overhead_us``, ``count``,
    ``measured_gbps`` (a link rate measured host to host, set-up data in place of line rate x efficiency)
    (and a site's ``message_overhead_us``, ``step_overhead_us``, ``incast_*_bytes``); ``[intra]`` with ``preset``
    and/or ``port_gbytes_per_s``, ``fabric_gbytes_per_s``, ``latency_us``; ``[switch]`` with
    ``oversubscription``; ``framework`` (presets/frameworks.toml, default ddp); ``comm_library``
    (presets/comm_libraries.toml, default nccl) and ``sockets_per_connection``; ``[network] placement_group``
    (true where the nodes are in one cluster placement group, on a preset with a per-flow cap). A file without
    ``[network] preset`` takes its transport's hardware constants, never a site's fit. ``Cluster.provenance`` says
    which figure came from a preset, the file, the command line or a default.
    """
    path = Path(path)
    text = read_text_bounded(path, MAX_CLUSTER_FILE_BYTES, "cluster file")  # a regular file; no FIFO, no device
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: malformed TOML: {error}") from None
    try:
        return _cluster_from(data, path, n_nodes, gpus_per_node, gpu, oversubscription, framework)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    except (TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"{path}: malformed cluster description ({error})") from None


def _cluster_from(data: dict, path: Path, n_nodes, gpus_per_node, gpu, oversubscription, framework) -> Cluster:
    if not data:
        raise ValueError("the cluster file is empty: describe at least [network] (sim/presets/example_cluster.toml)")
    unknown = set(data) - CLUSTER_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; expected some of {sorted(CLUSTER_KEYS)}")
    for table in ("network", "intra", "switch"):
        if table in data and not isinstance(data[table], dict):
            raise ValueError(f"[{table}] must be a table")
    prov: list[tuple[str, str]] = []
    net = dict(data.get("network", {"preset": "10gbe"}))  # no [network] table: the default preset
    preset = net.pop("preset", None)
    marks = {"transport", "fitted", "source", "placement_group", "nic_vendor"}  # fitted/source: a file whose
    # constants were fitted says so; placement_group, nic_vendor: set-up facts of a cloud network
    extra = set(net) - set(NIC_KEYS) - marks
    if extra:
        raise ValueError(f"[network] has unknown keys {sorted(extra)}; expected some of "
                         f"{sorted(set(NIC_KEYS) | marks | {'preset'})}")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if preset is not None:
        if not isinstance(preset, str):
            raise ValueError(f"[network] preset must be a network name, got {preset!r}")
        spec = network_spec(preset)
        old, new = spec["transport"], net.get("transport", spec["transport"])
        if new != old:  # NCCL fell back to TCP on InfiniBand, say
            if new not in TRANSPORTS:
                raise ValueError(f"[network] transport must be 'socket' or 'ib', got {new!r}")
            dropped = sorted(k for k in spec if k in TRANSPORT_DEPENDENT_KEYS)
            spec = TRANSPORTS[new] | {k: v for k, v in spec.items() if k not in TRANSPORT_DEPENDENT_KEYS}
            prov.append(("transport", f"{new} in place of {preset}'s {old}: the {new} transport's constants, not "
                                      f"the preset's ({', '.join(dropped)})"))
        spec = spec | net
        prov.append(("network", f"preset {preset}" + (f", overridden in the file: {', '.join(sorted(net))}"
                                                      if net else "") + ("" if "network" in data else " (default)")))
    else:
        transport = net.get("transport")
        if transport not in TRANSPORTS:
            raise ValueError("[network] needs a preset or a transport ('socket' or 'ib'), "
                             f"got transport = {transport!r}")
        spec = TRANSPORTS[transport] | net
        defaulted = sorted(k for k in TRANSPORTS[transport] if k in NIC_KEYS and k not in net)
        prov.append(("network", f"from the file ({', '.join(sorted(net))}); transport {transport} defaults: "
                                f"{', '.join(defaulted) or 'none'}"))
    if "switch_buffer_bytes" in net:  # the user's own switch: its incast is no assumption of ours
        prov.append(("switch buffer", f"the file's switch_buffer_bytes = {net['switch_buffer_bytes']}"))
    if "measured_gbps" in net and "efficiency" in net:
        raise ValueError("[network] gives both measured_gbps (a measured link rate) and efficiency (a share of the "
                         "line rate): the measured rate replaces line rate x efficiency; keep one")
    nic = make_nic(preset if preset is not None and not net else str(name), spec, owner="[network]")
    gpu_from = "command line" if gpu else ("file" if "gpu" in data else "default a100")
    gpu = gpu or data.get("gpu", "a100")
    prov.append(("gpu", f"{gpu} ({gpu_from})"))
    intra_spec = dict(data.get("intra", {}))
    extra = set(intra_spec) - INTRA_KEYS
    if extra:
        raise ValueError(f"[intra] has unknown keys {sorted(extra)}; expected some of {sorted(INTRA_KEYS)}")
    base_name = intra_spec.pop("preset", None)
    base = intra_preset(base_name or default_intra(gpu))
    for key in ("port_gbytes_per_s", "fabric_gbytes_per_s", "latency_us"):
        if key in intra_spec:
            value = intra_spec[key]
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
                value >= 0 if key == "latency_us" else value > 0)
            if not ok:
                kind = "non-negative" if key == "latency_us" else "positive"
                raise ValueError(f"[intra] {key} must be a {kind} number ({UNITS.get(key, 'us')}), got {value!r}")
            bound = MAX_TIME_US if key == "latency_us" else MAX_INTRA_GBYTES_PER_S
            if key != "latency_us" and value < MIN_GBYTES_PER_S:
                raise ValueError(f"[intra] {key} = {value!r:.40} GB/s is below {MIN_GBYTES_PER_S:g} GB/s (1 kB/s): no "
                                 "intra-node fabric is that slow")
            if value > bound:
                raise ValueError(f"[intra] {key} = {value!r} {UNITS.get(key, 'us')} exceeds {bound:g}: no "
                                 "intra-node fabric is that " + ("slow" if key == "latency_us" else "fast"))
    intra = Intra(base.name, intra_spec.pop("port_gbytes_per_s", base.port_bandwidth / 1e9) * 1e9,
                  intra_spec.pop("fabric_gbytes_per_s", base.fabric_bandwidth / 1e9) * 1e9,
                  intra_spec.pop("latency_us", base.latency * 1e6) * 1e-6, intra_spec.pop("kind", base.kind),
                  base.source, base.nvls_bandwidth)
    prov.append(("intra", f"preset {base.name}" + (" (file)" if base_name else f" (default for {gpu})")
                 + (", overridden in the file" if set(data.get("intra", {})) - {"preset"} else "")))
    switch = dict(data.get("switch", {}))
    from_file = switch.pop("oversubscription", None)
    leaf = switch.pop("nodes_per_leaf", 1)
    if switch:
        raise ValueError(f"[switch] has unknown keys {sorted(switch)}; expected oversubscription, nodes_per_leaf")
    if not (isinstance(leaf, int) and not isinstance(leaf, bool) and 1 <= leaf <= MAX_GPUS):
        raise ValueError(f"[switch] nodes_per_leaf must be a positive integer ({UNITS['nodes_per_leaf']}) of at most "
                         f"{MAX_GPUS:,}, the largest cluster the simulator answers, got {leaf!r:.40}")
    prov.append(("nodes per leaf", f"{leaf} ({'file' if 'nodes_per_leaf' in data.get('switch', {}) else 'default'})"))
    if from_file is not None and not (isinstance(from_file, int | float) and not isinstance(from_file, bool)
                                      and 1 <= from_file <= MAX_OVERSUBSCRIPTION):
        raise ValueError(f"[switch] oversubscription must be a number >= 1 and <= {MAX_OVERSUBSCRIPTION:g} "
                         f"({UNITS['oversubscription']}), "
                         f"got {from_file!r}")
    if oversubscription is not None:
        prov.append(("oversubscription", f"{oversubscription:g} (command line)"))
    else:
        prov.append(("oversubscription", f"{from_file:g} (file)" if from_file is not None else "1 (default)"))
        oversubscription = 1.0 if from_file is None else from_file
    counts = {}
    for key, given in (("nodes", n_nodes), ("gpus_per_node", gpus_per_node)):
        value = given if given is not None else data.get(key, 1 if key == "nodes" else 8)
        in_file = data.get(key, 1)  # checked even where the command line wins: a wrong file is said so
        if key in data and not (isinstance(in_file, int) and not isinstance(in_file, bool)
                                and 1 <= in_file <= MAX_GPUS):
            raise ValueError(f"{key} must be a positive integer ({UNITS[key]}) of at most {MAX_GPUS:,}, got "
                             f"{in_file!r:.40}")
        counts[key] = value
        prov.append((key, f"{value} ({'command line' if given is not None else 'file' if key in data else 'default'})"))
    framework_from = "command line" if framework else ("file" if "framework" in data else "default")
    framework = framework or data.get("framework", "ddp")
    if not isinstance(framework, str) or framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    prov.append(("framework", f"{framework} ({framework_from})"))
    library = data.get("comm_library", "nccl")
    if not isinstance(library, str) or library not in COMM_LIBRARIES:
        raise ValueError(f"comm_library must be one of {', '.join(COMM_LIBRARIES)}, got {library!r}")
    sockets = data.get("sockets_per_connection")
    if "comm_library" in data:
        prov.append(("comm library", f"{library} (file)"))
    if sockets is not None:
        sockets, entry = sockets_setting(sockets, nic, "sockets_per_connection", "file")
        prov.append(entry)
    speed_cv = check_gpu_speed_cv(data.get("gpu_speed_cv", GPU_SPEED_CV), "gpu_speed_cv")
    prov.append(("gpu speed spread", f"{speed_cv:.4f} of the median per GPU (file)") if "gpu_speed_cv" in data
                else GPU_SPEED_DEFAULT)
    jitter_cv, jitter_prov = default_step_jitter(nic)
    if "step_jitter_cv" in data:
        jitter_cv = check_step_jitter_cv(data["step_jitter_cv"], "step_jitter_cv")
        jitter_prov = ("step jitter", f"{jitter_cv:.4f} of the median step per GPU (file)")
    prov.append(jitter_prov)
    loss_scale, loss_prov = default_multinode_loss_scale(nic)
    prov.append(loss_prov)
    return Cluster(layout_of(counts["nodes"], counts["gpus_per_node"]), nic, intra, oversubscription, gpu, str(name),
                   tuple(prov), leaf, framework, comm_library=library, sockets_per_connection=sockets,
                   gpu_speed_cv=speed_cv, step_jitter_cv=jitter_cv, multinode_loss_scale=loss_scale)


LIMIT_NAMES = {"wire": "the wire", "measured": "the measured link rate", "pcie": "the GPU-NIC PCIe link",
               "sockets": "sockets shared by its GPUs", "flows": "the cloud's cap per TCP flow",
               "host": "the host-staged socket path"}


def _binding(c: Cluster) -> str:
    limits = c.nic_limits()
    return LIMIT_NAMES[min(limits, key=limits.get)]


def describe(c: Cluster, nodes: str | None = None) -> list[str]:
    """The cluster's name, key figures and where each came from: printed by every sim command. ``nodes``: the node
    count in words where it is not ``c``'s own (a sweep's)."""
    nic = c.nic
    nodes = nodes or f"{c.n_nodes} node{'s' if c.n_nodes != 1 else ''}"
    lines = [f"cluster {c.name or nic.name}: {nodes} x {c.gpus_per_node} {c.gpu.upper()}, "
             f"{nic.count} x {nic.line_rate / 1e9:g} Gb/s {nic.transport} NIC per node "
             + (f"(measured {nic.measured_rate / 1e9:g} Gb/s host to host) " if nic.measured_rate is not None else "")
             + f"({c.nic_bandwidth / 1e9:.2f} GB/s payload each, limited by {_binding(c)}), intra {c.intra.name} "
             f"{c.intra.port_bandwidth / 1e9:g} GB/s per GPU, oversubscription {c.oversubscription:g}"
             + (f" above leaves of {c.nodes_per_leaf} nodes" if c.nodes_per_leaf > 1 else "")]
    if nic.fitted and not nic.fitted_on:  # a cluster file written by birder calibrate
        lines.append(f"  FITTED network constants (efficiency {nic.efficiency:.3g}, latency "
                     f"{nic.latency * 1e6:.3g} us, per peer {nic.peer_overhead * 1e6:.3g} us): {nic.source}")
    elif nic.fitted:
        lines.append(f"  site profile {nic.name}: FITTED constants (message {nic.message_overhead * 1e6:.0f} us, "
                     f"step {nic.step_overhead * 1e6:.1f} us, efficiency {nic.efficiency:.3g}); fitted on "
                     + "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in nic.fitted_on))
    if "flows" in c.nic_limits():
        lines.append(f"  TCP flows        {c.tcp_flows_per_nic():g} per NIC ({c.comm_library}), each capped at "
                     f"{nic.per_flow_rate / 1e9:g} Gb/s " + ("inside" if nic.placement_group else "outside")
                     + " a cluster placement group")
    for what, where in c.provenance:
        lines.append(f"  {what:16} {where}")
    return lines
