"""Predictions against the published measurements, the fit of the site profiles, and its cross-validation.

``rows()`` reads the rows shipped in the package (sim/presets/birder_public.csv, the Birder paper's Tables 1 and
3), or any file of the same columns. A row's ``network`` is a ``--network`` name; the paper's rows say ``10gbe``
and ``ib-hdr``, which here mean the paper's two clusters, the site profiles ``birder-paper-10gbe`` and
``birder-paper-ib`` (``SITE_OF``). Every prediction is calibrated only with the single-node (8-GPU) throughput
of the same optimizer, model, batch and network, as a user would measure it.

``python -m sim.validate [SITE ...]`` (``fit``) refits a site profile's FITTED constants (``presets/sites.toml``)
on the public multi-node rows of that site, minimising the mean absolute percentage error with Nelder-Mead in
log space (the incast onset of the socket site: the best bracket of consecutive bursts of the rows).
``group_cross_validation`` leaves out whole groups (an optimizer, a GPU count, a network, a model, a batch size,
where the rows hold more than one), refits on the rest and predicts the group left out.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from birder_ref import registry
from safeio.inputs import read_text_bounded
from sim.hardware import (
    COMM_LIBRARIES,
    FRAMEWORKS,
    GENERIC_NETWORKS,
    GPUS,
    INTRA,
    MAX_GPUS,
    NETWORKS,
    SITES,
    TRANSPORTS,
    Cluster,
    Nic,
    cluster,
    default_intra,
    make_nic,
    network_spec,
)
from sim.models import MODELS, model_profile
from sim.stragglers import STEP_JITTER_GRID
from sim.system import burst_bytes, phase_load, step_schedule
from sim.validation import MAX_SCALING_EFFICIENCY, REGIMES, PublishedRow, regime_of_efficiency
from sim.validation import regime as corpus_regime
from sim.workload import GRAD_BITS, OPTIMIZERS, ddp_buckets, policy, predict

if TYPE_CHECKING:
    from tqdm import tqdm

    from sim import workload

PUBLIC_CSV = Path(__file__).resolve().parent / "presets" / "birder_public.csv"
SITE_OF = {"10gbe": "birder-paper-10gbe", "ib-hdr": "birder-paper-ib"}  # the paper's rows name its clusters so


@dataclass(frozen=True)
class Row:
    model: str
    batch_per_gpu: int
    network: str
    optimizer: str
    gpus: int
    throughput: float


COLUMNS = ("model", "batch_per_gpu", "network", "optimizer", "gpus", "throughput")
GPUS_PER_NODE = 8  # the Birder paper's nodes (8 A100s); every row's GPU count is a whole number of such nodes


MAX_BATCH_PER_GPU = 65_536  # as sim.api.MAX_BATCH_PER_GPU (sim.api imports this module: not imported from there)
MAX_CSV_BYTES = 64 << 20  # the published table is 2 kB; 64 MB is a million rows, past what a validation runs


def rows(path: str | Path | None = None) -> list[Row]:
    """The measurements of ``path`` (default: the public rows). ValueError naming the file and row if it has no
    rows, lacks a column, or holds a throughput that is not a positive finite number, an unknown network or a GPU
    count that is not a whole number of nodes, or repeats a configuration."""
    path = Path(path) if path is not None else PUBLIC_CSV
    if not os.path.lexists(path):
        raise ValueError(f"no published measurements at {path}; pass --csv FILE")
    text = read_text_bounded(path, MAX_CSV_BYTES, "table of measurements")  # a regular file; no FIFO, no device
    numbered = [(i, line) for i, line in enumerate(text.splitlines(), 1)
                if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        raise ValueError(f"{path}: no measurements (empty file)")
    reader = csv.DictReader(line for _, line in numbered)
    header = list(reader.fieldnames or ())
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{path}: missing columns {', '.join(missing)}; expected {','.join(COLUMNS)}")
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:  # csv.DictReader would silently keep the last one
        raise ValueError(f"{path}: column {', '.join(repeated)} given twice in the header; keep one")
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        raise ValueError(f"{path}: unknown columns {', '.join(map(repr, unknown))}; expected {','.join(COLUMNS)}")
    out = []
    seen: dict[tuple, int] = {}
    for (lineno, _), rec in zip(numbered[1:], reader, strict=False):
        where = f"{path}, line {lineno}"
        try:
            row = Row(rec["model"], int(rec["batch_per_gpu"]), rec["network"], rec["optimizer"],
                      int(rec["gpus"]), float(rec["throughput"]))
        except (KeyError, ValueError, TypeError) as error:
            raise ValueError(f"{where}: malformed measurement ({error})") from None
        if not (math.isfinite(row.throughput) and row.throughput > 0):
            raise ValueError(f"{where}: throughput must be a positive number of samples/s, got {row.throughput}")
        if row.gpus < 1 or row.gpus % GPUS_PER_NODE:
            raise ValueError(f"{where}: {row.gpus} GPUs is not a whole number of {GPUS_PER_NODE}-GPU nodes")
        if row.gpus > MAX_GPUS:
            raise ValueError(f"{where}: gpus = {row.gpus} exceeds {MAX_GPUS:,}, the largest cluster the simulator "
                             "answers in seconds")
        if not 1 <= row.batch_per_gpu <= MAX_BATCH_PER_GPU:
            raise ValueError(f"{where}: batch_per_gpu must be a positive integer at most {MAX_BATCH_PER_GPU:,}, got "
                             f"{row.batch_per_gpu}")
        if site_of(row.network) not in NETWORKS:
            raise ValueError(f"{where}: unknown network {row.network!r}; choose one of {', '.join(NETWORKS)}")
        key = (row.model, row.batch_per_gpu, row.network, row.optimizer, row.gpus)
        if key in seen:  # counted twice, it would weigh twice in the MAPE and the fit
            raise ValueError(f"{where}: duplicate of line {seen[key]} (same model, batch_per_gpu, network, "
                             "optimizer and gpus): keep one measurement per configuration")
        seen[key] = lineno
        out.append(row)
    if not out:
        raise ValueError(f"{path}: no measurements (only a header or comments)")
    single = {(r.model, r.batch_per_gpu, r.network, r.optimizer): r.throughput for r in out if r.gpus == GPUS_PER_NODE}
    for row in out:
        node = single.get((row.model, row.batch_per_gpu, row.network, row.optimizer))
        linear = node * row.gpus / GPUS_PER_NODE if node is not None else None
        if linear is not None and row.throughput > MAX_SCALING_EFFICIENCY * linear:
            raise ValueError(f"{path}: {row.gpus} GPUs at {row.throughput:g} samples/s is more than "
                             f"{MAX_SCALING_EFFICIENCY:g}x linear scaling of the same table's single node "
                             f"({node:g} samples/s per node): a typo, or not the same configuration")
        if row.throughput > MAX_SAMPLES_PER_GPU_S * row.gpus:
            raise ValueError(f"{path}: {row.gpus} GPUs at {row.throughput:g} samples/s is over "
                             f"{MAX_SAMPLES_PER_GPU_S:g} samples/s per GPU: no training measurement")
    if all(row.gpus <= GPUS_PER_NODE for row in out):
        raise ValueError(f"{path}: only single-node rows ({GPUS_PER_NODE} GPUs or fewer), which calibrate compute "
                         "time and are matched by construction: add multi-node measurements to validate against")
    return out


def site_of(network: str) -> str:
    """The ``--network`` name a row's network stands for (the paper's two clusters are site profiles)."""
    return SITE_OF.get(network, network)


def single_node_or_none(table: list[Row], row: Row, gpus_per_node: int = GPUS_PER_NODE) -> float | None:
    """The throughput of ``table``'s one-node row of ``row``'s model, batch, network and optimizer; None without one."""
    return next((other.throughput for other in table
                 if (other.model, other.batch_per_gpu, other.network, other.optimizer, other.gpus) == (
                     row.model, row.batch_per_gpu, row.network, row.optimizer, gpus_per_node)), None)


def single_node(table: list[Row], row: Row, gpus_per_node: int = GPUS_PER_NODE) -> float:
    found = single_node_or_none(table, row, gpus_per_node)
    if found is None:
        raise ValueError(f"no single-node row for {row.model}/{row.batch_per_gpu}/{row.network}/{row.optimizer}")
    return found


def row_cluster(row: Row, network: str | None = None) -> Cluster:
    return cluster(network or site_of(row.network), row.gpus // GPUS_PER_NODE, GPUS_PER_NODE)


def predict_row(table: list[Row], row: Row, tweak=None, network: str | None = None) -> float:
    c = row_cluster(row, network)
    if tweak is not None:
        c = tweak(c)
    return predict(c, model=row.model, batch_per_gpu=row.batch_per_gpu, optimizer=row.optimizer,
                   single_node_throughput=single_node(table, row)).throughput


@dataclass(frozen=True)
class Prediction:
    """One published row and what the simulator predicts for it."""

    model: str
    batch_per_gpu: int
    network: str  # the row's network, as the CSV names it
    profile: str  # the --network profile it was predicted with (a site profile, or a base preset left unfitted)
    optimizer: str
    gpus: int
    published: float  # samples/s measured
    predicted: float  # samples/s simulated, calibrated by the single-node row
    error: float  # (predicted - published) / published
    left_out: str | None = None  # in a cross-validation: the group "column=value" held out of the fit; else None

    def as_dict(self) -> dict:
        """The JSON row: the fields in order, ``left_out`` only in a cross-validation."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.left_out is None:
            del out["left_out"]
        return out


@dataclass(frozen=True)
class OrderAgreement:
    """Per (model, batch, network, GPU count): the optimizers ranked by published and by predicted throughput."""

    model: str
    batch_per_gpu: int
    network: str
    gpus: int
    published_order: tuple[str, ...]  # fastest first
    predicted_order: tuple[str, ...]
    same: bool  # the two orders are equal

    def as_dict(self) -> dict:
        return {"model": self.model, "batch_per_gpu": self.batch_per_gpu, "network": self.network, "gpus": self.gpus,
                "published_order": list(self.published_order), "predicted_order": list(self.predicted_order),
                "same": self.same}


@dataclass(frozen=True)
class Speedup:
    """One optimizer's throughput over the baseline's, on the same model, batch, network and GPU count."""

    model: str
    batch_per_gpu: int
    network: str
    optimizer: str
    baseline: str
    gpus: int
    published: float  # ratio of the published throughputs
    predicted: float  # ratio of the predicted throughputs

    def as_dict(self) -> dict:
        return asdict(self)


def compare(selected: list[Row], progress=None, tweak=None, table: list[Row] | None = None,
            network: str | None = None) -> list[Prediction]:
    """Predict every row of ``selected``, calibrated by the single-node rows of ``table`` (default: selected)."""
    out = []
    for row in selected:
        predicted = predict_row(table or selected, row, tweak, network)
        out.append(Prediction(row.model, row.batch_per_gpu, row.network, network or site_of(row.network),
                              row.optimizer, row.gpus, row.throughput, predicted,
                              (predicted - row.throughput) / row.throughput))
        if progress is not None:
            progress.update(1)
    return out


def mape(results: list[Prediction]) -> float:
    return sum(abs(r.error) for r in results) / max(1, len(results))


def order_agreement(results: list[Prediction]) -> list[OrderAgreement]:
    """Per (model, batch, network, gpus): the optimizers ranked by published and by predicted throughput."""
    groups: dict[tuple, list[Prediction]] = {}
    for r in results:
        groups.setdefault((r.model, r.batch_per_gpu, r.network, r.gpus), []).append(r)
    out = []
    for key, rs in sorted(groups.items()):
        published = tuple(r.optimizer for r in sorted(rs, key=lambda r: -r.published))
        predicted = tuple(r.optimizer for r in sorted(rs, key=lambda r: -r.predicted))
        out.append(OrderAgreement(*key, published, predicted, published == predicted))
    return out


