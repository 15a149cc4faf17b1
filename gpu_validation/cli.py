"""`birder gpu-validate` and `birder bench`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from safeio.argtypes import non_empty_path, number_between, positive_int
from safeio.outputs import check_output_file, check_owned
from safeio.text import printable_lines

PATHS = ("optimizer", "hook")  # gpu_validation.validate.PATHS (importing it here would need torch)

TORCH_MISSING = 'needs torch, which is not installed: pip install -e ".[torch]"'


def _torch_or_exit(command: str) -> bool:
    """True if torch imports; else one line on stderr (the caller exits 2)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"birder {command}: error: {TORCH_MISSING}", file=sys.stderr)
        return False
    return True


def _step_rank(text: str) -> tuple[int, int]:
    try:
        step, rank = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected STEP:RANK (two integers), got {text!r}") from None
    return step, rank


# A stuck collective's limit: below 1 s a healthy collective on a loaded machine already fails (a false FAILED);
# past a day, no run waits that long (and torch's millisecond C int overflows at 24.8 days).
_collective_timeout = number_between(1.0, 86400.0, "seconds", "1 s to one day")


MAX_STEPS = 10_000  # gpu-validate compares every step element by element: a bound of the tool, far past a validation
MAX_REPEATS = 1_000  # bench keeps the median: 1,000 repetitions settle it; more only take longer


def _bounded_count(limit: int, what: str):
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"
            raise argparse.ArgumentTypeError(f"at most {limit:,} {what}, got {shown}")
        return value

    return parse


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32), got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32), got {text[:24]!r}")
    return value


def _profile_path(text: str) -> str:
    """--out is checked before the benchmark runs: a failure after minutes of timing would lose them."""
    non_empty_path(text)
    try:  # the profile and its plot beside it (same name, .png)
        for path in (text, Path(text).with_suffix(".png")):
            check_owned(check_output_file(path, flag=""), flag="")  # never over a file birder did not write
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).strip()) from None
    return text


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def run_gpu_validate(args: argparse.Namespace) -> int:
    if not _torch_or_exit("gpu-validate"):
        return 2
    from gpu_validation.validate import Config, run, run_under_torchrun

    cfg = Config(backend=args.backend, nodes=args.nodes, gpus_per_node=args.gpus_per_node, steps=args.steps,
                 seed=args.seed, scheme=args.scheme, timeout_s=args.timeout, resume_at=args.resume_at,
                 nonfinite_at=args.nonfinite_at, overflow_at=args.overflow_at, kill_at=args.kill_at,
                 hang_at=args.hang_at, paths=tuple(args.paths), quiet=getattr(args, "quiet", False),
                 device=args.device)
    if _under_torchrun():
        try:
            result = run_under_torchrun(cfg)
        except ValueError:
            if os.environ.get("RANK", "0") != "0":  # every rank finds the same mistake: rank 0 alone says it
                return 2
            raise
        if result is None:  # not rank 0: rank 0 speaks for the job
            return 0
    else:
        result = run(cfg)
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(printable_lines(describe(result)))
    return 0 if result.passed else 1


_PATH_NAMES = {"optimizer": "gpu_validation.Birder (the optimizer, its own hook)",
               "hook": "birder_hook + BirderUpdate (the expert hook)"}


def describe(result) -> str:
    """One human-readable paragraph of a gpu-validate result (``gpu_validation.validate.Comparison`` or
    ``Stopped``)."""
    c = result.config or {}
    where = (f"{c.get('nodes')} node(s) x {c.get('gpus_per_node')} GPU(s), {result.backend} on {result.device}, "
             f"scheme {c.get('scheme')}")
    from gpu_validation.validate import Stopped

    if isinstance(result, Stopped) and result.fault_handled:
        return (f"gpu-validate PASSED ({where}): the injected fault was handled as designed: {result.fault}; "
                f"{result.error}; the others stopped in {result.seconds_to_stop_after_failure} s")
    if isinstance(result, Stopped):
        return f"gpu-validate FAILED ({where}): {result.error}"
    lines = [
        f"gpu-validate {'PASSED' if result.passed else 'FAILED'}: {where}, {result.steps} steps, "
        f"{result.parameters} parameters" + ("" if result.buckets is None else f" in {result.buckets} buckets"),
        f"  checked: {', '.join(_PATH_NAMES[p] for p in result.checked)}"
        + ("" if result.reference_updates_agree
           else "; the paths fed birder_ref DIFFERENT gradients (its updates differ between paths)"),
        f"  mismatched elements vs birder_ref (updates, parameters, state): {result.mismatched_elements}",
        f"  max |difference|: {result.max_abs_diff}; ranks identical: {result.ranks_identical}",
        f"  skipped (non-finite) steps: {result.skipped_steps}"
        + ("" if result.resume_identical is None else f"; resume identical: {result.resume_identical}"),
        f"  {result.seconds} s",
    ]
    return "\n".join(lines)


