"""``python -m sim.validation [--plot PNG]``: the corpus per source (its independent group, rows,
communication-bound rows, how it was read) and its totals; ``--plot`` draws every row's scaling efficiency
(throughput / (nodes x single-node throughput)) against its GPU count, one marker per independent group."""

from __future__ import annotations

import argparse
import sys

from sim.uncertainty import COMM_BOUND_GAP
from sim.validation.corpus import independent_groups, load_corpus, load_sources, regime, totals_line


def plot(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from safeio.atomic import atomic_path

    rows, sources = load_corpus(), load_sources()
    fig, ax = plt.subplots(figsize=(8, 6))
    for marker, group in zip("os^Dvp<>*hX", independent_groups(sources), strict=False):
        mine = [r for r in rows if r.source in group]
        ax.scatter([r.gpus for r in mine], [r.throughput / (r.nodes * r.single_node_throughput) for r in mine],
                   marker=marker, alpha=0.6, label=f"{' + '.join(group)} ({len(mine)})")
    ax.axhline(1 / (1 + COMM_BOUND_GAP), color="grey", linestyle="--", linewidth=1)
    ax.text(0.99, 1 / (1 + COMM_BOUND_GAP), "communication-bound below ", transform=ax.get_yaxis_transform(),
            ha="right", va="top", color="grey", fontsize=8)
    ax.set_xscale("log", base=2)
    ticks = sorted({r.gpus for r in rows})
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("GPUs in the job")
    ax.set_ylabel("throughput / (nodes x single-node throughput)")
    ax.set_title("Scaling efficiency of the published multi-node rows (sim/validation/corpus.csv)", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.validation", description=__doc__)
    parser.add_argument("--plot", metavar="PNG", help="write the scaling-efficiency plot here")
    args = parser.parse_args(argv)
    try:
        rows, sources = load_corpus(), load_sources()
        group_of = {sid: i for i, group in enumerate(independent_groups(sources), start=1) for sid in group}
        print(f"{'source':28} group  rows  communication-bound  how read")
        for sid, source in sources.items():
            mine = [r for r in rows if r.source == sid]
            comm = sum(regime(r) == "communication-bound" for r in mine)
            print(f"{sid:28} {group_of[sid]:5} {len(mine):5} {comm:20}  {source.how_read}")
        print(totals_line(rows, sources))
        if args.plot:
            plot(args.plot)
            print(f"wrote {args.plot}")
    except (ValueError, OSError) as err:
        print(f"python -m sim.validation: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