def speedup_trend(results: list[Prediction], baseline: str = "sgdm") -> list[Speedup]:
    """Per (model, batch, network, optimizer, GPU count): the optimizer's throughput over ``baseline``'s."""
    base = {(r.model, r.batch_per_gpu, r.network, r.gpus): r for r in results if r.optimizer == baseline}
    out = []
    for r in results:
        b = base.get((r.model, r.batch_per_gpu, r.network, r.gpus))
        if b is None or r.optimizer == baseline:
            continue
        out.append(Speedup(r.model, r.batch_per_gpu, r.network, r.optimizer, baseline, r.gpus,
                           r.published / b.published, r.predicted / b.predicted))
    return sorted(out, key=lambda t: (t.model, t.batch_per_gpu, t.network, t.optimizer, t.gpus))


BASES = ("site profiles", "generic presets")  # what an order check predicts the paper's rows on


@dataclass(frozen=True)
class OrderCheck:
    """The rows of a table predicted on one basis: the paper's site profiles (constants fitted on the public rows)
    or the generic presets of the rows' network names (hardware values only, nothing fitted), each calibrated by
    its single-node row; with the order of optimizers in every multi-node (model, batch, network, GPUs) group."""

    basis: str  # one of BASES
    predictions: tuple[Prediction, ...]  # every row, single-node rows included (they are the calibration)
    orders: tuple[OrderAgreement, ...]  # multi-node groups only: a single node is matched by construction

    @property
    def multi_node(self) -> list[Prediction]:
        return [p for p in self.predictions if p.gpus > GPUS_PER_NODE]

    @property
    def orders_wrong(self) -> int:
        return sum(not o.same for o in self.orders)

    @classmethod
    def of(cls, basis: str, predictions: list[Prediction]) -> OrderCheck:
        """The check of ``predictions`` made on ``basis``: their multi-node groups' orders."""
        orders = tuple(o for o in order_agreement(predictions) if o.gpus > GPUS_PER_NODE)
        return cls(basis, tuple(predictions), orders)

    def as_dict(self) -> dict:
        return {"basis": self.basis, "mape_multi_node": mape(self.multi_node), "groups": len(self.orders),
                "orders_wrong": self.orders_wrong, "rows": [p.as_dict() for p in self.predictions],
                "orders": [o.as_dict() for o in self.orders]}


def order_check(table: list[Row], basis: str, progress=None) -> OrderCheck:
    """Predict every row of ``table`` on ``basis`` (``BASES``) and rank the optimizers of every multi-node group
    by published and by predicted throughput. Generic presets take the row's network name as it stands (the
    paper's ``10gbe`` and ``ib-hdr`` are then the hardware presets, not its clusters)."""
    predictions = [p for row in table
                   for p in compare([row], progress=progress, table=table, network=basis_network(basis, row.network))]
    return OrderCheck.of(basis, predictions)


def basis_network(basis: str, network: str) -> str:
    """The ``--network`` profile a paper's network name (``10gbe``, ``ib-hdr``) is predicted on, on ``basis``:
    its cluster's site profile, or the generic preset of the same name."""
    if basis not in BASES:
        raise ValueError(f"unknown basis {basis!r}; choose one of {', '.join(BASES)}")
    return site_of(network) if basis == BASES[0] else network


def order_check_markdown(checks: list[OrderCheck]) -> str:
    """The order checks as the sim README prints them (a test compares them with a fresh run): one line per
    multi-node group, the published order beside each basis's, then each row's error on each basis."""
    head = "| model | batch | network | GPUs | published order | " + " | ".join(c.basis for c in checks) + " |"
    lines = [head, "|" + "---|" * (5 + len(checks))]
    for k, o in enumerate(checks[0].orders):
        cells = [f"{' > '.join(c.orders[k].predicted_order)} ({'right' if c.orders[k].same else '**wrong**'})"
                 for c in checks]
        lines.append(f"| {o.model} | {o.batch_per_gpu} | {o.network} | {o.gpus} | {' > '.join(o.published_order)} | "
                     + " | ".join(cells) + " |")
    lines.append("| | | | | groups in the published order | "
                 + " | ".join(f"{len(c.orders) - c.orders_wrong} of {len(c.orders)}" for c in checks) + " |")
    lines += ["", "| model | batch | network | optimizer | GPUs | published | "
              + " | ".join(f"{c.basis} (error)" for c in checks) + " |", "|" + "---|" * (6 + len(checks))]
    for k, p in enumerate(checks[0].multi_node):
        lines.append(f"| {p.model} | {p.batch_per_gpu} | {p.network} | {p.optimizer} | {p.gpus} | {p.published:,.0f} | "
                     + " | ".join(f"{c.multi_node[k].predicted:,.0f} ({c.multi_node[k].error * 100:+.1f}%)"
                                  for c in checks) + " |")
    lines.append("| | | | | | MAPE | " + " | ".join(f"{percent(mape(c.multi_node))}" for c in checks) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ claims
CLAIMS_TOML = Path(__file__).resolve().parent / "validation" / "birder_paper_claims.toml"
CLAIM_QUANTITIES = ("max_speedup", "min_speedup", "growth", "compression_ms", "comm_over_compute")
SPEEDUP_QUANTITIES = ("max_speedup", "min_speedup")
MAX_CLAIMS_BYTES = 1 << 20
_CLAIM_REQUIRED = {"id": str, "lines": list, "states": str, "quantity": str, "model": str, "batch_per_gpu": int,
                   "network": str, "optimizer": str, "gpus": list}
_CLAIM_OPTIONAL = {"baseline": str, "baseline_network": str, "at_gpus": int, "value": float, "tolerance": float,
                   "low": float, "high": float}


@dataclass(frozen=True)
class Claim:
    """One statement of the paper's text about its throughputs: a quantity of the predictions (``CLAIM_QUANTITIES``,
    described in sim/validation/birder_paper_claims.toml) and the range [low, high] the text allows it."""

    id: str
    lines: tuple[int, ...]  # lines of shared/papers/birder_paper.txt that state it
    states: str
    quantity: str
    model: str
    batch_per_gpu: int
    network: str  # the paper's name: 10gbe or ib-hdr
    optimizer: str
    gpus: tuple[int, ...]
    baseline: str | None = None
    baseline_network: str | None = None
    at_gpus: int | None = None  # where a maximum or minimum must be reached
    value: float | None = None  # the stated figure, when the text gives one
    low: float | None = None
    high: float | None = None

    @property
    def stated(self) -> str:
        bounds = " to ".join(f"{b:.3g}" for b in (self.low, self.high) if b is not None)
        if self.low is None:
            bounds = f"<= {self.high:.3g}"
        elif self.high is None:
            bounds = f">= {self.low:.3g}"
        text = f"{self.value:g} ({bounds})" if self.value is not None else bounds
        return text + (f" at {self.at_gpus} GPUs" if self.at_gpus is not None else "")

    def holds(self, predicted: float, at: int) -> bool:
        return ((self.low is None or predicted >= self.low) and (self.high is None or predicted <= self.high)
                and (self.at_gpus is None or at == self.at_gpus))


def _claim(entry: object, where: str) -> Claim:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: a claim is a table of keys, got {entry!r}")
    unknown = sorted(set(entry) - set(_CLAIM_REQUIRED) - set(_CLAIM_OPTIONAL))
    missing = sorted(set(_CLAIM_REQUIRED) - set(entry))
    if unknown or missing:
        raise ValueError(f"{where}: " + "; ".join(
            part for part in (unknown and f"unknown keys {', '.join(unknown)}", missing and
                              f"missing keys {', '.join(missing)}") if part))
    for key, kind in {**_CLAIM_REQUIRED, **_CLAIM_OPTIONAL}.items():
        value = entry.get(key)
        number = kind is float and isinstance(value, int | float)
        if value is not None and (isinstance(value, bool) or not (isinstance(value, kind) or number)):
            raise ValueError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
    gpus, lines = entry["gpus"], entry["lines"]
    if not gpus or any(isinstance(g, bool) or not isinstance(g, int) or g < GPUS_PER_NODE or g % GPUS_PER_NODE
                       or g > MAX_GPUS for g in gpus) or list(gpus) != sorted(set(gpus)):
        raise ValueError(f"{where}: gpus must be increasing whole numbers of {GPUS_PER_NODE}-GPU nodes, got {gpus!r}")
    if not lines or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lines):
        raise ValueError(f"{where}: lines must be the paper's line numbers, got {lines!r}")
    quantity = entry["quantity"]
    if quantity not in CLAIM_QUANTITIES:
        raise ValueError(f"{where}: unknown quantity {quantity!r}; choose one of {', '.join(CLAIM_QUANTITIES)}")
    if (quantity in SPEEDUP_QUANTITIES) != ("baseline" in entry):
        raise ValueError(f"{where}: a baseline belongs to {' and '.join(SPEEDUP_QUANTITIES)} claims, and only to them")
    if "baseline_network" in entry and "baseline" not in entry:
        raise ValueError(f"{where}: baseline_network without a baseline")
    if quantity == "growth" and len(gpus) < 2:
        raise ValueError(f"{where}: growth needs at least two GPU counts, got {gpus!r}")
    if entry.get("at_gpus") is not None and entry["at_gpus"] not in gpus:
        raise ValueError(f"{where}: at_gpus {entry['at_gpus']} is not one of gpus {gpus!r}")
    for key, known in (("model", MODELS), ("optimizer", OPTIMIZERS), ("baseline", OPTIMIZERS),
                       ("network", SITE_OF), ("baseline_network", SITE_OF)):
        if key in entry and entry[key] not in known:
            raise ValueError(f"{where}: unknown {key} {entry[key]!r}; choose one of {', '.join(known)}")
    if not 1 <= entry["batch_per_gpu"] <= MAX_BATCH_PER_GPU:
        raise ValueError(f"{where}: batch_per_gpu must be 1 to {MAX_BATCH_PER_GPU:,}, got {entry['batch_per_gpu']}")
    value, tolerance, low, high = (entry.get(k) for k in ("value", "tolerance", "low", "high"))
    if (value is None) != (tolerance is None) or (value is not None) == (low is not None or high is not None):
        raise ValueError(f"{where}: give the range as value and tolerance, or as low and/or high")
    if value is not None:
        if not (math.isfinite(value) and value > 0 and math.isfinite(tolerance) and 0 <= tolerance < 1):
            raise ValueError(f"{where}: value must be positive and tolerance in [0, 1), got {value!r}, {tolerance!r}")
        low, high = value * (1 - tolerance), value * (1 + tolerance)
    if any(b is not None and not math.isfinite(b) for b in (low, high)) or (
            low is not None and high is not None and low > high):
        raise ValueError(f"{where}: low {low!r} and high {high!r} are not a range")
    return Claim(entry["id"], tuple(lines), entry["states"], quantity, entry["model"], entry["batch_per_gpu"],
                 entry["network"], entry["optimizer"], tuple(gpus), entry.get("baseline"),
                 entry.get("baseline_network"), entry.get("at_gpus"), value, low, high)


