"""The scaling section of `birder report`: validation against the paper, and predictions beyond its clusters."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim import plots, validate
from sim.cli import sweep


def section(outdir: Path, quick: bool) -> str:
    outdir.mkdir(parents=True, exist_ok=True)
    table = validate.rows()
    results = validate.compare(table)
    orders = validate.order_agreement(results)
    validation_png = plots.validation(results, outdir, prefix="sim_")
    lines = [
        "## Scaling predictions (sim)",
        "",
        "A discrete-event model (simpy) of 8-GPU nodes on Ethernet or InfiniBand (`sim/README.md`), calibrated "
        "only with each optimizer's single-node throughput.",
        "",
        f"### Against the Birder paper (ResNet-50, 32 samples per GPU): MAPE {validate.mape(results) * 100:.1f}% "
        f"over {len(results)} rows, {validate.mape([r for r in results if r['gpus'] > 8]) * 100:.1f}% over the "
        "multi-node ones",
        "",
        "| network | GPUs | optimizer | published | predicted | error |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r['network']} | {r['gpus']} | {r['optimizer']} | {r['published']:.0f} | "
                     f"{r['predicted']:.0f} | {r['error'] * 100:+.1f}% |")
    agree = sum(o["same"] for o in orders)
    lines += ["", f"Order of optimizers the same as published at {agree} of {len(orders)} (network, GPU count) points.",
              "", "Speed-up over SGDM, published / predicted:", "",
              "| network | optimizer | GPUs | published | predicted |", "|---|---|---:|---:|---:|"]
    lines += [f"| {t['network']} | {t['optimizer']} | {t['gpus']} | {t['published']:.2f} | {t['predicted']:.2f} |"
              for t in validate.speedup_trend(results) if t["gpus"] > validate.GPUS_PER_NODE]
    lines += ["", f"![predicted vs published]({validation_png.name})", ""]
    nodes = [1, 2, 4, 8] if quick else [1, 2, 4, 8, 16, 32, 64]
    for model, batch in (("resnet50", 32), ("bert-base", 3)):
        args = argparse.Namespace(model=model, params=None, batch_per_gpu=batch, scheme="hierarchical",
                                  warmup_fraction=None, marsit_period=None, cluster=None, network=None,
                                  gpus_per_node=8, gpu="a100",
                                  intra=None, oversubscription=1.0)
        results = sweep(args, nodes, ["10gbe", "ib-hdr"] if quick else ["10gbe", "100gbe", "ib-hdr"],
                        ["sgdm", "onebit-adam", "birder"], progress=False)
        curve = plots.throughput_vs_gpus(results, outdir, prefix=f"sim_{model}_")[0]
        bars = plots.time_breakdown([r for r in results if r["nodes"] <= 8], outdir, prefix=f"sim_{model}_")[0]
        lines += [f"### {model}, {batch} samples per GPU, built-in A100 compute profile", "",
                  f"![throughput vs GPUs]({curve.name})", "", f"![time per iteration]({bars.name})", "",
                  "| network | optimizer | " + " | ".join(f"{n * 8} GPUs" for n in nodes) + " |",
                  "|---|---|" + "---:|" * len(nodes)]
        for net in dict.fromkeys(r["network"] for r in results):
            for opt in ("sgdm", "onebit-adam", "birder"):
                row = [r for r in results if r["network"] == net and r["optimizer"] == opt]
                lines.append(f"| {net} | {opt} | " + " | ".join(f"{r['throughput']:.0f}" for r in row) + " |")
        lines.append("")
    return "\n".join(lines)
