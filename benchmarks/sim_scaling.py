"""Wall time of one `birder predict` (simulation only, its single-node calibration included) against GPU count:
the simulator's speed targets are 64 GPUs in well under a second, 1024 under 5 s, 4096 under 10 s. Prints a table
and the ratio to 64 GPUs."""

import time

from sim.network import cluster
from sim.workload import clear_calibrations, predict

CASES = [("resnet50", 32, "sgdm"), ("resnet50", 32, "birder"), ("resnet50", 32, "onebit-adam"),
         ("bert-large", 8, "sgdm"), ("bert-large", 8, "birder")]
GPUS = [8, 64, 512, 1024, 4096]


def main() -> None:
    print(f"{'model':10} {'optimizer':12} " + " ".join(f"{g:>8d}" for g in GPUS) + "   (seconds per predict, 10gbe)")
    for model, batch, optimizer in CASES:
        times = []
        for gpus in GPUS:
            clear_calibrations()
            started = time.perf_counter()
            predict(cluster("10gbe", gpus // 8), model=model, batch_per_gpu=batch, optimizer=optimizer,
                    single_node_throughput=2000.0 if model == "resnet50" else 200.0)
            times.append(time.perf_counter() - started)
        ratio = times[-1] / times[1]
        print(f"{model:10} {optimizer:12} " + " ".join(f"{t:8.3f}" for t in times)
              + f"   4096/64 GPUs: {ratio:.1f}x for 64x the GPUs")


if __name__ == "__main__":
    main()
