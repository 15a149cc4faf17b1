"""The simulator as a library, without argparse: what `birder report`, `birder sweep` and other programs call.

Each prediction is a dict with the keys of ``birder predict --json`` (``throughput``, ``iteration_s``, ...,
``throughput_low``, ``throughput_high``, ``extrapolated``) plus the configuration (``model``,
``batch_per_gpu``, ``network``, ``optimizer``, ``nodes``, ``gpus``). The interval (``prediction_interval``) is
an 80% interval from the quantiles of log(measured / predicted) on rows left out of every fit: for a site
profile, the group cross-validation of its public rows; otherwise the validation corpus with each source left
out, per predicted regime (compute- or communication-bound) and apart for predictions calibrated on a measured
node and those from built-in compute profiles; a site profile takes its own rows' bounds. A speed-up (one
prediction over another of the same set-up, ``speedup_interval``) takes bounds of its own, fitted on the corpus's
pairs of rows of one table. They are measured once and stored
(``presets/cross_validation.json``, written by ``python -m sim.api --write-cross-validation``) so that no
prediction pays a refit. ``validation_summary`` gives the fit (in-sample) and the cross-validated errors apart.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from sim.hardware import PRESETS, SITES, Cluster, cluster, load_cluster
from sim.models import model_profile
from sim.stragglers import straggler_factor
from sim.system import incast_basis, switch_buffer_assumed
from sim.validate import (
    INTERVAL_LEVEL,
    alpha_beta_throughput,
    gradient_bits,
    incast_slowed,
    interval_regime,
    predicted_regime,
)
from sim.workload import predict

if TYPE_CHECKING:
    from sim.validate import CrossValidation

CROSS_VALIDATION_FILE = PRESETS / "cross_validation.json"


def _rows_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _corpus_digest(corpus) -> str:
    return hashlib.sha256(repr(tuple(corpus)).encode()).hexdigest()


@lru_cache(maxsize=1)
def interval_quantiles() -> dict:
    """The intervals' bounds on log(measured / predicted), 80% nominal: ``site_profile`` (the group
    cross-validation's rows of the site profiles; ``site_profile_by_site``, each site's own, with
    ``site_profile_rows``), ``measured_node`` and ``unmeasured_node`` (per interval regime,
    ``validate.interval_regime``, the corpus left out source by source; ``all`` pools the regimes), and
    ``speedup_measured_node`` and ``speedup_unmeasured_node``, the same on log(measured ratio / predicted ratio)
    of the corpus's pairs (``validate.paired_rows``). Read
    from the stored measurement when it was taken on the same rows and corpus, else measured now (once per
    process)."""
    from sim import validate

    corpus, _ = validate.corpus_rows()
    if CROSS_VALIDATION_FILE.exists():
        stored = json.loads(CROSS_VALIDATION_FILE.read_text()).get("intervals", {})
        if stored.get("corpus_sha256") == _corpus_digest(corpus) and stored.get("rows_sha256") == _rows_digest(
                validate.PUBLIC_CSV) and all(k in stored for k in (*BOUNDS_BY_REGIME, "site_profile_by_site",
                                                                   "speedup_methods")):
            return _inflate(stored)
    return _intervals(validate.corpus_validation(), _cross_validation())


def stored_step_jitter_fits() -> dict | None:
    """The per-step jitter's fits (``validate.corpus_validation``'s summary ``step_jitter``) stored with the
    intervals, where they were made on the shipped corpus as it is now; else None (fitted anew)."""
    from sim import validate

    if CROSS_VALIDATION_FILE.exists():
        stored = json.loads(CROSS_VALIDATION_FILE.read_text()).get("intervals", {})
        if stored.get("corpus_sha256") == _corpus_digest(validate.corpus_rows()[0]):
            fits = stored.get("summary", {}).get("step_jitter")
            return fits if fits and "fitted_without" in fits else None
    return None


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


def _intervals(corpus_validation, cross: CrossValidation) -> dict:
    from sim import validate

    corpus, _ = validate.corpus_rows()
    site = [r for r in cross.rows if not r.left_out.startswith("network=")]
    return {"corpus": corpus_validation.corpus, "summary": corpus_validation.summary(),
            "table": corpus_validation.table(), "corpus_sha256": _corpus_digest(corpus),
            "rows_sha256": _rows_digest(validate.PUBLIC_CSV), "level": validate.INTERVAL_LEVEL,
            "site_profile": validate.log_ratio_quantiles([math.log(r.published / r.predicted) for r in site]),
            "site_profile_by_site": {
                name: validate.log_ratio_quantiles([math.log(r.published / r.predicted) for r in site
                                                    if validate.site_of(r.network) == name])
                for name in sorted({validate.site_of(r.network) for r in site})},
            "site_profile_rows": {name: sum(validate.site_of(r.network) == name for r in site)
                                  for name in sorted({validate.site_of(r.network) for r in site})},
            "measured_node": dict(corpus_validation.quantiles),
            "unmeasured_node": dict(corpus_validation.quantiles_unmeasured_node),
            "speedup_measured_node": dict(corpus_validation.speedup_quantiles),
            "speedup_unmeasured_node": dict(corpus_validation.speedup_quantiles_unmeasured_node),
            "speedup_methods": corpus_validation.speedup_methods()}


def prediction_interval(throughput: float, alpha_beta_efficiency: float, site_profile: str | None,
                        measured_node: bool, calibrated: bool = False,
                        incast: bool = False) -> tuple[float, float, str]:
    """(low, high, basis) of a prediction's 80% interval: the quantiles of log(measured / predicted) on rows left
    out of every fit that match it. A site profile (``site_profile``: its name) takes its own rows' (the group
    cross-validation of the public rows), or the site profiles' pooled where its own are too few to bound; any
    other cluster the regime a plain alpha-beta ring predicts (``validate.interval_regime``), calibrated on a
    measured node or not, from the corpus. A regime whose rows are too few to bound takes the regimes pooled;
    with no bound at all, the interval is (0, inf) and says so. ``calibrated`` (a cluster file of ``birder
    calibrate``) says in the basis why its bounds are the generic ones; ``incast``: the efficiency counts the
    simulator's TCP incast stalls (``validate.incast_slowed``)."""
    from sim import validate

    q = interval_quantiles()
    own = q["site_profile_by_site"].get(site_profile) if site_profile is not None else None
    if own is not None and all(map(math.isfinite, own)):
        rows = q["site_profile_rows"][site_profile]
        bounds, basis = own, f"site profile {site_profile}: its own public rows ({rows}), groups left out of the fit"
    elif site_profile is not None:
        bounds, basis = q["site_profile"], ("site profiles' public rows pooled, groups left out of the fit (too few "
                                            f"rows of {site_profile} alone)")
    else:
        key = "measured_node" if measured_node else "unmeasured_node"
        reg = validate.interval_regime(alpha_beta_efficiency)
        ring = "an alpha-beta ring slowed by the simulated incast stalls" if incast else "an alpha-beta ring"
        bounds = validate.regime_bounds(q[key], reg)
        basis = f"{reg} by {ring}, {key.replace('_', ' ')}: {q['corpus']}, each source left out"
        if bounds is not q[key][reg]:
            basis += " (regimes pooled: too few rows of this regime)"
        if calibrated:
            basis = ("generic bounds (birder calibrate fitted collective times, not training throughput: no "
                     "training rows of this cluster to bound it): " + basis)
    if not all(map(math.isfinite, bounds)):
        basis += "; too few left-out rows to bound the interval"
    return (*validate.interval_around(throughput, bounds), basis)