def claims(path: str | Path | None = None) -> tuple[Claim, ...]:
    """The claims of ``path`` (default: the Birder paper's, ``CLAIMS_TOML``). ValueError naming the file and the
    claim for a file that is not TOML, holds no claims, or has a claim with a missing, unknown or ill-typed key,
    an unknown model, optimizer or network, GPU counts that are not whole nodes, or no range."""
    path = Path(path) if path is not None else CLAIMS_TOML
    if not os.path.lexists(path):
        raise ValueError(f"no claims file at {path}")
    text = read_text_bounded(path, MAX_CLAIMS_BYTES, "claims file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not TOML ({error})") from None
    entries = data.get("claim")
    if set(data) != {"claim"} or not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected [[claim]] tables and nothing else")
    out = tuple(_claim(e, f"{path}, claim {k + 1} ({e.get('id', 'no id') if isinstance(e, dict) else '?'})")
                for k, e in enumerate(entries))
    ids = [c.id for c in out]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"{path}: claim ids given twice: {', '.join(repeated)}")
    return out


@dataclass(frozen=True)
class ClaimVerdict:
    """A claim beside the simulator's value of its quantity and where (GPU count) that value is reached."""

    claim: Claim
    predicted: float
    at_gpus: int
    holds: bool

    def line(self) -> str:
        c = self.claim
        return (f"claim {c.id} (paper line {', '.join(map(str, c.lines))}): stated {c.quantity} {c.stated}; "
                f"predicted {self.predicted:.3g} at {self.at_gpus} GPUs: {'holds' if self.holds else 'DOES NOT HOLD'}")

    def as_dict(self) -> dict:
        return {"id": self.claim.id, "lines": list(self.claim.lines), "states": self.claim.states,
                "quantity": self.claim.quantity, "stated": self.claim.stated, "low": self.claim.low,
                "high": self.claim.high, "predicted": self.predicted, "at_gpus": self.at_gpus, "holds": self.holds}


@dataclass(frozen=True)
class ClaimCheck:
    """The paper's claims against predictions on one basis (``BASES``), beside the order check of its rows."""

    basis: str
    verdicts: tuple[ClaimVerdict, ...]

    @property
    def held(self) -> int:
        return sum(v.holds for v in self.verdicts)

    def as_dict(self) -> dict:
        return {"basis": self.basis, "claims": len(self.verdicts), "held": self.held,
                "verdicts": [v.as_dict() for v in self.verdicts]}


def claim_prediction(table: list[Row], basis: str, model: str, batch_per_gpu: int, network: str, optimizer: str,
                     gpus: int, tweak=None) -> workload.Prediction:
    """One configuration of a claim predicted on ``basis``, calibrated by the table's single-node row of the same
    model, batch, network and optimizer where it has one (else from the GPU's FLOP rate, as a held-out row is);
    ``tweak`` changes the cluster as in ``compare`` (e.g. ``constants_tweak``: other site constants)."""
    row = Row(model, batch_per_gpu, network, optimizer, gpus, math.nan)  # the configuration; nothing measured
    c = row_cluster(row, basis_network(basis, network))
    return predict(c if tweak is None else tweak(c), model=model, batch_per_gpu=batch_per_gpu, optimizer=optimizer,
                   single_node_throughput=single_node_or_none(table, row))


def claim_quantity(claim: Claim, of) -> tuple[float, int]:
    """``claim``'s quantity and the GPU count where it is reached, from ``of(optimizer, network, gpus)``: a
    prediction (``claim_prediction``), or anything with the fields the quantity reads (``throughput`` for speed-ups
    and growth, as a published row has)."""
    values: dict[int, float] = {}
    pick = min
    for k, g in enumerate(claim.gpus):
        p = of(claim.optimizer, claim.network, g)
        if claim.quantity in SPEEDUP_QUANTITIES:
            base = of(claim.baseline, claim.baseline_network or claim.network, g)
            values[g] = p.throughput / base.throughput
            pick = max if claim.quantity == "max_speedup" else min
        elif claim.quantity == "growth" and k:
            values[g] = p.throughput / of(claim.optimizer, claim.network, claim.gpus[k - 1]).throughput
        elif claim.quantity == "compression_ms":
            values[g], pick = p.compression_s * 1e3, max
        elif claim.quantity == "comm_over_compute":
            values[g] = p.exposed_communication_s / p.compute_s
    at = pick(values, key=values.__getitem__)
    return values[at], at


def claim_verdict(claim: Claim, table: list[Row], basis: str, tweak=None) -> ClaimVerdict:
    """The value of ``claim``'s quantity on ``basis`` and whether it lies in the claim's range."""
    def of(optimizer: str, network: str, gpus: int) -> workload.Prediction:
        return claim_prediction(table, basis, claim.model, claim.batch_per_gpu, network, optimizer, gpus, tweak)

    value, at = claim_quantity(claim, of)
    return ClaimVerdict(claim, value, at, claim.holds(value, at))


def claim_check(table: list[Row], basis: str, checked: tuple[Claim, ...] | None = None, tweak=None) -> ClaimCheck:
    """Every claim of ``checked`` (default: the paper's, ``claims()``) on ``basis``, calibrated by ``table``'s
    single-node rows (``tweak``: as in ``claim_prediction``)."""
    return ClaimCheck(basis, tuple(claim_verdict(c, table, basis, tweak) for c in checked or claims()))


def claims_markdown(checks: list[ClaimCheck]) -> str:
    """The claims checks as the sim README prints them (a test compares them with a fresh run): one row per claim,
    the text's range beside each basis's predicted value, where it is reached and whether it holds."""
    lines = ["| claim | paper line | quantity | stated | " + " | ".join(c.basis for c in checks) + " |",
             "|" + "---|" * (4 + len(checks))]
    for k, v in enumerate(checks[0].verdicts):
        cells = [f"{c.verdicts[k].predicted:.3g} at {c.verdicts[k].at_gpus} "
                 f"({'holds' if c.verdicts[k].holds else '**does not hold**'})" for c in checks]
        lines.append(f"| {v.claim.states} | {', '.join(map(str, v.claim.lines))} | {v.claim.quantity} | "
                     f"{v.claim.stated} | " + " | ".join(cells) + " |")
    lines.append("| | | | claims that hold | " + " | ".join(f"{c.held} of {len(c.verdicts)}" for c in checks) + " |")
    return "\n".join(lines)


def claim_check_lines(checks: list[ClaimCheck]) -> list[str]:
    """Claims checks as ``birder validate`` prints them: per basis a count, then one line per claim."""
    lines = []
    for check in checks:
        lines.append(f"the paper's stated claims on the {check.basis}: {check.held} of {len(check.verdicts)} hold")
        lines += ["  " + v.line() for v in check.verdicts]
    return lines


# ---------------------------------------------------------------------------------------------------- fit
# the FITTED constants of each site (sites.toml keys) and the Nic field and unit factor each sets
FITTED = {"birder-paper-10gbe": ("message_overhead_us", "step_overhead_us", "share_at_8_gpus"),
          "birder-paper-ib": ("message_overhead_us", "efficiency", "step_overhead_us")}
_NIC_FIELD = {"message_overhead_us": ("message_overhead", 1e-6), "step_overhead_us": ("step_overhead", 1e-6),
              "efficiency": ("efficiency", 1.0), "share_at_8_gpus": ("share_at_8_gpus", 1.0),
              "incast_onset_bytes": ("incast_onset_bytes", 1.0), "incast_certain_bytes": ("incast_certain_bytes", 1.0)}


MAX_LOG_CONSTANT = 50.0  # |log| of a fitted constant in sites.toml's units: e^50 us or a share of e^-50 is no cluster
GRID_STARTS = {"efficiency": (0.05, 0.1, 0.2, 0.4, 0.8), "step_overhead_us": (1.0, 10.0, 30.0, 100.0),
               "share_at_8_gpus": (0.64, 0.8, 1.0)}


def constants_tweak(fitted: dict[str, dict[str, float]]):
    """A cluster tweak that puts fitted constants (per site, in sites.toml's units) on its NIC."""
    def tweak(c: Cluster) -> Cluster:
        values = fitted.get(c.nic.name, {})
        fields = {_NIC_FIELD[k][0]: v * _NIC_FIELD[k][1] for k, v in values.items() if k in _NIC_FIELD}
        for share in ("efficiency", "share_at_8_gpus"):  # shares of a link: at most all of it
            if share in fields:
                fields[share] = min(1.0, fields[share])
        return replace(c, nic=replace(c.nic, **fields))

    return tweak


def row_bursts(row: Row) -> set[float]:
    """The bursts (``sim.system.burst_bytes``) into one NIC of every many-to-one phase the row's collectives
    run: where the onset of incast can lie."""
    c = row_cluster(row)
    profile = model_profile(row.model)
    out = set()
    for kind in policy(row.optimizer, row.model):
        if kind.comm == "none":
            continue
        sizes = {profile.n_params} if kind.comm == "after_backward" else {b.elements for b in ddp_buckets(profile)}
        for elements in sizes:
            sched = step_schedule(row.optimizer, c, elements, "hierarchical", kind.full_precision)
            for phase in sched.phases:
                load = phase_load(phase, sched.layout, c.rails)
                if load.nic_rx > 1 and not phase.pattern.is_ring and phase.n_rounds:
                    out.add(burst_bytes(load, phase.message_bytes(0)))
    return out


def fit(site: str, path: str | Path | None = None, train: list[Row] | None = None) -> dict[str, float]:
    """Refit ``site``'s FITTED constants on its multi-node rows (``train``: only those rows). Returns them in
    sites.toml's units, with the fit's ``mape``."""
    from scipy.optimize import minimize

    if site not in FITTED:
        raise ValueError(f"no fitted constants for {site!r}; sites: {', '.join(FITTED)}")
    table = rows(path)
    mine = [r for r in (train if train is not None else table) if site_of(r.network) == site
            and r.gpus > GPUS_PER_NODE]
    if not mine:
        raise ValueError(f"no multi-node rows of {site} to fit on")
    names = FITTED[site]
    spec = network_spec(site)

    def error(log_values, incast=()):
        if any(abs(v) > MAX_LOG_CONSTANT for v in log_values):  # a constant the rows do not bound drifts off
            return math.inf
        fitted = dict(zip(names, (math.exp(v) for v in log_values), strict=True)) | dict(incast)
        return mape(compare(mine, tweak=constants_tweak({site: fitted}), table=table))

    start = [math.log(max(spec.get(n, 1.0), 1e-3)) for n in names]
    # the efficiency and the per-step overhead trade against each other (a slow link or a slow step), and the
    # error surface has a basin for each: Nelder-Mead starts from the best two of the profile's values and a grid
    # over those two constants
    grid = [start]
    for n in (n for n in names if n in GRID_STARTS):
        k = names.index(n)
        grid = [p[:k] + [math.log(v)] + p[k + 1:] for p in grid for v in GRID_STARTS[n]]
    starts = sorted(map(list, dict.fromkeys(tuple(p) for p in [start, *grid])), key=error)[:2]
    start = starts[0]
    brackets: list[tuple] = [()]
    if network_spec(site)["transport"] == "socket":
        # the onset of incast lies between two consecutive bursts of the rows, none of which tells where inside;
        # no incast at all comes first so that it wins ties; the three best brackets at the start are refined
        bursts = sorted(set().union(*(row_bursts(r) for r in mine)))
        brackets = [(("incast_onset_bytes", math.inf), ("incast_certain_bytes", math.inf))]
        brackets += [(("incast_onset_bytes", a), ("incast_certain_bytes", b))
                     for a, b in zip(bursts, bursts[1:], strict=False)]
        scores = [error(start, incast) for incast in brackets]
        brackets = [brackets[i] for i in sorted(range(len(brackets)), key=lambda i: (scores[i], i))[:3]]
    best = None
    for begin, incast in ((b, i) for b in starts for i in brackets):
        res = minimize(error, begin, args=(incast,), method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-4})
        if best is None or res.fun < best[0] - 1e-9:
            best = (res.fun, res.x, incast)
    values = dict(zip(names, (math.exp(v) for v in best[1]), strict=True)) | dict(best[2])
    values |= {n: min(1.0, values[n]) for n in ("efficiency", "share_at_8_gpus") if n in values}  # as applied
    values["mape"] = float(best[0])
    return values


