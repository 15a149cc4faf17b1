"""What a prediction needs to say how sure it is: the regimes, the naive alpha-beta baseline that keys an interval, and
the intervals themselves (conformal bounds on log(measured / predicted), their level calibrated source by source and
per regime, and the stored bounds a prediction reads).

The interval of a prediction (``prediction_interval``) is an 80% interval. For a site profile, the quantiles of
log(measured / predicted) of its own public rows, each group left out of its fit. Otherwise the prediction's own
model-uncertainty widths (``sim.input_ranges``: every uncertain input's sourced range, propagated) times the
quantiles of the normalised residuals (log(measured / predicted) over the row's widths: ``normalised_residual``, Lei
et al. 2018) of the validation corpus with each source left out, per predicted regime (compute- or communication-
bound) and apart for predictions calibrated on a measured node and those from built-in compute profiles, their level
calibrated source by source and apart for each regime (Mondrian), to a target itself calibrated source by source
(nested), the corpus's sources and the first-contact log's each covered as promised (strata): widths grow with what
the prediction does not know. A speed-up (one prediction over another of the same set-up, ``speedup_interval``)
takes bounds of its own, fitted on the corpus's pairs of rows of one table. They are measured once by validation
(sim.validation.stored) and stored in ``presets/cross_validation.json``, which ``stored_intervals`` reads: no
prediction pays a refit, and nothing here imports validation.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from birder_ref import registry
from sim.hardware import PRESETS
from sim.workload import GRAD_BITS

REGIMES = ("compute-bound", "communication-bound")
COMM_BOUND_GAP = 0.15  # linear scaling more than 15% above the measured throughput: communication-bound


def regime_of_efficiency(scale_efficiency: float) -> str:
    """The line between the regimes, drawn on a scale efficiency (throughput / (nodes x single-node throughput)):
    "communication-bound" when linear scaling is more than 15% above the throughput, else "compute-bound"."""
    return REGIMES[scale_efficiency * (1.0 + COMM_BOUND_GAP) < 1.0]


INTERVAL_LEVEL = 0.8  # the intervals' nominal coverage
# alpha-beta baseline: NCCL's own per-message figure for a network hop of a ring (tuning.cc: Simple protocol base
# latency 8.4 us + NET hardware latency 14 us, the figure SimAI's send_lat tables use; shared/notes/anchor_sim.md 2)
ALPHA_BETA_LATENCY_S = 22.4e-6


predicted_regime = regime_of_efficiency  # the same line, drawn on a prediction (known before measuring)


def alpha_beta_throughput(params: int, bits: int | tuple[tuple[float, int], ...], nodes: int, samples_per_node: int,
                          single_node_throughput: float, bandwidth: float) -> float:
    """Naive baseline: one node's step (``samples_per_node`` at its measured throughput) plus a ring all-reduce
    of ``params`` x ``bits`` among ``nodes`` at ``bandwidth`` bytes/s per node, 2(n-1) messages of
    ``ALPHA_BETA_LATENCY_S`` each, no overlap with compute (Thakur et al. 2005's ring). ``bits``: per element, or
    (share, bits) of each kind of step (``gradient_bits``), the all-reduce's time averaged over them (0 bits: a
    step that sends nothing)."""
    one_node_s = samples_per_node / single_node_throughput
    steps = ((1.0, bits),) if isinstance(bits, int) else bits
    allreduce_s = sum(share * (2 * (nodes - 1) * ALPHA_BETA_LATENCY_S
                               + 2 * (nodes - 1) / nodes * params * b / 8 / bandwidth)
                      for share, b in steps if b > 0)
    return nodes * samples_per_node / (one_node_s + allreduce_s)


def incast_slowed(throughput: float, samples_per_step: int, incast_s: float) -> float:
    """``throughput`` (samples/s, ``samples_per_step`` a step) with ``incast_s`` seconds of TCP incast stalls added
    to each step: what the alpha-beta baseline becomes where the simulator sees incast."""
    return samples_per_step / (samples_per_step / throughput + incast_s)


def gradient_bits(optimizer: str, grad_dtype: str, model_name: str = "", warmup_fraction: float | None = None,
                  marsit_period: int | None = None) -> tuple[tuple[float, int], ...]:
    """(share, bits per gradient element) of each kind of step ``optimizer`` takes (its step kinds,
    ``birder_ref.registry``, with the options the simulator takes): the gradient dtype's on a full-precision step,
    1 on a compressed one, 0 on one that sends nothing. An optimizer the simulator does not run: every step
    compressed or not as its spec says."""
    spec = registry.get(optimizer)
    if spec.step_kinds is None:
        return ((1.0, 1 if spec.compressed else GRAD_BITS[grad_dtype]),)
    return tuple((k.share, 0 if k.comm == "none" else GRAD_BITS[grad_dtype] if k.full_precision else 1)
                 for k in spec.step_kinds(model_name, warmup_fraction, marsit_period) if k.share > 0)


def interval_regime(alpha_beta_efficiency: float) -> str:
    """The regime an interval is keyed on: the one a plain alpha-beta ring predicts (``predicted_regime`` of its
    scale efficiency), known before measuring and, unlike the simulator's own, not optimistic where the
    simulator is."""
    return predicted_regime(alpha_beta_efficiency)


def log_ratio_quantiles(log_ratios: list[float], level: float = INTERVAL_LEVEL) -> tuple[float, float]:
    """Split-conformal bounds on log(measured / predicted): the k-th smallest with k = floor((n+1)(1-level)/2)
    below and its mirror above, so that a new exchangeable row falls inside with probability >= ``level``
    (Vovk et al. 2005; Lei et al. 2018); infinite where n is too small to say."""
    return _sorted_quantiles(sorted(log_ratios), level)


def _sorted_quantiles(xs: list[float], level: float, upper_share: float = 0.5) -> tuple[float, float]:
    """``log_ratio_quantiles`` of ``xs``, already sorted, ``upper_share`` of the miss budget above
    (``_quantile_ranks``)."""
    k_low, k_high = _quantile_ranks(len(xs), level, upper_share)
    low = xs[k_low - 1] if k_low >= 1 else -math.inf
    high = xs[k_high - 1] if k_high <= len(xs) else math.inf
    return low, high


@lru_cache(maxsize=4096)
def _quantile_ranks(n: int, level: float, upper_share: float = 0.5) -> tuple[int, int]:
    """The 1-based ranks of ``log_ratio_quantiles``' bounds among ``n`` sorted values: out of 1..n where ``n`` is
    too small to say. ``upper_share`` of the miss budget (1 - ``level``) lies above the upper bound and the rest
    below the lower (half each: ``log_ratio_quantiles``); with none above, the upper bound is the largest value
    (``CAPPED_UPPER_SHARE``)."""
    below, above = (1 - level) * (1 - upper_share), (1 - level) * upper_share
    k_high = math.ceil(round((n + 1) * (1 - above), 9))  # rounded: (1 - 0.8) / 2 is 0.0999... in binary
    return math.floor(round((n + 1) * below, 9)), (min(k_high, max(n, 1)) if upper_share == 0 else k_high)


@lru_cache(maxsize=4096)
def _grid_ranks(n: int, upper_share: float = 0.5) -> np.ndarray:
    """``_quantile_ranks`` of ``n`` values at each level of ``LEVEL_GRID``, one row per level."""
    return np.array([_quantile_ranks(n, level, upper_share) for level in LEVEL_GRID], dtype=int)


def normalised_residual(log_ratio: float, down: float, up: float) -> float:
    """log(measured / predicted) in units of the prediction's propagated log-width (``sim.input_ranges``): over
    ``up`` where the measurement is above the prediction, over ``down`` where below. The normalised (locally
    weighted) conformal score of Lei et al. 2018, Section 5.2, with a width of its own on each side."""
    return log_ratio / up if log_ratio >= 0 else log_ratio / down


def scaled_bounds(bounds: tuple[float, float], down: float, up: float) -> tuple[float, float]:
    """Bounds on the normalised residual (``normalised_residual``) back on log(measured / predicted) for a
    prediction of log-widths ``down`` and ``up``: the inverse of the same map, end by end."""
    return tuple(z * up if z >= 0 else z * down for z in bounds)


def interval_around(predicted: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """The interval of a prediction from bounds on log(measured / predicted), stretched to hold the prediction
    itself (where every left-out row lay on one side of its prediction, the bounds alone would exclude it)."""
    return min(predicted, predicted * math.exp(bounds[0])), max(predicted, predicted * math.exp(bounds[1]))


def linear_ceiling(high: float, predicted: float, linear: float) -> float:
    """An interval's upper end held at linear scaling of a measured node (``linear``: nodes x its throughput),
    the most more nodes of its kind can give; never below the prediction itself."""
    return min(high, max(predicted, linear))


def interval_quantiles(predictions: list[tuple[str, float]], levels: float | dict[str, float] = INTERVAL_LEVEL,
                       capped: bool = False) -> dict[str, tuple[float, float]]:
    """Per interval regime (and ``all``, the regimes pooled), the conformal bounds of log(measured / predicted)
    over (regime, log ratio) pairs, each at its own conformal level (``levels``: per regime and ``all``, as
    ``source_calibrated_levels`` gives them; one number: the same level for all). ``capped``: the intervals'
    upper ends are held at linear scaling (a measured node, ``linear_ceiling``), which splits the miss budget by
    ``CAPPED_UPPER_SHARE``."""
    return _regime_quantiles(_sorted_by_regime(predictions), levels, upper_shares(capped))


def _sorted_by_regime(predictions) -> dict[str, list[float]]:
    """(regime, log ratio) pairs as each regime's log ratios sorted, and ``all``'s."""
    return {reg: sorted(x for r, x in predictions if reg in (r, "all")) for reg in (*REGIMES, "all")}


def _regime_quantiles(by_regime: dict[str, list[float]], levels: float | dict[str, float],
                      shares: dict[str, float]) -> dict[str, tuple[float, float]]:
    return {reg: _sorted_quantiles(xs, levels if isinstance(levels, float | int) else levels[reg], shares[reg])
            for reg, xs in by_regime.items()}


# the share of the miss budget an interval spends above its upper bound where that end is held at linear scaling
# (a measured node): none on a compute-bound one, whose alpha-beta ring lies within 15% of linear scaling
# (``interval_regime``) so the cap already bounds the upper side closely, all of it below; half on a
# communication-bound one (and on the regimes pooled), whose cap lies far above. Adopted by batch 19's rule
# (sim/validation/README.md)
CAPPED_UPPER_SHARE = {"compute-bound": 0.0, "communication-bound": 0.5, "all": 0.5}
EVEN_SHARE = dict.fromkeys((*REGIMES, "all"), 0.5)


def upper_shares(capped: bool) -> dict[str, float]:
    """The miss budget's share above the upper bound per regime (and ``all``): ``CAPPED_UPPER_SHARE`` where the
    intervals are held at linear scaling, else half."""
    return CAPPED_UPPER_SHARE if capped else EVEN_SHARE


def any_capped(errors) -> bool:
    """Whether a fit on ``errors`` (``LoggedError``) has intervals held at linear scaling: any of them carries a cap
    (a measured node's fit), which ``upper_shares`` then splits the miss budget for."""
    return any(math.isfinite(e.cap) for e in errors)


def regime_bounds(q: dict[str, tuple[float, float]], regime: str) -> tuple[float, float]:
    """A regime's bounds from ``interval_quantiles``, or the regimes pooled where its rows are too few to bound."""
    return q[regime] if all(map(math.isfinite, q[regime])) else q["all"]


# the conformal levels a source-calibrated interval may take, from the nominal one up (half a percent apart)
LEVEL_GRID = tuple(round(INTERVAL_LEVEL + 0.005 * k, 3) for k in range(int(round((0.99 - INTERVAL_LEVEL) / 0.005)) + 1))
GRID_INDEX = {level: i for i, level in enumerate(LEVEL_GRID)}


@dataclass(frozen=True)
class LoggedError:
    """One left-out prediction as the intervals see it: its source, interval regime, log(measured / predicted)
    and the most its interval's upper end may be in the same units (log(linear scaling / predicted) on a measured
    node, ``linear_ceiling``; infinite where nothing caps it)."""

    source: str
    regime: str
    log_ratio: float
    cap: float = math.inf


def _covered_count(log_ratios, caps, bounds: tuple[float, float]) -> int:
    """How many of the rows (``log_ratios`` and ``caps`` of ``LoggedError``, as arrays) lie in their intervals
    from ``bounds``: stretched to hold the prediction (``interval_around``) and capped (``linear_ceiling``)."""
    high = np.minimum(max(bounds[1], 0.0), np.maximum(caps, 0.0))
    return int(np.count_nonzero((log_ratios >= min(bounds[0], 0.0)) & (log_ratios <= high)))


class _LeftOutFits:
    """The conformal fits of leave-one-source-out calibration on ``errors``: each exclusion's log ratios sorted
    once, and each held-out group's rows covered counted at every level of ``LEVEL_GRID`` at once (a nested
    calibration fits the same exclusions at the same levels many times over)."""

    def __init__(self, errors: list[LoggedError], groups: dict[str, frozenset[str]],
                 strata: dict[str, str] | None = None):
        self.errors, self.groups = tuple(errors), groups
        self._shares = upper_shares(any_capped(errors))
        stratum_of = (lambda _: "") if strata is None else strata.__getitem__
        self._grid_counts: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._curves: dict[tuple, np.ndarray] = {}
        self._levels: dict[tuple, dict[str, float]] = {}
        self._kept_masks: dict[frozenset[str], np.ndarray] = {}
        # each held-out group's rows of each regime and stratum: log ratios and caps
        self._rows = {(held, reg, stratum): tuple(
            np.array([getattr(e, k) for e in errors if e.source in held and e.regime == reg
                      and stratum_of(e.source) == stratum], dtype=float) for k in ("log_ratio", "cap"))
            for held in {groups[e.source] for e in errors} for reg in REGIMES
            for stratum in sorted({stratum_of(e.source) for e in errors})}
        # each regime's log ratios (and all's) sorted once, with their sources: an exclusion's are a mask of them
        self._sources = sorted({e.source for e in errors})
        index = {source: i for i, source in enumerate(self._sources)}
        self._sorted_rows = {}
        for name in (*REGIMES, "all"):
            rows = sorted((e.log_ratio, index[e.source]) for e in errors if name in (e.regime, "all"))
            self._sorted_rows[name] = (np.array([x for x, _ in rows], dtype=float),
                                       np.array([i for _, i in rows], dtype=int))

    def _counts_on_grid(self, excluded: frozenset[str], held: frozenset[str], regime: str, stratum: str
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """At each level of ``LEVEL_GRID``: how many of ``held``'s rows of ``regime`` and ``stratum`` lie in their
        intervals from the quantiles of the errors of the sources not in ``excluded`` (``_covered_count``) with
        ``regime``'s bounds, whether those bounds are finite, and how many with the regimes pooled
        (``regime_bounds``' fallback)."""
        key = (excluded, held, regime, stratum)
        if key not in self._grid_counts:
            log_ratios, caps = self._rows[held, regime, stratum]
            kept = self._kept(excluded)
            counts, finite = self._counted(regime, kept, log_ratios, caps)
            # the pooled bounds only where the regime's are not finite (else they are never read)
            pooled = counts if finite.all() else self._counted("all", kept, log_ratios, caps)[0]
            self._grid_counts[key] = counts, finite, pooled
        return self._grid_counts[key]

    def _kept(self, excluded: frozenset[str]) -> np.ndarray:
        """Whether each source (in ``_sources``' order) is not in ``excluded``, built once per exclusion."""
        if excluded not in self._kept_masks:
            self._kept_masks[excluded] = np.array([s not in excluded for s in self._sources], dtype=bool)
        return self._kept_masks[excluded]

    def _counted(self, name: str, kept: np.ndarray, log_ratios: np.ndarray, caps: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """At each level of ``LEVEL_GRID``: how many of the rows (``log_ratios``, ``caps``) lie in their intervals
        from the bounds of ``name``'s (a regime's, or all) errors of the ``kept`` sources, and whether those
        bounds are finite."""
        xs, sources = self._sorted_rows[name]
        xs = xs[kept[sources]]
        ranks = _grid_ranks(xs.size, self._shares[name])
        if xs.size:
            at = np.clip(ranks - 1, 0, xs.size - 1)
            low = np.where(ranks[:, 0] >= 1, xs[at[:, 0]], -np.inf)
            high = np.where(ranks[:, 1] <= xs.size, xs[at[:, 1]], np.inf)
        else:
            low, high = np.full(len(LEVEL_GRID), -np.inf), np.full(len(LEVEL_GRID), np.inf)
        top = np.minimum(np.maximum(high, 0.0)[:, None], np.maximum(caps, 0.0)[None, :])
        inside = (log_ratios >= np.minimum(low, 0.0)[:, None]) & (log_ratios <= top)
        return np.count_nonzero(inside, axis=1), np.isfinite(low) & np.isfinite(high)

    def _inside(self, excluded: frozenset[str], held: frozenset[str], regime: str, stratum: str,
                levels: float | dict[str, float]) -> int:
        """How many of ``held``'s rows of ``regime`` (and ``stratum``) lie in their intervals from the errors of the
        sources not in ``excluded`` at ``levels``."""
        level, pooled = (levels, levels) if isinstance(levels, float | int) else (levels[regime], levels["all"])
        if level in GRID_INDEX and pooled in GRID_INDEX:
            counts, finite, counts_pooled = self._counts_on_grid(excluded, held, regime, stratum)
            i = GRID_INDEX[level]
            return int(counts[i] if finite[i] else counts_pooled[GRID_INDEX[pooled]])
        return _covered_count(*self._rows[held, regime, stratum],
                              regime_bounds(self.quantiles(excluded, levels), regime))

    def _covered(self, regime: str | None, excluded: frozenset[str], levels_of) -> float:
        """The coverage of the sources not in ``excluded``, each held-out group weighted equally: the mean over
        those groups of the share of their rows (of ``regime``, or all) inside intervals fitted without the group
        (and ``excluded``) at levels ``levels_of(its exclusion)``. A source with many rows counts once, as a new
        source will (issue 27: each source weighted equally, not each row). With strata, the least of the strata's
        coverages, each of its own rows."""
        covered: dict[str, dict[frozenset[str], list[int]]] = {}
        for (held, reg, stratum), (log_ratios, _) in self._rows.items():
            if regime in (None, reg) and log_ratios.size and not held & excluded:
                counts = covered.setdefault(stratum, {}).setdefault(held, [0, 0])
                counts[0] += self._inside(excluded | held, held, reg, stratum, levels_of(excluded | held))
                counts[1] += log_ratios.size
        return min((sum(inside / total for inside, total in by_group.values()) / len(by_group)
                    for by_group in covered.values()), default=1.0)

    def _coverage_on_grid(self, regime: str | None, excluded: frozenset[str]) -> np.ndarray:
        """``coverage`` at each level of ``LEVEL_GRID`` (one level for every regime), the same sums in the same
        order."""
        key = (regime, excluded)
        if key not in self._curves:
            covered: dict[str, dict[frozenset[str], list]] = {}
            for (held, reg, stratum), (log_ratios, _) in self._rows.items():
                if regime in (None, reg) and log_ratios.size and not held & excluded:
                    counts, finite, counts_pooled = self._counts_on_grid(excluded | held, held, reg, stratum)
                    tally = covered.setdefault(stratum, {}).setdefault(held, [0, 0])
                    tally[0] = tally[0] + np.where(finite, counts, counts_pooled)
                    tally[1] += log_ratios.size
            self._curves[key] = np.ones(len(LEVEL_GRID))  # each stratum's mean share is at most 1: the least
            for by_group in covered.values():
                curve = np.zeros(len(LEVEL_GRID))
                for inside, total in by_group.values():
                    curve = curve + inside / total
                self._curves[key] = np.minimum(self._curves[key], curve / len(by_group))
        return self._curves[key]

    def quantiles(self, excluded: frozenset[str], levels: float | dict[str, float]) -> dict[str, tuple[float, float]]:
        """``interval_quantiles`` of the errors of the sources not in ``excluded`` (the sorted rows, masked)."""
        kept = self._kept(excluded)
        rows = self._sorted_rows.items()
        return _regime_quantiles({name: xs[kept[sources]].tolist() for name, (xs, sources) in rows}, levels,
                                 self._shares)

    def coverage(self, levels: float | dict[str, float], regime: str | None, excluded: frozenset[str]) -> float:
        """``source_coverage`` on the errors of the sources not in ``excluded``, which no fit sees either."""
        if isinstance(levels, float) and levels in GRID_INDEX:
            return float(self._coverage_on_grid(regime, excluded)[GRID_INDEX[levels]])
        return self._covered(regime, excluded, lambda _: levels)

    def least(self, covers) -> float:
        """The least of ``LEVEL_GRID`` at which ``covers(level)`` (true from some level up) holds; the grid's top
        where none does. Bisected."""
        low, high = 0, len(LEVEL_GRID) - 1
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if covers(LEVEL_GRID[mid]) else (mid + 1, high)
        return LEVEL_GRID[low]

    def calibrated(self, nominal: float, excluded: frozenset[str]) -> dict[str, float]:
        """``source_calibrated_levels`` on the errors of the sources not in ``excluded``."""
        if (nominal, excluded) not in self._levels:
            levels = {reg: self.least(lambda level, reg=reg: self.coverage(level, reg, excluded) >= nominal)
                      for reg in REGIMES}
            self._levels[nominal, excluded] = {**levels, "all": max(levels.values())}
        return self._levels[nominal, excluded]

    def nested_coverage(self, target: float, regime: str, excluded: frozenset[str]) -> float:
        """Share of ``regime``'s rows (sources not in ``excluded``) inside intervals whose levels were calibrated
        to ``target`` (``calibrated``) without their own source: the coverage the calibration itself reaches on a
        source it has not seen."""
        return self._covered(regime, excluded, lambda without: self.calibrated(target, without))

    def nested(self, nominal: float, excluded: frozenset[str]) -> dict[str, float]:
        """``nested_calibrated_levels`` on the errors of the sources not in ``excluded``."""
        levels = {}
        for reg in REGIMES:
            target = self.least(lambda t, reg=reg: self.nested_coverage(t, reg, excluded) >= nominal)
            levels[reg] = self.calibrated(target, excluded)[reg]
        return {**levels, "all": max(levels.values())}


def source_coverage(errors: list[LoggedError], groups: dict[str, frozenset[str]],
                    levels: float | dict[str, float], regime: str | None = None,
                    strata: dict[str, str] | None = None) -> float:
    """Leave-one-source-out coverage of ``errors`` (those of interval regime ``regime``, or all) by intervals at
    conformal ``levels`` (``interval_quantiles``) fitted, for each, on the errors of the sources not held out with
    its own (``groups``): the mean over held-out groups of the share of their rows covered, each group weighted
    equally. 1.0 where there is no such row. ``strata`` (a stratum per source): the least of the strata's
    coverages, each over its own sources' rows."""
    return _LeftOutFits(errors, groups, strata).coverage(levels, regime, frozenset())


def source_calibrated_levels(errors: list[LoggedError], groups: dict[str, frozenset[str]],
                             nominal: float = INTERVAL_LEVEL, strata: dict[str, str] | None = None
                             ) -> dict[str, float]:
    """Per interval regime, the least conformal level (``LEVEL_GRID``) at which intervals fitted
    leave-one-source-out on ``errors`` cover at least ``nominal`` of that regime's rows, each held-out group of
    sources weighted equally (``source_coverage``); ``all`` (the pooled
    quantiles, a regime's fallback where its rows are too few to bound, ``regime_bounds``) at the highest of
    them, so a fallback is never narrower than the level its regime was calibrated at.

    Split-conformal's guarantee holds for exchangeable rows, but rows of one source share its set-up's errors,
    so a new source's rows fall outside more often than the rows' own quantiles say; raising the level until the
    sources at hand are covered as promised, each judged by the others, calibrates for that (cross-conformal over
    groups; Barber et al. 2021 on jackknife+, Dunn et al. 2022 on conformal prediction for grouped data). Done
    per regime, it is Mondrian (category-conditional) conformal prediction (Vovk, Gammerman & Shafer 2005, ch. 4;
    Vovk 2012, "Conditional validity of inductive conformal predictors"): coverage is promised within each
    regime, not only on the regimes pooled, where a well-covered regime would hide a short one. The top of the
    grid where even that falls short (``source_coverage`` at the levels says by how much). Coverage grows with
    the level (wider quantiles), so the grid is bisected. With ``strata`` (a stratum per source, such as the
    corpus and the first-contact log), each stratum's sources are covered as promised, not only all pooled."""
    return _LeftOutFits(errors, groups, strata).calibrated(nominal, frozenset())


def nested_calibrated_levels(errors: list[LoggedError], groups: dict[str, frozenset[str]],
                             nominal: float = INTERVAL_LEVEL, strata: dict[str, str] | None = None
                             ) -> dict[str, float]:
    """Per interval regime, ``source_calibrated_levels`` at the least target (``LEVEL_GRID``) at which that
    calibration, run without each source in turn, covers at least ``nominal`` of the held-out sources' rows
    (each source's share, averaged); ``all`` at the highest, as there.

    The least level that covers the sources at hand as promised is chosen on those same sources, so a source
    none of them is covers less (a selection optimism: 77% of the corpus's communication-bound rows, each
    source's levels calibrated without it, for 80% promised, when this was added). Calibrating the target itself
    by the same leave-one-source-out rule corrects for it: double cross-validation (Stone 1974, "Cross-validatory
    choice and assessment of statistical predictions"; Varma & Simon 2006 on the bias of choosing and assessing on
    the same folds).
    A target grows the levels, which grow the coverage, so the targets are bisected too. ``strata``: as
    ``source_calibrated_levels``', at both depths."""
    return _LeftOutFits(errors, groups, strata).nested(nominal, frozenset())


def left_out_bounds(errors: list[LoggedError], groups: dict[str, frozenset[str]], others_of=None,
                    strata: dict[str, str] | None = None
                    ) -> dict[frozenset[str], tuple[dict[str, float], dict[str, tuple[float, float]]]]:
    """Per held-out group of sources: (the levels, per regime, calibrated on the other sources alone
    (``nested_calibrated_levels``), and the quantiles of their errors at them). Nothing of the held-out group
    enters either. ``others_of(held)``, where given, gives the other sources' errors as predicted without the
    held-out group (a constant fitted on the corpus refitted without it); else they are ``errors``' own.
    ``strata``: as ``nested_calibrated_levels``'."""
    out, shared = {}, _LeftOutFits(errors, groups, strata)
    for held in {groups[e.source] for e in errors}:
        fits, excluded = (shared, held) if others_of is None else (
            _LeftOutFits(others_of(held), groups, strata), frozenset())
        levels = fits.nested(INTERVAL_LEVEL, excluded)
        out[held] = levels, fits.quantiles(excluded, levels)
    return out


def pair_regime(a: str, b: str) -> str:
    """A speed-up's interval regime: communication-bound if either side's is (its errors dominate the ratio's)."""
    return REGIMES[1] if REGIMES[1] in (a, b) else REGIMES[0]


def finite_json_value(value):
    """``value`` with every non-finite float (in nested dicts, lists and tuples) as None: strict JSON has no
    Infinity or NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json_value(v) for v in value]
    return value


CROSS_VALIDATION_FILE = PRESETS / "cross_validation.json"
# what the stored measured_node / unmeasured_node bounds are on: a file without this key holds bounds on the raw
# log ratio (before the propagated widths), and is refused
RESIDUALS = "log(measured / predicted) over the propagated log-width (normalised_residual)"


@lru_cache(maxsize=1)
def stored_intervals() -> dict:
    """The intervals' bounds on log(measured / predicted), 80% nominal, as validation stored them
    (``sim.validation.stored``): ``site_profile`` (the group cross-validation's rows of the site profiles;
    ``site_profile_by_site``, each site's own, with ``site_profile_rows``), ``measured_node`` and
    ``unmeasured_node`` (bounds on the normalised residual, ``RESIDUALS``, per interval regime,
    ``interval_regime``, the corpus left out source by source; ``all`` pools the regimes), and
    ``speedup_measured_node`` and ``speedup_unmeasured_node``, the same on
    log(measured ratio / predicted ratio) of the corpus's pairs. ValueError, saying how to regenerate it, where
    the file is missing, lacks a key (or holds one conformal level for the regimes pooled, not one per regime),
    or was measured on other data files than those shipped (``STORED_FROM``): never bounds of another corpus,
    silently."""
    regenerate = "regenerate it: python -m sim.validation.stored"
    if not CROSS_VALIDATION_FILE.exists():
        raise ValueError(f"{CROSS_VALIDATION_FILE} is missing; {regenerate}")
    stored = json.loads(CROSS_VALIDATION_FILE.read_text()).get("intervals", {})
    levels = stored.get("summary", {}).get("conformal_levels")
    per_regime_levels = isinstance(levels, dict) and all(isinstance(v, dict) for v in levels.values())
    if not all(k in stored for k in (*BOUNDS_BY_REGIME, "site_profile_by_site", "speedup_methods")) or stored.get(
            "residuals") != RESIDUALS or not per_regime_levels:
        raise ValueError(f"{CROSS_VALIDATION_FILE} lacks some of the intervals' bounds; {regenerate}")
    if stored.get("inputs_sha256") != stored_inputs_digest():
        raise ValueError(f"{CROSS_VALIDATION_FILE} was measured on other data than "
                         f"{', '.join(f.name for f in STORED_FROM)} hold now; {regenerate}")
    return _inflate(stored)


# the data files the stored intervals are measured on (validation's: read here as bytes only, to know the stored
# bounds are theirs)
STORED_FROM = (PRESETS / "birder_public.csv", PRESETS.parent / "validation" / "corpus.csv",
               PRESETS.parent / "validation" / "sources.toml")


def stored_inputs_digest() -> str:
    """SHA-256 of the bytes of ``STORED_FROM``, in order."""
    digest = hashlib.sha256()
    for path in STORED_FROM:
        digest.update(path.read_bytes())
    return digest.hexdigest()

def _inflate(stored: dict) -> dict:
    """JSON's nulls back to infinite bounds (a regime with too few rows to bound)."""
    def bounds(pair):
        return (-math.inf if pair[0] is None else pair[0], math.inf if pair[1] is None else pair[1])

    out = dict(stored)
    out["summary"] = finite_json_value(stored["summary"])
    out["site_profile"] = bounds(stored["site_profile"])
    out["site_profile_by_site"] = {k: bounds(v) for k, v in stored["site_profile_by_site"].items()}
    for key in BOUNDS_BY_REGIME:
        out[key] = {k: bounds(v) for k, v in stored[key].items()}
    return out


# the stored bounds kept per interval regime: on a prediction's throughput, and on a speed-up's ratio
BOUNDS_BY_REGIME = ("measured_node", "unmeasured_node", "speedup_measured_node", "speedup_unmeasured_node")


def prediction_interval(throughput: float, alpha_beta_efficiency: float, site_profile: str | None,
                        measured_node: bool, calibrated: bool = False, incast: bool = False,
                        widths: tuple[float, float] = (1.0, 1.0)
                        ) -> tuple[float, float, str, tuple[float, float] | None]:
    """(low, high, basis, scales) of a prediction's 80% interval. A site profile (``site_profile``: its name)
    takes the quantiles of log(measured / predicted) of its own rows (the group cross-validation of the public
    rows), or the site profiles' pooled where its own are too few to bound (``scales`` None). Any other cluster
    takes its propagated log-widths (``widths``: down and up, ``sim.input_ranges.model_uncertainty``) times the
    quantiles of the normalised residuals (``normalised_residual``) of the corpus's rows, each source left out,
    of the regime a plain alpha-beta ring predicts (``interval_regime``), calibrated on a measured node or not;
    ``scales`` are those quantiles (down, up: what multiplies each width). A regime whose rows are too few to
    bound takes the regimes pooled; with no bound at all, the interval is (0, inf) and says so. ``calibrated`` (a
    cluster file of ``birder calibrate``) says so in the basis; ``incast``: the efficiency counts the simulator's
    TCP incast stalls (``incast_slowed``)."""
    q = stored_intervals()
    scales = None
    own = q["site_profile_by_site"].get(site_profile) if site_profile is not None else None
    if own is not None and all(map(math.isfinite, own)):
        rows = q["site_profile_rows"][site_profile]
        bounds, basis = own, f"site profile {site_profile}: its own public rows ({rows}), groups left out of the fit"
    elif site_profile is not None:
        bounds, basis = q["site_profile"], ("site profiles' public rows pooled, groups left out of the fit (too few "
                                            f"rows of {site_profile} alone)")
    else:
        key = "measured_node" if measured_node else "unmeasured_node"
        reg = interval_regime(alpha_beta_efficiency)
        ring = "an alpha-beta ring slowed by the simulated incast stalls" if incast else "an alpha-beta ring"
        z = regime_bounds(q[key], reg)
        scales = (max(-z[0], 0.0), max(z[1], 0.0))
        bounds = scaled_bounds(z, *widths)
        first = (q.get("first_contact_calibration") or {}).get("sources") if measured_node else None
        rows = q["corpus"] + (f" and {len(first)} first-contact sources' rows" if first else "")
        basis = (f"{reg} by {ring}, {key.replace('_', ' ')}: {rows}, each source left out, its normalised "
                 f"residuals' quantiles times this prediction's propagated width (down {widths[0]:.3f}, up "
                 f"{widths[1]:.3f} on log throughput: interval_drivers)")
        if z is not q[key][reg]:
            basis += " (regimes pooled: too few rows of this regime)"
        if calibrated:
            basis = ("generic bounds (birder calibrate fitted collective times, not training throughput: no "
                     "training rows of this cluster to bound it; its measured link narrows the width): " + basis)
    if not all(map(math.isfinite, bounds)):
        basis += "; too few left-out rows to bound the interval"
    return (*interval_around(throughput, bounds), basis, scales)


EQUAL_RATIO = 0.005  # two predictions whose ratio prints as 1.00x are equal within rounding (speedup_interval)
SPEEDUP_SETUP = ("model", "batch_per_gpu", "nodes", "gpus_per_node")  # what two predictions share to be paired


def speedup_interval(a: dict, b: dict) -> dict:
    """Prediction ``a``'s throughput over ``b``'s (two dicts of ``predict_on``) with its 80% interval.

    Where the two share model, batch, nodes and GPUs per node (they differ in optimizer, framework or network),
    their errors may be correlated, and the interval is the quantiles of log(measured ratio / predicted ratio)
    over the corpus's pairs of rows of one table so compared, each source left out (``speedup_measured_node``
    where both are calibrated on a measured node, else ``speedup_unmeasured_node``; per interval regime, the
    pair's communication-bound if either is), where the corpus's left-out pairs of that kind support it
    (``speedup_method``: covered as promised, and no wider than the naive interval); else, and across
    set-ups, the naive worst case of the two intervals. Two predictions equal within rounding (``EQUAL_RATIO``)
    take the paired bounds' wider tail on both sides, so that which is called the faster never turns on a last
    digit. One measured node each: the ratio of the measurements,
    exact. Returns ``ratio``, ``low``, ``high``, ``basis`` and ``verdict``:
    ``faster`` / ``slower`` where the interval excludes 1, else ``within the uncertainty``."""
    ratio = a["throughput"] / b["throughput"]
    naive = (a["throughput_low"] / b["throughput_high"],
             a["throughput_high"] / b["throughput_low"] if b["throughput_low"] > 0 else math.inf)
    q = stored_intervals()
    measured = bool(a.get("measured_node") and b.get("measured_node"))
    key = "measured_node" if measured else "unmeasured_node"
    reg = pair_regime(a.get("interval_regime"), b.get("interval_regime"))
    if any(a.get(k) != b.get(k) for k in SPEEDUP_SETUP):
        (low, high), basis = naive, "different set-ups: the two intervals divided end by end"
    elif a.get("incast_free_throughput") is not None or b.get("incast_free_throughput") is not None:
        (low, high), basis = naive, ("TCP incast on an assumed switch buffer: the two intervals (each spanning "
                                     "the switch) divided end by end")
    elif a["nodes"] == 1 and measured:
        low, high, basis = ratio, ratio, "one measured node each: the ratio of the measurements"
    elif q["speedup_methods"][key][reg] == "naive":
        (low, high), basis = naive, (f"the two intervals divided end by end: the corpus's {reg} pairs of rows of "
                                     f"one table, {key.replace('_', ' ')}, each source left out, support it over "
                                     "intervals fitted on the pairs' ratios (speedup_method)")
    else:
        bounds = regime_bounds(q[f"speedup_{key}"], reg)
        if abs(ratio - 1) < EQUAL_RATIO:
            # neither is the faster but for rounding: the lopsided bounds could point either way, so the wider
            # tail is taken both ways rather than flipping on a last digit
            bounds = (-max(-bounds[0], bounds[1]), max(-bounds[0], bounds[1]))
        # the bounds are of the faster by the prediction over the slower: the other way round, mirrored
        faster, slower = (a, b) if ratio >= 1 else (b, a)
        lo, hi = interval_around(faster["throughput"] / slower["throughput"], bounds)
        low, high = (lo, hi) if ratio >= 1 else (1 / hi, 1 / lo)
        basis = (f"paired: {reg} pairs of rows of one published table, {key.replace('_', ' ')}, each source left "
                 f"out ({q['corpus']})")
    verdict = "faster" if low > 1 else "slower" if high < 1 else "within the uncertainty"
    return {"ratio": ratio, "low": low, "high": high, "basis": basis, "verdict": verdict}


def line_rate_ceiling(samples_per_step: float, node_bytes_per_step: float, node_bandwidth: float) -> float:
    """The most samples/s a step of ``samples_per_step`` can reach when each node sends ``node_bytes_per_step``
    between nodes through NICs of ``node_bandwidth`` bytes/s in all (their line rate: no protocol, no latency,
    no compute): a physical bound no interval crosses (infinite where nothing crosses a node)."""
    return math.inf if node_bytes_per_step <= 0 else samples_per_step * node_bandwidth / node_bytes_per_step


def measured_node_bounds(low: float, high: float, basis: str, throughput: float, nodes: int,
                         single_node_throughput: float) -> tuple[float, float, str]:
    """An interval held to what a measured node implies: on that one node the prediction is the measurement (no
    interval), and n such nodes give at most n times it (``linear_ceiling``, as the corpus's coverage
    is measured)."""
    if nodes == 1:
        return throughput, throughput, "one measured node: the measurement itself"
    ceiling = linear_ceiling(high, throughput, nodes * single_node_throughput)
    if ceiling < high:
        basis += "; upper end held at linear scaling of the measured node"
    return low, ceiling, basis


