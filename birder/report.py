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
from safeio.argtypes import non_empty_path
from safeio.atomic import atomic_path
from safeio.inputs import read_text_bounded
from safeio.outputs import check_replaceable_dir, check_written, write_manifest
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
        for spec in tqdm(sections, desc="report sections", unit="section", disable=not progress, file=sys.stderr,
                         leave=False):
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
        (tmp / REPORT_NAME).write_text("\n".join(parts), encoding="utf-8")
        for written in tmp.rglob("*"):  # read back before the swap: whole PNGs, UTF-8 text
            if written.is_file():
                check_written(written)
        write_manifest(tmp, "birder report")
        _exit_if_terminated()  # before the swap: an interrupted run publishes nothing


_TERMINATED: list[int] = []  # the signals ``_terminate`` received in this run


def _terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, so the temporary directory is removed
    _TERMINATED.append(signum)
    raise SystemExit(128 + signum)


def _exit_if_terminated() -> None:
    """Raise the exit ``_terminate`` raised, where Python swallowed it: a signal that lands in a garbage-collector
    or weakref callback only prints "Exception ignored" and the run goes on (trial t7), so the swap must not."""
    if _TERMINATED:
        raise SystemExit(128 + _TERMINATED[0])


def run(args: argparse.Namespace) -> int:
    from birder import report_grid, report_prices

    quiet = getattr(args, "quiet", False)
    # a bad price file or question fails here, before anything is built
    prices = report_prices.load_prices(args.prices) if args.prices else None
    asked = question(args)
    if prices is not None:
        _refuse_prices_that_price_nothing(prices, asked, args.prices)
    report_prices.use_prices(prices)
    report_grid.use_question(asked)
    _TERMINATED.clear()
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        report = write_report(Path(args.out), quick=args.quick, progress=show_progress(quiet))
    except BaseException:
        # the handler's SystemExit can come back as another exception: inside a C extension's import it is an
        # "ImportError: initialization failed" (matplotlib's _image); the signal still decides the exit
        if _TERMINATED:
            raise SystemExit(128 + _TERMINATED[0]) from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        report_prices.use_prices(None)
        report_grid.use_question(None)
    if args.json:
        print(json.dumps({"report": str(report.path), "directory": str(report.path.parent),
                          "summary": report.summary, "timings_s": report.timings}))
        return 0
    if "decision" in report.summary:  # the first screen: the same lines as report.md's
        for line in report.summary["decision"].splitlines():
            print(printable(line))
    print(printable(f"report written to {report.path} (plots beside it in {report.path.parent}/)"))
    for key in ("checks", "prediction error", "headline"):
        if key in report.summary:
            print(printable(f"{key}: {report.summary[key]}"))
    return 0


MAX_NODES = 4096  # the largest node count a question may ask (the simulator's grid reaches 512)


def _refuse_prices_that_price_nothing(prices, asked, path: str) -> None:
    """ValueError where the price file prices (NIC and switch port) none of the networks the report compares: it
    would otherwise rank by throughput under a heading that says by cost, and name an unpriced network to buy."""
    from birder.report_grid import buying_networks, cluster_network_name
    from birder.report_verdict import price_network

    if asked.cluster:
        name = cluster_network_name(asked.cluster)
        compared = [price_network(asked.cluster)(name)]
    else:
        compared = buying_networks()
    if any(prices.cluster_cost(net, 1, 1) is not None for net in compared):
        return
    if asked.cluster and compared == [name]:
        raise ValueError(f"--prices {path}: the cluster file {asked.cluster} names no network preset, so no "
                         "price applies to it; add `preset = NAME` under its [network] (the preset whose NIC and "
                         "switch port it buys) or leave out --prices")
    raise ValueError(f"--prices {path}: prices both a NIC and a switch port for none of the networks compared "
                     f"({', '.join(compared)}); add [nic] and [switch_port] entries for them")


def question(args: argparse.Namespace):
    """The question of ``--model``, ``--nodes``, ``--gpu``, ``--cluster``, each checked (ValueError), or the
    overview's where none is given."""
    from birder.report_grid import Question

    models = nodes = None
    if args.model:
        from sim.models import MODELS

        models = tuple(dict.fromkeys(m.strip() for m in args.model.split(",")))
        unknown = [m for m in models if m not in MODELS]
        if unknown or not all(models):
            raise ValueError(f"--model: unknown model {', '.join(unknown) or repr(args.model)}; choose from "
                             f"{', '.join(MODELS)} (several: comma-separated)")
    if args.nodes:
        try:
            nodes = tuple(sorted({int(n) for n in args.nodes.split(",")}))
        except ValueError:
            raise ValueError(f"--nodes: expected node counts such as 64 or 16,64, got {args.nodes!r}") from None
        if not all(1 <= n <= MAX_NODES for n in nodes):
            raise ValueError(f"--nodes: each count must be 2 to {MAX_NODES}, got {args.nodes!r}")
        if 1 in nodes:
            raise ValueError(f"--nodes: one node has no inter-node network to decide on (its throughput is the "
                             f"baseline every count is compared with); give counts from 2 to {MAX_NODES}, got "
                             f"{args.nodes!r}")
    if args.gpu:
        from sim.hardware import GPUS

        if args.gpu not in GPUS:
            raise ValueError(f"--gpu: unknown GPU {args.gpu!r}; choose from {', '.join(GPUS)}")
    cluster = None
    if args.cluster:
        from sim.hardware import load_cluster

        load_cluster(args.cluster)  # one clear error for a bad file, before any work
        cluster = str(args.cluster)
        if nodes is None:
            nodes = (load_cluster(args.cluster).n_nodes,)
            if nodes == (1,):
                raise ValueError(f"--cluster {args.cluster}: the file has one node, which has no inter-node network "
                                 "to decide on; give --nodes with counts of 2 or more")
    return Question(models, nodes, args.gpu, cluster)


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="the main job: which network and optimizer, checks, plots")
    p.add_argument("--out", default="report", type=non_empty_path,
                   help="directory to write report.md and plots into (default: report)")
    p.add_argument("--quick", action="store_true", help="fewer nodes and steps, for tests")
    p.add_argument("--model", default=None, metavar="NAME[,NAME]",
                   help="your model(s) (e.g. bert-large; default: the overview's ResNet-50, BERT-base, BERT-large, "
                        "GPT-2)")
    p.add_argument("--nodes", default=None, metavar="N[,N]",
                   help="node counts to decide for, 2 or more (default 16,64; with --cluster, the file's nodes)")
    p.add_argument("--gpu", default=None, metavar="NAME",
                   help="GPU (a100, h100, v100, h200, ...; default a100 with the published single-node figures)")
    p.add_argument("--cluster", default=None, metavar="FILE.toml",
                   help="your cluster (sim/presets/example_cluster.toml; or `birder calibrate`'s output): decide on "
                        "its network instead of the presets")
    p.add_argument("--prices", default=None, metavar="FILE.toml",
                   help="price file (node = X; [nic] and [switch_port] tables of network = price per NIC and per "
                        "port; currency; years to pay it off, for a cost per sample): rank by samples/s per unit "
                        "of cost")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
