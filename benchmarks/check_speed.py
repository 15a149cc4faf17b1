"""`birder check` against its budget: the whole suite must take under 60 s on 2 cores (issues 4 and 11).

Times the command a user runs, `birder check` (the checks in their child process included), on the reference, and
the in-process suite on the reference and on proofs_checks.independent with each check's seconds; prints the
ratio of each wall time to the 60 s budget (below 1 is within it). On a shared machine run it under nice and say
so: wall time then includes waiting for the CPU, so CPU seconds are printed beside it, and the load average before
and after (a quiet 2-core machine has a load below 2).

Run: nice python benchmarks/check_speed.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

from proofs_checks.runner import run_checks
from proofs_checks.target import load_target

BUDGET_S = 60.0


def child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    print(f"{os.cpu_count()} CPUs visible, niceness {os.nice(0)}; budget {BUDGET_S:.0f} s for the whole suite; load "
          f"average {os.getloadavg()[0]:.2f} (1 min) before")
    command = [sys.executable, "-m", "birder.cli", "check", "--json"]
    started, cpu_started = time.perf_counter(), child_cpu_s()
    done = subprocess.run(command, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, child_cpu_s() - cpu_started
    verdict = "all hold" if done.returncode == 0 else f"exit {done.returncode}"
    print(f"`birder check` on the reference (python -m birder.cli check --json): wall {wall:.1f} s, CPU {cpu:.1f} s, "
          f"wall / budget = {wall / BUDGET_S:.2f}; {verdict}")
    for spec in (None, "proofs_checks.independent"):
        target = load_target(spec)
        started, cpu_started = time.perf_counter(), time.process_time()
        report = run_checks(target, progress=False)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        slowest = sorted(report.results, key=lambda r: -r.seconds)[:5]
        print(f"in process, {target.name}: wall {wall:.1f} s, CPU {cpu:.1f} s, wall / budget = {wall / BUDGET_S:.2f}; "
              f"{'all hold' if report.passed else 'FAILED'}")
        print("  slowest (a shared run counts for the first check that needs it): "
              + ", ".join(f"{r.name} {r.seconds:.1f} s" for r in slowest))
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) after")


if __name__ == "__main__":
    main()
