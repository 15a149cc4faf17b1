"""`birder bench`: real timings over two gloo ranks, and a cluster profile that `birder predict` reads."""

import json

import pytest
import torch

from birder.cli import main
from gpu_validation.bench import (
    COLLECTIVES,
    STAGE_BYTES,
    BenchConfig,
    profile_fields,
    stage_timings,
    write_profile,
)
from sim.network import load_cluster
from sim.system import ring_latency


def test_bench_command_measures_and_writes_a_profile_predict_reads(tmp_path, capsys):
    out = tmp_path / "measured.toml"
    status = main(["bench", "--ranks", "2", "--gpus-per-node", "1", "--sizes", "64", "4096", "--repeats", "1",
                   "--out", str(out), "--json"])
    assert status == 0
    result = json.loads(capsys.readouterr().out)
    assert {r["op"] for r in result["collectives"]} == set(COLLECTIVES)
    assert all(r["seconds"] > 0 and r["group"] == "inter" for r in result["collectives"])
    # nccl-tests' size column: all-gather's total output, n x its input (trial t7: bench gave the input)
    sizes = {op: sorted(r["bytes"] for r in result["collectives"] if r["op"] == op) for op in COLLECTIVES}
    assert sizes["all_reduce"] == [256, 16384] and sizes["all_gather"] == [512, 32768]
    assert sizes["reduce_scatter"] == sizes["all_to_all"] == sizes["all_reduce"]
    for r in result["collectives"]:  # nccl-tests' columns: busbw = algbw x (n-1)/n (x 2 for all-reduce), n = 2
        assert r["time_s"] > 0 and r["algbw_gbytes_per_s"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["busbw_gbytes_per_s"] == pytest.approx(r["algbw_gbytes_per_s"] * (1.0 if r["op"] == "all_reduce"
                                                                                    else 0.5))
    text = out.read_text()  # the file says what was measured and where, what is a preset, what is assumed
    assert "# measured: [network]" in text and "CPU loopback" in text and "# assumed:" in text
    assert "# preset: gpu" in text and result["provenance"]["measured"]
    assert [k["elements"] for k in result["kernels"]] == [64, 4096]
    assert (tmp_path / "measured.png").stat().st_size > 0 and result["plot"] == str(tmp_path / "measured.png")
    cluster = load_cluster(out)
    network = result["profile_fields"]["network"]
    assert (cluster.n_nodes, cluster.gpus_per_node) == (2, 1)
    assert cluster.nic.line_rate == pytest.approx(network["line_rate_gbps"] * 1e9)
    assert cluster.nic.latency == pytest.approx(network["latency_us"] * 1e-6)
    assert cluster.nic.message_overhead == 0 and cluster.nic.step_overhead == 0  # no fitted costs on top
    # latency_us is the transport's extra per hop: the measured 2-rank all-reduce of 256 B is base + 2 steps + flows
    reduce_us = min(r["seconds"] for r in result["collectives"] if r["op"] == "all_reduce" and r["bytes"] == 256) * 1e6
    busbw = max(r["busbw_gbytes_per_s"] for r in result["collectives"])
    step = max(0.0, (reduce_us - 256 / (busbw * 1e3) - 6.6) / 2)
    assert network["latency_us"] == pytest.approx(max(0.0, step - 5.0), abs=0.01)  # NET tree LL: 1 GPU per node
    assert network["latency_us"] < reduce_us / 2 and "# latency_us: all-reduce of 256 B over 2 ranks" in text
    sim_us = 1e6 * ring_latency(cluster, "LL", 2, 2, True)  # the simulator gives back the measured time's latency
    assert sim_us == pytest.approx(max(reduce_us - 256 / (busbw * 1e3), 6.6 + 2 * 5.0), abs=0.05)

    status = main(["predict", "--cluster", str(out), "--model", "resnet50", "--optimizer", "birder", "--json"])
    assert status == 0 and json.loads(capsys.readouterr().out)["throughput"] > 0


def test_one_node_profile_measures_intra_and_names_a_network_preset(tmp_path):
    rows = [{"group": "intra", "ranks": 4, "op": op, "bytes": b, "seconds": s, "busbw_gbytes_per_s": bw}
            for op in COLLECTIVES for b, s, bw in ((256, 2e-5, 0.01), (2**22, 1e-3, 150.0))]
    cfg = BenchConfig(backend="nccl", ranks=4)
    fields = profile_fields(cfg, 1, 4, rows, "NVIDIA H100 80GB HBM3")
    # per ring step: (20 us - 256 B x 6/4 / 150 GB/s - 6.6 us LL base) / (2 x 3 steps), the simulator's meaning
    step = (20.0 - 256 * 6 / 4 / 150e3 - 6.6) / 6
    assert fields["intra"] == {"port_gbytes_per_s": 150.0, "latency_us": round(step, 2)} and fields["gpu"] == "h100"
    path = write_profile(tmp_path / "p.toml", fields, {"backend": "nccl", "device": "H100", "ranks": 4, "nodes": 1,
                                                       "gpus_per_node": 4, "sizes": [64, 2**20], "kernels": []})
    cluster = load_cluster(path)
    assert cluster.intra.port_bandwidth == pytest.approx(150e9) and cluster.nic.name == "10gbe"
    assert cluster.gpu == "h100"


def test_bench_times_the_kernels_birder_step_runs(monkeypatch, tmp_path):
    """The three functions one Birder.step() calls (one rank, in this process) are the ones bench times; each
    stage's GB/s is the bytes it must move over its median time, those bytes counted here from the tensors bench
    actually hands each function (read once; the state it updates in place written once; its packed result)."""
    import torch.distributed as dist
    from torch import nn

    from gpu_validation import optimizer
    from gpu_validation import torch_birder as tb

    calls: dict[str, int] = {}
    moved: dict[str, float] = {}  # bytes the last call of each function must move
    updated_in_place = {"worker_step_packed_": slice(0, 3),  # m, b_hat, e
                        "server_step_packed_": slice(1, 2),  # server_error (after the workers' packed signs)
                        "_apply_packed_update_": slice(0, 1)}  # the parameter piece

    def counting(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            out = real(*args, **kwargs)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]  # bits: the piece's signs (one piece here)
            moved[name] = (sum(t.nbytes for t in tensors) + sum(t.nbytes for t in tensors[updated_in_place[name]])
                           + (out.nbytes if isinstance(out, torch.Tensor) else 0))
            return out

        monkeypatch.setattr(module, name, wrapper)

    for module, name in ((tb, "worker_step_packed_"), (tb, "server_step_packed_"),
                         (optimizer, "_apply_packed_update_")):
        counting(module, name)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(8, 4))
        opt = optimizer.Birder(ddp, lr=1e-3)
        ddp(torch.ones(2, 8)).sum().backward()
        opt.step()
    finally:
        dist.destroy_process_group()
    stepped, calls = dict(calls), {}
    assert set(stepped) == {"worker_step_packed_", "server_step_packed_", "_apply_packed_update_"}, stepped
    (row,) = stage_timings([1000], torch.device("cpu"), repeats=1)
    assert set(calls) == set(stepped), calls
    functions = {"worker": "worker_step_packed_", "server": "server_step_packed_", "update": "_apply_packed_update_"}
    assert set(functions) == set(STAGE_BYTES)
    for stage, function in functions.items():  # bench's bytes (GB/s x seconds) = the bytes counted from the call
        assert row[f"{stage}_gbytes_per_s"] * row[f"{stage}_s"] * 1e9 == pytest.approx(moved[function]), stage
    assert row["peak_ratio"] == pytest.approx(row["gbytes_per_s"] / row["peak_gbytes_per_s"])
    assert row["elements"] == 1000 and 0 < row["draws_s"] and 0 < row["peak_ratio"]


def test_bad_bench_arguments_exit_2(capsys):
    assert main(["bench", "--ranks", "3", "--gpus-per-node", "2"]) == 2
    assert "do not split" in capsys.readouterr().err
