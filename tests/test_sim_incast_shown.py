"""Where the simulator charges TCP incast timeouts, `birder predict` and the report say so and name what they rest
on (a site's fitted onset, or a generic preset's assumed switch buffer), rather than hiding them in "exposed
communication" or calling them per-message costs."""

import json

import pytest

from birder.cli import main
from birder.report_grid import ModelGrid, Setting, why_not
from sim.api import predict_config

# BERT-large on 16 nodes of 40 GbE: the preset's switch (12 MB shared, Arista 7050X) leaves each of 16 congested
# ports 0.71 MB, and Birder's all-to-all bursts exceed it; SGDM's ring sends one flow into each NIC
RUN = ["predict", "--model", "bert-large", "--nodes", "16", "--network", "40gbe", "--single-node-throughput", "400"]


def test_predict_prints_the_incast_stalls_and_their_basis(capsys):
    assert main([*RUN, "--optimizer", "birder", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["incast_timeouts"] > 1
    assert result["incast_s"] == pytest.approx(result["incast_timeouts"] * 0.2, rel=1e-12)  # TCP_RTO_MIN 200 ms
    assert "assumed switch buffer of 12 MB shared by 16 congested ports" in result["incast_basis"]
    assert main([*RUN, "--optimizer", "birder"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "TCP incast" in x)
    assert f"{result['incast_s'] * 1e3:.2f} ms" in line and f"{result['incast_timeouts']:.2f} retransmission" in line
    assert main([*RUN, "--optimizer", "sgdm"]) == 0
    assert "TCP incast" not in capsys.readouterr().out


def test_the_report_names_incast_not_per_message_costs():
    preds = tuple(predict_config("bert-large", 16, "40gbe", opt, single_node_throughput=400)
                  for opt in ("sgdm", "birder"))
    assert preds[0]["incast_s"] == 0 and preds[0]["incast_basis"] == ""
    grid = ModelGrid(Setting("bert-large", "BERT-large", 32, "measured"), "measured", ("sgdm",), ("40gbe",),
                     (1, 16), preds)
    reason = why_not(grid, "40gbe", 16)
    assert reason.startswith("TCP incast: Birder's point-to-point phases lose") and "12 MB" in reason


def test_the_sweep_csv_carries_the_incast_stalls(tmp_path, capsys):
    import csv

    assert main(["sweep", "--model", "bert-large", "--nodes", "16", "--networks", "40gbe", "--optimizers",
                 "sgdm,birder", "--single-node-throughput", "400", "--out", str(tmp_path / "s"), "--quiet"]) == 0
    capsys.readouterr()
    with (tmp_path / "s" / "sweep.csv").open() as f:
        rows = {r["optimizer"]: float(r["incast_s"]) for r in csv.DictReader(f)}
    assert rows["sgdm"] == 0 and rows["birder"] > 1


def test_an_assumed_switch_buffer_widens_the_interval_to_the_incast_free_prediction(capsys):
    """Incast on a preset's assumed switch: the upper end reaches the same prediction without incast (an infinitely
    deep buffer), the regime counts the stalls (communication-bound, not the alpha-beta ring's compute-bound),
    and the output says the spread in one line."""
    from dataclasses import replace

    from sim.api import predict_on
    from sim.hardware import cluster

    c = cluster("40gbe", 16)
    kw = {"optimizer": "birder", "model": "bert-large", "single_node_throughput": 400.0}
    result = predict_on(c, **kw)
    deep = predict_on(replace(c, nic=replace(c.nic, switch_buffer_bytes=float("inf"))), **kw)
    assert deep["incast_s"] == 0 and deep["incast_free_throughput"] is None
    assert result["incast_free_throughput"] == pytest.approx(deep["throughput"], rel=1e-12)
    assert result["incast_free_throughput"] > 2 * result["throughput"]  # incast is most of the step here
    assert result["throughput_high"] >= deep["throughput"] and result["throughput_low"] < result["throughput"]
    assert result["interval_regime"] == "communication-bound" and deep["interval_regime"] == "compute-bound"
    assert result["switch_buffer_assumed_bytes"] == 12e6
    assert main([*RUN, "--optimizer", "birder"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("TCP incast on an assumed")]
    assert lines == [f"  TCP incast on an assumed switch buffer of 12 MB: {result['throughput']:.0f} to "
                     f"{deep['throughput']:.0f} samples/s depending on the switch"]


def test_a_switch_the_user_names_or_a_fitted_onset_is_no_assumption(tmp_path):
    from sim.api import predict_config

    path = tmp_path / "mine.toml"
    path.write_text('[network]\npreset = "40gbe"\nswitch_buffer_bytes = 12000000\n')
    mine = predict_config("bert-large", 16, optimizer="birder", single_node_throughput=400, cluster_file=path)
    preset = predict_config("bert-large", 16, "40gbe", "birder", single_node_throughput=400)
    assert mine["throughput"] == pytest.approx(preset["throughput"], rel=1e-12) and mine["incast_s"] > 1
    assert mine["incast_free_throughput"] is None and mine["throughput_high"] < preset["throughput_high"]
    assert "the cluster file's switch buffer of 12 MB" in mine["incast_basis"]
    site = predict_config("bert-large", 8, "birder-paper-10gbe", "onebit-adam")  # a site's onset fitted to its rows
    assert site["incast_s"] > 0 and site["incast_free_throughput"] is None
    assert "upper end raised" not in site["interval_basis"]


def test_a_speedup_resting_on_an_assumed_buffer_is_not_a_verdict():
    """25 GbE's preset switch (24 MB) beats 40 GbE's (12 MB) at 16 nodes only through incast on switches the buyer
    has not chosen: the ratio's interval spans 1, so no 'slower beyond the uncertainty'."""
    from sim.api import predict_config
    from sim.uncertainty import speedup_interval

    a, b = (predict_config("bert-large", 16, n, "birder", single_node_throughput=400) for n in ("40gbe", "25gbe"))
    r = speedup_interval(a, b)
    assert r["ratio"] < 0.5 and r["verdict"] == "within the uncertainty" and "assumed switch buffer" in r["basis"]
    assert r["high"] == pytest.approx(a["throughput_high"] / b["throughput_low"], rel=1e-12)
