"""The training frameworks of sim/presets/frameworks.toml, each against the published figures it explains.

Every constant is quoted from its source (never fitted); each framework's mechanism (buckets, splits, overlap,
summation servers) is checked on the corpus rows of a framework that ran it, beside what DDP's buckets and
all-reduce predict for the same rows."""

from __future__ import annotations

import re
import statistics
from dataclasses import replace

import pytest

from birder_ref.schedules import Layout, Schedule
from sim.hardware import FRAMEWORKS, cluster, framework_preset
from sim.models import model_profile
from sim.system import (
    LINK_KINDS,
    ServerGroups,
    _Counts,
    _server_groups,
    byte_load,
    flow_time,
    fp32_allreduce,
    op_time,
    operations,
    phase_load,
    server_messages,
    step_schedule,
    summation_servers,
    traffic,
)
from sim.validation.corpus import load_corpus
from sim.validation.corpus_setup import GRAD_DTYPE_OF_PRECISION, SIMULATED_AS, corpus_cluster
from sim.workload import predict, split_buckets

ROWS = load_corpus()


def rows(source: str, framework: str, **match) -> list:
    out = [r for r in ROWS if r.source == source and r.framework == framework
           and all(getattr(r, k) == v for k, v in match.items())]
    assert out, (source, framework, match)
    return out


def throughput(row, framework: str) -> float:
    """The row predicted with ``framework``'s preset (its own, or DDP's for comparison)."""
    c = replace(corpus_cluster(row, False), framework=framework)
    return predict(c, model=row.model, batch_per_gpu=int(row.batch_per_gpu),
                   optimizer=SIMULATED_AS.get(row.optimizer, row.optimizer),
                   single_node_throughput=float(row.single_node_throughput),
                   grad_dtype=GRAD_DTYPE_OF_PRECISION[row.precision], accumulation_steps=row.grad_accum).throughput


def mape(rows_, framework: str) -> float:
    return statistics.mean(abs(throughput(r, framework) / r.throughput - 1) for r in rows_)


def linear_mape(rows_) -> float:
    return statistics.mean(abs(r.nodes * r.single_node_throughput / r.throughput - 1) for r in rows_)


