"""`birder predict`, `birder collective`, `birder sweep`, `birder validate`, `birder calibrate`: the simulator on
the command line.

Arguments are parsed here and handed to the library (``sim.api``, ``sim.collective``, ``sim.validation``), whose
ValueErrors name parameters; ``birder.cli`` prints them as one line and exits 2. (Over 600 lines: the
flags and output of five subcommands; each ``run_*`` is short and hands off to the library.)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from birder_ref.registry import simulated_spec
from birder_ref.schedules import SCHEMES, Layout
from safeio.argtypes import non_empty_path, positive_int, positive_number
from safeio.inputs import read_text_bounded
from safeio.outputs import check_output_file, check_outputs, check_owned, output_files, write_output_file
from safeio.serialise import csv_text
from safeio.text import printable
from sim.api import MAX_BATCH_PER_GPU
from sim.hardware import (
    COMM_LIBRARIES,
    FRAMEWORKS,
    GENERIC_NETWORKS,
    GPU_SPEED_DEFAULT,
    GPUS,
    INTRA,
    MAX_GPUS,
    MAX_OVERSUBSCRIPTION,
    MIN_COLLECTIVE_PACE,
    MULTINODE_LOSS_FITTED,
    MULTINODE_LOSS_SCALE,
    NETWORKS,
    Cluster,
    check_collective_efficiency,
    check_collective_pace,
    check_measured_rate,
    check_multinode_loss_scale,
    check_nics_per_node,
    cluster,
    default_step_jitter,
    describe,
    intra_preset,
    load_cluster,
    nic_preset,
    sockets_setting,
)
from sim.stragglers import GPU_SPEED_CV, STEP_JITTER_CV, check_gpu_speed_cv, check_step_jitter_cv
from sim.uncertainty import finite_json_value
from sim.workload import GRAD_BITS, OPTIMIZERS


def _batch_per_gpu(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_PER_GPU:
        raise argparse.ArgumentTypeError(f"{value} samples per GPU exceeds {MAX_BATCH_PER_GPU:,}, more than one "
                                         "GPU's memory holds (the input images alone of 65,536 ResNet-50 samples "
                                         "take 39 GB)")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _model_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a model name (resnet50, bert-base, bert-large, gpt2, vit-b16), "
                                         "got ''")
    return text


MAX_NAME_CHARS = 100  # a cluster's name is a label in tables and plots, not a paragraph


def _cluster_name(text: str) -> str:
    """A label: 1 to MAX_NAME_CHARS printable characters (a line break or an escape in it is a pasting accident)."""
    if not text.strip() or len(text) > MAX_NAME_CHARS or not text.isprintable():
        raise argparse.ArgumentTypeError(f"expected a name of 1 to {MAX_NAME_CHARS} printable characters, got "
                                         f"'{printable(text[:40])}'")
    return text


_positive_float = positive_number()


def _int_list(text: str) -> list[int]:
    """Comma-separated positive integers; an empty list or a repeated value is refused (not silently fixed)."""
    values = [positive_int(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"repeated value(s) {', '.join(map(str, repeated))} in {text!r}")
    return values


def _throughputs(text: str) -> float | dict[str, float]:
    """``X`` (the same single-node throughput for every optimizer) or ``OPT=X,OPT=X`` (one per optimizer)."""
    if "=" not in text:
        return _positive_float(text)
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name in out:
            raise argparse.ArgumentTypeError(f"optimizer {name!r} given twice in {text!r}")
        if name not in OPTIMIZERS:
            raise argparse.ArgumentTypeError(f"unknown optimizer {name!r} in {text!r}; choose from "
                                             f"{', '.join(OPTIMIZERS)}")
        out[name] = _positive_float(value)
    return out


def _name_list(choices):
    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"expected comma-separated names from {', '.join(choices)}, got "
                                             f"{text!r}")
        for name in names:
            if name not in choices:
                raise argparse.ArgumentTypeError(f"unknown name {name!r}; choose from {', '.join(choices)}")
        if len(set(names)) < len(names):
            raise argparse.ArgumentTypeError(f"repeated name in {text!r}")
        return names

    return parse


def _cluster_args(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    net = p.add_mutually_exclusive_group()
    if not sweep:
        net.add_argument("--network", choices=list(NETWORKS),
                         help="inter-node network: a generic preset (hardware values) or a site profile "
                              "(birder-paper-10gbe, birder-paper-ib: fitted); default 10gbe")
    net.add_argument("--cluster", metavar="FILE.toml", type=non_empty_path,
                     help="a cluster described in TOML (sim/presets/example_cluster.toml)")
    p.add_argument("--gpus-per-node", type=positive_int, default=None, help="GPUs per node (default 8)")
    p.add_argument("--nics-per-node", type=positive_int, default=None,
                   help="NICs per node, rail-aligned (default 1, or the TOML's [network] count)")
    p.add_argument("--gpu", choices=list(GPUS), default=None,
                   help="GPU for built-in compute profiles and its default fabric (default a100, or the TOML's)")
    p.add_argument("--intra", choices=list(INTRA), help="intra-node fabric preset (default: the GPU's NVLink)")
    p.add_argument("--oversubscription", type=float, default=None,
                   help=f"spine oversubscription factor, 1 to {MAX_OVERSUBSCRIPTION:g} (default 1, or the TOML's)")
    p.add_argument("--nodes-per-leaf", type=positive_int, default=None,
                   help="nodes under one leaf switch, whose traffic never crosses the spine (default 1, or the "
                        "TOML's [switch] nodes_per_leaf)")
    p.add_argument("--measured-gbps", type=positive_number("Gb/s"), default=None, metavar="GBPS",
                   help="the link rate you measured between two of the nodes (Gb/s per NIC, one host-to-host stream: "
                        "iperf over TCP, ib_write_bw over InfiniBand), at most the line rate; replaces line rate x "
                        "payload share (default: not measured, or the TOML's [network] measured_gbps)"
                        + ("; with one network only" if sweep else ""))
    p.add_argument("--placement-group", action="store_true", default=None,
                   help="the nodes are in one cluster placement group (a cloud network's per-flow cap inside one, "
                        "e.g. EC2's 10 Gb/s instead of 5; default: not, or the TOML's [network] placement_group)")
    p.add_argument("--comm-library", choices=list(COMM_LIBRARIES), default=None,
                   help="the collective library's release, for the TCP flows it opens per NIC "
                        "(sim/presets/comm_libraries.toml; default nccl, 2.4.8 and later, or the TOML's)")
    p.add_argument("--sockets-per-connection", type=positive_int, default=None, metavar="N",
                   help="TCP sockets NCCL opens per connection, NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS as "
                        "you set them; socket transport only (default: the library's for the NIC's vendor, or the "
                        "TOML's)")


def _workload_args(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", type=_model_name,
                       help="resnet50, bert-base, bert-large, gpt2 or vit-b16 (default resnet50)")
    model.add_argument("--params", type=positive_int, help="a synthetic model of N parameters")
    p.add_argument("--seq-len", type=positive_int, default=None, metavar="L",
                   help="tokens per sample of a --params model (its compute counts each; 1 for a per-sample model "
                        "such as a CNN); required with --params unless --single-node-throughput is given. Built-in "
                        "models carry their own")
    p.add_argument("--batch-per-gpu", type=_batch_per_gpu, default=32,
                   help=f"samples per GPU per step, at most {MAX_BATCH_PER_GPU:,} (default 32)")
    shared = (" (with several --optimizers: used by those it applies to)" if sweep else "") + "; refused for an "\
        "optimizer it does not apply to"
    p.add_argument("--scheme", choices=SCHEMES, default=None,
                   help="Birder's scheme (default hierarchical)" + shared)
    p.add_argument("--warmup-fraction", type=_fraction, default=None,
                   help="1-bit Adam's uncompressed share of steps (default 0.2 for BERT, 0.15 otherwise)" + shared)
    p.add_argument("--marsit-period", type=positive_int, default=None, metavar="K",
                   help="Marsit's full-precision round every K steps (default: none after the first)" + shared)
    p.add_argument("--grad-dtype", choices=list(GRAD_BITS), default="fp32",
                   help="what full-precision gradients travel as (default fp32; AMP/DeepSpeed setups: fp16, bf16)")
    p.add_argument("--accumulation-steps", type=positive_int, default=1, metavar="K",
                   help="micro-batches per optimizer step, one all-reduce per K (default 1)")
    p.add_argument("--framework", choices=list(FRAMEWORKS), default=None,
                   help="training framework: its gradient buckets, overlap with backward and cycle time "
                        "(sim/presets/frameworks.toml; default ddp, or the TOML's framework)")
    p.add_argument("--gpu-speed-cv", type=float, default=None, metavar="CV",
                   help="spread of per-GPU speed (standard deviation / median): the step waits for the job's slowest "
                        f"GPU; 0 turns stragglers off (default {GPU_SPEED_CV:.4f}, Sinha et al. SC'22, "
                        "sim/presets/variability.toml; or the TOML's gpu_speed_cv)")
    p.add_argument("--step-jitter-cv", type=float, default=None, metavar="CV",
                   help="per-step jitter of each GPU's step time (standard deviation / median, fresh each step); "
                        f"0 turns it off (default {STEP_JITTER_CV:.2f}, FITTED on the validation corpus, "
                        "sim/presets/step_jitter.toml; or the TOML's step_jitter_cv)")
    p.add_argument("--collective-efficiency", type=float, default=None, metavar="E",
                   help="share of the inter-node payload rate (what a collective benchmark such as nccl-tests "
                        "reaches) that training's collectives reach, in (0, 1]: a what-if input (default 1)")
    p.add_argument("--collective-pace", type=float, default=None, metavar="P",
                   help="share of its own pace a collective keeps while GPU work runs beside it, in "
                        f"[{MIN_COLLECTIVE_PACE:g}, 1]: a what-if input (default 1, not slowed; "
                        "sim/validation/overlap_evidence.py)")
    p.add_argument("--multinode-loss-scale", type=float, default=None, metavar="F",
                   help="factor on the simulated step time beyond one node's, 1 to 10: a what-if (default "
                        f"{MULTINODE_LOSS_SCALE:g}, as simulated; {MULTINODE_LOSS_FITTED:g} is its fit on every "
                        "source seen, which failed its prospective test: sim/presets/multinode_loss.toml)")
    p.add_argument("--hook", choices=("blocking", "overlapped"), default=None,
                   help="whether a 1-bit DDP hook holds up the backward pass until its collectives return "
                        "(blocking: the paper's hook; default) or overlaps it like DDP's all-reduce" + shared)


def _short(number: int) -> str:
    text = str(number)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def make_cluster(args, nodes: int | None, network: str | None = None) -> Cluster:
    """The cluster of the command line; with ``--cluster``, the options given on the command line win."""
    over = getattr(args, "oversubscription", None)
    if over is not None and not (math.isfinite(over) and 1 <= over <= MAX_OVERSUBSCRIPTION):
        raise ValueError(f"--oversubscription must be a number >= 1 and <= {MAX_OVERSUBSCRIPTION:g}, got {over}")
    per_node = getattr(args, "gpus_per_node", None) or 8
    gpus = Layout(nodes or 1, per_node).n_ranks
    if not getattr(args, "cluster", None) and gpus > MAX_GPUS:
        total = f"{gpus:,}" if gpus < 10**24 else "more than 10^24"
        raise ValueError(f"--nodes {_short(nodes or 1)} x --gpus-per-node {_short(per_node)} = {total} GPUs "
                         f"exceeds {MAX_GPUS:,} GPUs, the largest cluster the simulator answers in seconds "
                         "(sim/README.md)")
    nics = getattr(args, "nics_per_node", None)
    if getattr(args, "cluster", None):
        c = load_cluster(args.cluster, nodes, args.gpus_per_node, args.gpu, over, getattr(args, "framework", None))
        if nics is not None:
            check_nics_per_node(nics, c.gpus_per_node, "--nics-per-node")
            c = replace(c, nic=replace(c.nic, count=nics),
                        provenance=c.provenance + (("nics per node", f"{nics} (command line)"),))
    else:
        name = network or getattr(args, "network", None) or "10gbe"
        gpu = args.gpu or "a100"
        if nics is not None:
            check_nics_per_node(nics, args.gpus_per_node or 8, "--nics-per-node")
        nic_preset(name)  # an unknown name fails here, naming the flag's choices
        framework = getattr(args, "framework", None)
        c = cluster(name, nodes or 1, args.gpus_per_node or 8, args.intra, gpu, 1.0 if over is None else over,
                    nics, framework or "ddp")
        c = replace(c, provenance=(
            ("network", f"preset {name}" + (" (site profile: FITTED constants)" if c.nic.fitted else "")),
            ("nics per node", f"{c.nic.count} ({'command line' if nics else 'default'})"),
            ("gpu", f"{gpu} ({'command line' if args.gpu else 'default'})"),
            ("intra", f"preset {c.intra.name} ({'command line' if args.intra else 'default for ' + gpu})"),
            ("gpus per node", f"{c.gpus_per_node} ({'command line' if args.gpus_per_node else 'default'})"),
            ("oversubscription", f"{c.oversubscription:g} ({'command line' if over is not None else 'default'})"),
            ("framework", f"{c.framework} ({'command line' if framework else 'default'})"), GPU_SPEED_DEFAULT,
            default_step_jitter(c.nic)[1]))
    leaf = getattr(args, "nodes_per_leaf", None)
    if leaf is not None and leaf > MAX_GPUS:
        raise ValueError(f"--nodes-per-leaf {_short(leaf)} exceeds {MAX_GPUS:,}, the largest cluster the simulator "
                         "answers")
    if leaf is not None:
        c = replace(c, nodes_per_leaf=leaf, provenance=c.provenance + (("nodes per leaf", f"{leaf} (command line)"),))
    measured = getattr(args, "measured_gbps", None)
    if measured is not None:
        check_measured_rate(measured, c.nic.line_rate / 1e9, "--measured-gbps")
        c = replace(c, nic=replace(c.nic, measured_rate=measured * 1e9),
                    provenance=c.provenance + (("measured link", f"{measured:g} Gb/s (command line)"),))
    if getattr(args, "placement_group", None):
        if not math.isfinite(c.nic.placement_group_flow_rate):
            raise ValueError(f"--placement-group: network {c.nic.name!r} has no per-flow cap inside a placement group "
                             "(a cloud network's per_flow_gbps_placement_group, e.g. --network ec2-25gbe)")
        c = replace(c, nic=replace(c.nic, placement_group=True),
                    provenance=c.provenance + (("placement group", "yes (command line)"),))
    library = getattr(args, "comm_library", None)
    if library is not None:
        c = replace(c, comm_library=library, provenance=c.provenance + (("comm library", f"{library} (command line)"),))
    sockets = getattr(args, "sockets_per_connection", None)
    if sockets is not None:
        sockets, entry = sockets_setting(sockets, c.nic, "--sockets-per-connection", "command line")
        c = replace(c, sockets_per_connection=sockets,
                    provenance=tuple(p for p in c.provenance if p[0] != "sockets") + (entry,))
    speed_cv = getattr(args, "gpu_speed_cv", None)
    if speed_cv is not None:
        c = replace(c, gpu_speed_cv=check_gpu_speed_cv(speed_cv, "--gpu-speed-cv"), provenance=tuple(
            p for p in c.provenance if p[0] != "gpu speed spread") + (
            ("gpu speed spread", f"{speed_cv:g} of the median per GPU (command line)"),))
    jitter_cv = getattr(args, "step_jitter_cv", None)
    if jitter_cv is not None:
        c = replace(c, step_jitter_cv=check_step_jitter_cv(jitter_cv, "--step-jitter-cv"), provenance=tuple(
            p for p in c.provenance if p[0] != "step jitter") + (
            ("step jitter", f"{jitter_cv:g} of the median step per GPU (command line)"),))
    efficiency = getattr(args, "collective_efficiency", None)
    if efficiency is not None:
        c = replace(c, collective_efficiency=check_collective_efficiency(efficiency, "--collective-efficiency"),
                    provenance=c.provenance + (("collective efficiency",
                                                f"{efficiency:g} of the inter-node payload rate (command line)"),))
    pace = getattr(args, "collective_pace", None)
    if pace is not None:
        c = replace(c, collective_pace=check_collective_pace(pace, "--collective-pace"),
                    provenance=c.provenance + (("collective pace",
                                                f"{pace:g} of a collective's own pace beside GPU work (command "
                                                "line)"),))
    loss_scale = getattr(args, "multinode_loss_scale", None)
    if loss_scale is not None:
        c = replace(c, multinode_loss_scale=check_multinode_loss_scale(loss_scale, "--multinode-loss-scale"),
                    provenance=tuple(p for p in c.provenance if p[0] != "multi-node loss scale") + (
                        ("multi-node loss scale", f"{loss_scale:g} x the simulated step time beyond one node's "
                                                  "(command line)"),))
    if getattr(args, "cluster", None) and args.intra:
        c = replace(c, intra=intra_preset(args.intra),
                    provenance=c.provenance + (("intra", f"preset {args.intra} (command line)"),))
    return c


def applies(option: str, optimizer: str) -> bool:
    """Whether an optimizer-specific option changes what ``optimizer``'s prediction means, read from the
    registry: ``--scheme`` if it runs Birder's schemes, ``--warmup-fraction`` and ``--marsit-period`` if they change
    its kinds of steps, ``--hook`` if it has 1-bit steps inside DDP's backward (sim.workload's blocking rule)."""
    spec = simulated_spec(optimizer)
    default = spec.step_kinds("resnet50", None, None)
    if option == "--scheme":
        return spec.takes_scheme
    if option == "--warmup-fraction":
        return spec.step_kinds("resnet50", 0.5, None) != default
    if option == "--marsit-period":
        return spec.step_kinds("resnet50", None, 2) != default
    if option == "--hook":
        return any(kind.comm == "bucketed" and not kind.full_precision for kind in default)
    raise ValueError(f"unknown optimizer-specific option {option}")


def check_options_apply(args: argparse.Namespace, optimizers: list[str]) -> None:
    """Refuse an optimizer-specific option given for optimizers it does not apply to (it would be silently
    ignored); with several optimizers (sweep) it must apply to at least one, and is used by those."""
    given = {"--scheme": args.scheme, "--warmup-fraction": args.warmup_fraction,
             "--marsit-period": args.marsit_period, "--hook": getattr(args, "hook", None)}
    for option, value in given.items():
        if value is not None and not any(applies(option, opt) for opt in optimizers):
            takers = [opt for opt in OPTIMIZERS if applies(option, opt)]
            raise ValueError(f"{option} does not apply to {', '.join(optimizers)} (it would be ignored); it applies "
                             f"to {', '.join(takers)}")


def _options(args) -> dict:
    out = {"batch_per_gpu": args.batch_per_gpu, "scheme": args.scheme or "hierarchical",
           "warmup_fraction": args.warmup_fraction, "marsit_period": args.marsit_period,
           "grad_dtype": getattr(args, "grad_dtype", "fp32"),
           "accumulation_steps": getattr(args, "accumulation_steps", 1),
           "hook_blocks_backward": (getattr(args, "hook", None) or "blocking") == "blocking"}
    if getattr(args, "seq_len", None) is not None:
        out["seq_len"] = args.seq_len
    if getattr(args, "params", None) is not None:
        out["params"] = args.params
    else:
        out["model"] = getattr(args, "model", None) or "resnet50"
    return out


def _bound(samples_per_s: float) -> str:
    """An interval bound as the text prints it: whole samples/s, three significant figures below 100."""
    return f"{samples_per_s:.0f}" if samples_per_s >= 100 else f"{samples_per_s:.3g}"


def _strict_json(value) -> str:
    """JSON with non-finite numbers as null (strict JSON has no Infinity or NaN)."""
    return json.dumps(finite_json_value(value), allow_nan=False)


FLAGS = {"single_node_throughput": "--single-node-throughput",
         "single_node_accumulation_steps": "--single-node-accumulation-steps", "batch_per_gpu": "--batch-per-gpu",
         "accumulation_steps": "--accumulation-steps", "grad_dtype": "--grad-dtype", "warmup_fraction":
         "--warmup-fraction", "marsit_period": "--marsit-period", "model or params": "--model or --params",
         "algorithm": "--algorithm", "params": "--params", "seq_len": "--seq-len"}


def _flags(run):
    """Run a command, naming the library's parameters in its ValueErrors as the command line's flags."""
    def wrapped(args) -> int:
        try:
            return run(args)
        except ValueError as error:
            message = str(error)
            for name, flag in FLAGS.items():
                message = re.sub(rf"(?<![\w-]){name}(?![\w])", flag, message)
            raise ValueError(message) from None

    return wrapped


def _say(line: str) -> None:
    """One line of human output; names from users' files (a cluster's name, a path) cannot forge lines or drive the
    terminal (``safeio.text.printable``)."""
    print(printable(line))


def _quiet(args) -> bool:
    return bool(getattr(args, "quiet", False))


# ------------------------------------------------------------------------------------------------- predict
def _traced_step(args, c: Cluster, result: dict, traces: dict[str, list]) -> dict[str, float]:
    """The predicted step's events (``traces``, recorded by the prediction itself): written as a Chrome/Perfetto
    trace where ``--trace`` asks; returns each link class's busy share, averaged over step kinds."""
    from sim import trace

    times = {step["kind"]: step["iteration_s"] for step in result["steps"]}
    shares = {step["kind"]: step["share"] for step in result["steps"]}
    if args.trace is not None:
        title = f"{result['model']} on {c.n_nodes} x {c.gpus_per_node} {c.gpu} over {c.nic.name}, {args.optimizer}"
        write_output_file(args.trace, json.dumps(trace.chrome_trace(traces, times, shares, title)) + "\n",
                          "birder predict", "--trace", check=json.loads)
    used = {kind: trace.link_utilisation(events, times[kind]) for kind, events in traces.items()}
    return {link: sum(shares[k] * used[k][link] for k in used) for link in ("intra", "inter")}


