"""The Birder paper's public rows (sim/presets/birder_public.csv, its Tables 1 and 3) predicted on its two
clusters, the site profiles ``birder-paper-10gbe`` and ``birder-paper-ib``.

``rows()`` reads the rows shipped in the package, or any file of the same columns. A row's ``network`` is a
``--network`` name; the paper's rows say ``10gbe`` and ``ib-hdr``, which here mean the paper's two clusters
(``SITE_OF``). Every prediction is calibrated only with the single-node (8-GPU) throughput of the same optimizer,
model, batch and network, as a user would measure it (``compare``, ``mape``, ``order_agreement``).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from safeio.inputs import read_text_bounded
from sim.hardware import (
    MAX_GPUS,
    NETWORKS,
    PRESETS,
    Cluster,
    cluster,
)
from sim.validation.corpus import MAX_SCALING_EFFICIENCY
from sim.workload import predict

if TYPE_CHECKING:

    pass

PUBLIC_CSV = PRESETS / "birder_public.csv"
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


MAX_SAMPLES_PER_GPU_S = 1e7  # a GPU doing ~1e15 FLOP/s cannot train a model of even 1e4 parameters (6 FLOP each
