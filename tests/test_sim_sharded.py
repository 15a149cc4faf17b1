"""Sharded data parallelism (PyTorch FSDP, ZeRO-3; presets/frameworks.toml pattern "sharded"): what each unit's
collectives move, when they run, and what they refuse (sim.workload ``_step``, sim.system ``sharded_schedules``)."""

import numpy as np
import pytest

from birder_ref.execute import ByteLog, run_phase
from birder_ref.schedules import Layout, hybrid_shard_reduce
from sim.hardware import FRAMEWORKS, cluster
from sim.system import collective_time, sharded_schedules, unmodelled
from sim.workload import GRAD_BITS, predict

SHARDED = [name for name, spec in FRAMEWORKS.items() if spec.get("pattern") == "sharded"]
WORK = dict(params=1_200_000_000, seq_len=1024, batch_per_gpu=4, optimizer="adam", grad_dtype="bf16")


def test_the_sharded_frameworks_are_fsdps_three_strategies():
    assert SHARDED == ["fsdp", "fsdp-hybrid", "fsdp-grad-op"]
    for name in SHARDED:
        assert "ShardingStrategy" in FRAMEWORKS[name]["source"]


def test_each_strategy_moves_its_own_multiple_of_ddps_bytes_between_nodes():
    """Per GPU and step, a ring all-reduce (DDP's choice here: one NIC per node; with several NCCL may take a tree and
    the ratios move a few percent) moves 2(p-1)/p of the gradient; FULL_SHARD all-gathers each unit twice and
    reduce-scatters it once, (p-1)/p each, but keeps the unit that runs back first from its forward: 1.5x less half
    that unit's share (a --params model's 12 equal layers: 35/24); SHARD_GRAD_OP gathers once: 1x; HYBRID_SHARD
    gathers and reduce-scatters inside the node and all-reduces each shard across the nodes: 2(n-1)/n of the model
    per node between nodes against the flat ring's 2(p-1)/p, and inside the node (g-1)/g for the reduce-scatter and
    each gather. With accumulation every micro-batch gathers and reduce-scatters again (no no_sync), where DDP
    all-reduces once."""
    ddp, full, hybrid, grad_op = (predict(cluster("25gbe", 4, 8, framework=f), **WORK)
                                  for f in ("ddp", "fsdp", "fsdp-hybrid", "fsdp-grad-op"))
    assert full.inter_node_bytes_per_gpu == pytest.approx((1.5 - 1 / 24) * ddp.inter_node_bytes_per_gpu, rel=1e-6)
    assert grad_op.inter_node_bytes_per_gpu == pytest.approx(ddp.inter_node_bytes_per_gpu, rel=1e-6)
    n, g, p = 4, 8, 32
    assert hybrid.inter_node_bytes_per_gpu == pytest.approx(
        ddp.inter_node_bytes_per_gpu * ((n - 1) / n) / ((p - 1) / p), rel=1e-6)
    model_bytes = ddp.inter_node_bytes_per_gpu * g / (2 * (p - 1) / p)
    assert hybrid.intra_node_bytes_per_gpu == pytest.approx((1 + 23 / 12) * (g - 1) / g * model_bytes, rel=1e-6)
    assert full.throughput < grad_op.throughput  # comm-bound on 25 GbE: the third collective costs
    four = predict(cluster("25gbe", 4, 8, framework="fsdp"), **{**WORK, "accumulation_steps": 4})
    assert four.inter_node_bytes_per_gpu == pytest.approx(4 * full.inter_node_bytes_per_gpu, rel=1e-9)
    ddp4 = predict(cluster("25gbe", 4, 8), **{**WORK, "accumulation_steps": 4})
    assert ddp4.inter_node_bytes_per_gpu == pytest.approx(ddp.inter_node_bytes_per_gpu, rel=1e-9)


