"""The first section of `birder report`: the answer to the user's question (or the overview's), on the first
screen: a small table per question, one verdict sentence that the table supports, and what would narrow a range
too wide to decide. Every verdict is computed once (``report_verdict.verdict``); the table, the sentence, the
figure, the terminal and the headline all read it.
"""

from __future__ import annotations

from pathlib import Path

from birder import report_prices
from birder.report_core import Section, interval, num, show_progress
from birder.report_grid import MATCH_SHARE, Grid, Question, current_question, extrapolated, grid
from birder.report_plots import verdict_figure
from birder.report_verdict import Row, Verdict, cell, narrowing, sentence, shown_rows, verdicts
from birder.report_words import (
    accuracy_words,
    interval_words,
    speedup_words,
    stops_paying_sentence,
    summary_rows,
)

SCREEN_LINES = 30  # the first screen: report.md's first lines, and the terminal's
PAYS = {"yes": "pays", "no": "does not pay", "cannot tell": "cannot tell", "not simulated": "not simulated"}


def table(v: Verdict, rows: tuple[Row, ...], prices) -> list[str]:
    """Network x optimizer: samples/s (80% interval) of each kind's best, and with prices the cluster's cost and
    its value (or cost per million samples with ``years``)."""
    head = "| network | best of SGDM/Adam | Birder | best other 1-bit |"
    rule = "|---|---:|---:|---:|"
    if prices is not None:
        per = (f"{prices.currency} per 1M samples" if prices.years else f"samples/s per 1,000 {prices.currency}")
        head += f" cluster ({prices.currency}) | {per} (best) |"
        rule += "---:|---:|"
    lines = [head, rule]
    for r in rows:
        name = f"**{r.network}** (buy)" if r is v.buy else r.network
        line = f"| {name} | {cell(r.baseline, True)} | {cell(r.birder)} | {cell(r.other, True)} |"
        if prices is not None:
            if r.cost is None:
                line += " not priced | |"
            else:
                top = r.top
                worth = (v.cost_per_million(top) if prices.years else top["throughput"] / r.cost * 1e3)
                line += f" {num(r.cost)} | {num(worth)} ({top['optimizer']}) |"
        lines.append(line)
    return lines


def context_line(g: Grid, question: Question, prices, gpu: str) -> str:
    m = g.models[0]
    nics = sorted({int(p.get("nics_per_node", 1)) for mg in g.models for p in mg.predictions})
    nic_words = (f"{nics[0]} NIC per node on every network" if nics == [1] else
                 f"{'/'.join(map(str, nics))} NICs per node") + (
        " (as simulated: the presets' count; a `--cluster` file sets its own `[network] count`)")
    where = (f"your cluster `{question.cluster}`" if question.cluster else
             "networks from the cheapest (slowest line rate) to the fastest")
    text = (f"{m.gpus_per_node} {gpu.upper()} per node; cells: samples/s (80% interval); {where}; ")
    if prices is None:
        text += (f"buy: the cheapest network whose best set-up reaches {100 * MATCH_SHARE:.0f}% of the fastest. "
                 f"{nic_words}. No prices given: `--prices FILE.toml` ranks by cost.")
    else:
        text += (f"buy: the most samples/s per unit of cost; cost = nodes x (node + NICs per node x (NIC + switch "
                 f"port)) from `{prices.path}`, {nic_words}"
                 + (f", paid off over {prices.years:g} years." if prices.years else
                    " (add `years = N` to the price file for a cost per sample)."))
    return text