# ------------------------------------------------------------------------------------------ cross-validation
def _groups(table: list[Row]) -> list[tuple[str, object]]:
    """The groups a cross-validation can leave out: every value of a column that has more than one value."""
    multi = [r for r in table if r.gpus > GPUS_PER_NODE]
    out = []
    for column in ("model", "batch_per_gpu", "network", "optimizer", "gpus"):
        values = sorted({getattr(r, column) for r in multi}, key=str)
        if len(values) > 1:
            out += [(column, v) for v in values]
    return out


@dataclass(frozen=True)
class HeldOutGroup:
    """One group of a cross-validation: the rows of one value of one column, predicted after a refit without them."""

    left_out: str  # the column held out
    value: object  # its value (a str or an int, as in the rows)
    rows: int  # how many rows it held
    mape: float  # over those rows
    constants: dict[str, dict[str, float]]  # per site, the constants refitted without the group (sites.toml units)
    unfitted_sites: tuple[str, ...]  # sites left with no row to fit on: predicted with their generic base preset

    def as_dict(self) -> dict:
        return {"left_out": self.left_out, "value": self.value, "rows": self.rows, "mape": self.mape,
                "constants": self.constants, "unfitted_sites": list(self.unfitted_sites)}


@dataclass(frozen=True)
class CrossValidation:
    """A group cross-validation: the MAPE over every held-out prediction, per column, per group, and the rows."""

    mape: float  # over every held-out prediction
    by_column: dict[str, float]  # per column with several values: the MAPE of its groups' rows
    groups: tuple[HeldOutGroup, ...]
    rows: tuple[Prediction, ...]  # each with ``left_out``
    untestable_columns: tuple[str, ...]  # columns with one value only in the rows: nothing to hold out

    def as_dict(self) -> dict:
        return {"mape": self.mape, "by_column": dict(self.by_column), "groups": [g.as_dict() for g in self.groups],
                "rows": [r.as_dict() for r in self.rows], "untestable_columns": list(self.untestable_columns)}

    @classmethod
    def from_dict(cls, stored: dict) -> CrossValidation:
        """The inverse of ``as_dict``, for a stored measurement (sim/presets/cross_validation.json)."""
        groups = tuple(HeldOutGroup(**{**g, "unfitted_sites": tuple(g["unfitted_sites"])}) for g in stored["groups"])
        return cls(stored["mape"], dict(stored["by_column"]), groups,
                   tuple(Prediction(**r) for r in stored["rows"]), tuple(stored["untestable_columns"]))


def group_cross_validation(path: str | Path | None = None, progress=None) -> CrossValidation:
    """Leave out whole groups of the multi-node rows: for each value of each column with several values, refit
    every site on the other rows and predict the rows left out. A site left with no rows to fit on (a network
    left out) is predicted with its generic base preset, unfitted: a cluster nobody fitted. Returns the MAPE over
    every held-out prediction, per column, and the rows; columns with one value only are listed as untestable."""
    table = rows(path)
    multi = [r for r in table if r.gpus > GPUS_PER_NODE]
    detail, results = [], []
    groups = _groups(table)
    for column, value in groups:
        held = [r for r in multi if getattr(r, column) == value]
        train = [r for r in multi if getattr(r, column) != value]
        fitted, unfitted = {}, set()
        for site in sorted({site_of(r.network) for r in held}):
            if site in FITTED and any(site_of(r.network) == site for r in train):
                fitted[site] = fit(site, path, train)
            elif site in FITTED:
                unfitted.add(site)
        out = []
        for r in held:
            site = site_of(r.network)
            base = SITES[site]["base"] if site in unfitted else None
            out += [replace(p, left_out=f"{column}={value}")
                    for p in compare([r], tweak=constants_tweak(fitted), table=table, network=base)]
        detail.append(HeldOutGroup(column, value, len(out), mape(out), fitted, tuple(sorted(unfitted))))
        results += out
        if progress is not None:
            progress.update(1)
    by_column = {}
    for column in dict.fromkeys(c for c, _ in groups):
        rs = [r for r in results if r.left_out.startswith(column + "=")]
        by_column[column] = mape(rs)
    constant = tuple(c for c in ("model", "batch_per_gpu", "network", "optimizer", "gpus") if c not in by_column)
    return CrossValidation(mape(results), by_column, tuple(detail), tuple(results), constant)


def cross_validation_groups(path: str | Path | None = None) -> int:
    return len(_groups(rows(path)))


# ------------------------------------------------------------------------ the corpus: leave one source out
# Published multi-node rows of several sources (sim/validation/corpus.csv, its schema in
# sim/validation/README.md). Every prediction is calibrated by the row's own single-node throughput and
# runs on a cluster built from the row's set-up. The only constants fitted to rows are the site profiles'
# (fitted on one source's rows) and the intervals' quantiles (fitted on every row): leaving a source out removes
# it from both. Two naive baselines are computed on the same rows.
MAX_SAMPLES_PER_GPU_S = 1e7  # a GPU doing ~1e15 FLOP/s cannot train a model of even 1e4 parameters (6 FLOP each
# per sample) faster: a larger figure is a typo or a unit error
INTERVAL_LEVEL = 0.8  # the intervals' nominal coverage
PAPER_SOURCE = "birder-neurips2023"  # the corpus's id of the Birder paper (its rows are the site profiles' fit)
# (source, transport, line rate in Gb/s) -> the site profile fitted on that source's rows of that testbed
SITE_OF_SETUP = {(PAPER_SOURCE, "tcp", 10.0): "birder-paper-10gbe", (PAPER_SOURCE, "ib", 200.0): "birder-paper-ib"}
FITTED_SOURCES = frozenset(source for source, _, _ in SITE_OF_SETUP)  # the only sources whose rows are fitted on
EQUAL_BY_CONSTRUCTION = (f"in-sample and left out are equal by construction for every source but "
                         f"{', '.join(sorted(FITTED_SOURCES))}: only its rows are fitted on")  # the table's caption
TRANSPORT_OF = {"tcp": "socket", "ib": "ib", "roce": "ib"}
# alpha-beta baseline: NCCL's own per-message figure for a network hop of a ring (tuning.cc: Simple protocol base
# latency 8.4 us + NET hardware latency 14 us, the figure SimAI's send_lat tables use; shared/notes/anchor_sim.md 2)
ALPHA_BETA_LATENCY_S = 22.4e-6
# optimizers of the corpus that the simulator runs as another that communicates the same way: LAMB all-reduces
# full-precision gradients as Adam does (You et al. 2020, Algorithm 2: a per-layer trust ratio on the same
# moments), plain SGD as SGD with momentum; their step's compute is in the measured single-node throughput
SIMULATED_AS = {"lamb": "adam", "sgd": "sgdm"}
GRAD_DTYPE_OF_PRECISION = {"fp32": "fp32", "amp": "fp32", "fp16": "fp16", "bf16": "bf16"}  # amp: fp32 gradients


def corpus_rows() -> tuple[tuple, str]:
    """The validation corpus (``sim.validation.load_corpus``) and where it comes from."""
    from sim.validation import load_corpus

    return tuple(load_corpus()), "sim/validation/corpus.csv"


predicted_regime = regime_of_efficiency  # the same line, drawn on a prediction (known before measuring)


def linear_scaling(row: PublishedRow) -> float:
    """Naive baseline: nodes x single-node throughput."""
    return row.nodes * row.single_node_throughput


def alpha_beta_throughput(params: int, bits: int, nodes: int, samples_per_node: int, single_node_throughput: float,
                          bandwidth: float) -> float:
    """Naive baseline: one node's step (``samples_per_node`` at its measured throughput) plus a ring all-reduce
    of ``params`` x ``bits`` among ``nodes`` at ``bandwidth`` bytes/s per node, 2(n-1) messages of
    ``ALPHA_BETA_LATENCY_S`` each, no overlap with compute (Thakur et al. 2005's ring)."""
    one_node_s = samples_per_node / single_node_throughput
    allreduce_s = 2 * (nodes - 1) * ALPHA_BETA_LATENCY_S + 2 * (nodes - 1) / nodes * params * bits / 8 / bandwidth
    return nodes * samples_per_node / (one_node_s + allreduce_s)


def incast_slowed(throughput: float, samples_per_step: int, incast_s: float) -> float:
    """``throughput`` (samples/s, ``samples_per_step`` a step) with ``incast_s`` seconds of TCP incast stalls added
    to each step: what the alpha-beta baseline becomes where the simulator sees incast."""
    return samples_per_step / (samples_per_step / throughput + incast_s)


def gradient_bits(optimizer: str, grad_dtype: str) -> int:
    """Bits per gradient element a step sends: 1 for an optimizer that compresses, else the gradient dtype's."""
    return 1 if registry.get(optimizer).compressed else GRAD_BITS[grad_dtype]


def link_rate_gbps(row: PublishedRow) -> float:
    """Gb/s per NIC of a row's link as the simulator and the alpha-beta baseline both take it: the rate its source
    measured host to host where it states one (set-up data), else the line rate."""
    return row.line_rate_gbps if row.measured_link_gbps is None else row.measured_link_gbps


def alpha_beta(row: PublishedRow) -> float:
    """``alpha_beta_throughput`` of a corpus row: its link rate (``link_rate_gbps``) on all its NICs, once per
    optimizer step (``grad_accum`` micro-batches)."""
    bits = gradient_bits(SIMULATED_AS.get(row.optimizer, row.optimizer),
                         GRAD_DTYPE_OF_PRECISION.get(row.precision, "fp32"))
    return alpha_beta_throughput(row.params, bits, row.nodes, row.gpus_per_node * row.batch_per_gpu * row.grad_accum,
                                 row.single_node_throughput, link_rate_gbps(row) * 1e9 * row.nics_per_node / 8)


def interval_regime(alpha_beta_efficiency: float) -> str:
    """The regime an interval is keyed on: the one a plain alpha-beta ring predicts (``predicted_regime`` of its
    scale efficiency), known before measuring and, unlike the simulator's own, not optimistic where the
    simulator is."""
    return predicted_regime(alpha_beta_efficiency)


def row_interval_regime(row: PublishedRow, prediction: workload.Prediction) -> str:
    """A corpus row's interval regime as ``api.predict_on`` keys a prediction on a generic network: the alpha-beta
    ring's efficiency with the simulator's TCP incast stalls (``prediction``'s, on the row's generic cluster)."""
    efficiency = alpha_beta(row) / linear_scaling(row)
    if prediction.incast_timeouts > 0:
        incast_s = prediction.incast_timeouts * corpus_cluster(row, False).nic.retransmission_timeout
        samples = row.nodes * row.gpus_per_node * row.batch_per_gpu * row.grad_accum
        efficiency = incast_slowed(alpha_beta(row), samples, incast_s) / linear_scaling(row)
    return interval_regime(efficiency)


CLOUD_NIC_VENDOR = {"ec2": "aws"}  # a corpus row's cloud=NAME -> the nic_vendor of its network presets


