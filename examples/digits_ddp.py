"""Train a small CNN on scikit-learn's digits with DDP on gloo: Birder against AdamW and PyTorch's fp16 and PowerSGD
hooks, on loss, accuracy and step time, with a plot.

    python examples/digits_ddp.py                       # 2 CPU ranks, 15 epochs, every method (about 2 minutes)
    python examples/digits_ddp.py --ranks 4 --gpus-per-node 2 --epochs 20 --out digits.png

Each method trains the same model from the same weights on the same batches (global batch 64, split across
ranks): "adamw" is DDP's default all-reduce + AdamW; "fp16" and "powersgd" are PyTorch's own
``fp16_compress_hook`` and ``powerSGD_hook`` (rank 2, after 10 uncompressed steps) + AdamW; "birder" is the one
line ``opt = gpu_validation.Birder(ddp, lr=..., weight_decay=...)``. Step time is the median over steps after the
first epoch, on rank 0. On CPU with gloo over loopback, bandwidth is nearly free: compression cannot pay off
here, so the times show overhead, not what a network-bound cluster would see.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from sklearn.datasets import load_digits
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from safeio.atomic import atomic_path, write_text  # noqa: E402

METHODS = ("adamw", "fp16", "powersgd", "birder")
LEARNING_RATES = {"adamw": 1e-2, "fp16": 1e-2, "powersgd": 1e-2, "birder": 3e-3}  # each method's own (trial sweep)
WEIGHT_DECAY = 1e-4
GLOBAL_BATCH = 64


def digits(seed: int = 0):
    """scikit-learn's 8x8 digits, scaled to [0, 1], split 80/20 with a fixed permutation."""
    data = load_digits()
    x = torch.tensor(data.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(data.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(y))
    return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def make_cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))


def _optimizer(method: str, ddp: nn.parallel.DistributedDataParallel, gpus_per_node: int):
    lr = LEARNING_RATES[method]
    if method == "birder":
        import gpu_validation

        return gpu_validation.Birder(ddp, lr=lr, weight_decay=WEIGHT_DECAY, gpus_per_node=gpus_per_node)
    if method == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif method == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=10)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return torch.optim.AdamW(ddp.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)


def train_one(rank: int, world: int, method: str, epochs: int, max_steps: int | None, gpus_per_node: int) -> dict:
    """One method on this rank (the process group is up); the figures rank 0 reports."""
    (x_train, y_train), (x_test, y_test) = digits()
    ddp = nn.parallel.DistributedDataParallel(make_cnn())
    opt = _optimizer(method, ddp, gpus_per_node)
    per_rank = GLOBAL_BATCH // world
    history, times, step = [], [], 0
    for epoch in range(epochs):
        order = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(epoch))
        losses = []
        for first in range(0, len(order) - GLOBAL_BATCH + 1, GLOBAL_BATCH):
            mine = order[first + rank * per_rank: first + (rank + 1) * per_rank]
            start = time.perf_counter()
            loss = nn.functional.cross_entropy(ddp(x_train[mine]), y_train[mine])
            loss.backward()
            opt.step()
            opt.zero_grad()
            if epoch > 0 or max_steps is not None:
                times.append(time.perf_counter() - start)
            losses.append(loss.item())
            step += 1
            if max_steps is not None and step >= max_steps:
                break
        with torch.no_grad():
            test_logits = ddp.module(x_test)
            accuracy = (test_logits.argmax(1) == y_test).float().mean().item()
            test_loss = nn.functional.cross_entropy(test_logits, y_test).item()
        history.append({"epoch": epoch + 1, "train_loss": float(np.mean(losses)), "test_loss": test_loss,
                        "test_accuracy": accuracy})
        if max_steps is not None and step >= max_steps:
            break
    return {"method": method, "lr": LEARNING_RATES[method], "steps": step, "history": history,
            "median_step_ms": 1e3 * statistics.median(times) if times else None}


def train(rank: int, world: int, store: str, methods: list[str], epochs: int, max_steps: int | None,
          gpus_per_node: int, out: str) -> None:
    """Every method in turn on this rank; rank 0 writes one JSON line per method to ``out``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    for method in methods:
        result = train_one(rank, world, method, epochs, max_steps, gpus_per_node)
        if rank == 0:
            last = result["history"][-1]
            print(f"{method:>9}: lr {result['lr']:g}, {result['steps']} steps, final train loss "
                  f"{last['train_loss']:.4f}, test accuracy {100 * last['test_accuracy']:.2f}%, median step "
                  f"{result['median_step_ms']:.1f} ms", flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(result) + "\n")
    dist.destroy_process_group()


def run(methods: list[str], ranks: int, epochs: int, max_steps: int | None, gpus_per_node: int) -> list[dict]:
    """Start ``ranks`` processes (forked where the platform can: no second torch import), train every method."""
    start_method = "fork" if "fork" in torch.multiprocessing.get_all_start_methods() else "spawn"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.jsonl")
        mp.start_processes(train, args=(ranks, os.path.join(tmp, "store"), methods, epochs, max_steps,
                                        gpus_per_node, out), nprocs=ranks, join=True, start_method=start_method)
        return [json.loads(line) for line in Path(out).read_text().splitlines()]


def plot(results: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax, time_ax) = plt.subplots(1, 3, figsize=(14, 4))
    for r in results:
        epochs = [h["epoch"] for h in r["history"]]
        loss_ax.plot(epochs, [h["train_loss"] for h in r["history"]], "o-", ms=3, label=f"{r['method']} (lr {r['lr']})")
        acc_ax.plot(epochs, [100 * h["test_accuracy"] for h in r["history"]], "o-", ms=3, label=r["method"])
    loss_ax.set(yscale="log", xlabel="epoch", ylabel="training loss (mean over the epoch)", title="training loss")
    loss_ax.legend()
    acc_ax.set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy (360 held-out digits)")
    acc_ax.legend(loc="lower right")
    names = [r["method"] for r in results]
    ms = [r["median_step_ms"] or 0.0 for r in results]
    time_ax.bar(names, ms, color=["C0", "C1", "C2", "C3"][: len(names)])
    for i, value in enumerate(ms):
        time_ax.text(i, value, f"{value:.1f}", ha="center", va="bottom")
    time_ax.set(ylabel="median ms per step (rank 0)", title="step time, gloo on CPU (loopback)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2, help="local gloo ranks (default 2)")
    parser.add_argument("--gpus-per-node", type=int, default=None, help="ranks per simulated node (default: all)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--max-steps", type=int, default=None, help="stop each method after this many steps")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--out", default="digits_ddp.png", help="the plot; the figures go beside it as .json")
    args = parser.parse_args(argv)
    if args.ranks < 1 or GLOBAL_BATCH % args.ranks or args.epochs < 1:
        parser.error(f"need epochs >= 1 and ranks dividing the global batch {GLOBAL_BATCH}")
    results = run(args.methods, args.ranks, args.epochs, args.max_steps, args.gpus_per_node or args.ranks)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out.with_suffix(".json"), json.dumps({"ranks": args.ranks, "results": results}, indent=1))
    print(f"plot: {plot(results, out)}; figures: {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
