"""Network layer: links, NICs, the switch, and the hardware presets they come from.

A link is a full-duplex port modelled as two ``Link`` objects (one per direction). Concurrent flows share a
link by processor sharing: every flow crossing a link gets ``bandwidth / load`` of it, where ``load`` counts the
active flows, and a flow moves at the smallest share along its path. Rates are recomputed whenever a flow starts
or ends (``FlowNetwork``). Messages are a simpy process (``FlowNetwork.message``): they are posted one by one
(an overhead each, by the engines the system layer names: a NIC for the steps of a collective kernel, each GPU's
proxy for send/recv), move their bytes, and arrive ``latency`` later.

Symmetry. The system layer simulates one representative node (and the parameter server, if any) and lets one
flow stand for ``multiplicity`` identical flows on a link: a flow of multiplicity k adds k to the link's load.
Because every node of a data-parallel job runs the same schedule at the same time, the flows arriving at the
representative node's receive ports mirror the flows that leave its transmit ports, so this is exact for the
symmetric patterns the schedules use (see ``sim/README.md``).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import simpy

PRESETS = Path(__file__).with_name("presets")


# ----------------------------------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class Intra:
    """The fabric inside a node: each GPU's port (per direction) and the node-wide switch behind it."""

    name: str
    port_bandwidth: float  # bytes/s a GPU can send (and, separately, receive) inside the node
    fabric_bandwidth: float  # bytes/s the whole node's intra fabric carries per direction (inf: non-blocking)
    latency: float  # s per message (NCCL per-step hardware + base latency)
    source: str = ""

    def __post_init__(self) -> None:
        _positive(self.name, port_bandwidth=self.port_bandwidth, fabric_bandwidth=self.fabric_bandwidth)
        _non_negative(self.name, latency=self.latency)


@dataclass(frozen=True)
class Nic:
    """The network interfaces of one node; the node's GPUs share them (GPU i uses NIC i * count // G)."""

    name: str
    transport: str  # "socket" (NCCL over TCP) or "ib" (NCCL over verbs)
    line_rate: float  # bits/s of one NIC
    efficiency: float  # share of the line rate NCCL moves as payload
    latency: float  # s one message takes end to end on an idle link, beyond its serialization
    message_overhead: float  # s a GPU's proxy spends posting one point-to-point message (LogGP o)
    count: int = 1
    step_overhead: float = 0.0  # s one step of a collective kernel (ring, tree) costs at the NIC beyond latency
    incast_onset_bytes: float = math.inf  # burst into one port (bytes, see system.burst_bytes) that never times out
    incast_certain_bytes: float = math.inf  # ... from which every burst loses one retransmission timeout
    retransmission_timeout: float = 0.0  # s one such timeout costs (Linux TCP_RTO_MIN)
    source: str = ""

    def __post_init__(self) -> None:
        if self.transport not in ("socket", "ib"):
            raise ValueError(f"network {self.name!r}: transport must be 'socket' or 'ib', got {self.transport!r}")
        _positive(self.name, line_rate=self.line_rate, efficiency=self.efficiency, count=self.count,
                  incast_onset_bytes=self.incast_onset_bytes, incast_certain_bytes=self.incast_certain_bytes)
        if self.incast_certain_bytes < self.incast_onset_bytes:
            raise ValueError(f"network {self.name!r}: incast_certain_bytes must be >= incast_onset_bytes")
        if self.efficiency > 1:
            raise ValueError(f"network {self.name!r}: efficiency must be at most 1, got {self.efficiency}")
        _non_negative(self.name, latency=self.latency, message_overhead=self.message_overhead,
                      step_overhead=self.step_overhead, retransmission_timeout=self.retransmission_timeout)

    @property
    def bandwidth(self) -> float:
        """Payload bytes/s of one NIC per direction."""
        return self.line_rate * self.efficiency / 8


@dataclass(frozen=True)
class Cluster:
    """n_nodes nodes of gpus_per_node GPUs, an intra-node fabric, NICs, and a switch oversubscribed by a factor."""

    n_nodes: int
    gpus_per_node: int
    nic: Nic
    intra: Intra
    oversubscription: float = 1.0  # 1: non-blocking switch; f > 1: each node's uplink share is 1/f of its NICs
    gpu: str = "a100"

    def __post_init__(self) -> None:
        for name in ("n_nodes", "gpus_per_node"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.oversubscription >= 1:
            raise ValueError(f"switch oversubscription must be >= 1, got {self.oversubscription}")

    @property
    def n_gpus(self) -> int:
        return self.n_nodes * self.gpus_per_node

    def with_nodes(self, n_nodes: int) -> Cluster:
        return replace(self, n_nodes=n_nodes)


def _positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
            raise ValueError(f"{owner}: {name} must be a positive number, got {value!r}")


def _non_negative(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, int | float) and not isinstance(value, bool) and value >= 0):
            raise ValueError(f"{owner}: {name} must be a non-negative number, got {value!r}")