def _generic_nic(row) -> Nic:
    """The NIC of a row's set-up from generic hardware data only: the preset of its transport and line rate if
    there is one (on a cloud, its cloud's preset: EC2's caps each TCP flow; in a cluster placement group only
    where the source says so), else its transport's constants at its line rate. ValueError for a cloud row
    whose line rate has no preset of its cloud."""
    transport = TRANSPORT_OF[row.transport]
    prefix = {"ib": "ib-", "roce": "roce-"}.get(row.transport)
    vendor = CLOUD_NIC_VENDOR.get(row.cloud, "")
    for name in GENERIC_NETWORKS:
        full = network_spec(name)
        if (full["transport"] == transport and float(full["line_rate_gbps"]) == float(row.line_rate_gbps)
                and (prefix is None or name.startswith(prefix)) and full.get("nic_vendor", "") == vendor):
            return make_nic(name, full | {"count": row.nics_per_node, "placement_group": bool(row.placement_group)})
    if row.cloud is not None:
        raise ValueError(f"no {row.cloud} network preset at {row.line_rate_gbps:g} Gb/s {row.transport} in "
                         "sim/presets/networks.toml")
    return make_nic(f"{row.transport}-{row.line_rate_gbps:g}g", TRANSPORTS[transport] | {
        "transport": transport, "line_rate_gbps": float(row.line_rate_gbps), "count": row.nics_per_node})


def comm_library_of(row: PublishedRow) -> str:
    """The collective library release a row is simulated with (presets/comm_libraries.toml): its own where that
    file has it, else today's NCCL (gloo, MPI, ps-lite and gRPC rows: their TCP flows are not NCCL's)."""
    return row.comm_library if row.comm_library in COMM_LIBRARIES else "nccl"


def framework_of(row: PublishedRow) -> str:
    """The training framework a row is simulated with: its own where presets/frameworks.toml has it, else DDP's
    (counted in the summary as ``rows_framework_as_ddp``, never silently)."""
    return row.framework if row.framework in FRAMEWORKS else "ddp"


def corpus_cluster(row: PublishedRow, fitted: bool) -> Cluster:
    """The cluster of a row's set-up: its source's site profile when ``fitted`` and one exists, else generic
    hardware data. ValueError (naming what is missing) if the simulator cannot express the set-up."""
    if row.gpu not in GPUS:
        raise ValueError(f"GPU {row.gpu!r} has no entry in sim/presets/gpus.toml")
    if row.transport not in TRANSPORT_OF:
        raise ValueError(f"transport {row.transport!r} is not one of {', '.join(TRANSPORT_OF)}")
    if row.nics_per_node > row.gpus_per_node:
        raise ValueError(f"{row.nics_per_node} NICs per node for {row.gpus_per_node} GPUs")
    if row.intra == "nvlink":
        intra = default_intra(row.gpu)
        if INTRA[intra].get("kind", "nvlink") != "nvlink":
            raise ValueError(f"no NVLink fabric preset for {row.gpu}")
    elif f"{row.gpu}-pcie" in INTRA:
        intra = f"{row.gpu}-pcie"
    else:
        raise ValueError(f"no {row.intra} fabric preset for {row.gpu} in sim/presets/intra.toml")
    site = SITE_OF_SETUP.get((row.source, row.transport, float(row.line_rate_gbps))) if fitted else None
    if site is not None and row.nics_per_node == 1:
        c = cluster(site, row.nodes, row.gpus_per_node, intra, row.gpu, framework=framework_of(row))
    else:
        c = replace(cluster("10gbe", row.nodes, row.gpus_per_node, intra, row.gpu, framework=framework_of(row)),
                    nic=_generic_nic(row))
    c = replace(c, servers=row.parameter_servers, comm_library=comm_library_of(row))
    if row.measured_link_gbps is None:
        return c
    # the source's measured link rate is set-up data: the same in the fitted and the generic prediction
    return replace(c, nic=replace(c.nic, measured_rate=row.measured_link_gbps * 1e9))


def corpus_predict(row: PublishedRow, fitted: bool, measured_node: bool = True,
                   step_jitter_cv: float | None = None) -> workload.Prediction:
    """The simulator's prediction (``sim.workload.Prediction``) for a row, calibrated by its single-node
    throughput (``measured_node``; else compute from the built-in GPU profiles), with per-step jitter
    ``step_jitter_cv`` (None: the shipped one); ValueError if the set-up cannot be expressed."""
    optimizer = SIMULATED_AS.get(row.optimizer, row.optimizer)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer {row.optimizer!r} is not simulated")
    if row.precision not in GRAD_DTYPE_OF_PRECISION:
        raise ValueError(f"precision {row.precision!r} is not one of {', '.join(GRAD_DTYPE_OF_PRECISION)}")
    c = corpus_cluster(row, fitted)
    if step_jitter_cv is not None:
        c = replace(c, step_jitter_cv=step_jitter_cv)
    known = row.model in MODELS
    p = predict(c, model=row.model if known else None, params=None if known else int(row.params),
                batch_per_gpu=int(row.batch_per_gpu), optimizer=optimizer,
                single_node_throughput=float(row.single_node_throughput) if measured_node else None,
                grad_dtype=GRAD_DTYPE_OF_PRECISION[row.precision], accumulation_steps=row.grad_accum,
                warmup_fraction=row.warmup_fraction)
    return p


@dataclass(frozen=True)
class CorpusPrediction:
    """One corpus row: measured, the simulator in-sample (site profiles fitted on every row) and with its source
    left out of every fit, the two baselines, and the interval fitted without its source."""

    source: str
    table: str
    model: str
    gpu: str
    nodes: int
    gpus_per_node: int
    transport: str
    line_rate_gbps: float
    measured_link_gbps: float | None  # the source's measured link rate (simulator and alpha-beta use it), or None
    nics_per_node: int
    framework: str
    simulated_framework: str  # presets/frameworks.toml's entry it ran with (DDP's where the row's has none)
    optimizer: str
    regime: str  # from the measurement (the corpus schema's)
    interval_regime: str  # the alpha-beta baseline's regime, which the interval is keyed on (known beforehand)
    measured: float
    in_sample: float
    left_out: float
    linear: float
    alpha_beta: float
    low: float  # the interval fitted on the other sources' rows
    high: float

    def error(self, predicted: float) -> float:
        return (predicted - self.measured) / self.measured

    @property
    def covered(self) -> bool:
        return self.low <= self.measured <= self.high

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update({"error_in_sample": self.error(self.in_sample), "error_left_out": self.error(self.left_out),
                    "error_linear": self.error(self.linear), "error_alpha_beta": self.error(self.alpha_beta),
                    "covered": self.covered})
        return out


def _held_out_groups(corpus) -> dict[str, frozenset[str]]:
    """Per source, the sources left out with it: itself and every source it is not independent of (a shared
    testbed or authors: the corpus schema's ``independent_of`` list in sources.toml, read both ways)."""
    from sim.validation import load_sources

    sources = sorted({r.source for r in corpus})
    linked = {s: {s} for s in sources}
    entries = load_sources()
    for s in sources:
        for other in entries[s].independent_of if s in entries else ():
            if other in linked:
                linked[s].add(other)
                linked[other].add(s)
    return {s: frozenset(v) for s, v in linked.items()}


STEP_JITTER_CRITERION = "median log(measured / predicted) of the generic predictions closest to 0"


def step_jitter_fit(measured: list[float], predicted: dict[float, list[float]]) -> float:
    """The per-step jitter cv of ``STEP_JITTER_GRID`` whose predictions (``predicted[cv]``, row by row as
    ``measured``) are unbiased in median log ratio (``STEP_JITTER_CRITERION``; ties to the smaller cv).
    ValueError without rows."""
    if not measured:
        raise ValueError("step_jitter_fit: no rows to fit the per-step jitter on")

    def bias(cv: float) -> float:
        return abs(median([math.log(m / p) for m, p in zip(measured, predicted[cv], strict=True)]))

    return min(STEP_JITTER_GRID, key=lambda cv: (bias(cv), cv))


def step_jitter_without(sources: list[str], measured: list[float], predicted: dict[float, list[float]],
                        excluded: frozenset[str]) -> float:
    """``step_jitter_fit`` on the rows whose source is not in ``excluded``; 0 (no jitter: nothing to fit it on)
    where no row is left."""
    kept = [i for i, s in enumerate(sources) if s not in excluded]
    if not kept:
        return 0.0
    return step_jitter_fit([measured[i] for i in kept], {cv: [ps[i] for i in kept] for cv, ps in predicted.items()})


def nested_step_jitter(sources: list[str], measured: list[float], predicted: dict[float, list[float]],
                       groups: dict[str, frozenset[str]]) -> dict[str, float]:
    """Per source: the per-step jitter fitted on the rows of the sources not held out with it
    (``step_jitter_without``); ``"all"``: the fit on every row (the shipped value)."""
    out = {"all": step_jitter_fit(measured, predicted)}
    for source in sorted(set(sources)):
        out[source] = step_jitter_without(sources, measured, predicted, groups[source])
    return out


def log_ratio_quantiles(log_ratios: list[float], level: float = INTERVAL_LEVEL) -> tuple[float, float]:
    """Split-conformal bounds on log(measured / predicted): the k-th smallest with k = floor((n+1)(1-level)/2)
    below and its mirror above, so that a new exchangeable row falls inside with probability >= ``level``
    (Vovk et al. 2005; Lei et al. 2018); infinite where n is too small to say."""
    xs = sorted(log_ratios)
    n = len(xs)
    tail = (1 - level) / 2
    k_low = math.floor(round((n + 1) * tail, 9))  # rounded: (1 - 0.8) / 2 is 0.0999... in binary
    k_high = math.ceil(round((n + 1) * (1 - tail), 9))
    low = xs[k_low - 1] if k_low >= 1 else -math.inf
    high = xs[k_high - 1] if k_high <= n else math.inf
    return low, high