@pytest.mark.parametrize("framework", SHARDED)
def test_collectives_run_one_at_a_time_and_a_unit_computes_only_once_gathered(framework):
    """The trace of one step: no two collectives overlap (one communicator runs them in the order issued); the first
    forward all-gather precedes all GPU work (nothing to hide it behind); unit i's forward, and unless its
    parameters are kept (every unit under SHARD_GRAD_OP, the first one back under the others) its backward, starts
    only after its own gather ended; the step lasts at least the sum of its collectives and at least the compute
    plus the first gather and the last reduction."""
    c = cluster("25gbe", 2, 8, framework=framework)
    traces = {}
    step = predict(c, **WORK, traces=traces)
    (events,) = traces.values()
    # a collective's operations are recorded one after another, each once per link class it crosses (same start,
    # same duration): any two distinct operations that overlap ran at once
    ops = sorted({(e[2], e[3], e[1]) for e in events if e[0] in ("intra", "inter")})
    for (start, seconds, _), (later, _, _) in zip(ops, ops[1:], strict=False):
        assert later >= start + seconds - 1e-12
    units = 12  # a --params model's layers
    gathers_in_backward = framework != "fsdp-grad-op"
    reduction_ops = 2 if framework == "fsdp-hybrid" else 1  # HYBRID_SHARD: a reduce-scatter, then an all-reduce
    assert len(ops) == (2 * units - 1 if gathers_in_backward else units) + reduction_ops * units
    gathers = [start + seconds for start, seconds, name in ops if name == "all_gather"]
    assert len(gathers) == (2 * units - 1 if gathers_in_backward else units)
    forward = sorted((e for e in events if e[1].startswith("forward")), key=lambda e: e[2])
    backward = sorted((e for e in events if e[1].startswith("backward")), key=lambda e: e[2])
    assert [e[1] for e in forward] == [f"forward layer{i}" for i in range(units)]
    assert [e[1] for e in backward] == [f"backward layer{i}" for i in reversed(range(units))]
    assert forward[0][2] >= gathers[0] - 1e-12 and ops[0][0] == 0.0  # nothing hides the first gather
    for i, e in enumerate(forward):
        assert e[2] >= gathers[i] - 1e-12
    # the unit that runs back first keeps its forward's parameters: the second one back waits for the first
    # gather of the backward, and so on
    for i, e in enumerate(backward[1:] if gathers_in_backward else ()):
        assert e[2] >= gathers[units + i] - 1e-12
    (gather, on), (reduce, reduce_on) = sharded_schedules(c, 100_000_000, GRAD_BITS["bf16"])
    first, last = collective_time(gather, on), collective_time(reduce, reduce_on)
    busy = sum(seconds for _, seconds, _ in ops)
    assert step.iteration_s >= busy * (1 - 1e-9)
    assert step.iteration_s >= (step.compute_s + first + last) * (1 - 1e-9)


@pytest.mark.parametrize("framework", SHARDED)
def test_one_node_gives_back_its_measured_throughput(framework):
    """The node measured runs the same sharded collectives over its own fabric: calibrated on it, one node
    predicts exactly the figure it was given, and the sharded optimizer step counts 1/G of the parameters."""
    one = predict(cluster("25gbe", 1, 8, framework=framework), **WORK, single_node_throughput=40.0)
    assert one.throughput == pytest.approx(40.0, rel=1e-6)
    assert one.inter_node_bytes_per_gpu == 0


@pytest.mark.parametrize("framework", SHARDED)
def test_a_one_bit_optimizer_under_a_sharded_framework_is_refused(framework):
    """(The command line's one line and exit 2: tests/test_bad_inputs_cli.py.)"""
    with pytest.raises(ValueError, match="reduce-scatters gradients"):
        predict(cluster("25gbe", 2, 8, framework=framework), params=10_000_000, optimizer="birder")



@pytest.mark.parametrize("framework", SHARDED)
def test_a_sharded_prediction_says_what_it_does_not_model(framework):
    sentences = unmodelled(cluster("25gbe", 2, framework=framework))
    assert sentences == list(FRAMEWORKS[framework]["unmodelled"]) and any("units" in s for s in sentences)
    assert unmodelled(cluster("25gbe", 1, framework=framework)) == []


@pytest.mark.parametrize("n, g", [(2, 4), (3, 8), (4, 1), (1, 4)])
def test_hybrid_shards_reduction_leaves_each_gpu_its_shard_summed_over_every_gpu(n, g):
    """HYBRID_SHARD's reduction (birder_ref.schedules.hybrid_shard_reduce), executed: after the node's ring
    reduce-scatter local rank j holds the node's sum of shard j, and after the ring all-reduce among the GPUs of
    local rank j it holds the sum over every GPU; each phase sends the bytes its schedule counts."""
    layout = Layout(n, g)
    sched = hybrid_shard_reduce(layout, 1000)
    D, p = sched.padded_dim, layout.n_ranks
    intra, inter_rs, inter_ag = sched.phases
    grads = np.random.default_rng(n * 10 + g).integers(-4, 5, (p, D)).astype(np.float32)
    log = ByteLog()
    buffers = {r: grads[r].reshape(g, D // g).copy() for r in range(p)}
    run_phase(intra, buffers, log)
    shards = {r: buffers[r][layout.local_rank(r)].reshape(n, D // p).copy() for r in range(p)}
    run_phase(inter_rs, shards, log)
    run_phase(inter_ag, shards, log)
    total = grads.sum(axis=0).reshape(g, D // g)
    for r in range(p):
        np.testing.assert_array_equal(shards[r].reshape(-1), total[layout.local_rank(r)])
    for phase in sched.phases:
        assert log.sent.get(phase.name, {}) == {k: v for k, v in phase.bytes_sent().items() if v}