def run_predict(args) -> int:
    from sim.api import predict_on

    check_options_apply(args, [args.optimizer])
    if args.trace is not None:
        check_owned(check_output_file(args.trace, "--trace"), "--trace")  # before any work
    c = make_cluster(args, args.nodes)
    traces: dict[str, list] | None = {} if args.json or args.trace is not None else None
    result = predict_on(c, optimizer=args.optimizer, single_node_throughput=args.single_node_throughput,
                        single_node_accumulation_steps=args.single_node_accumulation_steps, traces=traces,
                        **_options(args))
    if traces is not None:
        result["link_utilisation"] = _traced_step(args, c, result, traces)
    if args.json:
        print(_strict_json(result))
        return 0
    _say(f"{c.n_gpus} GPUs ({c.n_nodes} x {c.gpus_per_node}) on {c.nic.name}, {args.optimizer}"
          + (f" ({args.scheme or 'hierarchical'})" if args.optimizer == "birder" else ""))
    for line in describe(c):
        _say("  " + line)
    _say(f"  throughput              {result['throughput']:12.1f} samples/s "
          f"({result['interval_level']:.0%} interval {_bound(result['throughput_low'])} - "
          f"{_bound(result['throughput_high'])}: {result['interval_basis']})")
    if result["interval_drivers"]:
        _say("  interval set mostly by  " + interval_drivers_line(result["interval_drivers"]))
    _say(f"  iteration               {result['iteration_s'] * 1e3:12.2f} ms")
    _say(f"    compute               {result['compute_s'] * 1e3:12.2f} ms")
    _say(f"    compression           {result['compression_s'] * 1e3:12.2f} ms")
    _say(f"    contention            {result['contention_s'] * 1e3:12.2f} ms (GPU work slowed beside collectives)")
    _say(f"    exposed communication {result['exposed_communication_s'] * 1e3:12.2f} ms")
    if result["multinode_loss_added_s"] > 0:
        _say(f"    multi-node loss scale {result['multinode_loss_added_s'] * 1e3:12.2f} ms (x"
             f"{result['multinode_loss_scale']:g} of the simulated step time beyond one node's: "
             "sim/presets/multinode_loss.toml)")
    if result["incast_s"] > 0:
        _say(f"    TCP incast stalls     {result['incast_s'] * 1e3:12.2f} ms in the communication "
             f"({result['incast_timeouts']:.2f} retransmission timeouts per step; {result['incast_basis']})")
    if result["incast_free_throughput"] is not None:
        _say(f"  TCP incast on an assumed switch buffer of {result['switch_buffer_assumed_bytes'] / 1e6:.0f} MB: "
             f"{result['throughput']:.0f} to {result['incast_free_throughput']:.0f} samples/s depending on the switch")
    _say(f"  bytes per GPU per step  {result['intra_node_bytes_per_gpu'] / 1e6:12.2f} MB intra, "
          f"{result['inter_node_bytes_per_gpu'] / 1e6:.2f} MB inter")
    _say(f"  scale efficiency        {result['scale_efficiency'] * 100:12.1f} %")
    if args.trace is not None:
        busy = result["link_utilisation"]
        _say(f"  links busy              {busy['intra'] * 100:12.1f} % intra-node, {busy['inter'] * 100:.1f} % "
             f"inter-node; trace written to {args.trace} (open it at ui.perfetto.dev)")
    if result["extrapolated"]:
        _say("  note: extrapolated beyond the site's fit: " + "; ".join(result["extrapolation_reasons"]))
    for sentence in result["unmodelled"]:
        _say(f"  not modelled: {sentence}")
    return 0


