"""The report's figure of one verdict: the networks of its table, per network a bar for the best of SGDM/Adam, for
Birder and for the best other 1-bit optimizer, on a linear axis from zero with their 80% intervals, the network
to buy marked. Drawn from the ``Verdict`` alone, so the figure cannot disagree with the sentence beside it."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from birder.report_core import interval, num  # noqa: E402
from birder.report_verdict import Row, Verdict  # noqa: E402

SERIES = (("best of SGDM/Adam", "baseline", "#4c72b0"), ("Birder", "birder", "#dd8452"),
          ("best other 1-bit", "other", "#8c8c8c"))
VERDICT_WORDS = {"yes": "Birder pays", "no": "Birder does not pay", "cannot tell": "Birder: cannot tell",
                 "not simulated": "Birder not simulated"}


def draw_verdict(v: Verdict, rows: tuple[Row, ...]):
    """The figure (not saved): horizontal bars, the cheapest network at the top, the network to buy in bold."""
    fig, ax = plt.subplots(figsize=(7.5, 1.5 + 0.62 * len(rows)))
    height = 0.26
    for j, (label, field, colour) in enumerate(SERIES):
        drawn = False
        for i, row in enumerate(rows):
            p = getattr(row, field)
            if p is None:
                continue
            y = i + (j - 1) * height
            lo, hi = interval(p)
            ax.barh(y, p["throughput"], height * 0.9, color=colour, label=None if drawn else label)
            ax.errorbar(p["throughput"], y, xerr=[[p["throughput"] - lo], [hi - p["throughput"]]], color="black",
                        capsize=2, lw=0.8)
            drawn = True
    ax.set_yticks(range(len(rows)), [f"buy: {r.network}" if r is v.buy else r.network for r in rows], fontsize=9)
    for tick, row in zip(ax.get_yticklabels(), rows, strict=True):
        if row is v.buy:
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: num(x) if x else "0"))
    ax.set_xlabel("samples/s (linear from 0; error bars: 80% interval)", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{v.label}, {v.nodes} nodes ({v.gpus} GPUs): buy {v.buy.network}, run {v.setup['optimizer']}\n"
                 f"{VERDICT_WORDS[v.birder_pays]}" + (f"; not ruled out: {', '.join(r.network for r, _ in v.rivals)}"
                                                      if v.rivals else ""), fontsize=9.5)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.32 / fig.get_figheight(), 1, 1))
    return fig


def verdict_figure(v: Verdict, rows: tuple[Row, ...], path: Path) -> Path:
    fig = draw_verdict(v, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