def interval_around(predicted: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """The interval of a prediction from bounds on log(measured / predicted), stretched to hold the prediction
    itself (where every left-out row lay on one side of its prediction, the bounds alone would exclude it)."""
    return min(predicted, predicted * math.exp(bounds[0])), max(predicted, predicted * math.exp(bounds[1]))


def linear_ceiling(high: float, predicted: float, linear: float) -> float:
    """An interval's upper end held at linear scaling of a measured node (``linear``: nodes x its throughput),
    the most more nodes of its kind can give; never below the prediction itself."""
    return min(high, max(predicted, linear))


def interval_quantiles(predictions: list[tuple[str, float]], level: float = INTERVAL_LEVEL
                       ) -> dict[str, tuple[float, float]]:
    """Per interval regime (and ``all``, the regimes pooled), the conformal bounds of log(measured / predicted)
    over (regime, log ratio) pairs at ``level``."""
    return {reg: log_ratio_quantiles([x for r, x in predictions if reg in (r, "all")], level)
            for reg in (*REGIMES, "all")}


def regime_bounds(q: dict[str, tuple[float, float]], regime: str) -> tuple[float, float]:
    """A regime's bounds from ``interval_quantiles``, or the regimes pooled where its rows are too few to bound."""
    return q[regime] if all(map(math.isfinite, q[regime])) else q["all"]


# the conformal levels a source-calibrated interval may take, from the nominal one up (half a percent apart)
LEVEL_GRID = tuple(round(INTERVAL_LEVEL + 0.005 * k, 3) for k in range(int(round((0.99 - INTERVAL_LEVEL) / 0.005)) + 1))


@dataclass(frozen=True)
class LoggedError:
    """One left-out prediction as the intervals see it: its source, interval regime, log(measured / predicted)
    and the most its interval's upper end may be in the same units (log(linear scaling / predicted) on a measured
    node, ``linear_ceiling``; infinite where nothing caps it)."""

    source: str
    regime: str
    log_ratio: float
    cap: float = math.inf


def _covered(e: LoggedError, bounds: tuple[float, float]) -> bool:
    """Whether ``e``'s measurement lies in its interval from ``bounds`` (stretched to hold the prediction,
    ``interval_around``; capped, ``linear_ceiling``)."""
    return min(bounds[0], 0.0) <= e.log_ratio <= min(max(bounds[1], 0.0), max(e.cap, 0.0))


def source_coverage(errors: list[LoggedError], groups: dict[str, frozenset[str]], level: float) -> float:
    """Share of ``errors`` covered by intervals at conformal ``level`` fitted, for each, on the errors of the
    sources not held out with its own (``groups``): leave-one-source-out coverage."""
    covered = []
    for held in {groups[e.source] for e in errors}:
        q = interval_quantiles([(e.regime, e.log_ratio) for e in errors if e.source not in held], level)
        covered += [_covered(e, regime_bounds(q, e.regime)) for e in errors if e.source in held]
    return sum(covered) / len(covered) if covered else 1.0


def source_calibrated_level(errors: list[LoggedError], groups: dict[str, frozenset[str]],
                            nominal: float = INTERVAL_LEVEL) -> float:
    """The least conformal level (``LEVEL_GRID``) at which intervals fitted leave-one-source-out on ``errors``
    cover at least ``nominal`` of them. Split-conformal's guarantee holds for exchangeable rows, but rows of one
    source share its set-up's errors, so a new source's rows fall outside more often than the rows' own
    quantiles say; raising the level until the sources at hand are covered as promised, each judged by the
    others, calibrates for that (cross-conformal over groups; Barber et al. 2021 on jackknife+, Dunn et al. 2022
    on conformal prediction for grouped data). The top of the grid where even that falls short. Coverage grows
    with the level (wider quantiles), so the grid is bisected."""
    low, high = 0, len(LEVEL_GRID) - 1
    while low < high:
        mid = (low + high) // 2
        if source_coverage(errors, groups, LEVEL_GRID[mid]) >= nominal:
            high = mid
        else:
            low = mid + 1
    return LEVEL_GRID[low]


def left_out_bounds(errors: list[LoggedError], groups: dict[str, frozenset[str]], others_of=None
                    ) -> dict[frozenset[str], tuple[float, dict[str, tuple[float, float]]]]:
    """Per held-out group of sources: (the level calibrated on the other sources alone, and the quantiles of
    their errors at it). Nothing of the held-out group enters either. ``others_of(held)``, where given, gives
    the other sources' errors as predicted without the held-out group (a constant fitted on the corpus refitted
    without it); else they are ``errors``' own."""
    out = {}
    for held in {groups[e.source] for e in errors}:
        others = [e for e in errors if e.source not in held] if others_of is None else others_of(held)
        level = source_calibrated_level(others, groups)
        out[held] = level, interval_quantiles([(e.regime, e.log_ratio) for e in others], level)
    return out


# what may differ between two rows of one table that a speed-up compares (the rest is the same set-up)
PAIR_COLUMNS = ("optimizer", "framework", "comm_library", "precision", "transport", "line_rate_gbps",
                "nics_per_node", "intra")
# what two rows of one table share to be paired: the same model, batch, GPUs and node count
PAIR_KEY = ("source", "table", "model", "batch_per_gpu", "gpu", "gpus_per_node", "nodes")


def pair_regime(a: str, b: str) -> str:
    """A speed-up's interval regime: communication-bound if either side's is (its errors dominate the ratio's)."""
    return REGIMES[1] if REGIMES[1] in (a, b) else REGIMES[0]


def paired_rows(rows: list[PublishedRow]) -> list[tuple[int, int]]:
    """Index pairs (i, j), i < j, of rows of one table measured on the same model, batch, GPUs and node count
    that differ in what a speed-up compares (``PAIR_COLUMNS``: an optimizer, a framework, a network ...)."""
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple(getattr(row, k) for k in PAIR_KEY), []).append(i)
    return [(i, j) for members in groups.values() for k, i in enumerate(members) for j in members[k + 1:]
            if any(getattr(rows[i], c) != getattr(rows[j], c) for c in PAIR_COLUMNS)]


def pair_label(row: PublishedRow, other: PublishedRow) -> str:
    """What ``row`` is in a pair: its values of the columns in which it differs from ``other``."""
    return " ".join(f"{c}={getattr(row, c)}" for c in PAIR_COLUMNS if getattr(row, c) != getattr(other, c))


@dataclass(frozen=True)
class PairPrediction:
    """Two rows of one table (same set-up and node count but for what is compared): the measured and predicted
    ratio of the one predicted faster over the other, the ratio's interval fitted on other sources' pairs, and the
    naive interval of the two rows' own intervals divided end by end."""

    source: str
    table: str
    model: str
    nodes: int
    faster: str  # the row predicted faster, by the columns it differs in (``pair_label``)
    slower: str
    interval_regime: str  # ``pair_regime`` of the two rows'
    measured: float  # measured throughput ratio faster / slower
    predicted: float  # predicted ratio, >= 1
    low: float  # the interval fitted on the other sources' pairs
    high: float
    naive_low: float  # the faster row's low over the slower's high
    naive_high: float  # the faster row's high over the slower's low

    @property
    def covered(self) -> bool:
        return self.low <= self.measured <= self.high

    @property
    def naive_covered(self) -> bool:
        return self.naive_low <= self.measured <= self.naive_high

    @property
    def decided(self) -> bool:
        """The interval excludes 1: the prediction says which is faster."""
        return self.low > 1 or self.high < 1

    def as_dict(self) -> dict:
        return {**asdict(self), "covered": self.covered, "naive_covered": self.naive_covered, "decided": self.decided}


def oriented_pairs(rows: list[PublishedRow], predicted: list[float]) -> list[tuple[int, int]]:
    """``paired_rows`` each as (faster, slower) by the prediction (ties: the first row first)."""
    return [(i, j) if predicted[i] >= predicted[j] else (j, i) for i, j in paired_rows(rows)]


def median(values: list[float]) -> float | None:
    xs = sorted(values)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def percent(x: float | None, decimals: int = 1) -> str:
    """A share as the figures print it, ``-`` for none (no rows, no pairs decided)."""
    return "-" if x is None else f"{100 * x:.{decimals}f}%"


def share(flags) -> float | None:
    """The share of true values (None of none)."""
    flags = list(flags)
    return sum(flags) / len(flags) if flags else None


def pair_figures(pairs: list[PairPrediction]) -> dict:
    """Over left-out pairs: how many, the coverage and median half-width (relative to the predicted ratio) of
    the paired intervals and of the naive ones, the share whose paired interval excludes 1 (``decided``) and, of
    those, the share on the measured side of 1 (``decided_right``); the same two for the naive intervals."""
    decided = [p for p in pairs if p.decided]
    naive_decided = [p for p in pairs if p.naive_low > 1 or p.naive_high < 1]
    return {"pairs": len(pairs), "coverage": share(p.covered for p in pairs),
            "median_half_width": median([(p.high - p.low) / 2 / p.predicted for p in pairs]),
            "naive_coverage": share(p.naive_covered for p in pairs),
            "naive_median_half_width": median([(p.naive_high - p.naive_low) / 2 / p.predicted for p in pairs]),
            "decided": share(p.decided for p in pairs),
            "decided_right": share((p.measured > 1) == (p.low > 1) for p in decided),
            "naive_decided": len(naive_decided) / len(pairs) if pairs else None,
            "naive_decided_right": share((p.measured > 1) == (p.naive_low > 1) for p in naive_decided)}


def nested_speedup_figures(pairs: list[PairPrediction], groups: dict[str, frozenset[str]] | None = None,
                           level: float = INTERVAL_LEVEL) -> dict:
    """The speed-up interval method judged without post-selection: each held-out group's pairs (``groups``: per
    source, the sources left out with it; default each alone) take the method ``speedup_method`` picks on the other
    sources' pairs of their regime. Pairs, coverage and median half-width of the interval so chosen, and the share
    that took ``paired``; overall and per interval regime."""
    groups = groups or {}
    chosen = []
    for group in {groups.get(p.source, frozenset({p.source})) for p in pairs}:
        rest = [p for p in pairs if p.source not in group]
        for reg in REGIMES:
            method = speedup_method(pair_figures([p for p in rest if p.interval_regime == reg]), level)
            chosen += [(p, method) for p in pairs if p.source in group and p.interval_regime == reg]

    def figures(picked):
        return {"pairs": len(picked),
                "coverage": share(p.covered if m == "paired" else p.naive_covered for p, m in picked),
                "median_half_width": median([((p.high - p.low) if m == "paired" else (p.naive_high - p.naive_low))
                                             / 2 / p.predicted for p, m in picked]),
                "paired_share": share(m == "paired" for _, m in picked)}

    return {**figures(chosen), "by_regime": {reg: figures([c for c in chosen if c[0].interval_regime == reg])
                                             for reg in REGIMES}}


def speedup_method(figures: dict, level: float = INTERVAL_LEVEL) -> str:
    """Which speed-up interval the left-out pairs of one regime support (``pair_figures``): ``paired`` (fitted on
    the pairs' ratio errors) where it covers at least ``level`` and is no wider in median than ``naive`` (the two
    intervals divided end by end) or the naive one falls short; else ``naive`` where it covers at least
    ``level``; where neither does, the one that covers more; ``naive`` where there are no pairs."""
    if not figures.get("pairs"):
        return "naive"
    paired_ok, naive_ok = figures["coverage"] >= level, figures["naive_coverage"] >= level
    if paired_ok and (not naive_ok or figures["median_half_width"] <= figures["naive_median_half_width"]):
        return "paired"
    if naive_ok or figures["naive_coverage"] >= figures["coverage"]:
        return "naive"
    return "paired"


