"""Birder's recipe re-derived on three tasks: where its best lr falls against AdamW's, and which knobs matter.

    python examples/convergence_three_tasks.py            # the committed study: 2 gloo ranks, 85 runs; it took
                                                          # 21.5 minutes on 2 cores shared with a load of 20-28
    python examples/convergence_three_tasks.py --smoke    # seconds: every code path, nothing to conclude from
    python examples/convergence_three_tasks.py --render   # train nothing: docs block, README snippet and plot from JSON

Three tasks with real data that installed packages ship, two of them ``convergence_study.py``'s:

- ``digits``: scikit-learn's 8x8 digits, the CNN of ``digits_ddp.py``, cross-entropy (the study's task).
- ``lm``: the study's byte-level causal transformer on scikit-learn's own Python source (``nn.Embedding``'s N(0, 1)
  init for the byte table, N(0, 0.02) for the position table).
- ``image``: regression of a different kind: the colour of each pixel of scikit-learn's sample photograph
  ``china.jpg`` (every 4th row and column: 107 x 160 pixels) from its position, through fixed random Fourier
  features (64 frequencies, scale 10) and a 2-hidden-layer ReLU MLP (width 128), mean squared error on
  standardized RGB. Pixels are split 60/20/20 at random (fixed permutation), so held-out pixels lie between
  training pixels.

Two methods, each tuned with the same budget: DDP's all-reduce + AdamW, and ``gpu_validation.Birder`` at 2 x 1
(two workers: every step crosses the 1-bit exchange). Each method sweeps the task's lr grid (3x apart) with each of
its knob settings (``KNOBS``): its default, one other beta (Birder's Algorithm 1 beta 0.8 instead of 0.95; AdamW's
beta2 0.95 instead of 0.999); on the LM instead a 10x lr for the embedding tables, with and without that beta. Where a
series' best lr is at an end of the grid, the grid is extended by one 3x step on that side, at most
``MAX_EXTENSIONS`` times, for every method alike. Every run: 5% linear warm-up, then a cosine to 0; weight decay
0.01; seed 0; judged by the final validation loss. Each method's best setting, and its best default-knob setting
where that differs, then runs with seeds 1-3, reported on the test split. The JSON beside the plot holds every run;
``docs_block`` and ``recipe_block`` render the table and the recipe of docs/convergence.md from it, ``readme_snippet``
the README's short version (tests check them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence_study as cs  # noqa: E402

from safeio.atomic import atomic_path, write_text  # noqa: E402

TASKS = ("digits", "lm", "image")
METHODS = ("adamw", "birder")
GRID_STEP = 3.0  # the lr grids' ratio between neighbours
# The LM's grid has three points to save time (its runs are ~90% of the study's); the extension finds its ends.
LEARNING_RATES = {"digits": (3e-3, 1e-2, 3e-2, 1e-1), "lm": (3e-3, 1e-2, 3e-2), "image": (1e-3, 3e-3, 1e-2, 3e-2)}
SCHEDULE = "cosine"  # after the 5% warm-up; the two-task study also swept "constant" (see its JSON)
# knob setting -> per method, the RunSpec fields it changes. "beta" is each method's one other beta.
KNOBS: dict[str, dict[str, dict]] = {
    "default": {"adamw": {}, "birder": {}},
    "beta": {"adamw": {"adamw_beta2": 0.95}, "birder": {"beta": 0.8}},
    "emb x10": {"adamw": {"embedding_lr_scale": 10.0}, "birder": {"embedding_lr_scale": 10.0}},
    "emb x10 + beta": {"adamw": {"embedding_lr_scale": 10.0, "adamw_beta2": 0.95},
                       "birder": {"embedding_lr_scale": 10.0, "beta": 0.8}},
}
# Embedding multipliers only where the model has embedding tables. On the LM, beta alone is left out to save time
# (birder_recipe.py screened it there for Birder: 2.360 +- 0.012 against the base's 2.432 +- 0.011 on 3 seeds).
TASK_KNOBS = {"digits": ("default", "beta"), "lm": ("default", "emb x10", "emb x10 + beta"),
              "image": ("default", "beta")}
STUDY = cs.Budget(steps={"digits": 200, "lm": 300, "image": 300},
                  batch_per_rank={"digits": 32, "lm": 16, "image": 64}, learning_rates=LEARNING_RATES,
                  schedules=(SCHEDULE,))
SMOKE = cs.Budget(steps={"digits": 3, "lm": 3, "image": 3}, batch_per_rank={"digits": 8, "lm": 2, "image": 8},
                  learning_rates={"digits": (1e-2,), "lm": (3e-3,), "image": (1e-2,)}, schedules=(SCHEDULE,),
                  seeds=(1,), evaluations=1, heldout_windows=4)
MAX_EXTENSIONS = {"study": 2, "smoke": 1}

# ---- the third task ----

IMAGE_STRIDE, FREQUENCIES, FREQUENCY_SCALE, IMAGE_WIDTH = 4, 64, 10.0, 128


def image_data() -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], dict]:
    """china.jpg's pixels as (Fourier features of the position, standardized RGB), split 60/20/20 at random."""
    from sklearn.datasets import load_sample_image

    pixels = load_sample_image("china.jpg")[::IMAGE_STRIDE, ::IMAGE_STRIDE].astype(np.float32) / 255.0
    height, width, _ = pixels.shape
    rows, cols = np.meshgrid(np.linspace(-1, 1, height), np.linspace(-1, 1, width), indexing="ij")
    position = torch.tensor(np.stack([cols, rows], -1).reshape(-1, 2), dtype=torch.float32)
    frequencies = FREQUENCY_SCALE * torch.randn(2, FREQUENCIES, generator=torch.Generator().manual_seed(12345))
    phase = math.pi * position @ frequencies
    features = torch.cat([phase.sin(), phase.cos()], 1)
    colour = torch.tensor(pixels.reshape(-1, 3))
    order = torch.randperm(len(colour), generator=torch.Generator().manual_seed(0))
    cut_train, cut_validation = int(0.6 * len(order)), int(0.8 * len(order))
    train = order[:cut_train]
    mean, std = colour[train].mean(0), colour[train].std(0)
    colour = (colour - mean) / std
    splits = {"train": train, "validation": order[cut_train:cut_validation], "test": order[cut_validation:]}
    facts = {"source": f"sklearn.datasets.load_sample_image('china.jpg'), every {IMAGE_STRIDE}th row and column",
             "pixels": [height, width], **{k: len(v) for k, v in splits.items()}}
    return {k: (features[v], colour[v]) for k, v in splits.items()}, facts


