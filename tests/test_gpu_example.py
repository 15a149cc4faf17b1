"""The training example in examples/ runs as a user runs it (a tiny version: 2 ranks, 3 steps per method)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from doc_text import prose

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits_ddp.py"


def test_digits_example_trains_birder_and_adamw_and_plots(tmp_path):
    out = tmp_path / "digits.png"
    done = subprocess.run([sys.executable, str(EXAMPLE), "--ranks", "2", "--epochs", "1", "--max-steps", "3",
                           "--methods", "birder", "adamw", "--out", str(out)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.with_suffix(".json").read_text())
    assert [r["method"] for r in figures["results"]] == ["birder", "adamw"]
    for r in figures["results"]:
        assert r["steps"] == 3 and r["median_step_ms"] > 0
        assert 0.0 <= r["history"][-1]["test_accuracy"] <= 1.0 and r["history"][-1]["train_loss"] > 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


STUDY = EXAMPLE.with_name("convergence_study.py")


def _example_module(path: Path):
    """An example script imported as a module under its own name (its dataclasses look their module up there);
    the scripts it imports (convergence_study) are loaded first the same way."""
    import importlib.util

    if path != STUDY:
        _example_module(STUDY)
    if path.stem not in sys.modules:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    return sys.modules[path.stem]


def _study_module():
    return _example_module(STUDY)


def test_convergence_study_smoke_runs_every_method_on_both_tasks(tmp_path):
    """The study script end to end at its smoke budget (3 steps a run): every phase, method and task recorded,
    the ranks identical, the table and the plot made. Nothing is concluded from these figures."""
    out = tmp_path / "study.png"
    done = subprocess.run([sys.executable, str(STUDY), "--smoke", "--out", str(out)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.with_suffix(".json").read_text())
    study = _study_module()
    runs = {(r["phase"], r["task"], r["method"]) for r in result["records"]}
    assert runs == {(phase, task, method) for phase in ("sweep", "final") for task in study.TASKS
                    for method in study.METHODS} | {("ablation", task, "birder") for task in study.TASKS}
    assert all(r["ranks_identical"] and r["failure"] is None and r["steps"] == 3 for r in result["records"])
    assert result["tasks"]["lm"]["source"].startswith("scikit-learn") and result["tasks"]["lm"]["bytes"]["test"] > 0
    assert "| byte LM, 3 steps | gpu_validation.Birder (2 x 1) |" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lr_schedules_warm_up_then_hold_or_decay_to_zero():
    study = _study_module()
    factors = [study.lr_factor("cosine", s, 100, 5) for s in range(100)]
    assert factors[:5] == [0.2, 0.4, 0.6, 0.8, 1.0] and factors[5] == 1.0
    assert all(a >= b for a, b in zip(factors[4:], factors[5:], strict=False)) and factors[-1] < 1e-3
    assert {study.lr_factor("constant", s, 100, 5) for s in range(4, 100)} == {1.0}
    assert study.lr_factor("cosine", 0, 100, 0) == 1.0



def test_readme_convergence_figures_are_the_committed_studys():
    """The docs' table and recipe lines are ``readme_block`` of the committed JSON, and the JSON is the full
    study (its budget, every run's ranks identical), not a smoke run."""
    study = _study_module()
    result = json.loads(STUDY.with_suffix(".json").read_text())
    assert result["budget"]["steps"] == study.STUDY.steps and len(result["budget"]["seeds"]) == 3
    assert all(r["ranks_identical"] for r in result["records"])
    readme = (STUDY.parents[1] / "docs" / "convergence_study.md").read_text()
    assert study.readme_block(result) in readme


def test_readme_convergence_sentences_hold_for_the_committed_study():
    """Each qualitative sentence of docs/convergence_study.md's reading and recipe, checked on the committed JSON."""
    result = json.loads(STUDY.with_suffix(".json").read_text())
    rows = {(r["phase"], r["task"], r["method"]): r for r in result["summary"]}

    def loss(task, method, phase="final"):
        return rows[(phase, task, method)]["test_loss"]

    birder, adamw = loss("digits", "birder"), loss("digits", "adamw")  # digits: within the seeds' spread
    assert abs(birder["mean"] - adamw["mean"]) < birder["std"] + adamw["std"]
    lm = {m: loss("lm", m)["mean"] for m in ("adamw", "fp16", "powersgd", "birder")}  # the LM: behind
    assert lm["birder"] > lm["powersgd"] > lm["fp16"] and lm["birder"] - max(lm["adamw"], lm["fp16"]) > 0.1
    curves = {m: [r["curve"] for r in result["records"] if (r["phase"], r["task"], r["method"]) == ("final", "lm", m)]
              for m in ("adamw", "birder")}
    gaps = [sum(b[i]["loss"] - a[i]["loss"] for a, b in zip(curves["adamw"], curves["birder"], strict=True))
            for i in (0, -1)]
    assert gaps[1] >= 0.9 * gaps[0] > 0  # the gap does not shrink over the run
    for task in ("digits", "lm"):  # lr: about a third of AdamW's
        assert 0.25 <= rows[("final", task, "birder")]["lr"] / rows[("final", task, "adamw")]["lr"] <= 0.4
    sweep = {(r["lr"], r["schedule"]): r["validation"]["loss"] for r in result["records"]
             if (r["phase"], r["task"], r["method"]) == ("sweep", "digits", "birder")}
    chosen = rows[("final", "digits", "birder")]
    assert chosen["schedule"] == "cosine" and sweep[(chosen["lr"], "constant")] > 2 * sweep[(chosen["lr"], "cosine")]
    assert {rows[("final", "lm", m)]["schedule"] for m in ("adamw", "fp16", "birder")} == {"constant"}
    digits_off, lm_off = loss("digits", "birder", "ablation"), loss("lm", "birder", "ablation")  # warm-up
    assert abs(digits_off["mean"] - birder["mean"]) < digits_off["std"] + birder["std"]
    assert lm_off["mean"] < lm["birder"]


RECIPE = EXAMPLE.with_name("birder_recipe.py")


def _recipe_module():
    return _example_module(RECIPE)


def test_param_groups_split_decay_and_embedding_lr_and_default_to_one_group():
    import torch

    study = _study_module()
    model = study.ByteLM(0)
    names = {id(p): n for n, p in model.named_parameters()}
    base = study.RunSpec("lm", "birder", 3e-3, "constant", 0)
    assert study.param_groups(model, base) == [{"params": list(model.parameters()), "lr": 3e-3, "weight_decay": 0.01}]
    groups = study.param_groups(model, study.RunSpec("lm", "birder", 3e-3, "constant", 0, beta=0.9,
                                                     decay_norms_embeddings=False, embedding_lr_scale=3.0))
    by_name = {names[id(p)]: (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
    assert len(by_name) == len(names)
    assert by_name["embed.weight"] == by_name["position"] == (3e-3 * 3.0, 0.0)
    assert by_name["norm.weight"] == by_name["head.bias"] == (3e-3, 0.0) and by_name["head.weight"] == (3e-3, 0.01)
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    p.grad = torch.tensor([0.5, 4.0])
    study.SoftSign([p], lr=0.1, weight_decay=0.01, beta=0.9).step()  # m/b = sign(g) after one step
    assert torch.allclose(p.detach(), torch.tensor([1.0 - 0.1 * (1 + 0.01), -2.0 - 0.1 * (1 - 0.02)]))


def test_birder_recipe_smoke_screens_and_checks_seeds(tmp_path):
    """The recipe exploration end to end at the smoke budget (3 steps): the screen, the promotion, the final
    seeds and the README block. Nothing is concluded from these figures."""
    out = tmp_path / "recipe.json"
    done = subprocess.run([sys.executable, str(RECIPE), "--smoke", "--out", str(out), "--variants", "beta 0.9",
                           "softsign (m/b unquantized) lr 0.01"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert list(result["screen"]) == ["base", "beta 0.9", "softsign (m/b unquantized) lr 0.01"]
    assert result["screen"]["beta 0.9"]["beta"] == 0.9 and result["screen"]["base"]["beta"] == 0.95
    assert all(r["ranks_identical"] and r["failure"] is None for r in [*result["screen"].values(), *result["records"]])
    assert {r["phase"] for r in result["records"]} == {"final", "sweep", "sweep final", "adamw check"}
    assert "method" not in result["settings"]["recipe"]  # a diagnostic is never part of the recipe
    assert "| softsign (m/b unquantized) lr 0.01 * |" in done.stdout
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_recipe_figures_are_the_committed_exploration():
    recipe = _recipe_module()
    result = json.loads(RECIPE.with_suffix(".json").read_text())
    assert result["steps"] == _study_module().STUDY.steps["lm"] and list(result["variants"]) == list(recipe.VARIANTS)
    assert all(r["ranks_identical"] for r in [*result["screen"].values(), *result["records"]])
    assert recipe.readme_block(result) in (RECIPE.parents[1] / "docs" / "convergence_study.md").read_text()


def test_readme_recipe_sentences_hold_for_the_committed_exploration():
    """Each qualitative sentence of the docs' recipe and its reading, checked on the committed JSON."""
    recipe = _recipe_module()
    result = json.loads(RECIPE.with_suffix(".json").read_text())
    screen = {name: r["validation"]["loss"] for name, r in result["screen"].items()}
    base = screen["base"]
    # the quantizer's price: unquantized m/b far lower at the same lr, lower still at AdamW's
    assert screen["softsign (m/b unquantized) lr 0.01"] < screen["softsign (m/b unquantized) lr 0.003"] < base - 0.1
    share = (base - screen["softsign (m/b unquantized) lr 0.01"]) / (base - screen["AdamW lr 0.01, no warm-up"])
    assert 0.4 < share < 0.6  # "about half of the screen's gap"
    for sweep in (result["records"], json.loads(STUDY.with_suffix(".json").read_text())["records"]):
        birder = {(r["lr"], r["schedule"]): r["validation"]["loss"] for r in sweep
                  if r["phase"] == "sweep" and r["method"] == "birder" and r["task"] == "lm"}
        assert min(birder[(1e-2, s)] for s in ("constant", "cosine")) > birder[(3e-3, "constant")]
    # beta: smaller helps, 0.99 hurts; embeddings: larger lr helps, smaller does not
    assert screen["beta 0.8"] < screen["beta 0.9"] < base < screen["beta 0.99"]
    assert screen["embeddings lr x10"] < screen["embeddings lr x3"] < base <= screen["embeddings lr x1/3"]
    margin = result["screen_margin"]
    for name in ("warm-up 5%", "warm-up 20%", "lr 0.002", "lr 0.005", "no decay on norms, biases, embeddings",
                 "no weight decay"):  # change little (or hurt)
        assert screen[name] > base - margin, name
    assert screen["warm-up 5%"] > base and screen["warm-up 20%"] > base
    assert result["settings"]["recipe"] == {"beta": 0.8, "embedding_lr_scale": 10.0}
    rows = recipe.final_rows(result)
    spread = rows["base"]["mean"] - rows["base"]["std"]
    for name in ("beta 0.8", "embeddings lr x10", "recipe"):  # beyond the seeds' spread
        assert rows[name]["mean"] + rows[name]["std"] < spread, name
    assert rows["recipe"]["mean"] < min(rows[n]["mean"] for n in rows if n != "recipe")  # more than either alone
    study = {(r["phase"], r["task"], r["method"]): r for r in json.loads(STUDY.with_suffix(".json").read_text())[
        "summary"]}
    adamw = study[("final", "lm", "adamw")]["test_loss"]
    assert (recipe.ADAMW.lr, recipe.ADAMW.schedule, recipe.ADAMW.warmup) == (
        study[("final", "lm", "adamw")]["lr"], study[("final", "lm", "adamw")]["schedule"],
        study[("final", "lm", "adamw")]["warmup"])
    chosen, seeds = recipe.swept(result)
    assert abs(seeds["mean"] - adamw["mean"]) < seeds["std"] + adamw["std"]  # about AdamW's held-out loss
    assert abs(rows["base"]["mean"] - study[("ablation", "lm", "birder")]["test_loss"]["mean"]) < 1e-9
    check = recipe._spread([r for r in result["records"] if r["phase"] == "adamw check"])
    assert check["mean"] + check["std"] < min(seeds["mean"], adamw["mean"]) - seeds["std"]  # Birder still behind
    readme = prose("docs", "convergence_study.md")
    assert f"the same 10x embedding lr lowers AdamW too, to {check['mean']:.3f} ± {check['std']:.3f}" in readme
    assert (f"from {rows['base']['mean']:.3f} ± {rows['base']['std']:.3f} to about AdamW's held-out loss in the "
            f"study's table ({adamw['mean']:.3f} ± {adamw['std']:.3f})") in readme


THREE = EXAMPLE.with_name("convergence_three_tasks.py")


def _three_module():
    return _example_module(THREE)


def test_three_task_study_smoke_sweeps_extends_and_runs_final_seeds(tmp_path):
    """The three-task study end to end at its smoke budget (3 steps a run) on its new task, the image regression
    (digits and the LM run through convergence_study's Task, covered by its smoke test; the LM's embedding groups
    by test_param_groups_split_decay_and_embedding_lr_and_default_to_one_group): both knob settings of both
    methods, the grid extended on both sides of its single point, the final seeds, the rendered blocks, the plot."""
    three = _three_module()
    out = tmp_path / "three.png"
    done = subprocess.run([sys.executable, str(THREE), "--smoke", "--tasks", "image", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.with_suffix(".json").read_text())
    assert all(r["ranks_identical"] and r["failure"] is None and r["steps"] == 3 for r in result["records"])
    for task in ("image",):
        (lr,) = three.SMOKE.learning_rates[task]
        for method in three.METHODS:
            for knobs in three.TASK_KNOBS[task]:
                runs = three.series(result["records"], task, method, knobs)
                assert [r["lr"] for r in runs] == [lr / 3, lr, lr * 3], (task, method, knobs)
                assert all(r[k] == v for r in runs for k, v in three.KNOBS[knobs][method].items())
            assert {r["phase"] for r in result["records"] if (r["task"], r["method"]) == (task, method)} == {
                "sweep", "final"}
    assert result["tasks"]["image"]["pixels"] == [107, 160] and 0 < result["records"][0]["test"]["loss"] < 10
    assert "| image regression, 3 steps | Birder | default" in done.stdout and "- **The old rule**" in done.stdout
    assert "[docs/convergence.md]" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_three_task_sweep_extends_at_an_end_and_finals_add_the_default_knobs():
    three = _three_module()

    def rec(method, knobs, lr, loss):
        return {"phase": "sweep", "task": "lm", "method": method, "knobs": knobs, "lr": lr, "failure": None,
                "validation": {"loss": loss}}

    middle = [rec("adamw", "default", lr, loss) for lr, loss in ((1e-3, 2.0), (3e-3, 1.5), (1e-2, 1.9))]
    assert three.extensions(middle) == []
    low = [rec("birder", "default", lr, loss) for lr, loss in ((1e-3, 2.0), (3e-3, 2.1), (1e-2, float("nan")))]
    assert three.extensions(low) == [1e-3 / 3] and three.extensions(low[:1]) == [1e-3 / 3, 1e-3 * 3]
    high = [*middle, rec("adamw", "beta", 1e-2, 1.0), rec("adamw", "beta", 3e-3, 1.2)]
    assert three.extensions(three.series(high, "lm", "adamw", "beta")) == [3e-2]
    records = [*high, *low, rec("birder", "beta", 1e-3, 1.9)]
    assert three.final_settings(records, "lm") == [("adamw", "beta", 1e-2), ("adamw", "default", 3e-3),
                                                   ("birder", "beta", 1e-3), ("birder", "default", 1e-3)]


DOCS = EXAMPLE.parents[1] / "docs" / "convergence.md"


def test_docs_convergence_blocks_are_the_committed_three_task_study():
    """docs/convergence.md holds ``docs_block`` and ``recipe_block`` of the committed JSON, and the JSON is the
    full study (its budget, every run finished with identical ranks), not a smoke run."""
    from dataclasses import asdict

    three = _three_module()
    result = json.loads(THREE.with_suffix(".json").read_text())
    assert {k: v for k, v in result["budget"].items() if k in asdict(three.STUDY)} == json.loads(
        json.dumps(asdict(three.STUDY)))
    assert result["budget"]["max_extensions"] == three.MAX_EXTENSIONS["study"] and list(result["tasks"]) == list(
        three.TASKS)
    assert all(r["ranks_identical"] and r["failure"] is None for r in result["records"])
    docs = DOCS.read_text()
    assert three.docs_block(result) in docs and three.recipe_block(result) in docs
    assert three.readme_snippet(result) in (EXAMPLE.parents[1] / "README.md").read_text()


def test_docs_convergence_sentences_hold_for_the_committed_three_task_study():
    """Each sentence of docs/convergence.md outside the rendered blocks, checked on the committed JSONs."""
    three = _three_module()
    result = json.loads(THREE.with_suffix(".json").read_text())
    s = three.summary(result)
    ratio = {t: row["ratio_by_knobs"] for t, row in s.items()}
    third = pytest.approx(1 / 3, rel=0.15)
    assert ratio["digits"]["default"] == third and ratio["lm"]["default"] == third and ratio["image"]["default"] == 1
    assert ratio["lm"]["emb x10"] == third and ratio["lm"]["emb x10 + beta"] == 1
    low, high = three.lr_range(result)
    assert three.sweep_multiples(result) == pytest.approx([0.1, 0.3, 1, 3]) and 0.1 < low and high < 3 < 3.3
    # Birder's LM extension found the lower end of its default series
    assert s["lm"]["birder"]["knobs"]["default"]["searched"][0] < min(three.STUDY.learning_rates["lm"])

    def final(task, method, knobs=None):
        row = s[task][method]
        return row["knobs"][knobs or row["chosen"]]

    lower = "lower, beyond the seeds' spread"
    for method in three.METHODS:  # 10x embeddings with the other beta: both methods' LM loss
        assert s["lm"][method]["chosen"] == "emb x10 + beta"
        assert three.verdict(final("lm", method)["test"], final("lm", method, "default")["test"]) == lower
    assert s["image"]["birder"]["chosen"] == "beta"
    assert three.verdict(final("image", "birder")["test"], final("image", "birder", "default")["test"]) == lower
    digits = s["digits"]["birder"]["knobs"]
    assert digits["beta"]["validation"] < digits["default"]["validation"]
    assert three.verdict(digits["beta"]["test"], digits["default"]["test"]) == "within the seeds' spread"
    adamw_digits, adamw_image = s["digits"]["adamw"]["knobs"], s["image"]["adamw"]["knobs"]  # AdamW's beta2 0.95
    assert adamw_digits["beta"]["validation"] > adamw_digits["default"]["validation"]
    assert three.verdict(adamw_image["beta"]["test"], adamw_image["default"]["test"]) == "within the seeds' spread"
    # Birder against AdamW: behind on the LM (0.19 nats) and the image (4%), within the spread on digits
    gap = {t: (final(t, "birder")["test"], final(t, "adamw")["test"]) for t in s}
    assert three.verdict(*gap["lm"]) == three.verdict(*gap["image"]) == "higher, beyond the seeds' spread"
    assert round(gap["lm"][0]["mean"] - gap["lm"][1]["mean"], 2) == 0.19
    assert round(100 * (gap["image"][0]["mean"] / gap["image"][1]["mean"] - 1)) == 4
    assert three.verdict(*gap["digits"]) == "within the seeds' spread" and gap["digits"][1]["std"] > 2 * gap[
        "digits"][0]["std"]
    rows = _recipe_module().final_rows(json.loads(RECIPE.with_suffix(".json").read_text()))  # beta alone, LM
    assert [f"{rows[k]['mean']:.3f} ± {rows[k]['std']:.3f}" for k in ("beta 0.8", "base")] == [
        "2.360 ± 0.012", "2.432 ± 0.011"]
    # the two-task study: constant beat cosine on its LM for both methods; the same runs agree to 3-4 digits at
    # small lrs and differ by up to 0.05 (LM, lr 0.03) and 0.07 (digits, lr 0.1)
    old = [r for r in json.loads(STUDY.with_suffix(".json").read_text())["records"] if r["phase"] == "sweep"]
    for method in three.METHODS:
        best = {sched: min(r["validation"]["loss"] for r in old if (r["task"], r["method"], r["schedule"]) ==
                           ("lm", method, sched)) for sched in ("constant", "cosine")}
        assert best["constant"] < best["cosine"]
    new = {(r["task"], r["method"], r["lr"]): r["validation"]["loss"] for r in result["records"]
           if r["phase"] == "sweep" and r["knobs"] == "default"}
    diff = {(r["task"], r["method"], r["lr"]): abs(r["validation"]["loss"] - new[(r["task"], r["method"], r["lr"])])
            for r in old if r["schedule"] == "cosine" and (r["task"], r["method"], r["lr"]) in new}
    assert diff[("digits", "adamw", 3e-3)] < 1e-4 and diff[("lm", "birder", 1e-3)] < 1e-3
    assert round(diff[("lm", "adamw", 3e-2)], 2) == 0.05 and round(diff[("digits", "adamw", 0.1)], 2) == 0.07
    for task, worst in (("lm", ("lm", "adamw", 3e-2)), ("digits", ("digits", "adamw", 0.1))):
        assert max(v for key, v in diff.items() if key[0] == task) == diff[worst]
