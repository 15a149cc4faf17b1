"""`birder check` against its budget: the whole suite must take under 60 s on 2 cores (issue 4).

Prints each check's seconds and the total, for the reference and for proofs_checks.independent, and the ratio of
the total to the 60 s budget (below 1 is within it). Run: .venv/bin/python benchmarks/check_speed.py
"""

from __future__ import annotations

import os
import time

from proofs_checks.runner import run_checks
from proofs_checks.target import load_target

BUDGET_S = 60.0


def main() -> None:
    print(f"{os.cpu_count()} CPUs visible; budget {BUDGET_S:.0f} s for the whole suite")
    for spec in (None, "proofs_checks.independent"):
        target = load_target(spec)
        started, cpu_started = time.perf_counter(), time.process_time()
        report = run_checks(target, progress=False)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        slowest = sorted(report.results, key=lambda r: -r.seconds)[:5]
        print(f"{target.name}: wall {wall:.1f} s, CPU {cpu:.1f} s, wall / budget = {wall / BUDGET_S:.2f}; "
              f"{'all hold' if report.passed else 'FAILED'}")
        print("  slowest (a shared run counts for the first check that needs it): "
              + ", ".join(f"{r.name} {r.seconds:.1f} s" for r in slowest))


if __name__ == "__main__":
    main()
