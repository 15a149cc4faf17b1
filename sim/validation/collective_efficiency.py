"""A pre-registered what-if: the share of the inter-node payload rate that training's collectives reach
(``Cluster.collective_efficiency``, ``birder predict --collective-efficiency``), fitted on every row seen so far.

Why: scored by the shipped model, the communication-bound rows (by their own 1-node figures) of the logged
first-contact sources and of the corpus's sources, each left out, lie below their predictions far more often
than above, while the compute-bound rows do not. A single share of the link rate that training reaches (below
what a collective benchmark reaches: buckets smaller than the benchmark's, kernels sharing the GPU, the
framework's own copies) is the simplest mechanism that says so. No published figure gives it, so it can only be
fitted; this module fits it and writes the fit down BEFORE the next first-contact batch is scored, so that batch
tests it prospectively (``python -m sim.validation.first_contact score --no-log --extra-arg ...``). The shipped
default stays 1 (no change) until such a test says otherwise.

Criterion, fixed before the fit was computed: over the grid 0.50, 0.55, ..., 1.00, the share whose predictions of
the measured communication-bound rows have the median over sources of each source's median
log(measured / predicted) closest to 0 (each source counts once, as issue 27 asks of the intervals; ties to the
larger share, i.e. the smaller change). Rows: the corpus's, predicted as its left-out generic predictions are
(measured node, the stored per-step jitter fitted without the row's source), and every logged first-contact
row, predicted through the command line as ``first_contact.score_row`` does. ``by_held_out_source``: the same fit
with each source's group left out (nested), and what the held-out rows' errors are at that share.

    python -m sim.validation.collective_efficiency OUT.json
"""

from __future__ import annotations

import math
import statistics
import sys

from sim.validation.what_if_fit import corpus_left_out_predictions, groups_of, head_commit, write_fit_record

GRID = tuple(round(0.5 + 0.05 * k, 2) for k in range(11))
COMM = "communication-bound"


def _source_bias(rows: list[dict], share: float, excluded: frozenset[str] = frozenset()) -> float | None:
    """Median over sources (not in ``excluded``) of the median log(measured / predicted at ``share``) of their
    measured communication-bound rows; None where there are none."""
    per_source: dict[str, list[float]] = {}
    for r in rows:
        if r["measured_regime"] == COMM and r["source"] not in excluded:
            per_source.setdefault(r["source"], []).append(math.log(r["measured"] / r["predicted"][share]))
    medians = [statistics.median(v) for v in per_source.values()]
    return statistics.median(medians) if medians else None


def fit(rows: list[dict], excluded: frozenset[str] = frozenset()) -> float:
    """The criterion's share (module docstring) on ``rows`` without the sources in ``excluded``."""
    bias = {s: _source_bias(rows, s, excluded) for s in GRID}
    if any(b is None for b in bias.values()):
        raise ValueError("collective efficiency fit: no communication-bound rows to fit on")
    return min(reversed(GRID), key=lambda s: abs(bias[s]))


def corpus_rows_at_grid(progress=None) -> list[dict]:
    """Every expressible corpus row predicted (generic, measured node, its stored left-out jitter) at each share."""
    from sim.uncertainty import regime_of_efficiency

    out = []
    for row, predicted in corpus_left_out_predictions({s: {"collective_efficiency": s} for s in GRID}, progress):
        linear = row.nodes * float(row.single_node_throughput)
        out.append({"source": row.source, "measured": float(row.throughput), "predicted": predicted,
                    "measured_regime": regime_of_efficiency(float(row.throughput) / linear), "set": "corpus"})
    return out


def first_contact_rows_at_grid(progress=None) -> list[dict]:
    """Every logged first-contact row predicted through the command line at each share."""
    from sim.uncertainty import regime_of_efficiency
    from sim.validation import first_contact as fc

    at = {s: fc.logged_rows_predicted(["--collective-efficiency", repr(s)], progress) for s in GRID}
    out = []
    for i, (row, _) in enumerate(at[GRID[0]]):
        linear = row["nodes"] * row["single_node_throughput"]
        out.append({"source": row["source"], "measured": row["throughput"],
                    "predicted": {s: at[s][i][1]["throughput"] for s in GRID},
                    "measured_regime": regime_of_efficiency(row["throughput"] / linear), "set": "first contact"})
    return out


def report(rows: list[dict]) -> dict:
    """The fit on every row, the nested fits, and the median absolute error of the measured communication-bound
    rows (and the compute-bound ones) at share 1 and at their source's nested share, per set."""
    groups = groups_of(rows)
    shipped = fit(rows)
    nested = {s: fit(rows, groups.get(s, frozenset({s}))) for s in sorted({r["source"] for r in rows})}

    def ape(r, share):
        return abs(r["predicted"][share] - r["measured"]) / r["measured"]

    figures = {}
    for which in ("corpus", "first contact", "all"):
        for regime in (COMM, "compute-bound"):
            chosen = [r for r in rows if (which == "all" or r["set"] == which) and r["measured_regime"] == regime]
            if chosen:
                figures[f"{which}, {regime}"] = {
                    "rows": len(chosen), "median_error_at_1": statistics.median(ape(r, 1.0) for r in chosen),
                    "median_error_nested": statistics.median(ape(r, nested[r["source"]]) for r in chosen)}
    return {"criterion": __doc__.split("Criterion, fixed before the fit was computed: ")[1].split("\n\n")[0],
            "grid": list(GRID), "fitted_on_all": shipped, "by_held_out_source": nested,
            "source_bias_at_1": _source_bias(rows, 1.0), "source_bias_at_fit": _source_bias(rows, shipped),
            "figures": figures, "rows": len(rows), "commit": head_commit()}


def main(argv: list[str]) -> int:
    return write_fit_record(argv, "sim.validation.collective_efficiency", "rows at each share",
                            lambda bar: corpus_rows_at_grid(bar) + first_contact_rows_at_grid(bar), report,
                            ("by_held_out_source",))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
