"""Why Birder lags AdamW on the convergence study's byte LM, and which of its exposed hyper-parameters help.

    python examples/birder_recipe.py              # the committed exploration: about 15 minutes on 2 cores
    python examples/birder_recipe.py --smoke      # seconds: every variant for 3 steps, nothing to conclude from
    python examples/birder_recipe.py --render     # train nothing: the README paragraph and the plot from the JSON

The model, data, steps, batch and DDP setup are ``convergence_study.py``'s LM task (2 gloo ranks, 300 steps). The
algorithm is not changed: each variant moves one hyper-parameter ``gpu_validation.Birder`` already exposes (lr,
beta, weight decay, per-group lr / decay, warm-up) away from a base setting. T0 (Algorithm 1 line 7's
full-precision-b phase) is not exposed by ``gpu_validation.Birder`` (it runs b = b-hat), so it is not tried.
Two diagnostics that are not Birder run beside: ``softsign`` (Algorithm 1's m/b without the 1-bit quantizer, on
the all-reduced gradient; ``convergence_study.SoftSign``) tells apart what the rule m/b costs from what the
quantization costs, and AdamW at the study's chosen setting gives the same-seed target.

Screening is one seed (0), judged on the validation split, as the study's sweep; the variants that beat the base
by more than ``SCREEN_MARGIN`` then run with the study's three final seeds and are reported on the test split
beside the base's three seeds; their combination (the recipe) runs on those seeds and through the study's own sweep,
and AdamW at the study's setting gets the recipe's embedding lr (``--add-adamw-check`` adds only that to a stored
JSON). The JSON beside holds every run; ``readme_block`` renders the README paragraph, ``plot`` the PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import convergence_study as cs  # noqa: E402

from safeio.atomic import write_text  # noqa: E402

# The base: the study's chosen Birder setting for the LM (lr 0.003, constant) without warm-up (its ablation was
# lower on all three seeds).
BASE = cs.RunSpec("lm", "birder", 3e-3, "constant", seed=0, warmup=False, phase="screen")
# name -> the fields that differ from BASE (one change each; the diagnostics change the method).
VARIANTS: dict[str, dict] = {
    "base": {},
    "beta 0.9": {"beta": 0.9},
    "beta 0.99": {"beta": 0.99},
    "beta 0.8": {"beta": 0.8},
    "warm-up 5%": {"warmup": True},
    "warm-up 20%": {"warmup": True, "warmup_fraction": 0.2},
    "lr 0.002": {"lr": 2e-3},
    "lr 0.005": {"lr": 5e-3},
    "no decay on norms, biases, embeddings": {"decay_norms_embeddings": False},
    "no weight decay": {"weight_decay": 0.0},
    "embeddings lr x3": {"embedding_lr_scale": 3.0},
    "embeddings lr x10": {"embedding_lr_scale": 10.0},
    "embeddings lr x1/3": {"embedding_lr_scale": 1 / 3},
    "softsign (m/b unquantized) lr 0.003": {"method": "softsign"},
    "softsign (m/b unquantized) lr 0.01": {"method": "softsign", "lr": 1e-2},
    "AdamW lr 0.01, no warm-up": {"method": "adamw", "lr": 1e-2},
}
DIAGNOSTICS = ("softsign", "adamw")  # not Birder: never promoted to the recipe
SCREEN_MARGIN = 0.02  # nats/byte on validation, one seed: the final seeds' spread of Birder's test loss is ~0.013
FINAL_SEEDS = (1, 2, 3)


def _rank_main(rank: int, store: str, budget: cs.Budget, names: tuple[str, ...], out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=cs.RANKS,
                            timeout=timedelta(seconds=120))
    try:
        task = cs.Task("lm", budget)
        records = cs._run_all(task, [replace(BASE, **VARIANTS[name]) for name in names], rank, out)
        settings = _broadcast(final_settings(records, names) if rank == 0 else None)
        distinct = [c for i, c in enumerate(settings.values()) if c not in list(settings.values())[:i]]
        finals = [replace(BASE, **changes, seed=seed, phase="final") for changes in distinct
                  for seed in budget.seeds]
        cs._run_all(task, finals, rank, out)
        # The combined recipe through the study's own sweep (its grid, schedules and warm-up), then its seeds.
        recipe = {k: v for k, v in settings["recipe"].items() if k not in ("lr", "warmup", "warmup_fraction")}
        sweep = [replace(BASE, **recipe, lr=lr, schedule=schedule, warmup=True, phase="sweep")
                 for lr in budget.learning_rates["lm"] for schedule in budget.schedules]
        swept = cs._run_all(task, sweep, rank, out)
        chosen = _broadcast(min(range(len(sweep)), key=lambda i: swept[i]["validation"]["loss"]) if rank == 0
                            else None)
        cs._run_all(task, [replace(sweep[chosen], seed=seed, phase="sweep final") for seed in budget.seeds],
                    rank, out)
        cs._run_all(task, adamw_check(settings["recipe"], budget.seeds), rank, out)
    finally:
        dist.destroy_process_group()


# The study's chosen AdamW setting for the LM (lr 0.01, constant, with its warm-up; a test checks it is).
ADAMW = cs.RunSpec("lm", "adamw", 1e-2, "constant", seed=0, warmup=True, phase="adamw check")


def adamw_check(recipe: dict, seeds: tuple[int, ...]) -> list[cs.RunSpec]:
    """AdamW at the study's setting with the recipe's embedding lr: does AdamW gain from it too?"""
    return [replace(ADAMW, seed=seed, embedding_lr_scale=recipe.get("embedding_lr_scale", 1.0)) for seed in seeds]


def _rank_check(rank: int, store: str, budget: cs.Budget, recipe: dict, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=cs.RANKS,
                            timeout=timedelta(seconds=120))
    try:
        cs._run_all(cs.Task("lm", budget), adamw_check(recipe, budget.seeds), rank, out)
    finally:
        dist.destroy_process_group()


def add_adamw_check(budget: cs.Budget, result: dict) -> dict:
    """Run only the AdamW check for a stored result (made before the check existed) and add its records."""
    start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.jsonl")
        Path(out).write_text("")
        mp.start_processes(_rank_check, args=(os.path.join(tmp, "store"), budget, result["settings"]["recipe"], out),
                           nprocs=cs.RANKS, join=True, start_method=start_method)
        records = [json.loads(line) for line in Path(out).read_text().splitlines()]
    kept = [r for r in result["records"] if r["phase"] != "adamw check"]
    minutes = round(result["minutes"] + (time.monotonic() - started) / 60, 1)
    return {**result, "records": kept + records, "minutes": minutes}


def _broadcast(value):
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def promote(records: list[dict], names: tuple[str, ...]) -> list[str]:
    """The Birder variants whose validation loss beats the base's by more than ``SCREEN_MARGIN``, best first."""
    loss = {name: r["validation"]["loss"] for name, r in zip(names, records, strict=True)}
    return sorted((name for name in names if VARIANTS[name].get("method") not in DIAGNOSTICS
                   and loss[name] < loss["base"] - SCREEN_MARGIN), key=loss.get)


