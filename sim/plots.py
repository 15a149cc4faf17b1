"""Matplotlib figures of the simulator (Agg backend): throughput against GPUs (the Birder paper's Figure 3), the
share of each iteration spent computing, compressing and communicating (its Figure 4), a speed-up against nodes,
and predicted against published throughput.

Figures a reader compares side by side share their axes: networks are panels in order of line rate (slowest
first), panels share the y axis, every optimizer has its own marker and line style (so identical series stay
visible), GPU and node counts are plain numbers, and a prediction's interval (``throughput_low``/``_high``) is a
band when the results carry one.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")
HATCHES = ("", "//", "..", "xx", "\\\\", "oo")
# the parts an iteration's time is made of (they sum to ``iteration_s``, ``sim.workload``)
COMPONENTS = (("compute_s", "compute", "#4c72b0"), ("compression_s", "compression/decompression", "#dd8452"),
              ("contention_s", "GPU work slowed beside collectives", "#8172b3"),
              ("exposed_communication_s", "exposed communication", "#c44e52"))


def line_rate_gbps(network: str) -> float | None:
    """A preset's line rate per node (Gb/s x NICs), or None for a name that is not a preset (a cluster file)."""
    from sim.network import NETWORKS

    spec = NETWORKS.get(network)
    if spec is None or "line_rate_gbps" not in spec:
        return None
    return float(spec["line_rate_gbps"]) * float(spec.get("count", 1))


def speed_order(networks) -> list[str]:
    """Networks from the slowest line rate to the fastest (a number from the preset, never the name's spelling);
    names that are not presets keep their order, after the presets."""
    names = list(dict.fromkeys(networks))
    known = sorted((n for n in names if line_rate_gbps(n) is not None), key=lambda n: (line_rate_gbps(n), n))
    return known + [n for n in names if line_rate_gbps(n) is None]


def network_label(network: str) -> str:
    rate = line_rate_gbps(network)
    return network if rate is None else f"{network} ({rate:g} Gb/s)"


def styles(names) -> dict[str, dict]:
    """A distinct colour, marker and line style for each name, in order; earlier names get larger markers, so a
    series drawn exactly on top of an earlier one leaves the earlier one's marker visible around it."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {n: {"color": colours[i % len(colours)], "marker": MARKERS[i % len(MARKERS)],
                "linestyle": LINESTYLES[i % len(LINESTYLES)], "markersize": max(3.5, 8.0 - 0.9 * i)}
            for i, n in enumerate(dict.fromkeys(names))}


def counts_axis(ax, values, log: bool = True) -> None:
    """An x axis of GPU or node counts labelled as plain numbers (8, 16, ... not 2^3)."""
    values = sorted(set(values))
    if log:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(values))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{v:g}" for v in values], rotation=45 if len(values) > 6 else 0, fontsize=8)


PLAIN = FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}")
# minor ticks of a log axis: label only 2x and 5x a power of ten, so that the labels never collide
PLAIN_MINOR = FuncFormatter(lambda value, _: PLAIN(value) if f"{value:.0e}"[0] in "25" else "")


def default_title(results: list[dict], what: str) -> str:
    """'MODEL, B samples per GPU: WHAT' from the results' configuration, when they carry one."""
    models = {r.get("model") for r in results} - {None}
    batches = {r.get("batch_per_gpu") for r in results} - {None}
    if len(models) == 1 and len(batches) == 1:
        return f"{models.pop()}, {batches.pop()} samples per GPU: {what}"
    return what[0].upper() + what[1:]


