"""A real small training comparison: a 64-32-10 MLP on scikit-learn's handwritten digits, trained on the
reference driver by every optimizer the toolkit knows, on 2 nodes x 4 GPUs; its `birder report` section.

Data: ``sklearn.datasets.load_digits`` (1797 8x8 images shipped with scikit-learn, no download), pixels / 16,
a fixed permutation (``DATA_SEED``) split 1437 train / 360 test; GPU r holds the training samples whose
position in the permutation is r mod 8, and at step t draws ``BATCH`` of them with
``draws.uniforms(seed, t, 2**30 + r, BATCH)`` (the driver's noise stream). The network: tanh hidden layer,
softmax cross-entropy, forward and backward written out below, parameters as one float32 vector.

Learning rates were picked once per optimizer on the full run (300 steps, seed 0) from the grid
1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1, 2 as the one with the lowest final training loss
(``OptimizerSpec.learning_rate`` in ``birder_ref.registry`` says what each got; final losses of the grid:
sgdm 0.0008 at 1 (2 diverges), adam 0.0023 at 0.05, softsignsgd 0.021 at 0.01, birder 0.022 at 0.02,
onebit-adam 0.0023 at 0.1, zero-one-adam 0.022 at 0.05, marsit 0.11 at 0.5). Marsit's sign step
eta_s = ``MARSIT_SIGN_SCALE`` * lr: 2 x Theorem 1's ratio 1/sqrt(M D), the best of 0.25, 0.5, 1, 2, 4 x at
lr 0.5 (final losses 5.3, 1.0, 0.11, 0.088, 0.093).
No schedule, no weight decay, constant lr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from birder_ref import draws, registry  # noqa: E402
from birder_ref.driver import Problem, train  # noqa: E402
from birder_ref.onebit_adam import DEFAULT_WARMUP_FRACTION, warmup_steps_for  # noqa: E402
from birder_ref.schedules import Layout  # noqa: E402

LAYOUT = Layout(2, 4)
HIDDEN = 32
MARSIT_K = 100  # Marsit-100, the paper's variant with a full-precision round every 100
BATCH = 16
DATA_SEED = 0
STEPS, QUICK_STEPS = 300, 60
MARSIT_SIGN_SCALE = 2 / np.sqrt(LAYOUT.n_ranks * (64 * HIDDEN + HIDDEN + HIDDEN * 10 + 10))  # eta_s / eta_l
SETTINGS = {"marsit": {"K": MARSIT_K, "sign_scale": MARSIT_SIGN_SCALE}}  # settings beyond the registry's defaults


def learning_rates() -> dict[str, float]:
    """Each registered optimizer's learning rate (``OptimizerSpec.learning_rate``, picked as the docstring says)."""
    return {name: registry.get(name).learning_rate for name in registry.names()}


@dataclass(frozen=True)
class Digits:
    """The split data set: float32 train/test images (n, 64) and int labels, and each GPU's sample indices."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    shards: tuple[np.ndarray, ...]


def load(n_ranks: int = LAYOUT.n_ranks) -> Digits:
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    order = np.random.default_rng(DATA_SEED).permutation(len(labels))
    x, y = (images[order] / 16.0).astype(np.float32), labels[order].astype(np.int64)
    n_test = 360
    x_train, y_train = x[n_test:], y[n_test:]
    shards = tuple(np.arange(r, len(y_train), n_ranks) for r in range(n_ranks))
    return Digits(x_train, y_train, x[:n_test], y[:n_test], shards)


def dim(hidden: int = HIDDEN) -> int:
    return 64 * hidden + hidden + hidden * 10 + 10


def unpack(w: np.ndarray, hidden: int = HIDDEN):
    """The flat parameter vector as (W1 (64, h), b1 (h,), W2 (h, 10), b2 (10,))."""
    a, b, c = 64 * hidden, 64 * hidden + hidden, 64 * hidden + hidden + hidden * 10
    return w[:a].reshape(64, hidden), w[a:b], w[b:c].reshape(hidden, 10), w[c:]


def initial_parameters(hidden: int = HIDDEN) -> np.ndarray:
    """Glorot-uniform weights, zero biases, from ``DATA_SEED``."""
    rng = np.random.default_rng(DATA_SEED + 1)
    w1 = rng.uniform(-1, 1, (64, hidden)) * np.sqrt(6 / (64 + hidden))
    w2 = rng.uniform(-1, 1, (hidden, 10)) * np.sqrt(6 / (hidden + 10))
    return np.concatenate([w1.ravel(), np.zeros(hidden), w2.ravel(), np.zeros(10)]).astype(np.float32)


def forward(w: np.ndarray, x: np.ndarray):
    """Hidden activations and class log-probabilities."""
    w1, b1, w2, b2 = unpack(w)
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    logits = logits - logits.max(axis=1, keepdims=True)
    return h, logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def loss(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy."""
    return float(-forward(w, x)[1][np.arange(len(y)), y].astype(np.float64).mean())


