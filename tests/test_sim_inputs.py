"""Bad input to the simulator's commands (issue 12): one line on stderr, exit 2, nothing hangs, strict JSON."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from birder.cli import main
from sim.hardware import load_cluster
from sim.stragglers import GPU_SPEED_CV, STEP_JITTER_CV, combined_cv, straggler_factor
from sim.validation import paper

EXAMPLE = str(Path(__file__).resolve().parents[1] / "sim" / "presets" / "example_cluster.toml")
HEADER = "model,batch_per_gpu,network,optimizer,gpus,throughput\n"


def status(argv) -> int:
    """The exit status of ``birder ARGV`` (argparse exits with 2 on its own errors)."""
    try:
        return main(argv)
    except SystemExit as done:
        return done.code


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_a_tiny_single_node_throughput_returns_instead_of_hanging():
    """0.001 samples/s: a 256,000 s iteration; the flow engine must still finish (bounded by the subprocess).
    Compute-bound: 4 nodes give 4 x 0.001, less only each step's wait for the slowest of 32 GPUs
    (sim/stragglers.py)."""
    done = subprocess.run([sys.executable, "-m", "birder.cli", "predict", "--nodes", "4",
                           "--single-node-throughput", "0.001", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    slowest = straggler_factor(32, 8, combined_cv(GPU_SPEED_CV, STEP_JITTER_CV))
    assert json.loads(done.stdout)["throughput"] == pytest.approx(0.004 / slowest, rel=1e-3)


@pytest.mark.parametrize("value", ["-5", "nan", "0", "inf"])
def test_validate_refuses_a_row_whose_throughput_is_not_positive(tmp_path, value, capsys):
    path = tmp_path / "rows.csv"
    path.write_text(HEADER + "resnet50,32,10gbe,sgdm,8,3693\n" + f"resnet50,32,10gbe,sgdm,16,{value}\n")
    assert main(["validate", "--csv", str(path), "--json"]) == 2
    err = one_line_error(capsys)
    assert "line 3" in err and "throughput" in err


@pytest.mark.parametrize("argv, message", [
    (["sweep", "--cluster", EXAMPLE, "--networks", "10gbe"], "conflict"),
    (["sweep", "--networks", ""], "expected comma-separated"),
    (["sweep", "--optimizers", ""], "expected comma-separated"),
    (["sweep", "--nodes", "2,1,2"], "repeated"),
    (["sweep", "--nodes", ""], "expected comma-separated"),
    (["predict", "--network", "no-such-net"], "invalid choice"),
    (["predict", "--gpus-per-node", "2", "--nics-per-node", "3"], "nics-per-node"),
    (["predict", "--single-node-throughput", "nan"], "positive"),
    (["predict", "--oversubscription", "0.5"], "oversubscription"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys, tmp_path):
    assert status([*argv, "--out", str(tmp_path)] if argv[0] == "sweep" else argv) == 2
    assert message in one_line_error(capsys)


@pytest.mark.parametrize("body, expected", [
    ("[network]\npreset = \"25gbe\"\ncount = 9\n", "count = 9 NICs for 8 GPUs"),
    ("[network]\npreset = \"25gbe\"\ncount = 1.5\n", "[network] count must be a positive integer (NICs per node)"),
    ("[network]\npreset = \"25gbe\"\ncount = 0\n", "[network] count must be a positive integer"),
    ("[network]\npreset = \"25gbe\"\nlatency_us = -3\n", "[network] latency_us must be a non-negative number (us), "
                                                         "got -3"),
    ("[network]\npreset = \"25gbe\"\nline_rate_gbps = 0\n", "line_rate_gbps must be a positive number (Gb/s)"),
    ("[intra]\nport_gbytes_per_s = -1\n", "[intra] port_gbytes_per_s must be a positive number (GB/s)"),
    ("[switch]\noversubscription = 0\n", "[switch] oversubscription must be a number >= 1"),
    ("nodes = -2\n", "nodes must be a positive integer"),
    ("gpus_per_node = 0\n", "gpus_per_node must be a positive integer"),
    ("[network]\nline_rate_gbps = 100\n", "needs a preset or a transport"),
    ("[network]\npreset = \"25gbe\"\nspeed = 3\n", "unknown keys ['speed']"),
])
def test_bad_cluster_files_name_the_file_the_key_and_its_unit(tmp_path, body, expected, capsys):
    path = tmp_path / "c.toml"
    path.write_text(body)
    with pytest.raises(ValueError) as error:
        load_cluster(path)
    assert str(path) in str(error.value) and expected in str(error.value)
    assert "'25gbe'" not in str(error.value)  # the user's value, never the preset, is blamed
    assert main(["predict", "--cluster", str(path)]) == 2
    assert expected in one_line_error(capsys)


def test_module_help_is_help_not_a_traceback():
    done = subprocess.run([sys.executable, "-m", "sim.validation.site_fit", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "usage" in done.stdout and "Traceback" not in done.stderr


def test_predict_prints_the_cluster_and_where_each_figure_came_from(capsys):
    assert main(["predict", "--cluster", EXAMPLE, "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "cluster two-nic-25gbe" in out and "2 x 25 Gb/s socket NIC" in out
    assert "preset 25gbe, overridden in the file: count" in out and "h100 (command line)" in out
    assert "oversubscription 2 (file)" in out


def test_a_site_profile_says_when_it_extrapolates(capsys):
    assert main(["predict", "--network", "birder-paper-10gbe", "--nodes", "512", "--model", "bert-base",
                 "--batch-per-gpu", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["extrapolated"] and len(out["extrapolation_reasons"]) == 3  # model, batch, GPU count
    assert main(["predict", "--network", "birder-paper-10gbe", "--nodes", "4", "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["extrapolated"]
    assert main(["predict", "--network", "100gbe", "--nodes", "512", "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["extrapolated"]  # a generic preset has nothing fitted


def test_an_extrapolated_site_profile_spans_the_generic_preset_it_refines():
    """The paper's InfiniBand site was fitted on ResNet-50 at 32 samples per GPU, where a slow link and slow steps
    fit its rows alike (sim.validation.site_fit); for BERT-Base at 3 the two explanations part, so the interval
    holds both the site's own and that of ``ib-hdr``, the preset it refines, predicted as a user would with the
    same node count, NIC count and measured node. On the rows it was fitted on, the site's interval stays its own."""
    from sim import api

    bert = dict(batch_per_gpu=3, optimizer="adam", single_node_throughput=300.0)
    site = api.predict_config("bert-base", 4, "birder-paper-ib", **bert)
    generic = api.predict_config("bert-base", 4, "ib-hdr", nics_per_node=1, **bert)
    assert site["extrapolated"] and site["extrapolation_base"] == {
        key: generic[key] for key in ("network", "throughput", "throughput_low", "throughput_high")}
    assert site["throughput_low"] <= min(site["throughput"], generic["throughput_low"])
    assert site["throughput_high"] == max(generic["throughput_high"], site["throughput_high"])
    assert generic["throughput_high"] > 2 * site["throughput"]  # the explanations part: the width is real
    assert "widened to span ib-hdr's interval" in site["interval_basis"]
    shares = {d["input"]: d["share"] for d in site["interval_drivers"]}
    assert set(shares) == {"site_profile", "site_profile_extrapolated"} and sum(shares.values()) == pytest.approx(1)
    assert shares["site_profile_extrapolated"] > 0.5
    fitted = api.predict_config("resnet50", 4, "birder-paper-ib", single_node_throughput=3693.0)
    assert not fitted["extrapolated"] and fitted["extrapolation_base"] is None
    assert [d["input"] for d in fitted["interval_drivers"]] == ["site_profile"]
    # what the user set stays set in the generic prediction: only the site's fitted constants go back to ib-hdr's
    from dataclasses import replace

    from sim.hardware import cluster

    for change in ({"step_jitter_cv": 0.3, "multinode_loss_scale": 1.5}, {}):
        mine = api.predict_on(replace(cluster("birder-paper-ib", 4), **change), model="bert-base", **bert)
        theirs = api.predict_on(replace(cluster("ib-hdr", 4, nic_count=1), **change), model="bert-base", **bert)
        assert mine["extrapolation_base"]["throughput"] == pytest.approx(theirs["throughput"], rel=1e-12)
    # the sites ran DDP: another framework on the rows they were fitted on is an extrapolation too
    fsdp = api.predict_on(cluster("birder-paper-ib", 4, framework="fsdp"), model="resnet50",
                          single_node_throughput=3693.0)
    assert fsdp["extrapolation_reasons"] == ["birder-paper-ib was fitted with ddp, not fsdp"]
    assert fsdp["extrapolation_base"] is not None


