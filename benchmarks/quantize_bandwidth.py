"""Achieved bandwidth of the element-wise kernels Birder.step() runs, and their share of peak.

On a GPU the peak is the device's nominal HBM bandwidth; on CPU the measured bandwidth of a large copy. Sizes
include the per-GPU shard of ResNet-50 (25.6 M parameters) and BERT-Base (110 M) on 8 GPUs per node, the
shards the hierarchical hook quantizes; the paper reports 15 ms (ResNet-50) and 8 ms (BERT-Base) of
compression per iteration on an A100 (Birder paper, Section 5). ``--compile`` also times the draws through
``torch.compile`` (integer operations only, so the bits cannot change: checked before timing).
The kernels are the stages ``Birder.step()`` runs (``bench.stage_timings``: the fused worker stage
``worker_step_packed_``, the fused server stage, the packed update), each against the peak (target for the
worker stage: at least 25% of the copy bandwidth on CPU). torch.compile of that stage was tried on this CPU:
bit-exact, but 3.5x slower than the piecewise eager form (50.9 ms against 14.3 ms per 2**20 elements, one
thread), so it is not used.
Usage: .venv/bin/python benchmarks/quantize_bandwidth.py [--device cuda] [--compile]
"""

import argparse
import json
import time

import torch

from birder_ref.draws import stream_key
from gpu_validation import torch_birder as tb
from gpu_validation.bench import STAGE_BYTES as STAGES
from gpu_validation.bench import _median_seconds, peak_gbytes_per_s, stage_timings

SHARDS = {"resnet50 / 8 GPUs": 25_557_032 // 8, "bert-base / 8 GPUs": 110_000_000 // 8}


def compiled_draw_seconds(n: int, device: torch.device) -> tuple[float, float]:
    """(compile seconds, median seconds per call) of the draws through torch.compile, after checking its bits."""

    key = stream_key(0, 1, 0)

    def draws(index: torch.Tensor) -> torch.Tensor:
        return tb._uniforms_of(key, index)

    compiled = torch.compile(draws, dynamic=True)
    index = torch.arange(n, dtype=torch.int32, device=device)
    start = time.perf_counter()
    got = compiled(index)
    compile_s = time.perf_counter() - start
    if not torch.equal(got, tb.uniforms(0, 1, 0, index)):
        raise AssertionError("compiled draws differ from the eager draws")
    return compile_s, _median_seconds(lambda: compiled(index), device, 5)


def compiled_quantize_pack_seconds(n: int, device: torch.device) -> tuple[float, float]:
    """(compile seconds, median seconds) of quantize + pack fused by torch.compile, after checking its bits.

    Safe to fuse: clamp, +1, /2 and a comparison round exactly as in eager mode (no multiply-add to contract).
    """
    compiled = torch.compile(lambda y, u: tb.pack_signs(tb.quantize(y, u)), dynamic=True)
    y = torch.linspace(-1.5, 1.5, n, device=device)
    u = tb.uniforms(0, 1, 0, torch.arange(n, dtype=torch.int64, device=device))
    start = time.perf_counter()
    got = compiled(y, u)
    compile_s = time.perf_counter() - start
    if not torch.equal(got, tb.pack_signs(tb.quantize(y, u))):
        raise AssertionError("compiled quantize + pack differs from eager")
    return compile_s, _median_seconds(lambda: compiled(y, u), device, 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile'd draws")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    peak, source = peak_gbytes_per_s(device)
    print(json.dumps({"device": str(device), "peak_gbytes_per_s": round(peak, 2), "peak_source": source}))
    sizes = {"1 Mi": 2**20, "4 Mi": 2**22, **SHARDS}
    for name, row in zip(sizes, stage_timings(sizes.values(), device, args.repeats), strict=True):
        print(json.dumps({"size": name, "elements": row["elements"],
                          **{f"{stage}_ms": round(1e3 * row[f"{stage}_s"], 3) for stage in STAGES},
                          "of_which_worker_draws_ms": round(1e3 * row["draws_s"], 3),
                          **{f"{stage}_share_of_peak": round(row[f"{stage}_peak_ratio"], 4) for stage in STAGES},
                          "compression_ms": round(1e3 * (row["worker_s"] + row["server_s"]), 3),
                          "share_of_peak": round(row["peak_ratio"], 4)}))
    if args.compile:
        n = max(SHARDS.values())
        compile_s, seconds = compiled_draw_seconds(n, device)
        eager = _median_seconds(lambda: tb.uniforms(0, 1, 0, torch.arange(n, device=device)), device, 5)
        print(json.dumps({"elements": n, "compiled_draws_ms": round(1e3 * seconds, 3),
                          "eager_draws_ms": round(1e3 * eager, 3), "speed_up": round(eager / seconds, 2),
                          "compile_s": round(compile_s, 1)}))
        compile_s, seconds = compiled_quantize_pack_seconds(n, device)
        gbps = n * (4 + 4 + 1 / 8) / seconds / 1e9  # y and u in, packed bits out
        print(json.dumps({"elements": n, "compiled_quantize_pack_ms": round(1e3 * seconds, 3),
                          "compiled_quantize_pack_gbytes_per_s": round(gbps, 2), "share_of_peak": round(gbps / peak, 4),
                          "compile_s": round(compile_s, 1)}))


if __name__ == "__main__":
    main()