# --------------------------------------------------------------------------------------------------- presets
def _load(name: str) -> dict[str, dict[str, Any]]:
    with (PRESETS / name).open("rb") as f:
        return tomllib.load(f)


NETWORKS = _load("networks.toml")
INTRA = _load("intra.toml")
TRANSPORTS = _load("transports.toml")


_NIC_FIELDS = {"line_rate_gbps", "efficiency", "latency_us", "message_overhead_us", "step_overhead_us", "count",
               "incast_onset_bytes", "incast_certain_bytes", "retransmission_timeout"}


def make_nic(name: str, transport: str, values: dict[str, Any], source: str = "") -> Nic:
    """A NIC from TOML-style values (Gb/s, microseconds) over its transport's defaults (``transports.toml``)."""
    if transport not in TRANSPORTS:
        raise ValueError(f"network {name!r}: transport must be 'socket' or 'ib', got {transport!r}")
    fields = {k: v for k, v in (TRANSPORTS[transport] | values).items() if k in _NIC_FIELDS}
    if "line_rate_gbps" not in fields or "latency_us" not in fields:
        raise ValueError(f"network {name!r}: needs line_rate_gbps and latency_us")
    return Nic(name=name, transport=transport, line_rate=fields.pop("line_rate_gbps") * 1e9,
               latency=fields.pop("latency_us") * 1e-6, message_overhead=fields.pop("message_overhead_us") * 1e-6,
               step_overhead=fields.pop("step_overhead_us", 0.0) * 1e-6, source=source, **fields)


def nic_preset(name: str, **overrides: Any) -> Nic:
    """A network preset (``sim/presets/networks.toml``) with its transport's constants (``transports.toml``)."""
    if name not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; choose one of {', '.join(NETWORKS)} or pass --cluster FILE")
    spec = NETWORKS[name]
    return make_nic(name, spec["transport"], spec | overrides, spec.get("source", ""))


def intra_preset(name: str) -> Intra:
    if name not in INTRA:
        raise ValueError(f"unknown intra-node fabric {name!r}; choose one of {', '.join(INTRA)}")
    spec = INTRA[name]
    fabric = spec.get("fabric_gbytes_per_s", math.inf)
    return Intra(name, spec["port_gbytes_per_s"] * 1e9, fabric * 1e9, spec["latency_us"] * 1e-6,
                 spec.get("source", ""))


def default_intra(gpu: str) -> str:
    return {"a100": "a100-nvlink", "h100": "h100-nvlink"}.get(gpu, "a100-nvlink")


def cluster(network: str, n_nodes: int, gpus_per_node: int = 8, intra: str | None = None, gpu: str = "a100",
            oversubscription: float = 1.0) -> Cluster:
    """A cluster from preset names."""
    return Cluster(n_nodes, gpus_per_node, nic_preset(network), intra_preset(intra or default_intra(gpu)),
                   oversubscription, gpu)


