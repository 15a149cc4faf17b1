"""`birder report`: the main job. Each section is a function ``section(outdir: Path, quick: bool)`` that writes
its plots into ``outdir`` and returns its Markdown, or a ``Section`` (Markdown plus a one-line summary for the
terminal).

The report is built in a temporary directory beside ``--out`` and swapped in whole (``safeio.atomic``): an
interrupted run leaves the previous report as it was and no stray files. ``--out`` is checked before any work
(``safeio.outputs.check_replaceable_dir``): a new or empty folder, or one holding only what an earlier report
listed in its manifest; never the user's other files nor the toolkit's own. Hypothesis keeps its folder in a
temporary directory, not the working one. Progress bars go to a terminal only and ``--quiet`` silences them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from birder.report_core import PROGRESS, Section, show_progress  # noqa: F401 - show_progress: the sections' own
from safeio.atomic import atomic_path
from safeio.inputs import read_text_bounded
from safeio.outputs import check_replaceable_dir, write_manifest
from safeio.text import printable

# "module:function" of each section, in report order: the answer first, then how it was reached.
SECTIONS = (
    "birder.report_decision:decision_section",
    "birder.report_checks:section",
    "birder.report_reference:section",
    "birder.report_scaling:scaling_section",
    "birder.comparison:section",
)
REPORT_NAME = "report.md"


@dataclass(frozen=True)
class Report:
    path: Path
    summary: dict[str, str]
    timings: dict[str, float]


@contextmanager
def _hypothesis_home_elsewhere():
    """Hypothesis writes a ``.hypothesis`` folder into the working directory: point it at a temporary one."""
    try:
        from hypothesis import configuration
    except ImportError:  # a test extra; the checks that need it say so
        yield
        return
    previous = vars(configuration).get("__hypothesis_home_directory")  # no public getter
    with tempfile.TemporaryDirectory(prefix="birder-report-hypothesis-") as home:
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(previous)


def _report_before_manifests(folder: Path) -> set[str]:
    """The files of a report written before reports had manifests: a report.md of ours and the plots it shows,
    each named in it; empty if anything else is there (then the folder is not replaced)."""
    try:  # a report.md is tens of kB
        text = read_text_bounded(folder / REPORT_NAME, 1 << 22, "report")
    except ValueError:  # missing, not a regular file, too large or not text: not a report of ours
        return set()
    if not text.startswith("# Birder toolkit report"):
        return set()
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir()}
    plots = files - {REPORT_NAME}
    if any(not name.endswith(".png") or f"]({name})" not in text for name in plots):
        return set()
    return files


def timings_table(timings: dict[str, float]) -> str:
    rows = [f"| `{spec}` | {seconds:.1f} |" for spec, seconds in timings.items()]
    return "\n".join(["| section | seconds |", "|---|---:|", *rows,
                      f"| total | {sum(timings.values()):.1f} |"])


def write_report(outdir: Path, quick: bool = False, sections: tuple = SECTIONS, progress: bool = False) -> Report:
    """Build every section (a "module:function" or a callable) into a temporary directory, then replace
    ``outdir`` with it in one swap; on any error ``outdir`` stays as it was."""
    given = Path(outdir)
    target = check_replaceable_dir(given, unlisted=_report_before_manifests)  # links followed, never replaced
    timings: dict[str, float] = {}
    summary: dict[str, str] = {}
    token = PROGRESS.set(progress)  # the sections' own bars follow the same choice
    try:
        with _hypothesis_home_elsewhere():
            _build(target, quick, sections, progress, timings, summary)
    finally:
        PROGRESS.reset(token)
    return Report(given / REPORT_NAME, summary, timings)


def _build(outdir: Path, quick: bool, sections: tuple, progress: bool, timings: dict, summary: dict) -> None:
    parts = ["# Birder toolkit report", ""]
    with atomic_path(outdir) as tmp:
        tmp.mkdir(parents=True)
        for spec in tqdm(sections, desc="report sections", unit="section", disable=not progress, file=sys.stderr):
            if callable(spec):
                make, spec = spec, f"{spec.__module__}:{spec.__name__}"
            else:
                module, function = spec.split(":")
                make = getattr(importlib.import_module(module), function)
            started = time.perf_counter()
            out = make(tmp, quick)
            timings[spec] = round(time.perf_counter() - started, 2)
            if isinstance(out, Section):
                summary.update(out.summary)
                out = out.markdown
            parts.append(out)
        parts += ["## How long each section took", "", timings_table(timings), ""]
        (tmp / REPORT_NAME).write_text("\n".join(parts))
        write_manifest(tmp, "birder report")


def _terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, so the temporary directory is removed
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    from birder import report_prices

    quiet = getattr(args, "quiet", False)
    # a bad price file fails here, before anything is built
    report_prices.use_prices(report_prices.load_prices(args.prices) if args.prices else None)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        report = write_report(Path(args.out), quick=args.quick, progress=show_progress(quiet))
    finally:
        signal.signal(signal.SIGTERM, previous)
        report_prices.use_prices(None)
    if args.json:
        print(json.dumps({"report": str(report.path), "directory": str(report.path.parent),
                          "summary": report.summary, "timings_s": report.timings}))
        return 0
    print(printable(f"report written to {report.path} (plots beside it in {report.path.parent}/)"))
    for key in ("checks", "prediction error", "headline"):
        if key in report.summary:
            print(printable(f"{key}: {report.summary[key]}"))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="the main job: which network and optimizer, checks, plots")
    p.add_argument("--out", default="report", help="directory to write report.md and plots into (default: report)")
    p.add_argument("--quick", action="store_true", help="fewer nodes and steps, for tests")
    p.add_argument("--prices", default=None, metavar="FILE.toml",
                   help="price file (node = X; [nic] and [switch_port] tables of network = price; currency): "
                        "rank the networks by samples/s per unit of cost")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
