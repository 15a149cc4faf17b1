"""Local ranks for gpu-validate and bench: one process per rank, and a wait that cannot hang.

Processes are forked from a server that imported torch once (``forkserver``; ``spawn`` where it is missing),
so six ranks cost one torch import, not six. Every rank runs ``body(*args, rank)`` inside its own process group
and reports ``{"rank", "result"}`` or ``{"rank", "error"}``. The launcher waits for every report; once a rank
fails or dies, the others get one collective timeout (plus a margin) to notice and report, then whoever is
still silent is killed and named.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

# torch._dynamo: DistributedDataParallel() imports it on first use (~800 modules, ~2.4 s of CPU), in every rank
# unless the server holds it already
_PRELOAD = ["gpu_validation.launch", "gpu_validation.validate", "gpu_validation.bench", "torch._dynamo"]


@dataclass(frozen=True)
class Outcome:
    """What the launcher saw: each rank's report, exit status, who it had to kill, and when failure began."""

    reports: dict[int, dict]
    exit_codes: dict[int, int | None]
    killed: tuple[int, ...]
    seconds_to_stop_after_failure: float | None  # first failure to the last report; None without a failure

    @property
    def errors(self) -> dict[int, str]:
        return {r: rep["error"] for r, rep in sorted(self.reports.items()) if "error" in rep}

    @property
    def lost(self) -> list[int]:
        """Ranks that ended (or were killed) without a report."""
        return [r for r, code in self.exit_codes.items() if code != 0 and r not in self.reports]

    def describe_failures(self) -> str:
        return "; ".join([f"rank {r} hung (killed by the launcher)" if r in self.killed
                          else f"rank {r} died (exit status {self.exit_codes[r]})" for r in self.lost]
                         + [f"rank {r}: {msg}" for r, msg in self.errors.items()])


def start_method(preload: list[str]) -> str:
    """``forkserver``, its server told to import ``preload`` once before it forks any rank, where the platform has
    one; else ``spawn`` (every rank then imports for itself)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.set_forkserver_preload(preload)
    return "forkserver"


def context():
    return multiprocessing.get_context(start_method(_PRELOAD))


def _rank_entry(rank: int, world: int, backend: str, timeout_s: float, init_method: str, results,
                body: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    try:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        results.put({"rank": rank, "result": body(*args, rank)})
        dist.destroy_process_group()
    except Exception as error:  # report every failure to the launcher, then stop this rank
        message = " ".join(f"{type(error).__name__}: {error}".split())[:500]
        results.put({"rank": rank, "error": message, "traceback": traceback.format_exc()[-2000:]})
        results.close()
        results.join_thread()
        os._exit(1)


def launch(body: Callable, args: tuple, world: int, backend: str, timeout_s: float, backstop_s: float) -> Outcome:
    """Run ``body(*args, rank)`` on ``world`` local ranks; never waits longer than ``backstop_s`` in all."""
    ctx = context()
    results = ctx.Queue()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        init_method = f"file://{os.path.join(tmp, 'store')}"
        procs = [ctx.Process(target=_rank_entry, daemon=True,
                             args=(r, world, backend, timeout_s, init_method, results, body, args))
                 for r in range(world)]
        for p in procs:
            p.start()
        reports: dict[int, dict] = {}
        deadline = started + backstop_s
        first_failure = last_report = None
        while len(reports) < world and time.monotonic() < deadline:
            try:
                report = results.get(timeout=0.2)
                reports[report["rank"]] = report
                last_report = time.monotonic()
            except queue.Empty:
                pass
            silent = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in reports]
            if first_failure is None and (silent or any("error" in rep for rep in reports.values())):
                first_failure = time.monotonic()  # survivors get one collective timeout to notice and report
                deadline = min(deadline, first_failure + timeout_s + 5)
            if all(r in reports or p.exitcode is not None for r, p in enumerate(procs)):
                break
        killed = []
        for r, p in enumerate(procs):  # ranks that reported are shutting down; give them time to exit
            p.join(timeout=10 if r in reports else 1)
            if p.is_alive():
                p.kill()
                p.join()
                killed.append(r)
    stop = None
    if first_failure is not None:
        stop = round(max(0.0, (last_report or first_failure) - first_failure), 2)
    return Outcome(reports, {r: p.exitcode for r, p in enumerate(procs)}, tuple(killed), stop)
