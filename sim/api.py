"""The simulator as a library, without argparse: what `birder report`, `birder sweep` and other programs call.

Each prediction is a dict with the keys of ``birder predict --json`` (``throughput``, ``iteration_s``, ...,
``throughput_low``, ``throughput_high``, ``extrapolated``) plus the configuration (``model``,
``batch_per_gpu``, ``network``, ``optimizer``, ``nodes``, ``gpus``). Its 80% interval and a speed-up's come from
``sim.uncertainty`` (``prediction_interval``, ``speedup_interval``: bounds that validation measured and stored).
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from sim.hardware import (
    NIC_KEYS,
    SITES,
    Cluster,
    cluster,
    default_multinode_loss_scale,
    default_step_jitter,
    load_cluster,
    nic_preset,
)
from sim.input_ranges import model_uncertainty
from sim.models import model_profile
from sim.stragglers import straggler_factor
from sim.system import incast_basis, switch_buffer_assumed, unmodelled
from sim.uncertainty import (
    INTERVAL_LEVEL,
    alpha_beta_throughput,
    gradient_bits,
    incast_slowed,
    interval_regime,
    line_rate_ceiling,
    measured_node_bounds,
    predicted_regime,
    prediction_interval,
)
from sim.workload import carried_node, predict


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
    if "frameworks" in seen and c.framework not in seen["frameworks"]:
        reasons.append(f"{nic.name} was fitted with {', '.join(seen['frameworks'])}, not {c.framework}")
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
              "single_node_accumulation_steps": MAX_ACCUMULATION_STEPS, "marsit_period": MAX_MARSIT_PERIOD}
    for name, value in values.items():
        if isinstance(value, int) and not isinstance(value, bool) and value > limits[name]:
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            raise ValueError(f"{name} must be at most {limits[name]:,}, got {shown}")


def predict_on(c: Cluster, *, optimizer: str = "sgdm", model: str | None = None, params: int | None = None,
               batch_per_gpu: int = 32, scheme: str = "hierarchical", single_node_throughput: float | None = None,
               warmup_fraction: float | None = None, marsit_period: int | None = None, grad_dtype: str = "fp32",
               accumulation_steps: int = 1, hook_blocks_backward: bool = True, seq_len: int | None = None,
               traces: dict | None = None, single_node_accumulation_steps: int | None = None) -> dict:
    """One training configuration on cluster ``c``: ``birder predict --json`` as a dict. A ``params`` model
    takes ``seq_len`` (tokens per sample) unless a measured node (``single_node_throughput``) sets its compute:
    without either its compute is unknown by a factor of its sequence length, and it is refused. ``traces``: a
    dict that receives, per step kind, the events of the predicted step (``workload.predict``).
    ``single_node_accumulation_steps``: the measured node's own micro-batches per optimizer step, where they differ
    from ``accumulation_steps`` (``workload.predict``); its bounds then use the node carried to this run's."""
    _check_bounds(params=params, batch_per_gpu=batch_per_gpu, accumulation_steps=accumulation_steps,
                  single_node_accumulation_steps=single_node_accumulation_steps, marsit_period=marsit_period)
    if isinstance(single_node_throughput, int | float) and 0 < single_node_throughput < MIN_SINGLE_NODE_THROUGHPUT:
        raise ValueError(f"single_node_throughput must be at least {MIN_SINGLE_NODE_THROUGHPUT:g} samples/s (one "
                         f"sample per 11.6 days), got {single_node_throughput:g}")
    if model is None and params is None:
        model = "resnet50"
    if params is not None and seq_len is None and single_node_throughput is None:
        raise ValueError("params needs seq_len (tokens per sample: the sequence length of a sequence model, 1 for "
                         "a per-sample model such as a CNN) or single_node_throughput (a measured node counts them)")
    out = predict(c, model=model, params=params, batch_per_gpu=batch_per_gpu, optimizer=optimizer, scheme=scheme,
                  single_node_throughput=single_node_throughput, warmup_fraction=warmup_fraction,
                  marsit_period=marsit_period, grad_dtype=grad_dtype, accumulation_steps=accumulation_steps,
                  hook_blocks_backward=hook_blocks_backward, seq_len=seq_len, traces=traces,
                  single_node_accumulation_steps=single_node_accumulation_steps).as_dict()
    # the measured node at this run's accumulation (the measurement itself unless its own differed: carried)
    measured = out["single_node_throughput"] if single_node_throughput is not None else None
    carried = carried_node(single_node_accumulation_steps, accumulation_steps)
    site = c.nic.name if c.nic.name in SITES else None
    n_params = params if model is None else model_profile(model).n_params
    samples = c.gpus_per_node * batch_per_gpu * accumulation_steps
    naive = alpha_beta_throughput(n_params, gradient_bits(optimizer, grad_dtype, model or "",
                                                           warmup_fraction, marsit_period), c.n_nodes, samples,
                                  out["single_node_throughput"], c.nic.link_rate * c.nic.count / 8)
    incast_s = out["incast_timeouts"] * c.nic.retransmission_timeout
    # the interval's regime sees the simulator's incast stalls: an alpha-beta ring's step plus them
    efficiency = incast_slowed(naive, c.n_nodes * samples, incast_s) / (c.n_nodes * out["single_node_throughput"])
    regime = interval_regime(efficiency)
    not_modelled = unmodelled(c, accumulation_steps)
    widths = model_uncertainty(c, out, single_node_throughput is not None, not_modelled, accumulation_steps)
    low, high, basis, scales = prediction_interval(out["throughput"], efficiency, site,
                                                   single_node_throughput is not None,
                                                   calibrated=c.nic.fitted and not c.nic.fitted_on,
                                                   incast=incast_s > 0, widths=(widths.down, widths.up))
    if scales is not None and single_node_throughput is None and c.n_nodes > 1:
        # not knowing the node cannot make the rest better known: at least the interval the same prediction
        # would take with its node measured (the unmeasured rows' residuals, dominated by the built-in profiles'
        # spread, scale the other inputs' widths down where compute matters little)
        known = model_uncertainty(c, out, True, not_modelled, accumulation_steps)
        low_m, high_m, _, _ = prediction_interval(out["throughput"], efficiency, None, True, incast=incast_s > 0,
                                                  widths=(known.down, known.up))
        if low_m < low or high_m > high:
            low, high = min(low, low_m), max(high, high_m)
            basis += "; widened to the interval the same prediction takes with a measured node"
    if scales is None:  # a site profile: its own rows' errors set the width
        drivers = [{"name": f"site profile {site}: its own public rows' errors", "input": "site_profile",
                    "acts_on": "throughput", "range": [low / out["throughput"], high / out["throughput"]],
                    "throughput_range": [low, high], "share": 1.0, "why": basis,
                    "source": "sim/presets/cross_validation.json (site_profile_by_site)"}]
    if measured is not None and not (c.n_nodes == 1 and carried):  # a measured node bounds more of its kind
        low, high, basis = measured_node_bounds(low, high, basis, out["throughput"], c.n_nodes, measured)
    incast_free, incast_span = None, 0.0  # incast_span: half the log-width the incast-free end adds
    if incast_s > 0 and switch_buffer_assumed(c):  # a switch the buyer has not chosen: the interval spans it
        deep = replace(c, nic=replace(c.nic, switch_buffer_bytes=math.inf))
        incast_free = predict(deep, model=model, params=params, batch_per_gpu=batch_per_gpu, optimizer=optimizer,
                              scheme=scheme, single_node_throughput=single_node_throughput,
                              warmup_fraction=warmup_fraction, marsit_period=marsit_period, grad_dtype=grad_dtype,
                              accumulation_steps=accumulation_steps,
                              hook_blocks_backward=hook_blocks_backward, seq_len=seq_len,
                              single_node_accumulation_steps=single_node_accumulation_steps).throughput
        if incast_free > high:
            incast_span = math.log(incast_free / high) / 2
            high = incast_free
            basis += ("; upper end raised to the incast-free prediction (the switch buffer is assumed: a "
                      "deeper-buffered switch or a lossless fabric has none)")
    incast_entry = () if incast_span <= 0 else ((
        {"name": "assumed switch buffer (its incast stalls)", "input": "switch_buffer_bytes",
         "acts_on": "incast stalls", "range": [c.nic.switch_buffer_bytes, None],
         "throughput_range": [out["throughput"], incast_free], "why": incast_basis(c),
         "source": "the upper end raised to the incast-free prediction (a deeper-buffered switch or a lossless "
                   "fabric has none)"}, incast_span),)
    if c.n_nodes == 1 and measured is not None and not carried:
        drivers = []  # the measurement itself
    elif scales is not None:
        ceiling = math.inf if measured is None else c.n_nodes * measured
        drivers = widths.drivers_json(out["throughput"], *scales, extra=incast_entry, ceiling=ceiling)
    elif incast_entry:
        total = math.log(high / low) / 2
        drivers = sorted([{**drivers[0], "share": (total - incast_span) ** 2 / ((total - incast_span) ** 2
                                                                                 + incast_span ** 2)},
                          {**incast_entry[0][0], "share": incast_span ** 2 / ((total - incast_span) ** 2
                                                                              + incast_span ** 2)}],
                         key=lambda e: -e["share"])
    reasons = extrapolation(c, model, batch_per_gpu, grad_dtype, accumulation_steps)
    base = None
    if site is not None and reasons and c.n_nodes > 1:
        # a site's fitted constants are identified on what they were fitted on only (its rows trade a slow link
        # against slow steps, sim.validation.site_fit): elsewhere the interval also spans the hardware it refines,
        # the generic preset it is based on, with that preset's own interval: the site's own constants back to its
        # base's, whatever else the user set (a measured link, a jitter, a loss scale)
        preset = nic_preset(SITES[site]["base"], count=c.nic.count)
        fitted = {NIC_KEYS[k][0] for k in SITES[site] if k in NIC_KEYS}
        base_nic = replace(c.nic, name=preset.name, fitted=False, fitted_on=(),
                           **{f: getattr(preset, f) for f in fitted})
        def generic_unless_set(value: float, default) -> float:
            # the site's default (its fit absorbed jitter and loss) by value and provenance: the base's; else the user's
            site_value, site_source = default(c.nic)
            return default(base_nic)[0] if value == site_value and site_source in c.provenance else value

        generic = replace(c, nic=base_nic, name="", provenance=(),
                          step_jitter_cv=generic_unless_set(c.step_jitter_cv, default_step_jitter),
                          multinode_loss_scale=generic_unless_set(c.multinode_loss_scale, default_multinode_loss_scale))
        base = predict_on(generic, optimizer=optimizer, model=model, params=params, batch_per_gpu=batch_per_gpu,
                          scheme=scheme, single_node_throughput=single_node_throughput,
                          warmup_fraction=warmup_fraction, marsit_period=marsit_period, grad_dtype=grad_dtype,
                          accumulation_steps=accumulation_steps, hook_blocks_backward=hook_blocks_backward,
                          seq_len=seq_len, single_node_accumulation_steps=single_node_accumulation_steps)
    if base is not None and (base["throughput_low"] < low or base["throughput_high"] > high):
        site_low, site_high = low, high
        low, high = min(low, base["throughput_low"]), max(high, base["throughput_high"])
        basis += (f"; widened to span {base_nic.name}'s interval ({base['throughput_low']:.4g} - "
                  f"{base['throughput_high']:.4g}), the preset the site refines, because the site's constants "
                  "are extrapolated: " + "; ".join(reasons))
        site_span, total = math.log(site_high / site_low) / 2, math.log(high / low) / 2  # total > 0: it widened
        drivers = [{**d, "share": d["share"] * (site_span / total) ** 2} for d in drivers] + [
            {"name": f"site profile {site} extrapolated: the generic {base_nic.name} it refines",
             "input": "site_profile_extrapolated", "acts_on": "throughput",
             "range": [base["throughput_low"] / out["throughput"], base["throughput_high"] / out["throughput"]],
             "throughput_range": [base["throughput_low"], base["throughput_high"]],
             "share": 1 - (site_span / total) ** 2, "why": "; ".join(reasons),
             "source": f"birder predict --network {base_nic.name} (its own interval)"}]
        drivers.sort(key=lambda e: -e["share"])
    if measured is not None and carried and c.n_nodes == 1:
        # the node measured at other micro-batches per step: fewer add the same once-per-step costs (all-reduce,
        # optimizer) to fewer samples, so they are no faster than the measurement, and more no slower
        if accumulation_steps < single_node_accumulation_steps and high > max(out["throughput"],
                                                                              single_node_throughput):
            high = max(out["throughput"], single_node_throughput)
            basis += (f"; upper end held at the measured node ({single_node_throughput:.4g} samples/s at "
                      f"{single_node_accumulation_steps} micro-batches per step: fewer are no faster)")
        elif accumulation_steps > single_node_accumulation_steps and low < min(out["throughput"],
                                                                               single_node_throughput):
            low = min(out["throughput"], single_node_throughput)
            basis += (f"; lower end held at the measured node ({single_node_throughput:.4g} samples/s at "
                      f"{single_node_accumulation_steps} micro-batches per step: more are no slower)")
    ceiling = line_rate_ceiling(c.n_gpus * batch_per_gpu * accumulation_steps,
                                out["inter_node_bytes_per_gpu"] * c.gpus_per_node, c.nic.link_rate * c.nic.count / 8)
    if high > max(out["throughput"], ceiling):
        high = max(out["throughput"], ceiling)
        basis += (f"; upper end held at the line-rate bound ({ceiling:.4g} samples/s: "
                  f"{out['inter_node_bytes_per_gpu'] * c.gpus_per_node / 1e9:.4g} GB per node per step between "
                  f"nodes through {c.nic.count} x {c.nic.link_rate / 1e9:g} Gb/s)")
    if model is not None:
        profile = model_profile(model)
        tokens, tokens_source = profile.tokens, profile.tokens_source
    elif seq_len is not None:
        tokens, tokens_source = seq_len, f"--seq-len {seq_len}"
    else:
        tokens, tokens_source = None, "not given: the measured node's throughput counts them"
    out.update({"model": model if model is not None else f"params-{params}", "batch_per_gpu": batch_per_gpu,
                "network": c.nic.name, "cluster": c.name or c.nic.name, "site_profile": site is not None,
                "measured_node": single_node_throughput is not None, "interval_regime": regime,
                "seq_len": tokens, "seq_len_source": tokens_source,
                "optimizer": optimizer, "nodes": c.n_nodes, "gpus": c.n_gpus, "gpus_per_node": c.gpus_per_node,
                "nics_per_node": c.nic.count, "grad_dtype": grad_dtype, "accumulation_steps": accumulation_steps,
                "single_node_accumulation_steps": single_node_accumulation_steps,
                "relative_error": (high - low) / 2 / out["throughput"], "throughput_low": low,
                "throughput_high": high, "interval_level": INTERVAL_LEVEL, "interval_basis": basis,
                "regime": predicted_regime(out["scale_efficiency"]), "extrapolated": bool(reasons),
                "extrapolation_base": None if base is None else {
                    "network": base["network"], "throughput": base["throughput"],
                    "throughput_low": base["throughput_low"], "throughput_high": base["throughput_high"]},
                "extrapolation_reasons": reasons, "provenance": [f"{k}: {v}" for k, v in c.provenance],
                "incast_s": incast_s, "incast_basis": incast_basis(c) if incast_s > 0 else "",
                "switch_buffer_assumed_bytes": c.nic.switch_buffer_bytes if incast_free is not None else None,
                "incast_free_throughput": incast_free, "gpu_speed_cv": c.gpu_speed_cv,
                "step_jitter_cv": c.step_jitter_cv, "collective_efficiency": c.collective_efficiency,
                "collective_pace": c.collective_pace,
                "multinode_loss_scale": c.multinode_loss_scale,
                "unmodelled": not_modelled, "interval_drivers": drivers,
                "interval_model_width": [widths.down, widths.up],
                "straggler_factor": straggler_factor(c.n_gpus, c.gpus_per_node, c.straggler_cv(accumulation_steps))})
    return out


