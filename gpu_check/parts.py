"""The parts of the GPU check, run in a child process of the driver: ``python -m gpu_check.parts --out OUT --device
cuda|cpu --deadline EPOCH PART...`` runs each named part in turn and writes ``OUT/parts/PART.json`` when it ends
(``OUT/parts/PART.partial.json`` as it goes, so that a part stopped at its time limit keeps what it measured).

Each part returns its figures with ``status`` (``ok``: it ran and what it checks held; ``failed``: it ran and a check
did not hold) and ``headline`` (one line for the summary, made from the figures). On ``cpu`` each part runs its CPU
form at small sizes, so the code stays exercised where there is no GPU; what needs CUDA itself is skipped there.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from pathlib import Path

from gpu_check import plan
from safeio.atomic import write_text

NCCL_ONE_GPU_PER_RANK = (
    "NCCL gives every rank of a communicator its own GPU: its transports tell peers apart by their device, and "
    "communicator set-up refuses two ranks on one GPU ('Duplicate GPU detected'). So one GPU holds one NCCL rank. "
    "gloo stages CUDA tensors through host memory and takes any number of local ranks on one GPU, so the multi-rank "
    "layouts run over gloo with CUDA tensors (Birder's kernels on the GPU, its collectives through the host), and "
    "the NCCL path runs with one rank.")


@dataclass(frozen=True)
class Context:
    out: Path
    device: str  # "cuda" or "cpu" (the CPU forms)
    deadline: float  # time.time() by which this part must end

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def seconds_left(self) -> float:
        return self.deadline - time.time()

    def progress(self, name: str, figures: dict) -> None:
        """What a part has measured so far (kept if it is stopped at its limit)."""
        write_text(self.out / "parts" / f"{name}.partial.json", json.dumps(figures, indent=1, default=str))


# ---- env ----

PACKAGES = ("torch", "numpy", "scipy", "matplotlib", "tqdm", "scikit-learn", "hypothesis", "simpy", "pytest",
            "pluggy", "iniconfig", "packaging", "pygments")


def _origin(distribution: str) -> str | None:
    try:
        files = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    site = os.environ.get("GPU_CHECK_WHEEL_SITE")
    where = str(files.locate_file(""))
    return "carried wheel" if site and where.startswith(site) else "machine"


def env(ctx: Context) -> dict:
    import torch
    import torch.distributed as dist

    pinned = next((line.split('"')[1] for line in (plan.ROOT / "pyproject.toml").read_text().splitlines()
                   if line.strip().startswith('"torch==')), None)
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = {"version": metadata.version(name), "from": _origin(name)}
        except metadata.PackageNotFoundError:
            packages[name] = None
    figures = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
               "cpus": os.cpu_count(), "torch": torch.__version__, "torch_pinned_by_project": pinned,
               "torch_cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
               "gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "packages": packages}
    if torch.cuda.is_available():
        figures["gpus"] = [{"name": torch.cuda.get_device_name(i),
                            "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 2),
                            "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
                           for i in range(torch.cuda.device_count())]
        if dist.is_nccl_available():
            version = torch.cuda.nccl.version()  # a tuple; an int in older torch
            figures["nccl_version"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        gpu = figures["gpus"][0]
        where = f"{gpu['name']} ({gpu['memory_gib']} GiB, {len(figures['gpus'])} GPU(s))"
    else:
        where = "torch sees no CUDA device"
    carried = [n for n, p in packages.items() if p and p["from"] == "carried wheel"]
    figures["headline"] = (f"{where}; torch {torch.__version__} (CUDA {torch.version.cuda}; the project pins "
                           f"{pinned}); Python {figures['python']}; from carried wheels: "
                           f"{', '.join(carried) or 'none'}")
    figures["status"] = "ok"
    return figures


# ---- cuda_tests ----

def _junit_counts(path: Path) -> dict:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    problems, skips = [], {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for tag in ("failure", "error"):
            for node in case.findall(tag):
                problems.append({"test": name, "kind": tag, "message": (node.get("message") or "")[:400]})
        for node in case.findall("skipped"):
            reason = (node.get("message") or "").removeprefix("Skipped: ")[:120]
            skips[reason] = skips.get(reason, 0) + 1
    return {**counts, "problems": problems, "skip_reasons": skips}


def cuda_tests(ctx: Context) -> dict:
    files = plan.cuda_test_files()
    xml = ctx.out / "cuda_tests.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", f"--junitxml={xml}",
               *files]
    done = subprocess.run(command, cwd=plan.ROOT, capture_output=True, text=True,
                          timeout=max(10.0, ctx.seconds_left() - 5))
    tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
    if not xml.is_file():
        return {"status": "failed", "command": " ".join(command[1:]), "exit_status": done.returncode,
                "output_tail": tail, "headline": f"pytest wrote no report (exit {done.returncode})"}
    counts = _junit_counts(xml)
    ok = done.returncode == 0 and counts["failures"] == 0 and counts["errors"] == 0
    if ctx.cuda and counts["passed"] == 0:
        ok = False  # on a GPU at least the one-GPU tests must run
    skipped = "; ".join(f"{n} skipped: {r}" for r, n in counts["skip_reasons"].items())
    return {"status": "ok" if ok else "failed", "command": " ".join(command[1:]), "exit_status": done.returncode,
            "files": files, **counts, "junit": str(xml), "output_tail": tail,
            "headline": f"{counts['passed']} passed, {counts['failures'] + counts['errors']} failed"
                        + (f" ({skipped})" if skipped else "")}


# ---- check_adapter ----

SMOKE_CHECKS = "line1_init,step_exact_draws,contract_dtypes"


def check_adapter(ctx: Context) -> dict:
    left = ctx.seconds_left()
    command = [sys.executable, "-m", "birder.cli", "check", "--impl", "gpu_validation.check_adapter", "--json",
               "--quiet", "--import-timeout", "90", "--timeout", f"{max(10, int(left - 15))}"]
    if not ctx.cuda:
        command += ["--only", SMOKE_CHECKS]
    environment = {**os.environ, "BIRDER_CHECK_DEVICE": ctx.device}  # the adapter must not fall back to the CPU
    done = subprocess.run(command, cwd=plan.ROOT, capture_output=True, text=True, env=environment,
                          timeout=max(10.0, left - 5))
    shown = " ".join(command[3:])
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"status": "failed", "command": shown, "exit_status": done.returncode,
                "output_tail": (done.stdout + done.stderr).strip().splitlines()[-15:],
                "headline": f"birder check printed no JSON (exit {done.returncode})"}
    checks = report.get("checks", [])
    failed = [{k: c.get(k) for k in ("name", "severity", "detail")} for c in checks if not c.get("passed")]
    errors = [c for c in failed if c["severity"] == "error"]
    slowest = sorted(checks, key=lambda c: -(c.get("seconds") or 0))[:3]
    return {"status": "ok" if done.returncode == 0 and report.get("passed") else "failed", "command": shown,
            "device": ctx.device, "exit_status": done.returncode, "passed": report.get("passed"),
            "checks": len(checks), "failed_checks": failed, "wall_s": report.get("wall_s"),
            "slowest": {c["name"]: c.get("seconds") for c in slowest},
            "headline": f"{len(checks) - len(failed)} of {len(checks)} checks hold on {ctx.device} tensors "
                        f"({len(errors)} errors, {len(failed) - len(errors)} warnings)"}


# ---- validate ----

def _nccl_pair_on_one_gpu(rank: int) -> float:
    """Body of a rank of the two-NCCL-ranks-on-one-GPU probe: one all-reduce on cuda:0."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    return float(x[0])