def gradient(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d loss / d w by backpropagation, float32."""
    w1, _, w2, _ = unpack(w)
    h, log_p = forward(w, x)
    delta = np.exp(log_p)
    delta[np.arange(len(y)), y] -= 1
    delta /= len(y)
    back = (delta @ w2.T) * (1 - h * h)
    return np.concatenate([(x.T @ back).ravel(), back.sum(0), (h.T @ delta).ravel(), delta.sum(0)]).astype(np.float32)


def accuracy(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float((forward(w, x)[1].argmax(axis=1) == y).mean())


def problem(data: Digits) -> Problem:
    """The driver's view: the full training loss, and GPU r's mini-batch gradient at step t."""

    def batch_gradient(w, worker, t, seed):
        shard = data.shards[worker]
        pick = shard[(draws.uniforms(seed, t, 2**30 + worker, BATCH) * len(shard)).astype(np.int64)]
        return gradient(w, data.x_train[pick], data.y_train[pick])

    return Problem("digits-mlp", initial_parameters(), lambda w: loss(w, data.x_train, data.y_train),
                   batch_gradient, exact=False)


def optimizers(steps: int) -> dict:
    """Every registered optimizer, as run (Birder: hierarchical scheme, beta 0.95)."""
    return {name: registry.get(name).reference(steps, **SETTINGS.get(name, {})) for name in registry.names()}


def _step_bytes(sched) -> tuple[int, int]:
    """(all, inter-node) bytes the busiest GPU sends in one step of ``sched``."""
    inter, intra = sched.bytes_by_link()
    senders = inter.keys() | intra.keys()
    return (max((inter.get(ep, 0) + intra.get(ep, 0) for ep in senders), default=0),
            max(inter.values(), default=0))


def bytes_per_gpu(name: str, optimizer, steps: int) -> tuple[int, int]:
    """(all, inter-node) bytes one GPU sends over the whole run, from the schedules: fp32 steps, 1-bit
    steps and silent steps counted as the optimizer takes them (``OptimizerSpec.step_counts``)."""
    spec, d = registry.get(name), dim()
    full_steps, onebit_steps = spec.step_counts(optimizer, steps)
    total = np.zeros(2, np.int64)
    if full_steps:
        total += full_steps * np.array(_step_bytes(spec.schedule(LAYOUT, d, full_precision=True)))
    if onebit_steps:
        total += onebit_steps * np.array(_step_bytes(spec.schedule(LAYOUT, d)))
    return int(total[0]), int(total[1])


@dataclass(frozen=True)
class Result:
    name: str
    lr: float
    losses: list[float]
    final_loss: float
    test_accuracy: float
    bytes_per_gpu: tuple[int, int]  # (all, inter-node) over the run


def run(quick: bool = False, seed: int = 0, rates: dict[str, float] | None = None,
        progress: bool = False) -> list[Result]:
    """Train every optimizer; rank 0's replica is evaluated (0/1 Adam's may be between syncs at the end)."""
    steps = QUICK_STEPS if quick else STEPS
    data = load()
    task = problem(data)
    rates = learning_rates() if rates is None else rates
    results = []
    for name, optimizer in tqdm(optimizers(steps).items(), desc="digits comparison", unit="optimizer",
                                    disable=not progress, file=sys.stderr, leave=False):
        history = train(task, optimizer, LAYOUT, steps, rates[name], seed)
        w = history.params[-1]
        results.append(Result(name, rates[name], history.losses, history.losses[-1],
                              accuracy(w, data.x_test, data.y_test), bytes_per_gpu(name, optimizer, steps)))
    return results


def plot(results: list[Result], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in results:
        ax.plot(np.arange(len(r.losses)), r.losses, label=f"{r.name} (lr {r.lr:g})",
                lw=2.2 if r.name in ("birder", "adam") else 1.2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training cross-entropy (rank 0's replica, full train set)")
    ax.set_title(f"64-{HIDDEN}-10 MLP on scikit-learn digits, {LAYOUT.n_nodes} nodes x {LAYOUT.gpus_per_node} GPUs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section(outdir: Path, quick: bool) -> str:
    """The report section: loss curves (PNG) and a table of final training loss and test accuracy."""
    from birder.report_core import show_progress

    results = run(quick, progress=show_progress())
    steps = len(results[0].losses) - 1
    plot(results, outdir / "baselines_digits_loss.png")
    by_name = {r.name: r for r in results}
    gap = by_name["birder"].test_accuracy - by_name["adam"].test_accuracy
    lines = [
        "## Baselines on a real task: handwritten digits",
        "",
        f"A 64-{HIDDEN}-10 tanh MLP on scikit-learn's digits (1437 train / 360 test images), {steps} steps, "
        f"{LAYOUT.n_nodes} nodes x {LAYOUT.gpus_per_node} GPUs, {BATCH} samples per GPU per step, every optimizer "
        "on the reference driver with its own communication executed (`birder.comparison`). Learning rates: "
        "the best of one grid per optimizer (`birder/comparison.py`'s docstring). 1-bit Adam warms up for "
        f"{warmup_steps_for(steps)} of the {steps} steps ({100 * DEFAULT_WARMUP_FRACTION:.0f}%); "
        f"0/1 Adam uses the paper's ImageNet policy scaled to the run; Marsit is Marsit-{MARSIT_K} (SGD).",
        "",
        "| optimizer | lr | final train loss | test accuracy | KB sent per GPU (all) | of which inter-node |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r.name} | {r.lr:g} | {r.final_loss:.4f} | {100 * r.test_accuracy:.1f}% | "
              f"{r.bytes_per_gpu[0] / 1e3:,.0f} | {r.bytes_per_gpu[1] / 1e3:,.0f} |" for r in results]
    birder, adam, soft = by_name["birder"], by_name["adam"], by_name["softsignsgd"]
    marsit_jumps = (f"Marsit's jumps at steps {MARSIT_K + 1}, {2 * MARSIT_K + 1}, ... are its full-precision rounds "
                    "paying back the compensation accumulated since the last one. " if steps > MARSIT_K else "")
    lines += [
        "",
        "Measured here, Birder's test accuracy is "
        + (f"{abs(100 * gap):.1f} points {'above' if gap > 0 else 'below'} Adam's " if round(100 * gap, 1)
           else "the same as Adam's ") +
        f"({100 * birder.test_accuracy:.1f}% vs {100 * adam.test_accuracy:.1f}%); its final training loss is "
        f"{birder.final_loss:.4f}, {birder.final_loss / adam.final_loss:.1f}x Adam's {adam.final_loss:.4f} and "
        f"{birder.final_loss / soft.final_loss:.1f}x that of SoftSignSGD, its uncompressed form "
        f"({soft.final_loss:.4f}). Birder sends "
        f"{adam.bytes_per_gpu[1] / max(1, birder.bytes_per_gpu[1]):.0f}x fewer inter-node bytes than Adam (a ratio "
        "of the exact byte counts; the table rounds them to KB). "
        "Bytes are the busiest GPU's, from each optimizer's schedule over the steps it communicates. "
        f"{marsit_jumps}0/1 Adam's jagged curve is rank 0's replica between syncs. "
        "One seed, one small network: a check that each optimizer trains, not a ranking; "
        "`python -m birder.comparison --seeds 5` prints the spread over seeds (about 5 minutes on 2 cores).",
        "",
        "![training loss per optimizer](baselines_digits_loss.png)",
        "",
    ]
    return "\n".join(lines)


def seed_summary(seeds: int, quick: bool = False) -> dict[str, dict[str, list[float]]]:
    """Final training loss and test accuracy of every optimizer over seeds 0 .. seeds-1 (learning rates fixed)."""
    summary: dict[str, dict[str, list[float]]] = {}
    for seed in range(seeds):
        for r in run(quick, seed):
            entry = summary.setdefault(r.name, {"final_loss": [], "test_accuracy": []})
            entry["final_loss"].append(r.final_loss)
            entry["test_accuracy"].append(r.test_accuracy)
    return summary


def main(argv: list[str] | None = None) -> int:
    """``python -m birder.comparison --seeds 5``: the comparison over several seeds, mean [min, max]."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m birder.comparison", description=main.__doc__)
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (0 .. N-1)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps instead of {STEPS}")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    summary = seed_summary(args.seeds, args.quick)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{'optimizer':14s} {'final train loss: mean [min, max]':36s} test accuracy %: mean [min, max]")
    for name, entry in summary.items():
        loss, acc = np.array(entry["final_loss"]), 100 * np.array(entry["test_accuracy"])
        print(f"{name:14s} {loss.mean():.4f} [{loss.min():.4f}, {loss.max():.4f}]{'':13s} "
              f"{acc.mean():.1f} [{acc.min():.1f}, {acc.max():.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
