"""Convergence study: gpu_validation.Birder against AdamW, PowerSGD and the fp16 hook, each tuned by one sweep.

    python examples/convergence_study.py            # the committed study: 2 gloo ranks, about 15 minutes on 2 cores
    python examples/convergence_study.py --smoke    # seconds: every code path, nothing to conclude from

Two tasks with real data that installed packages ship:

- ``digits``: scikit-learn's 8x8 digits (1,797 images; 60/20/20 train/validation/test), the CNN of
  ``digits_ddp.py``, cross-entropy.
- ``lm``: a byte-level causal transformer language model (2 pre-LN blocks, d = 64, 4 heads, context 64) on the
  Python source of the installed scikit-learn package (its ``*.py`` files outside ``tests/``, sorted by path:
  about 7.7 MB of code and English docstrings at scikit-learn 1.9.1); files are assigned to train / validation
  / test by their index (every 20th from the 7th to validation, from the 13th to test), so the held-out text is
  whole unseen files.

Every run is real DDP over gloo on 2 ranks (global batch split in two). "adamw" is DDP's default all-reduce +
AdamW; "fp16" and "powersgd" are PyTorch's ``fp16_compress_hook`` and ``powerSGD_hook`` (rank 2, 10 uncompressed
steps first; one bucket, since that hook's gloo path needs it) + AdamW; "birder" is ``gpu_validation.Birder(ddp,
lr=..., weight_decay=..., gpus_per_node=1)``: two workers (2 nodes x 1 GPU), so every step crosses its 1-bit
inter-node exchange. No clipping, no scaler.

The sweep is the same for every method: each learning rate of ``LEARNING_RATES`` with each schedule of
``SCHEDULES`` (both after a linear warm-up over ``WARMUP_FRACTION`` of the steps), seed 0, judged by the final
validation loss. The chosen setting then runs with seeds 1-3 (other initial weights, data order and Birder
draws), reported on the test split as mean and sample standard deviation. Birder's chosen setting also runs
without warm-up (the ablation behind the recipe's warm-up line). The JSON beside the plot holds every run;
``readme_block`` renders the table and recipe of docs/convergence_study.md from it (a test checks it holds that text).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from digits_ddp import digits, make_cnn  # noqa: E402

from safeio.atomic import atomic_path, write_text  # noqa: E402

METHODS = ("adamw", "fp16", "powersgd", "birder")
TASKS = ("digits", "lm")
# One grid per task, the same for every method (the same budget). digits' is one notch higher: on the first run
# of the study, with the LM's grid, AdamW's best lr on digits was the grid's largest.
LEARNING_RATES = {"digits": (3e-3, 1e-2, 3e-2, 1e-1), "lm": (1e-3, 3e-3, 1e-2, 3e-2)}
SCHEDULES = ("constant", "cosine")  # after the warm-up: flat, or a cosine from lr down to 0 at the last step
WARMUP_FRACTION = 0.05
WEIGHT_DECAY = 1e-2  # decoupled, the same for every method (AdamW: lr * wd * x; Birder: line 16's lr * wd * x)
RANKS = 2


@dataclass(frozen=True)
class Budget:
    """What the study spends: steps per task, the sweep's grid, the seeds of the final runs."""

    steps: dict  # task -> optimizer steps per run
    batch_per_rank: dict  # task -> examples (digits) or sequences (lm) per rank per step
    learning_rates: dict  # task -> the sweep's learning rates
    schedules: tuple[str, ...] = SCHEDULES
    sweep_seed: int = 0
    seeds: tuple[int, ...] = (1, 2, 3)
    evaluations: int = 6  # held-out points on each final run's curve
    heldout_windows: int = 256  # lm: held-out sequences per evaluation (context 64: 16,384 predicted bytes)


STUDY = Budget(steps={"digits": 200, "lm": 300}, batch_per_rank={"digits": 32, "lm": 16},
               learning_rates=LEARNING_RATES)
SMOKE = Budget(steps={"digits": 3, "lm": 3}, batch_per_rank={"digits": 8, "lm": 2},
               learning_rates={"digits": (3e-3,), "lm": (3e-3,)},
               schedules=("cosine",), seeds=(1,), evaluations=1, heldout_windows=4)