def final_settings(records: list[dict], names: tuple[str, ...]) -> dict[str, dict]:
    """What runs on the final seeds: the base, each promoted variant, and the recipe (the promoted changes
    together; where two set the same field, the better one's value)."""
    promoted = promote(records, names)
    recipe: dict = {}
    for name in reversed(promoted):
        recipe.update(VARIANTS[name])
    return {"base": {}, **{name: VARIANTS[name] for name in promoted}, "recipe": recipe}


def run(budget: cs.Budget, names: tuple[str, ...]) -> dict:
    start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.jsonl")
        Path(out).write_text("")
        mp.start_processes(_rank_main, args=(os.path.join(tmp, "store"), budget, names, out), nprocs=cs.RANKS,
                           join=True, start_method=start_method)
        records = [json.loads(line) for line in Path(out).read_text().splitlines()]
    screen = dict(zip(names, [r for r in records if r["phase"] == "screen"], strict=True))
    return {"steps": budget.steps["lm"], "batch_per_rank": budget.batch_per_rank["lm"],
            "variants": {name: VARIANTS[name] for name in names}, "screen_margin": SCREEN_MARGIN,
            "screen": screen, "settings": final_settings(list(screen.values()), names),
            "learning_rates": budget.learning_rates["lm"], "schedules": budget.schedules, "seeds": budget.seeds,
            "records": [r for r in records if r["phase"] != "screen"], "torch": torch.__version__,
            "minutes": round((time.monotonic() - started) / 60, 1)}