def validate(ctx: Context) -> dict:
    from gpu_validation import launch
    from gpu_validation.validate import Config, run

    if ctx.cuda:
        runs = {"gloo_cuda_2x3_hierarchical": Config(backend="gloo", device="cuda", nodes=2, gpus_per_node=3,
                                                     steps=6, resume_at=3, nonfinite_at=(4, 4), quiet=True),
                "gloo_cuda_2x2_flat": Config(backend="gloo", device="cuda", nodes=2, gpus_per_node=2, steps=4,
                                             scheme="flat", quiet=True),
                "nccl_1x1": Config(backend="nccl", nodes=1, gpus_per_node=1, steps=6, resume_at=3,
                                   nonfinite_at=(4, 0), quiet=True)}
    else:
        runs = {"gloo_cpu_1x2": Config(nodes=1, gpus_per_node=2, steps=2, quiet=True)}
    keys = ("passed", "mismatched_elements", "max_abs_diff", "ranks_identical", "backend", "device", "checked",
            "skipped_steps", "resume_identical", "executor_identical", "phases_as_scheduled", "parameters", "seconds",
            "error")
    figures: dict = {"runs": {}, "why_not_more_nccl_ranks": NCCL_ONE_GPU_PER_RANK}
    for name, cfg in runs.items():
        try:
            result = run(cfg).as_dict()
        except Exception as error:  # noqa: BLE001 - one run's failure is recorded; the others still run
            result = {"passed": False, "error": f"{type(error).__name__}: {error}"[:500]}
        figures["runs"][name] = {"ranks": cfg.world, "scheme": cfg.scheme,
                                 **{k: result[k] for k in keys if k in result}}
        ctx.progress("validate", figures)
    if ctx.cuda and ctx.seconds_left() > 70:  # what NCCL says to two ranks on one GPU, here and now
        try:
            outcome = launch.launch(_nccl_pair_on_one_gpu, (), 2, "nccl", 30.0, backstop_s=60.0)
            refused, said = bool(outcome.errors or outcome.lost), outcome.describe_failures()[:400] or None
        except Exception as error:  # noqa: BLE001 - the probe is a record, not a check
            refused, said = True, f"the launcher raised {type(error).__name__}: {error}"[:400]
        figures["nccl_two_ranks_one_gpu"] = {"refused": refused, "error": said}
    runs_done = figures["runs"].values()
    ok = all(r.get("passed") for r in runs_done)
    figures["errors"] = [f"{n}: {r.get('error') or 'differs from birder_ref (see runs)'}"
                         for n, r in figures["runs"].items() if not r.get("passed")]
    mismatched = sum(r.get("mismatched_elements") or 0 for r in runs_done)
    layouts = ", ".join(f"{n} ({r['ranks']} rank(s)): {'PASSED' if r.get('passed') else 'FAILED'}"
                        for n, r in figures["runs"].items())
    pair = figures.get("nccl_two_ranks_one_gpu")
    figures["headline"] = (f"{mismatched} elements differ from birder_ref; {layouts}"
                           + ("" if pair is None else f"; 2 NCCL ranks on one GPU: "
                              f"{'refused' if pair['refused'] else 'accepted (this NCCL allows it)'}"))
    figures["status"] = "ok" if ok else "failed"
    return figures