def texts_outside(fig) -> list[str]:
    """The visible texts of ``fig`` (titles, labels, ticks, legend entries) that reach outside the figure as drawn
    (matplotlib's renderer: ``get_window_extent`` against the figure's box, half a pixel of slack): empty when every
    label fits."""
    import matplotlib.text
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # a saved and closed figure keeps no canvas of its own
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    undrawn = set()  # tick labels of ticks beyond the axis' view, which matplotlib keeps but does not draw
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            slack = 1e-9 * (high - low)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low - slack <= tick.get_loc() <= high + slack:
                    undrawn |= {id(tick.label1), id(tick.label2)}
    outside = []
    for text in fig.findobj(matplotlib.text.Text):
        if (not text.get_visible() or not text.get_text().strip() or id(text) in undrawn
                or (text.axes is not None and not text.axes.get_visible())):
            continue
        e = text.get_window_extent(renderer)
        if e.x0 < box.x0 - 0.5 or e.y0 < box.y0 - 0.5 or e.x1 > box.x1 + 0.5 or e.y1 > box.y1 + 0.5:
            outside.append(text.get_text())
    return outside


def wrapped_title(title: str, width_in: float, fontsize: float = 12) -> str:
    """``title`` broken into lines that fit ``width_in`` inches (a character is about 0.55 of the font size)."""
    import textwrap

    return "\n".join(textwrap.wrap(title, max(20, int(0.95 * width_in * 72 / (0.55 * fontsize)))))


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panels(n: int, width: float = 4.2, height: float = 3.8, sharey: bool = True, cols: int = 4):
    cols = min(n, cols)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows + 0.8), squeeze=False, sharey=sharey)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def throughput_vs_gpus(results: list[dict], out: Path, prefix: str = "", title: str | None = None) -> list[Path]:
    """One panel per network (slowest first, shared log y axis): samples/s against GPUs, one line per optimizer,
    its interval as a band when the results carry ``throughput_low``/``throughput_high``."""
    networks = speed_order(r["network"] for r in results)
    optimizers = list(dict.fromkeys(r["optimizer"] for r in results))
    style = styles(optimizers)
    fig, axes = _panels(len(networks), width=max(4.2, 7.5 / min(len(networks), 4)))  # one network: 7.5 in wide
    for ax, net in zip(axes, networks, strict=True):
        for opt in optimizers:
            rs = sorted((r for r in results if r["network"] == net and r["optimizer"] == opt), key=lambda r: r["gpus"])
            if not rs:
                continue
            gpus = [r["gpus"] for r in rs]
            ax.plot(gpus, [r["throughput"] for r in rs], label=opt, markerfacecolor="none", **style[opt])
            if all("throughput_low" in r and "throughput_high" in r for r in rs):
                ax.fill_between(gpus, [r["throughput_low"] for r in rs], [r["throughput_high"] for r in rs],
                                color=style[opt]["color"], alpha=0.10, lw=0)
        linear = linear_scaling(r for r in results if r["network"] == net)
        if linear:
            ax.plot(*zip(*linear, strict=True), color="black", lw=1, ls=(0, (1, 2)), zorder=1,
                    label="linear scaling of one node")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(PLAIN)
        ax.yaxis.set_minor_formatter(PLAIN_MINOR)
        counts_axis(ax, [r["gpus"] for r in results])
        ax.set_xlabel("GPUs")
        ax.set_title(network_label(net), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("throughput (samples/s, log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    columns = legend_columns(labels, fig.get_figwidth())
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=9, frameon=False)
    suptitle = wrapped_title(title or default_title(results, "predicted throughput" + (
        " (bands: prediction interval)" if any("throughput_low" in r for r in results) else "")), fig.get_figwidth())
    fig.suptitle(suptitle)
    legend_rows = math.ceil(len(labels) / columns)
    _make_room(fig, legend_rows, suptitle.count("\n") + 1)
    fig.tight_layout(rect=(0, (0.1 + 0.3 * legend_rows) / fig.get_figheight(), 1,
                           _below_title(fig, suptitle.count("\n") + 1)))
    return [_save(fig, out / f"{prefix}throughput_vs_gpus.png")]


def linear_scaling(results) -> list[tuple[int, float]]:
    """(GPUs, samples/s) of linear scaling, the naive baseline: nodes x the single-node throughput each result
    scaled from (``throughput / scale_efficiency``), the highest over the optimizers; empty without it."""
    best: dict[int, float] = {}
    for r in results:
        if r.get("scale_efficiency", 0) > 0:
            best[r["gpus"]] = max(best.get(r["gpus"], 0.0), r["throughput"] / r["scale_efficiency"])
    return sorted(best.items())


def legend_columns(labels: list[str], width_in: float, fontsize: float = 9) -> int:
    """Legend entries per row so the row fits the figure's width: an entry is its handle (about 0.45 in) and its
    text (about 0.6 of the font size per character), plus the gap between entries."""
    per_entry = [0.45 + 0.6 * fontsize / 72 * len(label) + 0.3 for label in labels]
    for rows in range(1, len(labels)):  # the fewest rows that fit, filled evenly
        # matplotlib fills column by column; a column is as wide as its widest entry
        if sum(max(per_entry[i:i + rows]) for i in range(0, len(labels), rows)) <= 0.95 * width_in:
            return math.ceil(len(labels) / rows)
    return 1


def _make_room(fig, legend_rows: int, title_lines: int) -> None:
    """Grow the figure's height by what a legend of more than one row and a title of more than one line take, so
    the panels keep theirs."""
    fig.set_figheight(fig.get_figheight() + 0.3 * max(0, legend_rows - 1) + 0.25 * max(0, title_lines - 1))


def _below_title(fig, title_lines: int = 1) -> float:
    """The top of the panels' area: half an inch (and a quarter more per further title line) below the figure's
    top, so the suptitle never covers a panel."""
    return 1 - (0.5 + 0.25 * (title_lines - 1)) / fig.get_figheight()


def time_breakdown(results: list[dict], out: Path, prefix: str = "", title: str | None = None,
                   optimizers: list[str] | None = None) -> list[Path]:
    """One panel per network (slowest first): for every node count, one bar per optimizer (told apart by hatch)
    splitting its iteration into compute, compression and exposed communication, as shares of the iteration
    (so that every node count and model reads on one scale)."""
    networks = speed_order(r["network"] for r in results)
    optimizers = optimizers or list(dict.fromkeys(r["optimizer"] for r in results))
    nodes = sorted({r["nodes"] for r in results})
    bars = len(nodes) * len(optimizers)
    cols = 4 if bars <= 12 else 2
    fig, axes = _panels(len(networks), width=max(min(12.0, max(4.2, 0.22 * bars + 1.5)),
                                                 7.5 / min(len(networks), cols)), height=3.4, cols=cols)
    width = 0.8 / len(optimizers)
    for ax, net in zip(axes, networks, strict=True):
        for j, opt in enumerate(optimizers):
            for i, n in enumerate(nodes):
                rs = [r for r in results if r["network"] == net and r["optimizer"] == opt and r["nodes"] == n]
                if not rs:
                    continue
                r, bottom = rs[0], 0.0
                total = max(r["iteration_s"], sum(r[key] for key, _, _ in COMPONENTS))
                for key, _, colour in COMPONENTS:
                    share = r[key] / total
                    ax.bar(i + (j - (len(optimizers) - 1) / 2) * width, share, width * 0.95, bottom=bottom,
                           color=colour, hatch=HATCHES[j % len(HATCHES)], edgecolor="white", lw=0.3)
                    bottom += share
        ax.set_xticks(range(len(nodes)), [str(n) for n in nodes], fontsize=8)
        ax.set_xlabel("nodes")
        ax.set_ylim(0, 1)
        ax.set_title(network_label(net), fontsize=10)
    axes[0].set_ylabel("share of the iteration time")
    handles = [Patch(color=c, label=label) for _, label, c in COMPONENTS]
    handles += [Patch(facecolor="lightgrey", hatch=HATCHES[j % len(HATCHES)], edgecolor="black", label=opt)
                for j, opt in enumerate(optimizers)]
    columns = legend_columns([h.get_label() for h in handles], fig.get_figwidth())
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=9, frameon=False)
    suptitle = wrapped_title(title or default_title(results, "where each iteration's time goes"), fig.get_figwidth())
    fig.suptitle(suptitle)
    legend_rows = math.ceil(len(handles) / columns)
    _make_room(fig, legend_rows, suptitle.count("\n") + 1)
    fig.tight_layout(rect=(0, (0.1 + 0.3 * legend_rows) / fig.get_figheight(), 1,
                           _below_title(fig, suptitle.count("\n") + 1)))
    return [_save(fig, out / f"{prefix}time_breakdown.png")]


