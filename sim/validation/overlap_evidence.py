"""How much communication the runs hide behind the backward pass, against how much the simulator hides: a
diagnostic read from the first-contact log alone (nothing is predicted), and a hypothesis about the next batch.

The step time a run adds over one node's step, per node's worth of samples, is ``linear / throughput - 1`` of
that step (``linear``: the nodes times the table's own 1-node figure). The same of the no-overlap alpha-beta ring
(``sim.uncertainty.alpha_beta_throughput``, the log's ``alpha_beta``) is the time of the whole gradient's ring
all-reduce at link rate: ``ring``. Over it, the measured added time says what the run's overlap hid (below 1) or
what it lost beyond bandwidth (above 1); the simulator's (``predicted``) says what the model hides.

The rows are chosen by quantities known before measuring, so that no row is in for having scaled badly (rows
chosen by their measured figure lie below any prediction, biased or not): a framework that all-reduces its
gradients while the backward pass runs (``pattern`` "allreduce" and ``overlaps_backward`` in
presets/frameworks.toml), and a ring whose time is at least ``MIN_RING_SHARE`` of one node's step (where
communication is large enough to be seen). Each source counts once: the median over sources of each source's
median ratio.

    python -m sim.validation.overlap_evidence     # JSON: every first-contact row as first scored, the latest
                                                  # re-score, and each batch apart
    python -m sim.validation.overlap_evidence --corpus-pace P   # JSON: the corpus's rows at pace 1 and at P
                                                                # (birder predict --collective-pace)
"""

from __future__ import annotations

import json
import statistics
import sys

from sim.hardware import framework_preset
from sim.validation.first_contact import first_contact_batches, latest_rescore, read_log

MIN_RING_SHARE = 0.10  # the ring's time over one node's step, at least: communication large enough to be seen
MIN_SOURCES = 3  # sources a batch needs for the hypothesis to be judged on it
# the hypothesis, written while batch 18 was being transcribed, before any of its rows was seen: on a batch's
# chosen rows, the median over sources of measured added time over the ring's is at least MEASURED_AT_LEAST and the
# simulator's at most MODEL_AT_MOST
MEASURED_AT_LEAST = 1.0
MODEL_AT_MOST = 0.8


def framework_of(row: dict) -> str:
    """The framework a logged row was scored with (its command line's ``--framework``)."""
    argv = row["argv"]
    return argv[argv.index("--framework") + 1]


def overlapping_allreduce(framework: str) -> bool:
    """Whether ``framework`` all-reduces gradients among the GPUs while the backward pass runs."""
    preset = framework_preset(framework)
    return preset.pattern == "allreduce" and preset.overlaps_backward


def added_over_ring(row: dict) -> dict | None:
    """A logged row's added step time over one node's step (measured and simulated) and the ring's, each a share of
    one node's step, and the two ratios to the ring's; None where the ring's share is below ``MIN_RING_SHARE`` or
    the framework is not an overlapping all-reduce."""
    ring = row["linear"] / row["alpha_beta"] - 1
    if ring < MIN_RING_SHARE or not overlapping_allreduce(framework_of(row)):
        return None
    measured, model = row["linear"] / row["measured"] - 1, row["linear"] / row["predicted"] - 1
    return {"source": row["source"], "ring": ring, "measured": measured, "model": model,
            "measured_over_ring": measured / ring, "model_over_ring": model / ring}


def summary(rows: list[dict]) -> dict:
    """The chosen rows of ``rows`` (logged rows): how many, from how many sources, the median over sources of each
    source's median ratio (measured and simulated added time over the ring's), and the sources whose measured ratio
    is above the simulator's."""
    chosen = [r for r in map(added_over_ring, rows) if r is not None]
    by_source: dict[str, list[dict]] = {}
    for r in chosen:
        by_source.setdefault(r["source"], []).append(r)
    per_source = {s: {k: statistics.median(r[k] for r in rs) for k in ("measured_over_ring", "model_over_ring")}
                  for s, rs in sorted(by_source.items())}
    out = {"rows": len(chosen), "sources": len(per_source)}
    if per_source:
        for k in ("measured_over_ring", "model_over_ring"):
            out[k] = statistics.median(v[k] for v in per_source.values())
        out["sources_measured_above_model"] = sum(v["measured_over_ring"] > v["model_over_ring"]
                                                  for v in per_source.values())
    out["per_source"] = per_source
    return out


def judged(s: dict) -> str:
    """The hypothesis on a batch's ``summary``: "holds", "fails", or "too few" sources."""
    if s["sources"] < MIN_SOURCES:
        return "too few"
    return "holds" if (s["measured_over_ring"] >= MEASURED_AT_LEAST and s["model_over_ring"] <= MODEL_AT_MOST) \
        else "fails"


def report(entries: list[dict]) -> dict:
    """Every first-contact row as first scored, the latest re-score (one model for every row), and each batch at
    its first contact with the hypothesis judged on it."""
    batches = first_contact_batches(entries)
    out = {"min_ring_share": MIN_RING_SHARE,
           "first_contact": summary([r for _, rows in batches for r in rows]),
           "batches": [{"model": entry["model_commit"][:7], **(s := summary(rows)), "hypothesis": judged(s)}
                       for entry, rows in batches]}
    latest = latest_rescore(entries)
    if latest is not None:
        out["latest_rescore"] = {"model": latest["model_commit"][:7], **summary(latest["rows"])}
    return out


def corpus_at_pace(pace: float) -> dict:
    """The corpus's rows with a measured node, predicted as its left-out generic predictions are (each source's
    stored per-step jitter fitted without it) at the shipped pace 1 and at ``pace``: the median absolute error of
    all, and of those compute- and communication-bound by their own 1-node figures. The corpus's rows were not
    looked at when the pace was built (``first_contact`` rows and Lee et al. 2025 were), though the rest of the
    simulator was designed on them."""
    from sim.hardware import check_collective_pace
    from sim.uncertainty import REGIMES, regime_of_efficiency
    from sim.validation.what_if_fit import corpus_left_out_predictions

    check_collective_pace(pace, "--corpus-pace")
    rows = [{"source": row.source, "measured": float(row.throughput), "at": at, "regime": regime_of_efficiency(
        float(row.throughput) / (row.nodes * float(row.single_node_throughput)))}
        for row, at in corpus_left_out_predictions({p: {"collective_pace": p} for p in (1.0, pace)})]

    def errors(chosen):
        return {"rows": len(chosen), "sources": len({r["source"] for r in chosen}),
                **{f"median_error_at_{p:g}": statistics.median(abs(r["at"][p] / r["measured"] - 1) for r in chosen)
                   for p in (1.0, pace)}} if chosen else {"rows": 0}

    return {"pace": pace, "all": errors(rows), **{reg: errors([r for r in rows if r["regime"] == reg])
                                                  for reg in REGIMES}}


USAGE = "usage: python -m sim.validation.overlap_evidence [--corpus-pace P]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(json.dumps(report(read_log()), indent=1))
        return 0
    if len(argv) != 2 or argv[0] != "--corpus-pace":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        print(json.dumps(corpus_at_pace(float(argv[1])), indent=1))
    except ValueError as error:
        print(f"overlap_evidence: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
