"""The corpus predicted with each source left out of every fit (``corpus_validation``). Every prediction is
calibrated by the row's own single-node throughput and runs on a cluster built from the row's set-up. The only
constants fitted to rows are the site profiles' (fitted on one source's rows), the per-step jitter (fitted on
the corpus, nested per held-out source) and the intervals' quantiles (fitted on every row): leaving a source out
removes it from all three. Two naive baselines are computed on the same rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from sim.input_ranges import model_uncertainty
from sim.models import MODELS, model_profile
from sim.stragglers import STEP_JITTER_GRID
from sim.system import unmodelled
from sim.uncertainty import REGIMES
from sim.validation.corpus import PublishedRow
from sim.validation.corpus import regime as corpus_regime

if TYPE_CHECKING:
    from tqdm import tqdm

    from sim import workload
from sim.uncertainty import (
    INTERVAL_LEVEL,
    LoggedError,
    any_capped,
    interval_around,
    interval_quantiles,
    left_out_bounds,
    linear_ceiling,
    nested_calibrated_levels,
    normalised_residual,
    regime_bounds,
    scaled_bounds,
    source_coverage,
)
from sim.validation.corpus_setup import (
    FITTED_SOURCES,
    SITE_OF_SETUP,
    alpha_beta,
    corpus_cluster,
    corpus_predict,
    corpus_rows,
    framework_of,
    gpu_calibrated_on,
    linear_scaling,
    row_interval_regime,
)
from sim.validation.figures import median, share
from sim.validation.pairs import PairPrediction, left_out_pairs, nested_speedup_figures, pair_figures, speedup_method

EQUAL_BY_CONSTRUCTION = (f"in-sample and left out are equal by construction for every source but "
                         f"{', '.join(sorted(FITTED_SOURCES))}: only its rows are fitted on")  # the table's caption


@dataclass(frozen=True)
class CorpusPrediction:
    """One corpus row: measured, the simulator in-sample (site profiles fitted on every row) and with its source
    left out of every fit, the two baselines, and the interval fitted without its source."""

    source: str
    table: str
    model: str
    gpu: str
    nodes: int
    gpus_per_node: int
    transport: str
    line_rate_gbps: float
    measured_link_gbps: float | None  # the source's measured link rate (simulator and alpha-beta use it), or None
    nics_per_node: int
    framework: str
    simulated_framework: str  # presets/frameworks.toml's entry it ran with (DDP's where the row's has none)
    optimizer: str
    regime: str  # from the measurement (the corpus schema's)
    interval_regime: str  # the alpha-beta baseline's regime, which the interval is keyed on (known beforehand)
    measured: float
    in_sample: float
    left_out: float
    linear: float
    alpha_beta: float
    low: float  # the interval fitted on the other sources' rows
    high: float
    width_down: float = 0.0  # the prediction's propagated log-widths (sim.input_ranges.model_uncertainty)
    width_up: float = 0.0

    def error(self, predicted: float) -> float:
        return (predicted - self.measured) / self.measured

    @property
    def covered(self) -> bool:
        return self.low <= self.measured <= self.high

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update({"error_in_sample": self.error(self.in_sample), "error_left_out": self.error(self.left_out),
                    "error_linear": self.error(self.linear), "error_alpha_beta": self.error(self.alpha_beta),
                    "covered": self.covered})
        return out


def row_widths(row: PublishedRow, p: workload.Prediction, step_jitter_cv: float, measured_node: bool
               ) -> tuple[float, float]:
    """A corpus row's propagated log-widths (down, up: ``sim.input_ranges.model_uncertainty``) on its generic
    cluster with the per-step jitter it was predicted with, as ``birder predict`` computes them."""
    c = replace(corpus_cluster(row, False), step_jitter_cv=step_jitter_cv)
    u = model_uncertainty(c, p.as_dict(), measured_node, unmodelled(c, row.grad_accum), row.grad_accum)
    return u.down, u.up


def sources_held_out_together(corpus) -> dict[str, frozenset[str]]:
    """Per source, the sources left out with it: itself and every source it is not independent of (a shared
    testbed or authors: the corpus schema's ``independent_of`` list in sources.toml, read both ways)."""
    from sim.validation.corpus import load_sources

    sources = sorted({r.source for r in corpus})
    linked = {s: {s} for s in sources}
    entries = load_sources()
    for s in sources:
        for other in entries[s].independent_of if s in entries else ():
            if other in linked:
                linked[s].add(other)
                linked[other].add(s)
    return {s: frozenset(v) for s, v in linked.items()}


STEP_JITTER_CRITERION = "median log(measured / predicted) of the generic predictions closest to 0"


def step_jitter_fit(measured: list[float], predicted: dict[float, list[float]]) -> float:
    """The per-step jitter cv of ``STEP_JITTER_GRID`` whose predictions (``predicted[cv]``, row by row as
    ``measured``) are unbiased in median log ratio (``STEP_JITTER_CRITERION``; ties to the smaller cv).
    ValueError without rows."""
    if not measured:
        raise ValueError("step_jitter_fit: no rows to fit the per-step jitter on")

    def bias(cv: float) -> float:
        return abs(median([math.log(m / p) for m, p in zip(measured, predicted[cv], strict=True)]))

    return min(STEP_JITTER_GRID, key=lambda cv: (bias(cv), cv))


def step_jitter_without(sources: list[str], measured: list[float], predicted: dict[float, list[float]],
                        excluded: frozenset[str]) -> float:
    """``step_jitter_fit`` on the rows whose source is not in ``excluded``; 0 (no jitter: nothing to fit it on)
    where no row is left."""
    kept = [i for i, s in enumerate(sources) if s not in excluded]
    if not kept:
        return 0.0
    return step_jitter_fit([measured[i] for i in kept], {cv: [ps[i] for i in kept] for cv, ps in predicted.items()})


def joined_groups(groups: dict[str, frozenset[str]], extra: dict[str, list[str]]) -> dict[str, frozenset[str]]:
    """The corpus's held-out groups (``sources_held_out_together``) joined with more sources' (``extra``: per
    source, the sources held out with it, as ``first_contact.calibration_rows`` gives them; a first-contact source
    may name a corpus source), each link read both ways as ``sources_held_out_together`` reads independent_of."""
    linked = {s: set(g) for s, g in groups.items()}
    for s, g in extra.items():
        for member in g:
            linked.setdefault(member, {member}).add(s)
            linked.setdefault(s, {s}).add(member)
    return {s: frozenset(g) for s, g in linked.items()}


def nested_step_jitter(sources: list[str], measured: list[float], predicted: dict[float, list[float]],
                       groups: dict[str, frozenset[str]]) -> dict[str, float]:
    """Per source: the per-step jitter fitted on the rows of the sources not held out with it
    (``step_jitter_without``); ``"all"``: the fit on every row (the shipped value)."""
    out = {"all": step_jitter_fit(measured, predicted)}
    for source in sorted(set(sources)):
        out[source] = step_jitter_without(sources, measured, predicted, groups[source])
    return out


@dataclass(frozen=True)
class SkippedRow:
    source: str
    table: str
    model: str
    nodes: int
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CorpusValidation:
    """The corpus predicted in-sample and source by source left out, beside the two baselines."""

    corpus: str
    rows: tuple[CorpusPrediction, ...]
    skipped: tuple[SkippedRow, ...]
    quantiles: dict[str, tuple[float, float]]  # per interval regime, from every row's left-out prediction
    # the same for predictions whose compute comes from the built-in GPU profiles (no node measured), on the rows
    # whose model and GPU the simulator knows
    quantiles_unmeasured_node: dict[str, tuple[float, float]]
    pairs: tuple[PairPrediction, ...] = ()  # every pair of rows a speed-up compares, its interval left out
    # bounds on log(measured ratio / predicted ratio) of a speed-up (the faster by the prediction over the slower),
    # per interval regime, from every pair's left-out predictions: with a measured node, and without
    speedup_quantiles: dict[str, tuple[float, float]] | None = None
    speedup_quantiles_unmeasured_node: dict[str, tuple[float, float]] | None = None
    # predictions from the built-in GPU profiles, each source left out: per row (interval regime, predicted, low,
    # high, measured), and their pairs
    unmeasured_rows: tuple[tuple[str, float, float, float, float], ...] = ()
    unmeasured_pairs: tuple[PairPrediction, ...] = ()
    # the conformal levels each stored set of quantiles was taken at, per interval regime and ``all``
    # (``nested_calibrated_levels``): measured_node, unmeasured_node, speedup_measured_node, speedup_unmeasured_node
    levels: dict[str, dict[str, float]] | None = None
    # per stored key and interval regime, the leave-one-source-out coverage of that regime's rows at its level
    # (below nominal where the grid's top could not reach it)
    level_coverage: dict[str, dict[str, float]] | None = None
    held_out_groups: dict[str, frozenset[str]] | None = None  # per source, the sources left out with it
    # rows left out of the unmeasured-node figures because their source set their GPU's compute figure
    # (gpus.toml ``<family>_calibrated_on``), each (source, gpu, model family)
    unmeasured_excluded: tuple[tuple[str, str, str], ...] = ()
    # the per-step jitter's fit (``nested_step_jitter``): criterion, grid, rows, sources, the value fitted on all
    # sources and the value each source's rows were predicted with (fitted without its group)
    step_jitter: dict | None = None
    # first-contact rows that calibrate the measured-node intervals beside the corpus (after their first contact:
    # ``first_contact.calibration_rows``), each (source, interval regime, measured regime, predicted, low, high,
    # measured) with its interval fitted without its source's group
    calibration_extra: tuple[tuple[str, str, str, float, float, float, float], ...] = ()

    def mape(self, which: str, regime: str | None = None, source: str | None = None) -> float | None:
        chosen = [r for r in self.rows if (regime is None or r.regime == regime)
                  and (source is None or r.source == source)]
        if not chosen:
            return None
        return sum(abs(r.error(getattr(r, which))) for r in chosen) / len(chosen)

    def skill(self, regime: str | None = None) -> float | None:
        ours, linear = self.mape("left_out", regime), self.mape("linear", regime)
        return None if ours is None or not linear else ours / linear

    def coverage(self, regime: str | None = None, measured: bool = False) -> float | None:
        """Share of rows inside their interval: all, or those of one interval regime (or measured regime)."""
        chosen = [r for r in self.rows if regime is None or (r.regime if measured else r.interval_regime) == regime]
        return sum(r.covered for r in chosen) / len(chosen) if chosen else None

    def levels_short(self) -> list[str]:
        """The stored keys and interval regimes (``key regime``) whose rows even the top of ``LEVEL_GRID`` does
        not cover as promised, leave-one-source-out: their intervals promise more than they keep."""
        return [f"{key} {reg}" for key, by_regime in (self.level_coverage or {}).items()
                for reg, covered in by_regime.items() if covered < INTERVAL_LEVEL]

    def median_half_width(self, regime: str | None = None) -> float | None:
        return median([(r.high - r.low) / 2 / r.left_out for r in self.rows
                       if regime is None or r.interval_regime == regime])

    def speedup_methods(self) -> dict[str, dict[str, str]]:
        """Per node calibration (``measured_node``, ``unmeasured_node``) and interval regime: the speed-up
        interval the corpus's left-out pairs support (``speedup_method``), chosen on every source's pairs: what
        predictions use. Its coverage on those same pairs is post-selection; ``speedup_nested`` is not."""
        def methods(pairs):
            return {reg: speedup_method(pair_figures([p for p in pairs if p.interval_regime == reg]))
                    for reg in REGIMES}

        return {"measured_node": methods(self.pairs), "unmeasured_node": methods(self.unmeasured_pairs)}

    def speedup_nested(self) -> dict[str, dict]:
        """Per node calibration: ``nested_speedup_figures``, each source's method chosen without it."""
        return {"measured_node": nested_speedup_figures(list(self.pairs), self.held_out_groups),
                "unmeasured_node": nested_speedup_figures(list(self.unmeasured_pairs), self.held_out_groups)}

    def speedup_figures(self, regime: str | None = None, source: str | None = None) -> dict:
        """``pair_figures`` of the left-out pairs calibrated on a measured node (of one interval regime or
        source, or all)."""
        return pair_figures([p for p in self.pairs if (regime is None or p.interval_regime == regime)
                             and (source is None or p.source == source)])

    def table(self) -> list[dict]:
        """Per source, per regime and overall: rows and the MAPE of in-sample, left-out, linear and alpha-beta."""
        out = []
        groups = [("all", None, None)] + [("regime", reg, None) for reg in REGIMES] + [
            ("source", None, s) for s in sorted({r.source for r in self.rows})]
        for kind, reg, source in groups:
            n = sum(1 for r in self.rows if (reg is None or r.regime == reg) and (source is None or r.source == source))
            out.append({"group": kind, "name": reg or source or "all", "rows": n,
                        **{f"mape_{w}": self.mape(w, reg, source)
                           for w in ("in_sample", "left_out", "linear", "alpha_beta")}})
        return out

    def summary(self) -> dict:
        comm = REGIMES[1]
        return {"corpus": self.corpus, "rows": len(self.rows), "skipped_rows": len(self.skipped),
                "rows_framework_as_ddp": sum(r.framework != r.simulated_framework for r in self.rows),
                "rows_measured_link": sum(r.measured_link_gbps is not None for r in self.rows),
                "skill": self.skill(), "skill_communication_bound": self.skill(comm),
                "mape_left_out": self.mape("left_out"), "mape_in_sample": self.mape("in_sample"),
                "mape_linear": self.mape("linear"), "mape_alpha_beta": self.mape("alpha_beta"),
                "interval_level": INTERVAL_LEVEL, "conformal_levels": self.levels,
                "conformal_level_coverage": self.level_coverage, "conformal_levels_short": self.levels_short(),
                "coverage": self.coverage(),
                "coverage_by_regime": {reg: self.coverage(reg) for reg in REGIMES},
                "coverage_by_measured_regime": {reg: self.coverage(reg, measured=True) for reg in REGIMES},
                "median_half_width": self.median_half_width(),
                "median_half_width_by_regime": {reg: self.median_half_width(reg) for reg in REGIMES},
                "speedup": self.speedup_figures(),
                "speedup_by_regime": {reg: self.speedup_figures(reg) for reg in REGIMES},
                "speedup_by_source": {src: self.speedup_figures(source=src)
                                      for src in sorted({p.source for p in self.pairs})},
                "unmeasured_node": self.unmeasured_figures(),
                "speedup_unmeasured_node": pair_figures(list(self.unmeasured_pairs)),
                "speedup_methods": self.speedup_methods(), "speedup_nested": self.speedup_nested(),
                "step_jitter": self.step_jitter, "first_contact_left_out": self.calibration_extra_figures()}

    def calibration_extra_figures(self) -> dict | None:
        """The first-contact rows that calibrate the intervals beside the corpus, each with its interval fitted
        without its source's group: rows, sources, coverage and median half-width, overall, per interval regime
        and per measured regime (None where there are none)."""
        rows = self.calibration_extra
        if not rows:
            return None

        def figures(chosen):
            return {"rows": len(chosen), "coverage": share(low <= m <= high for *_, low, high, m in chosen),
                    "median_half_width": median([(high - low) / 2 / p for *_, p, low, high, _ in chosen])}

        return {**figures(rows), "sources": len({r[0] for r in rows}),
                "by_regime": {reg: figures([r for r in rows if r[1] == reg]) for reg in REGIMES},
                "by_measured_regime": {reg: figures([r for r in rows if r[2] == reg]) for reg in REGIMES}}

    def unmeasured_figures(self) -> dict:
        """The intervals of predictions from the built-in GPU profiles (no node measured), each source left out:
        rows, coverage and median half-width, overall and per interval regime; and how many rows were left out
        (per source) because their source set their GPU's compute figure (``calibrated_on``)."""
        def figures(chosen):
            return {"rows": len(chosen), "coverage": share(low <= m <= high for _, _, low, high, m in chosen),
                    "median_half_width": median([(high - low) / 2 / p for _, p, low, high, _ in chosen])}

        rows, excluded = list(self.unmeasured_rows), {}
        for source, _, _ in self.unmeasured_excluded:
            excluded[source] = excluded.get(source, 0) + 1
        return {**figures(rows), "by_regime": {reg: figures([r for r in rows if r[0] == reg]) for reg in REGIMES},
                "rows_excluded": len(self.unmeasured_excluded), "excluded_by_source": excluded}

    def as_dict(self) -> dict:
        return {**self.summary(), "table": self.table(), "quantiles": {k: list(v) for k, v in self.quantiles.items()},
                "quantiles_unmeasured_node": {k: list(v) for k, v in self.quantiles_unmeasured_node.items()},
                "speedup_quantiles": {k: list(v) for k, v in (self.speedup_quantiles or {}).items()},
                "speedup_quantiles_unmeasured_node": {
                    k: list(v) for k, v in (self.speedup_quantiles_unmeasured_node or {}).items()},
                "predictions": [r.as_dict() for r in self.rows], "pairs": [p.as_dict() for p in self.pairs],
                "skipped": [s.as_dict() for s in self.skipped]}


_SHIPPED: list[CorpusValidation] = []  # the shipped corpus's run, once per process


def _shipped_corpus_validation(progress=None, step_jitter_fits: dict | None = None,
                               calibration_extra: dict | None = None) -> CorpusValidation:
    """The shipped corpus's validation, once per process (the command line, the stored intervals and the report
    read the same run)."""
    if not _SHIPPED:
        _SHIPPED.append(corpus_validation(*corpus_rows(), progress=progress, step_jitter_fits=step_jitter_fits,
                                          calibration_extra=calibration_extra))
    return _SHIPPED[0]


def corpus_validation(corpus: tuple[PublishedRow, ...] | None = None, name: str | None = None,
                      progress: tqdm | None = None, step_jitter_fits: dict | None = None,
                      calibration_extra: dict | None = None) -> CorpusValidation:
    """Predict every corpus row twice (with the site profiles fitted on its source's rows, and with generic
    hardware data only), leave each source (with those sharing its testbed) out of every fit in turn, and fit
    the intervals' quantiles on the other sources' left-out log ratios. Rows the simulator cannot express are
    returned as skipped with the reason. Without ``corpus``: the shipped corpus, run once per process. The per-step
    jitter is fitted on a grid of predictions of every row (nested per held-out group; ``nested_step_jitter``),
    unless ``step_jitter_fits`` gives what a run on this same corpus stored (its summary's ``step_jitter``): then
    only the predictions those values need are made (the figures are the same, in a fraction of the time).
    ``calibration_extra`` (``first_contact.calibration_rows``' dict): more sources' rows, already predicted, that
    calibrate the measured-node intervals beside the corpus's, each held out with its group as a corpus source
    is; they fit nothing else."""
    if corpus is None:
        return _shipped_corpus_validation(progress, step_jitter_fits, calibration_extra)
    skipped, excluded = [], []
    groups = sources_held_out_together(corpus)
    extra = [] if calibration_extra is None else calibration_extra["rows"]
    extra_errors = [LoggedError(r["source"], r["regime"], r["log_ratio"], r["cap"]) for r in extra]
    calibration_groups = joined_groups(groups, {} if calibration_extra is None else calibration_extra["groups"])
    expressed: list[PublishedRow] = []  # the rows the simulator can express
    at: dict[tuple[int, float], workload.Prediction] = {}  # (row, per-step jitter) -> its generic prediction
    for row in corpus:
        try:
            if row.single_node_throughput is None:
                raise ValueError("the source gives no single-node throughput")
            first = STEP_JITTER_GRID if step_jitter_fits is None else (
                step_jitter_fits["by_held_out_source"][row.source],)
            at |= {(len(expressed), cv): corpus_predict(row, False, step_jitter_cv=cv) for cv in first}
            expressed.append(row)
        except ValueError as error:
            skipped.append(SkippedRow(row.source, row.table, row.model, row.nodes, str(error)))
        if progress is not None:
            progress.update(1)

    def generic_at(i: int, cv: float) -> workload.Prediction:
        if (i, cv) not in at:
            at[i, cv] = corpus_predict(expressed[i], False, step_jitter_cv=cv)
        return at[i, cv]

    # the per-step jitter, fitted with each source's group held out (nested: its rows are predicted with the value
    # the other sources chose), without a held-out group and a row's own (the intervals' errors), and on every row
    # (the in-sample predictions' and the shipped value); or, given, as a run on this corpus stored them
    if step_jitter_fits is None:
        fit_rows = ([row.source for row in expressed], [row.throughput for row in expressed],
                    {cv: [at[i, cv].throughput for i in range(len(expressed))] for cv in STEP_JITTER_GRID})
        jitter = nested_step_jitter(*fit_rows, groups)
        fitted_without: dict[str, float] = {}
    else:
        jitter = {"all": step_jitter_fits["all_sources"], **step_jitter_fits["by_held_out_source"]}
        fitted_without = dict(step_jitter_fits["fitted_without"])
        fit_rows = None  # no grid of predictions: every value needed must be among the stored ones

    def jitter_without(sources: frozenset[str]) -> float:
        key = "|".join(sorted(sources))
        if key not in fitted_without:
            if fit_rows is None:
                raise ValueError(f"the stored per-step jitter fits lack the fit without {key}; regenerate them "
                                 "(python -m sim.validation.stored)")
            fitted_without[key] = step_jitter_without(*fit_rows, sources)
        return fitted_without[key]

    done, unmeasured, u_widths = [], [], []
    for i, row in enumerate(expressed):
        cv = jitter[row.source]
        generic = generic_at(i, cv)
        # in-sample: the site profile where there is one (no generic jitter: sim.hardware.default_step_jitter), else
        # the generic prediction with the jitter fitted on every row
        fitted = corpus_predict(row, True) if (
            row.source, row.transport, float(row.line_rate_gbps)) in SITE_OF_SETUP else generic_at(i, jitter["all"])
        done.append((row, fitted, generic))
        calibrated_on = gpu_calibrated_on(row.gpu, row.model)
        if calibrated_on is not None and calibrated_on in groups[row.source]:
            excluded.append((row.source, row.gpu, model_profile(row.model).family))
        elif row.model in MODELS:
            p = corpus_predict(row, False, measured_node=False, step_jitter_cv=cv)
            shown = replace(row, single_node_throughput=p.single_node_throughput)
            unmeasured.append((row, p.throughput, row_interval_regime(shown, p)))
            u_widths.append(row_widths(row, p, cv, False))
    # with a source out, its site profiles have no rows to fit on: its rows take the generic prediction; every
    # other source's rows are predicted alike whether or not the site was fitted
    logged_at: dict[tuple[int, float], LoggedError] = {}  # (row, jitter) -> its error, computed once

    widths_at: dict[tuple[int, float], tuple[float, float]] = {}  # (row, jitter) -> its propagated log-widths

    def logged(i: int, cv: float) -> LoggedError:
        if (i, cv) not in logged_at:
            row, p = expressed[i], generic_at(i, cv)
            widths_at[i, cv] = row_widths(row, p, cv, True)
            logged_at[i, cv] = LoggedError(row.source, row_interval_regime(row, p),
                                           normalised_residual(math.log(row.throughput / p.throughput),
                                                               *widths_at[i, cv]),
                                           normalised_residual(math.log(linear_scaling(row) / p.throughput),
                                                               *widths_at[i, cv]))
        return logged_at[i, cv]

    errors = [logged(i, jitter[row.source]) for i, row in enumerate(expressed)]

    def others_of(held: frozenset[str]) -> list[LoggedError]:
        # the other sources' rows, each predicted with the jitter fitted without the held-out group and its own
        return [logged(i, jitter_without(held | groups[row.source]))
                for i, row in enumerate(expressed) if row.source not in held] + [
            e for e in extra_errors if e.source not in held]

    # the corpus's sources and the first-contact log's each covered as promised (issue 27 asks it of both): the
    # log's rows are the only sources that met the model unseen, the corpus's those it was designed on
    strata = {e.source: "corpus" for e in errors} | {e.source: "first contact" for e in extra_errors}
    bounds = left_out_bounds(errors + extra_errors, calibration_groups, others_of, strata)
    out = []
    for i, ((row, fitted, generic), e) in enumerate(zip(done, errors, strict=True)):
        reg = e.regime
        widths = widths_at[i, jitter[row.source]]
        low, high = interval_around(generic.throughput, scaled_bounds(
            regime_bounds(bounds[calibration_groups[row.source]][1], reg), *widths))
        high = linear_ceiling(high, generic.throughput, linear_scaling(row))
        out.append(CorpusPrediction(
            row.source, row.table, row.model, row.gpu, row.nodes, row.gpus_per_node, row.transport,
            float(row.line_rate_gbps), row.measured_link_gbps, row.nics_per_node, row.framework, framework_of(row),
            row.optimizer, corpus_regime(row), reg,
            row.throughput, fitted.throughput, generic.throughput, linear_scaling(row), alpha_beta(row),
            low, high, *widths))
    u_errors_rows = [LoggedError(row.source, reg, normalised_residual(math.log(row.throughput / predicted), *w))
                     for (row, predicted, reg), w in zip(unmeasured, u_widths, strict=True)]
    pairs, paired_errors = left_out_pairs([row for row, _, _ in done], [r.left_out for r in out],
                                           [r.interval_regime for r in out], [(r.low, r.high) for r in out], groups)
    u_rows, u_predicted, u_regimes = ([u[k] for u in unmeasured] for k in range(3))
    u_bounds = left_out_bounds(u_errors_rows, groups)  # each from the other sources' rows, as the measured nodes'
    u_intervals = [interval_around(predicted, scaled_bounds(regime_bounds(u_bounds[groups[row.source]][1], reg), *w))
                   for (row, predicted, reg), w in zip(unmeasured, u_widths, strict=True)]
    u_pairs, u_errors = left_out_pairs(u_rows, u_predicted, u_regimes, u_intervals, groups)
    # the conformal levels, per interval regime (Mondrian), each calibrated leave-one-source-out on that regime's
    # rows to a target itself calibrated leave-one-source-out (nested), and the coverage they reach there (short of
    # nominal where even the grid's top is not enough)
    calibrated_on = {"measured_node": errors + extra_errors, "unmeasured_node": u_errors_rows,
                     "speedup_measured_node": paired_errors, "speedup_unmeasured_node": u_errors}
    groups_of = {key: calibration_groups if key == "measured_node" else groups for key in calibrated_on}
    strata_of = {key: strata if key == "measured_node" else None for key in calibrated_on}
    levels = {key: nested_calibrated_levels(errs, groups_of[key], strata=strata_of[key])
              for key, errs in calibrated_on.items()}
    level_coverage = {key: {reg: source_coverage(errs, groups_of[key], levels[key], reg, strata_of[key])
                            for reg in REGIMES} for key, errs in calibrated_on.items()}
    extra_rows = []
    for r, e in zip(extra, extra_errors, strict=True):  # each first-contact row's interval without its group
        low, high = interval_around(r["predicted"], scaled_bounds(
            regime_bounds(bounds[calibration_groups[r["source"]]][1], e.regime), r["down"], r["up"]))
        extra_rows.append((r["source"], e.regime, r["measured_regime"], r["predicted"], low,
                           linear_ceiling(high, r["predicted"], r["linear"]), r["measured"]))

    def pooled(errs, key):
        return interval_quantiles([(e.regime, e.log_ratio) for e in errs], levels[key], capped=any_capped(errs))

    return CorpusValidation(name or "corpus", tuple(out), tuple(skipped), pooled(errors + extra_errors,
                                                                                  "measured_node"),
                            pooled(u_errors_rows, "unmeasured_node"), tuple(pairs),
                            pooled(paired_errors, "speedup_measured_node"),
                            pooled(u_errors, "speedup_unmeasured_node"),
                            tuple((reg, p, low, high, row.throughput) for row, p, reg, (low, high)
                                  in zip(u_rows, u_predicted, u_regimes, u_intervals, strict=True)),
                            tuple(u_pairs), levels, level_coverage, groups, tuple(excluded),
                            {"criterion": STEP_JITTER_CRITERION, "grid": list(STEP_JITTER_GRID),
                             "rows": len(done), "sources": len({row.source for row in expressed}),
                             "all_sources": jitter["all"],
                             "by_held_out_source": {s: v for s, v in jitter.items() if s != "all"},
                             "fitted_without": dict(sorted(fitted_without.items()))}, tuple(extra_rows))