def interval_drivers_line(drivers: list[dict], top: int = 3) -> str:
    """The 1-3 inputs that set most of an interval's width (``interval_drivers``), in one line: those above a
    tenth of it, at least the largest."""
    shown = [d for d in drivers[:top] if d["share"] >= 0.1] or drivers[:1]
    return "; ".join(f"{d['name']} ({d['share']:.0%})" for d in shown)


# ---------------------------------------------------------------------------------------------- collective
def run_collective(args) -> int:
    from sim.collective import parse_size, predict_collective, sweep_sizes

    if args.out:
        check_outputs(args.out, ("collective.csv", "collective.png"))
    c = make_cluster(args, args.nodes)
    low, sep, high = args.bytes.partition(":")
    try:
        sizes = sweep_sizes(parse_size(low), parse_size(high)) if sep else [parse_size(low)]
    except ValueError as error:
        raise ValueError(f"--bytes {args.bytes!r}: {error}") from None
    results = [predict_collective(args.op, n, c, args.algorithm) for n in sizes]
    plot = None
    if args.out:
        from sim.collective_plots import size_sweep

        out = Path(args.out)
        with output_files(out, "birder collective") as staged:  # both or neither, never over a file of the user's
            staged.write_text("collective.csv", _csv(results, list(results[0])))
            size_sweep(results, staged.path("collective.png"))
        plot = str(out / "collective.png")
    if args.json:
        body = results[0] if len(results) == 1 and not sep else {"results": results}
        if plot:
            body = {**body, "plot": plot, "csv": str(Path(args.out) / "collective.csv")}
        print(_strict_json(body))
        return 0
    for line in describe(c):
        _say(line)
    _say(f"{'size (B)':>12} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}  algorithm/protocol")
    for r in results:
        _say(f"{r['bytes']:12d} {r['time_s'] * 1e6:12.2f} {r['algbw_gbytes_per_s']:13.3f} "
              f"{r['busbw_gbytes_per_s']:13.3f}  {r['algorithm']}/{r['protocol']}")
    if plot:
        _say(f"table: {Path(args.out) / 'collective.csv'}; plot: {plot}")
    return 0