def speedup_vs_nodes(curves: dict[str, list[dict]], path: Path, title: str, baseline_label: str = "best baseline"
                     ) -> Path:
    """One panel per model (shared log y): Birder's throughput over the best uncompressed baseline's against
    nodes, one line per network (slowest first), the interval as a band, 1 (no gain) as a black line.
    ``curves`` maps a panel title to points ``{"network", "nodes", "ratio", "low", "high"}``."""
    fig, axes = _panels(len(curves), width=max(4.6, 7.5 / min(len(curves), 4)))
    networks = speed_order(p["network"] for points in curves.values() for p in points)
    colours = plt.get_cmap("viridis")([i / max(1, len(networks) - 1) * 0.9 for i in range(len(networks))])
    for ax, (panel, points) in zip(axes, curves.items(), strict=True):
        for i, net in enumerate(networks):
            ps = sorted((p for p in points if p["network"] == net), key=lambda p: p["nodes"])
            if not ps:
                continue
            x = [p["nodes"] for p in ps]
            ax.plot(x, [p["ratio"] for p in ps], color=colours[i], marker=MARKERS[i % len(MARKERS)],
                    linestyle=LINESTYLES[i % len(LINESTYLES)], markersize=5, label=network_label(net))
            ax.fill_between(x, [p["low"] for p in ps], [p["high"] for p in ps], color=colours[i], alpha=0.08, lw=0)
        ax.axhline(1.0, color="black", lw=1)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10]))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_yticklabels(["0.1x", "0.2x", "0.5x", "1x", "2x", "5x", "10x"])
        counts_axis(ax, [p["nodes"] for p in points])
        ax.set_xlabel("nodes (8 GPUs each)")
        ax.set_title(panel, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"Birder throughput / {baseline_label}")
    handles, labels = axes[0].get_legend_handles_labels()
    columns = legend_columns(labels, fig.get_figwidth())  # the legend no wider than the figure
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=9, frameon=False)
    suptitle = wrapped_title(title, fig.get_figwidth())
    fig.suptitle(suptitle)
    _make_room(fig, math.ceil(len(labels) / columns), suptitle.count("\n") + 1)
    fig.tight_layout(rect=(0, (0.1 + 0.3 * math.ceil(len(labels) / columns)) / fig.get_figheight(), 1,
                           _below_title(fig, suptitle.count("\n") + 1)))
    return _save(fig, path)


