"""What an interval may never cross, whatever the corpus's residuals say, and the regime that keys it: found by a
trial as a new user (the line-rate bound crossed, a node measured at more micro-batches exceeded, 1-bit Adam's
warm-up keyed as compute-bound), each checked against the bound computed by hand from the prediction's own
figures."""

from __future__ import annotations

import pytest

from sim.api import predict_config, predict_on
from sim.hardware import cluster
from sim.models import model_profile
from sim.uncertainty import alpha_beta_throughput, gradient_bits


def line_rate_bound(out: dict, link_gbps: float) -> float:
    """Samples/s at which each node's inter-node bytes per step (the prediction's own) fill its NICs' line rate."""
    node_bytes = out["inter_node_bytes_per_gpu"] * out["gpus_per_node"]
    seconds = node_bytes / (link_gbps * 1e9 / 8 * out["nics_per_node"])
    return out["gpus"] * out["batch_per_gpu"] * out["accumulation_steps"] / seconds


@pytest.mark.parametrize("kwargs, link_gbps", [
    # 8 x 8 GPUs, one 400 Gb/s NIC per node, 7B model under FSDP: the trial's top was 86.2 against 79.6
    ({"model": None, "params": 7_000_000_000, "seq_len": 2048, "nodes": 8, "network": "ib-ndr",
      "nics_per_node": 1, "batch_per_gpu": 1, "optimizer": "adam", "grad_dtype": "bf16", "gpu": "h100",
      "framework": "fsdp"}, 400),
    # BERT-Base on 16 nodes of 10 GbE from a measured node: 1179 against 1175
    ({"model": "bert-base", "nodes": 16, "network": "10gbe", "batch_per_gpu": 3, "optimizer": "sgdm",
      "grad_dtype": "bf16", "single_node_throughput": 1400.0}, 10),
    ({"model": "resnet50", "nodes": 64, "network": "25gbe", "batch_per_gpu": 32, "optimizer": "sgdm"}, 25),
])
def test_no_interval_reaches_past_the_line_rate(kwargs, link_gbps):
    framework = kwargs.pop("framework", "ddp")
    nodes, network, gpu = kwargs.pop("nodes"), kwargs.pop("network"), kwargs.pop("gpu", "a100")
    c = cluster(network, nodes, 8, None, gpu, 1.0, kwargs.pop("nics_per_node", None), framework=framework)
    out = predict_on(c, **kwargs)
    bound = line_rate_bound(out, link_gbps)
    assert out["throughput"] <= bound
    assert out["throughput_high"] <= bound * (1 + 1e-12)


def test_the_line_rate_holds_the_upper_end_where_the_residuals_would_cross_it():
    """The trial's FSDP case: the corpus's residuals alone reach past the bound; the interval ends on it and
    says so."""
    c = cluster("ib-ndr", 8, 8, None, "h100", 1.0, 1, framework="fsdp")
    out = predict_on(c, params=7_000_000_000, seq_len=2048, batch_per_gpu=1, optimizer="adam", grad_dtype="bf16")
    assert out["throughput_high"] == pytest.approx(line_rate_bound(out, 400), rel=1e-12)
    assert "upper end held at the line-rate bound" in out["interval_basis"]


@pytest.mark.parametrize("accumulation, measured_at, side", [(1, 8, "high"), (8, 1, "low"), (2, 4, "high")])
def test_one_node_measured_at_other_micro_batches_bounds_its_own_carried_prediction(accumulation, measured_at,
                                                                                      side):
    """A node measured at more micro-batches per optimizer step is no slower than at fewer (each step adds the
    same once-per-step all-reduce and optimizer to more samples): carried to fewer, its interval ends at the
    measurement above; carried to more, below."""
    out = predict_config("bert-large", 1, "ib-hdr", "adam", batch_per_gpu=8, single_node_throughput=470.0,
                         accumulation_steps=accumulation, single_node_accumulation_steps=measured_at)
    if side == "high":
        assert out["throughput"] <= out["throughput_high"] <= 470.0
    else:
        assert 470.0 <= out["throughput_low"] <= out["throughput"]


def test_onebit_adam_all_warm_up_is_keyed_and_bounded_as_adam():
    """1-bit Adam with every step in its warm-up sends Adam's full all-reduce every step: the same prediction,
    the same interval regime and interval as Adam (the trial found it keyed compute-bound, 5.8 - 2600)."""
    common = {"model": "bert-base", "batch_per_gpu": 3, "single_node_throughput": 1300.0}
    c = cluster("100gbe", 2, 8)
    adam = predict_on(c, optimizer="adam", **common)
    warm = predict_on(c, optimizer="onebit-adam", warmup_fraction=1.0, **common)
    assert warm["throughput"] == pytest.approx(adam["throughput"], rel=1e-9)
    assert warm["interval_regime"] == adam["interval_regime"] == "communication-bound"
    assert (warm["throughput_low"], warm["throughput_high"]) == pytest.approx(
        (adam["throughput_low"], adam["throughput_high"]), rel=1e-9)


def test_the_ring_averages_its_all_reduce_over_the_optimizers_kinds_of_step():
    """The alpha-beta ring keying an interval sends what each kind of step sends, in its share: 1-bit Adam's
    warm-up at the gradient's dtype, its compressed steps at 1 bit, 0/1 Adam's local steps nothing."""
    params = model_profile("bert-base").n_params
    assert gradient_bits("adam", "fp16") == ((1.0, 16),)
    assert gradient_bits("onebit-adam", "fp32", "bert-base", 1.0) == ((1.0, 32),)
    assert gradient_bits("onebit-adam", "fp32", "bert-base", 0.25) == ((0.25, 32), (0.75, 1))
    assert any(bits == 0 for _, bits in gradient_bits("zero-one-adam", "fp32", "bert-base"))
    mixed = alpha_beta_throughput(params, ((0.25, 32), (0.75, 1)), 4, 24, 1300.0, 12.5e9)
    one_node_s = 24 / 1300.0
    full = 4 * 24 / alpha_beta_throughput(params, 32, 4, 24, 1300.0, 12.5e9) - one_node_s
    onebit = 4 * 24 / alpha_beta_throughput(params, 1, 4, 24, 1300.0, 12.5e9) - one_node_s
    assert 4 * 24 / mixed - one_node_s == pytest.approx(0.25 * full + 0.75 * onebit, rel=1e-12)
