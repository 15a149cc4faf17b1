"""`birder predict`, `birder sweep`, `birder validate`: the simulator on the command line."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from birder_ref.schedules import SCHEMES
from sim.network import INTRA, NETWORKS, Cluster, cluster, intra_preset, load_cluster
from sim.workload import GPUS, OPTIMIZERS, predict


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _int_list(text: str) -> list[int]:
    values = [_positive_int(part) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def _throughputs(text: str) -> float | dict[str, float]:
    """``X`` (the same single-node throughput for every optimizer) or ``OPT=X,OPT=X`` (one per optimizer)."""
    if "=" not in text:
        return _positive_float(text)
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name not in OPTIMIZERS:
            raise argparse.ArgumentTypeError(f"unknown optimizer {name!r} in {text!r}; choose from "
                                             f"{', '.join(OPTIMIZERS)}")
        out[name] = _positive_float(value)
    return out


def _name_list(choices):
    def parse(text: str) -> list[str]:
        names = [part for part in text.split(",") if part]
        for name in names:
            if name not in choices:
                raise argparse.ArgumentTypeError(f"unknown name {name!r}; choose from {', '.join(choices)}")
        return names

    return parse


def _cluster_args(p: argparse.ArgumentParser) -> None:
    net = p.add_mutually_exclusive_group()
    net.add_argument("--network", choices=list(NETWORKS), help="inter-node network preset (default 10gbe)")
    net.add_argument("--cluster", metavar="FILE.toml",
                     help="a cluster described in TOML (sim/presets/example_cluster.toml)")
    p.add_argument("--gpus-per-node", type=_positive_int, default=None, help="GPUs per node (default 8)")
    p.add_argument("--gpu", choices=list(GPUS), default=None,
                   help="GPU for built-in compute profiles (default a100, or the TOML's)")
    p.add_argument("--intra", choices=list(INTRA), help="intra-node fabric preset (default: the GPU's NVLink)")
    p.add_argument("--oversubscription", type=float, default=None,
                   help="switch oversubscription factor (default 1, or the TOML's)")


def _workload_args(p: argparse.ArgumentParser) -> None:
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", help="resnet50, bert-base, bert-large, gpt2 or vit-b16 (default resnet50)")
    model.add_argument("--params", type=_positive_int, help="a synthetic model of N parameters")
    p.add_argument("--batch-per-gpu", type=_positive_int, default=32, help="samples per GPU per step (default 32)")
    p.add_argument("--scheme", choices=SCHEMES, default="hierarchical", help="Birder's scheme (default hierarchical)")
    p.add_argument("--warmup-fraction", type=float, default=None,
                   help="1-bit Adam's uncompressed share of steps (default 0.2 for BERT, 0.15 otherwise)")
    p.add_argument("--marsit-period", type=_positive_int, default=None, metavar="K",
                   help="Marsit's full-precision round every K steps (default: none after the first)")


def _make_cluster(args, nodes: int, network: str | None = None) -> Cluster:
    """The cluster of the command line; with ``--cluster``, the options given on the command line win over the file."""
    if args.oversubscription is not None and not args.oversubscription >= 1:
        raise ValueError(f"--oversubscription must be >= 1, got {args.oversubscription}")
    if getattr(args, "cluster", None):
        c = load_cluster(args.cluster, nodes, args.gpus_per_node, args.gpu, args.oversubscription)
        if args.intra:
            c = replace(c, intra=intra_preset(args.intra))
        return c
    return cluster(network or args.network or "10gbe", nodes or 1, args.gpus_per_node or 8, args.intra,
                   args.gpu or "a100", 1.0 if args.oversubscription is None else args.oversubscription)


def _model(args) -> dict:
    if args.params is not None:
        return {"params": args.params}
    return {"model": args.model or "resnet50"}


# ------------------------------------------------------------------------------------------------- predict
def run_predict(args) -> int:
    c = _make_cluster(args, args.nodes)
    result = predict(c, batch_per_gpu=args.batch_per_gpu, optimizer=args.optimizer, scheme=args.scheme,
                     single_node_throughput=args.single_node_throughput, warmup_fraction=args.warmup_fraction,
                     marsit_period=args.marsit_period, **_model(args)).as_dict()
    result.update({"nodes": c.n_nodes, "gpus": c.n_gpus, "network": c.nic.name, "optimizer": args.optimizer})
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{c.n_gpus} GPUs ({c.n_nodes} x {c.gpus_per_node}) on {c.nic.name}, {args.optimizer}"
          + (f" ({args.scheme})" if args.optimizer == "birder" else ""))
    print(f"  throughput              {result['throughput']:12.1f} samples/s")
    print(f"  iteration               {result['iteration_s'] * 1e3:12.2f} ms")
    print(f"    compute               {result['compute_s'] * 1e3:12.2f} ms")
    print(f"    compression           {result['compression_s'] * 1e3:12.2f} ms")
    print(f"    exposed communication {result['exposed_communication_s'] * 1e3:12.2f} ms")
    print(f"  bytes per GPU per step  {result['intra_node_bytes_per_gpu'] / 1e6:12.2f} MB intra, "
          f"{result['inter_node_bytes_per_gpu'] / 1e6:.2f} MB inter")
    print(f"  scale efficiency        {result['scale_efficiency'] * 100:12.1f} %")
    return 0


# --------------------------------------------------------------------------------------------------- sweep
SWEEP_FIELDS = ("model", "batch_per_gpu", "network", "optimizer", "nodes", "gpus", "throughput", "iteration_s",
                "compute_s", "compression_s", "exposed_communication_s", "inter_node_bytes_per_gpu",
                "intra_node_bytes_per_gpu", "scale_efficiency")


def sweep(args, nodes: list[int], networks: list[str], optimizers: list[str], progress: bool = True) -> list[dict]:
    single = getattr(args, "single_node_throughput", None)
    if isinstance(single, dict):
        missing = [opt for opt in optimizers if opt not in single]
        if missing:
            raise ValueError(f"--single-node-throughput has no value for {', '.join(missing)}")
    grid = [(net, opt, n) for net in networks for opt in optimizers for n in nodes]
    out = []
    for net, opt, n in tqdm(grid, desc="sweep", unit="config", disable=not progress, file=sys.stderr):
        c = _make_cluster(args, n, net)
        r = predict(c, batch_per_gpu=args.batch_per_gpu, optimizer=opt, scheme=args.scheme,
                    single_node_throughput=single[opt] if isinstance(single, dict) else single,
                    warmup_fraction=args.warmup_fraction, marsit_period=args.marsit_period,
                    **_model(args)).as_dict()
        r.update({"model": args.model or f"params-{args.params}" if args.params else args.model or "resnet50",
                  "batch_per_gpu": args.batch_per_gpu, "network": c.nic.name, "optimizer": opt, "nodes": n,
                  "gpus": c.n_gpus})
        out.append({k: r[k] for k in SWEEP_FIELDS})
    return out


def run_sweep(args) -> int:
    networks = args.networks or ([Path(args.cluster).stem] if args.cluster else ["10gbe", "ib-hdr"])
    results = sweep(args, args.nodes, networks, args.optimizers)
    from sim import plots  # matplotlib only when plotting: keeps `birder predict` fast
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "sweep.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SWEEP_FIELDS)
        writer.writeheader()
        writer.writerows(results)
    figures = [str(p) for p in plots.throughput_vs_gpus(results, out) + plots.time_breakdown(results, out)]
    if args.json:
        print(json.dumps({"csv": str(out / "sweep.csv"), "plots": figures, "results": results}))
    else:
        print(f"{len(results)} configurations written to {out / 'sweep.csv'}; plots: {', '.join(figures)}")
    return 0


# ------------------------------------------------------------------------------------------------ validate
def run_validate(args) -> int:
    from sim import validate

    table = validate.rows(args.csv)
    with tqdm(total=len(table), desc="validate", unit="row", file=sys.stderr, disable=args.json) as bar:
        results = validate.compare(table, progress=bar)
    orders = validate.order_agreement(results)
    trend = validate.speedup_trend(results)
    summary = {"mape": validate.mape(results),
               "mape_multi_node": validate.mape([r for r in results if r["gpus"] > validate.GPUS_PER_NODE]),
               "orders_agree": all(o["same"] for o in orders), "rows": results, "orders": orders,
               "speedup_trend": trend}
    sizes = sorted({r.gpus for r in table if r.gpus > validate.GPUS_PER_NODE})
    if len(sizes) >= 2 and not args.no_cross_validation:  # refit on all but the largest GPU count, predict that
        cross = validate.cross_validation(args.csv, tuple(sizes[:-1]))
        if cross is not None:
            summary["cross_validation"] = cross
    if args.out:
        from sim import plots

        summary["plot"] = str(plots.validation(results, Path(args.out)))
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{'model':9} {'batch':>5} {'network':8} {'optimizer':13} {'gpus':>4} {'published':>10} "
          f"{'predicted':>10} {'error':>7}")
    for r in results:
        print(f"{r['model']:9} {r['batch_per_gpu']:5d} {r['network']:8} {r['optimizer']:13} {r['gpus']:4d} "
              f"{r['published']:10.0f} {r['predicted']:10.0f} {r['error'] * 100:+6.1f}%")
    print(f"MAPE {summary['mape'] * 100:.1f}% over {len(results)} rows "
          f"({summary['mape_multi_node'] * 100:.1f}% over the multi-node rows; single-node rows are the calibration)")
    for o in orders:
        mark = "same" if o["same"] else "DIFFERENT"
        print(f"order {o['network']:8} {o['gpus']:3d} GPUs: published {' > '.join(o['published_order'])}; "
              f"predicted {' > '.join(o['predicted_order'])} ({mark})")
    lines: dict[tuple, list[dict]] = {}
    for t in trend:
        lines.setdefault((t["model"], t["batch_per_gpu"], t["network"], t["optimizer"]), []).append(t)
    for (model, batch, network, optimizer), ts in lines.items():
        ts = [t for t in ts if t["gpus"] > validate.GPUS_PER_NODE]
        published = ", ".join(f"{t['published']:.2f}" for t in ts)
        predicted = ", ".join(f"{t['predicted']:.2f}" for t in ts)
        print(f"speed-up over sgdm, {model} {batch}/GPU {network:8} {optimizer:13} at "
              f"{', '.join(str(t['gpus']) for t in ts)} GPUs: published {published}; predicted {predicted}")
    if "cross_validation" in summary:
        cv = summary["cross_validation"]
        print(f"cross-validation: constants refitted on the {', '.join(map(str, cv['train_gpus']))}-GPU rows only, "
              f"MAPE {cv['mape'] * 100:.1f}% on the {', '.join(map(str, cv['test_gpus']))}-GPU rows ("
              + ", ".join(f"{r['network']} {r['optimizer']} {r['error'] * 100:+.0f}%" for r in cv["rows"]) + ")")
    if args.out:
        print(f"plot: {summary['plot']}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("predict", help="time one training configuration on a simulated cluster")
    _workload_args(p)
    _cluster_args(p)
    p.add_argument("--nodes", type=_positive_int, default=None, help="number of nodes (default 1, or the TOML's)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgdm", help="optimizer (default sgdm)")
    p.add_argument("--single-node-throughput", type=_positive_float, default=None,
                   help="samples/s the same optimizer and batch reached on one node: calibrates compute time")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_predict)

    s = subparsers.add_parser("sweep", help="a grid of predictions (nodes x networks x optimizers) to CSV and plots")
    _workload_args(s)
    _cluster_args(s)
    s.add_argument("--nodes", type=_int_list, default=[1, 2, 4, 8, 16, 32, 64], help="comma-separated node counts")
    s.add_argument("--networks", type=_name_list(list(NETWORKS)), default=None,
                   help="comma-separated network presets (default 10gbe,ib-hdr)")
    s.add_argument("--optimizers", type=_name_list(OPTIMIZERS), default=["sgdm", "onebit-adam", "birder"],
                   help="comma-separated optimizers (default sgdm,onebit-adam,birder)")
    s.add_argument("--single-node-throughput", type=_throughputs, default=None, metavar="X|OPT=X,...",
                   help="samples/s measured on one node, for every optimizer (X) or per optimizer "
                        "(sgdm=3693,birder=3462): calibrates compute time (default: built-in compute profiles)")
    s.add_argument("--out", default="sweep", help="directory for sweep.csv and the plots (default sweep/)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_sweep)

    v = subparsers.add_parser("validate", help="predictions against the published throughputs, with errors")
    v.add_argument("--csv", default=None,
                   help="measurements file (default: ../shared/validation/, else sim/presets/birder_public.csv)")
    v.add_argument("--out", default=None, help="directory for the predicted-vs-published plot")
    v.add_argument("--no-cross-validation", action="store_true",
                   help="skip the refit on all but the largest GPU count (it takes seconds per transport)")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.set_defaults(func=run_validate)
