"""Stragglers (sim/stragglers.py): the expected slowest of p GPUs, the published spread it rests on, and what it
does to predictions (never faster, one node unchanged, growing with nodes, no more than the compute it adds)."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from scipy import stats

from birder.cli import main
from sim.hardware import load_cluster
from sim.network import cluster
from sim.stragglers import GPU_SPEED, GPU_SPEED_CV, STEP_JITTER_CV, combined_cv, expected_max_normal, straggler_factor
from sim.workload import predict


def test_expected_maximum_matches_closed_forms_and_tables():
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-12)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-10)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-10)
    # Harter (1961), 'Expected values of normal order statistics', Biometrika 48, Table 1
    assert expected_max_normal(5) == pytest.approx(1.16296, abs=1e-5)
    assert expected_max_normal(10) == pytest.approx(1.53875, abs=1e-5)
    assert expected_max_normal(100) == pytest.approx(2.50759, abs=1e-5)


def _expected_max_by_adaptive_quadrature(n: int) -> float:
    """E[M_n] = integral_0^inf (1 - Phi^n) - integral_-inf^0 Phi^n (E[X] from its CDF), by QUADPACK: another formula
    and another rule than the trapezoid the simulator uses."""
    from scipy import integrate, special

    tol = dict(epsabs=1e-13, epsrel=1e-13, limit=400)
    above, _ = integrate.quad(lambda x: -math.expm1(n * special.log_ndtr(x)), 0.0, math.inf, **tol)
    below, _ = integrate.quad(lambda x: math.exp(n * special.log_ndtr(x)), -math.inf, 0.0, **tol)
    return above - below


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 9, 16, 63, 64, 100, 257, 1000, 4096, 32768, 65536, 524288, 10**6,
                               10**9, 10**12, 10**18])
def test_expected_maximum_agrees_with_adaptive_quadrature_to_1e_13(n):
    # closed forms for n = 2, 3, 4 (David & Nagaraja, Order Statistics, 3rd ed., section 3.2) bound the quadrature too
    closed = {2: 1 / math.sqrt(math.pi), 3: 3 / (2 * math.sqrt(math.pi)),
              4: 6 / math.pi ** 1.5 * math.atan(math.sqrt(2))}
    if n in closed:
        assert expected_max_normal(n) == pytest.approx(closed[n], abs=1e-15)
    assert expected_max_normal(n) == pytest.approx(_expected_max_by_adaptive_quadrature(n), abs=1e-13)


@pytest.mark.parametrize("n", [0, -3, 2.0, True, 10**61, "8"])
def test_expected_maximum_refuses_what_is_not_a_count_it_integrates(n):
    with pytest.raises(ValueError, match="expected_max_normal: n must be an integer from 1"):
        expected_max_normal(n)


def test_spread_reproduces_the_published_variation():
    """Sinha et al. (SC'22): 8% average variation between GPUs of one SKU, the whisker-to-whisker spread of a box
    plot over its median, (Q3 + 1.5 IQR - (Q1 - 1.5 IQR)) / Q2 as the authors' artifact computes it, of a normal
    with the simulator's spread."""
    q1, q3 = stats.norm.ppf([0.25, 0.75], loc=1.0, scale=GPU_SPEED_CV)
    iqr = q3 - q1
    assert GPU_SPEED["variation"] == 0.08
    assert ((q3 + 1.5 * iqr) - (q1 - 1.5 * iqr)) / 1.0 == pytest.approx(0.08, rel=1e-3)  # the median is 1
    assert "8% (max 22%) average performance variation" in GPU_SPEED["source"]


def test_factor_is_one_on_a_node_and_grows_with_nodes():
    assert straggler_factor(8, 8, GPU_SPEED_CV) == 1.0
    assert straggler_factor(4096, 8, 0.0) == 1.0
    factors = [straggler_factor(8 * n, 8, GPU_SPEED_CV) for n in (1, 2, 4, 8, 64, 512, 8192)]
    assert factors == sorted(factors) and factors[-1] < 1 + GPU_SPEED_CV * expected_max_normal(65536)
    # 32 nodes of 8: the slowest of 256 against the slowest of 8, (1 + 2.8269 cv) / (1 + 1.4236 cv)
    assert factors[0] == 1.0 and straggler_factor(256, 8, GPU_SPEED_CV) == pytest.approx(1.0204, abs=1e-4)
    # the figures sim/README.md quotes: 4 and 512 nodes of 8
    assert straggler_factor(32, 8, GPU_SPEED_CV) == pytest.approx(1.0094, abs=1e-4)
    assert straggler_factor(4096, 8, GPU_SPEED_CV) == pytest.approx(1.0320, abs=1e-4)
    readme = (Path(__file__).resolve().parents[1] / "sim" / "README.md").read_text()
    f = {n: f"{straggler_factor(8 * n, 8, GPU_SPEED_CV):.4f}" for n in (4, 32, 512)}
    assert f"1 on one node, {f[4]} on 4 nodes of 8, {f[32]} on 32, {f[512]} on 512" in " ".join(readme.split())
    assert f"cv = 0.08 / 5.396 = {GPU_SPEED_CV:.4f}" in readme


@pytest.mark.parametrize("network,optimizer", [("ib-hdr", "sgdm"), ("10gbe", "sgdm"), ("25gbe", "birder")])
def test_stragglers_never_lift_a_prediction_and_add_at_most_their_compute(network, optimizer):
    for nodes in (1, 4, 16):
        base = cluster(network, nodes)
        even = predict(replace(base, gpu_speed_cv=0.0, step_jitter_cv=0.0), model="resnet50", optimizer=optimizer,
                       single_node_throughput=3000.0)
        spread = predict(base, model="resnet50", optimizer=optimizer, single_node_throughput=3000.0)
        extra = (straggler_factor(base.n_gpus, 8, base.straggler_cv()) - 1) * even.compute_s
        assert even.iteration_s <= spread.iteration_s <= even.iteration_s + extra + 1e-12
        assert spread.throughput <= nodes * 3000.0 * (1 + 1e-9)  # never above linear scaling of the node
        if nodes == 1:
            assert spread.throughput == pytest.approx(3000.0, rel=1e-6)


def test_throughput_per_gpu_never_rises_with_nodes_from_stragglers_alone():
    """On a network too fast to matter, stragglers alone make each added node worth a little less."""
    per_gpu = [predict(cluster("ib-ndr", n, gpu="h100"), model="resnet50", single_node_throughput=3000.0)
               .throughput / n for n in (1, 2, 8, 32, 128)]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(per_gpu, per_gpu[1:], strict=False))
    assert per_gpu[-1] < per_gpu[0]


