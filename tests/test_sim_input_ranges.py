"""Intervals from what the model does not know (issue 27, item 2): every uncertain input carries a sourced range
(sim/presets/input_ranges.toml), a prediction propagates them into its width, and ``interval_drivers`` says which
inputs set it. Deterministic: no sampling, so no false-failure probability to state."""

import json
from dataclasses import replace

import pytest

from birder.cli import main
from sim import api
from sim.hardware import cluster
from sim.input_ranges import MIN_SIMULATED_LOSS, StepParts, input_ranges, step_time_at


def test_every_input_has_a_source_and_a_range_around_one():
    ranges = input_ranges()
    assert {"single_node.measured", "single_node.profile", "link.socket", "link.verbs", "per_flow_cap",
            "nccl_sockets.old", "parameter_servers", "mpi_staging", "step_jitter"} <= set(ranges)
    for r in ranges.values():
        assert r.source and r.low <= 1 <= r.high
    # wider where less is known
    assert ranges["single_node.profile"].high > ranges["single_node.measured"].high
    assert ranges["link.socket"].high > ranges["link.verbs"].high > 1
    assert ranges["nccl_sockets.old"].high > ranges["nccl_sockets.current"].high


def test_one_at_a_time_rules_on_the_step_breakdown():
    """A faster link cannot gain more than the exposed communication; a slower one adds all its extra time; a
    faster GPU cannot finish the step before the busiest link."""
    hidden = StepParts(iteration_s=1.0, compute_s=1.0, exposed_s=0.0, compression_s=0.0, inter_busy_s=0.8,
                       intra_busy_s=0.1)
    assert step_time_at(hidden, "inter", 0.5) == 1.0
    assert step_time_at(hidden, "inter", 1.5) == pytest.approx(1.4)
    assert step_time_at(hidden, "compute", 0.5) == pytest.approx(0.8)
    exposed = replace(hidden, iteration_s=1.3, exposed_s=0.3)
    assert step_time_at(exposed, "inter", 0.5) == pytest.approx(1.0)
    assert step_time_at(exposed, "exposed", 2.0) == pytest.approx(1.6)


def test_the_unseen_loss_widens_only_where_the_simulated_loss_is_small():
    """Under 5% simulated multi-node loss the step itself carries the sources' unseen loss (its factor moves the
    throughput by exactly its log); at 5% or more the multi-node loss's own range speaks for it; one node has
    neither."""
    parts = StepParts(iteration_s=1.0, compute_s=0.9, exposed_s=0.1, compression_s=0.0, inter_busy_s=0.5,
                      intra_busy_s=0.1, multinode_s=0.02)
    assert parts.simulated_loss == pytest.approx(0.02 / 0.98)
    assert step_time_at(parts, "step", 1.05) == pytest.approx(1.05)

    def inputs(**kw):
        p = api.predict_config("resnet50", single_node_throughput=2400, **kw)
        loss = p["nodes"] * 2400 / p["throughput"] - 1
        return loss, {d["input"]: d for d in p["interval_drivers"]}

    loss, near = inputs(nodes=2, network="ib-hdr", batch_per_gpu=128)
    assert loss < MIN_SIMULATED_LOSS and "multinode_unseen" in near
    unseen = near["multinode_unseen"]
    assert unseen["acts_on"] == "step" and unseen["range"] == [0.98, 1.05]
    loss, far = inputs(nodes=8, network="10gbe", batch_per_gpu=32)
    assert loss >= MIN_SIMULATED_LOSS and "multinode_unseen" not in far and "multinode_loss" in far
    assert inputs(nodes=1, network="ib-hdr")[1] == {}


def _width(p: dict) -> float:
    return (p["throughput_high"] - p["throughput_low"]) / p["throughput"]


def test_width_grows_with_what_is_unknown_and_drivers_say_why():
    """The same set-up: without a measured node the interval is wider and the built-in profile leads it; TCP's
    propagated width exceeds InfiniBand's of the same line rate; a measured link rate narrows TCP's; every
    prediction's drivers are ordered, their shares summing to 1."""
    measured = api.predict_config("resnet50", 8, "100gbe", single_node_throughput=2400)
    unmeasured = api.predict_config("resnet50", 8, "100gbe")
    ib = api.predict_config("resnet50", 8, "ib-edr", single_node_throughput=2400)
    assert _width(unmeasured) > _width(measured)
    slow = (api.predict_config("resnet50", 8, "10gbe"), api.predict_config("resnet50", 8, "10gbe",
                                                                            single_node_throughput=2400))
    assert slow[0]["throughput_low"] / slow[0]["throughput"] <= slow[1]["throughput_low"] / slow[1]["throughput"]
    assert unmeasured["interval_drivers"][0]["input"] == "single_node.profile"
    assert measured["interval_model_width"][0] > ib["interval_model_width"][0]
    c = cluster("100gbe", 8)
    known_link = api.predict_on(replace(c, nic=replace(c.nic, measured_rate=60e9)), model="resnet50",
                                single_node_throughput=2400)
    assert known_link["interval_model_width"][0] < measured["interval_model_width"][0]
    assert {d["input"] for d in known_link["interval_drivers"]} >= {"link.measured"}
    for p in (measured, unmeasured, ib, known_link):
        shares = [d["share"] for d in p["interval_drivers"]]
        assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0)
        for d in p["interval_drivers"]:
            assert {"name", "input", "range", "share", "throughput_range", "source"} <= set(d)
        assert p["throughput_low"] <= p["throughput"] <= p["throughput_high"]
    one_node = api.predict_config("resnet50", 1, "100gbe", single_node_throughput=2400)
    assert one_node["interval_drivers"] == []  # the measurement itself
    # two measured nodes close to linear: a driver's upper end is held at linear scaling, as the interval's is
    near_linear = api.predict_config("resnet50", 2, "ib-hdr", single_node_throughput=2400, batch_per_gpu=128)
    assert near_linear["throughput_high"] == 2 * 2400
    assert max(d["throughput_range"][1] for d in near_linear["interval_drivers"]) == 2 * 2400


def test_predict_json_and_human_output_name_the_drivers(capsys):
    argv = ["predict", "--model", "resnet50", "--nodes", "4", "--network", "ec2-25gbe", "--gpu", "v100",
            "--single-node-throughput", "2400", "--comm-library", "nccl-before-2.4.8"]
    assert main([*argv, "--json"]) == 0
    drivers = json.loads(capsys.readouterr().out)["interval_drivers"]
    assert drivers and drivers[0]["input"] in ("per_flow_cap", "nccl_sockets.old", "link.socket")
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "interval set mostly by" in x)
    assert drivers[0]["name"] in line