# ---- bench ----

def bench(ctx: Context) -> dict:
    import torch

    from birder.cli import main as birder
    from gpu_validation import torch_birder as tb
    from gpu_validation.bench import _median_seconds, copy_gbytes_per_s

    folder = ctx.out / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    if ctx.cuda:
        args = ["--backend", "nccl", "--device", "cuda", "--sizes", str(2**20), str(2**22), str(2**24),
                "--repeats", "5"]
        copy_elements = 2**26  # 256 MiB each way: far past the L2 cache
    else:
        args = ["--backend", "gloo", "--device", "cpu", "--sizes", str(2**16), "--repeats", "1"]
        copy_elements = 2**22
    argv = ["bench", *args, "--ranks", "1", "--json", "--quiet", "--out", str(folder / "cluster_profile.toml")]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = birder(argv)
    if status != 0:
        return {"status": "failed", "command": "birder " + " ".join(argv), "exit_status": status,
                "headline": f"birder bench exited {status}"}
    result = json.loads(printed.getvalue())
    device = torch.device(ctx.device)
    copy = copy_gbytes_per_s(device, copy_elements)
    n = copy_elements
    y = torch.randn(n, device=device)
    u = torch.rand(n, device=device)
    alone_s = _median_seconds(lambda: tb.pack_signs(tb.quantize(y, u)), device, 5)
    alone = n * (4 + 4 + 1 / 8) / alone_s / 1e9  # y and u read, the packed bits written
    rows = [{"elements": k["elements"], **{f"{s}_ms": round(1e3 * k[f"{s}_s"], 3) for s in ("worker", "server",
                                                                                             "update")},
             "worker_gbytes_per_s": round(k["worker_gbytes_per_s"], 2),
             "worker_share_of_measured_copy": round(k["worker_gbytes_per_s"] / copy, 4),
             "worker_share_of_nominal_peak": round(k["worker_peak_ratio"], 4),
             "all_stages_share_of_measured_copy": round(k["gbytes_per_s"] / copy, 4)} for k in result["kernels"]]
    best = max(r["worker_share_of_measured_copy"] for r in rows)
    largest = rows[-1]
    return {"status": "ok", "command": "birder " + " ".join(argv), "device": result["device"],
            "peak_gbytes_per_s": result["peak_gbytes_per_s"], "peak_source": result["peak_source"],
            "measured_copy_gbytes_per_s": round(copy, 1), "copy_elements": copy_elements, "kernels": rows,
            "quantize_pack_alone_gbytes_per_s": round(alone, 2),
            "quantize_pack_alone_share_of_measured_copy": round(alone / copy, 4),
            "worker_share_of_measured_copy_best": best, "target_share": plan.TARGET_SHARE_OF_COPY,
            "meets_target": best >= plan.TARGET_SHARE_OF_COPY if ctx.cuda else None,
            "profile": result["profile"], "plot": result["plot"],
            "headline": f"quantize + pack (Birder's fused worker stage) "
                        f"{100 * largest['worker_share_of_measured_copy']:.1f}% of the measured copy bandwidth "
                        f"{copy:.0f} GB/s at {largest['elements']:,} elements (best {100 * best:.1f}%"
                        + (f"; goal {100 * plan.TARGET_SHARE_OF_COPY:.0f}%: "
                           f"{'met' if best >= plan.TARGET_SHARE_OF_COPY else 'not met'}" if ctx.cuda else "")
                        + f"); quantize + pack alone (eager, whole tensor) {100 * alone / copy:.1f}%"}