EQUAL_RATIO = 0.005  # two predictions whose ratio prints as 1.00x are equal within rounding (speedup_interval)
SPEEDUP_SETUP = ("model", "batch_per_gpu", "nodes", "gpus_per_node")  # what two predictions share to be paired


def speedup_interval(a: dict, b: dict) -> dict:
    """Prediction ``a``'s throughput over ``b``'s (two dicts of ``predict_on``) with its 80% interval.

    Where the two share model, batch, nodes and GPUs per node (they differ in optimizer, framework or network),
    their errors may be correlated, and the interval is the quantiles of log(measured ratio / predicted ratio)
    over the corpus's pairs of rows of one table so compared, each source left out (``speedup_measured_node``
    where both are calibrated on a measured node, else ``speedup_unmeasured_node``; per interval regime, the
    pair's communication-bound if either is), where the corpus's left-out pairs of that kind support it
    (``validate.speedup_method``: covered as promised, and no wider than the naive interval); else, and across
    set-ups, the naive worst case of the two intervals. Two predictions equal within rounding (``EQUAL_RATIO``)
    take the paired bounds' wider tail on both sides, so that which is called the faster never turns on a last
    digit. One measured node each: the ratio of the measurements,
    exact. Returns ``ratio``, ``low``, ``high``, ``basis`` and ``verdict``:
    ``faster`` / ``slower`` where the interval excludes 1, else ``within the uncertainty``."""
    from sim import validate

    ratio = a["throughput"] / b["throughput"]
    naive = (a["throughput_low"] / b["throughput_high"],
             a["throughput_high"] / b["throughput_low"] if b["throughput_low"] > 0 else math.inf)
    q = interval_quantiles()
    measured = bool(a.get("measured_node") and b.get("measured_node"))
    key = "measured_node" if measured else "unmeasured_node"
    reg = validate.pair_regime(a.get("interval_regime"), b.get("interval_regime"))
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
                                     "intervals fitted on the pairs' ratios (validate.speedup_method)")
    else:
        bounds = validate.regime_bounds(q[f"speedup_{key}"], reg)
        if abs(ratio - 1) < EQUAL_RATIO:
            # neither is the faster but for rounding: the lopsided bounds could point either way, so the wider
            # tail is taken both ways rather than flipping on a last digit
            bounds = (-max(-bounds[0], bounds[1]), max(-bounds[0], bounds[1]))
        # the bounds are of the faster by the prediction over the slower: the other way round, mirrored
        faster, slower = (a, b) if ratio >= 1 else (b, a)
        lo, hi = validate.interval_around(faster["throughput"] / slower["throughput"], bounds)
        low, high = (lo, hi) if ratio >= 1 else (1 / hi, 1 / lo)
        basis = (f"paired: {reg} pairs of rows of one published table, {key.replace('_', ' ')}, each source left "
                 f"out ({q['corpus']})")
    verdict = "faster" if low > 1 else "slower" if high < 1 else "within the uncertainty"
    return {"ratio": ratio, "low": low, "high": high, "basis": basis, "verdict": verdict}