def run_bench(args: argparse.Namespace) -> int:
    if not _torch_or_exit("bench"):
        return 2
    from gpu_validation.bench import BenchConfig
    from gpu_validation.validate import LOCAL_RANKS_PER_CORE

    if args.backend == "gloo" and args.ranks > LOCAL_RANKS_PER_CORE * (os.cpu_count() or 1):
        raise ValueError(f"--ranks {args.ranks} local gloo ranks on {os.cpu_count()} cores is too many (at most "
                         f"{LOCAL_RANKS_PER_CORE} per core)")
    from gpu_validation.bench import describe as describe_bench
    from gpu_validation.bench import run as run_benchmarks

    result = run_benchmarks(BenchConfig(backend=args.backend, ranks=args.ranks, sizes=tuple(args.sizes),
                                        repeats=args.repeats, out=args.out, device=args.device,
                                        gpus_per_node=args.gpus_per_node, quiet=getattr(args, "quiet", False)))
    print(json.dumps(result) if args.json else printable_lines(describe_bench(result)))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gpu-validate", help="gpu_validation.Birder and the expert DDP hook, bit for bit against birder_ref",
        description="Train a small model on N x G local ranks (or under torchrun) with gpu_validation.Birder as "
                    "users adopt it, then with the expert DDP hook, and compare every rank's update, parameters and "
                    "final state with birder_ref, exactly.")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                   help="gloo: CPU tensors (default); nccl: one CUDA GPU per rank")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda with nccl, else cpu; gloo with cuda moves CUDA tensors (local ranks may share "
                        "one GPU, which nccl refuses)")
    p.add_argument("--nodes", type=int, default=2, help="nodes (simulated by process groups when local; default 2)")
    p.add_argument("--gpus-per-node", type=int, default=2, help="ranks per node (default 2)")
    p.add_argument("--steps", type=_bounded_count(MAX_STEPS, "steps"), default=6,
                   help="training steps, each compared (default 6)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the model, the data and the draws (default 0)")
    p.add_argument("--scheme", choices=("hierarchical", "flat"), default="hierarchical",
                   help="Section 4's hierarchical 1-bit all-reduce (default), or flat (every GPU a worker)")
    p.add_argument("--timeout", type=_collective_timeout, default=60.0,
                   help="seconds before a stuck collective fails, 1 to 86400 (default 60)")
    p.add_argument("--resume-at", type=int, default=None, metavar="STEP",
                   help="also checkpoint at STEP, resume in a fresh DDP and require a bit-identical end")
    p.add_argument("--nonfinite-at", type=_step_rank, default=None, metavar="STEP:RANK",
                   help="inject a NaN into RANK's gradient at STEP (every rank must skip that step)")
    p.add_argument("--overflow-at", type=_step_rank, default=None, metavar="STEP:NODE",
                   help="give every GPU of NODE finite gradients at STEP whose node sum overflows (all must skip)")
    p.add_argument("--kill-at", type=_step_rank, default=None, metavar="STEP:RANK",
                   help="make RANK die at STEP (the others must stop with an error)")
    p.add_argument("--hang-at", type=_step_rank, default=None, metavar="STEP:RANK",
                   help="make RANK stall at STEP (the others must time out with an error)")
    p.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS), metavar="PATH",
                   help="code paths to check, in order: 'optimizer' (gpu_validation.Birder as users adopt it) and "
                        "'hook' (the expert birder_hook + BirderUpdate); default both")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_gpu_validate)

    b = subparsers.add_parser(
        "bench", help="time Birder.step()'s kernels and the collectives here; write a cluster profile for predict",
        description="Time the kernels gpu_validation.Birder.step() runs (the fused worker and server stages and the "
                    "packed update, each against the device's peak or copy bandwidth) and all-to-all, all-gather, "
                    "reduce-scatter, all-reduce at several sizes on this backend and device; write a cluster profile "
                    "TOML for `birder predict --cluster`.")
    b.add_argument("--backend", choices=("gloo", "nccl"), default="gloo", help="default gloo")
    b.add_argument("--ranks", type=int, default=2, help="local ranks for the collectives (default 2)")
    b.add_argument("--gpus-per-node", type=positive_int, default=None,
                   help="ranks per node: intra-node and inter-node groups are timed apart (default: one node)")
    b.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda with nccl, else cpu")
    b.add_argument("--sizes", type=int, nargs="+", default=[2**16, 2**20, 2**22], metavar="ELEMENTS",
                   help="float32 elements per measurement (default 65536 1048576 4194304)")
    b.add_argument("--repeats", type=_bounded_count(MAX_REPEATS, "repetitions"), default=5,
                   help="timed repetitions; the median is kept (default 5)")
    b.add_argument("--out", default="cluster_profile.toml", type=_profile_path,
                   help="where to write the cluster profile")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=run_bench)
