"""Time per training step of the Birder DDP hook against DDP's default all-reduce hook, over gloo on CPU.

Prints one line per layout and the ratio birder / all-reduce measured in this run. A small MLP (4 x 512x512,
1.05 M parameters), batch 8, one thread per rank, median of 10 steps after two warm-up steps.
Usage: .venv/bin/python benchmarks/hook_speed.py [--layouts 2x1 2x2] [--steps 10] [--width 512]
"""

import argparse
import json

from gpu_validation.bench import hook_step_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", nargs="+", default=["2x1", "2x2"], help="NODESxGPUS_PER_NODE")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    for layout in args.layouts:
        nodes, gpus = (int(x) for x in layout.split("x"))
        base = hook_step_seconds("allreduce", nodes, gpus, args.steps, args.width)
        birder = hook_step_seconds("birder", nodes, gpus, args.steps, args.width)
        ratio = birder["median_s"] / base["median_s"]
        print(json.dumps({"layout": layout, "backend": "gloo", "device": "cpu", "parameters": base["parameters"],
                          "allreduce_ms_per_step": round(1e3 * base["median_s"], 2),
                          "birder_ms_per_step": round(1e3 * birder["median_s"], 2),
                          "birder_over_allreduce": round(ratio, 3)}))


if __name__ == "__main__":
    main()