def _csv(rows: list[dict], fields: list[str]) -> str:
    return csv_text(rows, fields)  # names from users' files cannot run as spreadsheet formulas


# --------------------------------------------------------------------------------------------------- sweep
SWEEP_FIELDS = ("model", "batch_per_gpu", "network", "optimizer", "nodes", "gpus", "throughput", "throughput_low",
                "throughput_high", "iteration_s", "compute_s", "compression_s", "contention_s",
                "exposed_communication_s", "inter_node_bytes_per_gpu", "intra_node_bytes_per_gpu", "scale_efficiency",
                "extrapolated", "measured_node", "interval_regime", "incast_s")


def sweep_speedups(results: list[dict], baseline: str) -> list[dict]:
    """Per network and node count of a sweep, every other optimizer's throughput over ``baseline``'s with its
    paired interval and verdict (``sim.uncertainty.speedup_interval``)."""
    from sim.uncertainty import speedup_interval

    base = {(r["network"], r["nodes"]): r for r in results if r["optimizer"] == baseline}
    out = []
    for r in results:
        b = base.get((r["network"], r["nodes"]))
        if b is not None and r["optimizer"] != baseline:
            out.append({"network": r["network"], "nodes": r["nodes"], "optimizer": r["optimizer"],
                        "baseline": baseline, **speedup_interval(r, b)})
    return out


def sweep(args, nodes: list[int], networks: list[str], optimizers: list[str], progress: bool = True) -> list[dict]:
    """A grid of predictions from command-line style ``args``, each whole (``predict_on``'s dict: the speed-ups
    need what the table leaves out, such as ``incast_free_throughput``); the library form is
    ``sim.api.sweep_grid``."""
    from sim.api import predict_on

    single = getattr(args, "single_node_throughput", None)
    if isinstance(single, dict):
        missing = [opt for opt in optimizers if opt not in single]
        if missing:
            raise ValueError(f"--single-node-throughput has no value for {', '.join(missing)}")
    clusters = {(net, n): make_cluster(args, n, None if getattr(args, "cluster", None) else net)
                for net in networks for n in nodes}  # every bad value refused before the first prediction
    grid = [(net, opt, n) for net in networks for opt in optimizers for n in nodes]
    out = []
    disable = True if (not progress or _quiet(args)) else None
    for net, opt, n in tqdm(grid, desc="sweep", unit="config", disable=disable, file=sys.stderr):
        c = clusters[net, n]
        r = predict_on(c, optimizer=opt, single_node_throughput=single[opt] if isinstance(single, dict) else single,
                       **_options(args))
        if getattr(args, "cluster", None):
            r["network"] = printable(c.name or net)  # a label in the CSV and the plots
        out.append(r)
    return out