def load_cluster(path: str | Path, n_nodes: int | None = None, gpus_per_node: int | None = None,
                 gpu: str | None = None, oversubscription: float | None = None) -> Cluster:
    """A cluster described by a TOML file (see ``sim/presets/example_cluster.toml``); one clear error if malformed.

    Keys: ``nodes``, ``gpus_per_node``, ``gpu``; ``[network]`` with ``preset`` and/or the NIC fields
    (``transport``, ``line_rate_gbps``, ``efficiency``, ``latency_us``, ``message_overhead_us``,
    ``step_overhead_us``, ``count``,
    ``incast_onset_bytes``, ``incast_certain_bytes``, ``retransmission_timeout``); ``[intra]`` with ``preset``
    and/or ``port_gbytes_per_s``, ``fabric_gbytes_per_s``, ``latency_us``; ``[switch]`` with ``oversubscription``.
    The arguments given (the command line's counts, GPU and oversubscription) win over the file's values. A NIC
    without ``preset`` takes its transport's constants (``transports.toml``: for sockets the fitted per-message
    costs and incast bracket, for InfiniBand hardware values), never the fitted constants of the paper's
    InfiniBand cluster (``networks.toml`` [ib-hdr]).
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: malformed TOML: {error}") from None
    known = {"nodes", "gpus_per_node", "gpu", "network", "intra", "switch", "name"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    try:
        net = dict(data.get("network", {}))
        preset = net.pop("preset", None)
        if preset is not None:
            nic = nic_preset(preset, **{k: v for k, v in net.items() if k in _NIC_FIELDS})
        else:
            if "transport" not in net:
                raise ValueError("[network] needs a preset or a transport ('socket' or 'ib')")
            nic = make_nic(data.get("name", path.stem), net["transport"], net)
        extra = set(net) - _NIC_FIELDS - {"transport"}
        if extra:
            raise ValueError(f"[network] has unknown keys {sorted(extra)}")
        gpu = gpu or data.get("gpu", "a100")
        intra_spec = dict(data.get("intra", {}))
        base = intra_preset(intra_spec.pop("preset", default_intra(gpu)))
        intra = Intra(
            base.name,
            intra_spec.pop("port_gbytes_per_s", base.port_bandwidth / 1e9) * 1e9,
            intra_spec.pop("fabric_gbytes_per_s", base.fabric_bandwidth / 1e9) * 1e9,
            intra_spec.pop("latency_us", base.latency * 1e6) * 1e-6,
            base.source,
        )
        if intra_spec:
            raise ValueError(f"[intra] has unknown keys {sorted(intra_spec)}")
        switch = dict(data.get("switch", {}))
        from_file = switch.pop("oversubscription", 1.0)
        oversubscription = from_file if oversubscription is None else oversubscription
        if switch:
            raise ValueError(f"[switch] has unknown keys {sorted(switch)}")
        return Cluster(n_nodes or data.get("nodes", 1), gpus_per_node or data.get("gpus_per_node", 8), nic, intra,
                       oversubscription, gpu)
    except (TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"{path}: malformed cluster description ({error})") from None
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


# ----------------------------------------------------------------------------------------- processor sharing
@dataclass(eq=False)
class Link:
    """One direction of a port: ``bandwidth`` bytes/s shared fairly by the flows on it."""

    name: str
    bandwidth: float
    load: float = 0.0  # sum of the multiplicities of the active flows
    busy_bytes: float = 0.0  # bytes carried so far (counting every multiple of a flow)


@dataclass(eq=False)
class Flow:
    nbytes: float
    path: dict[Link, float]  # link -> multiplicity (how many identical flows this one stands for there)
    done: simpy.Event
    remaining: float = 0.0
    rate: float = 0.0


@dataclass(eq=False)
class FlowNetwork:
    """Fair sharing of links by the flows that cross them, inside one simpy environment."""

    env: simpy.Environment
    active: list[Flow] = field(default_factory=list)
    _stamp: float = 0.0
    _generation: int = 0

    def transfer(self, nbytes: float, path: dict[Link, float]) -> simpy.Event:
        """An event that succeeds when ``nbytes`` have crossed every link of ``path`` at their fair share."""
        done = self.env.event()
        if nbytes <= 0 or not path:
            done.succeed()
            return done
        self._advance()
        flow = Flow(float(nbytes), path, done, remaining=float(nbytes))
        for link, mult in path.items():
            link.load += mult
        self.active.append(flow)
        self._reschedule()
        return done

    def message(self, nbytes: float, path: dict[Link, float], latency: float = 0.0, overhead: float = 0.0,
                posts: int = 1, penalty: float = 0.0):
        """Messages as a process: every flow of ``path`` (its multiplicity counts identical messages) is posted by
        one of several message engines working in parallel, each posting ``posts`` messages one by one at
        ``overhead`` seconds each (LogGP's o). Bytes move while later messages are posted; the last batch (one
        message per engine: 1/posts of every link's flows) is posted at ``posts * overhead`` and then moves on
        its own. ``latency`` (and ``penalty``, retransmission timeouts) follows the last byte."""
        if overhead > 0:
            posted = self.env.now + posts * overhead
            yield self.env.timeout(overhead)
            yield self.transfer(nbytes, path)
            last_batch = max(mult / posts * nbytes / link.bandwidth for link, mult in path.items())
            if self.env.now < posted + last_batch:
                yield self.env.timeout(posted + last_batch - self.env.now)
        else:
            yield self.transfer(nbytes, path)
        if latency + penalty > 0:
            yield self.env.timeout(latency + penalty)

    def _advance(self) -> None:
        elapsed = self.env.now - self._stamp
        if elapsed > 0:
            for flow in self.active:
                moved = flow.rate * elapsed
                flow.remaining -= moved
                for link, mult in flow.path.items():
                    link.busy_bytes += moved * mult
        self._stamp = self.env.now

    def _reschedule(self) -> None:
        for flow in self.active:
            flow.rate = min(link.bandwidth / link.load for link in flow.path)
        if not self.active:
            return
        self._generation += 1
        wait = min(max(flow.remaining, 0.0) / flow.rate for flow in self.active)
        self.env.process(self._wake(wait, self._generation))

    def _wake(self, wait: float, generation: int):
        yield self.env.timeout(wait)
        if generation != self._generation:
            return
        self._advance()
        # a flow is finished when what is left would take under a picosecond
        finished = [f for f in self.active if f.remaining <= f.rate * 1e-12]
        for flow in finished:
            self.active.remove(flow)
            for link, mult in flow.path.items():
                link.load -= mult
            flow.done.succeed()
        self._reschedule()