# ---- step_time ----

def step_time(ctx: Context) -> dict:
    from gpu_validation.bench import hook_step_seconds, step_time_row

    if ctx.cuda:  # hook_speed.py's model sizes; one NCCL rank, and ranks sharing the GPU over gloo
        layouts, widths, steps = (("1x1", "nccl"), ("2x1", "gloo"), ("2x2", "gloo")), (512, 1600), 10
    else:
        layouts, widths, steps = (("1x1", "gloo"),), (64,), 2
    figures: dict = {"rows": [], "target_ratio": 1.5}
    errors = []
    for layout, backend in layouts:
        nodes, gpus = (int(x) for x in layout.split("x"))
        for width in widths:
            if ctx.seconds_left() < 15:
                errors.append(f"{layout} {backend} width {width}: not started, the part's time is spent")
                continue
            try:
                timed = hook_step_seconds(("allreduce", "birder"), nodes, gpus, steps, width, backend=backend,
                                          device=ctx.device)
            except Exception as error:  # noqa: BLE001 - one layout's failure is recorded; the others still run
                errors.append(f"{layout} {backend} width {width}: {type(error).__name__}: {error}"[:400])
                continue
            figures["rows"].append(step_time_row(timed, layout, ("birder",), backend, ctx.device))
            ctx.progress("step_time", figures)
    figures["errors"] = errors
    figures["headline"] = "Birder's step / DDP all-reduce + AdamW: " + "; ".join(
        f"{r['layout']} {r['backend']} {r['parameters'] / 1e6:.2f} M params {r['birder_over_allreduce']}x "
        f"({r['birder_ms_per_step']} vs {r['allreduce_adamw_ms_per_step']} ms)" for r in figures["rows"]) + (
        f"; {len(errors)} layout(s) failed" if errors else "")
    figures["status"] = "failed" if errors else "ok"
    return figures