def validation(results: list[dict], out: Path, prefix: str = "", cross_validated: list[dict] | None = None,
               title: str | None = None) -> Path:
    """Predicted against published throughput: filled markers for the fit (constants fitted on these rows),
    open markers for the cross-validated predictions (rows left out of the fit); the diagonal and +-10%."""
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 6))
    everything = results + (cross_validated or [])
    top = max(max(r["published"], r["predicted"]) for r in everything) * 1.1
    ax.plot([0, top], [0, top], color="black", lw=0.8)
    ax.plot([0, top], [0, top * 1.1], color="grey", ls="--", lw=0.6)
    ax.plot([0, top], [0, top * 0.9], color="grey", ls="--", lw=0.6)
    optimizers = list(dict.fromkeys(r["optimizer"] for r in everything))
    networks = speed_order(r["network"] for r in everything)
    colour = styles(optimizers)
    for opt in optimizers:
        for k, net in enumerate(networks):
            rs = [r for r in results if r["optimizer"] == opt and r["network"] == net]
            if rs:
                ax.scatter([r["published"] for r in rs], [r["predicted"] for r in rs], marker=MARKERS[k],
                           color=colour[opt]["color"], s=30, label=f"{opt}, {net}: fit")
            cs = [r for r in (cross_validated or []) if r["optimizer"] == opt and r["network"] == net]
            if cs:
                ax.scatter([r["published"] for r in cs], [r["predicted"] for r in cs], marker=MARKERS[k], s=70,
                           facecolors="none", edgecolors=colour[opt]["color"], lw=1.4,
                           label=f"{opt}, {net}: cross-validated")
    ax.set_xlabel("published throughput (samples/s)")
    ax.set_ylabel("predicted throughput (samples/s)")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(title or "Simulator against published throughput (dashed: +-10%)", fontsize=10)
    fig.tight_layout()
    return _save(fig, out / f"{prefix}validation.png")


