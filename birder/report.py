"""`birder report`: the main job. Each package contributes a section (Markdown text plus PNG plots).

A section is a function ``section(outdir: Path, quick: bool) -> str`` returning Markdown; it writes its plots
into ``outdir`` and links them by file name.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from pathlib import Path

from tqdm import tqdm

# "module:function" of each section, in report order.
SECTIONS = (
    "birder_ref.report:section",
    "proofs_checks.report:section",
    "sim.report:section",
    "birder_ref.comparison:section",
)


def write_report(outdir: Path, quick: bool = False, sections: tuple[str, ...] = SECTIONS) -> Path:
    outdir.mkdir(parents=True, exist_ok=True)
    parts = ["# Birder toolkit report", ""]
    timings = {}
    for spec in tqdm(sections, desc="report sections", unit="section"):
        module, function = spec.split(":")
        started = time.perf_counter()
        parts.append(getattr(importlib.import_module(module), function)(outdir, quick))
        timings[spec] = round(time.perf_counter() - started, 2)
    parts.append(f"_Section timings (s): {json.dumps(timings)}_\n")
    path = outdir / "report.md"
    path.write_text("\n".join(parts))
    return path


def run(args: argparse.Namespace) -> int:
    path = write_report(Path(args.out), quick=args.quick)
    if args.json:
        print(json.dumps({"report": str(path), "directory": str(path.parent)}))
    else:
        print(f"report written to {path} (plots beside it in {path.parent}/)")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="the main job: checks, equivalences, scaling predictions, plots")
    p.add_argument("--out", default="report", help="directory to write report.md and plots into")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for tests")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