class ImageTask(cs.Task):
    """Pixel colour from position: the study's Task interface (model, batch, loss, evaluate) for regression."""

    def __init__(self, budget: cs.Budget):
        self.name, self.budget = "image", budget
        self.splits, self.facts = image_data()

    def model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(2 * FREQUENCIES, IMAGE_WIDTH), nn.ReLU(), nn.Linear(IMAGE_WIDTH, IMAGE_WIDTH),
                             nn.ReLU(), nn.Linear(IMAGE_WIDTH, 3))

    def batch(self, seed: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        per_rank = self.budget.batch_per_rank[self.name]
        x, y = self.splits["train"]
        chosen = torch.randint(0, len(y), (cs.RANKS * per_rank,),
                               generator=torch.Generator().manual_seed(seed * 100_003 + step))
        mine = chosen[rank * per_rank:(rank + 1) * per_rank]
        return x[mine], y[mine]

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(model(x), y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict:
        """Mean squared error on standardized RGB, and R^2 (1 - error / the split's own variance, per channel)."""
        x, y = self.splits[split]
        error = ((model(x) - y) ** 2).mean(0)
        return {"loss": error.mean().item(), "r2": (1 - error / y.var(0, unbiased=False)).mean().item()}


def make_task(name: str, budget: cs.Budget) -> cs.Task:
    return ImageTask(budget) if name == "image" else cs.Task(name, budget)


# ---- the sweep ----

@dataclass(frozen=True)
class Run:
    """One training run: the knob setting it belongs to, and the study's RunSpec."""

    knobs: str
    spec: cs.RunSpec


def run_spec(task: str, method: str, knobs: str, lr: float, seed: int, phase: str) -> cs.RunSpec:
    return replace(cs.RunSpec(task, method, lr, SCHEDULE, seed, phase=phase), **KNOBS[knobs][method])


def series(records: list[dict], task: str, method: str, knobs: str) -> list[dict]:
    """The sweep runs of one (task, method, knob setting), by lr."""
    return sorted((r for r in records if r["phase"] == "sweep" and (r["task"], r["method"], r["knobs"]) ==
                   (task, method, knobs)), key=lambda r: r["lr"])


def _validation(record: dict) -> float:
    loss = record["validation"]["loss"]
    return loss if math.isfinite(loss) and record["failure"] is None else math.inf


def best(runs: list[dict]) -> dict:
    """The run with the lowest final validation loss (a NaN or a failed run loses)."""
    return min(runs, key=_validation)


def extensions(runs: list[dict]) -> list[float]:
    """The lrs one 3x step beyond the grid on the side(s) where the series' best lr sits at the end."""
    lrs, chosen = [r["lr"] for r in runs], best(runs)["lr"]
    return ([min(lrs) / GRID_STEP] if chosen == min(lrs) else []) + ([max(lrs) * GRID_STEP] if chosen == max(lrs)
                                                                     else [])


def _run_all(task: cs.Task, runs: list[Run], rank: int, out: str, label: str) -> list[dict]:
    """Each run on this rank in turn; rank 0 appends its records to ``out`` and prints a progress line."""
    done, started = [], time.monotonic()
    for i, run in enumerate(runs, 1):
        record = cs.train_one(task, run.spec, rank)
        if record is None:
            continue
        record["knobs"] = run.knobs
        done.append(record)
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")
        left = (time.monotonic() - started) / i * (len(runs) - i)
        print(f"[{time.strftime('%H:%M:%S')} {label} {i}/{len(runs)}, ~{left / 60:.1f} min left] {run.spec.task:>6} "
              f"{run.spec.method:>6} {run.knobs:<15} lr {run.spec.lr:<8.3g} seed {run.spec.seed}: validation "
              f"{record['validation']['loss']:.4f}, test {record['test']['loss']:.4f} ({record['seconds']:.1f} s)",
              flush=True)
    return done


def study(rank: int, budget: cs.Budget, tasks: tuple[str, ...], max_extensions: int, out: str) -> None:
    """Per task: the grid for every (method, knob setting), the extensions, then the final seeds."""
    for name in tasks:
        task = make_task(name, budget)
        if rank == 0:
            with open(out, "a") as f:
                f.write(json.dumps({"task_facts": name, **task.facts}) + "\n")
        keys = [(method, knobs) for method in METHODS for knobs in TASK_KNOBS[name]]
        records = _run_all(task, [Run(k, run_spec(name, m, k, lr, budget.sweep_seed, "sweep")) for m, k in keys
                                  for lr in budget.learning_rates[name]], rank, out, f"{name} sweep")
        for round_ in range(1, max_extensions + 1):
            more = cs._broadcast([Run(k, run_spec(name, m, k, lr, budget.sweep_seed, "sweep")) for m, k in keys
                               for lr in extensions(series(records, name, m, k))] if rank == 0 else None)
            if not more:
                break
            records += _run_all(task, more, rank, out, f"{name} extension {round_}")
        finals = cs._broadcast(final_settings(records, name) if rank == 0 else None)
        _run_all(task, [Run(k, run_spec(name, m, k, lr, seed, "final")) for m, k, lr in finals
                        for seed in budget.seeds], rank, out, f"{name} final")


def final_settings(records: list[dict], task: str) -> list[tuple[str, str, float]]:
    """Per method: its best (knobs, lr) on the sweep, and its best default-knob lr where that differs."""
    chosen = []
    for method in METHODS:
        overall = best([r for r in records if r["phase"] == "sweep" and (r["task"], r["method"]) == (task, method)])
        default = best(series(records, task, method, "default"))
        chosen += [(method, r["knobs"], r["lr"]) for r in ([overall] if overall is default else [overall, default])]
    return chosen


def _rank_main(rank: int, store: str, budget: cs.Budget, tasks, max_extensions: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=cs.RANKS,
                            timeout=timedelta(seconds=120))
    try:
        study(rank, budget, tasks, max_extensions, out)
    finally:
        dist.destroy_process_group()


def run(budget: cs.Budget, tasks=TASKS, max_extensions: int = 2, progress: str | None = None) -> dict:
    """Spawn the ranks and run the study; returns every run. ``progress``: also append each record there."""
    start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = progress or os.path.join(tmp, "records.jsonl")
        Path(out).write_text("")
        mp.start_processes(_rank_main, args=(os.path.join(tmp, "store"), budget, tuple(tasks), max_extensions, out),
                           nprocs=cs.RANKS, join=True, start_method=start_method)
        lines = [json.loads(line) for line in Path(out).read_text().splitlines()]
    records = [line for line in lines if "task_facts" not in line]
    facts = {line.pop("task_facts"): line for line in lines if "task_facts" in line}
    return {"budget": {**asdict(budget), "warmup_fraction": cs.WARMUP_FRACTION, "weight_decay": cs.WEIGHT_DECAY,
                       "ranks": cs.RANKS, "max_extensions": max_extensions, "grid_step": GRID_STEP},
            "knobs": {k: KNOBS[k] for k in sorted({k for t in tasks for k in TASK_KNOBS[t]}, key=list(KNOBS).index)},
            "task_knobs": {t: TASK_KNOBS[t] for t in tasks}, "torch": torch.__version__,
            "tasks": facts, "records": records,
            "minutes": round((time.monotonic() - started) / 60, 1)}


# ---- what the docs show ----

def summary(result: dict) -> dict:
    """Per task: per method and knob setting the series' best lr (and whether it sits at the searched range's
    end), the searched range, each method's final settings with their test loss over seeds, and the ratios."""
    records, out = result["records"], {}
    for task in result["tasks"]:
        per = {}
        for method in METHODS:
            settings = {}
            for knobs in result["task_knobs"][task]:
                runs = series(records, task, method, knobs)
                chosen = best(runs)
                finals = [r for r in records if r["phase"] == "final" and (r["task"], r["method"], r["knobs"], r["lr"])
                          == (task, method, knobs, chosen["lr"])]
                settings[knobs] = {"lr": chosen["lr"], "validation": chosen["validation"]["loss"],
                                   "searched": [min(r["lr"] for r in runs), max(r["lr"] for r in runs)],
                                   "at_edge": chosen["lr"] in (runs[0]["lr"], runs[-1]["lr"]),
                                   "sweep": {f"{r['lr']:g}": r["validation"]["loss"] for r in runs},
                                   "test": cs._spread([r["test"]["loss"] for r in finals]) if finals else None}
            chosen = min(settings, key=lambda k: settings[k]["validation"])
            per[method] = {"knobs": settings, "chosen": chosen}
        ratios = {k: per["birder"]["knobs"][k]["lr"] / per["adamw"]["knobs"][k]["lr"]
                  for k in result["task_knobs"][task]}
        chosen_ratio = (per["birder"]["knobs"][per["birder"]["chosen"]]["lr"] /
                        per["adamw"]["knobs"][per["adamw"]["chosen"]]["lr"])
        out[task] = {**per, "ratio_by_knobs": ratios, "ratio_chosen": chosen_ratio,
                     "ranks_identical": all(r["ranks_identical"] for r in records if r["task"] == task)}
    return out


TASK_NAMES = {"digits": "digits CNN", "lm": "byte LM", "image": "image regression"}
METHOD_NAMES = {"adamw": "AdamW", "birder": "Birder"}


def _loss(spread: dict | None) -> str:
    return "–" if spread is None else f"{spread['mean']:.3f} ± {spread['std']:.3f}"


def docs_block(result: dict) -> str:
    """docs/convergence.md's table and per-task lr lines, rendered from the study's JSON."""
    s, budget = summary(result), result["budget"]
    grids = "; ".join(f"{t}: {', '.join(f'{lr:g}' for lr in budget['learning_rates'][t])}" for t in result["tasks"])
    lines = [f"Sweep (seed {budget['sweep_seed']}, judged by final validation loss): lr grid ({grids}), extended by "
             f"one {budget['grid_step']:g}x step where a series' best sat at an end (at most "
             f"{budget['max_extensions']} times); {100 * budget['warmup_fraction']:g}% warm-up then cosine to 0; "
             f"weight decay {budget['weight_decay']:g}. Final settings on seeds "
             f"{', '.join(map(str, budget['seeds']))}, test split. The whole study took {result['minutes']:g} minutes "
             "on 2 shared cores.", "",
             "| task | method | knobs | searched lr | best lr (seed 0) | validation loss | test loss (3 seeds) |",
             "|---|---|---|---|---|---|---|"]
    for task, row in s.items():
        label = f"{TASK_NAMES[task]}, {budget['steps'][task]} steps"
        for method in METHODS:
            for knobs, k in row[method]["knobs"].items():
                mark = " **(chosen)**" if knobs == row[method]["chosen"] else ""
                edge = " (end of range)" if k["at_edge"] else ""
                lines.append(f"| {label} | {METHOD_NAMES[method]} | {knobs}{mark} | {k['searched'][0]:g} – "
                             f"{k['searched'][1]:g} | {k['lr']:g}{edge} | {k['validation']:.3f} | {_loss(k['test'])} |")
    lines.append("")
    for task, row in s.items():
        birder, adamw = row["birder"], row["adamw"]
        b, a = birder["knobs"][birder["chosen"]], adamw["knobs"][adamw["chosen"]]
        per_knobs = ", ".join(f"{k} {v:.2g}x" for k, v in row["ratio_by_knobs"].items())
        gap = b["test"]["mean"] - a["test"]["mean"]
        lines.append(f"- {TASK_NAMES[task]}: Birder's best lr / AdamW's best lr, per knob setting: {per_knobs}. "
                     f"Chosen: Birder {birder['chosen']} at lr {b['lr']:g}, AdamW {adamw['chosen']} at lr {a['lr']:g} "
                     f"({row['ratio_chosen']:.2g}x); Birder's test loss is {gap:+.3f} from AdamW's "
                     f"({_loss(b['test'])} against {_loss(a['test'])}).")
    return "\n".join(lines)


def lr_range(result: dict) -> tuple[float, float]:
    """The smallest and largest ratio of Birder's best lr to AdamW's best lr over tasks and knob settings."""
    ratios = [v for row in summary(result).values() for v in row["ratio_by_knobs"].values()]
    return min(ratios), max(ratios)


def _one_three(x: float) -> float:
    """The nearest (in log) of ..., 0.1, 0.3, 1, 3, 10, ...: the usual lr grid."""
    decade = 10.0 ** math.floor(math.log10(x))
    return min((decade, 3 * decade, 10 * decade), key=lambda c: abs(math.log(c / x)))


def sweep_multiples(result: dict) -> list[float]:
    """The multiples of a tuned AdamW lr to sweep Birder's lr over: the 1-3-10 grid from one 3x step below the
    smallest ratio seen to one step above the largest."""
    low, high = lr_range(result)
    multiples = [_one_three(low / result["budget"]["grid_step"])]
    while multiples[-1] < _one_three(high * result["budget"]["grid_step"]) / 2:
        multiples.append(_one_three(multiples[-1] * 3))
    return multiples


def _fixed_ratio(low: float, high: float) -> str:
    return "so no fixed ratio holds" if high / low > 1.5 else "one ratio on every task, on this grid"


def verdict(a: dict, b: dict) -> str:
    """How test loss ``a`` (mean, sd over seeds) compares with ``b``: beyond both spreads, or within them."""
    if a["mean"] + a["std"] < b["mean"] - b["std"]:
        return "lower, beyond the seeds' spread"
    if a["mean"] - a["std"] > b["mean"] + b["std"]:
        return "higher, beyond the seeds' spread"
    return "within the seeds' spread"


def recipe_block(result: dict) -> str:
    """docs/convergence.md's recipe lines (lr range, knobs, the gap to AdamW), rendered from the study's JSON."""
    s = summary(result)
    low, high = lr_range(result)
    per_task = "; ".join(f"{TASK_NAMES[t]}: " + ", ".join(f"{k} {v:.2g}x" for k, v in row["ratio_by_knobs"].items())
                         for t, row in s.items())
    multiples = ", ".join(f"{m:.2g}x" for m in sweep_multiples(result))
    lines = [f"- **lr: sweep it.** Birder's best lr over AdamW's best lr at the same knob setting (one seed, "
             f"{result['budget']['grid_step']:g}x grid) was {per_task}: from {low:.2g}x to {high:.2g}x over "
             f"{len(s)} tasks, {_fixed_ratio(low, high)}. Sweep Birder's lr at {multiples} your tuned AdamW lr, "
             "and extend the grid while the best sits at an end."]
    rule = []
    for task, row in s.items():  # the two-task study's rule, "a third of AdamW's lr", read off the sweep
        knobs = row["birder"]["chosen"]
        target = row["adamw"]["knobs"][row["adamw"]["chosen"]]["lr"] / 3
        near = [r for r in series(result["records"], task, "birder", knobs) if abs(math.log(r["lr"] / target)) < 0.15]
        gap = near[0]["validation"]["loss"] - row["birder"]["knobs"][knobs]["validation"] if near else None
        rule.append(f"{TASK_NAMES[task]} " + ("not on the grid" if gap is None else
                                              f"{gap:+.3f} at lr {near[0]['lr']:g}"))
    lines.append(f"- **The old rule** (a third of AdamW's lr), Birder at its chosen knobs, validation loss against its "
                 f"best (seed 0): {'; '.join(rule)}.")
    for task, row in s.items():
        parts = []
        for method in METHODS:
            knobs = row[method]["knobs"]
            default = knobs["default"]
            for name, k in knobs.items():
                if name == "default":
                    continue
                text = f"{METHOD_NAMES[method]} {name} {k['validation'] - default['validation']:+.3f} (seed 0)"
                if k["test"] is not None and default["test"] is not None:
                    text += (f", test {_loss(k['test'])} against {_loss(default['test'])}: "
                             f"{verdict(k['test'], default['test'])}")
                parts.append(text)
        lines.append(f"- **Knobs, {TASK_NAMES[task]}** (best validation loss against the default knobs' best; test "
                     f"where both ran on the seeds): {'; '.join(parts)}.")
    gaps = []
    for task, row in s.items():
        b = row["birder"]["knobs"][row["birder"]["chosen"]]["test"]
        a = row["adamw"]["knobs"][row["adamw"]["chosen"]]["test"]
        gaps.append(f"{TASK_NAMES[task]} {_loss(b)} against {_loss(a)} ({verdict(b, a)})")
    lines.append(f"- **Against AdamW tuned the same way** (each method's chosen setting, test loss): "
                 f"{'; '.join(gaps)}.")
    return "\n".join(lines)


def readme_snippet(result: dict) -> str:
    """The README's short version: the lr range and each task's result, rendered from the JSON."""
    s = summary(result)
    low, high = lr_range(result)
    tasks = []
    for task, row in s.items():
        b = row["birder"]["knobs"][row["birder"]["chosen"]]["test"]
        a = row["adamw"]["knobs"][row["adamw"]["chosen"]]["test"]
        tasks.append(f"{TASK_NAMES[task]} {b['mean']:.3f} against {a['mean']:.3f} ({verdict(b, a)})")
    multiples = ", ".join(f"{m:.2g}x" for m in sweep_multiples(result))
    helped = [f"{row['birder']['chosen']} on the {TASK_NAMES[task]}" for task, row in s.items()
              if row["birder"]["chosen"] != "default" and verdict(
                  row["birder"]["knobs"][row["birder"]["chosen"]]["test"],
                  row["birder"]["knobs"]["default"]["test"]) == "lower, beyond the seeds' spread"]
    knobs = (f" Birder's knobs that helped beyond the seeds' spread (beta: 0.8 for 0.95; emb x10: 10x lr for the "
             f"embedding tables): {'; '.join(helped)}." if helped else "")
    return (f"**Convergence** ([docs/convergence.md](docs/convergence.md)): on {len(s)} small tasks with real data "
            f"({', '.join(TASK_NAMES[t] for t in s)}), each method tuned with the same sweep, Birder's best lr fell "
            f"between {low:.2g}x and {high:.2g}x AdamW's best ({_fixed_ratio(low, high)}): sweep Birder's lr at "
            f"{multiples} your tuned AdamW lr.{knobs} Held-out loss, Birder against AdamW tuned the same way "
            f"(3 seeds): {'; '.join(tasks)}.")


def plot(result: dict, path: Path) -> Path:
    """Top, per task: the sweep (final validation loss against lr, seed 0) of each method and knob setting, each
    method's chosen setting starred. Bottom: the final seeds' held-out loss during training (mean and range) at each
    method's chosen setting (solid) and its best default-knob setting (dashed) where that differs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, records = summary(result), result["records"]
    tasks = list(result["tasks"])
    fig, axes = plt.subplots(2, len(tasks), figsize=(5.3 * len(tasks), 9), squeeze=False)
    styles = {"default": "-", "beta": "--", "emb x10": ":", "emb x10 + beta": "-."}
    markers = {"default": "o", "beta": "s", "emb x10": "^", "emb x10 + beta": "D"}
    colors = {"adamw": "C0", "birder": "C3"}
    for column, task in enumerate(tasks):
        sweep_ax, curve_ax = axes[0][column], axes[1][column]
        scale = "linear" if task == "lm" else "log"
        for method in METHODS:
            for knobs in result["task_knobs"][task]:
                runs = series(records, task, method, knobs)
                sweep_ax.plot([r["lr"] for r in runs], [r["validation"]["loss"] for r in runs], styles[knobs],
                              marker=markers[knobs], ms=4, color=colors[method], alpha=0.85,
                              label=f"{METHOD_NAMES[method]}, {knobs}")
            row = s[task][method]
            chosen = row["knobs"][row["chosen"]]
            sweep_ax.plot([chosen["lr"]], [chosen["validation"]], "*", ms=16, color=colors[method], mec="k", zorder=5)
            for knobs in dict.fromkeys((row["chosen"], "default")):
                k = row["knobs"][knobs]
                finals = [r for r in records if r["phase"] == "final" and (r["task"], r["method"], r["knobs"], r["lr"])
                          == (task, method, knobs, k["lr"])]
                steps = [p["step"] for p in finals[0]["curve"]]
                losses = np.array([[p["loss"] for p in r["curve"]] for r in finals])
                curve_ax.plot(steps, losses.mean(0), "-" if knobs == row["chosen"] else "--", marker="o", ms=3,
                              color=colors[method], label=f"{METHOD_NAMES[method]}, {knobs}, lr {k['lr']:g}")
                curve_ax.fill_between(steps, losses.min(0), losses.max(0), color=colors[method], alpha=0.15)
        losses = [r["validation"]["loss"] for r in records if r["phase"] == "sweep" and r["task"] == task
                  and math.isfinite(r["validation"]["loss"])]
        top = min(max(losses), min(losses) + 1.0 if scale == "linear" else 5 * min(losses))
        sweep_ax.set(xscale="log", yscale=scale, ylim=(None, top), xlabel="base learning rate",
                     ylabel="final validation loss (seed 0)",
                     title=f"{TASK_NAMES[task]}: Birder's best lr = {s[task]['ratio_chosen']:.2g}x AdamW's")
        sweep_ax.legend(fontsize=7)
        unit = {"digits": "nats per image", "lm": "nats per byte", "image": "MSE, standardized RGB"}[task]
        curve_ax.set(yscale=scale, xlabel="step", ylabel=f"test loss ({unit})",
                     title=f"{TASK_NAMES[task]}: {len(result['budget']['seeds'])} seeds, mean and range")
        curve_ax.legend(fontsize=7)
    fig.suptitle("Same-budget lr sweeps (top; star: each method's chosen setting) and the chosen settings' held-out "
                 "loss (bottom)", fontsize=11)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few steps of every path (seconds; for the tests)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--out", default=None, help="the plot; every run goes beside it as .json (default: "
                        "examples/convergence_three_tasks.png; with --smoke, in the temporary directory, so that a "
                        "smoke run never replaces the committed study)")
    parser.add_argument("--progress", default=None, help="also append every run's record to this JSON-lines file")
    parser.add_argument("--render", action="store_true",
                        help="train nothing: redraw the plot and print the docs block from the JSON beside --out")
    args = parser.parse_args(argv)
    committed = Path(__file__).with_name("convergence_three_tasks.png")
    out = Path(args.out) if args.out else Path(tempfile.gettempdir()) / committed.name if args.smoke else committed
    if args.render:
        if not out.with_suffix(".json").is_file():
            parser.error(f"--render: no study at {out.with_suffix('.json')}; run without --render first")
        result = json.loads(out.with_suffix(".json").read_text())
    else:
        mode = "smoke" if args.smoke else "study"
        result = run(SMOKE if args.smoke else STUDY, tuple(args.tasks), MAX_EXTENSIONS[mode], args.progress)
        write_text(out.with_suffix(".json"), json.dumps(result, indent=1))
    print(docs_block(result))
    print()
    print(recipe_block(result))
    print()
    print(readme_snippet(result))
    print(f"plot: {plot(result, out)}; every run: {out.with_suffix('.json')}; {result['minutes']} minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
