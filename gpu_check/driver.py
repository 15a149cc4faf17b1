"""``python -m gpu_check OUT``: check what is needed (the dry run), unpack the carried wheels the machine lacks, run
the parts (``gpu_check.parts``) each in its own process group under its own time limit and the whole under
``plan.BUDGET_S``, and write ``OUT/gpu_check.json`` and ``OUT/gpu_check.md``.

On CUDA the correctness parts run side by side, then the timing parts one at a time; without CUDA (or with
``--device cpu``) the parts' CPU forms run one after another in one process. A part that fails, raises, dies or
runs out of time is recorded as such, and the others go on. Exit status: 0 every part ok, 1 one was not, 2 something
the check needs is missing (one line on stderr names it) or the arguments are wrong. Imports no torch itself.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpu_check import plan, summary
from safeio.atomic import write_text

GRACE_S = 5.0  # past a part's deadline before its process group is killed (it stops its own commands first)
MIN_SLICE_S = 20.0  # a part left with less of the budget than this is not started


@dataclass
class Child:
    """A process running some parts; killed with its process group (its ranks, pytest, ...) at its deadline."""

    names: list[str]
    process: subprocess.Popen
    deadline: float
    log: Path
    killed: bool = False
    started: float = field(default_factory=time.monotonic)


def _unpack_wheels(needs: list[plan.Need], site: Path) -> list[str]:
    """Unpack the wheels of modules the machine lacks into ``site`` (a pure-Python wheel unpacked is installed)."""
    used = []
    for need in needs:
        if need.source == "wheel" and need.wheel is not None:
            with zipfile.ZipFile(need.wheel) as wheel:
                wheel.extractall(site)
            used.append(need.wheel.name)
    return used


class Runner:
    def __init__(self, out: Path, environment: dict, budget_s: float, parts: int, quiet: bool):
        from tqdm import tqdm  # here: the dry run must work where tqdm is missing

        self.out, self.environment = out, environment
        self.started = time.monotonic()
        self.budget_s, self.budget_end = budget_s, self.started + budget_s
        self.records: dict[str, dict] = {}
        self.bar = tqdm(total=parts, desc="gpu-check", unit="part", disable=True if quiet else None)

    def left(self) -> float:
        return self.budget_end - time.monotonic()

    def start(self, names: list[str], device: str, limit_s: float) -> Child:
        log = self.out / "logs" / f"{names[0] if len(names) == 1 else 'cpu_forms'}.log"
        extra = {k: v for part in plan.PARTS if part.name in names for k, v in part.env}
        deadline = time.time() + limit_s
        command = [sys.executable, "-m", "gpu_check.parts", "--out", str(self.out), "--device", device,
                   "--deadline", f"{deadline:.3f}", *names]
        with open(log, "w") as sink:
            process = subprocess.Popen(command, cwd=plan.ROOT, env={**self.environment, **extra}, stdout=sink,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return Child(names, process, time.monotonic() + limit_s + GRACE_S, log)

    def wait(self, children: list[Child]) -> None:
        running = list(children)
        while running:
            for child in list(running):
                if child.process.poll() is not None:
                    running.remove(child)
                    self.collect(child)
                elif time.monotonic() > child.deadline:
                    with_group(child.process.pid, signal.SIGKILL)
                    child.process.wait()
                    child.killed = True
                    running.remove(child)
                    self.collect(child)
            time.sleep(0.2)

    def collect(self, child: Child) -> None:
        """Each part's record: its JSON, or what stopped it (timed out, with what it had measured; died; not
        reached because an earlier part of the same process was stopped)."""
        stopped = False
        for name in child.names:
            done = self.out / "parts" / f"{name}.json"
            limit = next(p.limit_s for p in plan.PARTS if p.name == name)
            if done.is_file() and not stopped:
                record = json.loads(done.read_text())
            elif stopped:
                record = {"status": "not_run", "headline": "not reached: an earlier part of its process stopped"}
            else:
                stopped = True
                partial = self.out / "parts" / f"{name}.partial.json"
                kept = json.loads(partial.read_text()) if partial.is_file() else {}
                tail = log_tail(child.log)
                if child.killed:
                    record = {**kept, "status": "timed_out", "headline": "stopped at its time limit ("
                              f"{time.monotonic() - child.started:.0f} s)" + (": partial figures kept" if kept else "")}
                else:
                    record = {**kept, "status": "error", "headline": f"its process ended with status "
                              f"{child.process.returncode} before writing a result"}
                record["log_tail"] = tail
                record["seconds"] = round(time.monotonic() - child.started, 2)
            record["limit_s"] = limit
            record["log"] = str(child.log)
            self.records[name] = record
            self.say(name, record)

    def skip(self, name: str, why: str) -> None:
        self.records[name] = {"status": "skipped", "headline": why}
        self.say(name, self.records[name])

    def say(self, name: str, record: dict) -> None:
        seconds = record.get("seconds")
        took = "" if seconds is None else f"{seconds:6.1f} s"
        self.bar.write(f"[{time.monotonic() - self.started:5.0f} s] {name:<14} {record['status']:<9} {took:>8}  "
                       f"{record.get('headline', '')}")
        self.bar.update(1)


def with_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the child leads its own session: its ranks and subprocesses go with it
    except ProcessLookupError:
        pass


def log_tail(path: Path, lines: int = 15) -> list[str]:
    try:
        return path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return []


def run_parts(runner: Runner, names: list[str], device: str) -> str:
    """``env`` first (it says whether torch sees CUDA), then the others; returns the device they ran on. With
    ``device`` cpu every part runs its CPU form in one process (one torch import)."""
    if device == "cpu":
        runner.wait([runner.start(names, "cpu", max(MIN_SLICE_S, runner.left()))])
        return device
    runner.wait([runner.start(["env"], "cpu", min(plan.PARTS[0].limit_s, runner.left()))])
    env = runner.records["env"]
    cuda = bool(env.get("cuda_available"))
    rest = [n for n in names if n != "env"]
    if env["status"] != "ok":
        for name in rest:
            runner.skip(name, "skipped: the env part failed (torch does not import?)")
        return device
    if device == "cuda" and not cuda:
        for name in rest:
            runner.skip(name, "skipped: --device cuda, but torch sees no CUDA device")
        return device
    if not cuda:  # auto on a machine without CUDA: the CPU forms, small, in one process
        if rest:
            runner.wait([runner.start(rest, "cpu", max(MIN_SLICE_S, runner.left()))])
        return "cpu"
    device = "cuda"
    side_by_side = [p for p in plan.PARTS if p.name in rest and p.concurrent]
    runner.wait([runner.start([p.name], device, min(p.limit_s, runner.left())) for p in side_by_side])
    for part in (p for p in plan.PARTS if p.name in rest and not p.concurrent):
        if runner.left() < MIN_SLICE_S:
            runner.skip(part.name, f"skipped: the {runner.budget_s:.0f} s budget is spent")
            continue
        runner.wait([runner.start([part.name], device, min(part.limit_s, runner.left()))])
    return device


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_check",
        description="Every CUDA figure of the project in one command on a single-GPU machine (no network needed): "
                    "the CUDA-marked tests, birder check on CUDA tensors, Birder bit for bit against birder_ref on "
                    "CUDA, birder bench, Birder's step against DDP + AdamW, the largest model beside AdamW's. "
                    "Without CUDA each part runs its CPU form at small sizes. See docs/gpu_check.md.")
    parser.add_argument("out", help="output folder for gpu_check.json, gpu_check.md and each part's files")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what would run and check that every module, wheel and file it needs is here")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto (default): CUDA if torch sees a GPU, else the CPU forms")
    parser.add_argument("--parts", nargs="+", choices=plan.PART_NAMES, default=list(plan.PART_NAMES),
                        metavar="PART", help=f"run only these (env always runs): {', '.join(plan.PART_NAMES)}")
    parser.add_argument("--budget", type=float, default=plan.BUDGET_S,
                        help=f"seconds for the whole check (default {plan.BUDGET_S:.0f})")
    parser.add_argument("--wheels", type=Path, default=plan.WHEELS_DIR,
                        help="folder of the carried wheels (default gpu_check/wheels, filled by `make gpu-wheels`)")
    parser.add_argument("--require-wheels", action="store_true",
                        help="require every wheel of gpu_check/wheels.txt in the folder, even for modules this "
                             "machine has (check this before carrying the checkout to a bare machine)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (it shows on a terminal only)")
    args = parser.parse_args(argv)
    if not args.budget > 0:
        parser.error(f"--budget must be positive seconds, got {args.budget}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    lines, missing = plan.dry_run_lines(out, args.wheels, args.require_wheels, args.device)
    if args.dry_run:
        print("\n".join(lines))
    if missing:
        print(missing, file=sys.stderr)
        return 2
    if args.dry_run:
        return 0
    try:
        for folder in (out, out / "parts", out / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        for name in plan.PART_NAMES:  # a previous run's results must not pass for this run's
            for stale in (out / "parts" / f"{name}.json", out / "parts" / f"{name}.partial.json"):
                stale.unlink(missing_ok=True)
    except OSError as error:
        print(f"gpu-check: cannot write the output folder {out}: {error}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    needs = plan.needs(args.wheels, args.require_wheels)
    with tempfile.TemporaryDirectory(prefix="gpu-check-site-") as site:
        carried = _unpack_wheels(needs, Path(site))
        path = [str(plan.ROOT), site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "GPU_CHECK_WHEEL_SITE": site,
                       "MPLBACKEND": "Agg", "PIP_NO_INDEX": "1", "PYTHONUNBUFFERED": "1"}
        print(f"gpu-check: {len(args.parts)} part(s) into {out} (at most {args.budget:.0f} s); carried wheels "
              f"unpacked: {', '.join(carried) or 'none needed'}", flush=True)
        names = ["env"] + [n for n in args.parts if n != "env"]
        runner = Runner(out, environment, args.budget, len(names), args.quiet)
        device = run_parts(runner, names, args.device)
        runner.bar.close()
    result = {"started_utc": started.isoformat(timespec="seconds"), "device": device,
              "seconds": round(time.monotonic() - runner.started, 1), "budget_s": args.budget,
              "carried_wheels": carried, "output": str(out),
              "parts": {n: runner.records[n] for n in plan.PART_NAMES if n in runner.records}}
    write_text(out / "gpu_check.json", json.dumps(result, indent=1, default=str))
    write_text(out / "gpu_check.md", summary.markdown(result))
    bad = [n for n, r in result["parts"].items() if r["status"] != "ok"]
    print(f"gpu-check: {len(result['parts']) - len(bad)} of {len(result['parts'])} parts ok in {result['seconds']} s"
          + (f"; not ok: {', '.join(bad)}" if bad else "") + f". Summary: {out / 'gpu_check.md'}")
    return 1 if bad else 0