def measured_node_bounds(low: float, high: float, basis: str, throughput: float, nodes: int,
                         single_node_throughput: float) -> tuple[float, float, str]:
    """An interval held to what a measured node implies: on that one node the prediction is the measurement (no
    interval), and n such nodes give at most n times it (``validate.linear_ceiling``, as the corpus's coverage
    is measured)."""
    from sim import validate

    if nodes == 1:
        return throughput, throughput, "one measured node: the measurement itself"
    ceiling = validate.linear_ceiling(high, throughput, nodes * single_node_throughput)
    if ceiling < high:
        basis += "; upper end held at linear scaling of the measured node"
    return low, ceiling, basis


def _split(cross: CrossValidation) -> dict:
    """The cross-validation's MAPE overall, over the groups a site's fit left out, and over networks left out."""
    from sim import validate

    site = [r for r in cross.rows if not r.left_out.startswith("network=")]
    generic = [r for r in cross.rows if r.left_out.startswith("network=")]
    return {"mape": cross.mape, "site_mape": validate.mape(site) if site else cross.mape,
            "generic_mape": validate.mape(generic) if generic else cross.mape}


def extrapolation(c: Cluster, model: str | None, batch_per_gpu: int, grad_dtype: str = "fp32",
                  accumulation_steps: int = 1) -> list[str]:
    """Why a prediction leans on a site's fitted constants outside the range they were fitted on (empty: it does
    not, or the network is a generic preset with no fitted constant)."""
    nic = c.nic
    if not nic.fitted or not nic.fitted_on:  # a file fitted by birder calibrate records no such range
        return []
    seen = dict(nic.fitted_on)
    reasons = []
    if "models" in seen and (model or "synthetic") not in seen["models"]:
        reasons.append(f"{nic.name} was fitted on {', '.join(seen['models'])}, not {model or 'a synthetic model'}")
    if "batch_per_gpu" in seen and batch_per_gpu not in seen["batch_per_gpu"]:
        reasons.append(f"{nic.name} was fitted at {', '.join(map(str, seen['batch_per_gpu']))} samples per GPU, "
                       f"not {batch_per_gpu}")
    if "gpus" in seen and not (min(seen["gpus"]) <= c.n_gpus <= max(seen["gpus"])):
        reasons.append(f"{nic.name} was fitted on {min(seen['gpus'])}-{max(seen['gpus'])} GPUs, not {c.n_gpus}")
    if "gpus_per_node" in seen and c.gpus_per_node not in seen["gpus_per_node"]:
        reasons.append(f"{nic.name} was fitted with {', '.join(map(str, seen['gpus_per_node']))} GPUs per node, "
                       f"not {c.gpus_per_node}")
    if grad_dtype != "fp32" or accumulation_steps != 1:
        reasons.append(f"{nic.name} was fitted with fp32 gradients and no accumulation")
    return reasons