@dataclass(frozen=True)
class SkippedRow:
    source: str
    table: str
    model: str
    nodes: int
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CorpusValidation:
    """The corpus predicted in-sample and source by source left out, beside the two baselines."""

    corpus: str
    rows: tuple[CorpusPrediction, ...]
    skipped: tuple[SkippedRow, ...]
    quantiles: dict[str, tuple[float, float]]  # per interval regime, from every row's left-out prediction
    # the same for predictions whose compute comes from the built-in GPU profiles (no node measured), on the rows
    # whose model and GPU the simulator knows
    quantiles_unmeasured_node: dict[str, tuple[float, float]]
    pairs: tuple[PairPrediction, ...] = ()  # every pair of rows a speed-up compares, its interval left out
    # bounds on log(measured ratio / predicted ratio) of a speed-up (the faster by the prediction over the slower),
    # per interval regime, from every pair's left-out predictions: with a measured node, and without
    speedup_quantiles: dict[str, tuple[float, float]] | None = None
    speedup_quantiles_unmeasured_node: dict[str, tuple[float, float]] | None = None
    # predictions from the built-in GPU profiles, each source left out: per row (interval regime, predicted, low,
    # high, measured), and their pairs
    unmeasured_rows: tuple[tuple[str, float, float, float, float], ...] = ()
    unmeasured_pairs: tuple[PairPrediction, ...] = ()
    # the conformal level each stored set of quantiles was taken at (``source_calibrated_level``): measured_node,
    # unmeasured_node, speedup_measured_node, speedup_unmeasured_node
    levels: dict[str, float] | None = None
    held_out_groups: dict[str, frozenset[str]] | None = None  # per source, the sources left out with it
    # rows left out of the unmeasured-node figures because their source set their GPU's compute figure
    # (gpus.toml ``<family>_calibrated_on``), each (source, gpu, model family)
    unmeasured_excluded: tuple[tuple[str, str, str], ...] = ()
    # the per-step jitter's fit (``nested_step_jitter``): criterion, grid, rows, sources, the value fitted on all
    # sources and the value each source's rows were predicted with (fitted without its group)
    step_jitter: dict | None = None

    def mape(self, which: str, regime: str | None = None, source: str | None = None) -> float | None:
        chosen = [r for r in self.rows if (regime is None or r.regime == regime)
                  and (source is None or r.source == source)]
        if not chosen:
            return None
        return sum(abs(r.error(getattr(r, which))) for r in chosen) / len(chosen)

    def skill(self, regime: str | None = None) -> float | None:
        ours, linear = self.mape("left_out", regime), self.mape("linear", regime)
        return None if ours is None or not linear else ours / linear

    def coverage(self, regime: str | None = None, measured: bool = False) -> float | None:
        """Share of rows inside their interval: all, or those of one interval regime (or measured regime)."""
        chosen = [r for r in self.rows if regime is None or (r.regime if measured else r.interval_regime) == regime]
        return sum(r.covered for r in chosen) / len(chosen) if chosen else None

    def median_half_width(self, regime: str | None = None) -> float | None:
        return median([(r.high - r.low) / 2 / r.left_out for r in self.rows
                       if regime is None or r.interval_regime == regime])

    def speedup_methods(self) -> dict[str, dict[str, str]]:
        """Per node calibration (``measured_node``, ``unmeasured_node``) and interval regime: the speed-up
        interval the corpus's left-out pairs support (``speedup_method``), chosen on every source's pairs: what
        predictions use. Its coverage on those same pairs is post-selection; ``speedup_nested`` is not."""
        def methods(pairs):
            return {reg: speedup_method(pair_figures([p for p in pairs if p.interval_regime == reg]))
                    for reg in REGIMES}

        return {"measured_node": methods(self.pairs), "unmeasured_node": methods(self.unmeasured_pairs)}

    def speedup_nested(self) -> dict[str, dict]:
        """Per node calibration: ``nested_speedup_figures``, each source's method chosen without it."""
        return {"measured_node": nested_speedup_figures(list(self.pairs), self.held_out_groups),
                "unmeasured_node": nested_speedup_figures(list(self.unmeasured_pairs), self.held_out_groups)}

    def speedup_figures(self, regime: str | None = None, source: str | None = None) -> dict:
        """``pair_figures`` of the left-out pairs calibrated on a measured node (of one interval regime or
        source, or all)."""
        return pair_figures([p for p in self.pairs if (regime is None or p.interval_regime == regime)
                             and (source is None or p.source == source)])

    def table(self) -> list[dict]:
        """Per source, per regime and overall: rows and the MAPE of in-sample, left-out, linear and alpha-beta."""
        out = []
        groups = [("all", None, None)] + [("regime", reg, None) for reg in REGIMES] + [
            ("source", None, s) for s in sorted({r.source for r in self.rows})]
        for kind, reg, source in groups:
            n = sum(1 for r in self.rows if (reg is None or r.regime == reg) and (source is None or r.source == source))
            out.append({"group": kind, "name": reg or source or "all", "rows": n,
                        **{f"mape_{w}": self.mape(w, reg, source)
                           for w in ("in_sample", "left_out", "linear", "alpha_beta")}})
        return out

    def summary(self) -> dict:
        comm = REGIMES[1]
        return {"corpus": self.corpus, "rows": len(self.rows), "skipped_rows": len(self.skipped),
                "rows_framework_as_ddp": sum(r.framework != r.simulated_framework for r in self.rows),
                "rows_measured_link": sum(r.measured_link_gbps is not None for r in self.rows),
                "skill": self.skill(), "skill_communication_bound": self.skill(comm),
                "mape_left_out": self.mape("left_out"), "mape_in_sample": self.mape("in_sample"),
                "mape_linear": self.mape("linear"), "mape_alpha_beta": self.mape("alpha_beta"),
                "interval_level": INTERVAL_LEVEL, "conformal_levels": self.levels, "coverage": self.coverage(),
                "coverage_by_regime": {reg: self.coverage(reg) for reg in REGIMES},
                "coverage_by_measured_regime": {reg: self.coverage(reg, measured=True) for reg in REGIMES},
                "median_half_width": self.median_half_width(),
                "median_half_width_by_regime": {reg: self.median_half_width(reg) for reg in REGIMES},
                "speedup": self.speedup_figures(),
                "speedup_by_regime": {reg: self.speedup_figures(reg) for reg in REGIMES},
                "speedup_by_source": {src: self.speedup_figures(source=src)
                                      for src in sorted({p.source for p in self.pairs})},
                "unmeasured_node": self.unmeasured_figures(),
                "speedup_unmeasured_node": pair_figures(list(self.unmeasured_pairs)),
                "speedup_methods": self.speedup_methods(), "speedup_nested": self.speedup_nested(),
                "step_jitter": self.step_jitter}

    def unmeasured_figures(self) -> dict:
        """The intervals of predictions from the built-in GPU profiles (no node measured), each source left out:
        rows, coverage and median half-width, overall and per interval regime; and how many rows were left out
        (per source) because their source set their GPU's compute figure (``calibrated_on``)."""
        def figures(chosen):
            return {"rows": len(chosen), "coverage": share(low <= m <= high for _, _, low, high, m in chosen),
                    "median_half_width": median([(high - low) / 2 / p for _, p, low, high, _ in chosen])}

        rows, excluded = list(self.unmeasured_rows), {}
        for source, _, _ in self.unmeasured_excluded:
            excluded[source] = excluded.get(source, 0) + 1
        return {**figures(rows), "by_regime": {reg: figures([r for r in rows if r[0] == reg]) for reg in REGIMES},
                "rows_excluded": len(self.unmeasured_excluded), "excluded_by_source": excluded}

    def as_dict(self) -> dict:
        return {**self.summary(), "table": self.table(), "quantiles": {k: list(v) for k, v in self.quantiles.items()},
                "quantiles_unmeasured_node": {k: list(v) for k, v in self.quantiles_unmeasured_node.items()},
                "speedup_quantiles": {k: list(v) for k, v in (self.speedup_quantiles or {}).items()},
                "speedup_quantiles_unmeasured_node": {
                    k: list(v) for k, v in (self.speedup_quantiles_unmeasured_node or {}).items()},
                "predictions": [r.as_dict() for r in self.rows], "pairs": [p.as_dict() for p in self.pairs],
                "skipped": [s.as_dict() for s in self.skipped]}


def corpus_figures_markdown(summary: dict) -> str:
    """The headline figures of ``CorpusValidation.summary()`` as the READMEs quote them (a test checks that they
    do, word for word, against the stored run)."""
    comm, comp = "communication-bound", "compute-bound"
    return (f"{summary['rows']} published multi-node rows predicted ({summary['skipped_rows']} skipped, each listed "
            f"with its reason): leave-one-source-out MAPE **{percent(summary['mape_left_out'])}** (in-sample "
            f"{percent(summary['mape_in_sample'])}), against {percent(summary['mape_linear'])} for linear scaling and "
            f"{percent(summary['mape_alpha_beta'])} for an alpha-beta ring; skill (our error / linear scaling's) "
            f"**{summary['skill_communication_bound']:.2f}** on communication-bound rows, {summary['skill']:.2f} "
            f"overall. The {summary['interval_level']:.0%} intervals, fitted without each row's source (conformal "
            f"quantiles at {percent(summary['conformal_levels']['measured_node'])}, the level at which the other "
            "sources, each left out in turn, are covered as promised), cover "
            f"**{percent(summary['coverage'])}** of the rows left out with a median half-width of "
            f"**{percent(summary['median_half_width'])}** ({percent(summary['coverage_by_regime'][comp])} and "
            f"{percent(summary['median_half_width_by_regime'][comp])} where an alpha-beta ring with the "
            "simulated incast stalls predicts compute-bound, "
            f"{percent(summary['coverage_by_regime'][comm])} and "
            f"{percent(summary['median_half_width_by_regime'][comm])} "
            f"where it predicts communication-bound; {percent(summary['coverage_by_measured_regime'][comm])} of the "
            "rows measured communication-bound)." + speedup_figures_markdown(summary))


def speedup_figures_markdown(summary: dict) -> str:
    """The speed-up intervals' sentence of ``corpus_figures_markdown`` (empty where the corpus has no pairs)."""
    f = summary.get("speedup") or {}
    if not f.get("pairs"):
        return ""

    return (f" Speed-ups (one row's throughput over another's of the same published table, set-up and node "
            f"count: {f['pairs']} pairs), each source left out: intervals fitted on the pairs' own ratio errors "
            f"cover **{percent(f['coverage'])}** of the pairs left out with a median half-width of "
            f"**{percent(f['median_half_width'])}**, against {percent(f['naive_coverage'])} and "
            f"{percent(f['naive_median_half_width'])} for the two rows' intervals divided end by end; "
            f"{percent(f['decided'])} of them exclude 1 ({percent(f['naive_decided'])} of the naive ones), and "
            f"{percent(f['decided_right'])} of those name the faster as measured ({percent(f['naive_decided_right'])})."
            + methods_markdown(summary) + unmeasured_figures_markdown(summary))


def methods_markdown(summary: dict) -> str:
    """Which speed-up interval predictions use, per node calibration and regime (``speedup_method``)."""
    methods = summary.get("speedup_methods") or {}
    if not methods:
        return ""
    words = {"paired": "the pairs' own", "naive": "the two divided"}
    nested = summary.get("speedup_nested") or {}
    return (" Predictions take, as all the left-out pairs support (covered as promised, then the narrower; so the "
            "chosen one's coverage above is measured on the pairs it was chosen on): "
            + "; ".join(f"{key.replace('_', ' ')}, " + ", ".join(f"{reg} {words[m]}" for reg, m in regimes.items())
                        for key, regimes in methods.items()) + "."
            + "".join(f" Chosen for each source on the other sources' pairs alone, the {key.replace('_', ' ')} "
                      f"speed-up intervals cover **{percent(f['coverage'])}** of {f['pairs']} pairs with a median "
                      f"half-width of {percent(f['median_half_width'])}."
                      for key, f in nested.items() if f.get("pairs")))


def unmeasured_figures_markdown(summary: dict) -> str:
    """The sentence on predictions without a measured node (built-in GPU profiles), each source left out."""
    rows, pairs = summary.get("unmeasured_node") or {}, summary.get("speedup_unmeasured_node") or {}
    if not rows.get("rows") or not pairs.get("pairs"):
        return ""
    excluded = rows.get("rows_excluded")
    return (f" Without a measured node (compute from the built-in GPU profiles, {rows['rows']} rows"
            + (f"; {excluded} more left out, as their source set their GPU's compute figure" if excluded else "")
            + ") the "
            f"intervals cover {percent(rows['coverage'])} with a median half-width of "
            f"{percent(rows['median_half_width'])}, and the speed-ups' {percent(pairs['coverage'])} with "
            f"{percent(pairs['median_half_width'])} (naive {percent(pairs['naive_coverage'])} and "
            f"{percent(pairs['naive_median_half_width'])}).")


_SHIPPED: list[CorpusValidation] = []  # the shipped corpus's run, once per process


