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
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from safeio.inputs import read_text_bounded
from sim.hardware import MAX_GPUS, NETWORKS, SITES, Cluster, cluster, network_spec
from sim.models import model_profile
from sim.system import burst_bytes, phase_load, step_schedule
from sim.workload import ddp_buckets, policy, predict

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
    if all(row.gpus <= GPUS_PER_NODE for row in out):
        raise ValueError(f"{path}: only single-node rows ({GPUS_PER_NODE} GPUs or fewer), which calibrate compute "
                         "time and are matched by construction: add multi-node measurements to validate against")
    return out


def site_of(network: str) -> str:
    """The ``--network`` name a row's network stands for (the paper's two clusters are site profiles)."""
    return SITE_OF.get(network, network)


def single_node(table: list[Row], row: Row, gpus_per_node: int = GPUS_PER_NODE) -> float:
    for other in table:
        if (other.model, other.batch_per_gpu, other.network, other.optimizer, other.gpus) == (
                row.model, row.batch_per_gpu, row.network, row.optimizer, gpus_per_node):
            return other.throughput
    raise ValueError(f"no single-node row for {row.model}/{row.batch_per_gpu}/{row.network}/{row.optimizer}")


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


# ---------------------------------------------------------------------------------------------------- fit
# the FITTED constants of each site (sites.toml keys) and the Nic field and unit factor each sets
FITTED = {"birder-paper-10gbe": ("message_overhead_us", "step_overhead_us"),
          "birder-paper-ib": ("message_overhead_us", "efficiency")}
_NIC_FIELD = {"message_overhead_us": ("message_overhead", 1e-6), "step_overhead_us": ("step_overhead", 1e-6),
              "efficiency": ("efficiency", 1.0),
              "incast_onset_bytes": ("incast_onset_bytes", 1.0), "incast_certain_bytes": ("incast_certain_bytes", 1.0)}


def constants_tweak(fitted: dict[str, dict[str, float]]):
    """A cluster tweak that puts fitted constants (per site, in sites.toml's units) on its NIC."""
    def tweak(c: Cluster) -> Cluster:
        values = fitted.get(c.nic.name, {})
        fields = {_NIC_FIELD[k][0]: v * _NIC_FIELD[k][1] for k, v in values.items() if k in _NIC_FIELD}
        if "efficiency" in fields:
            fields["efficiency"] = min(1.0, fields["efficiency"])
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
                load = phase_load(phase, sched.layout, c.nic.count)
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
        fitted = dict(zip(names, (math.exp(v) for v in log_values), strict=True)) | dict(incast)
        return mape(compare(mine, tweak=constants_tweak({site: fitted}), table=table))

    start = [math.log(max(spec.get(n, 1.0), 1e-3)) for n in names]
    if "efficiency" in names:  # the efficiency's error surface has local minima: start from the best of a grid
        k = names.index("efficiency")
        grid = [(error(start[:k] + [math.log(e)] + start[k + 1:]), e) for e in (0.05, 0.1, 0.2, 0.4, 0.8)]
        start[k] = math.log(min(grid)[1])
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
    for incast in brackets:
        res = minimize(error, start, args=(incast,), method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-4})
        if best is None or res.fun < best[0] - 1e-9:
            best = (res.fun, res.x, incast)
    values = dict(zip(names, (math.exp(v) for v in best[1]), strict=True)) | dict(best[2])
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.validate",
                                     description="Refit the site profiles' FITTED constants on the public rows "
                                                 "and print them (sites.toml units) with the fit's MAPE.")
    parser.add_argument("sites", nargs="*", choices=[[], *FITTED], metavar="SITE",
                        help=f"site profiles to refit (default all: {', '.join(FITTED)})")
    parser.add_argument("--csv", default=None, help="measurements file (default: the public rows)")
    args = parser.parse_args(argv)
    try:
        for site in args.sites or FITTED:
            print(site, fit(site, args.csv))
    except ValueError as error:
        print(f"python -m sim.validate: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