# Bounds of the inputs the simulator answers (a value past them is a typo or a unit slip, and past float range
# they overflow): checked where a configuration enters the library.
MAX_PARAMS = 10**12  # a trillion parameters: a DDP replica's fp32 gradient alone takes 4 TB, 28 times an H200's memory
MAX_BATCH_PER_GPU = 65_536  # the input images alone of 65,536 ResNet-50 samples (3 x 224 x 224 fp32) take 39 GB
MAX_ACCUMULATION_STEPS = 65_536  # micro-batches per optimizer step: a bound of the tool, far past published setups
MAX_MARSIT_PERIOD = 10**9  # steps between full-precision rounds: more steps than a training run takes
MIN_SINGLE_NODE_THROUGHPUT = 1e-6  # samples/s on one node: one sample per 11.6 days; below it the iteration time
# leaves the float range of the flow engine's clock (1e-300 gave a throughput of 0 and null times)


def _check_bounds(**values: int | None) -> None:
    limits = {"params": MAX_PARAMS, "batch_per_gpu": MAX_BATCH_PER_GPU, "accumulation_steps": MAX_ACCUMULATION_STEPS,
              "marsit_period": MAX_MARSIT_PERIOD}
    for name, value in values.items():
        if isinstance(value, int) and not isinstance(value, bool) and value > limits[name]:
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            raise ValueError(f"{name} must be at most {limits[name]:,}, got {shown}")