def run_sweep(args) -> int:
    if args.cluster and args.networks:
        raise ValueError("--cluster and --networks conflict: a cluster file names its own network; give one")
    check_outputs(args.out, ("sweep.csv", "throughput_vs_gpus.png", "time_breakdown.png"))
    check_options_apply(args, args.optimizers)
    networks = args.networks or ([Path(args.cluster).stem] if args.cluster else ["10gbe", "ib-hdr"])
    if args.measured_gbps is not None and len(networks) > 1:
        raise ValueError(f"--measured-gbps is one set-up's measured link rate: give it with one network (--networks "
                         f"NAME or --cluster FILE), not {len(networks)} ({', '.join(networks)})")
    predictions = sweep(args, args.nodes, networks, args.optimizers)
    results = [{k: r[k] for k in SWEEP_FIELDS} for r in predictions]
    from sim import plots  # matplotlib only when plotting: keeps `birder predict` fast

    out = Path(args.out)
    with output_files(out, "birder sweep") as staged:  # the table and the plots all or none
        staged.write_text("sweep.csv", _csv(results, list(SWEEP_FIELDS)))
        with staged.writing("throughput_vs_gpus.png"):
            drawn = plots.throughput_vs_gpus(results, staged.dir)
        with staged.writing("time_breakdown.png"):
            drawn += plots.time_breakdown(results, staged.dir)
    figures = [str(out / Path(path).name) for path in drawn]
    speedups = sweep_speedups(predictions, args.optimizers[0])
    if args.json:
        print(_strict_json({"csv": str(out / "sweep.csv"), "plots": figures, "results": results,
                            "speedups": speedups}))
    else:
        swept = None if len(args.nodes) == 1 else f"{', '.join(map(str, args.nodes))} nodes (swept)"
        for net in networks:
            _say(describe(make_cluster(args, args.nodes[0], None if args.cluster else net), swept)[0])
        for r in speedups:
            verdict = r["verdict"] if r["verdict"].startswith("within") else f"{r['verdict']} beyond the uncertainty"
            _say(f"speed-up over {r['baseline']}, {r['network']} {r['nodes']} nodes: {r['optimizer']} "
                 f"{r['ratio']:.2f}x ({r['low']:.2f} to {r['high']:.2f}, {verdict})")
        _say(f"{len(results)} configurations written to {out / 'sweep.csv'}; plots: {', '.join(figures)}")
    return 0


# ------------------------------------------------------------------------------------------------ validate
def run_validate(args) -> int:
    from sim.validation import claims as paper_claims
    from sim.validation import corpus_setup, leave_one_source_out, paper, site_fit
    from sim.validation import order as optimizer_order
    from sim.validation.stored import stored_calibration_extra, stored_step_jitter_fits

    if args.out:
        check_outputs(args.out, ("validation.png", "corpus_left_out.png"))
    table = paper.rows(args.csv)
    claims = paper_claims.claims(args.claims)  # a bad claims file is refused before any prediction
    corpus_size = len(corpus_setup.corpus_rows()[0])
    groups = 0 if args.no_cross_validation else site_fit.cross_validation_groups(args.csv)
    # one bar over every stage, in the units each stage counts (rows, claims, groups), its stage in the description;
    # on a terminal only (stderr: --json keeps stdout to itself), not with --quiet
    with tqdm(total=2 * len(table) + 2 * len(claims) + groups + corpus_size, desc="validate: the paper's rows",
              unit="step", file=sys.stderr, disable=True if _quiet(args) else None) as bar:
        results = paper.compare(table, progress=bar)
        orders = paper.order_agreement(results)
        trend = paper.speedup_trend(results)
        multi = [r for r in results if r.gpus > paper.GPUS_PER_NODE]
        profiles = sorted({r.profile for r in results})
        bar.set_description("validate: order on generic presets")
        generic = optimizer_order.order_check(table, optimizer_order.BASES[1], progress=bar)
        # the fit's own predictions, not predicted again
        site = optimizer_order.OrderCheck.of(optimizer_order.BASES[0], results)
        summary = {"mape": paper.mape(results), "fit_mape": paper.mape(results),
                   "mape_multi_node": paper.mape(multi), "orders_agree": all(o.same for o in orders),
                   "rows": [r.as_dict() for r in results], "orders": [o.as_dict() for o in orders],
                   "speedup_trend": [t.as_dict() for t in trend], "profiles": profiles,
                   "order_check": [site.as_dict(), generic.as_dict()]}
        bar.set_description("validate: the paper's claims")
        claim_checks = [paper_claims.claim_check(table, basis, claims, progress=bar)
                        for basis in optimizer_order.BASES]
        summary["claims_check"] = [c.as_dict() for c in claim_checks]
        cross = None
        if not args.no_cross_validation:
            bar.set_description("validate: group cross-validation")
            cross = site_fit.group_cross_validation(args.csv, progress=bar)
            summary["cross_validated_mape"] = cross.mape
            summary["cross_validation"] = cross.as_dict()
        bar.set_description("validate: the corpus, each source left out")
        loso = leave_one_source_out.corpus_validation(progress=bar, step_jitter_fits=stored_step_jitter_fits(),
                                                      calibration_extra=stored_calibration_extra())
    summary["corpus_validation"] = loso.as_dict()
    summary.update(_headline_figures(summary["corpus_validation"], len({r.source for r in loso.rows})))
    if args.out:
        from sim import plots

        with output_files(args.out, "birder validate") as staged:
            with staged.writing("validation.png"):
                drawn = [plots.validation(summary["rows"], staged.dir,
                                          cross_validated=summary.get("cross_validation", {}).get("rows"),
                                          title="Against the Birder paper: fit (filled) and groups left out (open)")]
            with staged.writing("corpus_left_out.png"):
                drawn.append(plots.corpus_left_out(summary["corpus_validation"]["predictions"], staged.dir))
        summary["plot"] = str(Path(args.out) / drawn[0].name)
        summary["corpus_plot"] = str(Path(args.out) / drawn[1].name)
    if args.json:
        print(_strict_json(summary))
        return 0
    from sim.validation.first_contact import LOG_PATH, headline_lines, latest_rescore, read_log

    left_out = summary["corpus_validation"].get("first_contact_left_out")
    for line in headline_lines(summary["first_contact"], latest_rescore(read_log(LOG_PATH)), left_out):
        _say(line)
    for which in ("left_out", "in_sample"):
        f = summary[which]
        _say(f"corpus, {which.replace('_', '-')} ({f['rows']} rows of {f['sources']} sources the model was designed "
             f"on): error {f['error'] * 100:.1f}% (linear {f['linear'] * 100:.1f}%, alpha-beta "
             f"{f['alpha_beta'] * 100:.1f}%)" + (f", 80% interval covers {f['coverage'] * 100:.1f}%"
                                                 if "coverage" in f else ""))
    _say("")
    _say(f"{'model':9} {'batch':>5} {'network':8} {'profile':19} {'optimizer':13} {'gpus':>4} {'published':>10} "
          f"{'predicted':>10} {'error':>7}")
    for r in results:
        _say(f"{r.model:9} {r.batch_per_gpu:5d} {r.network:8} {r.profile:19} {r.optimizer:13} "
              f"{r.gpus:4d} {r.published:10.0f} {r.predicted:10.0f} {r.error * 100:+6.1f}%")
    _say(f"fit (in-sample) MAPE {summary['mape'] * 100:.1f}% over {len(results)} rows "
          f"({summary['mape_multi_node'] * 100:.1f}% over the multi-node rows; single-node rows are the calibration)"
          f" with the site profiles {', '.join(profiles)}")
    for o in orders:
        _say(_order_line(o))
    for check in (site, generic):
        _say(f"order of optimizers on the {check.basis}: {len(check.orders) - check.orders_wrong} of "
             f"{len(check.orders)} multi-node groups as published; MAPE {paper.mape(check.multi_node) * 100:.1f}% "
             "over the multi-node rows")
    for line in paper_claims.claim_check_lines(claim_checks):
        _say(line)
    _say("generic presets (the rows' network names as hardware presets, nothing fitted), per multi-node row:")
    for r in generic.multi_node:
        _say(f"  {r.model:9} {r.batch_per_gpu:5d} {r.network:8} {r.optimizer:13} {r.gpus:4d} {r.published:10.0f} "
             f"{r.predicted:10.0f} {r.error * 100:+6.1f}%")
    for o in generic.orders:
        _say("  " + _order_line(o))
    lines: dict[tuple, list[paper.Speedup]] = {}
    for t in trend:
        lines.setdefault((t.model, t.batch_per_gpu, t.network, t.optimizer), []).append(t)
    for (model, batch, network, optimizer), ts in lines.items():
        ts = [t for t in ts if t.gpus > paper.GPUS_PER_NODE]
        published = ", ".join(f"{t.published:.2f}" for t in ts)
        predicted = ", ".join(f"{t.predicted:.2f}" for t in ts)
        _say(f"speed-up over sgdm, {model} {batch}/GPU {network:8} {optimizer:13} at "
              f"{', '.join(str(t.gpus) for t in ts)} GPUs: published {published}; predicted {predicted}")
    if cross is not None:
        _say(f"group cross-validation MAPE {cross.mape * 100:.1f}% (refit without each group, predict it):")
        for g in cross.groups:
            unfitted = f"; {', '.join(g.unfitted_sites)} unfitted (generic base preset)" if g.unfitted_sites else ""
            _say(f"  left out {g.left_out}={g.value}: {g.rows} rows, MAPE {g.mape * 100:.1f}%" + unfitted)
        if cross.untestable_columns:
            _say(f"  not testable on these rows (one value each): {', '.join(cross.untestable_columns)}")
    _print_corpus_validation(loso)
    if args.out:
        _say(f"plots: {summary['plot']} (the paper's rows), {summary['corpus_plot']} (the corpus, each source left "
             "out)")
    return 0


