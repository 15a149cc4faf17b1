"""Where the simulator charges TCP incast timeouts, `birder predict` and the report say so and name what they rest
on (a site's fitted onset, or a generic preset's assumed switch buffer), rather than hiding them in "exposed
communication" or calling them per-message costs."""

import json

import pytest

from birder.cli import main
from birder.report_scaling import ModelGrid, Setting, why_not
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