def corpus_left_out_figures(predictions: list[dict]) -> tuple[int, float, float, float]:
    """(rows, left-out error, linear scaling's error, share of measurements inside the 80% interval): the
    figures ``corpus_left_out``'s title states, each a mean over the rows drawn."""
    n = len(predictions)
    if not n:
        raise ValueError("no corpus predictions to draw")
    return (n, sum(abs(r["left_out"] / r["measured"] - 1) for r in predictions) / n,
            sum(abs(r["linear"] / r["measured"] - 1) for r in predictions) / n,
            sum(r["low"] <= r["measured"] <= r["high"] for r in predictions) / n)


def corpus_left_out(predictions: list[dict], out: Path, prefix: str = "") -> Path:
    """The validation corpus, each source left out (``CorpusValidation.as_dict()["predictions"]``): prediction /
    measurement against the measured scale efficiency, the simulator's left-out prediction with its 80% interval
    beside linear scaling's on the same rows (communication-bound left of the 85% line)."""
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    efficiency = [100 * r["measured"] / r["linear"] for r in predictions]
    left_out = [r["left_out"] / r["measured"] for r in predictions]
    ax.errorbar(efficiency, left_out, yerr=[[(r["left_out"] - r["low"]) / r["measured"] for r in predictions],
                                            [(r["high"] - r["left_out"]) / r["measured"] for r in predictions]],
                fmt="o", ms=3.5, color="tab:blue", ecolor="tab:blue", elinewidth=0.6, alpha=0.7,
                label="simulator, its source left out (bar: 80% interval)")
    ax.scatter(efficiency, [r["linear"] / r["measured"] for r in predictions], marker="x", s=16, color="grey",
               label="linear scaling (nodes x single node)")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axvline(100 / 1.15, color="grey", ls=":", lw=0.8)
    ax.set_yscale("log")
    drawn = left_out + [r["linear"] / r["measured"] for r in predictions] + [
        r[end] / r["measured"] for r in predictions for end in ("low", "high")]
    ax.set_ylim(min(1 / 3, min(drawn) / 1.1), max(3, max(drawn) * 1.1))  # no row drawn off the axes
    ticks = [1 / 3, 0.5, 2 / 3, 0.8, 1, 1.25, 1.5, 2, 3]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}x"))
    ax.set_xlabel("measured scale efficiency (measured / linear scaling of the same table's node), %")
    ax.set_ylabel("prediction / measurement (log scale)")
    n, mape, linear, covered = corpus_left_out_figures(predictions)
    ax.set_title(f"Validation corpus, each source left out: {n} rows, error {100 * mape:.1f}% "
                 f"(linear scaling {100 * linear:.1f}%),\n80% intervals cover {100 * covered:.1f}%; "
                 "left of the dotted line: communication-bound (measured)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return _save(fig, out / f"{prefix}corpus_left_out.png")