def lr_factor(schedule: str, step: int, steps: int, warmup: int) -> float:
    """The multiplier of the base lr at ``step`` (0-based): linear warm-up over ``warmup`` steps, then
    ``constant`` (1) or ``cosine`` (from 1 to 0 at the last step)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {schedule!r}")


# ---- tasks ----

CONTEXT, WIDTH, HEADS, LAYERS = 64, 64, 4, 2


class ByteLM(nn.Module):
    """A byte-level causal transformer: byte and position embeddings, pre-LN blocks, a linear head to 256."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(256, WIDTH)
        self.position = nn.Parameter(0.02 * torch.randn(CONTEXT, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 256)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(CONTEXT), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.embed(tokens) + self.position[:n]
        h = self.blocks(h, mask=self.causal[:n, :n], is_causal=True)
        return self.head(self.norm(h))


def lm_corpus() -> tuple[dict[str, torch.Tensor], dict]:
    """scikit-learn's own Python source as bytes, split by file index; and what it is (for the record)."""
    import sklearn

    root = Path(sklearn.__file__).parent
    files = sorted(p for p in root.rglob("*.py") if "tests" not in p.relative_to(root).parts)
    parts: dict[str, list[bytes]] = {"train": [], "validation": [], "test": []}
    for i, path in enumerate(files):
        split = "validation" if i % 20 == 7 else "test" if i % 20 == 13 else "train"
        parts[split].append(path.read_bytes())
    data = {k: torch.frombuffer(bytearray(b"".join(v)), dtype=torch.uint8).long() for k, v in parts.items()}
    digest = hashlib.sha256(b"".join(b"".join(v) for v in parts.values())).hexdigest()[:16]
    facts = {"source": f"scikit-learn {sklearn.__version__}: its *.py files outside tests/", "files": len(files),
             "bytes": {k: int(v.numel()) for k, v in data.items()}, "sha256_16": digest}
    return data, facts


def digits_splits() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """digits_ddp's 80/20 split, its training part cut 75/25: 60/20/20 train / validation / test."""
    (x, y), test = digits()
    cut = int(0.75 * len(y))
    return {"train": (x[:cut], y[:cut]), "validation": (x[cut:], y[cut:]), "test": test}


class Task:
    """One task's data, model, batches and held-out evaluation (the same on every rank)."""

    def __init__(self, name: str, budget: Budget):
        self.name, self.budget = name, budget
        if name == "digits":
            self.splits = digits_splits()
            self.facts = {"source": "sklearn.datasets.load_digits", **{k: len(v[1]) for k, v in self.splits.items()}}
        else:
            self.corpus, self.facts = lm_corpus()
            windows = budget.heldout_windows
            self.heldout = {}
            for split in ("validation", "test"):  # evenly spaced windows, fixed for every run
                text = self.corpus[split]
                starts = torch.linspace(0, text.numel() - CONTEXT - 2, windows).long()
                self.heldout[split] = torch.stack([text[s:s + CONTEXT + 1] for s in starts.tolist()])

    def model(self, seed: int) -> nn.Module:
        if self.name == "digits":
            return make_cnn(seed)
        return ByteLM(seed)

    def batch(self, seed: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of the global batch at ``step`` (data order depends on the seed)."""
        per_rank = self.budget.batch_per_rank[self.name]
        generator = torch.Generator().manual_seed(seed * 100_003 + step)
        if self.name == "digits":
            x, y = self.splits["train"]
            chosen = torch.randint(0, len(y), (RANKS * per_rank,), generator=generator)
            mine = chosen[rank * per_rank:(rank + 1) * per_rank]
            return x[mine], y[mine]
        text = self.corpus["train"]
        starts = torch.randint(0, text.numel() - CONTEXT - 1, (RANKS * per_rank,), generator=generator)
        windows = torch.stack([text[s:s + CONTEXT + 1] for s in starts[rank * per_rank:(rank + 1) * per_rank]])
        return windows[:, :-1], windows[:, 1:]

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict:
        """Held-out cross-entropy (nats per image or per byte) and accuracy (of the class or the next byte)."""
        if self.name == "digits":
            x, y = self.splits[split]
        else:
            windows = self.heldout[split]
            x, y = windows[:, :-1], windows[:, 1:]
        logits = model(x)
        flat, target = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
        return {"loss": nn.functional.cross_entropy(flat, target).item(),
                "accuracy": (flat.argmax(1) == target).float().mean().item()}


# ---- one run ----

@dataclass(frozen=True)
class RunSpec:
    task: str
    method: str
    lr: float
    schedule: str
    seed: int
    warmup: bool = True
    phase: str = "sweep"  # sweep, final or ablation (birder_recipe.py adds its own)
    # Hyper-parameters the optimizers already expose (the study keeps the defaults; birder_recipe.py varies them).
    beta: float = 0.95  # Algorithm 1's beta (birder and softsign only)
    adamw_beta2: float = 0.999  # AdamW's second-moment beta (adamw, fp16 and powersgd; beta1 stays torch's 0.9)
    weight_decay: float = WEIGHT_DECAY
    decay_norms_embeddings: bool = True  # False: no weight decay on biases, LayerNorms and embeddings
    embedding_lr_scale: float = 1.0  # the byte and position embeddings' lr relative to the base lr
    warmup_fraction: float = WARMUP_FRACTION  # of the steps, when ``warmup``


def _is_embedding(name: str) -> bool:
    return name.startswith(("embed.", "position"))


def param_groups(model: nn.Module, spec: RunSpec) -> list[dict]:
    """The model's parameters in groups by the spec's decay and embedding-lr choices (one group when default)."""
    keys: dict[tuple[float, float], list[torch.Tensor]] = {}
    for name, p in model.named_parameters():
        embedding = _is_embedding(name)
        no_decay = not spec.decay_norms_embeddings and (embedding or p.ndim < 2)
        lr = spec.lr * (spec.embedding_lr_scale if embedding else 1.0)
        keys.setdefault((lr, 0.0 if no_decay else spec.weight_decay), []).append(p)
    return [{"params": params, "lr": lr, "weight_decay": decay} for (lr, decay), params in keys.items()]


class SoftSign(torch.optim.Optimizer):
    """Diagnostic, not Birder: Algorithm 1's m and b (lines 5-6, b = b-hat) on the all-reduced gradient and the
    update x -= lr * (m / (b + eps) + weight_decay * x) without the 1-bit quantizer Q or its error feedback. It
    separates what Birder's rule m/b costs from what its quantization costs."""

    def __init__(self, params, lr: float, weight_decay: float, beta: float, eps: float = 1e-8):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay, "beta": beta, "eps": eps})

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            beta = group["beta"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["m"], state["b"] = torch.zeros_like(p), torch.zeros_like(p)
                m, b = state["m"], state["b"]
                m.mul_(beta).add_(p.grad, alpha=1 - beta)
                b.mul_(beta).add_(p.grad.abs(), alpha=1 - beta)
                p.sub_(group["lr"] * (m / (b + group["eps"]) + group["weight_decay"] * p))


def _optimizer(spec: RunSpec, ddp: nn.parallel.DistributedDataParallel):
    method, groups = spec.method, param_groups(ddp.module, spec)
    if method == "birder":
        import gpu_validation

        return gpu_validation.Birder(ddp, lr=spec.lr, weight_decay=spec.weight_decay, beta=spec.beta,
                                     gpus_per_node=1, param_groups=groups if len(groups) > 1 else None)
    if method == "softsign":
        return SoftSign(groups, lr=spec.lr, weight_decay=spec.weight_decay, beta=spec.beta)
    if method == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif method == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=10)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif method != "adamw":
        raise ValueError(f"unknown method {method!r}")
    return torch.optim.AdamW(groups, lr=spec.lr, weight_decay=spec.weight_decay, betas=(0.9, spec.adamw_beta2))


