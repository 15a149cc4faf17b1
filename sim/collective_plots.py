"""The collective size sweep as a PNG: bus bandwidth and time against size (nccl-tests' columns)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from safeio.atomic import atomic_path  # noqa: E402


def size_sweep(results: list[dict], path: Path) -> Path:
    """Two panels: busbw (GB/s) and time (us) against bytes, log scales, one line per (network, op)."""
    fig, (bw_ax, t_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key in dict.fromkeys((r["network"], r["op"], r["nodes"], r["gpus_per_node"]) for r in results):
        rs = sorted((r for r in results if (r["network"], r["op"], r["nodes"], r["gpus_per_node"]) == key),
                    key=lambda r: r["bytes"])
        label = f"{key[1]}, {key[0]}, {key[2]}x{key[3]} GPUs"
        bw_ax.plot([r["bytes"] for r in rs], [r["busbw_gbytes_per_s"] for r in rs], marker=".", label=label)
        t_ax.plot([r["bytes"] for r in rs], [r["time_s"] * 1e6 for r in rs], marker=".", label=label)
    for ax, ylabel in ((bw_ax, "bus bandwidth (GB/s)"), (t_ax, "time (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes, nccl-tests' size column)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    t_ax.set_yscale("log")
    bw_ax.legend(fontsize=8)
    bw_ax.set_title("predicted bus bandwidth")
    t_ax.set_title("predicted time per operation")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path
