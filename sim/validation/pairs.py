"""Speed-ups: pairs of rows of one published table that differ in optimizer, framework or network
(``paired_rows``), their predicted and measured ratios, and intervals on them fitted each source left out
(``left_out_pairs``, ``speedup_method``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from sim.uncertainty import REGIMES
from sim.validation.corpus import PublishedRow

if TYPE_CHECKING:

    pass
from sim.uncertainty import (
    INTERVAL_LEVEL,
    LoggedError,
    interval_around,
    left_out_bounds,
    pair_regime,
    regime_bounds,
)
from sim.validation.figures import median, share

# what may differ between two rows of one table that a speed-up compares (the rest is the same set-up)
PAIR_COLUMNS = ("optimizer", "framework", "comm_library", "precision", "transport", "line_rate_gbps",
                "nics_per_node", "intra")
# what two rows of one table share to be paired: the same model, batch, GPUs and node count
PAIR_KEY = ("source", "table", "model", "batch_per_gpu", "gpu", "gpus_per_node", "nodes")


def paired_rows(rows: list[PublishedRow]) -> list[tuple[int, int]]:
    """Index pairs (i, j), i < j, of rows of one table measured on the same model, batch, GPUs and node count
    that differ in what a speed-up compares (``PAIR_COLUMNS``: an optimizer, a framework, a network ...)."""
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple(getattr(row, k) for k in PAIR_KEY), []).append(i)
    return [(i, j) for members in groups.values() for k, i in enumerate(members) for j in members[k + 1:]
            if any(getattr(rows[i], c) != getattr(rows[j], c) for c in PAIR_COLUMNS)]


def pair_label(row: PublishedRow, other: PublishedRow) -> str:
    """What ``row`` is in a pair: its values of the columns in which it differs from ``other``."""
    return " ".join(f"{c}={getattr(row, c)}" for c in PAIR_COLUMNS if getattr(row, c) != getattr(other, c))


@dataclass(frozen=True)
class PairPrediction:
    """Two rows of one table (same set-up and node count but for what is compared): the measured and predicted
    ratio of the one predicted faster over the other, the ratio's interval fitted on other sources' pairs, and the
    naive interval of the two rows' own intervals divided end by end."""

    source: str
    table: str
    model: str
    nodes: int
    faster: str  # the row predicted faster, by the columns it differs in (``pair_label``)
    slower: str
    interval_regime: str  # ``pair_regime`` of the two rows'
    measured: float  # measured throughput ratio faster / slower
    predicted: float  # predicted ratio, >= 1
    low: float  # the interval fitted on the other sources' pairs
    high: float
    naive_low: float  # the faster row's low over the slower's high
    naive_high: float  # the faster row's high over the slower's low

    @property
    def covered(self) -> bool:
        return self.low <= self.measured <= self.high

    @property
    def naive_covered(self) -> bool:
        return self.naive_low <= self.measured <= self.naive_high

    @property
    def decided(self) -> bool:
        """The interval excludes 1: the prediction says which is faster."""
        return self.low > 1 or self.high < 1

    def as_dict(self) -> dict:
        return {**asdict(self), "covered": self.covered, "naive_covered": self.naive_covered, "decided": self.decided}


def oriented_pairs(rows: list[PublishedRow], predicted: list[float]) -> list[tuple[int, int]]:
    """``paired_rows`` each as (faster, slower) by the prediction (ties: the first row first)."""
    return [(i, j) if predicted[i] >= predicted[j] else (j, i) for i, j in paired_rows(rows)]


def pair_figures(pairs: list[PairPrediction]) -> dict:
    """Over left-out pairs: how many, the coverage and median half-width (relative to the predicted ratio) of
    the paired intervals and of the naive ones, the share whose paired interval excludes 1 (``decided``) and, of
    those, the share on the measured side of 1 (``decided_right``); the same two for the naive intervals."""
    decided = [p for p in pairs if p.decided]
    naive_decided = [p for p in pairs if p.naive_low > 1 or p.naive_high < 1]
    return {"pairs": len(pairs), "coverage": share(p.covered for p in pairs),
            "median_half_width": median([(p.high - p.low) / 2 / p.predicted for p in pairs]),
            "naive_coverage": share(p.naive_covered for p in pairs),
            "naive_median_half_width": median([(p.naive_high - p.naive_low) / 2 / p.predicted for p in pairs]),
            "decided": share(p.decided for p in pairs),
            "decided_right": share((p.measured > 1) == (p.low > 1) for p in decided),
            "naive_decided": len(naive_decided) / len(pairs) if pairs else None,
            "naive_decided_right": share((p.measured > 1) == (p.naive_low > 1) for p in naive_decided)}


