"""The sentences and tables of the answer, generated from the grid's predictions (never by hand), and the words
on how accurate they are."""

from __future__ import annotations

import math

from birder.report_core import spans
from birder.report_grid import (
    GPUS_PER_NODE,
    Grid,
    ModelGrid,
    best,
    pays_runs,
    speedup,
    tied_counts,
    why_not,
)


def stops_paying_sentence(g: ModelGrid) -> str:
    """Per network, the node counts where Birder beats the best baseline, why it does not at the others, and
    where the speed-up's interval contains 1 (within the uncertainty)."""
    grid_nodes = [n for n in g.nodes if n >= 2]
    words = []
    for net in g.networks:
        pays, not_pays = pays_runs(g, net)
        if not pays:
            text = f"never on {net} ({why_not(g, net, grid_nodes[-1]).split(':')[0]}"
        elif not not_pays:
            text = f"on {net} at every count ({grid_nodes[0]}-{grid_nodes[-1]} nodes"
        else:
            later = [n for n in not_pays if n > pays[0]]
            example = later[0] if later else not_pays[0]
            text = (f"on {net} at {spans(pays, grid_nodes)} nodes (not at {spans(not_pays, grid_nodes)}: "
                    f"{why_not(g, net, example).split(':')[0]}")
        tied = tied_counts(g, net)
        words.append(text + (f"; within the uncertainty at {spans(tied, grid_nodes)}" if tied else "") + ")")
    return ("1-bit pays: Birder beats the best uncompressed optimizer (by the prediction; where the speed-up's "
            "interval contains 1 it is within the uncertainty) " + "; ".join(words) + ".")


def stops_paying_details(g: ModelGrid) -> list[str]:
    """The reason at the first node count where Birder stops beating the best baseline, per network."""
    grid_nodes = [n for n in g.nodes if n >= 2]
    lines = []
    for net in g.networks:
        pays, not_pays = pays_runs(g, net)
        later = [n for n in not_pays if pays and n > pays[0]] or not_pays
        if later:
            lines.append(f"- {net}, {later[0] if pays else grid_nodes[-1]} nodes: "
                         f"{why_not(g, net, later[0] if pays else grid_nodes[-1])}.")
    return lines


def summary_rows(g: ModelGrid) -> list[str]:
    """Markdown rows: the best optimizer per network and node count, with Birder's speed-up."""
    head = "| network | " + " | ".join(str(n) for n in g.nodes if n >= 2) + " |"
    lines = [head, "|---|" + "---|" * len([n for n in g.nodes if n >= 2])]
    for net in g.networks:
        cells = []
        for n in g.nodes:
            if n < 2:
                continue
            top = best(g, net, n, g.optimizers)
            b, base = g.get(net, "birder", n), best(g, net, n, g.baselines)
            r = speedup(b, base) if b and base else None
            tied = r is not None and r["verdict"] == "within the uncertainty"
            ratio_text = "" if r is None else f" ({r['ratio']:.2f}x{', tied' if tied else ''})"
            cells.append(f"{top['optimizer']}{ratio_text}" if top else "")
        lines.append(f"| {net} | " + " | ".join(cells) + " |")
    return lines


# ------------------------------------------------------------------------------------------ accuracy
def interval_words(g: Grid) -> str:
    """How the ranges are made and how wide they are on this grid."""
    corpus = (g.summary.get("corpus_validation") or {}).get("summary") or {}
    widths = sorted((p["throughput_high"] - p["throughput_low"]) / 2 / p["throughput"]
                    for m in g.models for p in m.predictions if p["nodes"] >= 2)
    coverage = corpus.get("coverage")
    return (f"A range is an {100 * corpus.get('interval_level', 0.8):.0f}% interval from the errors of rows left out "
            f"of every fit (the validation corpus, {corpus.get('rows', 0)} published rows, each source left out in "
            "turn; the Birder paper's testbeds: their group cross-validation), asymmetric where the errors are and "
            "wider where an alpha-beta ring predicts communication-bound"
            + (f"; it covered {100 * coverage:.1f}% of the left-out rows" if coverage is not None else "")
            + (f"; median half-width {100 * widths[len(widths) // 2]:.0f}% here." if widths else "."))


