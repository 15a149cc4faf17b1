"""An experiment toward issue 27 item 2, not yet what predictions use: the intervals' conformal correction fitted
with each SOURCE weighted equally instead of each row, scored leave-one-source-out beside the shipped one.

The shipped intervals (``leave_one_source_out``) take row-weighted conformal quantiles of log(measured / predicted)
per interval regime and raise their level until the other sources, each left out, are covered as promised
(``sim.uncertainty.nested_calibrated_levels``, per interval regime; that coverage counts each source once, but the
quantiles themselves weigh rows). A source with many rows then still shapes the bounds for every other. Here each
row weighs 1 / (its source's rows), so every source counts once, and the bounds are the weighted quantiles at (1 -+
level) / 2 with the new source's own weight counted as unseen (weighted split conformal, Tibshirani et al. 2019;
grouped data, Dunn et al. 2022). Both are scored on the same left-out predictions, held-out group by held-out group
(sources sharing a testbed leave together), with the same linear-scaling ceiling.

``python -m sim.validation.source_weighted`` prints coverage (of rows, and the mean over sources) and median
half-width per measured regime for both, beside the left-out MAPE of the simulator, linear scaling and an
alpha-beta ring on the same rows.
"""

from __future__ import annotations

import argparse
import math
import sys

from sim.uncertainty import INTERVAL_LEVEL, REGIMES, interval_around, linear_ceiling
from sim.validation.figures import median, percent
from sim.validation.leave_one_source_out import CorpusPrediction, corpus_validation
from sim.validation.stored import stored_calibration_extra, stored_step_jitter_fits


def weighted_bounds(log_ratios: list[float], weights: list[float], level: float = INTERVAL_LEVEL,
                    new_weight: float = 1.0) -> tuple[float, float]:
    """Bounds on log(measured / predicted) with at most ``(1 - level) / 2`` of the weight beyond each, the new
    point's weight (``new_weight``: one row, or one source whose rows weigh 1 together) counted in the total; with
    weights of 1 these are ``sim.uncertainty.log_ratio_quantiles``'; infinite where the weights cannot say."""
    total = sum(weights) + new_weight
    tail = round((1 - level) / 2 * total, 9)  # rounded: (1 - 0.8) / 2 is 0.0999... in binary
    order = sorted(range(len(log_ratios)), key=lambda i: log_ratios[i])
    low = high = None
    below = above = 0.0
    for i in order:  # the highest value with at most the tail's weight at or below it (unweighted: the
        below += weights[i]  # floor((n + 1) (1 - level) / 2)-th smallest, as log_ratio_quantiles)
        if round(below, 9) > tail:
            break
        low = log_ratios[i]
    for i in reversed(order):
        above += weights[i]
        if round(above, 9) > tail:
            break
        high = log_ratios[i]
    return (-math.inf if low is None else low), (math.inf if high is None else high)


def source_weighted_intervals(rows: tuple[CorpusPrediction, ...], groups: dict[str, frozenset[str]],
                              level: float = INTERVAL_LEVEL) -> list[tuple[float, float]]:
    """Per row, its interval from the rows of the sources not held out with it, each source weighted equally,
    per interval regime (the regimes pooled where one cannot bound), capped at linear scaling."""
    out = []
    for row in rows:
        held = groups[row.source]
        others = [r for r in rows if r.source not in held]
        counts: dict[str, int] = {}
        for r in others:
            counts[r.source] = counts.get(r.source, 0) + 1

        same = [r for r in others if r.interval_regime == row.interval_regime]
        b = weighted_bounds([math.log(r.measured / r.left_out) for r in same], [1 / counts[r.source] for r in same],
                            level)
        if not all(map(math.isfinite, b)):
            b = weighted_bounds([math.log(r.measured / r.left_out) for r in others],
                                [1 / counts[r.source] for r in others], level)
        low, high = interval_around(row.left_out, b)
        out.append((low, linear_ceiling(high, row.left_out, row.linear)))
    return out


def scores(rows: list[CorpusPrediction], intervals: list[tuple[float, float]]) -> dict:
    """Coverage of the rows, the mean over sources of each source's coverage, and the median half-width."""
    covered = [low <= r.measured <= high for r, (low, high) in zip(rows, intervals, strict=True)]
    by_source: dict[str, list[bool]] = {}
    for r, c in zip(rows, covered, strict=True):
        by_source.setdefault(r.source, []).append(c)
    return {"rows": len(rows), "sources": len(by_source),
            "coverage": sum(covered) / len(covered) if covered else None,
            "coverage_mean_over_sources": (sum(sum(v) / len(v) for v in by_source.values()) / len(by_source)
                                           if by_source else None),
            "median_half_width": median([(high - low) / 2 / r.left_out for r, (low, high)
                                         in zip(rows, intervals, strict=True)])}


def compare() -> dict:
    """Both corrections scored per measured regime on the shipped corpus's left-out predictions."""
    run = corpus_validation(step_jitter_fits=stored_step_jitter_fits(), calibration_extra=stored_calibration_extra())
    weighted = source_weighted_intervals(run.rows, run.held_out_groups)
    out = {}
    for regime in (*REGIMES, "all"):
        keep = [i for i, r in enumerate(run.rows) if regime in (r.regime, "all")]
        rows = [run.rows[i] for i in keep]

        out[regime] = {"shipped": scores(rows, [(run.rows[i].low, run.rows[i].high) for i in keep]),
                       "source_weighted": scores(rows, [weighted[i] for i in keep]),
                       **{f"mape_{name}": sum(abs(getattr(r, name) - r.measured) / r.measured for r in rows) / len(rows)
                          for name in ("left_out", "linear", "alpha_beta")}}
    return out


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m sim.validation.source_weighted", description=__doc__.split("\n\n")[0]
                            ).parse_args(argv)
    for regime, f in compare().items():
        print(f"{regime} (measured): {f['shipped']['rows']} rows of {f['shipped']['sources']} sources; left-out "
              f"MAPE {percent(f['mape_left_out'])} (linear scaling {percent(f['mape_linear'])}, alpha-beta "
              f"{percent(f['mape_alpha_beta'])})")
        for name in ("shipped", "source_weighted"):
            s = f[name]
            print(f"  {name.replace('_', '-'):16} coverage {percent(s['coverage'])} of rows, "
                  f"{percent(s['coverage_mean_over_sources'])} mean over sources; median half-width "
                  f"{percent(s['median_half_width'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