def nested_speedup_figures(pairs: list[PairPrediction], groups: dict[str, frozenset[str]] | None = None,
                           level: float = INTERVAL_LEVEL) -> dict:
    """The speed-up interval method judged without post-selection: each held-out group's pairs (``groups``: per
    source, the sources left out with it; default each alone) take the method ``speedup_method`` picks on the other
    sources' pairs of their regime. Pairs, coverage and median half-width of the interval so chosen, and the share
    that took ``paired``; overall and per interval regime."""
    groups = groups or {}
    chosen = []
    for group in {groups.get(p.source, frozenset({p.source})) for p in pairs}:
        rest = [p for p in pairs if p.source not in group]
        for reg in REGIMES:
            method = speedup_method(pair_figures([p for p in rest if p.interval_regime == reg]), level)
            chosen += [(p, method) for p in pairs if p.source in group and p.interval_regime == reg]

    def figures(picked):
        return {"pairs": len(picked),
                "coverage": share(p.covered if m == "paired" else p.naive_covered for p, m in picked),
                "median_half_width": median([((p.high - p.low) if m == "paired" else (p.naive_high - p.naive_low))
                                             / 2 / p.predicted for p, m in picked]),
                "paired_share": share(m == "paired" for _, m in picked)}

    return {**figures(chosen), "by_regime": {reg: figures([c for c in chosen if c[0].interval_regime == reg])
                                             for reg in REGIMES}}


def speedup_method(figures: dict, level: float = INTERVAL_LEVEL) -> str:
    """Which speed-up interval the left-out pairs of one regime support (``pair_figures``): ``paired`` (fitted on
    the pairs' ratio errors) where it covers at least ``level`` and is no wider in median than ``naive`` (the two
    intervals divided end by end) or the naive one falls short; else ``naive`` where it covers at least
    ``level``; where neither does, the one that covers more; ``naive`` where there are no pairs."""
    if not figures.get("pairs"):
        return "naive"
    paired_ok, naive_ok = figures["coverage"] >= level, figures["naive_coverage"] >= level
    if paired_ok and (not naive_ok or figures["median_half_width"] <= figures["naive_median_half_width"]):
        return "paired"
    if naive_ok or figures["naive_coverage"] >= figures["coverage"]:
        return "naive"
    return "paired"


def _pair_errors(rows: list[PublishedRow], predicted: list[float], regimes: list[str]
                 ) -> list[tuple[tuple[int, int], LoggedError]]:
    """Per pair of rows a speed-up compares, oriented faster-first by the prediction: ((faster, slower), its error:
    the pair's source and interval regime, log(measured ratio / predicted ratio))."""
    return [((i, j), LoggedError(rows[i].source, pair_regime(regimes[i], regimes[j]),
                                 math.log(rows[i].throughput / rows[j].throughput)
                                 - math.log(predicted[i] / predicted[j])))
            for i, j in oriented_pairs(rows, predicted)]


def left_out_pairs(rows: list[PublishedRow], predicted: list[float], regimes: list[str],
                    intervals: list[tuple[float, float]], groups: dict[str, frozenset[str]]
                    ) -> tuple[list[PairPrediction], list[LoggedError]]:
    """Every pair of ``rows`` (predicted ``predicted``, with interval regimes ``regimes`` and left-out intervals
    ``intervals``) with its speed-up interval fitted on the pairs of the sources not held out with it (a pair's
    two rows share their source; the levels, per interval regime, calibrated on those sources alone), and the
    pairs' errors."""
    indexed = _pair_errors(rows, predicted, regimes)
    errors = [e for _, e in indexed]
    bounds = left_out_bounds(errors, groups)
    pairs = []
    for (i, j), e in indexed:
        ratio = predicted[i] / predicted[j]
        low, high = interval_around(ratio, regime_bounds(bounds[groups[e.source]][1], e.regime))
        (low_i, high_i), (low_j, high_j) = intervals[i], intervals[j]
        a, b = rows[i], rows[j]
        pairs.append(PairPrediction(a.source, a.table, a.model, a.nodes, pair_label(a, b), pair_label(b, a),
                                    e.regime, a.throughput / b.throughput, ratio, low, high, low_i / high_j,
                                    high_i / low_j if low_j > 0 else math.inf))
    return pairs, errors
