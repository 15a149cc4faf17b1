"""Predictions against the published measurements shipped with the project, and the fit of the few constants.

``rows()`` reads ../shared/validation/birder_public.csv beside the project when it is there (it may hold more
rows), else the copy shipped in the package (sim/presets/birder_public.csv, the paper's Tables 1 and 3), or any
file of the same columns. Every prediction is
calibrated only with the single-node (8-GPU) throughput of the same optimizer, model, batch and network, as a
user would measure it.

``python -m sim.validate [socket|ib]`` (this module's ``fit``) refits the FITTED constants of
``sim/presets/transports.toml`` on the public rows: for each transport, the multi-node rows of its networks,
minimising the mean absolute percentage error with Nelder-Mead in log space; the incast threshold is a count of
flows, so it is chosen as the geometric middle of the bracket of flow counts that gives the lowest error.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from sim.network import Cluster, cluster
from sim.workload import predict, with_constants

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


def rows(path: str | Path | None = None) -> list[Row]:
    path = Path(path) if path is not None else PUBLIC_CSV
    if not path.exists():
        raise ValueError(f"no published measurements at {path}; pass --csv FILE")
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    out = []
    try:
        for rec in csv.DictReader(lines):
            out.append(Row(rec["model"], int(rec["batch_per_gpu"]), rec["network"], rec["optimizer"],
                           int(rec["gpus"]), float(rec["throughput"])))
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"{path}: malformed measurements ({error})") from None
    return out


def single_node(table: list[Row], row: Row, gpus_per_node: int = 8) -> float:
    for other in table:
        if (other.model, other.batch_per_gpu, other.network, other.optimizer, other.gpus) == (
                row.model, row.batch_per_gpu, row.network, row.optimizer, gpus_per_node):
            return other.throughput
    raise ValueError(f"no single-node row for {row.model}/{row.batch_per_gpu}/{row.network}/{row.optimizer}")


def predict_row(table: list[Row], row: Row, tweak=None) -> float:
    c: Cluster = cluster(row.network, row.gpus // 8)
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


# ---------------------------------------------------------------------------------------------------- fit
def fit(transport: str, path: str | Path | None = None) -> dict:
    """Refit one transport's FITTED constants on the public multi-node rows of its networks."""
    from scipy.optimize import minimize

    from sim.network import NETWORKS, TRANSPORTS

    table = rows(path)
    mine = [r for r in table if NETWORKS[r.network]["transport"] == transport and r.gpus > 8]
    base = TRANSPORTS[transport]
    names = ["message_overhead_us"] + (["efficiency"] if transport == "ib" else [])

    def tweak_for(values, incast):
        fields = {"message_overhead": values[0] * 1e-6}
        if transport == "ib":
            fields["efficiency"] = min(1.0, values[1])
        if incast is not None:
            fields["incast_flows"] = incast
        return lambda c: with_constants(c, **fields)

    def error(log_values, incast=None):
        return mape(compare(mine, tweak=tweak_for([math.exp(v) for v in log_values], incast), table=table))

    start = [math.log(base[n]) for n in names]
    if transport == "ib":  # the efficiency's error surface has local minima: start from the best of a coarse grid
        grid = [(error([start[0], math.log(e)]), e) for e in (0.05, 0.1, 0.2, 0.4, 0.8)]
        start[1] = math.log(min(grid)[1])
    brackets = [None]
    if transport == "socket":
        sizes = {r.gpus for r in mine}  # flows into a NIC: flat all-to-all 8(p-8), hierarchical 8(n-1)
        counts = sorted({8 * (g - 8) for g in sizes} | {8 * (g // 8 - 1) for g in sizes})
        brackets = [math.sqrt(a * b) for a, b in zip(counts, counts[1:], strict=False)] + [math.inf]
    best = None
    for incast in brackets:
        res = minimize(error, start, args=(incast,), method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-4})
        if best is None or res.fun < best[0]:
            best = (res.fun, res.x, incast)
    values = dict(zip(names, (math.exp(v) for v in best[1]), strict=True))
    if best[2] is not None:
        values["incast_flows"] = best[2]
    values["mape"] = best[0]
    return values


if __name__ == "__main__":
    for t in sys.argv[1:] or ("socket", "ib"):
        print(t, fit(t))