def _shipped_corpus_validation(progress=None, step_jitter_fits: dict | None = None) -> CorpusValidation:
    """The shipped corpus's validation, once per process (the command line, the stored intervals and the report
    read the same run)."""
    if not _SHIPPED:
        _SHIPPED.append(corpus_validation(*corpus_rows(), progress=progress, step_jitter_fits=step_jitter_fits))
    return _SHIPPED[0]


def gpu_calibrated_on(gpu: str, model: str) -> str | None:
    """The corpus source the built-in compute figure for ``model`` on ``gpu`` was read from (gpus.toml
    ``<family>_calibrated_on``), or None: also where the model or GPU is not built in."""
    if model not in MODELS:
        return None
    return GPUS.get(gpu, {}).get(f"{model_profile(model).family}_calibrated_on")


def corpus_validation(corpus: tuple[PublishedRow, ...] | None = None, name: str | None = None,
                      progress: tqdm | None = None, step_jitter_fits: dict | None = None) -> CorpusValidation:
    """Predict every corpus row twice (with the site profiles fitted on its source's rows, and with generic
    hardware data only), leave each source (with those sharing its testbed) out of every fit in turn, and fit
    the intervals' quantiles on the other sources' left-out log ratios. Rows the simulator cannot express are
    returned as skipped with the reason. Without ``corpus``: the shipped corpus, run once per process. The per-step
    jitter is fitted on a grid of predictions of every row (nested per held-out group; ``nested_step_jitter``),
    unless ``step_jitter_fits`` gives what a run on this same corpus stored (its summary's ``step_jitter``): then
    only the predictions those values need are made (the figures are the same, in a fraction of the time)."""
    if corpus is None:
        return _shipped_corpus_validation(progress, step_jitter_fits)
    skipped, excluded = [], []
    groups = _held_out_groups(corpus)
    expressed: list[PublishedRow] = []  # the rows the simulator can express
    at: dict[tuple[int, float], workload.Prediction] = {}  # (row, per-step jitter) -> its generic prediction
    for row in corpus:
        try:
            if row.single_node_throughput is None:
                raise ValueError("the source gives no single-node throughput")
            first = STEP_JITTER_GRID if step_jitter_fits is None else (
                step_jitter_fits["by_held_out_source"][row.source],)
            at |= {(len(expressed), cv): corpus_predict(row, False, step_jitter_cv=cv) for cv in first}
            expressed.append(row)
        except ValueError as error:
            skipped.append(SkippedRow(row.source, row.table, row.model, row.nodes, str(error)))
        if progress is not None:
            progress.update(1)

    def generic_at(i: int, cv: float) -> workload.Prediction:
        if (i, cv) not in at:
            at[i, cv] = corpus_predict(expressed[i], False, step_jitter_cv=cv)
        return at[i, cv]

    # the per-step jitter, fitted with each source's group held out (nested: its rows are predicted with the value
    # the other sources chose), without a held-out group and a row's own (the intervals' errors), and on every row
    # (the in-sample predictions' and the shipped value); or, given, as a run on this corpus stored them
    if step_jitter_fits is None:
        fit_rows = ([row.source for row in expressed], [row.throughput for row in expressed],
                    {cv: [at[i, cv].throughput for i in range(len(expressed))] for cv in STEP_JITTER_GRID})
        jitter = nested_step_jitter(*fit_rows, groups)
        fitted_without: dict[str, float] = {}
    else:
        jitter = {"all": step_jitter_fits["all_sources"], **step_jitter_fits["by_held_out_source"]}
        fitted_without = dict(step_jitter_fits["fitted_without"])
        fit_rows = None  # no grid of predictions: every value needed must be among the stored ones

    def jitter_without(sources: frozenset[str]) -> float:
        key = "|".join(sorted(sources))
        if key not in fitted_without:
            if fit_rows is None:
                raise ValueError(f"the stored per-step jitter fits lack the fit without {key}; regenerate them "
                                 "(python -m sim.api --write-cross-validation)")
            fitted_without[key] = step_jitter_without(*fit_rows, sources)
        return fitted_without[key]

    done, unmeasured = [], []
    for i, row in enumerate(expressed):
        cv = jitter[row.source]
        generic = generic_at(i, cv)
        # in-sample: the site profile where there is one (no generic jitter: sim.hardware.default_step_jitter), else
        # the generic prediction with the jitter fitted on every row
        fitted = corpus_predict(row, True) if (
            row.source, row.transport, float(row.line_rate_gbps)) in SITE_OF_SETUP else generic_at(i, jitter["all"])
        done.append((row, fitted, generic))
        calibrated_on = gpu_calibrated_on(row.gpu, row.model)
        if calibrated_on is not None and calibrated_on in groups[row.source]:
            excluded.append((row.source, row.gpu, model_profile(row.model).family))
        elif row.model in MODELS:
            p = corpus_predict(row, False, measured_node=False, step_jitter_cv=cv)
            shown = replace(row, single_node_throughput=p.single_node_throughput)
            unmeasured.append((row, p.throughput, row_interval_regime(shown, p)))
    # with a source out, its site profiles have no rows to fit on: its rows take the generic prediction; every
    # other source's rows are predicted alike whether or not the site was fitted
    logged_at: dict[tuple[int, float], LoggedError] = {}  # (row, jitter) -> its error, computed once

    def logged(i: int, cv: float) -> LoggedError:
        if (i, cv) not in logged_at:
            row, p = expressed[i], generic_at(i, cv)
            logged_at[i, cv] = LoggedError(row.source, row_interval_regime(row, p),
                                           math.log(row.throughput / p.throughput),
                                           math.log(linear_scaling(row) / p.throughput))
        return logged_at[i, cv]

    errors = [logged(i, jitter[row.source]) for i, row in enumerate(expressed)]

    def others_of(held: frozenset[str]) -> list[LoggedError]:
        # the other sources' rows, each predicted with the jitter fitted without the held-out group and its own
        return [logged(i, jitter_without(held | groups[row.source]))
                for i, row in enumerate(expressed) if row.source not in held]

    bounds = left_out_bounds(errors, groups, others_of)
    out = []
    for (row, fitted, generic), e in zip(done, errors, strict=True):
        reg = e.regime
        low, high = interval_around(generic.throughput, regime_bounds(bounds[groups[row.source]][1], reg))
        high = linear_ceiling(high, generic.throughput, linear_scaling(row))
        out.append(CorpusPrediction(
            row.source, row.table, row.model, row.gpu, row.nodes, row.gpus_per_node, row.transport,
            float(row.line_rate_gbps), row.measured_link_gbps, row.nics_per_node, row.framework, framework_of(row),
            row.optimizer, corpus_regime(row), reg,
            row.throughput, fitted.throughput, generic.throughput, linear_scaling(row), alpha_beta(row),
            low, high))
    u_errors_rows = [LoggedError(row.source, reg, math.log(row.throughput / predicted))
                     for row, predicted, reg in unmeasured]
    pairs, paired_errors = _left_out_pairs([row for row, _, _ in done], [r.left_out for r in out],
                                           [r.interval_regime for r in out], [(r.low, r.high) for r in out], groups)
    u_rows, u_predicted, u_regimes = ([u[k] for u in unmeasured] for k in range(3))
    u_bounds = left_out_bounds(u_errors_rows, groups)  # each from the other sources' rows, as the measured nodes'
    u_intervals = [interval_around(predicted, regime_bounds(u_bounds[groups[row.source]][1], reg))
                   for row, predicted, reg in unmeasured]
    u_pairs, u_errors = _left_out_pairs(u_rows, u_predicted, u_regimes, u_intervals, groups)
    levels = {"measured_node": source_calibrated_level(errors, groups),
              "unmeasured_node": source_calibrated_level(u_errors_rows, groups),
              "speedup_measured_node": source_calibrated_level(paired_errors, groups),
              "speedup_unmeasured_node": source_calibrated_level(u_errors, groups)}

    def pooled(errs, key):
        return interval_quantiles([(e.regime, e.log_ratio) for e in errs], levels[key])

    return CorpusValidation(name or "corpus", tuple(out), tuple(skipped), pooled(errors, "measured_node"),
                            pooled(u_errors_rows, "unmeasured_node"), tuple(pairs),
                            pooled(paired_errors, "speedup_measured_node"),
                            pooled(u_errors, "speedup_unmeasured_node"),
                            tuple((reg, p, low, high, row.throughput) for row, p, reg, (low, high)
                                  in zip(u_rows, u_predicted, u_regimes, u_intervals, strict=True)),
                            tuple(u_pairs), levels, groups, tuple(excluded),
                            {"criterion": STEP_JITTER_CRITERION, "grid": list(STEP_JITTER_GRID),
                             "rows": len(done), "sources": len({row.source for row in expressed}),
                             "all_sources": jitter["all"],
                             "by_held_out_source": {s: v for s, v in jitter.items() if s != "all"},
                             "fitted_without": dict(sorted(fitted_without.items()))})


def _pair_errors(rows: list[PublishedRow], predicted: list[float], regimes: list[str]
                 ) -> list[tuple[tuple[int, int], LoggedError]]:
    """Per pair of rows a speed-up compares, oriented faster-first by the prediction: ((faster, slower), its error:
    the pair's source and interval regime, log(measured ratio / predicted ratio))."""
    return [((i, j), LoggedError(rows[i].source, pair_regime(regimes[i], regimes[j]),
                                 math.log(rows[i].throughput / rows[j].throughput)
                                 - math.log(predicted[i] / predicted[j])))
            for i, j in oriented_pairs(rows, predicted)]


def _left_out_pairs(rows: list[PublishedRow], predicted: list[float], regimes: list[str],
                    intervals: list[tuple[float, float]], groups: dict[str, frozenset[str]]
                    ) -> tuple[list[PairPrediction], list[LoggedError]]:
    """Every pair of ``rows`` (predicted ``predicted``, with interval regimes ``regimes`` and left-out intervals
    ``intervals``) with its speed-up interval fitted on the pairs of the sources not held out with it (a pair's
    two rows share their source; the level calibrated on those sources alone), and the pairs' errors."""
    indexed = _pair_errors(rows, predicted, regimes)
    errors = [e for _, e in indexed]
    bounds = left_out_bounds(errors, groups)
    pairs = []
    for (i, j), e in indexed:
        ratio = predicted[i] / predicted[j]
        low, high = interval_around(ratio, regime_bounds(bounds[groups[e.source]][1], e.regime))
        (low_i, high_i), (low_j, high_j) = intervals[i], intervals[j]
        a, b = rows[i], rows[j]
        pairs.append(PairPrediction(a.source, a.table, a.model, a.nodes, pair_label(a, b), pair_label(b, a),
                                    e.regime, a.throughput / b.throughput, ratio, low, high, low_i / high_j,
                                    high_i / low_j if low_j > 0 else math.inf))
    return pairs, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.validate",
                                     description="Refit the site profiles' FITTED constants on the public rows "
                                                 "and print them (sites.toml units) with the fit's MAPE.")
    parser.add_argument("sites", nargs="*", choices=[[], *FITTED], metavar="SITE",
                        help=f"site profiles to refit (default all: {', '.join(FITTED)})")
    parser.add_argument("--csv", default=None, help="measurements file (default: the public rows)")
    parser.add_argument("--claims", action="store_true",
                        help="print the check of the paper's stated claims (birder_paper_claims.toml) instead")
    args = parser.parse_args(argv)
    try:
        if args.claims:
            table = rows(args.csv)
            print("\n".join(claim_check_lines([claim_check(table, basis) for basis in BASES])))
            return 0
        for site in args.sites or FITTED:
            print(site, fit(site, args.csv))
    except ValueError as error:
        print(f"python -m sim.validate: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
