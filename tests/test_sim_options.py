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
                                          ({"single_node_throughput": float("nan")}, "single_node_throughput")])
def test_library_errors_name_the_parameter(bad, message):
    with pytest.raises(ValueError, match=message):
        predict(cluster("10gbe", 2), model="resnet50", **bad)