def _order_line(o) -> str:
    """One group of ``paper.order_agreement``: the published order of optimizers beside the predicted."""
    return (f"order {o.model} {o.batch_per_gpu}/GPU {o.network:8} {o.gpus:3d} GPUs: published "
            f"{' > '.join(o.published_order)}; predicted {' > '.join(o.predicted_order)} "
            f"({'same' if o.same else 'DIFFERENT'})")


def _speedup_line(name: str, f: dict, level: float) -> str:
    """One line of the speed-up intervals' figures (``CorpusValidation.speedup_figures``)."""
    from sim.validation.figures import percent as _percent

    if not f["pairs"]:
        return f"speed-ups, {name}: no pairs"
    return (f"speed-ups, {name} ({f['pairs']} pairs of rows of one table): {level:.0%} paired intervals cover "
            f"{_percent(f['coverage'])}, median half-width {_percent(f['median_half_width'])} (naive, the two "
            f"intervals divided end by end: {_percent(f['naive_coverage'])}, {_percent(f['naive_median_half_width'])}"
            f"); {_percent(f['decided'])} exclude 1, of those {_percent(f['decided_right'])} on the measured side "
            f"(naive: {_percent(f['naive_decided'])}, {_percent(f['naive_decided_right'])})")


def _headline_figures(s: dict, sources: int) -> dict:
    """``validate --json``'s headline keys: ``first_contact`` (sources the model never saw, scored before any change
    for them: ``sim.validation.first_contact``), then the corpus it was designed on, ``left_out`` (each source left
    out of every fit) and ``in_sample``, each beside linear scaling and the alpha-beta ring on the same rows."""
    from sim.validation.first_contact import first_contact_summary

    common = {"rows": s["rows"], "sources": sources, "linear": s["mape_linear"], "alpha_beta": s["mape_alpha_beta"]}
    return {"first_contact": first_contact_summary(),
            "left_out": {"error": s["mape_left_out"], "coverage": s["coverage"],
                         "median_half_width": s["median_half_width"], **common},
            "in_sample": {"error": s["mape_in_sample"], **common}}


def _print_corpus_validation(loso) -> None:
    from sim.uncertainty import REGIMES
    from sim.validation.figures import percent as _percent
    from sim.validation.leave_one_source_out import EQUAL_BY_CONSTRUCTION

    s = loso.summary()
    print(f"\ncorpus: {s['corpus']}: {s['rows']} multi-node rows predicted, {s['skipped_rows']} skipped; each "
          f"calibrated by its own single-node throughput; {s['rows_framework_as_ddp']} rows of frameworks "
          "sim/presets/frameworks.toml lacks simulated with DDP's buckets and overlap; "
          f"{s['rows_measured_link']} rows whose source states its measured link rate run at that rate (iperf, "
          "perftest) in the simulator and in the alpha-beta baseline alike, the others at the line rate")
    print(EQUAL_BY_CONSTRUCTION)
    table = loso.table()
    wide = max(len("name"), *(len(t["name"]) for t in table))
    print(f"{'group':8} {'name':{wide}} {'rows':>4} {'in-sample':>10} {'left out':>9} {'linear':>8} {'alpha-beta':>10}")
    for t in table:
        print(f"{t['group']:8} {t['name']:{wide}} {t['rows']:4d} {_percent(t['mape_in_sample']):>10} "
              f"{_percent(t['mape_left_out']):>9} {_percent(t['mape_linear']):>8} {_percent(t['mape_alpha_beta']):>10}")
    skill = "-" if s["skill_communication_bound"] is None else f"{s['skill_communication_bound']:.2f}"
    overall = "-" if s["skill"] is None else f"{s['skill']:.2f}"
    print(f"skill (left-out MAPE / linear scaling's): {skill} on communication-bound rows, {overall} overall; "
          f"left-out MAPE {_percent(s['mape_left_out'])} (in-sample {_percent(s['mape_in_sample'])})")
    print(f"{s['interval_level']:.0%} intervals, fitted without the row's source: coverage "
          f"{_percent(s['coverage'])}, median half-width {_percent(s['median_half_width'])}; by the regime an "
          "alpha-beta ring predicts (what the intervals are keyed on): "
          + "; ".join(f"{reg} {_percent(s['coverage_by_regime'][reg])} covered, half-width "
                      f"{_percent(s['median_half_width_by_regime'][reg])}" for reg in REGIMES)
          + "; by measured regime: " + ", ".join(f"{reg} {_percent(s['coverage_by_measured_regime'][reg])} covered"
                                                 for reg in REGIMES))
    levels, covers = s["conformal_levels"], s["conformal_level_coverage"]
    print("conformal levels, each interval regime calibrated apart on its own rows (Mondrian), with the share of them "
          "covered, each source judged by all the others (the coverage above is the nested one: each source's level "
          "calibrated without it): " + "; ".join(f"{key.replace('_', ' ')} " + ", ".join(
              f"{reg} {_percent(levels[key][reg])} (covers {_percent(covers[key][reg])})" for reg in REGIMES)
                      for key in levels))
    if s["conformal_levels_short"]:
        print("short of the promised coverage even at the top conformal level: "
              + ", ".join(s["conformal_levels_short"]))
    for name, figures in [("all", s["speedup"]), *s["speedup_by_regime"].items(), *s["speedup_by_source"].items(),
                          ("without a measured node", s["speedup_unmeasured_node"])]:
        print(_speedup_line(name, figures, s["interval_level"]))
    for key, methods in s["speedup_methods"].items():
        f = s["speedup_nested"][key]
        print(f"speed-up method, {key.replace('_', ' ')}: predictions use "
              + ", ".join(f"{reg} {m}" for reg, m in methods.items())
              + " (chosen on all sources' left-out pairs, so the chosen one's coverage above is post-selection); "
              f"chosen for each source on the other sources' pairs alone: {f['pairs']} pairs, coverage "
              f"{_percent(f['coverage'])}, median half-width {_percent(f['median_half_width'])}, paired for "
              f"{_percent(f['paired_share'])} of them")
    u = s["unmeasured_node"]
    print(f"without a measured node (built-in GPU profiles), {u['rows']} rows, each source left out: coverage "
          f"{_percent(u['coverage'])}, median half-width {_percent(u['median_half_width'])}; "
          + "; ".join(f"{reg} {_percent(f['coverage'])} covered, half-width {_percent(f['median_half_width'])}"
                      for reg, f in u["by_regime"].items()))
    if u["rows_excluded"]:
        print(f"  left out of those figures, as their source set their GPU's compute figure (gpus.toml "
              f"*_calibrated_on): {u['rows_excluded']} rows ("
              + ", ".join(f"{src} {n}" for src, n in sorted(u["excluded_by_source"].items())) + ")")
    for skipped in loso.skipped:
        print(f"skipped: {skipped.source} {skipped.table} {skipped.model} on {skipped.nodes} nodes: {skipped.reason}")