def quoted(value: float) -> set[str]:
    forms = {f"{value:g}", f"{value:.0e}".replace("e+0", "e")}
    if float(value).is_integer():
        forms.add(str(int(value)))
    return forms


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_every_framework_constant_is_quoted_from_its_source(name):
    """No constant is fitted to the corpus: every non-zero figure and every fusion split stands in the entry's
    source text, so changing a number without its source fails here."""
    spec = FRAMEWORKS[name]
    for key in ("bucket_cap_mb", "first_bucket_mb", "cycle_ms"):
        if spec[key]:
            assert any(re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", spec["source"]) for f in quoted(spec[key])), \
                (name, key, spec[key])
    for model, starts in spec.get("fusion_splits", {}).items():
        model_profile(model)  # a model the simulator knows
        assert str(list(starts)) in spec["source"], (name, model)


def spelled_out(schedule: Schedule) -> Schedule:
    """The schedule with its ``ServerGroups`` written out as the tuple of groups: what the message-by-message
    count (the flow engine's general path) times."""
    return replace(schedule, phases=tuple(replace(ph, groups=tuple(ph.groups)) for ph in schedule.phases))


def test_closed_form_of_servers_on_their_own_machines_equals_the_message_by_message_count():
    """Servers on machines of their own are timed in closed form (``sim.system.server_load``); on small
    clusters, where the count is cheap, every field of every phase's load, the joint byte load, the flow time
    and the operation's time equal the count of the same groups spelled out, to the last bit: evenly and
    unevenly placed servers, GPUs sharing a NIC or one GPU with several, leaf switches mixing workers and
    servers under an oversubscribed spine, tensors too small to give every server a piece."""
    checked = 0
    for n, g, nics in ((2, 8, 1), (3, 4, 2), (2, 1, 1), (4, 2, 4), (3, 3, 2), (5, 8, 8)):
        for servers in (0, 1, 3, 2 * n + 1):
            for leaf, oversubscription in ((1, 1.0), (2, 2.0), (3, 4.0)):
                c = replace(cluster("roce-200gbe", n, g, nic_count=nics, framework="byteps"), servers=servers,
                            nodes_per_leaf=leaf, oversubscription=oversubscription)
                for dim in (5, 1000, 12_345_678):  # 5: fewer servers than configured carry the tensor
                    closed = summation_servers(c, dim)
                    assert any(isinstance(ph.groups, ServerGroups) for ph in closed.phases)
                    counted = spelled_out(closed)
                    assert [tuple(ph.groups) for ph in closed.phases] == [ph.groups for ph in counted.phases]
                    for a, b in zip(closed.phases, counted.phases, strict=True):
                        assert phase_load(a, c.layout, c.rails, leaf) == phase_load(b, c.layout, c.rails, leaf)
                    live = tuple(ph for ph in closed.phases if ph.n_rounds)
                    for subset in (live, live[1:3], live[1:2]):
                        spelled = tuple(replace(ph, groups=tuple(ph.groups)) for ph in subset)
                        assert byte_load(subset, c.layout, c.rails, leaf) == byte_load(spelled, c.layout, c.rails,
                                                                                        leaf)
                        assert flow_time(subset, c.layout, c) == flow_time(spelled, c.layout, c)
                    assert [op_time(kind, phases, c.layout, c) for kind, phases in operations(closed)] == \
                        [op_time(kind, phases, c.layout, c) for kind, phases in operations(counted)]
                    checked += 1
    assert checked == 6 * 4 * 3 * 3


@pytest.mark.parametrize("colocated", [True, False])
def test_push_and_pull_counted_with_arrays_equal_the_message_by_message_count(colocated):
    """A parameter server's push and pull are counted with arrays (``_Counts.stars``: TensorFlow's servers on
    the worker nodes took 16 s at 65,536 GPUs message by message); on small clusters every link's count, key by
    key, and the totals equal ``_Counts.send`` over the same messages to the last bit, with a weight whose sums
    round: servers on the workers or on machines of their own, GPUs sharing a NIC or not, leaf switches."""
    checked = 0
    for n, g, nics, leaf in ((3, 2, 1, 1), (5, 4, 2, 2), (4, 8, 4, 3), (7, 3, 1, 2)):
        layout = Layout(n, g)
        for count in (1, 2, n * nics):
            _, _, groups = _server_groups(layout, nics, colocated, count)
            groups = [grp for grp in groups if len(grp) >= 2]
            for inward in (True, False):
                by_array, by_message = _Counts(layout, nics, leaf), _Counts(layout, nics, leaf)
                by_array.stars(groups, inward, 0.37)
                for grp in groups:
                    for member in grp[:-1]:
                        by_message.send(*((member, grp[-1]) if inward else (grp[-1], member)), False, 0.37)
                for kind in (*LINK_KINDS, "gpu_net_tx", "gpu_net_rx"):
                    assert dict(getattr(by_array, kind)) == dict(getattr(by_message, kind)), kind
                assert (by_array.intra_total, by_array.inter_total) == (by_message.intra_total,
                                                                        by_message.inter_total)
                checked += 1
    assert checked == 4 * 3 * 2


def test_summation_servers_move_the_gradient_once_each_way_where_a_ring_moves_it_twice():
    """BytePS (OSDI 2020, Section 3): with enough servers a worker NIC sends and receives the gradient once;
    an NCCL ring all-reduce sends 2(p-1)/p of it through each node's NIC; servers on the worker nodes (TensorFlow's
    distributed_replicated) move 2(n-1)/n of it, what a hierarchical all-reduce moves."""
    dim = 25_000_000
    for n in (2, 8):
        byteps = cluster("ib-edr", n, 8, gpu="v100", framework="byteps")
        load = byte_load(summation_servers(byteps, dim).phases, byteps.layout, 1)
        assert load.nic_tx == pytest.approx(4 * dim, rel=1e-3) and load.nic_rx == pytest.approx(4 * dim, rel=1e-3)
        ring = fp32_allreduce(replace(byteps, framework="ddp"), dim)
        ring_load = byte_load(ring.phases, ring.layout, 1)
        p = n * 8
        assert ring_load.nic_tx == pytest.approx(4 * dim * 2 * (p - 1) / p, rel=1e-3)
        tf = replace(byteps, framework="tf-parameter-server")
        tf_load = byte_load(summation_servers(tf, dim).phases, tf.layout, 1)
        assert tf_load.nic_tx == pytest.approx(4 * dim * 2 * (n - 1) / n, rel=1e-3)
    # fewer servers than workers (TensorFlow's page: 8 instances, 4 parameter servers): a server's node receives
    # 7 workers' quarters and its own worker's 3 remote quarters, 2.5 gradients
    four = replace(cluster("10gbe", 8, 8, gpu="k80", framework="tf-parameter-server"), servers=4)
    assert byte_load(summation_servers(four, dim).phases, four.layout, 1).nic_rx == pytest.approx(4 * dim * 2.5,
                                                                                                  rel=1e-3)
    assert [r.parameter_servers for r in rows("tf-benchmarks-2017", "tf-parameter-server", nodes=8)] == [0, 4, 4]
    with pytest.raises(ValueError, match="at most one per NIC"):
        summation_servers(replace(four, servers=9), dim)
    with pytest.raises(ValueError, match="servers must be a non-negative integer"):
        replace(four, servers=-1)
    # one worker machine: BytePS runs NCCL's all-reduce (docs/best-practice.md)
    one = cluster("ib-edr", 1, 8, gpu="v100", framework="byteps")
    assert step_schedule("sgdm", one, dim, full_precision=True).scheme != "summation_servers"


def test_byteps_gain_over_horovod_on_tcp_comes_from_its_servers():
    """BytePS docs/performance.md: on 20 Gbps TCP with 8 V100 per machine, BytePS beats Horovod (NCCL) by 44% for
    ResNet-50 and 100% for VGG-16 at 64 GPUs. The summation-server pattern predicts each gain within 30%; for
    VGG-16, whose exchange dominates, BytePS simulated as an all-reduce (DDP's pattern) predicts none (ResNet-50's
    gain it gets from DDP's smaller buckets against Horovod's 128 MB fusion already)."""
    for model, published in (("resnet50", 1.44), ("vgg16", 2.0)):
        (byteps,) = rows("byteps-docs", "byteps", model=model, nodes=8, transport="tcp")
        (horovod,) = rows("byteps-docs", "horovod", model=model, nodes=8, transport="tcp")
        assert byteps.throughput / horovod.throughput == pytest.approx(published, rel=0.02)  # the rows say so
        base = throughput(horovod, "horovod")
        servers, as_ddp = throughput(byteps, "byteps") / base, throughput(byteps, "ddp") / base
        assert abs(servers / published - 1) < 0.30, (model, servers)
        if model == "vgg16":
            assert as_ddp < 1.1 and abs(servers / published - 1) < abs(as_ddp / published - 1) / 2


def test_tensorflow_parameter_servers_on_k80_instances():
    """TensorFlow benchmarks page, EC2 distributed (p2.8xlarge, 8 K80 GPUs each): the rows run with as many
    parameter servers as workers are predicted within 15% each, 8% on average, and better than linear scaling;
    the 8-instance rows with 4 parameter servers (notes) are simulated with 8 and left out here."""
    equal = [r for r in rows("tf-benchmarks-2017", "tf-parameter-server")
             if not (r.nodes == 8 and "4 parameter" in r.notes)]
    assert len(equal) == 7
    errors = [abs(throughput(r, "tf-parameter-server") / r.throughput - 1) for r in equal]
    assert max(errors) < 0.15 and statistics.mean(errors) < 0.08
    assert statistics.mean(errors) < linear_mape(equal)


def test_mindspore_fuses_by_parameter_index_and_predicts_its_resnet50_rows():
    """MindSpore's model zoo splits ResNet-50's 161 gradients at [85, 160]: three all-reduces, the last
    tensor's first; DLPerf's MindSpore ResNet-50 rows (4 V100 nodes, EDR) within 15% each."""
    profile = model_profile("resnet50")
    sizes = [t for layer in profile.layers for t in layer.tensors]
    groups = split_buckets(profile, (85, 160))
    assert [b.elements for b in groups] == [sum(sizes[160:]), sum(sizes[85:160]), sum(sizes[:85])]
    assert sizes[160:] == [1000]  # the classifier's bias, the first gradient the backward pass produces
    assert [b.ready_layer for b in groups] == [0, 53 - 28, 53]  # backward order: tensor 85 is layer3.1.conv1, layer 28
    with pytest.raises(ValueError, match="past its 161 tensors"):
        split_buckets(model_profile("resnet50"), (85, 161))
    resnet = rows("dlperf-mindspore", "mindspore", model="resnet50")
    assert max(abs(throughput(r, "mindspore") / r.throughput - 1) for r in resnet) < 0.15
    assert mape(rows("dlperf-mindspore", "mindspore"), "mindspore") < linear_mape(rows("dlperf-mindspore", "mindspore"))


def test_tensorflow_multiworker_all_reduces_one_pack_after_backward():
    """TF 2.3 MultiWorkerMirroredStrategy all-reduces all gradients in one pack after the backward pass
    (bytes_per_pack = 0): nothing overlaps, so DLPerf's TF2 rows (which scale worst on that cluster) are
    predicted closer than with DDP's overlapped buckets."""
    fw = framework_preset("tf-distributed")
    assert not fw.overlaps_backward and fw.bucket_cap_bytes > model_profile("resnet50").n_params * 4
    tf2 = rows("dlperf-oneflow", "tf-distributed")
    assert mape(tf2, "tf-distributed") < mape(tf2, "ddp")


@pytest.mark.parametrize("source, framework, bound", [
    ("paddle-fleetx-vgg16", "paddle-fleet", 0.08),  # Baidu's FleetX pages: 4 communication-bound VGG-16 rows
    ("dlperf-oneflow", "oneflow", 0.08),  # DLPerf's OneFlow 0.2 rows, ResNet-50 and BERT-Base
])
def test_fused_all_reduce_frameworks_predict_their_rows(source, framework, bound):
    """Paddle Fleet's 32 MB fusion and OneFlow's 16 MB boxing fusion predict their own sources' rows within
    ``bound`` on average, better than linear scaling."""
    own = rows(source, framework)
    assert mape(own, framework) < bound
    assert mape(own, framework) < linear_mape(own)


def test_summation_servers_put_a_tensors_own_bytes_on_the_wire_at_any_scale():
    """A tensor pushed to the servers leaves a worker node with its own bytes, each message rounded to whole
    elements only: never padded to a multiple of the GPU or server count (which made a 64-element tensor 16.8M
    elements at 4,096 GPUs, and BytePS's ResNet-50 scaling collapse at 512 nodes)."""
    for n, dim in ((512, 64), (512, 1000), (512, 2_359_296), (8192, 64), (8192, 25_557_032)):
        c = cluster("roce-200gbe", n, 8, framework="byteps")
        sched = summation_servers(c, dim)
        push = next(ph for ph in sched.phases if ph.name == "push")
        messages_per_node = 8 * len(push.groups.servers)
        assert dim <= sched.padded_dim < dim + messages_per_node, (n, dim)
        out_of_a_node = traffic(sched).inter_node_bytes_per_gpu * 8
        assert out_of_a_node == 4 * sched.padded_dim
        if dim < 8 * n:  # a small tensor: as many servers as give each GPU's piece one element
            assert out_of_a_node - 4 * dim < 4 * 8


def test_byteps_resnet50_keeps_scaling_at_512_nodes_on_a_fast_network():
    """Summation servers move a worker's gradient once each way whatever the cluster size, so on 200 Gb/s RoCE
    ResNet-50 keeps BytePS's efficiency near DDP's at 512 nodes (with the tensors padded to 8 x GPUs x servers
    elements it fell to 18%)."""
    byteps, ddp = (predict(cluster("roce-200gbe", 512, framework=fw), model="resnet50", batch_per_gpu=32,
                           single_node_throughput=2000.0) for fw in ("byteps", "ddp"))
    assert byteps.inter_node_bytes_per_gpu == pytest.approx(4 * model_profile("resnet50").n_params / 8, rel=1e-3)
    assert byteps.scale_efficiency > 0.9 * ddp.scale_efficiency



def test_a_node_pays_the_per_peer_cost_once_per_partition_it_sends():
    """BytePS cuts a tensor into BYTEPS_PARTITION_BYTES = 4,096,000-byte partitions, each pushed to one server
    (byteps/common/global.cc); TensorFlow sends each variable whole to its parameter server: the per-peer
    latency counts those messages, not every server the bytes are spread over."""
    byteps = cluster("roce-200gbe", 512, 8, framework="byteps")
    for dim, partitions in ((1000, 1), (1_024_000, 1), (1_024_001, 2), (2_359_296, 3), (25_557_032, 25)):
        sched = summation_servers(byteps, dim)
        assert server_messages(sched.phases, byteps.layout, byteps) == partitions, dim
    tf = cluster("10gbe", 8, 8, gpu="k80", framework="tf-parameter-server")
    assert server_messages(summation_servers(tf, 2_359_296).phases, tf.layout, tf) == 1


# an MPI backend stages BERT-Base's 435 MB through host memory: slower than 1,400 samples/s on one node
@pytest.mark.parametrize("framework, model, batch, measured", [
    (f, m, b, x) for f in FRAMEWORKS if framework_preset(f).cycle > 0
    for m, b, x in (("bert-base", 3, 1400.0), ("resnet50", 32, 800.0), ("resnet50", 32, 2500.0))
    if not (framework_preset(f).host_reduce_bandwidth and m == "bert-base")])
def test_a_framework_cycle_keeps_a_measured_node_exact(framework, model, batch, measured):
    """Horovod's background loop enqueues the buckets ready by a cycle and goes on (operations.cc RunLoopOnce;
    the GPU's finalizer threads wait for them): a bucket ready while another runs starts when the stream frees,
    not a cycle after. The trial's BERT-Base node measured at 1,400 samples/s was refused under Horovod 0.20
    (each of its 64 MB buckets waited for a 5 ms tick after the last ended: more than the measured step) and
    came out at 1,345 under Horovod's 1 ms cycle (the calibration stopped on a cycle's jump). One measured
    node is the measurement, whatever the cycle: what the jump leaves is a fixed wait per step, under a cycle."""
    c = cluster("25gbe", 1, 8, framework=framework)
    out = predict(c, model=model, batch_per_gpu=batch, optimizer="sgdm", single_node_throughput=measured)
    assert out.throughput == pytest.approx(measured, rel=1e-9)
    assert out.single_node_throughput == measured
    four = predict(c.with_nodes(4), model=model, batch_per_gpu=batch, optimizer="sgdm",
                   single_node_throughput=measured)
    assert 0 < four.throughput <= 4 * measured * (1 + 1e-12)
