"""Time per training step of Birder against DDP's default all-reduce + AdamW, over gloo on CPU, in one run.

Prints one JSON line per (layout, model size) with both times and the ratio birder / all-reduce measured in this
run (target, issue 21: at most 1.5, at 2 x 2 and at 2 x 1 ranks, for 1 M and 10 M parameters; ``within_target``
says whether this run met it, on wall-clock time), and the same for rank 0's CPU time per step (``*_cpu_*``: the
work each method does, which a loaded machine's waits move less); the methods' steps are interleaved in one set
of processes (A, B, A, B, ...), so a shared machine's load weighs on each alike. The model is an MLP of 4 square layers
(width 512: 1.05 M parameters; width 1600: 10.2 M), batch 8, one thread per rank, median of ``--steps`` steps
after two warm-up steps. ``--hooks`` may add ``birder_overlap`` (Birder with ``overlap=True``) and
``birder_hook`` (the expert hook, update in .grad). ``--batchnorm`` puts a BatchNorm1d after each Linear: a
model with buffers, which DDP broadcasts in every forward (as ResNet's BatchNorms or a Hugging Face model's
position_ids), so the row shows what Birder's forward guard adds to such a model (one record per step);
``--micro-batches N`` accumulates N forward/backward passes per step (without no_sync).
On a machine with fewer cores than ranks the ranks share cores: both sides pay it, the ratio stays meaningful.
Usage: python benchmarks/hook_speed.py [--layouts 2x2 2x1] [--widths 512 1600] [--steps 10] [--batchnorm]
    [--micro-batches 1] [--backend gloo|nccl] [--device cpu|cuda]
"""

import argparse
import json

from gpu_validation.bench import hook_step_seconds, step_time_row

TARGET_RATIO = 1.5  # Birder's step time over DDP's all-reduce + AdamW (issue 21)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", nargs="+", default=["2x2", "2x1"],
                        help="NODESxGPUS_PER_NODE (default 2x2 2x1)")
    parser.add_argument("--widths", type=int, nargs="+", default=[512, 1600], help="MLP widths (default 512 1600)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hooks", nargs="+", default=["birder"], help="birder, birder_overlap, birder_hook")
    parser.add_argument("--batchnorm", action="store_true", help="a BatchNorm1d after each Linear (buffers)")
    parser.add_argument("--micro-batches", type=int, default=1, help="passes accumulated per step (default 1)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo", help="default gloo")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="default cpu; cuda: the ranks share this machine's GPUs (nccl: one rank per GPU)")
    args = parser.parse_args()
    for layout in args.layouts:
        nodes, gpus = (int(x) for x in layout.split("x"))
        for width in args.widths:
            timed = hook_step_seconds(("allreduce", *args.hooks), nodes, gpus, args.steps, width,
                                      args.batchnorm, args.micro_batches, args.backend, args.device)
            row = step_time_row(timed, layout, tuple(args.hooks), args.backend, args.device, args.batchnorm,
                                args.micro_batches, TARGET_RATIO)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
