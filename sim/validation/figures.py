"""The validation's figures as the READMEs quote them (``corpus_figures_markdown``: a test checks them word for
word against the stored run), and the small helpers they are computed with (``median``, ``share``, ``percent``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:

    pass

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


def corpus_figures_markdown(summary: dict) -> str:
    """The headline figures of ``CorpusValidation.summary()`` as the READMEs quote them (a test checks that they
    do, word for word, against the stored run)."""
    comm, comp = "communication-bound", "compute-bound"
    return (f"{summary['rows']} published multi-node rows predicted ({summary['skipped_rows']} skipped, each listed "
            f"with its reason): leave-one-source-out MAPE **{percent(summary['mape_left_out'])}** (in-sample "
            f"{percent(summary['mape_in_sample'])}), against {percent(summary['mape_linear'])} for linear scaling and "
            f"{percent(summary['mape_alpha_beta'])} for an alpha-beta ring; skill (our error / linear scaling's) "
            f"**{summary['skill_communication_bound']:.2f}** on communication-bound rows, {summary['skill']:.2f} "
            f"overall. The {summary['interval_level']:.0%} intervals (each prediction's width propagated from its "
            "uncertain inputs' ranges, scaled by conformal quantiles of the normalised residuals fitted without the "
            f"row's source, at conformal levels {levels_markdown(summary, 'measured_node')}, each regime's the "
            "least at which the other sources' rows of that regime, each source left out in turn, are covered as a "
            "target asks, the corpus's sources and the first-contact log's each, the target the least that covers "
            "each source calibrated without it: nested) cover "
            f"**{percent(summary['coverage'])}** of the rows left out with a median half-width of "
            f"**{percent(summary['median_half_width'])}** ({percent(summary['coverage_by_regime'][comp])} and "
            f"{percent(summary['median_half_width_by_regime'][comp])} where an alpha-beta ring with the "
            "simulated incast stalls predicts compute-bound, "
            f"{percent(summary['coverage_by_regime'][comm])} and "
            f"{percent(summary['median_half_width_by_regime'][comm])} "
            f"where it predicts communication-bound; {percent(summary['coverage_by_measured_regime'][comm])} of the "
            "rows measured communication-bound)." + speedup_figures_markdown(summary))


def levels_markdown(summary: dict, key: str) -> str:
    """The conformal levels of one stored key (``measured_node``, ...) per interval regime, as
    ``corpus_figures_markdown`` quotes them; a regime the grid's top cannot cover as promised says so."""
    comm, comp = "communication-bound", "compute-bound"
    levels, covered = summary["conformal_levels"][key], summary["conformal_level_coverage"][key]

    def one(reg):
        short = ""
        if covered[reg] < summary["interval_level"]:
            short = f", which still covers only {percent(covered[reg])} of them"
        return f"{percent(levels[reg])} ({reg}{short})"

    return f"{one(comp)} and {one(comm)}"


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
