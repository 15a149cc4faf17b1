"""Predictions against the published measurements shipped with the project, and the fit of the few constants.

``rows()`` reads ../shared/validation/birder_public.csv beside the project when it is there (it may hold more
rows), else the copy shipped in the package (sim/presets/birder_public.csv, the paper's Tables 1 and 3), or any
file of the same columns. Every prediction is
calibrated only with the single-node (8-GPU) throughput of the same optimizer, model, batch and network, as a
user would measure it.

``python -m sim.validate [socket|ib]`` (this module's ``fit``) refits the FITTED constants of the presets
(``transports.toml`` [socket], ``networks.toml`` [ib-hdr]) on the public rows: for each transport, the
multi-node rows of its networks, minimising the mean absolute percentage error with Nelder-Mead in log space. The
incast onset is a burst size: the fit tries each bracket of consecutive bursts of the rows (the ramp of expected
timeouts runs across the bracket) and keeps the best. ``cross_validation`` refits on the 16- and 32-GPU
rows only and predicts the 64-GPU rows. ``speedup_trend`` sets each optimizer's speed-up over SGDM, published and
predicted, against GPU count.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from sim.models import model_profile
from sim.network import NETWORKS, TRANSPORTS, Cluster, cluster
from sim.system import burst_bytes, phase_plan, step_schedule
from sim.workload import ddp_buckets, policy, predict, with_constants

SHARED_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "birder_public.csv"
SHIPPED_CSV = Path(__file__).resolve().parent / "presets" / "birder_public.csv"
PUBLIC_CSV = SHARED_CSV if SHARED_CSV.exists() else SHIPPED_CSV


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


def rows(path: str | Path | None = None) -> list[Row]:
    """The measurements of ``path`` (default: the public rows); ValueError if the file has none, lacks a column
    or holds a GPU count that is not a whole number of nodes."""
    path = Path(path) if path is not None else PUBLIC_CSV
    if not path.exists():
        raise ValueError(f"no published measurements at {path}; pass --csv FILE")
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(f"{path}: missing columns {', '.join(missing)}; expected {','.join(COLUMNS)}")
    out = []
    try:
        for rec in reader:
            out.append(Row(rec["model"], int(rec["batch_per_gpu"]), rec["network"], rec["optimizer"],
                           int(rec["gpus"]), float(rec["throughput"])))
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"{path}: malformed measurements ({error})") from None
    if not out:
        raise ValueError(f"{path}: no measurements (only a header or comments)")
    for row in out:
        if row.gpus < 1 or row.gpus % GPUS_PER_NODE:
            raise ValueError(f"{path}: {row.gpus} GPUs is not a whole number of {GPUS_PER_NODE}-GPU nodes")
        if row.network not in NETWORKS:
            raise ValueError(f"{path}: unknown network {row.network!r}; choose one of {', '.join(NETWORKS)}")
    return out


def single_node(table: list[Row], row: Row, gpus_per_node: int = GPUS_PER_NODE) -> float:
    for other in table:
        if (other.model, other.batch_per_gpu, other.network, other.optimizer, other.gpus) == (
                row.model, row.batch_per_gpu, row.network, row.optimizer, gpus_per_node):
            return other.throughput
    raise ValueError(f"no single-node row for {row.model}/{row.batch_per_gpu}/{row.network}/{row.optimizer}")


def predict_row(table: list[Row], row: Row, tweak=None) -> float:
    c: Cluster = cluster(row.network, row.gpus // GPUS_PER_NODE, GPUS_PER_NODE)
    if tweak is not None:
        c = tweak(c)
    return predict(c, model=row.model, batch_per_gpu=row.batch_per_gpu, optimizer=row.optimizer,
                   single_node_throughput=single_node(table, row)).throughput


def compare(selected: list[Row], progress=None, tweak=None, table: list[Row] | None = None) -> list[dict]:
    """Predict every row of ``selected``, calibrated by the single-node rows of ``table`` (default: selected)."""
    out = []
    for row in selected:
        predicted = predict_row(table or selected, row, tweak)
        out.append({"model": row.model, "batch_per_gpu": row.batch_per_gpu, "network": row.network,
                    "optimizer": row.optimizer, "gpus": row.gpus, "published": row.throughput,
                    "predicted": predicted, "error": (predicted - row.throughput) / row.throughput})
        if progress is not None:
            progress.update(1)
    return out


def mape(results: list[dict]) -> float:
    return sum(abs(r["error"]) for r in results) / max(1, len(results))


def order_agreement(results: list[dict]) -> list[dict]:
    """Per (model, batch, network, gpus): the optimizers ranked by published and by predicted throughput."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["model"], r["batch_per_gpu"], r["network"], r["gpus"]), []).append(r)
    out = []
    for key, rs in sorted(groups.items()):
        published = [r["optimizer"] for r in sorted(rs, key=lambda r: -r["published"])]
        predicted = [r["optimizer"] for r in sorted(rs, key=lambda r: -r["predicted"])]
        out.append({"model": key[0], "batch_per_gpu": key[1], "network": key[2], "gpus": key[3],
                    "published_order": published, "predicted_order": predicted, "same": published == predicted})
    return out