def predict_on(c: Cluster, *, optimizer: str = "sgdm", model: str | None = None, params: int | None = None,
               batch_per_gpu: int = 32, scheme: str = "hierarchical", single_node_throughput: float | None = None,
               warmup_fraction: float | None = None, marsit_period: int | None = None, grad_dtype: str = "fp32",
               accumulation_steps: int = 1, hook_blocks_backward: bool = True) -> dict:
    """One training configuration on cluster ``c``: ``birder predict --json`` as a dict."""
    _check_bounds(params=params, batch_per_gpu=batch_per_gpu, accumulation_steps=accumulation_steps,
                  marsit_period=marsit_period)
    if isinstance(single_node_throughput, int | float) and 0 < single_node_throughput < MIN_SINGLE_NODE_THROUGHPUT:
        raise ValueError(f"single_node_throughput must be at least {MIN_SINGLE_NODE_THROUGHPUT:g} samples/s (one "
                         f"sample per 11.6 days), got {single_node_throughput:g}")
    if model is None and params is None:
        model = "resnet50"
    out = predict(c, model=model, params=params, batch_per_gpu=batch_per_gpu, optimizer=optimizer, scheme=scheme,
                  single_node_throughput=single_node_throughput, warmup_fraction=warmup_fraction,
                  marsit_period=marsit_period, grad_dtype=grad_dtype, accumulation_steps=accumulation_steps,
                  hook_blocks_backward=hook_blocks_backward).as_dict()
    site = c.nic.name if c.nic.name in SITES else None
    n_params = params if model is None else model_profile(model).n_params
    samples = c.gpus_per_node * batch_per_gpu * accumulation_steps
    naive = alpha_beta_throughput(n_params, gradient_bits(optimizer, grad_dtype), c.n_nodes, samples,
                                  out["single_node_throughput"], c.nic.link_rate * c.nic.count / 8)
    incast_s = out["incast_timeouts"] * c.nic.retransmission_timeout
    # the interval's regime sees the simulator's incast stalls: an alpha-beta ring's step plus them
    efficiency = incast_slowed(naive, c.n_nodes * samples, incast_s) / (c.n_nodes * out["single_node_throughput"])
    regime = interval_regime(efficiency)
    low, high, basis = prediction_interval(out["throughput"], efficiency, site, single_node_throughput is not None,
                                           calibrated=c.nic.fitted and not c.nic.fitted_on, incast=incast_s > 0)
    if single_node_throughput is not None:  # a measured node bounds what more of its kind can do
        low, high, basis = measured_node_bounds(low, high, basis, out["throughput"], c.n_nodes,
                                                single_node_throughput)
    incast_free = None
    if incast_s > 0 and switch_buffer_assumed(c):  # a switch the buyer has not chosen: the interval spans it
        deep = replace(c, nic=replace(c.nic, switch_buffer_bytes=math.inf))
        incast_free = predict(deep, model=model, params=params, batch_per_gpu=batch_per_gpu, optimizer=optimizer,
                              scheme=scheme, single_node_throughput=single_node_throughput,
                              warmup_fraction=warmup_fraction, marsit_period=marsit_period, grad_dtype=grad_dtype,
                              accumulation_steps=accumulation_steps,
                              hook_blocks_backward=hook_blocks_backward).throughput
        if incast_free > high:
            high = incast_free
            basis += ("; upper end raised to the incast-free prediction (the switch buffer is assumed: a "
                      "deeper-buffered switch or a lossless fabric has none)")
    reasons = extrapolation(c, model, batch_per_gpu, grad_dtype, accumulation_steps)
    out.update({"model": model if model is not None else f"params-{params}", "batch_per_gpu": batch_per_gpu,
                "network": c.nic.name, "cluster": c.name or c.nic.name, "site_profile": site is not None,
                "measured_node": single_node_throughput is not None, "interval_regime": regime,
                "optimizer": optimizer, "nodes": c.n_nodes, "gpus": c.n_gpus, "gpus_per_node": c.gpus_per_node,
                "nics_per_node": c.nic.count, "grad_dtype": grad_dtype, "accumulation_steps": accumulation_steps,
                "relative_error": (high - low) / 2 / out["throughput"], "throughput_low": low,
                "throughput_high": high, "interval_level": INTERVAL_LEVEL, "interval_basis": basis,
                "regime": predicted_regime(out["scale_efficiency"]), "extrapolated": bool(reasons),
                "extrapolation_reasons": reasons, "provenance": [f"{k}: {v}" for k, v in c.provenance],
                "incast_s": incast_s, "incast_basis": incast_basis(c) if incast_s > 0 else "",
                "switch_buffer_assumed_bytes": c.nic.switch_buffer_bytes if incast_free is not None else None,
                "incast_free_throughput": incast_free, "gpu_speed_cv": c.gpu_speed_cv,
                "step_jitter_cv": c.step_jitter_cv,
                "straggler_factor": straggler_factor(c.n_gpus, c.gpus_per_node, c.straggler_cv)})
    return out


def predict_config(model: str, nodes: int, network: str = "10gbe", optimizer: str = "sgdm", *,
                   batch_per_gpu: int = 32, gpus_per_node: int = 8, gpu: str = "a100",
                   scheme: str = "hierarchical", single_node_throughput: float | None = None,
                   nics_per_node: int | None = None, cluster_file: str | Path | None = None,
                   grad_dtype: str = "fp32", accumulation_steps: int = 1, hook_blocks_backward: bool = True) -> dict:
    """One training configuration on a network (any preset or site profile name) or a cluster file."""
    if cluster_file is not None:
        c = load_cluster(cluster_file, nodes, gpus_per_node, gpu)
    else:
        c = cluster(network, nodes, gpus_per_node, None, gpu, 1.0, nics_per_node)
    return predict_on(c, optimizer=optimizer, model=model, batch_per_gpu=batch_per_gpu, scheme=scheme,
                      single_node_throughput=single_node_throughput, grad_dtype=grad_dtype,
                      accumulation_steps=accumulation_steps, hook_blocks_backward=hook_blocks_backward)


