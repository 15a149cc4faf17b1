"""Bytes per trainable parameter that Birder costs above DDP + AdamW, measured as peak RSS in one run.

Each method trains the same model for a few steps on freshly launched gloo ranks (``gpu_validation.launch``); the
peak resident set size of rank 0 (``ru_maxrss``) is compared: (Birder - AdamW) / trainable parameters. Target: at
most 30 B per trainable parameter. A second model freezes a large backbone (``requires_grad=False``) under a small
trainable head: Birder keeps no state for frozen parameters, so its cost per *frozen* parameter must be ~0.
Usage: python benchmarks/memory_per_parameter.py [--width 1600] [--layout 1x2] [--steps 3]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1600, help="MLP width (1600: 10.3 M parameters)")
    parser.add_argument("--layout", default="1x2", help="NODESxGPUS_PER_NODE (default 1x2)")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    nodes, gpus = (int(v) for v in args.layout.split("x"))
    for frozen in (False, True):
        adamw = measure("adamw", args.width, frozen, nodes, gpus, args.steps)
        birder = measure("birder", args.width, frozen, nodes, gpus, args.steps)
        extra = birder["peak_rss_bytes"] - adamw["peak_rss_bytes"]
        row = {"layout": args.layout, "frozen_backbone": frozen, "parameters": adamw["parameters"],
               "trainable": adamw["trainable"], "adamw_peak_mb": round(adamw["peak_rss_bytes"] / 2**20, 1),
               "birder_peak_mb": round(birder["peak_rss_bytes"] / 2**20, 1),
               "birder_extra_bytes_per_trainable_parameter": round(extra / adamw["trainable"], 2)}
        if frozen:
            frozen_count = adamw["parameters"] - adamw["trainable"]
            row["birder_extra_bytes_per_frozen_parameter"] = round(extra / frozen_count, 3)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