# ---- largest_model ----

def _trial(optimizer: str, layers: int, width: int, device) -> dict:
    """One training step of an MLP of ``layers`` square layers under DDP (one rank) with ``optimizer``; whether it
    fit, and the peak memory torch allocated for it (CUDA): the peak less what was still allocated before it began
    (an earlier trial's leftovers, which made the per-layer difference of two trials negative on an H200)."""
    import torch
    from torch import nn

    from gpu_validation.optimizer import Birder

    cuda = device.type == "cuda"
    before, memory = 0, {}
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        free, total = torch.cuda.mem_get_info(device)
        memory = {"free_bytes": free, "total_bytes": total}  # as the trial found the GPU
    start = time.perf_counter()
    model = ddp = opt = x = None
    try:
        model = nn.Sequential(*[nn.Linear(width, width, device=device) for _ in range(layers)])
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
        opt = Birder(ddp, lr=1e-3, gpus_per_node=1) if optimizer == "birder" else torch.optim.AdamW(
            model.parameters(), lr=1e-3)
        x = torch.randn(8, width, device=device)
        ddp(x).square().mean().backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize(device)
        fit, error = True, None
    except RuntimeError as oom:  # torch.OutOfMemoryError, or DDP's "error when running the callback" around one
        if not isinstance(oom, torch.cuda.OutOfMemoryError) and "out of memory" not in str(oom):
            raise
        fit, error = False, " ".join(str(oom).split())[:200]
    finally:
        del model, ddp, opt, x
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    peak = torch.cuda.max_memory_allocated(device) - before if cuda else None
    return {"layers": layers, "parameters": layers * (width * width + width), "fit": fit, "peak_bytes": peak,
            "seconds": round(time.perf_counter() - start, 2), **memory, **({"error": error} if error else {})}


def _trial_in_fresh_process(optimizer: str, layers: int, width: int, device, timeout_s: float) -> dict:
    """``_trial`` in a process of its own (one rank of its own process group): its peak is then its own, where in a
    shared process an earlier trial's leftovers, freed only during a later one, skewed the H200's peaks (Birder's
    per-layer bytes came out negative, then 4 B per parameter for one layer). ``seconds`` is the trial's own time;
    ``wall_s`` adds the process's start (torch, CUDA, the process group). An out-of-time or failed process is a
    RuntimeError with its last lines."""
    code = (f"from gpu_check.parts import _trial_main; _trial_main({optimizer!r}, {layers}, {width}, "
            f"{str(device)!r})")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired as late:
        raise RuntimeError(f"a {layers}-layer {optimizer} trial ran past {timeout_s:.0f} s") from late
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = " ".join((done.stderr or done.stdout).split()[-40:])
        raise RuntimeError(f"a {layers}-layer {optimizer} trial exited {done.returncode}: {tail}")
    return {**json.loads(lines[-1]), "wall_s": round(time.monotonic() - started, 2)}


def _trial_main(optimizer: str, layers: int, width: int, device_name: str) -> None:
    """The body of ``_trial_in_fresh_process``: one rank's process group, one ``_trial``, its dict as JSON."""
    import torch

    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    with _one_rank_group("nccl" if device.type == "cuda" else "gloo"):
        print(json.dumps(_trial(optimizer, layers, width, device)), flush=True)


def search_layers(attempt, predicted: int, cap: int, fits: int, max_verify: int) -> tuple[int, int | None]:
    """(most layers seen to fit, fewest seen to fail or None) after at most ``max_verify`` calls of
    ``attempt(layers)`` (True: fits, False: fails, None: no time, stop) from ``predicted``, never above ``cap``,
    ``fits`` layers known to fit: upward one layer at a time while they fit; downward by 1, 2, 4 ... layers while
    they fail and nothing above ``fits`` has fit; else bisecting between the two."""
    known_fit, fails, layers, down = fits, None, predicted, 1
    for _ in range(max_verify):
        if layers <= fits or layers > cap or (fails is not None and layers >= fails):
            break
        fit = attempt(layers)
        if fit is None:
            break
        if fit:
            fits = layers
            layers = layers + 1 if fails is None else (fits + fails) // 2
        else:
            fails = layers
            layers = max(fits + 1, fails - down) if fits == known_fit else (fits + fails) // 2
            down *= 2
    return fits, fails