@pytest.mark.parametrize("option, key, default, bad_in_file", [
    ("--gpu-speed-cv", "gpu_speed_cv", GPU_SPEED_CV, '"x"'),
    ("--step-jitter-cv", "step_jitter_cv", STEP_JITTER_CV, "true"),
])
def test_command_line_and_cluster_file_set_or_turn_off_each_spread(tmp_path, capsys, option, key, default,
                                                                     bad_in_file):
    """The persistent speed spread and the per-step jitter are set alike: on the command line, in a cluster file,
    0 turning either off; a bad value is one error."""
    args = ["predict", "--model", "resnet50", "--nodes", "16", "--network", "ib-hdr",
            "--single-node-throughput", "3000", "--json"]
    runs = {}
    for cv in (None, "0", "0.15"):
        assert main(args + ([] if cv is None else [option, cv])) == 0
        out = json.loads(capsys.readouterr().out)
        runs[cv] = out["throughput"]
        assert out[key] == (default if cv is None else float(cv))
    assert runs["0"] > runs[None] > runs["0.15"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu_speed_cv"] == GPU_SPEED_CV and out["step_jitter_cv"] == STEP_JITTER_CV
    assert out["straggler_factor"] == straggler_factor(128, 8, combined_cv(GPU_SPEED_CV, STEP_JITTER_CV))
    path = tmp_path / "c.toml"
    path.write_text(f'{key} = 0\n[network]\npreset = "ib-hdr"\n')
    assert getattr(load_cluster(path, 16), key) == 0.0
    assert main(["predict", "--model", "resnet50", "--cluster", str(path), "--nodes", "16",
                 "--single-node-throughput", "3000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["throughput"] == pytest.approx(runs["0"], rel=1e-12)
    for bad in ("-0.1", "5", "nan"):
        assert main(args + [option, bad]) == 2
        err = capsys.readouterr().err
        assert option in err and len(err.strip().splitlines()) == 1
    path.write_text(f'{key} = {bad_in_file}\n[network]\npreset = "ib-hdr"\n')
    with pytest.raises(ValueError, match=key):
        load_cluster(path, 2)
