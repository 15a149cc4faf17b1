"""How long `make run`'s report takes, and what the README's example question prints, measured for the README:
times `birder report` on the built-in defaults (what `make run` runs once the install is done) in a fresh process,
with its CPU seconds and the load average around it (on a shared machine wall time includes waiting for the CPU),
then runs the README's question (``QUESTION``), and stores both first screens with the measurement in
``benchmarks/report_time.json``. ``--render`` measures nothing and prints the README's blocks from that file
(``tests/test_readme.py`` checks the README holds them).

Run: nice python benchmarks/report_time.py --write-readme   # about 5 to 15 minutes on 2 shared cores
     python benchmarks/report_time.py --render                # print the blocks from the stored run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from safeio.atomic import write_text

STORED = Path(__file__).with_name("report_time.json")
QUESTION = ["--model", "bert-large", "--nodes", "64", "--prices", "docs/prices_example.toml"]
ROOT = Path(__file__).resolve().parents[1]


def child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def report(arguments: list[str]) -> dict:
    """`birder report ARGUMENTS --json` in a fresh process, in the project's root, into a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="birder-report-time-") as folder:
        command = [sys.executable, "-m", "birder.cli", "report", *arguments, "--out", str(Path(folder) / "r"),
                   "--json"]
        done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout)


def measure() -> dict:
    load_before = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), child_cpu_s()
    overview = report([])
    wall, cpu = time.perf_counter() - started, child_cpu_s() - cpu_started
    load_after = os.getloadavg()[0]
    question = report(QUESTION)
    return {"command": "birder report", "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "sections_s": round(sum(overview["timings_s"].values()), 1), "cpus": os.cpu_count(),
            "load_before": round(load_before, 2), "load_after": round(load_after, 2),
            "measured_utc": datetime.now(UTC).strftime("%Y-%m-%d"), "overview": overview["summary"]["decision"],
            "question": " ".join(["birder", "report", *QUESTION]), "answer": question["summary"]["decision"]}


def sentence(m: dict) -> str:
    """The README's sentence on how long `make run`'s report takes, from a measurement."""
    return (f"`make run`'s report took {m['wall_s'] / 60:.1f} minutes ({m['wall_s']:.0f} s wall, {m['cpu_s']:.0f} s "
            f"of CPU) on {m['cpus']} shared cores at a load average of {m['load_before']:.0f} to "
            f"{m['load_after']:.0f} ({m['measured_utc']}; `python benchmarks/report_time.py` measures it again): "
            "on an idle machine expect about its CPU time.")


def blocks(m: dict) -> dict[str, str]:
    """The README's generated blocks: how long the report takes, and the example question's first screen."""
    return {"time": sentence(m), "question": f"$ {m['question']}\n{m['answer']}"}


def write_readme(m: dict) -> None:
    """Replace the README's generated blocks (``<!-- NAME: ... -->`` to ``<!-- end NAME -->``) with ``blocks(m)``."""
    import re

    readme = ROOT / "README.md"
    text = readme.read_text()
    for name, body in blocks(m).items():
        fenced = f"```\n{body}\n```" if name == "question" else body
        text, count = re.subn(rf"(<!-- {name}:[^>]*-->\n).*?(\n<!-- end {name} -->)",
                              lambda found, fenced=fenced: found.group(1) + fenced + found.group(2), text,
                              flags=re.DOTALL)
        if count != 1:
            raise ValueError(f"README.md: expected one block {name!r}, found {count}")
    write_text(readme, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="print the README's blocks from the stored run")
    parser.add_argument("--write-readme", action="store_true",
                        help="also replace the README's blocks with those of the stored (or new) run")
    args = parser.parse_args(argv)
    if not args.render:
        m = measure()
        write_text(STORED, json.dumps(m, indent=1) + "\n")
        print(f"wall {m['wall_s']} s, CPU {m['cpu_s']} s, sections {m['sections_s']} s; load average "
              f"{m['load_before']} before, {m['load_after']} after; written to {STORED}")
    stored = json.loads(STORED.read_text())
    for name, text in blocks(stored).items():
        print(f"<!-- {name} -->\n{text}\n")
    if args.write_readme:
        write_readme(stored)
    return 0


if __name__ == "__main__":
    sys.exit(main())
