"""The scaling section of `birder report`: how the predictions were made and how accurate they are, then per
model its throughput against GPUs, the share of each iteration, and Birder's speed-up against nodes."""

from __future__ import annotations

from pathlib import Path

from birder.report_core import num, show_progress
from birder.report_grid import (
    GPUS_PER_NODE,
    ModelGrid,
    best,
    current_question,
    extrapolated,
    grid,
    is_uncompressed,
    speedup,
)
from birder.report_prices import current_prices
from birder.report_verdict import shown_rows, verdicts
from birder.report_words import accuracy_words, corpus_lines, fitted_constants_lines, stops_paying_details
from birder_ref.schedules import Layout

BREAKDOWN_NETWORKS = 4  # networks of a verdict the time breakdown shows


def scaling_section(outdir: Path, quick: bool) -> str:
    from sim import plots

    g = grid(quick, progress=show_progress())
    summary = g.summary
    fit, cross = accuracy_words(summary)
    cv = summary.get("cross_validation") or {}
    validation_png = plots.validation(summary["rows"], outdir, prefix="sim_", cross_validated=cv.get("rows"),
                                      title=f"Against the Birder paper: fit {100 * summary['fit_mape']:.1f}% "
                                            "in-sample" + (f", cross-validated {100 * cv['mape']:.1f}%"
                                                           if cv.get("mape") is not None else ""))
    lines = [
        "## Scaling predictions: how they are made and how accurate they are",
        "",
        "A discrete-event model (simpy) of nodes of 8 GPUs on Ethernet or InfiniBand (`sim/README.md`). Each "
        "section below says where its single-node compute comes from: a published single-node throughput where "
        "one exists, else the built-in A100 profile (FLOP rates, `sim/presets/gpus.toml`).",
        "",
        "### How accurate",
        "",
        f"- {fit}.",
        f"- {cross}.",
        *corpus_lines(summary),
        "",
        "The fit error says how well the constants reproduce the rows they were chosen on; the errors of rows left "
        "out of the fit are the ones to expect of a prediction, and the ranges in this report come from them (the "
        "corpus's for generic presets, the group cross-validation's for the Birder paper's site profiles).",
        "",
        "| network | GPUs | optimizer | published | predicted (fit) | error |",
        "|---|---:|---|---:|---:|---:|",
    ]
    lines += [f"| {r['network']} | {r['gpus']} | {r['optimizer']} | {r['published']:,.0f} | {r['predicted']:,.0f} | "
              + ("calibration |" if r["gpus"] == GPUS_PER_NODE else f"{100 * r['error']:+.1f}% |")
              for r in summary["rows"]]
    if cv.get("rows"):
        lines += ["", "Cross-validated (constants refitted without these rows):", "",
                  "| network | GPUs | optimizer | published | predicted (cross-validated) | error |",
                  "|---|---:|---|---:|---:|---:|"]
        lines += [f"| {r['network']} | {r['gpus']} | {r['optimizer']} | {r['published']:,.0f} | "
                  f"{r['predicted']:,.0f} | {100 * r['error']:+.1f}% |" for r in cv["rows"]]
    lines += ["", f"![predicted vs published: fit and cross-validated]({validation_png.name})", "",
              "### Which constants are fitted", ""]
    lines += fitted_constants_lines(summary) or ["- none: every constant is a hardware figure with its source."]
    for m in g.models:
        flagged = [p for p in m.predictions if extrapolated(p)]
        if flagged:
            nets = sorted({p["network"] for p in flagged}, key=m.networks.index)
            lines.append(f"- {m.title}: {len(flagged)} of {len(m.predictions)} predictions (on {', '.join(nets)}) "
                         "use a site's fitted constants outside the models, batch sizes or GPU counts they were "
                         "fitted on.")
    lines.append("")

    curves = {}
    answers = verdicts(g, current_question(), current_prices())
    for m in g.models:
        lines += _model_section(m, outdir, plots, answers)
        curves[f"{m.setting.label}, {m.setting.batch_per_gpu}/GPU"] = [
            {"network": n, "nodes": k, "ratio": r["ratio"], "low": r["low"], "high": r["high"]}
            for k in m.nodes if k >= 2 for n in m.networks
            if (b := m.get(n, "birder", k)) and (base := best(m, n, k, m.baselines)) and (r := speedup(b, base))]
    speed_png = plots.speedup_vs_nodes(curves, outdir / "sim_birder_speedup.png",
                                       "Birder's throughput over the best uncompressed optimizer (SGDM/Adam); "
                                       "bands: paired 80% interval", "best of SGDM/Adam")
    lines += ["### Birder's speed-up against nodes, every network", "",
              "Above the black line Birder is faster than the best uncompressed optimizer on the same network.", "",
              f"![Birder speed-up over the best baseline]({speed_png.name})", ""]
    return "\n".join(lines)


def _model_section(m: ModelGrid, outdir: Path, plots, answers: list | None = None) -> list[str]:
    """One model's predictions; the time breakdown shows the networks and node counts of its verdicts
    (``answers``: the decision's ``(ModelGrid, Verdict)`` pairs), for SGDM/Adam and Birder: a few bars."""
    prefix = f"sim_{m.setting.model}_"
    title = f"{m.title}: predicted throughput (bands: prediction interval)"
    curve = plots.throughput_vs_gpus(list(m.predictions), outdir, prefix=prefix, title=title)[0]
    mine = [v for g, v in answers or [] if g is m]
    networks = {r.network for v in mine for r in shown_rows(v, BREAKDOWN_NETWORKS)} or {m.networks[0], m.networks[-1]}
    counts = {v.nodes for v in mine} or {n for n in m.nodes if n >= 2}
    shown = [o for o in m.optimizers if is_uncompressed(o) or o == "birder"]
    focus = [p for p in m.predictions if p["nodes"] in counts and p["network"] in networks and p["optimizer"] in shown]
    bars = plots.time_breakdown(focus, outdir, prefix=prefix, optimizers=shown,
                                title=f"{m.setting.label}: share of each iteration at "
                                      f"{', '.join(map(str, sorted(counts)))} nodes")[0]
    gpus = [Layout(n, m.gpus_per_node).n_ranks for n in m.nodes]
    lines = [f"### {m.title}", "", f"Compute: {m.calibration}.", "",
             "Where Birder stops beating the best uncompressed optimizer, and why:", "", *stops_paying_details(m), "",
             f"![throughput vs GPUs]({curve.name})", "", f"![share of each iteration]({bars.name})", "",
             "Throughput (samples/s) by GPU count:", "",
             "| network | optimizer | " + " | ".join(str(k) for k in gpus) + " |", "|---|---|" + "---:|" * len(gpus)]
    for net in m.networks:
        for opt in m.optimizers:
            row = [m.get(net, opt, n) for n in m.nodes]
            lines.append(f"| {net} | {opt} | " + " | ".join(num(p["throughput"]) if p else "" for p in row) + " |")
    lines.append("")
    return lines
