"""The simulator's workload layer and command line: calibration, determinism, monotonicity, validation, bad input."""

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from birder.cli import main
from sim import validate
from sim.models import MODELS, model_profile
from sim.network import cluster
from sim.workload import FIRST_BUCKET_BYTES, ddp_buckets, policy, predict


@pytest.mark.parametrize("name", list(MODELS))
def test_buckets_hold_every_parameter_and_follow_ddp_caps(name):
    model = model_profile(name)
    buckets = ddp_buckets(model)
    assert sum(b.elements for b in buckets) == model.n_params
    assert 4 * buckets[0].elements >= FIRST_BUCKET_BYTES
    assert [b.ready_layer for b in buckets] == sorted(b.ready_layer for b in buckets)


def test_known_parameter_counts():
    assert model_profile("resnet50").n_params == 25_557_032  # torchvision
    assert model_profile("gpt2").n_params == 124_439_808  # HuggingFace gpt2


@pytest.mark.parametrize("optimizer", ["sgdm", "adam", "birder", "onebit-adam", "zero-one-adam", "marsit"])
def test_calibration_reproduces_the_single_node_throughput(optimizer):
    p = predict(cluster("10gbe", 1), model="resnet50", optimizer=optimizer, single_node_throughput=3000.0)
    assert p.throughput == pytest.approx(3000.0, rel=1e-6)
    assert p.scale_efficiency == pytest.approx(1.0, rel=1e-6)


def test_predictions_are_deterministic():
    kwargs = dict(model="bert-base", batch_per_gpu=3, optimizer="onebit-adam")
    assert predict(cluster("10gbe", 4), **kwargs) == predict(cluster("10gbe", 4), **kwargs)


@settings(max_examples=12)
@given(nodes=st.sampled_from([2, 4, 8]), factor=st.floats(1.1, 8),
       optimizer=st.sampled_from(["sgdm", "birder", "onebit-adam"]))
def test_more_bandwidth_never_lowers_throughput(nodes, factor, optimizer):
    c = cluster("25gbe", nodes)
    faster = replace(c, nic=replace(c.nic, line_rate=c.nic.line_rate * factor))
    slow = predict(c, model="resnet50", optimizer=optimizer).throughput
    assert predict(faster, model="resnet50", optimizer=optimizer).throughput >= slow * (1 - 1e-12)


def test_warmup_averages_iteration_times_as_the_paper_measured():
    """1-bit Adam's throughput is samples over the average of its warm-up and compressed iteration times."""
    p = predict(cluster("10gbe", 4), model="resnet50", optimizer="onebit-adam", warmup_fraction=0.15)
    (_, w, t_warm), (_, c, t_comp) = p.steps
    assert (w, c) == (0.15, 0.85)
    assert p.throughput == pytest.approx(32 * 32 / (w * t_warm + c * t_comp))
    assert policy("zero-one-adam", "resnet50")[2].comm == "none"  # 0/1 Adam's local steps send nothing


def test_birder_beats_sgdm_on_slow_ethernet_and_ties_are_broken_by_bandwidth():
    slow = {opt: predict(cluster("10gbe", 8), model="bert-base", batch_per_gpu=3, optimizer=opt).throughput
            for opt in ("sgdm", "birder")}
    assert slow["birder"] > 2 * slow["sgdm"]


def test_validation_meets_the_issue_bar():
    """`birder validate`: MAPE under 10% on the public rows and the published order of optimizers everywhere."""
    results = validate.compare(validate.rows())
    assert validate.mape(results) < 0.10
    assert all(o["same"] for o in validate.order_agreement(results))


def test_predict_json_has_the_contract_keys(capsys):
    assert main(["predict", "--model", "resnet50", "--nodes", "2", "--network", "ib-hdr", "--optimizer", "birder",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("throughput", "iteration_s", "compute_s", "exposed_communication_s", "compression_s",
                "inter_node_bytes_per_gpu", "intra_node_bytes_per_gpu", "scale_efficiency"):
        assert out[key] >= 0


@pytest.mark.parametrize("argv", [
    ["predict", "--model", "nonsense"],
    ["predict", "--network", "5gbe"],
    ["predict", "--nodes", "0"],
    ["predict", "--params", "-3"],
    ["predict", "--single-node-throughput", "0"],
    ["predict", "--optimizer", "lamb"],
    ["sweep", "--nodes", "1,x"],
])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        code = main(argv)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("text", [
    "[network\n",
    "[network]\npreset = \"10gbe\"\nline_rate_gbps = -10\n",
    "[network]\npreset = \"warp\"\n",
    "nodes = 0\n",
    "[switch]\noversubscription = 0.5\n",
    "colour = 3\n",
])
def test_bad_cluster_files_exit_2_with_one_line(tmp_path, text, capsys):
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert main(["predict", "--cluster", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("birder predict: error:") and "\n" not in err


def test_sweep_writes_csv_and_plots(tmp_path, capsys):
    assert main(["sweep", "--model", "resnet50", "--nodes", "1,2", "--networks", "10gbe", "--optimizers",
                 "sgdm,birder", "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["results"]) == 4
    assert (tmp_path / "sweep.csv").read_text().count("\n") == 5
    assert all((tmp_path / name).stat().st_size > 0 for name in ("throughput_vs_gpus.png", "time_breakdown.png"))