# ----------------------------------------------------------------------------------------------- calibrate
def run_calibrate(args: argparse.Namespace) -> int:
    from sim import calibrate

    # before any work: never over an input, a device, a folder or the toolkit's own files, nor over a file birder
    # did not write (a cluster file of the user's)
    check_owned(check_output_file(args.out, inputs=tuple(args.outputs)))
    ops = args.op or [None]
    if len(ops) not in (1, len(args.outputs)):
        raise ValueError(f"--op given {len(ops)} times for {len(args.outputs)} files: once for all, or once per file")
    outputs = [calibrate.read_output(path, ops[i % len(ops)]) for i, path in enumerate(args.outputs)]
    nodes, per_node = calibrate.layout(outputs, args.nodes, args.gpus_per_node)
    if nodes < 2:
        raise ValueError(f"the output was measured on one node ({per_node} GPUs): it never crosses the network, so it "
                         "cannot fit one; run nccl-tests across two or more nodes (birder doctor judges a single node)")
    calibrate.check_gpu(outputs, args.gpu)
    shown = {o.gpu for o in outputs if o.gpu}
    if len(shown) > 1:
        raise ValueError(f"the outputs were measured on different GPUs ({', '.join(sorted(shown))}): they are two "
                         "clusters; calibrate one at a time")
    gpu = args.gpu or (shown.pop() if len(shown) == 1 else "a100")
    base, base_name = calibrate.base_cluster(nodes, per_node, gpu, args.network, args.transport,
                                             args.line_rate_gbps, args.nics_per_node or 1)
    rows = tuple(m for o in outputs for m in o.rows)
    fit = calibrate.fit_network(base, rows)
    fit = replace(fit, warnings=fit.warnings + tuple(f"{p}: {w}" for p, o in zip(args.outputs, outputs, strict=True)
                                                     for w in o.warnings))
    sources = [(str(p), calibrate.file_digest(p)) for p in args.outputs]
    name = args.name or Path(args.out).stem
    layout_from = calibrate.layout_sources(outputs, args.gpu is not None, gpu)
    write_output_file(args.out, calibrate.cluster_toml(fit, base_name, name, sources, len(rows), layout_from),
                      "birder calibrate", toml_data=calibrate.cluster_data(fit, base_name, name, sources))
    errors = fit.row_errors(rows)
    body = {"cluster_file": str(args.out), "nodes": nodes, "gpus_per_node": per_node, "gpu": gpu, "base": base_name,
            "constants": fit.constants, "fitted": list(fit.fitted), "rms_log_error": fit.rms_log_error,
            "max_relative_error": fit.max_relative_error, "warnings": list(fit.warnings),
            "unidentified": dict(fit.unidentified), "layout_from": layout_from,
            "band_errors": [{"band": band, "rows": n, "rms_log_error": rms, "max_relative_error": worst}
                            for band, n, rms, worst in fit.band_errors],
            "rows": [{"op": m.op, "bytes": m.nbytes, "measured_time_s": m.time_s,
                      "simulated_time_s": m.time_s * (1 + e), "relative_error": e} for m, e in zip(rows, errors,
                                                                                                   strict=True)]}
    if args.json:
        print(_strict_json(body))
        return 0
    _say(f"{len(rows)} rows from {', '.join(map(str, args.outputs))}: {nodes} nodes x {per_node} GPUs ({gpu}), "
         f"base {base_name}")
    _say("  " + "; ".join(f"{key} {value}" for key, value in layout_from.items()))
    _say(f"{'op':11} {'size (B)':>12} {'measured (us)':>14} {'simulated (us)':>15} {'error':>7}")
    for r in body["rows"]:
        _say(f"{r['op']:11} {r['bytes']:12d} {r['measured_time_s'] * 1e6:14.1f} {r['simulated_time_s'] * 1e6:15.1f} "
             f"{r['relative_error'] * 100:+6.1f}%")
    unpinned = dict(fit.unidentified)
    for key, value in fit.constants.items():
        limit = f" ({calibrate.efficiency_limit(fit.cluster)})" if key == "efficiency" else ""
        _say(f"  {key:17} {value:12.4g}  " + (f"FITTED{limit}" if key in fit.identified else
                                                f"NOT IDENTIFIED: {unpinned[key]}" if key in unpinned else
                                                "not constrained by the table: the base's value"))
    for band, n, rms, worst in fit.band_errors:
        _say(f"  {band:17} {n:3d} rows: rms log error {rms:.3f}, largest {worst * 100:.1f}%")
    for warning in fit.warnings:
        _say(f"warning: {warning}")
    _say(f"rms log error {fit.rms_log_error:.3f}, largest {fit.max_relative_error * 100:.1f}%; wrote {args.out} "
         f"(birder predict --cluster {args.out})")
    return 0