def _spread(records: list[dict]) -> dict:
    losses = [r["test"]["loss"] for r in records]
    return {"seeds": len(losses), "mean": statistics.fmean(losses),
            "std": statistics.stdev(losses) if len(losses) > 1 else 0.0}


def final_rows(result: dict) -> dict[str, dict]:
    """Per final setting (base, the promoted variants, the recipe): test loss over the final seeds."""
    rows, defaults = {}, vars(BASE)
    for name, changes in result["settings"].items():
        spec = vars(replace(BASE, **changes))
        # A field added to RunSpec after a record was made is absent from it: that run had the field's default.
        rows[name] = _spread([r for r in result["records"] if r["phase"] == "final" and all(
            r.get(k, defaults[k]) == v for k, v in spec.items() if k not in ("seed", "phase"))])
    return rows


def swept(result: dict) -> tuple[dict, dict]:
    """The recipe's sweep run chosen by validation loss, and its seeds' test loss."""
    sweep = [r for r in result["records"] if r["phase"] == "sweep"]
    chosen = min(sweep, key=lambda r: r["validation"]["loss"])
    return chosen, _spread([r for r in result["records"] if r["phase"] == "sweep final"])


def readme_block(result: dict) -> str:
    """The README's tables of the screen, the seeds and the recipe's sweep, rendered from the JSON."""
    screen, base = result["screen"], result["screen"]["base"]["validation"]["loss"]
    lines = [f"Screen: one seed (0), {result['steps']} steps, validation loss (nats/byte); each row changes one thing "
             f"from the base (Birder lr {BASE.lr:g}, constant, no warm-up, beta {BASE.beta:g}, weight decay "
             f"{BASE.weight_decay:g} on every parameter). Rows marked * are diagnostics, not Birder. The whole "
             f"exploration took {result['minutes']:g} minutes on 2 shared cores.", "",
             "| setting | validation loss | vs base |", "|---|---|---|"]
    for name, r in screen.items():
        star = " *" if result["variants"][name].get("method") in DIAGNOSTICS else ""
        loss = r["validation"]["loss"]
        lines.append(f"| {name}{star} | {loss:.3f} | {loss - base:+.3f} |")
    settings = result["settings"]
    promoted = [name for name in settings if name not in ("base", "recipe")]
    recipe = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings["recipe"].items())
    lines += ["", f"Better than the base by more than {result['screen_margin']:g} on the screen: "
              f"{', '.join(promoted) if promoted else 'none'}; the recipe combines them ({recipe or 'the base'}). "
              f"Test loss on seeds {', '.join(map(str, result['seeds']))} (the study's final seeds):", "",
              "| setting (lr 0.003, constant, no warm-up unless named) | held-out loss |", "|---|---|"]
    for name, r in final_rows(result).items():
        lines.append(f"| {name} | {r['mean']:.3f} ± {r['std']:.3f} ({r['seeds']} seeds) |")
    chosen, seeds = swept(result)
    check = _spread([r for r in result["records"] if r["phase"] == "adamw check"])
    lines += ["", f"The recipe through the study's sweep (lr {', '.join(f'{lr:g}' for lr in result['learning_rates'])}"
              f", {' and '.join(result['schedules'])}, 5% warm-up, seed 0) chose lr {chosen['lr']:g}, "
              f"{chosen['schedule']}; on seeds {', '.join(map(str, result['seeds']))} its held-out loss is "
              f"{seeds['mean']:.3f} ± {seeds['std']:.3f}. AdamW at the study's setting (lr {ADAMW.lr:g}, "
              f"{ADAMW.schedule}, warm-up) with the same embedding lr "
              f"(x{result['settings']['recipe'].get('embedding_lr_scale', 1.0):g}): {check['mean']:.3f} ± "
              f"{check['std']:.3f}."]
    return "\n".join(lines)


