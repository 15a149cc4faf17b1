"""What users set (issue 9 item 6): gradient dtype, accumulation, GPUs and NICs per node, the hook's blocking."""

import pytest

from sim.api import predict_config
from sim.hardware import cluster
from sim.workload import predict


def test_half_precision_gradients_halve_the_bytes_and_speed_up_a_communication_bound_job():
    fp32 = predict(cluster("10gbe", 8), model="resnet50", optimizer="sgdm")
    fp16 = predict(cluster("10gbe", 8), model="resnet50", optimizer="sgdm", grad_dtype="fp16")
    assert fp16.inter_node_bytes_per_gpu == pytest.approx(fp32.inter_node_bytes_per_gpu / 2, rel=1e-3)
    assert fp16.throughput > 1.3 * fp32.throughput


def test_accumulation_pays_one_all_reduce_per_k_micro_batches():
    one = predict(cluster("10gbe", 8), model="resnet50", optimizer="sgdm", single_node_throughput=3693)
    four = predict(cluster("10gbe", 8), model="resnet50", optimizer="sgdm", single_node_throughput=3693,
                   accumulation_steps=4)
    assert four.inter_node_bytes_per_gpu == pytest.approx(one.inter_node_bytes_per_gpu)
    assert four.throughput > 1.5 * one.throughput
    assert four.single_node_throughput == pytest.approx(3693)


def test_a_node_measured_at_other_accumulation_is_carried_to_this_runs():
    """Strong scaling at a fixed global batch: the node measured with 32 micro-batches per optimizer step, the run
    with fewer. The calibration reproduces the measurement at the node's own accumulation; carried to K micro-batches
    one node's step loses exactly the (32 - K) micro-batches' compute (the optimizer step and the node's reduction,
    once per step, stay); several nodes are predicted slower than from the figure taken as measured at K."""
    kwargs = dict(model="bert-large", batch_per_gpu=2, optimizer="adam", single_node_throughput=180.0)
    own = predict(cluster("ib-hdr", 1), accumulation_steps=32, single_node_accumulation_steps=32, **kwargs)
    assert own.throughput == pytest.approx(180.0, rel=1e-9)
    per_micro_batch = []
    for k in (1, 4, 16):
        carried = predict(cluster("ib-hdr", 1), accumulation_steps=k, single_node_accumulation_steps=32, **kwargs)
        assert carried.iteration_s == pytest.approx(own.iteration_s - (own.compute_s - carried.compute_s), rel=1e-9)
        per_micro_batch.append((own.compute_s - carried.compute_s) / (32 - k))
        assert carried.throughput < 180.0 and carried.single_node_throughput == pytest.approx(carried.throughput)
        many = predict(cluster("ib-hdr", 8), accumulation_steps=k, single_node_accumulation_steps=32, **kwargs)
        naive = predict(cluster("ib-hdr", 8), accumulation_steps=k, **kwargs)
        assert many.throughput < naive.throughput
        assert many.single_node_throughput == pytest.approx(carried.throughput, rel=1e-9)
    assert per_micro_batch == pytest.approx([per_micro_batch[0]] * 3, rel=1e-9) and per_micro_batch[0] > 0
    same = predict(cluster("ib-hdr", 8), accumulation_steps=4, single_node_accumulation_steps=4, **kwargs)
    assert same == predict(cluster("ib-hdr", 8), accumulation_steps=4, **kwargs)


def test_a_carried_node_bounds_the_interval_at_its_own_linear_scaling():
    """The interval's upper end is held at linear scaling of the node carried to the run's accumulation (what the
    JSON's single_node_throughput says), not of the figure measured at another."""
    out = predict_config("resnet50", 8, "ib-hdr", "sgdm", batch_per_gpu=64, single_node_throughput=2500.0,
                         accumulation_steps=1, single_node_accumulation_steps=8)
    assert out["single_node_accumulation_steps"] == 8 and out["single_node_throughput"] < 2500.0
    assert out["throughput_high"] == pytest.approx(8 * out["single_node_throughput"], rel=1e-12)
    assert "upper end held at linear scaling of the measured node" in out["interval_basis"]


def test_a_measured_nodes_accumulation_past_the_tools_bound_is_refused_at_once():
    """A typo of the 1-node run's accumulation (65,537 and up) is refused before anything is simulated, as the run's
    own accumulation is, not simulated micro-batch by micro-batch."""
    with pytest.raises(ValueError, match="single_node_accumulation_steps must be at most 65,536, got 10000000000"):
        predict_config("resnet50", 2, "ib-hdr", single_node_throughput=2500.0,
                       single_node_accumulation_steps=10**10)


@pytest.mark.parametrize("g", [1, 2, 4, 8])
def test_one_to_eight_gpus_per_node(g):
    out = predict_config("resnet50", 4, "ib-hdr", "birder", gpus_per_node=g, single_node_throughput=400.0 * g)
    assert out["gpus"] == 4 * g and 0 < out["scale_efficiency"] <= 1
    assert out["throughput_low"] <= out["throughput"] <= out["throughput_high"]
    assert out["throughput_low"] < out["throughput_high"]


def test_a_hook_that_does_not_block_backward_is_never_slower():
    kwargs = dict(model="bert-base", batch_per_gpu=3, optimizer="birder")
    blocking = predict(cluster("10gbe", 16), **kwargs)
    overlapped = predict(cluster("10gbe", 16), hook_blocks_backward=False, **kwargs)
    assert overlapped.throughput >= blocking.throughput


@pytest.mark.parametrize("bad, message", [({"grad_dtype": "fp8"}, "grad_dtype"),
                                          ({"accumulation_steps": 0}, "accumulation_steps"),
                                          ({"batch_per_gpu": 0}, "batch_per_gpu"),
                                          ({"single_node_throughput": float("nan")}, "single_node_throughput"),
                                          ({"single_node_accumulation_steps": 4}, "give single_node_throughput"),
                                          ({"single_node_throughput": 900.0, "single_node_accumulation_steps": 0},
                                           "single_node_accumulation_steps must be a positive integer"),
                                          ({"single_node_throughput": 900.0, "single_node_accumulation_steps": True},
                                           "single_node_accumulation_steps must be a positive integer")])
def test_library_errors_name_the_parameter(bad, message):
    with pytest.raises(ValueError, match=message):
        predict(cluster("10gbe", 2), model="resnet50", **bad)
