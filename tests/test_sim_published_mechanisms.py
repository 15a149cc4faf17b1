"""Mechanisms that published rows showed missing (issue 27, item 3), each against the figure that explains it:
Horovod's MPI backend
staged through host memory (sim/system.py ``host_staging_s``); TensorFlow's whole-variable parameter servers and
gRPC copies (``busiest_server_share``, ``rpc_copy_s``); what a prediction does not model (``unmodelled``)."""

from dataclasses import replace

import pytest

from sim.hardware import FRAMEWORKS, cluster, framework_preset
from sim.models import model_profile
from sim.system import busiest_server_share, host_staging_s, unmodelled, whole_variable_servers
from sim.workload import ddp_buckets, predict


def test_horovod_mpi_stages_each_fused_buffer_through_the_host():
    """Horovod's MPI backend (presets/frameworks.toml ``horovod-mpi``): each fused buffer is copied to the host
    over the GPU's PCIe link, summed by MPI on the CPU (3 bytes of memory traffic per byte summed, (p - 1) / p of
    the buffer per rank, one core each) and copied back, in series with the wire; NCCL (``horovod-0.20``, the
    same fusion and cycle) stages nothing. The step's trace holds one host event per fused buffer, and the MPI
    step is slower than NCCL's by at most those events' sum (part of it hides under the backward pass).
    No corpus row ran Horovod's MPI backend (the published MPI-vs-NCCL rows are first-contact rows: kept out)."""
    c = cluster("25gbe", 4, 4, gpu="v100", framework="horovod-mpi")
    nbytes = 64 * 2**20
    assert host_staging_s(c, nbytes) == pytest.approx(2 * nbytes / 12e9 + 3 * 15 / 16 * nbytes / 10e9, rel=1e-12)
    assert host_staging_s(replace(c, framework="horovod-0.20"), nbytes) == 0
    low, high = FRAMEWORKS["horovod-mpi"]["host_reduce_gbytes_per_s_range"]
    assert low < FRAMEWORKS["horovod-mpi"]["host_reduce_gbytes_per_s"] < high
    traces = {}
    mpi = predict(c, model="resnet50", batch_per_gpu=64, traces=traces)
    nccl = predict(replace(c, framework="horovod-0.20"), model="resnet50", batch_per_gpu=64)
    framework = framework_preset("horovod-mpi")
    buckets = ddp_buckets(model_profile("resnet50"), 4, framework.bucket_cap_bytes, framework.first_bucket_bytes)
    (events,) = traces.values()
    host = [e for e in events if e[0] == "host"]
    assert sorted(e[4]["elements"] for e in host) == sorted(b.elements for b in buckets)
    staged = sum(e[3] for e in host)
    assert staged == pytest.approx(sum(host_staging_s(c, b.elements * 4) for b in buckets), rel=1e-12)
    assert 0 < mpi.iteration_s - nccl.iteration_s <= staged * (1 + 1e-9)


def test_tensorflow_places_whole_variables_on_the_least_loaded_server():
    """tf_cnn_benchmarks' ParamServerDeviceSetter: each variable, in creation order, whole on the server with the
    fewest elements so far. VGG-16's fc6 (25088 x 4096 = 102,760,448 of its 138,357,544 parameters) sits on one
    server whatever their number; ResNet-50's 161 tensors spread to within a few percent of even on 2 servers."""
    vgg, resnet = model_profile("vgg16").tensors, model_profile("resnet50").tensors
    assert 25088 * 4096 in vgg
    for servers in (1, 2, 8, 64):
        assert busiest_server_share(vgg, servers) >= 25088 * 4096 / sum(vgg)
        assert whole_variable_servers(vgg, servers) == 1
    assert busiest_server_share(resnet, 2) == pytest.approx(0.518, abs=0.001)
    assert busiest_server_share((3, 2, 2, 1), 2) == 0.5  # 3 | 2, 2 | then 1 on the first: 4 of 8
    assert busiest_server_share((5, 1, 1, 1), 3) == 5 / 8
    assert whole_variable_servers(resnet, 2) == 2 and whole_variable_servers(resnet, 8) == 6
    with pytest.raises(ValueError, match="servers >= 1"):
        busiest_server_share(vgg, 0)


def test_vgg16_through_parameter_servers_waits_for_the_server_holding_fc6():
    """Physics bound: with whole variables the server holding fc6 (411 MB of fp32) receives it from the 7 other
    worker nodes and sends it back, so its NIC alone takes 7 x 411 MB / the NIC's rate each way, and the worker's
    gRPC stack takes 2 x 411 MB / 0.72 GB/s (tensorflow#6256, quoted in the preset) in series with it; fc6's
    gradient is ready after the forward pass at the earliest, so the step lasts at least forward + both.
    Spread evenly over the 8 servers (the model before whole variables) the step is shorter than that bound."""
    assert "718.74 MB/s" in FRAMEWORKS["tf-parameter-server"]["source"]
    assert FRAMEWORKS["tf-parameter-server"]["rpc_gbytes_per_s"] == 0.72
    c = cluster("25gbe", 8, 8, gpu="v100", framework="tf-parameter-server")
    step = predict(c, model="vgg16", batch_per_gpu=32)
    fc6 = 25088 * 4096 * 4
    bound = step.compute_s / 3 + 7 * fc6 / c.nic_bandwidth + 2 * fc6 / 0.72e9
    assert step.iteration_s >= bound


def test_predict_says_what_it_does_not_model():
    """``birder predict --json`` key ``unmodelled``: the framework's sentences (presets/frameworks.toml) where
    nodes talk through it; nothing for DDP, on one node or with accumulation (its jitter averages over the
    micro-batches: tests/test_sim_step_jitter.py)."""
    for name in ("horovod-mpi", "byteps", "tf-parameter-server"):
        sentences = unmodelled(cluster("25gbe", 2, framework=name))
        assert sentences == list(FRAMEWORKS[name]["unmodelled"]) and all(s.endswith(".") for s in sentences)
        assert unmodelled(cluster("25gbe", 1, framework=name)) == []
    assert unmodelled(cluster("25gbe", 2)) == []
    assert unmodelled(cluster("25gbe", 2), accumulation_steps=8) == []