def plot(result: dict, study: dict | None, path: Path) -> Path:
    """Left: the screen (validation loss per setting, one seed). Right: the final seeds' test loss per setting,
    with the study's AdamW and Birder (its chosen setting) as lines when ``study`` (its JSON) is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    names = list(result["screen"])
    losses = [result["screen"][n]["validation"]["loss"] for n in names]
    colors = ["0.6" if result["variants"][n].get("method") in DIAGNOSTICS else "C3" for n in names]
    left.barh(range(len(names)), losses, color=colors)
    left.axvline(result["screen"]["base"]["validation"]["loss"], color="k", lw=1, ls="--", label="base")
    left.set(yticks=range(len(names)), yticklabels=[n + (" *" if c == "0.6" else "") for n, c in zip(names, colors,
                                                                                                     strict=True)],
             xlim=(min(losses) - 0.1, max(losses) + 0.05), xlabel="validation loss (nats/byte), seed 0",
             title=f"screen: one change at a time ({result['steps']} steps; * = diagnostic, not Birder)")
    left.invert_yaxis()
    left.legend(fontsize=8)
    rows = final_rows(result)
    chosen, seeds = swept(result)
    recipe = ", ".join(f"{k} {v:g}" for k, v in result["settings"]["recipe"].items())
    labels = [f"{n}\n({recipe})" if n == "recipe" else n for n in rows]
    labels.append(f"recipe via the study's sweep\n(lr {chosen['lr']:g}, {chosen['schedule']})")
    spreads = [*rows.values(), seeds]
    right.errorbar([r["mean"] for r in spreads], range(len(spreads)), xerr=[r["std"] for r in spreads], fmt="o",
                   color="C3", capsize=3)
    check = [r for r in result["records"] if r["phase"] == "adamw check"]
    if check:
        spread = _spread(check)
        right.errorbar([spread["mean"]], [len(spreads)], xerr=[spread["std"]], fmt="s", color="C0", capsize=3)
        labels.append(f"AdamW (study's setting),\nembeddings lr x{check[0]['embedding_lr_scale']:g}")
        spreads.append(spread)
    if study is not None:
        summary = {(r["phase"], r["task"], r["method"]): r["test_loss"] for r in study["summary"]}
        for key, color, label in ((("final", "lm", "adamw"), "C0", "study: AdamW"),
                                  (("final", "lm", "birder"), "C3", "study: Birder")):
            right.axvspan(summary[key]["mean"] - summary[key]["std"], summary[key]["mean"] + summary[key]["std"],
                          color=color, alpha=0.2, label=f"{label} (mean ± sd)")
        right.legend(fontsize=8)
    right.set(yticks=range(len(spreads)), yticklabels=labels, xlabel="test loss (nats/byte), mean ± sd",
              title=f"seeds {', '.join(map(str, result['seeds']))}")
    right.invert_yaxis()
    fig.tight_layout()
    with cs.atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path


SMOKE = replace(cs.SMOKE, seeds=(1,))
STUDY = replace(cs.STUDY, seeds=FINAL_SEEDS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="3 steps of every variant (seconds; for the tests)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("birder_recipe.json")))
    parser.add_argument("--render", action="store_true", help="train nothing: print the README block from --out")
    parser.add_argument("--add-adamw-check", action="store_true",
                        help="train only the AdamW check and add it to the JSON at --out")
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=tuple(VARIANTS),
                        help="screen only these (the base always runs)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.render:
        result = json.loads(out.read_text())
    elif args.add_adamw_check:
        result = add_adamw_check(SMOKE if args.smoke else STUDY, json.loads(out.read_text()))
        write_text(out, json.dumps(result, indent=1))
    else:
        names = ("base", *(name for name in args.variants if name != "base"))
        result = run(SMOKE if args.smoke else STUDY, names)
        write_text(out, json.dumps(result, indent=1))
    print(readme_block(result))
    study = out.parent / "convergence_study.json"
    print(f"plot: {plot(result, json.loads(study.read_text()) if study.exists() else None, out.with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