def test_rows_are_checked_as_read():
    assert len(paper.rows()) == 24


@pytest.mark.parametrize("preset, transport, same_as", [
    ("ib-hdr", "socket", 'transport = "socket"\nline_rate_gbps = 200'),  # NCCL fell back to TCP on IB
    ("roce-200gbe", "socket", 'transport = "socket"\nline_rate_gbps = 200'),
    ("100gbe", "ib", 'transport = "ib"\nline_rate_gbps = 100'),  # the same wire under verbs (RoCE)
])
def test_a_file_that_names_another_transport_than_its_presets_gets_that_transports_constants(
        tmp_path, preset, transport, same_as):
    """Trial t7: [network] preset = "ib-hdr" with transport = "socket" kept InfiniBand's payload share and none of
    the socket path's limits (24 GB/s per NIC, not 5); the same NIC written without a preset had them."""
    over = tmp_path / "over.toml"
    over.write_text(f'name = "x"\nnodes = 2\n[network]\npreset = "{preset}"\ntransport = "{transport}"\n')
    plain = tmp_path / "plain.toml"
    plain.write_text(f'name = "x"\nnodes = 2\n[network]\n{same_as}\n')
    got, expected = load_cluster(over).nic, load_cluster(plain).nic
    kept = ("name", "source", "switch_buffer_bytes")  # the wire's switch stays the preset's
    assert got.transport == transport and {k: v for k, v in dataclasses.asdict(got).items() if k not in kept} == {
        k: v for k, v in dataclasses.asdict(expected).items() if k not in kept}
    assert any(where == "transport" and f"in place of {preset}'s" in text
               for where, text in load_cluster(over).provenance)
