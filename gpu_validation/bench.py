"""`birder bench`: time Birder's kernels and the collectives here, and write a cluster profile for `predict`.

Kernels (one rank, this device): the stages ``gpu_validation.Birder.step()`` runs on its shard (the fused worker
stage, the fused server stage, the packed update; ``stage_timings``) at several sizes; the achieved bandwidth
counts the bytes a fused kernel must move (``STAGE_BYTES``) and is compared with the device's peak: the nominal
HBM bandwidth of a known GPU, else the measured bandwidth of a large copy (``copy_gbytes_per_s``).

Collectives (spawned ranks, or a torchrun job): all-to-all, all-gather, reduce-scatter and all-reduce of
float32 tensors in the intra-node group and the inter-node group of ``comm.make_topology("hierarchical")``;
bus bandwidth as nccl-tests defines it (all-reduce: 2 (n-1)/n x bytes / time; the others (n-1)/n x bytes /
time). The profile takes each group's best bus bandwidth and its smallest-size time as the latency, in the
schema ``sim.network.load_cluster`` reads.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from birder_ref.draws import SERVER_STREAM, stream_key
from gpu_validation import comm, launch
from gpu_validation import torch_birder as tb
from safeio.atomic import atomic_path, write_text
from safeio.outputs import output_files
from safeio.serialise import check_toml, toml_pair
from sim.system import BASE_LATENCY_US, HW_LATENCY_US

# Nominal HBM bandwidth (GB/s) of GPUs by name fragment, from the vendors' datasheets.
PEAK_GBYTES_PER_S = {"H200": 4800.0, "H100 PCIe": 2000.0, "H100": 3350.0, "A100-SXM4-80GB": 2039.0,
                     "A100 80GB PCIe": 1935.0, "A100": 1555.0, "V100": 900.0}
COLLECTIVES = ("all_to_all", "all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True)
class BenchConfig:
    backend: str = "gloo"
    ranks: int = 2
    sizes: tuple[int, ...] = (2**16, 2**20, 2**22)
    repeats: int = 5
    out: str | None = "cluster_profile.toml"
    device: str | None = None
    gpus_per_node: int | None = None  # ranks per node; default: all ranks on one node
    timeout_s: float = 120.0
    quiet: bool = False  # no progress bar

    def check(self) -> None:
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {self.backend!r}")
        if self.ranks < 1 or self.repeats < 1 or not self.sizes or min(self.sizes) < 8:
            raise ValueError("need ranks >= 1, repeats >= 1 and sizes of at least 8 elements")
        g = self.gpus_per_node or self.ranks
        if self.ranks % g:
            raise ValueError(f"{self.ranks} ranks do not split into nodes of {g}")
        if self.backend == "nccl" and self.device_type != "cuda":
            raise ValueError(f"backend nccl moves CUDA tensors only, not {self.device_type} ones: use --backend gloo "
                             "with --device cpu")
        if self.device_type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda asked for, but torch sees no CUDA device")
        needed, available = self.bytes_needed(), available_memory_bytes()
        if available is not None and needed > available:
            raise ValueError(f"--sizes up to {max(self.sizes)} elements need about {needed / 1e9:.1f} GB of memory "
                             f"here ({self.ranks} rank(s)); {available / 1e9:.1f} GB are available")

    def bytes_needed(self) -> int:
        """A bound on the memory the largest size takes: the kernel stage (float32 and int64 temporaries, about
        40 B per element) plus, per local rank, a collective's input and output (4 B each, x ranks for gather)."""
        n = max(self.sizes)
        local = self.ranks if self.device_type == "cpu" else 1
        return n * 40 + local * n * 4 * (2 + self.ranks)

    @property
    def device_type(self) -> str:
        return self.device or ("cuda" if self.backend == "nccl" else "cpu")


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None (no check)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_seconds(fn, device: torch.device, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_gbytes_per_s(device: torch.device) -> tuple[float, str]:
    """The device's peak memory bandwidth and where it comes from."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for fragment, peak in PEAK_GBYTES_PER_S.items():
            if fragment in name:
                return peak, f"nominal HBM bandwidth of {name} (datasheet)"
    return copy_gbytes_per_s(device), "measured copy bandwidth (64 MiB into a reused buffer: bytes read + written)"


def copy_gbytes_per_s(device: torch.device, elements: int = 2**24) -> float:
    source, target = torch.ones(elements, device=device), torch.empty(elements, device=device)
    seconds = _median_seconds(lambda: target.copy_(source), device, 5)
    return 8 * elements / seconds / 1e9


STAGE_BYTES = {  # bytes per element a fused kernel must move in each stage Birder.step() runs (G = 1, W = 2)
    "worker": 4 + 12 + 12 + 1 / 8,  # g in; m, b_hat, e in and out; u out packed (lines 5-9)
    "server": 2 / 8 + 4 + 4 + 1 / 8,  # W workers' packed signs in; server error in and out; u_bar out packed
    "update": 4 + 1 / 8 + 4,  # x in, u_bar's bits in, x out (line 16)
}


def stage_timings(sizes: Iterable[int], device: torch.device, repeats: int, quiet: bool = False) -> list[dict]:
    """Per size: seconds of each stage ``Birder.step()`` runs on one rank's shard, with its achieved GB/s and
    share of the peak: the fused worker stage (``torch_birder.worker_step_packed_``: node mean, lines 5-9 with
    their draws, quantization, error feedback, packing), the fused server stage (``server_step_packed_`` over two
    workers' packed signs: lines 11-13 with their draws) and the packed update (``optimizer._apply_packed_update_``
    piece by piece, as ``Birder`` applies line 16). ``draws_s`` is the part of the worker stage spent on draws.
    On CPU everything runs on one thread (intra-op threads on a shared machine made the small update's time jump
    from 0.07 to 28 ms at 2**16 elements), and the peak (a large copy's bandwidth, also one thread) is measured
    again right after each size's stages (``peak_gbytes_per_s`` in the row), so that each ratio compares times
    taken under one load."""
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        return _stage_rows(sizes, device, repeats, quiet)
    finally:
        torch.set_num_threads(threads)


def _stage_rows(sizes: Iterable[int], device: torch.device, repeats: int, quiet: bool) -> list[dict]:
    from gpu_validation.optimizer import _apply_packed_update_

    rows = []
    generator = torch.Generator().manual_seed(0)
    piece = tb.piece_elements(device)
    for n in tqdm(sizes, desc="bench kernels", unit="size", disable=True if quiet else None):
        n = -(-n // 8) * 8
        grad = torch.randn(n, generator=generator).to(device)
        m, b_hat, e, server_error = (torch.zeros(n, device=device) for _ in range(4))
        worker_key, server_key = stream_key(0, 1, 0), stream_key(0, 1, SERVER_STREAM)
        packed = torch.randint(0, 256, (2, n // 8), dtype=torch.uint8, generator=generator).to(device)
        bits = torch.randint(0, 256, (n // 8,), dtype=torch.uint8, generator=generator).to(device)
        x = torch.randn(n, generator=generator).to(device)
        work = (torch.empty(piece + 16, device=device), torch.empty(piece, device=device),
                torch.empty(piece // 8 + 2, dtype=torch.int64, device=device))

        def update(x=x, bits=bits, work=work, n=n):
            for lo in range(0, n, piece):
                _apply_packed_update_(x[lo:lo + piece], bits, lo, 1e-3, 1e-4, work)

        ws = tb._Workspace.make(n, device)
        seconds = {
            "worker": _median_seconds(lambda m=m, b=b_hat, e=e, g=grad, k=worker_key: tb.worker_step_packed_(
                m, b, e, g, 0.95, 1e-8, k, 0), device, repeats),
            "server": _median_seconds(lambda p=packed, s=server_error, k=server_key: tb.server_step_packed_(
                p, s, k, 0, n_workers=2), device, repeats),
            "update": _median_seconds(update, device, repeats),
        }
        draws = _median_seconds(lambda n=n, ws=ws, k=worker_key: [tb._grid_into(k, lo, min(piece, n - lo), ws)
                                                                   for lo in range(0, n, piece)], device, repeats)
        peak, _ = peak_gbytes_per_s(device)
        row = {"elements": n, **{f"{stage}_s": t for stage, t in seconds.items()}, "draws_s": draws,
               "peak_gbytes_per_s": peak}
        for stage, t in seconds.items():
            row[f"{stage}_gbytes_per_s"] = STAGE_BYTES[stage] * n / t / 1e9
            row[f"{stage}_peak_ratio"] = row[f"{stage}_gbytes_per_s"] / peak
        total = sum(seconds.values())
        row["gbytes_per_s"] = sum(STAGE_BYTES.values()) * n / total / 1e9
        row["peak_ratio"] = row["gbytes_per_s"] / peak
        rows.append(row)
    return rows


def _collective(op: str, group, members: int, x: torch.Tensor):
    if op == "all_reduce":
        return lambda: dist.all_reduce(x, group=group)
    if op == "all_to_all":
        out = torch.empty_like(x)
        return lambda: dist.all_to_all_single(out, x, group=group)
    if op == "all_gather":
        out = torch.empty(members * x.numel(), dtype=x.dtype, device=x.device)
        return lambda: comm._all_gather(out, x, group=group)
    out = torch.empty(x.numel() // members, dtype=x.dtype, device=x.device)
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return lambda: reduce_scatter(out, x, group=group)


def collective_timings(cfg: BenchConfig, topology: comm.Topology, device: torch.device) -> list[dict]:
    """Every rank calls this; rows for the intra-node group and the inter-node group (where of 2+ ranks)."""
    rows = []
    groups = (("intra", topology.worker_group, topology.gpus_per_node),
              ("inter", topology.server_group, topology.n_nodes))
    for name, group, members in groups:
        if group is None:
            continue
        for n in cfg.sizes:
            n = -(-n // members) * members
            x = torch.ones(n, device=device)
            for op in COLLECTIVES:
                seconds = _median_seconds(_collective(op, group, members, x), device, cfg.repeats)
                # nccl-tests' size: all-gather's total output (AllGatherGetCollByteCount), every other op's input
                nbytes = 4 * n * (members if op == "all_gather" else 1)
                algbw = nbytes / seconds
                factor = 2 * (members - 1) / members if op == "all_reduce" else (members - 1) / members
                rows.append({"group": name, "ranks": members, "op": op, "bytes": nbytes, "time_s": seconds,
                             "seconds": seconds, "algbw_gbytes_per_s": algbw / 1e9,
                             "busbw_gbytes_per_s": algbw * factor / 1e9})
    return rows


def profile_fields(cfg: BenchConfig, nodes: int, gpus_per_node: int, rows: list[dict],
                   device_name: str | None = None) -> dict:
    """The measured figures in the cluster-profile schema of ``sim.network.load_cluster``."""
    fields: dict = {"name": f"bench-{platform.node() or 'host'}-{cfg.backend}", "nodes": nodes,
                    "gpus_per_node": gpus_per_node}
    if device_name is not None:  # the compute profile predict uses (sim/presets/gpus.toml), where one fits
        for fragment, profile in (("H100", "h100"), ("H200", "h100"), ("A100", "a100")):
            if fragment in device_name:
                fields["gpu"] = profile
                break
    for group, table in (("inter", "network"), ("intra", "intra")):
        mine = [r for r in rows if r["group"] == group]
        if not mine:
            continue
        busbw = max(r["busbw_gbytes_per_s"] for r in mine)
        step_us = per_step_latency_us(mine, busbw)
        if table == "network":  # the sim adds tuning.cc's NET latency per hop itself: only the transport's excess
            extra_us = max(0.0, step_us - _net_step_us(gpus_per_node))
            fields["network"] = {"transport": "socket" if cfg.backend == "gloo" else "ib",
                                 "line_rate_gbps": round(busbw * 8, 4), "efficiency": 1.0,
                                 "latency_us": round(extra_us, 2), "message_overhead_us": 0.0,
                                 "step_overhead_us": 0.0}  # measured latency covers them: fitted ones stay out
        else:
            fields["intra"] = {"port_gbytes_per_s": round(busbw, 4), "latency_us": round(step_us, 2)}
    return fields


def per_step_latency_us(rows: list[dict], busbw_gbytes_per_s: float) -> float:
    """One ring step's latency (us) from the smallest all-reduce measured in a group of m ranks.

    The simulator's ring all-reduce (``sim.system.ring_latency``, NCCL's tuning.cc) takes
    base + 2 (m - 1) x step + its flows; at the smallest size the protocol is LL (base 6.6 us), and the flows
    take 2 (m - 1) / m x bytes / busbw. So step = (T - bytes x 2 (m - 1) / m / busbw - base_LL) / (2 (m - 1)),
    at least 0. ``[intra] latency_us`` is this step; ``[network] latency_us`` (the transport's excess per hop)
    is it less tuning.cc's NET LL step as the simulator takes it (ring 2.7 us; tree 5.0 us with one GPU per
    node), so that the simulator's latency of that all-reduce is the measured one.
    """
    smallest = min(r["bytes"] for r in rows)
    reduce = [r for r in rows if r["op"] == "all_reduce" and r["bytes"] == smallest]
    m = reduce[0]["ranks"] if reduce else rows[0]["ranks"]
    seconds = min(r["seconds"] for r in (reduce or [r for r in rows if r["bytes"] == smallest]))
    steps = 2 * (m - 1)
    flows_us = smallest * steps / m / (busbw_gbytes_per_s * 1e3) if busbw_gbytes_per_s > 0 else 0.0
    return max(0.0, (seconds * 1e6 - flows_us - BASE_LATENCY_US["ring"]["LL"]) / steps)


def provenance(fields: dict, result: dict) -> dict[str, list[str]]:
    """Which parts of the profile were measured here, which come from a preset, which are assumed."""
    where = ("CPU loopback over gloo (ranks on this machine)" if result["backend"] == "gloo"
             else f"{result['backend']} on {result['device']}")
    measured, preset, assumed = [], [], []
    if "network" in fields:
        measured.append(f"[network] line_rate_gbps, latency_us: inter-node group, {where}")
        assumed.append("[network] efficiency = 1.0 and no per-message/per-step overheads (the measured latency "
                       "covers them)")
        assumed.append(f"[network] transport = {fields['network']['transport']!r} (from the backend)")
    else:
        preset.append("[network] preset '10gbe': one node, no inter-node group to measure")
    if "intra" in fields:
        measured.append(f"[intra] port_gbytes_per_s, latency_us: intra-node group, {where}")
    else:
        preset.append("[intra]: the simulator's default for the GPU (one GPU per node, nothing to measure)")
    if "gpu" in fields:
        preset.append(f"gpu = {fields['gpu']!r}: compute profile from sim/presets, matched by device name")
    else:
        preset.append("gpu: the simulator's default compute profile (no GPU here)")
    measured.append(f"kernels: Birder.step()'s worker, server and update stages on {result['device']} (comments only)")
    return {"measured": measured, "preset": preset, "assumed": assumed}


def write_profile(path: str | Path, fields: dict, result: dict) -> Path:
    """The cluster profile TOML (written atomically): only keys ``sim.network.load_cluster`` reads; what was
    measured, taken from a preset or assumed, in comments."""
    lines = [
        "# Cluster profile measured by `birder bench` (gpu_validation/bench.py).",
        f"# backend {result['backend']}, device {result['device']}, {result['ranks']} ranks "
        f"({result['nodes']} node(s) x {result['gpus_per_node']}), sizes {result['sizes']} float32 elements.",
        "# Bandwidths: the best bus bandwidth of all-to-all / all-gather / reduce-scatter / all-reduce in that group",
        "# (nccl-tests convention). Latencies, in the simulator's meanings (sim/README.md): from the all-reduce T at",
        "# the smallest size over m ranks, one ring step = (T - flows - 6.6 us LL base) / (2 (m - 1)), the flows",
        "# 2 (m - 1) / m x bytes / busbw; [intra] latency_us is that step (per-step latency), [network] latency_us",
        "# that step less tuning.cc's NET LL step (the transport's extra per hop; ring 2.7 us, tree 5.0 us with one",
        "# GPU per node, as sim.system.ring_latency takes it). Ranks on one machine",
        "# measure loopback (gloo) or NVLink/PCIe (nccl); run under torchrun across nodes to measure the network.",
    ]
    for kind, items in provenance(fields, result).items():
        lines += [f"# {kind}: {item}" for item in items]
    if result.get("kernels"):
        k = max(result["kernels"], key=lambda r: r["elements"])
        lines.append(f"# Birder.step()'s stages (worker + server + update) at {k['elements']} elements: "
                     f"{k['gbytes_per_s']:.2f} GB/s ({100 * k['peak_ratio']:.1f}% of {k['peak_gbytes_per_s']:.1f}"
                     f" GB/s peak)")
    lines.append("")
    top = ("name", "nodes", "gpus_per_node", "gpu")
    lines += [toml_pair(key, fields[key]) for key in top if key in fields]  # escaped (a device's name)
    for table in ("network", "intra"):
        if table in fields:
            lines.append("")
            if table == "network":
                lines.append("# transport: gloo runs over TCP sockets; for nccl InfiniBand is assumed (edit if on TCP)")
            lines += _latency_derivation(table, result.get("collectives") or [], result["gpus_per_node"])
            lines.append(f"[{table}]")
            lines += [toml_pair(key, value) for key, value in fields[table].items()]
    if "network" not in fields:
        lines += ["", "# One node only: no inter-node group to measure; predict takes this preset.",
                  "[network]", 'preset = "10gbe"']
    text = "\n".join(lines) + "\n"
    meant = {key: fields[key] for key in top if key in fields} | {
        table: fields[table] for table in ("network", "intra") if table in fields}
    check_toml(text, meant | ({} if "network" in fields else {"network": {"preset": "10gbe"}}), str(path))
    return write_text(path, text)


def _latency_derivation(table: str, rows: list[dict], gpus_per_node: int) -> list[str]:
    """Comment lines with the figures behind the table's latency_us (``per_step_latency_us``)."""
    mine = [r for r in rows if r["group"] == ("inter" if table == "network" else "intra")]
    if not mine:
        return []
    busbw = max(r["busbw_gbytes_per_s"] for r in mine)
    smallest = min(r["bytes"] for r in mine)
    reduce = [r for r in mine if r["op"] == "all_reduce" and r["bytes"] == smallest] or mine
    m = reduce[0]["ranks"]
    step = per_step_latency_us(mine, busbw)
    took_us = min(r["seconds"] for r in reduce) * 1e6
    net = _net_step_us(gpus_per_node)
    line = f"# latency_us: all-reduce of {smallest} B over {m} ranks took {took_us:.1f} us -> one step {step:.2f} us"
    return [line + (f" - {net} us NET = {max(0.0, step - net):.2f} us" if table == "network" else "")]


def _net_step_us(gpus_per_node: int) -> float:
    """tuning.cc's NET step at LL, as ``sim.system.ring_latency`` takes it (tree's with one GPU per node)."""
    return HW_LATENCY_US["net"]["tree" if gpus_per_node == 1 else "ring"]["LL"]


def _measure_collectives(cfg: BenchConfig, rank: int) -> list[dict]:
    g = cfg.gpus_per_node or cfg.ranks
    device = torch.device("cpu")
    if cfg.device_type == "cuda":
        torch.cuda.set_device(rank % g)
        device = torch.device("cuda", rank % g)
    topology = comm.make_topology("hierarchical", dist.get_world_size() // g, g)
    return collective_timings(cfg, topology, device)


def run(cfg: BenchConfig) -> dict:
    """Kernels here, collectives over spawned ranks (or this torchrun job); writes the profile if ``cfg.out``."""
    cfg.check()
    device = torch.device(cfg.device_type)
    kernels = stage_timings(cfg.sizes, device, cfg.repeats, cfg.quiet)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:  # under torchrun
        world = int(os.environ["WORLD_SIZE"])
        g = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        first = int(os.environ["RANK"]) == 0
        cfg = replace(cfg, ranks=world, gpus_per_node=g, out=cfg.out if first else None)
        dist.init_process_group(cfg.backend, timeout=timedelta(seconds=cfg.timeout_s))
        rows = _measure_collectives(cfg, dist.get_rank())
        dist.destroy_process_group()
        return _result(cfg, device, kernels, rows)
    if cfg.ranks == 1:
        rows = []
    else:
        rows = _spawn_collectives(cfg)
    return _result(cfg, device, kernels, rows)


def _result(cfg: BenchConfig, device: torch.device, kernels: list[dict], rows: list[dict]) -> dict:
    peak, peak_source = peak_gbytes_per_s(device)
    g = cfg.gpus_per_node or cfg.ranks
    result = {"backend": cfg.backend, "device": device.type if device.type == "cpu" else torch.cuda.get_device_name(),
              "ranks": cfg.ranks, "nodes": cfg.ranks // g, "gpus_per_node": g, "sizes": list(cfg.sizes),
              "peak_gbytes_per_s": peak, "peak_source": peak_source, "kernels": kernels, "collectives": rows}
    fields = profile_fields(cfg, cfg.ranks // g, g, rows, None if device.type == "cpu" else result["device"])
    result["profile_fields"] = fields
    result["provenance"] = provenance(fields, result)
    result["profile"] = result["plot"] = None
    if cfg.out:  # the profile and its plot both or neither, never over a file birder did not write
        out = Path(cfg.out)
        with output_files(out.parent, "birder bench") as staged:
            write_profile(staged.path(out.name), fields, result)
            plot(result, staged.path(out.with_suffix(".png").name))
        result["profile"], result["plot"] = str(out), str(out.with_suffix(".png"))
    return result


def plot(result: dict, path: Path) -> Path:
    """Two panels: the kernels' achieved GB/s against size, and each collective's bus bandwidth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (kernels, collectives) = plt.subplots(1, 2, figsize=(11, 4))
    sizes = [k["elements"] for k in result["kernels"]]
    for stage, style in (("worker", "o-"), ("server", "s-"), ("update", "^-")):
        kernels.plot(sizes, [k[f"{stage}_gbytes_per_s"] for k in result["kernels"]], style, label=f"{stage} stage")
    kernels.plot(sizes, [k["gbytes_per_s"] for k in result["kernels"]], "k--", label="all three")
    kernels.axhline(result["peak_gbytes_per_s"], color="grey", ls=":", label="peak")
    kernels.set(xscale="log", yscale="log", xlabel="elements", ylabel="GB/s (bytes a fused kernel must move)",
                title=f"Birder.step()'s kernels on {result['device']}")
    kernels.legend(loc="center right")
    for group in ("intra", "inter"):
        for op in COLLECTIVES:
            rows = [r for r in result["collectives"] if r["group"] == group and r["op"] == op]
            if rows:
                collectives.plot([r["bytes"] for r in rows], [r["busbw_gbytes_per_s"] for r in rows], "o-",
                                 label=f"{group} {op} ({rows[0]['ranks']} ranks)")
    collectives.set(xscale="log", xlabel="bytes each rank contributes", ylabel="bus bandwidth GB/s",
                    title=f"collectives over {result['backend']}")
    if result["collectives"]:
        collectives.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return Path(path)


def _spawn_collectives(cfg: BenchConfig) -> list[dict]:
    return _results_of(launch.launch(_measure_collectives, (cfg,), cfg.ranks, cfg.backend, cfg.timeout_s,
                                     backstop_s=60 + cfg.timeout_s))[0]


def _results_of(outcome: launch.Outcome) -> list:
    """Every rank's result, or one RuntimeError naming what failed."""
    if outcome.errors or outcome.lost or len(outcome.reports) < len(outcome.exit_codes):
        raise RuntimeError(f"bench ranks failed: {outcome.describe_failures() or 'no result'}")
    return [outcome.reports[r]["result"] for r in sorted(outcome.reports)]


def describe(result: dict) -> str:
    """Human-readable tables of a bench result."""
    lines = [f"birder bench: {result['backend']} on {result['device']}, {result['ranks']} rank(s); peak "
             f"{result['peak_gbytes_per_s']:.1f} GB/s ({result['peak_source']})", "",
             "Birder.step()'s kernels (one thread on CPU): fused worker stage (draws included), fused server stage, "
             "packed update;",
             "share of the peak as bytes a fused kernel must move / time (on CPU the peak is re-measured per size on "
             "one thread; sizes that fit in cache can pass 100%)",
             "    elements   worker ms (of peak)   server ms (of peak)   update ms (of peak)   all: GB/s  of peak"
             "  (peak GB/s)"]
    for k in result["kernels"]:
        stages = "".join(f"  {1e3 * k[f'{s}_s']:9.3f} ({100 * k[f'{s}_peak_ratio']:5.1f}%)"
                         for s in ("worker", "server", "update"))
        lines.append(f"{k['elements']:>12}{stages}  {k['gbytes_per_s']:10.2f}  {100 * k['peak_ratio']:6.1f}%"
                     f"  ({k['peak_gbytes_per_s']:.1f})")
    if result["collectives"]:
        lines += ["", "group  ranks  collective        bytes        ms   algbw GB/s   busbw GB/s"]
        for r in result["collectives"]:
            lines.append(f"{r['group']:<5}  {r['ranks']:>5}  {r['op']:<14} {r['bytes']:>10}  {1e3 * r['time_s']:8.3f}"
                         f"  {r['algbw_gbytes_per_s']:11.3f}  {r['busbw_gbytes_per_s']:11.3f}")
    if result["profile"]:
        lines += ["", f"cluster profile written to {result['profile']} (birder predict --cluster {result['profile']}),"
                  f" plot to {result['plot']}"]
    for kind, items in result.get("provenance", {}).items():
        lines += [f"  {kind}: {item}" for item in items]
    return "\n".join(lines)


# ---- the hook's time per training step against DDP's default all-reduce hook ----

def _training_setup(hook_name: str, world: int, nodes: int, width: int, batchnorm: bool = False,
                    device: torch.device | None = None):
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from gpu_validation.hook import BirderState, BirderUpdate, birder_hook
    from gpu_validation.optimizer import Birder

    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width)) if batchnorm else nn.Linear(width, width)
              for _ in range(4)]  # BatchNorm's running statistics are buffers: DDP broadcasts them every forward
    model = nn.Sequential(*layers).to(device)
    on_cuda = device is not None and device.type == "cuda"
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if on_cuda else None)
    if hook_name in ("birder", "birder_overlap"):  # the optimizer people adopt (overlap=False, its default, or True)
        optimizer = Birder(ddp, lr=1e-3, gpus_per_node=world // nodes, overlap=hook_name == "birder_overlap")
    elif hook_name == "birder_hook":  # the expert hook, the update in .grad
        state = BirderState(model.parameters(), comm.make_topology("hierarchical", nodes, world // nodes))
        ddp.register_comm_hook(state, birder_hook)
        optimizer = BirderUpdate(model.parameters(), lr=1e-3, hook_state=state)
    elif hook_name == "allreduce":  # DDP's default all-reduce (as a hook) + AdamW
        ddp.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        raise ValueError(f"unknown hook {hook_name!r}")
    return model, ddp, optimizer


def _interleaved_steps(world: int, nodes: int, hooks: tuple[str, ...], steps: int, width: int, batchnorm: bool,
                       micro_batches: int, device_type: str, rank: int) -> dict:
    """Every method's DDP model in this one process set, their steps interleaved (A, B, A, B, ...), so that the
    load of a shared machine weighs on each alike; median seconds per step of each, from rank 0: wall-clock
    (``median_s``) and this process's CPU time (``median_cpu_s``: every thread of the rank, gloo's included; time
    spent waiting for a core or a peer does not count, so it moves less with the machine's load)."""
    device = torch.device("cpu")
    if device_type == "cuda":  # local ranks share the GPUs here (gloo allows several on one; NCCL one each)
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    runs = {name: _training_setup(name, world, nodes, width, batchnorm, device) for name in hooks}
    x = torch.randn(8, width).to(device)
    times: dict[str, list[float]] = {name: [] for name in hooks}
    cpu: dict[str, list[float]] = {name: [] for name in hooks}
    for step in range(steps + 2):  # two warm-up steps: the first has a single bucket, then DDP rebuilds
        for name, (_, ddp, optimizer) in runs.items():
            _sync(device)
            dist.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            optimizer.zero_grad()
            for _ in range(micro_batches):  # accumulation without no_sync: DDP reduces each micro-batch
                ddp(x).square().mean().backward()
            optimizer.step()
            _sync(device)  # a CUDA step ends when its kernels do
            if step >= 2:
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
    parameters = sum(p.numel() for p in next(iter(runs.values()))[0].parameters())
    return {"median_s": {name: statistics.median(t) for name, t in times.items()},
            "median_cpu_s": {name: statistics.median(t) for name, t in cpu.items()}, "parameters": parameters}


def hook_step_seconds(hooks: tuple[str, ...], nodes: int, gpus_per_node: int, steps: int = 10,
                      width: int = 512, batchnorm: bool = False, micro_batches: int = 1, backend: str = "gloo",
                      device: str = "cpu") -> dict:
    """Median seconds per DDP training step, from rank 0, of each of ``hooks``, measured interleaved in one run:
    'birder' (``Birder``), 'birder_hook' (``birder_hook`` + ``BirderUpdate``), 'allreduce' (DDP's all-reduce +
    AdamW); ``batchnorm``: a BatchNorm1d after each Linear (a model with buffers); ``micro_batches``: forward and
    backward passes accumulated per step; ``backend`` gloo or nccl, ``device`` cpu or cuda (the local ranks share
    this machine's GPUs; CUDA steps are timed to their last kernel)."""
    world = nodes * gpus_per_node
    run = (world, nodes, tuple(hooks), steps, width, batchnorm, micro_batches, device)
    outcome = launch.launch(_interleaved_steps, run, world, backend, 120.0, 900.0)
    return _results_of(outcome)[0]


def step_time_row(timed: dict, layout: str, hooks: tuple[str, ...], backend: str = "gloo", device: str = "cpu",
                  batchnorm: bool = False, micro_batches: int = 1, target_ratio: float = 1.5) -> dict:
    """One row of ``benchmarks/hook_speed.py`` from a ``hook_step_seconds`` result: each method's median ms per step
    (wall and rank 0's CPU time) and its ratio to DDP's all-reduce + AdamW measured in the same run;
    ``within_target``: every hook's wall ratio is at most ``target_ratio``."""
    base, base_cpu = timed["median_s"]["allreduce"], timed["median_cpu_s"]["allreduce"]
    row = {"layout": layout, "backend": backend, "device": device, "model": "mlp+batchnorm" if batchnorm else "mlp",
           "micro_batches": micro_batches, "parameters": timed["parameters"],
           "allreduce_adamw_ms_per_step": round(1e3 * base, 2),
           "allreduce_adamw_cpu_ms_per_step": round(1e3 * base_cpu, 2)}
    for hook in hooks:
        row[f"{hook}_ms_per_step"] = round(1e3 * timed["median_s"][hook], 2)
        row[f"{hook}_over_allreduce"] = round(timed["median_s"][hook] / base, 3)
        row[f"{hook}_cpu_ms_per_step"] = round(1e3 * timed["median_cpu_s"][hook], 2)
        row[f"{hook}_cpu_over_allreduce"] = round(timed["median_cpu_s"][hook] / base_cpu, 3)
    row["within_target"] = all(row[f"{hook}_over_allreduce"] <= target_ratio for hook in hooks)
    return row