def speedup_trend(results: list[dict], baseline: str = "sgdm") -> list[dict]:
    """Per (model, batch, network, optimizer, GPU count): the optimizer's throughput over ``baseline``'s, published
    and predicted, so that how the speed-up moves with GPU count can be read beside the ranking."""
    base = {(r["model"], r["batch_per_gpu"], r["network"], r["gpus"]): r for r in results
            if r["optimizer"] == baseline}
    out = []
    for r in results:
        b = base.get((r["model"], r["batch_per_gpu"], r["network"], r["gpus"]))
        if b is None or r["optimizer"] == baseline:
            continue
        out.append({"model": r["model"], "batch_per_gpu": r["batch_per_gpu"], "network": r["network"],
                    "optimizer": r["optimizer"], "baseline": baseline, "gpus": r["gpus"],
                    "published": r["published"] / b["published"], "predicted": r["predicted"] / b["predicted"]})
    return sorted(out, key=lambda t: (t["model"], t["batch_per_gpu"], t["network"], t["optimizer"], t["gpus"]))


# ---------------------------------------------------------------------------------------------------- fit
FITTED = {"socket": ("message_overhead_us", "step_overhead_us"), "ib": ("message_overhead_us", "efficiency")}
_NIC_FIELD = {"message_overhead_us": ("message_overhead", 1e-6), "step_overhead_us": ("step_overhead", 1e-6),
              "efficiency": ("efficiency", 1.0),
              "incast_onset_bytes": ("incast_onset_bytes", 1.0), "incast_certain_bytes": ("incast_certain_bytes", 1.0)}


def constants_tweak(fitted: dict[str, dict[str, float]]):
    """A cluster tweak that puts fitted constants (per transport, in the units of the TOML presets) on its NIC."""
    def tweak(c: Cluster) -> Cluster:
        values = fitted.get(c.nic.transport, {})
        fields = {_NIC_FIELD[k][0]: v * _NIC_FIELD[k][1] for k, v in values.items() if k in _NIC_FIELD}
        if "efficiency" in fields:
            fields["efficiency"] = min(1.0, fields["efficiency"])
        return with_constants(c, **fields)

    return tweak


def row_bursts(row: Row) -> set[float]:
    """The bursts (``sim.system.burst_bytes``) into one NIC of every many-to-one round the row's collectives run:
    where the onset of incast can lie."""
    c = cluster(row.network, row.gpus // GPUS_PER_NODE, GPUS_PER_NODE)
    profile = model_profile(row.model)
    out = set()
    for kind in policy(row.optimizer, row.model):
        if kind.comm == "none":
            continue
        sizes = {profile.n_params} if kind.comm == "after_backward" else {b.elements for b in ddp_buckets(profile)}
        for elements in sizes:
            sched = step_schedule(row.optimizer, c, elements, "hierarchical", kind.full_precision)
            for phase in sched.phases:
                for load, nbytes, _ in phase_plan(phase, sched.layout, c.nic.count).rounds:
                    if load.nic_rx > 1:
                        out.add(burst_bytes(load, nbytes))
    return out


def fit(transport: str, path: str | Path | None = None, gpus: tuple[int, ...] | None = None) -> dict[str, float]:
    """Refit one transport's FITTED constants on the public multi-node rows of its networks (only the rows of
    ``gpus`` GPUs when given: the cross-validation's training set). Returns them in the TOML presets' units,
    with the fit's ``mape``."""
    from scipy.optimize import minimize

    table = rows(path)
    mine = [r for r in table if NETWORKS[r.network]["transport"] == transport and r.gpus > 8
            and (gpus is None or r.gpus in gpus)]
    if not mine:
        raise ValueError(f"no multi-node rows of transport {transport!r} to fit on")
    preset = TRANSPORTS[transport] | NETWORKS[mine[0].network]
    names = FITTED[transport]

    def error(log_values, incast=()):
        fitted = dict(zip(names, (math.exp(v) for v in log_values), strict=True)) | dict(incast)
        return mape(compare(mine, tweak=constants_tweak({transport: fitted}), table=table))

    start = [math.log(max(preset[n], 1.0)) for n in names]
    if transport == "ib":  # the efficiency's error surface has local minima: start from the best of a coarse grid
        grid = [(error([start[0], math.log(e)]), e) for e in (0.05, 0.1, 0.2, 0.4, 0.8)]  # names: o, efficiency
        start[1] = math.log(min(grid)[1])
    brackets: list[tuple] = [()]
    if transport == "socket":
        # the onset of incast lies between two consecutive bursts of the rows, none of which tells where inside.
        # No incast at all comes first, so that it wins ties (the rows then say nothing about incast). Every
        # bracket is scored at the starting constants; only the three best are refined.
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


def cross_validation(path: str | Path | None = None, train_gpus: tuple[int, ...] = (16, 32)) -> dict | None:
    """Refit every transport's constants on the multi-node rows of ``train_gpus`` GPUs only, then predict the
    rows of more GPUs than those: how well the model extrapolates in GPU count, on rows it was not fitted on.
    Only transports with rows on both sides take part; None if there are none."""
    table = rows(path)

    def transport(r: Row) -> str:
        return NETWORKS[r.network]["transport"]

    trained = {transport(r) for r in table if r.gpus in train_gpus and r.gpus > GPUS_PER_NODE}
    test = [r for r in table if r.gpus > max(train_gpus) and transport(r) in trained]
    if not test:
        return None
    fitted = {t: fit(t, path, train_gpus) for t in sorted({transport(r) for r in test})}
    results = compare(test, tweak=constants_tweak(fitted), table=table)
    return {"train_gpus": list(train_gpus), "test_gpus": sorted({r.gpus for r in test}), "constants": fitted,
            "mape": mape(results), "rows": results}


if __name__ == "__main__":
    for t in sys.argv[1:] or ("socket", "ib"):
        print(t, fit(t))
