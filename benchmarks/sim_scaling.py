"""Time of one `birder predict` (simulation only, its single-node calibration and its interval's propagated width
included, nothing cached) against GPU count, for DDP's all-reduce and for BytePS's summation servers. Targets
(issues 9, 18): one prediction at 4,096 GPUs under 1 s, at 65,536 GPUs under 10 s.
Prints a table of CPU seconds of this process (what the prediction costs; wall time on a machine shared with other
work adds their share), the ratio to 64 GPUs, the wall time of the slowest case beside the load average, and
whether each target holds, measured in this run. Then the same targets for the command users run, `birder
predict --json`, each in a fresh process (parsing, the prediction, the step's trace for the links' busy shares and the
JSON), on each framework's case at 4,096 and 65,536 GPUs: the whole process's CPU seconds (what the target is held
to: the interpreter's start-up and every import included), and those after its first import."""

import os
import resource
import subprocess
import sys
import time

from sim.hardware import cluster
from sim.input_ranges import model_uncertainty
from sim.system import unmodelled
from sim.workload import clear_calibrations, predict

CASES = [("resnet50", 32, "sgdm", "ddp"), ("resnet50", 32, "birder", "ddp"), ("resnet50", 32, "onebit-adam", "ddp"),
         ("bert-large", 8, "sgdm", "ddp"), ("bert-large", 8, "birder", "ddp"),
         ("resnet50", 32, "sgdm", "byteps"),  # summation servers on machines of their own (one node: all-reduce)
         ("resnet50", 32, "sgdm", "tf-parameter-server"),  # servers on the worker nodes: every push counted
         ("bert-large", 8, "adam", "fsdp")]  # every unit's all-gathers and reduce-scatter, one at a time
GPUS = [8, 64, 512, 4096, 65536]
TARGETS = {4096: 1.0, 65536: 10.0}


def main() -> None:
    print(f"{'model':10} {'optimizer':12} {'framework':20} " + " ".join(f"{g:>8d}" for g in GPUS)
          + "   (CPU seconds per predict, 10gbe)")
    worst = {g: 0.0 for g in GPUS}
    worst_wall = {g: 0.0 for g in GPUS}
    propagation = {g: 0.0 for g in GPUS}  # the interval's width from the inputs' ranges (sim.input_ranges)
    for model, batch, optimizer, framework in CASES:
        times = []
        for gpus in GPUS:
            clear_calibrations()
            started, wall = time.process_time(), time.perf_counter()
            c = cluster("10gbe", gpus // 8, framework=framework)
            p = predict(c, model=model, batch_per_gpu=batch, optimizer=optimizer,
                        single_node_throughput=2000.0 if model == "resnet50" else 200.0)
            widths_from = time.process_time()
            model_uncertainty(c, p.as_dict(), True, unmodelled(c))
            propagation[gpus] = max(propagation[gpus], time.process_time() - widths_from)
            times.append(time.process_time() - started)
            worst[gpus] = max(worst[gpus], times[-1])
            worst_wall[gpus] = max(worst_wall[gpus], time.perf_counter() - wall)
        print(f"{model:10} {optimizer:12} {framework:20} " + " ".join(f"{t:8.3f}" for t in times)
              + f"   65536/64 GPUs: {times[-1] / times[1]:.1f}x for 1024x the GPUs")
    print("of which the interval's propagated width (sim.input_ranges.model_uncertainty), slowest case: "
          + ", ".join(f"{g} GPUs {propagation[g] * 1e3:.2f} ms" for g in GPUS))
    load = os.getloadavg()[0]
    for gpus, limit in TARGETS.items():
        verdict = "met" if worst[gpus] < limit else "MISSED"
        print(f"slowest prediction at {gpus} GPUs: {worst[gpus]:.3f} CPU s (target under {limit:g} s: {verdict}); "
              f"slowest wall time {worst_wall[gpus]:.3f} s at load average {load:.1f} on {os.cpu_count()} cores")


# one `birder predict --json` in a fresh process (no cache of an earlier case), timed from after the imports
ONE_COMMAND = """
import contextlib, io, sys, time
from birder.cli import main
started = time.process_time()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(code, time.process_time() - started)
"""


def _command_seconds(argv: list[str]) -> tuple[float, float]:
    """(CPU s after the first import, CPU s of the whole process: the interpreter's start-up included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", ONE_COMMAND, *argv], capture_output=True, text=True, timeout=600,
                          check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, seconds = done.stdout.split()
    assert code == "0", (argv, done.stderr)
    return float(seconds), (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def command_line() -> None:
    fixed, fixed_whole = _command_seconds(["predict", "--model", "resnet50", "--nodes", "1", "--json", "--quiet"])
    print(f"`birder predict --json` on one node: {fixed:.3f} CPU s after the first import, {fixed_whole:.3f} s the "
          "whole process (what every command pays: the interpreter, the modules it imports and its stored data)")
    for gpus, limit in TARGETS.items():
        slowest, which = (0.0, 0.0), ""
        for framework in dict.fromkeys(f for *_, f in CASES):
            model = "bert-large" if framework == "fsdp" else "resnet50"
            argv = ["predict", "--model", model, "--nodes", str(gpus // 8), "--network", "10gbe", "--framework",
                    framework, "--optimizer", "adam" if framework == "fsdp" else "sgdm", "--json", "--quiet"]
            seconds = _command_seconds(argv)
            if seconds[1] > slowest[1]:
                slowest, which = seconds, framework
        verdict = "met" if slowest[1] < limit else "MISSED"
        print(f"`birder predict --json`, slowest framework at {gpus} GPUs: {which} {slowest[1]:.3f} CPU s the whole "
              f"process, {slowest[0]:.3f} s after the first import, {slowest[0] - fixed:.3f} s beyond one node's "
              f"(target under {limit:g} s for the whole command: {verdict})")


if __name__ == "__main__":
    main()
    command_line()