def _largest(optimizer: str, width: int, device, cap: int | None, report, seconds_left,
             max_verify: int = 5) -> dict:
    """The most layers that fit, never trying more than ``cap`` (on CUDA, None: as many as the GPU's memory would
    hold in parameters alone, from what the first trial found): two small trials give the bytes per layer (CUDA),
    the free memory the first trial found a prediction, and at most ``max_verify`` trials search from it: upward
    one layer at a time while they fit, downward by 1, 2, 4 ... layers while they fail, then bisecting between
    the most layers seen to fit and the fewest seen to fail. ``report(trials)`` after each trial; a trial whose
    time (the last one's, plus the growth per layer seen between the first two, with a margin) would pass
    ``seconds_left()`` is not started (a trial's time is mostly the first step's set-up, not its size: an H200
    took 11 s for one 8192-wide layer in a fresh process and 10 s for two). On CUDA each trial runs in a fresh
    process (``_trial_in_fresh_process``), so that each peak is its own and this process holds no CUDA context
    (one of 518 MiB here made AdamW's 92 layers, which fit in one process, fail); the CPU form, which measures no
    memory, runs them in this one."""
    trials: list[dict] = []
    stopped_for_time = False

    def attempt(layers: int) -> bool | None:
        nonlocal stopped_for_time
        if trials:
            took = [t.get("wall_s", t["seconds"]) for t in trials]
            per_layer_s = max(0.0, took[1] - took[0]) if len(took) > 1 else 0.0
            if (took[-1] + per_layer_s * max(0, layers - trials[-1]["layers"])) * 1.5 + 5 > seconds_left():
                stopped_for_time = True
                return None
        trials.append(_trial_in_fresh_process(optimizer, layers, width, device, seconds_left() - 2)
                      if device.type == "cuda" else _trial(optimizer, layers, width, device))
        report(trials)
        return trials[-1]["fit"]

    per_parameter = width * width + width
    first = attempt(1)
    if first and cap is None:
        cap = int(trials[0]["total_bytes"] // (4 * per_parameter))  # the parameters alone would fill the GPU
    fits, fails = (1 if first else 0), (None if first is not False else 1)
    per_layer, predicted = None, cap
    if first and attempt(2):
        fits = 2
        if device.type == "cuda":
            per_layer = trials[1]["peak_bytes"] - trials[0]["peak_bytes"]
            fixed = max(0, trials[0]["peak_bytes"] - per_layer)
            predicted = max(1, min(cap, int((trials[0]["free_bytes"] - fixed) // max(per_layer, 1))))
        fits, fails = search_layers(attempt, predicted, cap, fits, max_verify)
    elif len(trials) == 2:  # the second small trial failed
        fails = 2
    kept = next((t for t in reversed(trials) if t["fit"] and t["layers"] == fits), None)
    return {"largest_layers": fits, "parameters": fits * per_parameter, "first_failing_layers": fails,
            "predicted_layers": predicted, "exact": fails is not None and fails == fits + 1,
            "bounded_by_cap": fails is None and cap is not None and fits >= cap, "stopped_for_time": stopped_for_time,
            "bytes_per_parameter": None if per_layer is None else round(per_layer / per_parameter, 2),
            "peak_gib": None if kept is None or kept["peak_bytes"] is None else round(kept["peak_bytes"] / 2**30, 2),
            "trials": trials}


@contextlib.contextmanager
def _one_rank_group(backend: str = "gloo"):
    """A process group of this one rank (``backend``): a trial process's, or the CPU form's for its in-process
    trials."""
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(backend, init_method=f"file://{tmp}/store", rank=0, world_size=1,
                                timeout=timedelta(seconds=120))
        try:
            yield
        finally:
            dist.destroy_process_group()


def largest_model(ctx: Context) -> dict:
    import torch

    # on CUDA this process never touches the GPU (a context here would take memory from the trials' processes)
    device = torch.device("cuda", 0) if ctx.cuda else torch.device("cpu")
    width = 8192 if ctx.cuda else 64
    cap = None if ctx.cuda else 4  # the CPU form: a few layers, to run the search's code
    figures: dict = {"width": width, "device": ctx.device, "model": f"an MLP of square Linear({width}, {width}) "
                     "layers, batch 8, under DDP with one rank; fits = one whole training step ran"}
    searches = contextlib.nullcontext() if ctx.cuda else _one_rank_group()  # on CUDA each trial has its own
    optimizers = ("adamw", "birder")  # AdamW's default (foreach) implementation, as users get it
    with searches:
        for i, optimizer in enumerate(optimizers):
            end = time.time() + ctx.seconds_left() / (len(optimizers) - i)  # an equal share of what is left
            figures[optimizer] = _largest(optimizer, width, device, cap, lambda trials, o=optimizer: ctx.progress(
                "largest_model", {**figures, f"{o}_trials_so_far": trials}), lambda end=end: end - time.time())
    total = next((t["total_bytes"] for r in (figures["adamw"], figures["birder"]) for t in r["trials"]
                  if "total_bytes" in t), None)
    figures["total_memory_gib"] = total and round(total / 2**30, 2)
    figures["cap_layers"] = int(total // (4 * (width * width + width))) if total else cap
    adamw, birder = figures["adamw"], figures["birder"]
    ratio = birder["parameters"] / adamw["parameters"] if adamw.get("parameters") else None
    figures["birder_over_adamw_parameters"] = ratio and round(ratio, 3)

    def said(name: str, r: dict) -> str:
        per = "" if r.get("bytes_per_parameter") is None else f", {r['bytes_per_parameter']} B/parameter"
        bound = (" (the search's cap)" if r.get("bounded_by_cap") else " (at least: the search ran out of time)"
                 if r.get("stopped_for_time") and not r.get("exact") else "")
        n = r.get("parameters", 0)
        count = f"{n / 1e9:.2f} billion" if n >= 1e9 else f"{n / 1e6:.2f} million" if n >= 1e6 else f"{n:,}"
        return f"{name} {count} parameters{bound}{per}"

    figures["headline"] = (f"{said('Birder', birder)}; {said('AdamW', adamw)}"
                           + ("" if ratio is None else f"; Birder fits {ratio:.2f}x AdamW's model"))
    figures["status"] = "ok" if birder["largest_layers"] and adamw["largest_layers"] else "failed"
    return figures


PART_FUNCTIONS = {"env": env, "cuda_tests": cuda_tests, "check_adapter": check_adapter, "validate": validate,
                  "bench": bench, "step_time": step_time, "largest_model": largest_model}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run parts of the GPU check (started by python -m gpu_check).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--deadline", type=float, required=True, help="time.time() by which every part must end")
    parser.add_argument("parts", nargs="+", choices=sorted(PART_FUNCTIONS))
    args = parser.parse_args(argv)
    (args.out / "parts").mkdir(parents=True, exist_ok=True)
    for name in args.parts:
        ctx = Context(args.out, args.device, args.deadline)
        started = time.monotonic()
        print(f"gpu-check part {name} on {args.device}", flush=True)
        try:
            figures = PART_FUNCTIONS[name](ctx)
        except Exception as error:  # noqa: BLE001 - recorded; the driver goes on with the other parts
            traceback.print_exc()
            figures = {"status": "error", "error": f"{type(error).__name__}: {error}"[:1000],
                       "headline": f"raised {type(error).__name__}: {' '.join(str(error).split())[:200]}"}
        figures["seconds"] = round(time.monotonic() - started, 2)
        if not ctx.cuda and name != "env":
            figures["headline"] = f"CPU form: {figures.get('headline', '')}"
        write_text(args.out / "parts" / f"{name}.json", json.dumps(figures, indent=1, default=str))
        (args.out / "parts" / f"{name}.partial.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