def first_screen(g: Grid, verdicts: list[tuple], question: Question, prices, gpu: str) -> list[str]:
    """The decision, in at most ``SCREEN_LINES`` - 2 lines (the report's title takes two)."""
    one = len(verdicts) == 1
    if one:
        m, v = verdicts[0]
        heading = (f"## The answer: {v.label} on {v.nodes} nodes ({v.gpus} GPUs), {m.setting.batch_per_gpu} "
                   "samples per GPU: which network, and does Birder pay?")
    else:
        heading = "## The answer first: which network, and does Birder pay?"
    lines = [heading, "", context_line(g, question, prices, gpu), ""]
    too_wide = any(v.too_wide for _, v in verdicts)
    if len(verdicts) <= 2:
        limit = 11 if one else 5
        for _, v in verdicts:
            lines += [*table(v, shown_rows(v, limit), prices), "",
                      (f"**{v.label}, {v.nodes} nodes:** " if not one else "**Verdict:** ") + sentence(v), ""]
    else:
        lines += ["| model | nodes | buy | run | samples/s (80% interval) | Birder | not ruled out |",
                  "|---|---:|---|---|---:|---|---|"]
        for _, v in verdicts:
            lo, hi = interval(v.setup)
            r = v.birder_gain
            gain = "" if r is None else f" {r['ratio']:.2f}x ({r['low']:.2f}-{r['high']:.2f})"
            lines.append(f"| {v.label} | {v.nodes} | **{v.buy.network}** | {v.setup['optimizer']} | "
                         f"{num(v.setup['throughput'])} ({num(lo)}-{num(hi)}) | {PAYS[v.birder_pays]}{gain} | "
                         + (", ".join(r.network for r, _ in v.rivals) or "none") + " |")
        lines += ["", "Birder: its throughput over the best of SGDM/Adam"
                  + (" on the network to buy" if prices is None else " by value") + " with its 80% interval; "
                  "\"pays\" where the interval is above 1. Each question's table and figure follow. Your own "
                  "question: `birder report --model bert-large --nodes 64 --prices prices.toml`.", ""]
    if too_wide:
        lines += [narrowing(g.summary, question.cluster is not None), ""]
    return lines


def decision_section(outdir: Path, quick: bool) -> Section:
    question = current_question()
    g = grid(quick, progress=show_progress())
    prices = report_prices.current_prices()
    gpu = question.gpu or ("a100" if question.cluster is None else _cluster_gpu(question.cluster))
    answers = verdicts(g, question, prices)
    screen = first_screen(g, answers, question, prices, gpu)
    if len(screen) > SCREEN_LINES - 2:
        raise RuntimeError(f"the decision takes {len(screen)} lines, more than the first screen's")  # a bug
    lines = list(screen)
    fit, cross = accuracy_words(g.summary)
    for m, v in answers:
        figure = verdict_figure(v, shown_rows(v, 6), outdir / f"decision_{m.setting.model}_{v.nodes}_nodes.png")
        lines += [f"### {v.label}, {v.nodes} nodes ({v.gpus} GPUs): {m.title}", "",
                  f"**Verdict:** {sentence(v)}", "", f"![the verdict's networks]({figure.name})", ""]
        if len(answers) > 2 or len(shown_rows(v, 11 if len(answers) == 1 else 5)) < len(v.rows):
            lines += ["Every network:", "", *table(v, v.rows, prices), ""]
    leaning = sorted({p["network"] for m in g.models for p in m.predictions if extrapolated(p)},
                     key=g.networks.index)
    lines += ["### How to read the ranges", "", f"{interval_words(g)} {speedup_words(g)}", "",
              f"Accuracy: {fit}; {cross.rstrip('.')}.", ""]
    if leaning:
        reasons = sorted({r for m in g.models for p in m.predictions for r in p.get("extrapolation_reasons", [])})
        lines += [f"Caution: on {', '.join(leaning)} the predictions lean on fitted constants outside the range they "
                  f"were fitted on ({'; '.join(reasons)}); read them as estimates of the trend.", ""]
    for m in g.models:
        lines += [f"**{m.title}.** {stops_paying_sentence(m)}", "",
                  f"Best optimizer per network and node count (Birder / best of {'/'.join(m.baselines)} in "
                  "brackets; tied: its interval contains 1, within the uncertainty):", "", *summary_rows(m), ""]
    error = (f"fit {100 * g.summary['fit_mape']:.1f}% (in-sample), cross-validated "
             + (f"{100 * g.summary['cross_validated_mape']:.1f}%" if g.summary.get("cross_validated_mape") is not None
                else "n/a") + " (rows left out of the fit)")
    corpus = (g.summary.get("corpus_validation") or {}).get("summary")
    if corpus:
        error += (f"; corpus, each source left out: {100 * corpus['mape_left_out']:.1f}% (linear scaling "
                  f"{100 * corpus['mape_linear']:.1f}%), 80% intervals cover {100 * corpus['coverage']:.1f}%")
    headline = "" if not answers else f"{answers[0][1].label}, {answers[0][1].nodes} nodes: " + sentence(
        answers[0][1]).replace("**", "")
    return Section("\n".join(lines), {"prediction error": error, "headline": headline,
                                       "decision": "\n".join(screen)})


def _cluster_gpu(path: str) -> str:
    from sim.hardware import load_cluster

    return str(load_cluster(path).gpu)