def speedup_words(g: Grid) -> str:
    """How a speed-up's range is made, with the corpus's check of it."""
    from sim.validation.figures import percent

    corpus = (g.summary.get("corpus_validation") or {}).get("summary") or {}
    f, level = corpus.get("speedup") or {}, corpus.get("interval_level", 0.8)
    checked = "" if not f.get("pairs") else (
        f" ({f['pairs']} pairs: they covered {100 * f['coverage']:.1f}% of the pairs left out with a median "
        f"half-width of {100 * f['median_half_width']:.0f}%, against {100 * f['naive_coverage']:.1f}% and "
        f"{100 * f['naive_median_half_width']:.0f}% for the two intervals divided end by end; the "
        f"{100 * f['decided']:.0f}% that excluded 1 named the faster as measured in "
        f"{percent(f['decided_right'], 0)} of cases)")
    return ("A speed-up's range comes from the errors of predicted ratios on pairs of rows of one published table "
            f"(same set-up and node count), each source left out{checked}, where the left-out pairs of its "
            "kind (measured node or not, regime) support it; else the two ranges divided end by end."
            + (" The pairs' own covered fewer left-out pairs than their nominal level: read a named faster one as "
               "likely, not certain." if f.get("coverage") is not None and f['coverage'] < level else "")
            + " Where a speed-up's range excludes 1 the faster is named; where it contains 1 the two are within the "
              "uncertainty.")


def accuracy_words(summary: dict) -> tuple[str, str]:
    """(fit sentence, cross-validation sentence) from ``validation_summary``."""
    rows = summary["rows"]
    multi = [r for r in rows if r["gpus"] > GPUS_PER_NODE]
    fit = (f"fit (in-sample) {100 * summary['fit_mape']:.1f}% mean absolute error over {len(rows)} published rows "
           f"({len(multi)} multi-node; the site profiles' constants were fitted on these same rows)")
    cross = summary.get("cross_validation")
    if summary.get("cross_validated_mape") is None or not cross:
        return fit, "prediction (cross-validated): not available (too few published rows to hold some out)"
    by_column = cross.get("by_column") or {}
    words = {"gpus": "GPU count", "batch_per_gpu": "batch size"}
    parts = [f"each {words.get(column, column)} left out in turn: {100 * value:.1f}%"
             for column, value in by_column.items()]
    untestable = [words.get(column, column) for column in cross.get("untestable_columns") or []]
    detail = "; ".join(parts) + (f"; {', '.join(untestable)}: one value in the rows, so not testable"
                                 if untestable else "")
    site, generic = summary.get("cross_validated_mape_site"), summary.get("cross_validated_mape_generic")
    split = (f" A site profile's range is {100 * site:.0f}% (groups its fit did not see); a generic preset's is "
             f"{100 * generic:.0f}% (a network left out, predicted by its unfitted generic preset: a cluster "
             "nobody fitted)." if site is not None and generic is not None else "")
    return fit, (f"prediction (cross-validated) {100 * summary['cross_validated_mape']:.1f}% on whole groups of "
                 f"rows left out of the fit ({detail}).{split}")


def corpus_lines(summary: dict) -> list[str]:
    """The validation corpus with each source left out (``birder validate``), as the READMEs quote it, and its
    per-source table."""
    from sim.validation.figures import corpus_figures_markdown
    from sim.validation.figures import percent as pct
    from sim.validation.leave_one_source_out import EQUAL_BY_CONSTRUCTION

    corpus = summary.get("corpus_validation")
    if not corpus:
        return []
    lines = [f"- On the validation corpus (`sim/validation/`, published rows of other sources' clusters): "
             f"{corpus_figures_markdown(corpus['summary'])}", "", f"Per source ({EQUAL_BY_CONSTRUCTION}):", "",
             "| group | rows | in-sample | source left out | linear scaling | alpha-beta ring |",
             "|---|---:|---:|---:|---:|---:|"]

    lines += [f"| {t['name']} | {t['rows']} | {pct(t['mape_in_sample'])} | {pct(t['mape_left_out'])} | "
              f"{pct(t['mape_linear'])} | {pct(t['mape_alpha_beta'])} |" for t in corpus["table"]]
    return lines


def fitted_constants_lines(summary: dict) -> list[str]:
    """Which constants are fitted, where they live, and on which rows: the site profiles (sim/presets/sites.toml)."""
    from sim.hardware import SITE_ONLY_KEYS, SITES

    lines = []
    for name, spec in SITES.items():
        if not spec.get("fitted"):
            continue
        keys = [k for k in (*SITE_ONLY_KEYS, "efficiency") if k in spec and math.isfinite(float(spec[k]))]
        on = spec.get("fitted_on", {})
        rows = [r for r in summary["rows"] if r["gpus"] > GPUS_PER_NODE and r.get("network") in (name, spec["base"])]
        lines.append(f"- `{name}` ({spec.get('description', 'a site profile')}), in `sim/presets/sites.toml`: "
                     + ", ".join(f"`{k}` = {spec[k]:g}" for k in keys)
                     + f"; fitted on {len(rows)} published rows of {', '.join(on.get('models', []))} at "
                     f"{', '.join(map(str, on.get('batch_per_gpu', [])))}/GPU and "
                     f"{', '.join(map(str, on.get('gpus', [])))} GPUs. No generic preset uses them.")
    return lines
