"""What a prediction does not know, and how much it matters (issue 27, item 2): every uncertain input of a
prediction with its sourced range (``presets/input_ranges.toml``), propagated into a model-uncertainty width on
log(throughput).

The propagation is one input at a time on the predicted step's own breakdown, no re-simulation: the step time is
``T = compute + exposed communication + compression``, and an input whose range scales one component by a factor
``f`` moves ``T`` as follows (``step_time_at``):

- compute by f: ``T + (f - 1) compute``, never below the busiest link's time (communication then dominates);
- a link class's busy time ``B`` by f: slower (f > 1) adds all the extra time ``(f - 1) B`` to the step (the
  most it can: none of it hidden), faster removes at most the exposed communication, ``min(E, (1 - f) B)``;
- exposed communication or compression by f: ``T + (f - 1)`` times that part;
- the multi-node loss (the step beyond one node's, as the multi-node loss scale left it) by f: ``T + (f - 1)``
  times it;
- the whole step by f: ``f T`` (a loss the simulator does not see at all, ``multinode_unseen``).

Each input gives log(T / T') at its range's two ends; the interval's lower and upper log-widths are the root sum of
squares of the inputs' moves down and up (independent inputs, each range an 80% range), and an input's share of
the width is its half-span squared over the sum. Deterministic, microseconds per prediction. The conformal
correction that turns these widths into an 80% interval (scaled on the corpus, each source left out) is
``sim.uncertainty``'s."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from sim.hardware import PRESETS, Cluster, framework_preset
from sim.stragglers import step_cv, straggler_factor

INPUT_RANGES_FILE = PRESETS / "input_ranges.toml"
COMPONENTS = ("compute", "inter", "intra", "exposed", "compression", "multinode", "step")
MIN_LOG_WIDTH = 0.01  # a width's floor (1%): the normalised residual divides by it
# a simulated multi-node loss (the step beyond one node's, over one node's) under 5%: the simulator sees almost none,
# and the sources' spread beyond it is an input of its own (``multinode_unseen``; sim/validation/multinode_loss.py)
MIN_SIMULATED_LOSS = 0.05


@dataclass(frozen=True)
class InputRange:
    """One uncertain input: its table key, name, the step component its range acts on (``COMPONENTS``), the
    range (a factor on that component's time; for the per-step jitter, on its coefficient of variation) and its
    source."""

    key: str
    name: str
    on: str
    low: float
    high: float
    source: str


@lru_cache(maxsize=1)
def input_ranges() -> dict[str, InputRange]:
    """``presets/input_ranges.toml`` as ``{key: InputRange}`` (nested tables joined by dots: ``link.socket``);
    ValueError for an entry without a name, a component, a range with 0 < low <= 1 <= high (the jitter's low end
    may be 0), or a source."""
    data = tomllib.loads(INPUT_RANGES_FILE.read_text(encoding="utf-8"))
    out = {}

    def walk(prefix: str, table: dict) -> None:
        if "name" not in table:
            for k, v in table.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
            return
        low, high = table.get("range", table.get("cv_range", (None, None)))
        if table.get("on") not in COMPONENTS or not table.get("source") or low is None or not (
                0 <= low <= 1 <= high) or (low == 0 and "cv_range" not in table):
            raise ValueError(f"{INPUT_RANGES_FILE}: [{prefix}] needs name, on (one of {COMPONENTS}), range "
                             "[low <= 1 <= high] and source")
        out[prefix] = InputRange(prefix, table["name"], table["on"], float(low), float(high), table["source"])

    walk("", data)
    return out


@dataclass(frozen=True)
class StepParts:
    """The predicted step (seconds): its time, compute, exposed communication, compression, the busy time of
    the inter- and intra-node links, and the multi-node loss (the step beyond one node's)."""

    iteration_s: float
    compute_s: float
    exposed_s: float
    compression_s: float
    inter_busy_s: float
    intra_busy_s: float
    multinode_s: float = 0.0

    @property
    def simulated_loss(self) -> float:
        """The step beyond one node's over one node's step: 0 on one node."""
        return self.multinode_s / (self.iteration_s - self.multinode_s)


def step_parts(c: Cluster, p: Mapping) -> StepParts:
    """The breakdown of prediction ``p`` (``birder predict --json``'s keys) on ``c``: a link class's busy time is
    the bytes one GPU sends through it over that GPU's share of its bandwidth (the node's NICs' payload rate,
    ``Cluster.nic_bandwidth``, times the share training's collectives reach; the GPU's intra-node port), at least
    the exposed communication and at most the step."""
    t, exposed = p["iteration_s"], p["exposed_communication_s"]
    inter = intra = 0.0
    if c.n_nodes > 1:
        inter = p["inter_node_bytes_per_gpu"] * c.gpus_per_node / (
            c.nic_bandwidth * c.nic.count * c.collective_efficiency)
        inter = min(max(inter, exposed), t)
    if c.gpus_per_node > 1:
        intra = min(p["intra_node_bytes_per_gpu"] / c.intra.port_bandwidth, t)
    multinode = 0.0
    if c.n_nodes > 1:  # the step beyond one node's step for the same work per GPU (the single-node throughput's)
        one_node_s = t * p["throughput"] / (c.n_nodes * p["single_node_throughput"])
        multinode = max(0.0, t - one_node_s)
    return StepParts(t, p["compute_s"], exposed, p["compression_s"], inter, intra, multinode)


def step_time_at(parts: StepParts, on: str, factor: float) -> float:
    """The step time with component ``on`` scaled by ``factor`` (the module's rules)."""
    t = parts.iteration_s
    if on == "step":
        return t * factor
    if on == "compute":
        return max(t + (factor - 1) * parts.compute_s, parts.inter_busy_s, parts.intra_busy_s, 1e-12)
    if on in ("inter", "intra"):
        busy = parts.inter_busy_s if on == "inter" else parts.intra_busy_s
        return t + (factor - 1) * busy if factor >= 1 else t - min(parts.exposed_s, (1 - factor) * busy)
    part = {"exposed": parts.exposed_s, "compression": parts.compression_s, "multinode": parts.multinode_s}[on]
    return max(t + (factor - 1) * part, 1e-12)


def uncertain_inputs(c: Cluster, measured_node: bool, simulated_loss: float,
                     unmodelled: list[str] | tuple[str, ...] = ()) -> list[tuple[InputRange, str]]:
    """The inputs of a prediction on ``c`` that are uncertain, each ``(its range, why it applies)``: the
    single-node throughput (measured or from the built-in profiles), and with more than one node the links, the
    cloud's per-flow cap, NCCL's sockets, the framework, summation servers or MPI staging, the per-step jitter,
    the multi-node loss, where the prediction's own (``simulated_loss``, ``StepParts.simulated_loss``) is under
    ``MIN_SIMULATED_LOSS`` the loss it does not see, and every ``unmodelled`` sentence not covered by one of
    these."""
    r = input_ranges()
    out = [(r["single_node.measured"], "--single-node-throughput given") if measured_node else
           (r["single_node.profile"], f"compute from the built-in {c.gpu} profile")]
    if c.n_nodes == 1:
        return out
    nic, framework = c.nic, framework_preset(c.framework)
    calibrated = nic.fitted and not nic.fitted_on  # a cluster file of birder calibrate
    if calibrated or nic.measured_rate is not None:
        out.append((r["link.measured"], "birder calibrate cluster file" if calibrated else "measured link rate"))
    elif nic.transport == "socket":
        out.append((r["link.socket"], f"{nic.name}: NCCL over TCP sockets"))
    else:
        out.append((r["link.verbs"], f"{nic.name}: verbs transport"))
    if c.gpus_per_node > 1:
        out.append((r["link.intra"], c.intra.name))
    covered = set()
    if nic.transport == "socket" and math.isfinite(nic.per_flow_rate) and not calibrated:
        out.append((r["per_flow_cap"], f"{nic.name}: a cloud's cap on each TCP flow"))
        covered.add("placement group")
    if nic.transport == "socket" and not calibrated:
        old = c.comm_library == "nccl-before-2.4.8"
        out.append((r["nccl_sockets.old" if old else "nccl_sockets.current"], f"comm library {c.comm_library}"))
    if framework.pattern == "summation-servers":
        out.append((r["parameter_servers"], f"framework {c.framework}: summation servers"))
        covered |= set(framework.unmodelled)
    elif framework.host_reduce_bandwidth > 0:
        out.append((r["mpi_staging"], f"framework {c.framework}: all-reduce staged through host memory"))
        covered |= set(framework.unmodelled)
    out.append((r["framework.cycle" if framework.cycle > 0 else "framework.allreduce"], f"framework {c.framework}"))
    out.append((r["step_jitter"], f"per-step jitter cv {c.step_jitter_cv:g}"))
    out.append((r["multinode_loss"], "sources seen lost more or less to scaling than simulated"))
    if simulated_loss < MIN_SIMULATED_LOSS:
        out.append((r["multinode_unseen"], f"simulated multi-node loss {simulated_loss:.1%}, under "
                                           f"{MIN_SIMULATED_LOSS:.0%}: sources seen lost more or less than that"))
    for sentence in unmodelled:
        if sentence in covered or (
                "placement group" in sentence and "placement group" in covered):
            continue
        out.append((replace(r["unmodelled"], name=f"unmodelled: {sentence}"), "birder predict --json unmodelled"))
    return out


@dataclass(frozen=True)
class Driver:
    """One input's effect on a prediction: log(throughput at the range's end / predicted) at its low and high
    ends (``down`` <= 0 <= ``up`` after sorting), with its range and why it applies."""

    spec: InputRange
    why: str
    down: float
    up: float

    def half_span(self, scale_down: float = 1.0, scale_up: float = 1.0) -> float:
        return (scale_up * self.up - scale_down * self.down) / 2


@dataclass(frozen=True)
class ModelUncertainty:
    """A prediction's propagated widths on log(throughput), down and up (each at least ``MIN_LOG_WIDTH``), and
    the inputs behind them."""

    down: float
    up: float
    drivers: tuple[Driver, ...]

    def drivers_json(self, throughput: float, scale_down: float = 1.0, scale_up: float = 1.0,
                     extra: tuple[tuple[dict, float], ...] = (), ceiling: float = math.inf) -> list[dict]:
        """``birder predict --json``'s ``interval_drivers``: per input, largest share first, ``name``, ``input``
        (its key in input_ranges.toml), ``acts_on`` (the step component), ``range`` (the factor on it; the
        jitter's cv multiple), ``throughput_range`` (the prediction at its two ends, the conformal scales
        ``scale_down`` / ``scale_up`` applied), ``share`` (of the interval's width: half-span squared over the
        sum; the shares sum to 1), ``why`` and ``source``. ``extra``: entries of other widening (an entry and its
        log half-span) ranked with them. ``ceiling``: the most the throughput can be (linear scaling of a measured
        node, ``sim.uncertainty.linear_ceiling``), which holds each upper end as it holds the interval's."""
        spans = [(d, d.half_span(scale_down, scale_up)) for d in self.drivers]
        total = sum(s * s for _, s in spans) + sum(s * s for _, s in extra)
        out = []
        for d, s in spans:
            out.append({"name": d.spec.name, "input": d.spec.key, "acts_on": d.spec.on,
                        "range": [d.spec.low, d.spec.high],
                        "throughput_range": [throughput * math.exp(scale_down * d.down),
                                             min(throughput * math.exp(scale_up * d.up), max(throughput, ceiling))],
                        "share": s * s / total if total > 0 else 1 / len(spans), "why": d.why,
                        "source": d.spec.source})
        out += [{**entry, "share": s * s / total if total > 0 else 0.0} for entry, s in extra]
        return sorted(out, key=lambda e: -e["share"])


def model_uncertainty(c: Cluster, p: Mapping, measured_node: bool,
                      unmodelled: list[str] | tuple[str, ...] = (), accumulation_steps: int = 1) -> ModelUncertainty:
    """Propagate the uncertain inputs of prediction ``p`` on ``c`` (``uncertain_inputs``) one at a time
    (``step_time_at``) into the widths down and up of log(throughput) (root sum of squares); the per-step
    jitter averages over the step's ``accumulation_steps`` micro-batches, as in the prediction."""
    parts = step_parts(c, p)
    drivers = []
    for spec, why in uncertain_inputs(c, measured_node, parts.simulated_loss, unmodelled):
        if spec.key == "step_jitter":
            base = straggler_factor(c.n_gpus, c.gpus_per_node, c.straggler_cv(accumulation_steps))
            factors = [straggler_factor(c.n_gpus, c.gpus_per_node,
                                        step_cv(c.gpu_speed_cv, c.step_jitter_cv * m, accumulation_steps)) / base
                       for m in (spec.low, spec.high)]
        elif spec.key == "multinode_loss":  # the range is on the simulated loss: on this one, it is over its scale
            factors = [min(spec.low / c.multinode_loss_scale, 1.0), max(spec.high / c.multinode_loss_scale, 1.0)]
        else:
            factors = [spec.low, spec.high]
        moves = [math.log(parts.iteration_s / step_time_at(parts, spec.on, f)) for f in factors]
        drivers.append(Driver(spec, why, min(*moves, 0.0), max(*moves, 0.0)))
    down = max(math.sqrt(sum(d.down ** 2 for d in drivers)), MIN_LOG_WIDTH)
    up = max(math.sqrt(sum(d.up ** 2 for d in drivers)), MIN_LOG_WIDTH)
    return ModelUncertainty(down, up, tuple(drivers))
