"""The shared core of `birder report`'s sections: what a section returns (``Section``), whether it shows progress
bars (``show_progress``), and how a prediction's numbers are written (``num``, ``rate``, ``ratio``, ``spans``).
Every section module imports this one and nothing of the driver (``birder.report``): no import cycle.
"""

from __future__ import annotations

import math
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Section:
    """A section's Markdown and the lines it adds to the terminal summary (keyed, e.g. ``checks``)."""

    markdown: str
    summary: dict[str, str] = field(default_factory=dict)


PROGRESS: ContextVar[bool | None] = ContextVar("report_progress", default=None)


def show_progress(quiet: bool = False) -> bool:
    """Progress bars only on a terminal, and never with ``--quiet``; inside ``write_report``, what it was given."""
    during_report = PROGRESS.get()
    if during_report is not None:
        return during_report
    return not quiet and sys.stderr.isatty()


def interval(p: dict) -> tuple[float, float]:
    return p.get("throughput_low", p["throughput"]), p.get("throughput_high", p["throughput"])


def num(x: float) -> str:
    """Three significant figures with thousands separators: 61,234 -> 61,200; 4.567 -> 4.57."""
    if not math.isfinite(x) or x == 0:
        return f"{x:g}"
    exponent = math.floor(math.log10(abs(x)))
    return f"{round(x, 2 - exponent):,.{max(0, 2 - exponent)}f}"


def rate(p: dict) -> str:
    lo, hi = interval(p)
    return f"{num(p['throughput'])}/s ({num(lo)} to {num(hi)})"


def ratio(r: dict) -> str:
    """A speed-up (``speedup``) in words: the ratio, its interval, and whether it decides."""
    verdict = r["verdict"] if r["verdict"] == "within the uncertainty" else f"{r['verdict']} beyond the uncertainty"
    return f"{r['ratio']:.2f}x ({r['low']:.2f} to {r['high']:.2f}, {verdict})"


def spans(values: list[int], all_values: list[int]) -> str:
    """Node counts as runs of consecutive grid points: '2-128', '2, 16-64'."""
    out, run = [], []
    for v in all_values:
        if v in values:
            run.append(v)
        elif run:
            out.append(run)
            run = []
    if run:
        out.append(run)
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)

