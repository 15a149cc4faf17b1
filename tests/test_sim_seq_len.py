"""Tokens per sample (issue 27 item 3, CONTRACT: `--seq-len L`, required with `--params` for a sequence model):
a synthetic model's compute counts every token of a sample; a `--params` model whose compute is not measured
and whose tokens are not given is refused; built-in models carry their own sequence length with its source."""

import json

import pytest

from birder.cli import main
from sim.api import predict_on
from sim.hardware import cluster
from sim.models import MODELS, model_profile


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_compute_counts_every_token_of_a_sample():
    c = cluster("ib-hdr", 2)
    one, two, many = (predict_on(c, params=350_000_000, seq_len=n) for n in (1, 2, 1024))
    # a step's compute is the optimizer's kernels (the same for every length) plus forward and backward, which
    # count every token: affine in the length, its slope the one-token forward and backward
    per_token = two["compute_s"] - one["compute_s"]
    assert per_token > 0 and many["compute_s"] - one["compute_s"] == pytest.approx(1023 * per_token, rel=1e-9)
    assert (many["seq_len"], one["seq_len"]) == (1024, 1) and "--seq-len" in many["seq_len_source"]
    # a measured node sets the compute: the tokens are in the measurement, and --seq-len may be left out
    measured = predict_on(c, params=350_000_000, single_node_throughput=900.0)
    assert measured["seq_len"] is None and "measured" in measured["seq_len_source"]


def test_params_without_seq_len_or_a_measured_node_is_refused(capsys):
    assert main(["predict", "--params", "350000000", "--nodes", "2"]) == 2
    err = one_line_error(capsys)
    assert "--seq-len" in err and "--single-node-throughput" in err
    assert main(["sweep", "--params", "350000000", "--nodes", "2", "--networks", "10gbe", "--optimizers", "sgdm",
                 "--json"]) == 2
    assert "--seq-len" in one_line_error(capsys)
    assert main(["predict", "--params", "350000000", "--nodes", "2", "--seq-len", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_len"] == 1


def test_built_in_models_carry_their_sequence_length_and_refuse_another(capsys):
    for name in MODELS:
        profile = model_profile(name)
        assert profile.tokens >= 1 and profile.tokens_source, name
    assert model_profile("gpt2").tokens == 1024 and model_profile("resnet50").tokens == 1
    assert main(["predict", "--model", "gpt2", "--nodes", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seq_len"] == 1024 and "Radford" in out["seq_len_source"]
    assert main(["predict", "--model", "gpt2", "--nodes", "2", "--seq-len", "2048"]) == 2
    assert "1024" in one_line_error(capsys)
    assert main(["predict", "--model", "gpt2", "--nodes", "2", "--seq-len", "1024", "--json"]) == 0