def sweep_grid(model: str, nodes: list[int], networks: list[str] | None, optimizers: list[str], *,
               batch_per_gpu: int = 32, gpus_per_node: int = 8, gpu: str = "a100",
               single_node_throughput: float | dict[str, float] | None = None, progress: bool = False,
               cluster_file: str | Path | None = None, grad_dtype: str = "fp32",
               accumulation_steps: int = 1) -> list[dict]:
    """``predict_config`` over nodes x networks x optimizers (or nodes x optimizers on ``cluster_file``);
    ``single_node_throughput`` may map optimizer -> samples/s."""
    if cluster_file is not None and networks:
        raise ValueError("cluster_file and networks conflict: a cluster file names its own network")
    if not nodes or not optimizers or (cluster_file is None and not networks):
        raise ValueError("nodes, optimizers and networks (or cluster_file) must each name at least one value")
    if len(set(nodes)) < len(nodes):
        raise ValueError(f"nodes has repeated values: {nodes}")
    if isinstance(single_node_throughput, dict):
        missing = [o for o in optimizers if o not in single_node_throughput]
        if missing:
            raise ValueError(f"single_node_throughput has no value for {', '.join(missing)}")
    grid = [(net, opt, n) for net in (networks or [None]) for opt in optimizers for n in nodes]
    out = []
    for net, opt, n in tqdm(grid, desc="sweep", unit="config", disable=True if not progress else None,
                            file=sys.stderr, leave=False):  # gone when done: the answer follows it
        single = single_node_throughput.get(opt) if isinstance(single_node_throughput, dict) else single_node_throughput
        out.append(predict_config(model, n, net or "", opt, batch_per_gpu=batch_per_gpu, gpus_per_node=gpus_per_node,
                                  gpu=gpu, single_node_throughput=single, cluster_file=cluster_file,
                                  grad_dtype=grad_dtype, accumulation_steps=accumulation_steps))
    return out


def validation_summary(cross_validate: bool = True) -> dict:
    """The public rows predicted with the site profiles: ``fit_mape`` (in-sample: the sites' constants were fitted
    on these rows), ``cross_validated_mape`` (groups left out of the fit: an optimizer, a GPU count, a network),
    ``cross_validation`` (its detail per group; the stored measurement of these rows when there is one),
    ``corpus_validation`` (the corpus with each source left out: ``summary`` and per-group ``table``, as
    ``birder validate`` prints them) and ``rows``, as plain dicts (``as_dict()`` of ``sim.validate``'s results)."""
    from sim import validate

    results = validate.compare(validate.rows())
    out = {"rows": [r.as_dict() for r in results], "fit_mape": validate.mape(results),
           "fit_mape_multi_node": validate.mape([r for r in results if r.gpus > validate.GPUS_PER_NODE])}
    if cross_validate:
        cross = _cross_validation()
        split = _split(cross)
        out.update({"cross_validated_mape": cross.mape, "cross_validated_mape_site": split["site_mape"],
                    "cross_validated_mape_generic": split["generic_mape"], "cross_validation": cross.as_dict()})
        q = interval_quantiles()
        out["corpus_validation"] = {"summary": q["summary"], "table": q["table"]}  # each source left out
    return out


@lru_cache(maxsize=1)
def _cross_validation() -> CrossValidation:
    """The group cross-validation of the public rows: the stored measurement when it was taken on the same rows
    (same SHA-256), else measured now, once per process."""
    from sim import validate

    if CROSS_VALIDATION_FILE.exists():
        stored = json.loads(CROSS_VALIDATION_FILE.read_text())
        if stored.get("rows_sha256") == _rows_digest(validate.PUBLIC_CSV):
            return validate.CrossValidation.from_dict(stored["cross_validation"])
    return validate.group_cross_validation()


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


def write_cross_validation() -> Path:
    """Measure the group cross-validation on the public rows and the corpus's intervals and store them (with the
    rows' and the corpus's SHA-256) for ``prediction_interval`` and ``validation_summary``."""
    from safeio.atomic import write_text
    from sim import validate

    cross = validate.group_cross_validation()
    body = {"command": "python -m sim.api --write-cross-validation",
            "rows_sha256": _rows_digest(validate.PUBLIC_CSV), **_split(cross), "cross_validation": cross.as_dict(),
            "intervals": _intervals(validate.corpus_validation(), cross)}
    return write_text(CROSS_VALIDATION_FILE, json.dumps(finite_json_value(body), indent=1, allow_nan=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.api", description="The simulator as a library; run as a "
                                     "module it stores the group cross-validation that predictions' intervals use.")
    parser.add_argument("--write-cross-validation", action="store_true", required=True,
                        help=f"measure the group cross-validation of the public rows and write {CROSS_VALIDATION_FILE}")
    parser.parse_args(argv)
    print(write_cross_validation())
    return 0


if __name__ == "__main__":
    sys.exit(main())
