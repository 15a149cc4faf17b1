"""Matplotlib figures of the simulator (Agg backend): throughput against GPUs (the Birder paper's Figure 3),
the time breakdown per iteration (its Figure 4), and predicted against published throughput."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def throughput_vs_gpus(results: list[dict], out: Path, prefix: str = "") -> list[Path]:
    """One panel per network: samples/s against GPU count, one line per optimizer."""
    networks = sorted({r["network"] for r in results})
    fig, axes = plt.subplots(1, len(networks), figsize=(5 * len(networks), 4), squeeze=False)
    for ax, net in zip(axes[0], networks, strict=True):
        for opt in dict.fromkeys(r["optimizer"] for r in results):
            rs = sorted((r for r in results if r["network"] == net and r["optimizer"] == opt), key=lambda r: r["gpus"])
            ax.plot([r["gpus"] for r in rs], [r["throughput"] for r in rs], marker="o", label=opt)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("throughput (samples/s)")
        ax.set_title(net)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = out / f"{prefix}throughput_vs_gpus.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def time_breakdown(results: list[dict], out: Path, prefix: str = "") -> list[Path]:
    """Stacked bars per network: compute, compression and exposed communication per iteration."""
    networks = sorted({r["network"] for r in results})
    fig, axes = plt.subplots(1, len(networks), figsize=(6 * len(networks), 4), squeeze=False)
    for ax, net in zip(axes[0], networks, strict=True):
        rs = [r for r in results if r["network"] == net]
        labels = [f"{r['optimizer']}\n{r['gpus']}" for r in rs]
        x = range(len(rs))
        compute = [r["compute_s"] * 1e3 for r in rs]
        compression = [r["compression_s"] * 1e3 for r in rs]
        comm = [r["exposed_communication_s"] * 1e3 for r in rs]
        ax.bar(x, compute, label="compute")
        ax.bar(x, compression, bottom=compute, label="compression/decompression")
        ax.bar(x, comm, bottom=[a + b for a, b in zip(compute, compression, strict=True)],
               label="exposed communication")
        ax.set_xticks(list(x), labels, fontsize=6, rotation=90)
        ax.set_ylabel("time per iteration (ms)")
        ax.set_title(net)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / f"{prefix}time_breakdown.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def validation(results: list[dict], out: Path, prefix: str = "") -> Path:
    """Predicted against published throughput, one marker per optimizer, the diagonal and +-10%."""
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 5))
    top = max(max(r["published"], r["predicted"]) for r in results) * 1.1
    ax.plot([0, top], [0, top], color="black", lw=0.8)
    ax.plot([0, top], [0, top * 1.1], color="grey", ls="--", lw=0.6)
    ax.plot([0, top], [0, top * 0.9], color="grey", ls="--", lw=0.6)
    for opt in dict.fromkeys(r["optimizer"] for r in results):
        for net, marker in (("10gbe", "o"), ("ib-hdr", "s")):
            rs = [r for r in results if r["optimizer"] == opt and r["network"] == net]
            if rs:
                ax.scatter([r["published"] for r in rs], [r["predicted"] for r in rs], marker=marker,
                           label=f"{opt} {net}")
        rs = [r for r in results if r["optimizer"] == opt and r["network"] not in ("10gbe", "ib-hdr")]
        if rs:
            ax.scatter([r["published"] for r in rs], [r["predicted"] for r in rs], marker="^", label=opt)
    ax.set_xlabel("published throughput (samples/s)")
    ax.set_ylabel("predicted throughput (samples/s)")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.legend(fontsize=7)
    ax.set_title("sim vs Birder paper (dashed: +-10%)")
    fig.tight_layout()
    path = out / f"{prefix}validation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
