"""The first section of `birder report`: the answer (which network, does Birder help), generated from the same
predictions the tables and plots show."""

from __future__ import annotations

from pathlib import Path

from birder import report_prices
from birder.report_core import Section, interval, show_progress
from birder.report_grid import HEADLINE_NODES, MATCH_SHARE, best, decide, extrapolated, grid
from birder.report_prices import cost_ranking
from birder.report_words import (
    accuracy_words,
    decision_sentence,
    headline_table,
    interval_words,
    speedup_words,
    stops_paying_sentence,
    summary_rows,
)


def decision_section(outdir: Path, quick: bool) -> Section:
    from sim import plots

    g = grid(quick, progress=show_progress())
    prices = report_prices.current_prices()
    fit, cross = accuracy_words(g.summary)
    leaning = sorted({p["network"] for m in g.models for p in m.predictions if extrapolated(p)},
                     key=g.networks.index)
    lines = [
        "## The answer first: which network, and does Birder help?",
        "",
        "Generated from the simulator's predictions (8 A100 GPUs per node; sections below show how). "
        f"{interval_words(g)} {speedup_words(g)} "
        + (f"Networks from the slowest (taken as the cheapest) to the fastest: {', '.join(g.networks)}. \"Enough\" "
           f"means at least {100 * MATCH_SHARE:.0f}% of the fastest uncompressed set-up." if not prices else
           f"Networks ranked by samples/s per 1,000 {prices.currency} of cluster with the prices of {prices.path} "
           f"(networks from the slowest to the fastest: {', '.join(g.networks)})."),
        "",
    ]
    if leaning:
        reasons = sorted({r for m in g.models for p in m.predictions for r in p.get("extrapolation_reasons", [])})
        lines += [f"Caution: on {', '.join(leaning)} the predictions lean on fitted constants outside the range they "
                  f"were fitted on ({'; '.join(reasons)}); read them as estimates of the trend.", ""]
    headline = ""
    for m in g.models:
        lines += [f"**{m.title}**", ""]
        for n in HEADLINE_NODES:
            d = decide(m, n)
            if d is not None:
                lines.append(f"- {decision_sentence(m, d, prices)}")
                if not headline:
                    headline = (f"{m.setting.label}, "
                                + decision_sentence(m, d, prices).replace("**", "").split(". ")[0] + ".")
        lines += [f"- {stops_paying_sentence(m)}", "", *headline_table(m), ""]
        choice = plots.network_choice(
            [{"nodes": n, "network": net, "label": label, "throughput": p["throughput"], "low": interval(p)[0],
              "high": interval(p)[1]}
             for n in HEADLINE_NODES if n in m.nodes for net in m.networks
             for label, p in ((f"best of {'/'.join(m.baselines)}", best(m, net, n, m.baselines)),
                              ("birder", m.get(net, "birder", n))) if p is not None],
            outdir / f"sim_{m.setting.model}_network_choice.png",
            f"{m.setting.label}, {m.setting.batch_per_gpu}/GPU: throughput per network, linear from 0 "
            "(error bars: 80% interval)")
        lines += [f"![throughput per network, linear axis]({choice.name})", ""]
        for n in HEADLINE_NODES:
            if prices and n in m.nodes:
                lines += [*cost_ranking(m, n, prices), ""]
    lines += [f"Accuracy: {fit}; {cross.rstrip('.')}.", ""]
    for m in g.models:
        lines += [f"Best optimizer per network and node count, {m.title} (Birder / best of "
                  f"{'/'.join(m.baselines)} in brackets; tied: its interval contains 1, within the uncertainty):", "",
                  *summary_rows(m), ""]
    error = (f"fit {100 * g.summary['fit_mape']:.1f}% (in-sample), cross-validated "
             + (f"{100 * g.summary['cross_validated_mape']:.1f}%" if g.summary.get("cross_validated_mape") is not None
                else "n/a") + " (rows left out of the fit)")
    corpus = (g.summary.get("corpus_validation") or {}).get("summary")
    if corpus:
        error += (f"; corpus, each source left out: {100 * corpus['mape_left_out']:.1f}% (linear scaling "
                  f"{100 * corpus['mape_linear']:.1f}%), 80% intervals cover {100 * corpus['coverage']:.1f}%")
    return Section("\n".join(lines), {"prediction error": error, "headline": headline})
