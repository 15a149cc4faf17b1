"""Workload layer: one training iteration of data-parallel training, as a simpy process.

An iteration is the forward pass, the backward pass layer by layer (last layer first) on the GPU, and the
gradient buckets of PyTorch DDP (25 MB each, the first 1 MB, filled in backward order; a tensor is never
split) whose collectives run one after another on the communication stream as soon as their bucket is full,
overlapping the rest of the backward pass. 1-bit hooks add compression and decompression kernels that take
their turn on the GPU. Then the optimizer step. DDP's next forward waits for every bucket. GPU work that runs
while a collective is in flight is slowed by ``OVERLAP_COMPUTE_SLOWDOWN`` (the collective's kernels share the
GPU); the extra time is the step's ``contention_s``. A measured node's calibration includes its own contention.

Optimizers mix kinds of steps, each with its share of the steps (``policy``, from each optimizer's
``birder_ref.registry.OptimizerSpec``): a "bucketed" kind runs its collective per bucket (a DDP communication
hook), an "after_backward" kind once for the whole model inside ``optimizer.step`` (DeepSpeed's design, so it
does not overlap the backward pass), a "none" kind sends nothing. Throughput is averaged over the run as the
Birder paper measured it (total samples / total time), i.e. iteration times are averaged with the step shares
as weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import simpy

from birder_ref.registry import SIMULATED, StepKind, simulated_spec
from birder_ref.schedules import SCHEMES
from sim.hardware import GPUS, Cluster, Nic, framework_preset
from sim.models import ModelProfile, model_profile, synthetic
from sim.stragglers import straggler_factor
from sim.system import (
    Fabric,
    check_optimizer_framework,
    host_staging_s,
    operation_spans,
    rpc_copy_s,
    sharded_schedules,
    step_schedule,
    traffic,
    whole_variable_servers,
)

BUCKET_CAP_BYTES = 25 * 1024 * 1024  # torch DDP bucket_cap_mb = 25
FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BACKWARD_TO_FORWARD = 2.0  # backward costs about twice the forward (two matmuls per forward matmul)
HOOK_BLOCKS_BACKWARD = True  # default: the paper's 1-bit DDP hooks wait for their collectives (sim/README.md)
# GPU work runs this much slower while a collective is in flight beside it (NCCL's kernels share the SMs and the
# memory bandwidth): the mean compute slowdown of overlapped execution measured by Lee et al. 2025 (arXiv
# 2507.03114, abstract: 18.9% on average, 40.0% at most, GPT and LLaMA on 4 A100, H100, MI250 and MI210)
OVERLAP_COMPUTE_SLOWDOWN = 0.189
OPTIMIZERS = SIMULATED  # a live view of the registry: the simulated optimizers (read by sim.cli)
GRAD_BITS = {"fp32": 32, "fp16": 16, "bf16": 16}  # what a full-precision gradient element travels as

# GPU memory traffic per element (bytes) of the element-wise kernels, counted from the unfused PyTorch
# operations of each algorithm: Birder's worker step (Algorithm 1 lines 2-10: read g, m, b, e and the
# uniforms, write m, b, e, then pack), the server re-quantization, and unpacking signs back to float32.
COMPRESS_BYTES = 48.0
SERVER_BYTES = 24.0
DECOMPRESS_BYTES = 4.125


def policy(optimizer: str, model_name: str, warmup_fraction: float | None = None,
           marsit_period: int | None = None) -> tuple[StepKind, ...]:
    """The step kinds of ``optimizer`` and their shares (its ``birder_ref.registry`` spec)."""
    return simulated_spec(optimizer).step_kinds(model_name, warmup_fraction, marsit_period)


# ------------------------------------------------------------------------------------------------- buckets
@dataclass(frozen=True)
class Bucket:
    elements: int
    ready_layer: int  # index (in backward order) of the layer whose backward completes the bucket


def ddp_buckets(model: ModelProfile, bytes_per_element: int = 4, cap_bytes: float = BUCKET_CAP_BYTES,
                first_bytes: float = FIRST_BUCKET_BYTES) -> tuple[Bucket, ...]:
    """DDP's bucket assignment: tensors in reverse registration order, a bucket closes once it reaches its cap
    (1 MB for the first, 25 MB after), tensors are never split (torch/csrc/distributed/c10d/reducer.cpp). Other
    frameworks fuse the same way with their own caps (``framework_preset``)."""
    buckets, size, elements, cap = [], 0, 0, first_bytes
    backward = list(reversed(model.layers))
    for index, layer in enumerate(backward):
        for tensor in reversed(layer.tensors):
            size += tensor * bytes_per_element
            elements += tensor
            if size >= cap:
                buckets.append(Bucket(elements, index))
                size, elements, cap = 0, 0, cap_bytes
    if elements:
        buckets.append(Bucket(elements, len(backward) - 1))
    return tuple(buckets)


def split_buckets(model: ModelProfile, starts: tuple[int, ...]) -> tuple[Bucket, ...]:
    """Fusion groups by parameter index (MindSpore's all_reduce_fusion_config): tensor indices in registration
    order, a group from each start to the next; a group is ready when the backward pass reaches the layer of
    its first tensor, so the last group is all-reduced first."""
    layer_of, sizes = [], []
    for index, layer in enumerate(model.layers):
        layer_of += [index] * len(layer.tensors)
        sizes += list(layer.tensors)
    if starts and starts[-1] >= len(sizes):
        raise ValueError(f"{model.name}: fusion split {list(starts)} past its {len(sizes)} tensors")
    bounds = (0, *starts, len(sizes))
    last = len(model.layers) - 1
    groups = zip(bounds[:-1], bounds[1:], strict=True)
    return tuple(Bucket(sum(sizes[lo:hi]), last - layer_of[lo]) for lo, hi in reversed(list(groups)))


# ------------------------------------------------------------------------------------------------ kernels
def _kernel_seconds(gpu: str, elements: float, bytes_per_element: float, launches: int) -> float:
    spec = GPUS[gpu]
    return elements * bytes_per_element / (spec["hbm_gbytes_per_s"] * 1e9) + launches * spec["kernel_launch_us"] * 1e-6


def quantize_kernels(scheme: str, cluster: Cluster, elements: int) -> tuple[float, float]:
    """Birder and 1-bit Adam's kernels: quantize, re-quantize the chunks a GPU combines as a server, unpack.

    Birder hierarchical quantizes only its 1/G shard after the intra-node reduce-scatter; the other schemes
    and 1-bit Adam (``scheme`` "") quantize the whole buffer; every scheme unpacks the whole result."""
    gpu, g, p = cluster.gpu, cluster.gpus_per_node, cluster.n_gpus
    worker = elements / g if scheme == "hierarchical" else elements
    server = elements / p * (cluster.n_nodes if scheme == "hierarchical" else p)  # the chunks a GPU combines
    compress = _kernel_seconds(gpu, worker, COMPRESS_BYTES, 8) + _kernel_seconds(gpu, server, SERVER_BYTES, 6)
    return compress, _kernel_seconds(gpu, elements, DECOMPRESS_BYTES, 2)


def sign_merge_kernels(_scheme: str, cluster: Cluster, elements: int) -> tuple[float, float]:
    """Marsit's kernels: quantize the whole buffer once, then each of the p - 1 reduce-scatter hops merges the
    chunk it received with its own (D/p elements: unpack, combine, re-quantize, like a server's
    re-quantization), one kernel sequence per hop; the all-gather hops only forward signs. The hook blocks and
    its hops run one after another, so charging the merges before the ring or between its hops gives the same
    iteration time."""
    gpu, p = cluster.gpu, cluster.n_gpus
    merges = (p - 1) * _kernel_seconds(gpu, elements / p, SERVER_BYTES, 3)
    return (_kernel_seconds(gpu, elements, COMPRESS_BYTES, 4) + merges,
            _kernel_seconds(gpu, elements, DECOMPRESS_BYTES, 2))


KERNELS = {"quantize": quantize_kernels, "sign_merge": sign_merge_kernels}  # by OptimizerSpec.compression


def compression_kernels(optimizer: str, scheme: str, cluster: Cluster, elements: int) -> tuple[float, float]:
    """GPU seconds to compress (before sending) and decompress (after) one buffer of ``elements`` gradients,
    with the kernels of the optimizer's spec (``scheme`` "" for optimizers without Birder's schemes)."""
    return KERNELS[simulated_spec(optimizer).compression](scheme, cluster, elements)


# ---------------------------------------------------------------------------------------------- iteration
@dataclass(frozen=True)
class Workload:
    model: ModelProfile
    batch_per_gpu: int
    optimizer: str
    scheme: str = "hierarchical"
    grad_bits: int = 32  # bits per element of full-precision gradients on the wire (fp32 32, fp16/bf16 16)
    accumulation_steps: int = 1  # micro-batches per optimizer step: forward + backward K times, one all-reduce
    hook_blocks_backward: bool = HOOK_BLOCKS_BACKWARD  # a 1-bit hook holds up the backward pass until it returns


@dataclass(frozen=True)
class StepTime:
    iteration_s: float
    compute_s: float
    compression_s: float
    intra_node_bytes_per_gpu: float
    inter_node_bytes_per_gpu: float
    incast_timeouts: float  # expected TCP retransmission timeouts the step's collectives lose
    contention_s: float = 0.0  # GPU work's extra time while collectives ran beside it (OVERLAP_COMPUTE_SLOWDOWN)


def _step(cluster: Cluster, work: Workload, kind: StepKind, compute_s: float, trace: list | None = None) -> StepTime:
    """Simulate one optimizer step of ``kind``: K - 1 micro-batches of forward + backward without communication
    (DDP's no_sync), then forward, backward with overlapped bucket collectives, optimizer step.

    ``compute_s`` is one measured node's pace; each step runs at its slowest GPU's (sim/stragglers.py), so every
    layer's backward, and the bucket collectives waiting on it, ends that much later. ``trace``: a list that
    receives the step's events as (track, name, start_s, duration_s, args) in the order they end (``sim.trace``):
    track ``gpu`` for work on the GPU, ``intra``/``inter`` for each NCCL operation on the link classes it crosses."""
    compute_s *= straggler_factor(cluster.n_gpus, cluster.gpus_per_node, cluster.straggler_cv(work.accumulation_steps))
    framework = framework_preset(cluster.framework)
    if framework.whole_variables and framework.pattern == "summation-servers" and cluster.n_nodes > 1:
        # each variable whole on one server: spread over as many servers as carry the busiest one's share
        servers = cluster.servers or cluster.n_nodes * cluster.nic.count
        cluster = replace(cluster, servers=whole_variable_servers(work.model.tensors, servers))
    env = simpy.Environment()
    gpu = simpy.Resource(env, capacity=1)
    fabric = Fabric(env, cluster)
    model = work.model
    layers = list(reversed(model.layers))
    total_flops = model.forward_flops or 1.0
    forward_s = compute_s / (1 + BACKWARD_TO_FORWARD)
    backward_s = compute_s - forward_s
    n_params = model.n_params
    spec = simulated_spec(work.optimizer)
    opt_s = _kernel_seconds(cluster.gpu, n_params, spec.step_bytes_per_element, 4)
    sharded = framework.pattern == "sharded"
    if sharded:  # each GPU updates its shard of the parameters
        shard = cluster.gpus_per_node if framework.shard_group == "node" else cluster.n_gpus
        opt_s = _kernel_seconds(cluster.gpu, n_params / shard, spec.step_bytes_per_element, 4)
        schedules = lru_cache(maxsize=None)(lambda elements: sharded_schedules(cluster, elements, work.grad_bits))
    split = framework.split_of(model.name)
    buckets = split_buckets(model, split) if split is not None else \
        ddp_buckets(model, 4, framework.bucket_cap_bytes, framework.first_bucket_bytes)
    layer_done = [env.event() for _ in layers]
    ready_at = [math.nan] * len(layers)  # when each layer's gradients were ready (a framework's cycle counts from)
    compressed = not kind.full_precision
    scheme = work.scheme if spec.takes_scheme else ""
    totals = {"compression": 0.0, "intra": 0.0, "inter": 0.0, "contention": 0.0}
    record = trace.append if trace is not None else None

    def on_gpu(name: str, seconds: float, **args):
        # ``seconds`` of GPU work, at 1 / (1 + OVERLAP_COMPUTE_SLOWDOWN) of its pace while a collective is in flight
        with gpu.request() as turn:
            yield turn
            fabric.set_gpu_busy(True)  # a collective in flight beside it may slow (Cluster.collective_pace)
            start, left = env.now, seconds
            while left > 0:
                slowed = left * (1 + OVERLAP_COMPUTE_SLOWDOWN)
                if env.now < fabric.busy_until < env.now + slowed:  # the collective ends first
                    span = fabric.busy_until - env.now
                    yield env.timeout(span)
                    left -= span / (1 + OVERLAP_COMPUTE_SLOWDOWN)
                    totals["contention"] += span * OVERLAP_COMPUTE_SLOWDOWN / (1 + OVERLAP_COMPUTE_SLOWDOWN)
                elif env.now < fabric.busy_until:
                    yield env.timeout(slowed)
                    totals["contention"] += slowed - left
                    left = 0.0
                else:
                    done, begun = env.timeout(left), env.now
                    yield done | fabric.started  # a collective may start before this work ends
                    left = 0.0 if done.processed else left - (env.now - begun)
            fabric.set_gpu_busy(False)
            if record:
                record(("gpu", name, start, env.now - start, args))

    def communicate(elements: int, given: tuple | None = None):
        # ``given``: (schedule, the cluster that times it), a sharded framework's collective; else the step's own
        schedule, on = given or (step_schedule(work.optimizer, cluster, elements, work.scheme, kind.full_precision,
                                               work.grad_bits), cluster)
        t = traffic(schedule, cluster.rails)
        totals["intra"] += t.intra_node_bytes_per_gpu
        totals["inter"] += t.inter_node_bytes_per_gpu
        compress = decompress = 0.0
        if compressed:
            compress, decompress = compression_kernels(work.optimizer, scheme, cluster, elements)
            totals["compression"] += compress + decompress
            yield from on_gpu("compress", compress, elements=elements)
        begun = env.now
        yield env.process(fabric.run(schedule, on))
        if record:  # the operations one after another, as Fabric.run times them (one timeout: the same sum)
            spans = operation_spans(schedule, on)
            # a collective slowed beside GPU work (Cluster.collective_pace) stretches each operation alike
            stretch = 1.0 if fabric.pace >= 1 else (env.now - begun) / max(sum(op.seconds for *_, op in spans), 1e-300)
            start = begun
            for name, tracks, op in spans:
                for track in tracks:
                    record((track, name, start, op.seconds * stretch, {
                        "elements": elements, "algorithm": op.algorithm, "protocol": op.protocol}))
                start += op.seconds * stretch
        if given is None and (not spec.compressed or (kind.full_precision and not spec.own_full_precision)):
            nbytes = elements * work.grad_bits / 8
            for name, staged in (("host staging", host_staging_s(cluster, nbytes)),  # an MPI backend's copies, sums
                                 ("rpc copies", rpc_copy_s(cluster, nbytes))):  # a parameter server's gRPC stack
                if staged > 0:
                    start = env.now
                    yield env.timeout(staged)
                    if record:
                        record(("host", name, start, staged, {"elements": elements}))
        if compressed:
            yield from on_gpu("decompress", decompress, elements=elements)

    blocking = kind.comm == "bucketed" and compressed and work.hook_blocks_backward
    ready = {bucket.ready_layer: [] for bucket in buckets}
    for bucket in buckets:
        ready[bucket.ready_layer].append(bucket)

    def backward():
        # a layer's share of the backward pass is its share of forward FLOPs (no FLOPs: no time)
        for index, layer in enumerate(layers):
            yield from on_gpu(f"backward {layer.name}", backward_s * layer.flops / total_flops)
            ready_at[index] = env.now
            layer_done[index].succeed()
            if blocking:  # the hook runs on the autograd thread: backward resumes when it returns
                for bucket in ready.get(index, ()):
                    yield from communicate(bucket.elements)

    def comm_stream():
        if kind.comm == "bucketed" and not blocking:
            start = env.now  # the backward pass starts; a framework's cycles tick from here
            for bucket in buckets:
                layer = bucket.ready_layer if framework.overlaps_backward else -1
                yield layer_done[layer]
                if framework.cycle > 0:
                    # enqueued at the loop's first cycle after the bucket was ready, not after the previous
                    # collective ended: Horovod's background loop only enqueues (operations.cc RunLoopOnce; the
                    # GPU's finalizer threads wait), so every bucket ready by a cycle starts as the stream frees
                    ticks = math.ceil((ready_at[layer] - start) / framework.cycle - 1e-12)
                    yield env.timeout(max(0.0, start + ticks * framework.cycle - env.now))
                yield from communicate(bucket.elements)

    def sharded_iteration():
        # a sharded framework (presets/frameworks.toml; sim.system.sharded_schedules), the model's layers as its
        # units: each micro-batch all-gathers a unit's parameters before its forward, the next unit's gather
        # overlapping this one's forward (the first cannot overlap: FSDP notes, implicit forward prefetching);
        # in backward (unless kept from the forward: every unit under SHARD_GRAD_OP, the first to run back under the
        # others) the next unit's gather is issued before this unit's gradients are computed
        # (BackwardPrefetch.BACKWARD_PRE), and each unit's gradients are reduced after them. The collectives run one at
        # a time in the order issued; the optimizer updates this GPU's shard.
        issued = simpy.Store(env)

        def collectives():
            while True:
                elements, given, done = yield issued.get()
                yield from communicate(elements, given)
                done.succeed()

        def issue(index: int, which: int):
            elements = sum(model.layers[index].tensors)
            done = env.event()
            if elements:
                issued.put((elements, schedules(elements)[which], done))
            else:
                done.succeed()
            return done

        env.process(collectives())
        units = range(len(model.layers))
        for _ in range(work.accumulation_steps):
            gathered = {0: issue(0, 0)}
            for i in units:
                yield gathered[i]
                if i + 1 in units:
                    gathered[i + 1] = issue(i + 1, 0)
                yield from on_gpu(f"forward {model.layers[i].name}", forward_s * model.layers[i].flops / total_flops)
            order = units[::-1]
            # FSDP does not reshard its root unit after forward, as the backward needs it at once (FSDP1's
            # _post_forward_reshard, FSDP2's reshard_after_forward=None); the units here are the layers, so the
            # last one, whose backward runs first, stands for the root and is not gathered again (torchtitan keeps
            # its last block alike; the root's input layer, gathered again here, is in ``unmodelled``)
            gathered = {}
            reduced = []
            for j, i in enumerate(order):
                if framework.gather_in_backward:
                    if i in gathered:
                        yield gathered[i]
                    if j + 1 < len(order):
                        gathered[order[j + 1]] = issue(order[j + 1], 0)
                yield from on_gpu(f"backward {model.layers[i].name}",
                                  backward_s * model.layers[i].flops / total_flops)
                reduced.append(issue(i, 1))
            yield env.all_of(reduced)
        yield from on_gpu("optimizer step", opt_s)

    def iteration():
        if work.accumulation_steps > 1:
            yield from on_gpu("micro-batches under no_sync", (work.accumulation_steps - 1) * compute_s)
        yield from on_gpu("forward", forward_s)
        done = [env.process(backward()), env.process(comm_stream())]
        yield env.all_of(done)
        if kind.comm == "after_backward":
            yield from communicate(n_params)
        yield from on_gpu("optimizer step", opt_s)

    env.process(sharded_iteration() if sharded else iteration())
    env.run()
    return StepTime(env.now, work.accumulation_steps * compute_s + opt_s, totals["compression"], totals["intra"],
                    totals["inter"], fabric.incast_timeouts, totals["contention"])


@dataclass(frozen=True)
class Prediction:
    throughput: float
    iteration_s: float
    compute_s: float
    exposed_communication_s: float
    compression_s: float
    inter_node_bytes_per_gpu: float
    intra_node_bytes_per_gpu: float
    scale_efficiency: float
    single_node_throughput: float
    incast_timeouts: float  # expected TCP retransmission timeouts per iteration (averaged over step kinds)
    contention_s: float  # GPU work's extra time while collectives ran beside it (OVERLAP_COMPUTE_SLOWDOWN)
    multinode_loss_added_s: float  # step time the multi-node loss scale adds (multinode_loss_added_s)
    steps: tuple[tuple[str, float, float], ...]  # (kind, share, iteration_s)

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("throughput", "iteration_s", "compute_s", "exposed_communication_s",
                                             "compression_s", "inter_node_bytes_per_gpu",
                                             "intra_node_bytes_per_gpu", "scale_efficiency",
                                             "single_node_throughput", "incast_timeouts", "contention_s",
                                             "multinode_loss_added_s")}
        out["steps"] = [{"kind": k, "share": s, "iteration_s": t} for k, s, t in self.steps]
        return out


def _average(cluster: Cluster, work: Workload, kinds: tuple[StepKind, ...], compute_s: float,
             traces: dict | None = None) -> tuple[float, list[tuple[StepKind, StepTime]]]:
    """The share-weighted iteration time of the step kinds; ``traces``: a dict that receives each kind's events."""
    if traces is not None:
        traces.update({k.name: [] for k in kinds if k.share > 0})
    parts = [(k, _step(cluster, work, k, compute_s, None if traces is None else traces[k.name]))
             for k in kinds if k.share > 0]
    return sum(k.share * t.iteration_s for k, t in parts), parts


def default_compute_s(work: Workload, gpu: str) -> float:
    """Forward + backward seconds of one GPU's batch from the per-GPU achieved FLOP rates (gpus.toml)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; choose one of {', '.join(GPUS)}")
    rate = GPUS[gpu][f"{work.model.family}_tflops"] * 1e12
    return (1 + BACKWARD_TO_FORWARD) * work.model.forward_flops * work.batch_per_gpu / rate


def clear_calibrations() -> None:
    """Forget the calibrations and collective times solved so far (so that a timing includes them)."""
    _calibrated.cache_clear()
    from sim import system

    system._collective.cache_clear()


# one node sends nothing between nodes: its NIC never matters, so calibrations share this stand-in
ONE_NODE_NIC = Nic("one-node", "ib", 1e9, 1.0, 0.0)


def calibrate_compute_s(cluster: Cluster, work: Workload, kinds: tuple[StepKind, ...],
                        single_node_throughput: float) -> tuple[float, float]:
    """(compute, residual): the forward + backward time of one micro-batch at which one node of ``cluster``
    reaches ``single_node_throughput`` (samples/s), and the seconds per step the simulated node still lacks there.

    The simulated iteration time grows monotonically with compute time, continuously except where a framework's
    cycle (presets/frameworks.toml ``cycle_ms``) quantizes its launches, so a bracketing root finder (regula
    falsi) finds it (residual 0); across such a jump no compute time gives the measured node: bisection stops at the
    jump's faster side, and the residual (less than one cycle) is the wait the simulation's phase of the framework's
    loop misses, carried as a fixed wait per step so that the node is the measurement. One node sends nothing
    between nodes, so the answer depends on the node (GPUs, intra-node fabric) and the workload only: it is
    cached under those, whatever the NICs, the switch and the GPUs' spread (the straggler factor of one node is its
    own GPUs' over its own GPUs': exactly 1 whatever the spread and jitter). Birder's ``ps`` scheme is the
    exception: its server is a rank off the node, so even one node's step crosses the NIC, which is kept.
    """
    return _calibrated(_measured_node(cluster, work), work, kinds, single_node_throughput)


def _measured_node(cluster: Cluster, work: Workload) -> Cluster:
    """One node of ``cluster`` as a calibration sees it: no spread, no jitter, and no NIC unless the step sends
    through it on one node (Birder's ``ps`` scheme: the server is off the node) (``calibrate_compute_s``)."""
    one = replace(cluster.with_nodes(1), name="", provenance=(), step_jitter_cv=0.0, gpu_speed_cv=0.0)
    server_off_node = simulated_spec(work.optimizer).takes_scheme and work.scheme == "ps"
    return one if server_off_node else replace(one, nic=ONE_NODE_NIC)


def increasing_root(f, lo: float, f_lo: float, hi: float, f_hi: float, xtol: float,
                    max_steps: int = 200) -> tuple[float, float]:
    """A root of a non-decreasing ``f`` bracketed by f(lo) = f_lo < 0 < f_hi = f(hi): the Illinois variant of regula
    falsi (Dowell & Jarratt, BIT 11, 1971), which halves the value kept at an end that two steps in a row left in
    place, so both ends close in (order ~1.44). On a piecewise-linear ``f`` a step from two points of the root's piece
    lands on the root. Stops at an exact zero, when the bracket is narrower than ``xtol``, or after ``max_steps``,
    and returns the point of smallest |f| it evaluated (an end included) with that f, the residual the caller
    checks."""
    if not (lo < hi and f_lo < 0 < f_hi):
        raise ValueError(f"increasing_root: need lo < hi and f(lo) < 0 < f(hi), got f({lo!r}) = {f_lo!r}, "
                         f"f({hi!r}) = {f_hi!r}")
    weight_lo, weight_hi = f_lo, f_hi  # the values the secant uses, halved where an end stays put
    kept = 0  # +1: the last step moved lo (hi stayed), -1: it moved hi
    best, best_f = (lo, f_lo) if -f_lo <= f_hi else (hi, f_hi)
    for _ in range(max_steps):
        if hi - lo <= xtol:
            break
        x = (lo * weight_hi - hi * weight_lo) / (weight_hi - weight_lo)
        if not lo < x < hi:  # rounding put the secant's root on an end: halve the bracket instead
            x = (lo + hi) / 2
        fx = f(x)
        if abs(fx) < abs(best_f):
            best, best_f = x, fx
        if fx == 0:
            break
        if fx < 0:
            lo, f_lo, weight_lo = x, fx, fx
            weight_hi = weight_hi / 2 if kept == 1 else f_hi
            kept = 1
        else:
            hi, f_hi, weight_hi = x, fx, fx
            weight_lo = weight_lo / 2 if kept == -1 else f_lo
            kept = -1
    return best, best_f


@lru_cache(maxsize=4096)
def _calibrated(one: Cluster, work: Workload, kinds: tuple[StepKind, ...], single_node_throughput: float
                ) -> tuple[float, float]:
    target = one.n_gpus * work.batch_per_gpu * work.accumulation_steps / single_node_throughput
    at_zero = _average(one, work, kinds, 0.0)[0]
    if at_zero > target:
        path = ("the number, the intra-node fabric or the network to the parameter server (Birder's ps scheme "
                "reaches it through a NIC even on one node)" if one.nic is not ONE_NODE_NIC
                else "the number or the intra-node fabric")
        raise ValueError(
            f"single_node_throughput {single_node_throughput:g} is faster than this cluster's communication "
            f"alone allows on one node; check {path}")
    hi = target / work.accumulation_steps
    at_hi = _average(one, work, kinds, hi)[0]
    if at_hi <= target:  # no time left for communication at all
        return hi, target - at_hi
    # the iteration time is piecewise linear in the compute time (every GPU event scales with it, every collective
    # does not): regula falsi meets the root in a few steps where bisection took ~30
    if at_zero == target:  # communication alone is the measured node
        return 0.0, 0.0
    root, residual = increasing_root(lambda x: _average(one, work, kinds, x)[0] - target, 0.0, at_zero - target,
                                     hi, at_hi - target, xtol=1e-12 * hi)
    if abs(residual) <= 1e-9 * target:
        return root, 0.0
    # a jump (a framework's cycle quantizes its launches): no compute time gives the measured node; bisect to the
    # jump and keep its faster side
    lo = 0.0
    for _ in range(48):
        mid = (lo + hi) / 2
        if _average(one, work, kinds, mid)[0] < target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return lo, max(0.0, target - _average(one, work, kinds, lo)[0])


def multinode_loss_added_s(iteration_s: float, one_node_s: float, scale: float) -> float:
    """The step time a multi-node loss scale adds (``Cluster.multinode_loss_scale``, presets/multinode_loss.toml):
    ``(scale - 1)`` times the simulated multi-node loss, the step's time beyond one node's step for the same work
    per GPU (``one_node_s``: the measured node's, or the simulated one), none where there is no loss. In throughput
    terms, 1 / X_scaled = 1 / X + (scale - 1) max(0, 1 / X - 1 / linear): what validation fits it with."""
    return (scale - 1) * max(0.0, iteration_s - one_node_s)


def carried_node(single_node_accumulation_steps: int | None, accumulation_steps: int) -> bool:
    """Whether the measured node ran at other micro-batches per optimizer step than the predicted run (its
    throughput is then carried to this run's accumulation, not taken as it stands)."""
    return single_node_accumulation_steps not in (None, accumulation_steps)


def predict(cluster: Cluster, model: str | None = None, params: int | None = None, batch_per_gpu: int = 32,
            optimizer: str = "sgdm", scheme: str = "hierarchical", single_node_throughput: float | None = None,
            warmup_fraction: float | None = None, marsit_period: int | None = None, grad_dtype: str = "fp32",
            accumulation_steps: int = 1, hook_blocks_backward: bool = HOOK_BLOCKS_BACKWARD,
            seq_len: int | None = None, traces: dict | None = None,
            single_node_accumulation_steps: int | None = None) -> Prediction:
    """Predict one training configuration on ``cluster`` (the library behind ``birder predict``).

    Throughput counts every micro-batch: ``n_gpus * batch_per_gpu * accumulation_steps`` samples per step.
    ``single_node_accumulation_steps``: the micro-batches per optimizer step of the run that measured
    ``single_node_throughput`` (None: ``accumulation_steps``), as when a fixed global batch is spread over more
    nodes with less accumulation. Compute is calibrated on that run's step, whose once-per-step costs (the
    optimizer, one node's reduction) its micro-batches share, and the returned ``single_node_throughput`` is the
    measured node carried to ``accumulation_steps`` (what linear scaling multiplies).
    ``seq_len``: tokens per sample of a ``params`` model (None: 1); a built-in model has its own, and another
    is refused. ``traces``: a dict that receives, per step kind, the events of its simulated step (``sim.trace``)."""
    if (model is None) == (params is None):
        raise ValueError("give exactly one of model or params")
    if seq_len is not None and not (isinstance(seq_len, int) and not isinstance(seq_len, bool) and seq_len >= 1):
        raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
    profile = model_profile(model) if model is not None else synthetic(params, tokens=seq_len or 1)
    if model is not None and seq_len is not None and seq_len != profile.tokens:
        raise ValueError(f"{model} has {profile.tokens} tokens per sample ({profile.tokens_source}), not seq_len "
                         f"{seq_len}: a built-in model carries its own sequence length")
    if not (isinstance(batch_per_gpu, int) and not isinstance(batch_per_gpu, bool) and batch_per_gpu >= 1):
        raise ValueError(f"batch_per_gpu must be a positive integer, got {batch_per_gpu!r}")
    if not (isinstance(accumulation_steps, int) and not isinstance(accumulation_steps, bool)
            and accumulation_steps >= 1):
        raise ValueError(f"accumulation_steps must be a positive integer, got {accumulation_steps!r}")
    if single_node_throughput is not None and not (isinstance(single_node_throughput, int | float)
                                                   and math.isfinite(single_node_throughput)
                                                   and single_node_throughput > 0):
        raise ValueError(f"single_node_throughput must be a positive finite number, got {single_node_throughput}")
    if single_node_accumulation_steps is not None:
        if single_node_throughput is None:
            raise ValueError("single_node_accumulation_steps describes the measured node: give single_node_throughput")
        if not (isinstance(single_node_accumulation_steps, int) and not isinstance(single_node_accumulation_steps, bool)
                and single_node_accumulation_steps >= 1):
            raise ValueError("single_node_accumulation_steps must be a positive integer, got "
                             f"{single_node_accumulation_steps!r}")
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    if grad_dtype not in GRAD_BITS:
        raise ValueError(f"grad_dtype must be one of {', '.join(GRAD_BITS)}, got {grad_dtype!r}")
    check_optimizer_framework(optimizer, cluster.framework)
    work = Workload(profile, batch_per_gpu, optimizer, scheme, GRAD_BITS[grad_dtype], accumulation_steps,
                    bool(hook_blocks_backward))
    kinds = policy(optimizer, profile.name, warmup_fraction, marsit_period)
    measured_work = replace(work, accumulation_steps=single_node_accumulation_steps) if carried_node(
        single_node_accumulation_steps, accumulation_steps) else work
    residual_s = 0.0  # the measured node's step beyond the simulated one (a framework cycle's jump)
    if single_node_throughput is not None:
        compute_s, residual_s = calibrate_compute_s(cluster, measured_work, kinds, single_node_throughput)
    else:
        compute_s = default_compute_s(work, cluster.gpu)
    iteration_s, parts = _average(cluster, work, kinds, compute_s, traces)
    if residual_s:
        parts = [(k, replace(t, iteration_s=t.iteration_s + residual_s)) for k, t in parts]
        iteration_s += residual_s
        if traces is not None:
            for k, t in parts:
                traces[k.name].append(("overhead", "the measured node's step beyond the simulated (the framework "
                                       "loop's cycle phase)", t.iteration_s - residual_s, residual_s, {}))
    samples_per_gpu = batch_per_gpu * accumulation_steps
    if single_node_throughput is None:
        one_node_s = _average(cluster.with_nodes(1), work, kinds, compute_s)[0]
        single = cluster.gpus_per_node * samples_per_gpu / one_node_s
    elif measured_work is not work:  # the measured node at this run's accumulation, as the calibration sees it
        single = cluster.gpus_per_node * samples_per_gpu / (_average(_measured_node(cluster, work), work, kinds,
                                                                     compute_s)[0] + residual_s)
    else:
        single = single_node_throughput
    added = multinode_loss_added_s(iteration_s, cluster.gpus_per_node * samples_per_gpu / single,
                                   cluster.multinode_loss_scale) if cluster.n_nodes > 1 else 0.0
    if added and traces is not None:
        for k, t in parts:
            traces[k.name].append(("overhead", "multi-node loss beyond the simulated (multinode_loss_scale)",
                                   t.iteration_s, added, {"multinode_loss_scale": cluster.multinode_loss_scale}))
    iteration_s += added
    samples = cluster.n_gpus * samples_per_gpu
    throughput = samples / iteration_s

    def mean(field: str) -> float:
        return sum(k.share * getattr(t, field) for k, t in parts)

    compute, compression, contention = mean("compute_s"), mean("compression_s"), mean("contention_s")
    return Prediction(
        throughput=throughput,
        iteration_s=iteration_s,
        compute_s=compute,
        exposed_communication_s=max(0.0, iteration_s - compute - compression - contention - added),
        compression_s=compression,
        inter_node_bytes_per_gpu=mean("inter_node_bytes_per_gpu"),
        intra_node_bytes_per_gpu=mean("intra_node_bytes_per_gpu"),
        scale_efficiency=throughput / (cluster.n_nodes * single),
        single_node_throughput=single,
        incast_timeouts=mean("incast_timeouts"),
        contention_s=contention,
        multinode_loss_added_s=added,
        steps=tuple((k.name, k.share, t.iteration_s + added) for k, t in parts),
    )


def with_constants(cluster: Cluster, **nic_fields) -> Cluster:
    """The cluster with some NIC constants replaced (used by the fit)."""
    return replace(cluster, nic=replace(cluster.nic, **nic_fields))