def train_one(task: Task, spec: RunSpec, rank: int) -> dict | None:
    """One run on this rank (process group up); rank 0 returns its record."""
    budget = task.budget
    steps = budget.steps[task.name]
    warmup = max(1, round(spec.warmup_fraction * steps)) if spec.warmup else 0
    model = task.model(spec.seed)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=500)  # one bucket (PowerSGD's gloo path)
    opt = _optimizer(spec, ddp)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_factor(spec.schedule, step, steps, warmup))
    evaluate_at = set() if spec.phase == "sweep" else {
        round(steps * (i + 1) / budget.evaluations) for i in range(budget.evaluations)}
    curve, train_losses, started, failure = [], [], time.perf_counter(), None
    for step in range(1, steps + 1):
        x, y = task.batch(spec.seed, step, rank)
        loss = task.loss(ddp, x, y)
        loss.backward()
        try:
            opt.step()
        except RuntimeError as error:  # Birder's skip limit (non-finite gradients): the same step on every rank
            failure = f"step {step}: {error}"
            break
        opt.zero_grad()
        scheduler.step()
        train_losses.append(loss.item())
        if rank == 0 and step in evaluate_at:
            curve.append({"step": step, **task.evaluate(model, "test")})
    with torch.no_grad():
        checksum = torch.stack([p.double().sum() for p in model.parameters()]).sum().reshape(1)
    every = [torch.zeros_like(checksum) for _ in range(RANKS)]
    dist.all_gather(every, checksum)
    if rank != 0:
        return None
    tail = train_losses[-max(1, steps // 10):] or [math.nan]
    seconds = round(time.perf_counter() - started, 2)
    record = {**asdict(spec), "steps": steps, "warmup_steps": warmup, "seconds": seconds,
              "train_loss_tail": statistics.fmean(tail), "validation": task.evaluate(model, "validation"),
              "test": task.evaluate(model, "test"), "curve": curve,
              "ranks_identical": all(bool(torch.equal(every[0], c)) for c in every), "failure": failure}
    if spec.method == "birder":
        record["skipped_steps"] = opt.skipped_steps
    return record


# ---- the study ----

def choose(records: list[dict], task: str, method: str) -> dict:
    """The sweep run of (task, method) with the lowest final validation loss (a NaN loses)."""
    runs = [r for r in records if r["phase"] == "sweep" and r["task"] == task and r["method"] == method]
    return min(runs, key=lambda r: r["validation"]["loss"] if math.isfinite(r["validation"]["loss"]) else math.inf)


def study(rank: int, budget: Budget, tasks: tuple[str, ...], methods: tuple[str, ...], out: str) -> None:
    """Every run in turn on this rank; rank 0 appends each record to ``out`` (one JSON line) and prints it."""
    records: list[dict] = []
    for task_name in tasks:
        task = Task(task_name, budget)
        if rank == 0:
            with open(out, "a") as f:
                f.write(json.dumps({"task_facts": task_name, **task.facts}) + "\n")
        sweep = [RunSpec(task_name, m, lr, s, budget.sweep_seed) for m in methods
                 for lr in budget.learning_rates[task_name] for s in budget.schedules]
        records += _run_all(task, sweep, rank, out)
        chosen = _broadcast([choose(records, task_name, m) for m in methods] if rank == 0 else None)
        finals = [RunSpec(task_name, c["method"], c["lr"], c["schedule"], seed, phase="final")
                  for c in chosen for seed in budget.seeds]
        birder = [c for c in chosen if c["method"] == "birder"]
        ablation = [RunSpec(task_name, "birder", c["lr"], c["schedule"], seed, warmup=False, phase="ablation")
                    for c in birder for seed in budget.seeds]
        records += _run_all(task, finals + ablation, rank, out)


def _broadcast(value):
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _run_all(task: Task, specs: list[RunSpec], rank: int, out: str) -> list[dict]:
    done, started = [], time.monotonic()
    for i, spec in enumerate(specs, 1):
        record = train_one(task, spec, rank)
        if record is None:
            continue
        done.append(record)
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")
        left = (time.monotonic() - started) / i * (len(specs) - i)
        print(f"[{time.strftime('%H:%M:%S')} {i}/{len(specs)}, ~{left / 60:.1f} min left] "
              f"{spec.phase:>8} {spec.task:>6} {spec.method:>8} lr {spec.lr:<6g} "
              f"{spec.schedule:>8}{'' if spec.warmup else ' no-warmup'} seed {spec.seed}: validation loss "
              f"{record['validation']['loss']:.4f}, test accuracy {100 * record['test']['accuracy']:.2f}% "
              f"({record['seconds']:.1f} s)", flush=True)
    return done


def _rank_main(rank: int, store: str, budget: Budget, tasks, methods, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=RANKS,
                            timeout=timedelta(seconds=120))
    try:
        study(rank, budget, tasks, methods, out)
    finally:
        dist.destroy_process_group()


def run(budget: Budget, tasks=TASKS, methods=METHODS, progress: str | None = None) -> dict:
    """Spawn the ranks, run the study; returns everything it measured. ``progress``: also append each record
    there as it finishes (a long run keeps what it did if stopped)."""
    start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = progress or os.path.join(tmp, "records.jsonl")
        Path(out).write_text("")
        mp.start_processes(_rank_main, args=(os.path.join(tmp, "store"), budget, tuple(tasks), tuple(methods), out),
                           nprocs=RANKS, join=True, start_method=start_method)
        lines = [json.loads(line) for line in Path(out).read_text().splitlines()]
    records = [line for line in lines if "task_facts" not in line]
    facts = {line.pop("task_facts"): line for line in lines if "task_facts" in line}
    return {"budget": {**asdict(budget), "warmup_fraction": WARMUP_FRACTION, "weight_decay": WEIGHT_DECAY,
                       "ranks": RANKS}, "torch": torch.__version__, "tasks": facts, "records": records,
            "summary": summarize(records, budget.learning_rates),
            "minutes": round((time.monotonic() - started) / 60, 1)}


def _spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def summarize(records: list[dict], grids: dict) -> list[dict]:
    """Per (task, method, phase in final/ablation): the setting and the test figures over seeds; whether the
    chosen lr is at an end of the task's grid (``grids``)."""
    rows = []
    for phase in ("final", "ablation"):
        for task in TASKS:
            for method in METHODS:
                runs = [r for r in records if (r["phase"], r["task"], r["method"]) == (phase, task, method)]
                if not runs:
                    continue
                rows.append({"phase": phase, "task": task, "method": method, "lr": runs[0]["lr"],
                             "schedule": runs[0]["schedule"], "warmup": runs[0]["warmup"],
                             "seeds": [r["seed"] for r in runs],
                             "test_loss": _spread([r["test"]["loss"] for r in runs]),
                             "test_accuracy": _spread([r["test"]["accuracy"] for r in runs]),
                             "train_loss_tail": _spread([r["train_loss_tail"] for r in runs]),
                             "ranks_identical": all(r["ranks_identical"] for r in runs),
                             "lr_at_grid_edge": runs[0]["lr"] in (min(grids[task]), max(grids[task]))})
    return rows


# ---- what the README shows ----

NAMES = {"adamw": "DDP all-reduce + AdamW", "fp16": "fp16 hook + AdamW", "powersgd": "PowerSGD rank 2 + AdamW",
         "birder": "gpu_validation.Birder (2 x 1)"}


def readme_block(result: dict) -> str:
    """The README's convergence table and recipe figures, rendered from the study's JSON."""
    rows = {(r["phase"], r["task"], r["method"]): r for r in result["summary"]}
    budget = result["budget"]
    steps, seeds = budget["steps"], len(budget["seeds"])
    grids = "; ".join(f"{task}: {', '.join(f'{lr:g}' for lr in budget['learning_rates'][task])}" for task in TASKS
                      if task in result["tasks"])
    lines = [f"Sweep (seed {budget['sweep_seed']}, judged by validation loss): base lr ({grids}), each with "
             f"{' and '.join(budget['schedules'])} after a {100 * budget['warmup_fraction']:g}% linear warm-up; "
             f"weight decay {budget['weight_decay']:g}. Then seeds {', '.join(map(str, budget['seeds']))} at the "
             f"chosen setting; the whole study took {result['minutes']:g} minutes on 2 shared cores.", "",
             f"| task (test split, {seeds} seeds) | method | chosen lr, schedule | held-out loss | held-out accuracy |",
             "|---|---|---|---|---|"]
    for task, label in (("digits", f"digits CNN, {steps['digits']} steps"),
                        ("lm", f"byte LM, {steps['lm']} steps")):
        for method in METHODS:
            r = rows.get(("final", task, method))
            if r is None:
                continue
            loss, acc = r["test_loss"], r["test_accuracy"]
            lines.append(f"| {label} | {NAMES[method]} | {r['lr']:g}, {r['schedule']}"
                         f"{' (grid edge)' if r['lr_at_grid_edge'] else ''} | {loss['mean']:.3f} ± {loss['std']:.3f} "
                         f"| {100 * acc['mean']:.2f}% ± {100 * acc['std']:.2f} |")
    lines.append("")
    for task in TASKS:
        birder, adamw = rows.get(("final", task, "birder")), rows.get(("final", task, "adamw"))
        ablation = rows.get(("ablation", task, "birder"))
        if birder is None or adamw is None:
            continue
        gap = birder["test_loss"]["mean"] - adamw["test_loss"]["mean"]
        line = (f"- {task}: Birder's chosen lr is {birder['lr'] / adamw['lr']:.2g}x AdamW's ({birder['lr']:g} against "
                f"{adamw['lr']:g}; schedules {birder['schedule']} and {adamw['schedule']}); its held-out loss is "
                f"{gap:+.3f} from AdamW's")
        if ablation is not None:
            line += (f"; without warm-up it is {ablation['test_loss']['mean']:.3f} ± {ablation['test_loss']['std']:.3f}"
                     f" (with: {birder['test_loss']['mean']:.3f})")
        lines.append(line + ".")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """Per task: the sweep (validation loss against lr, per schedule) and the final runs' held-out curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = result["records"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    colors = {m: f"C{i}" for i, m in enumerate(METHODS)}
    for row, task in enumerate(TASKS):
        sweep_ax, curve_ax = axes[row]
        for method in METHODS:
            for schedule, style in (("constant", "--"), ("cosine", "-")):
                runs = sorted((r for r in records if (r["phase"], r["task"], r["method"], r["schedule"]) ==
                               ("sweep", task, method, schedule)), key=lambda r: r["lr"])
                if runs:
                    sweep_ax.plot([r["lr"] for r in runs], [r["validation"]["loss"] for r in runs], style, marker="o",
                                  ms=4, color=colors[method], label=f"{method}, {schedule}")
            finals = [r for r in records if (r["phase"], r["task"], r["method"]) == ("final", task, method)]
            if finals and finals[0]["curve"]:
                steps = [p["step"] for p in finals[0]["curve"]]
                losses = np.array([[p["loss"] for p in r["curve"]] for r in finals])
                mean = losses.mean(0)
                curve_ax.plot(steps, mean, "o-", ms=3, color=colors[method],
                              label=f"{method} (lr {finals[0]['lr']:g}, {finals[0]['schedule']})")
                curve_ax.fill_between(steps, losses.min(0), losses.max(0), color=colors[method], alpha=0.2)
        title = "digits CNN" if task == "digits" else "byte LM (scikit-learn source)"
        scale = "log" if task == "digits" else "linear"
        sweep_ax.set(xscale="log", yscale=scale, xlabel="base learning rate", ylabel="final validation loss",
                     title=f"{title}: sweep, seed {result['budget']['sweep_seed']}")
        sweep_ax.legend(fontsize=7, ncol=2)
        unit = "image" if task == "digits" else "byte"
        curve_ax.set(yscale=scale, xlabel="step", ylabel=f"test loss, mean and range (nats per {unit})",
                     title=f"{title}: chosen settings, {len(result['budget']['seeds'])} seeds")
        curve_ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few steps of every path (seconds; for the tests)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--out", default=str(Path(__file__).with_name("convergence_study.png")),
                        help="the plot; the figures go beside it as .json")
    parser.add_argument("--progress", default=None, help="also append every run's record to this JSON-lines file")
    parser.add_argument("--render", action="store_true",
                        help="train nothing: redraw the plot and print the README block from the JSON beside --out")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.render:
        result = json.loads(out.with_suffix(".json").read_text())
    else:
        result = run(SMOKE if args.smoke else STUDY, tuple(args.tasks), METHODS, args.progress)
        write_text(out.with_suffix(".json"), json.dumps(result, indent=1))
    print(readme_block(result))
    print(f"plot: {plot(result, out)}; figures: {out.with_suffix('.json')}; {result['minutes']} minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
