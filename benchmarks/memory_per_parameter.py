"""Bytes per trainable parameter that Birder costs above DDP + AdamW, measured as peak RSS in one run.

Each method trains the same model for a few steps on freshly launched gloo ranks (``gpu_validation.launch``); the
peak resident set size of rank 0 (``ru_maxrss``) is compared: (Birder - AdamW) / trainable parameters. Target: at
most 30 B per trainable parameter. A second model freezes a large backbone (``requires_grad=False``) under a small
trainable head: Birder keeps no state for frozen parameters, so its cost per *frozen* parameter must be ~0.
Each row also gives what Birder's own accounting expects (``expected_extra_bytes``); the last lines printed are the
Markdown table the README quotes (``--readme`` prints only that).
Usage: python benchmarks/memory_per_parameter.py [--widths 1600 3200] [--layouts 2x1 2x2] [--steps 2] [--frozen]
"""

import argparse
import json
import resource

import torch
import torch.distributed as dist
from torch import nn

from gpu_validation import launch


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _train(method: str, width: int, frozen: bool, gpus_per_node: int, steps: int, rank: int) -> dict:
    from gpu_validation.optimizer import Birder

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)], nn.Linear(width, 16))
    if frozen:
        for layer in list(model)[:4]:
            layer.requires_grad_(False)
    ddp = nn.parallel.DistributedDataParallel(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = (Birder(ddp, lr=1e-3, gpus_per_node=gpus_per_node) if method == "birder"
           else torch.optim.AdamW(trainable, lr=1e-3))
    x = torch.randn(8, width)
    for _ in range(steps):
        ddp(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    dist.barrier()
    return {"peak_rss_bytes": _peak_rss_bytes(), "trainable": sum(p.numel() for p in trainable),
            "parameters": sum(p.numel() for p in model.parameters())}


def measure(method: str, width: int, frozen: bool, nodes: int, gpus_per_node: int, steps: int) -> dict:
    world = nodes * gpus_per_node
    outcome = launch.launch(_train, (method, width, frozen, gpus_per_node, steps), world, "gloo", 120.0, 900.0)
    if outcome.errors or outcome.lost:
        raise RuntimeError(outcome.describe_failures())
    return outcome.reports[0]["result"]


def expected_extra_bytes(nodes: int, gpus_per_node: int) -> float:
    """What Birder keeps per trainable parameter beyond AdamW's 8 B (exp_avg, exp_avg_sq), by its accounting:
    m, b_hat and e of this rank's shard (12 B / G), the server error of its chunk (4 B / (G x nodes)), the
    flattened gradient (4 B) and, with G > 1, the node's received rows (4 B)."""
    g = gpus_per_node
    return 12 / g + 4 / (g * nodes) + 4 + (4 if g > 1 else 0) - 8


def table(rows: list[dict]) -> str:
    """The Markdown table the README quotes (generated: ``--readme``)."""
    lines = ["| layout | trainable parameters | DDP + AdamW peak RSS, rank 0 | Birder peak RSS, rank 0 | Birder extra "
             "B / parameter (measured) | by Birder's accounting |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['trainable'] / 1e6:.1f} M | {r['adamw_peak_mb']:.0f} MB | "
                     f"{r['birder_peak_mb']:.0f} MB | {r['birder_extra_bytes_per_trainable_parameter']:+.1f} | "
                     f"{r['expected_extra_bytes']:+.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[1600, 3200],
                        help="MLP widths (1600: 10.3 M parameters, 3200: 41.0 M)")
    parser.add_argument("--layouts", nargs="+", default=["2x1", "2x2"], help="NODESxGPUS_PER_NODE")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--frozen", action="store_true", help="also a frozen backbone under a small head")
    parser.add_argument("--readme", action="store_true", help="print the Markdown table only")
    args = parser.parse_args()
    rows = []
    for layout in args.layouts:
        nodes, gpus = (int(v) for v in layout.split("x"))
        for width in args.widths:
            for frozen in (False, True) if args.frozen else (False,):
                adamw = measure("adamw", width, frozen, nodes, gpus, args.steps)
                birder = measure("birder", width, frozen, nodes, gpus, args.steps)
                extra = birder["peak_rss_bytes"] - adamw["peak_rss_bytes"]
                row = {"layout": layout, "frozen_backbone": frozen, "parameters": adamw["parameters"],
                       "trainable": adamw["trainable"], "adamw_peak_mb": round(adamw["peak_rss_bytes"] / 2**20, 1),
                       "birder_peak_mb": round(birder["peak_rss_bytes"] / 2**20, 1),
                       "birder_extra_bytes_per_trainable_parameter": round(extra / adamw["trainable"], 2),
                       "expected_extra_bytes": round(expected_extra_bytes(nodes, gpus), 2)}
                if frozen:
                    frozen_count = adamw["parameters"] - adamw["trainable"]
                    row["birder_extra_bytes_per_frozen_parameter"] = round(extra / frozen_count, 3)
                rows.append(row)
                if not args.readme:
                    print(json.dumps(row), flush=True)
    print(table([r for r in rows if not r["frozen_backbone"]]))


if __name__ == "__main__":
    main()