# ----------------------------------------------------------------------------------------------- doctor
def run_doctor(args: argparse.Namespace) -> int:
    from sim import calibrate, doctor

    text = read_text_bounded(Path(args.log), calibrate.MAX_OUTPUT_BYTES, "nccl-tests output")
    output = calibrate.parse_nccl_tests(text, str(args.log), args.op)
    nodes, per_node = calibrate.layout([output], args.nodes, args.gpus_per_node)  # the Rank lines', else ours
    if nodes > 1 and not (args.network or args.cluster):
        raise ValueError(f"the output spans {nodes} nodes: name the network it ran on (--network PRESET, e.g. ib-hdr "
                         "or 100gbe, or --cluster FILE.toml) so that doctor knows what the hardware gives")
    calibrate.check_gpu([output], args.gpu)
    gpu = args.gpu or output.gpu
    if gpu is None and not args.cluster:
        shown = ", ".join(output.device_names) or "none printed"
        raise ValueError(f"the log's GPU ({shown}) is not one the model knows: give --gpu "
                         f"({', '.join(GPUS)}) and, for a PCIe card, --intra (e.g. a100-pcie)")
    intra = args.intra
    if intra is None and gpu and any("PCIE" in name.upper() for name in output.device_names):
        intra = f"{gpu}-pcie" if f"{gpu}-pcie" in INTRA else None  # the device name says PCIe
    stated = make_cluster(argparse.Namespace(**{**vars(args), "gpus_per_node": per_node, "gpu": gpu,
                                                "intra": intra}), nodes)
    found = doctor.diagnose(output, stated, doctor.read_evidence(text))
    body = {"log": str(args.log), "op": found.op, "nodes": stated.n_nodes, "gpus_per_node": stated.gpus_per_node,
            "gpu": stated.gpu, "network": stated.nic.name, "nics_per_node": stated.nic.count,
            "intra": stated.intra.name, "rows": list(found.rows), "plateau_share": found.plateau_share,
            "plateau_reached": found.plateau_reached, "verdict": found.verdict,
            "likely_causes": list(found.likely_causes), "hypotheses": list(found.hypotheses),
            "evidence": {"transports": sorted(found.evidence.transports), "ib_devices": found.evidence.ib_devices,
                         "channels": found.evidence.channels, "shm": found.evidence.shm, "gdr": found.evidence.gdr,
                         "env": found.evidence.env, "nccl_version": found.evidence.nccl_version}}
    if args.json:
        print(_strict_json(body))
        return 0
    _say(found.verdict)
    _say(f"{'size (B)':>14} {'busbw (GB/s)':>13} {'model (GB/s)':>13} {'share':>6}")
    for r in found.rows:
        _say(f"{r['size']:14,d} {r['busbw_gbytes_per_s']:13.3g} {r['expected_busbw_gbytes_per_s']:13.3g} "
             f"{r['share']:6.0%}")
    for i, cause in enumerate(found.likely_causes, 1):
        _say(f"{i}. {cause}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("predict", help="time one training configuration on a simulated cluster")
    _workload_args(p)
    _cluster_args(p)
    p.add_argument("--nodes", type=positive_int, default=None,
                   help=f"number of nodes (default 1, or the TOML's); at most {MAX_GPUS:,} GPUs in all")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgdm", help="optimizer (default sgdm)")
    p.add_argument("--single-node-throughput", type=_positive_float, default=None,
                   help="samples/s the same optimizer and batch reached on one node: calibrates compute time")
    p.add_argument("--single-node-accumulation-steps", type=positive_int, default=None, metavar="K",
                   help="micro-batches per optimizer step of that one-node run, where they differ from "
                        "--accumulation-steps (a fixed global batch spread over more nodes): its once-per-step "
                        "costs are shared by K micro-batches (default: --accumulation-steps)")
    p.add_argument("--trace", default=None, type=non_empty_path, metavar="FILE.json",
                   help="write the predicted step as a Chrome/Perfetto trace (open it at ui.perfetto.dev)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_flags(run_predict))

    from sim.collective import ALGORITHMS, OPS

    c = subparsers.add_parser("collective", help="time one collective on a simulated cluster, in nccl-tests' terms")
    c.add_argument("--op", choices=OPS, required=True, help="the collective")
    c.add_argument("--bytes", required=True, metavar="N|MIN:MAX",
                   help="nccl-tests' size (8, 64K, 8M, 1G); MIN:MAX sweeps doubling sizes")
    c.add_argument("--nodes", type=positive_int, default=None,
                   help=f"number of nodes (default 1, or the TOML's); at most {MAX_GPUS:,} GPUs in all")
    _cluster_args(c)
    c.add_argument("--algorithm", choices=ALGORITHMS, default="auto", help="ring, tree or NCCL's choice (auto)")
    c.add_argument("--out", default=None, type=non_empty_path,
                   help="directory for the size sweep's table (CSV) and plot (PNG)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_flags(run_collective))

    s = subparsers.add_parser("sweep", help="a grid of predictions (nodes x networks x optimizers) to CSV and plots")
    _workload_args(s, sweep=True)
    _cluster_args(s, sweep=True)
    s.add_argument("--nodes", type=_int_list, default=[1, 2, 4, 8, 16, 32, 64],
                   help="comma-separated node counts (each once)")
    s.add_argument("--networks", type=_name_list(list(NETWORKS)), default=None,
                   help="comma-separated networks: presets or site profiles (default 10gbe,ib-hdr); "
                        "conflicts with --cluster")
    s.add_argument("--optimizers", type=_name_list(OPTIMIZERS), default=["sgdm", "onebit-adam", "birder"],
                   help="comma-separated optimizers (default sgdm,onebit-adam,birder)")
    s.add_argument("--single-node-throughput", type=_throughputs, default=None, metavar="X|OPT=X,...",
                   help="samples/s measured on one node, for every optimizer (X) or per optimizer "
                        "(sgdm=3693,birder=3462): calibrates compute time (default: built-in compute profiles)")
    s.add_argument("--out", default="sweep", type=non_empty_path,
                   help="directory for sweep.csv and the plots (default sweep/)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=_flags(run_sweep))

    v = subparsers.add_parser("validate", help="predictions against the published throughputs, with errors")
    v.add_argument("--csv", default=None, type=non_empty_path,
                   help="measurements file (default: the paper's rows, sim/presets/birder_public.csv)")
    v.add_argument("--out", default=None, type=non_empty_path, help="directory for the predicted-vs-published plot")
    v.add_argument("--no-cross-validation", action="store_true",
                   help="skip the group cross-validation (it refits the site profiles once per group left out)")
    v.add_argument("--claims", default=None, type=non_empty_path,
                   help="claims file checked against the predictions (default: the Birder paper's stated claims, "
                        "sim/validation/birder_paper_claims.toml)")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.add_argument("--quiet", action="store_true", help="no progress bar")
    v.set_defaults(func=run_validate)

    k = subparsers.add_parser("calibrate", help="fit a cluster's network to your nccl-tests output; write a cluster "
                                                "TOML for predict --cluster")
    k.add_argument("outputs", nargs="+", type=non_empty_path, metavar="FILE",
                   help="nccl-tests output as printed (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
                        "alltoall_perf tables)")
    k.add_argument("--out", required=True, type=non_empty_path, help="the cluster TOML to write")
    k.add_argument("--op", choices=("all-reduce", "all-gather", "reduce-scatter", "all-to-all"), default=None,
                   action="append",
                   help="the collective, where the output does not name its binary: once for all files, or once per "
                        "file in order")
    k.add_argument("--nodes", type=positive_int, default=None, help="nodes measured (default: the Rank lines')")
    k.add_argument("--gpus-per-node", type=positive_int, default=None,
                   help="ranks per node (default: the Rank lines')")
    k.add_argument("--gpu", choices=list(GPUS), default=None,
                   help="GPU (default: the Rank lines' device name, else a100)")
    k.add_argument("--network", choices=list(GENERIC_NETWORKS), default=None,
                   help="the generic preset whose hardware data the fit starts from")
    k.add_argument("--transport", choices=("socket", "ib"), default=None,
                   help="or the transport (socket: NCCL over TCP; ib: verbs, InfiniBand or RoCE) ...")
    k.add_argument("--line-rate-gbps", type=positive_number("Gb/s"), default=None,
                   help="... and one NIC's line rate, Gb/s")
    k.add_argument("--nics-per-node", type=positive_int, default=None, help="NICs per node NCCL used (default 1)")
    k.add_argument("--name", default=None, type=_cluster_name,
                   help="the cluster's name (default: the TOML's file name)")
    k.add_argument("--json", action="store_true", help="print one JSON object")
    k.set_defaults(func=_flags(run_calibrate))

    d = subparsers.add_parser("doctor", help="a verdict on your nccl-tests output: the share of the stated hardware's "
                                             "bandwidth reached, and why")
    d.add_argument("log", type=non_empty_path, metavar="LOG",
                   help="nccl-tests output as printed (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
                        "alltoall_perf), NCCL INFO lines and the command line included if you have them")
    d.add_argument("--op", choices=("all-reduce", "all-gather", "reduce-scatter", "all-to-all"), default=None,
                   help="the collective, where the output does not name its binary")
    d.add_argument("--nodes", type=positive_int, default=None, help="nodes measured (default: the Rank lines')")
    _cluster_args(d)
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=_flags(run_doctor))