def predict_config(model: str, nodes: int, network: str = "10gbe", optimizer: str = "sgdm", *,
                   batch_per_gpu: int = 32, gpus_per_node: int = 8, gpu: str = "a100",
                   scheme: str = "hierarchical", single_node_throughput: float | None = None,
                   nics_per_node: int | None = None, cluster_file: str | Path | None = None,
                   grad_dtype: str = "fp32", accumulation_steps: int = 1, hook_blocks_backward: bool = True,
                   params: int | None = None, seq_len: int | None = None,
                   single_node_accumulation_steps: int | None = None) -> dict:
    """One training configuration on a network (any preset or site profile name) or a cluster file; ``params``
    (with ``seq_len``) for a synthetic model instead of ``model`` (None then)."""
    if cluster_file is not None:
        c = load_cluster(cluster_file, nodes, gpus_per_node, gpu)
    else:
        c = cluster(network, nodes, gpus_per_node, None, gpu, 1.0, nics_per_node)
    return predict_on(c, optimizer=optimizer, model=model, params=params, batch_per_gpu=batch_per_gpu,
                      scheme=scheme, single_node_throughput=single_node_throughput, grad_dtype=grad_dtype,
                      accumulation_steps=accumulation_steps, hook_blocks_backward=hook_blocks_backward,
                      seq_len=seq_len, single_node_accumulation_steps=single_node_accumulation_steps)


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


