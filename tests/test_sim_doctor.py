"""`birder doctor` on real nccl-tests pastes (tests/fixtures/nccl_tests, sources in SOURCES.md): a verdict against the
collective model of the stated hardware, causes ranked by the log's own evidence and by which misconfiguration the
model reproduces; and `birder calibrate` on pastes as users make them (launcher prefixes, cut tables) or should not
fit (failed checks, two runs in one paste, uneven or single nodes)."""

import json
from pathlib import Path

import pytest
from nccl_pastes import rank_lines, sweep_rows

from birder.cli import main
from sim import calibrate, doctor

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"
IB_8X8 = FIXTURES / "ib100_8x8v100_all_reduce.txt"
ROCE_2X1_H100 = FIXTURES / "roce400x4_2x1h100_all_reduce_tree.txt"
GB10_SMALL = FIXTURES / "roce200_2x1gb10_all_reduce_partial.txt"

# NCCL INFO lines as threads printed them (SOURCES.md): nccl-tests 284, nccl 398, nccl-tests 29
SOCKET_LINES = """agzen-worker:475220:475220 [0] NCCL INFO NCCL version 2.25.1+cuda12.1
agzen-worker:475220:475228 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
agzen-worker:475220:475228 [0] NCCL INFO NET/Socket : Using [0]eno2:10.42.0.2<0>
agzen-worker:475220:475228 [0] NCCL INFO Using network Socket
agzen-master:3867861:3867877 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
"""
P2P_LINES = """ip-172-31-0-112:8162:8221 [3] NCCL INFO Ring 00 : 3[3] -> 2[2] via P2P/IPC
ip-172-31-13-129:8544:8601 [7] NCCL INFO Ring 00 : 15 -> 0 [send] via NET/Socket/0
"""
IB_LINES = "server3:15221:15221 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>\n"


def _doctor(capsys, log, *args) -> dict:
    assert main(["doctor", str(log), *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_evidence_is_read_from_real_info_lines():
    sockets = doctor.read_evidence(SOCKET_LINES)
    assert sockets.transports == {"socket"} and sockets.env == {"IB_DISABLE": "1"} and sockets.nccl_version == "2.25.1"
    assert sockets.channels is None  # "Channel 00/0 : 1[0] -> 0[0]" is a connection, not a count of channels
    p2p = doctor.read_evidence(P2P_LINES)
    assert p2p.transports == {"socket"} and not p2p.shm
    assert doctor.read_evidence(IB_LINES).ib_devices == 1
    ring = doctor.read_evidence("h:1:1 [0] NCCL INFO Channel 00/02 :    0   1   2   3\nvia NET/IB/0/GDRDMA\n")
    assert ring.channels == 2 and ring.gdr is True


def test_a_table_far_below_its_hardware_is_judged_so_and_the_log_ranks_the_causes(capsys, tmp_path):
    """8 x 8 V100 over 100 Gb/s InfiniBand at 4.3 GB/s busbw (nccl-tests issue 78): far below. Without NCCL INFO
    lines the model's own match (TCP sockets give about that) is the cause, marked unconfirmed; with the log of a
    socket fallback pasted around the table the cause comes with the log's evidence."""
    bare = _doctor(capsys, IB_8X8, "--nodes", 8, "--gpus-per-node", 8, "--gpu", "v100", "--network", "ib-edr")
    assert {"rows", "verdict", "likely_causes"} <= bare.keys()
    row_keys = {"size", "busbw_gbytes_per_s", "expected_busbw_gbytes_per_s", "share"}
    assert [set(r) for r in bare["rows"]] == [row_keys] * 2
    assert bare["plateau_share"] < doctor.FAR_BELOW_SHARE and "far below" in bare["verdict"]
    first = bare["likely_causes"][0]
    assert first.startswith("NCCL over TCP sockets") and "does not show it" in first
    pasted = tmp_path / "with_log.txt"
    pasted.write_text(SOCKET_LINES + IB_8X8.read_text())
    logged = _doctor(capsys, pasted, "--nodes", 8, "--gpus-per-node", 8, "--gpu", "v100", "--network", "ib-edr")
    assert "the log shows NET/Socket" in logged["likely_causes"][0]
    assert "most likely NCCL over TCP sockets" in logged["verdict"]


def test_a_table_at_its_hardware_ceiling_is_normal_and_says_what_binds(capsys):
    """2 nodes x 1 H100 with 4 x 400G NICs, 41 GB/s busbw (nccl-tests issue 232; the thread expected 200): one GPU's
    PCIe Gen5 link carries all four NICs' traffic, so about 48 GB/s is the ceiling and the table is normal; its
    sweep stops at 32 MB, which the causes say."""
    found = _doctor(capsys, ROCE_2X1_H100, "--nodes", 2, "--gpus-per-node", 1, "--gpu", "h100", "--network", "ib-ndr",
                    "--nics-per-node", 4)
    assert doctor.NORMAL_SHARE <= found["plateau_share"] <= doctor.FASTER_SHARE and "normal" in found["verdict"]
    assert "PCIe link binds" in found["verdict"] and not found["plateau_reached"]
    assert found["likely_causes"] == [c for c in found["likely_causes"] if "below the plateau" in c] != []
    assert found["evidence"]["env"] == {"ALGO": "Tree"}


@pytest.mark.parametrize("args, message", [
    (["--nodes", "8", "--gpus-per-node", "8", "--gpu", "v100"], "name the network it ran on"),
    ([], "no Rank lines"),
])
def test_doctor_refuses_what_it_cannot_judge_with_one_line(capsys, args, message):
    assert main(["doctor", str(IB_8X8), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_doctor_names_a_gpu_it_does_not_know(capsys):
    assert main(["doctor", str(GB10_SMALL), "--network", "roce-200gbe"]) == 2
    assert "the log's GPU (NVIDIA GB10) is not one the model knows" in capsys.readouterr().err


def _rows(text: str) -> list[tuple[int, float]]:
    return [(m.nbytes, m.time_s) for m in calibrate.parse_nccl_tests(text, "paste").rows]


def test_launcher_prefixes_and_cut_tables_read_the_same_rows():
    text = GB10_SMALL.read_text()
    lines = text.splitlines()
    expected = _rows(text)
    assert _rows("\n".join(f"{i % 2}: {line}" for i, line in enumerate(lines))) == expected  # srun --label
    assert _rows("\n".join(f"2025-11-19T10:00:0{i % 10}.123456789Z {line}" for i, line in enumerate(lines))) == expected
    cut = [" ".join(line.split()[:9]) if line[:1] == " " else line for line in lines]  # out-of-place columns only
    assert _rows("\n".join(cut)) == expected
    assert calibrate.parse_nccl_tests("\n".join(f"0: {line}" for line in lines), "paste").hosts == (
        "spark-d708", "spark-dbf4")


def _with_ranks(per_host: list[int]) -> str:
    lines = [x for x in GB10_SMALL.read_text().splitlines() if "Rank" not in x]
    ranks = rank_lines(per_host, host="node-{h}").splitlines()
    return "\n".join(lines[:5] + ranks + lines[5:])


@pytest.mark.parametrize("edit, message", [
    (lambda t: t + "# Out of bounds values : 3 FAILED\n", "3 out-of-bounds"),
    (lambda t: t.replace("0.51       0    30.25", "0.51       7    30.25"), "counted 7 wrong values"),
    (lambda t: t + t, "appears on lines"),
    (lambda t: t + "        4096          1024     float     sum      -1    25.00    0.16    0.16       0    25.10"
               "    0.16    0.16       0\n", "a second run starts"),
])
def test_pastes_that_would_fit_wrongly_are_refused(edit, message):
    with pytest.raises(ValueError, match=message):
        calibrate.parse_nccl_tests(edit(GB10_SMALL.read_text()), "paste")


def test_layouts_a_network_fit_cannot_use_are_refused(tmp_path, capsys):
    uneven = calibrate.parse_nccl_tests(_with_ranks([8, 8, 8, 4]), "paste")
    assert uneven.ranks_per_host == (8, 8, 8, 4)
    with pytest.raises(ValueError, match="unevenly.*4 on node-3"):
        calibrate.layout([uneven], None, None)
    single = tmp_path / "single.txt"
    single.write_text(_with_ranks([8]))
    assert main(["calibrate", str(single), "--network", "roce-200gbe", "--out", str(tmp_path / "c.toml")]) == 2
    assert "measured on one node" in capsys.readouterr().err and not (tmp_path / "c.toml").exists()


@pytest.mark.parametrize("command", ["doctor", "calibrate"])
def test_a_gpu_the_rank_lines_contradict_is_refused(tmp_path, capsys, command):
    """--gpu a100 on a log whose Rank lines name an H100: the GPU sets the PCIe link behind the NICs, so both
    commands refuse it as they refuse a --nodes the Rank lines contradict (the trial's doctor judged it silently)."""
    log = tmp_path / "h100.txt"
    log.write_text(GB10_SMALL.read_text().replace("NVIDIA GB10", "NVIDIA H100 80GB HBM3"))
    out = ["--out", str(tmp_path / "c.toml")] if command == "calibrate" else []
    assert main([command, str(log), "--network", "roce-200gbe", "--gpu", "a100", *out]) == 2
    err = capsys.readouterr().err
    assert "--gpu a100 but the output's Rank lines name NVIDIA H100 80GB HBM3 (h100)" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "c.toml").exists()


def _one_h100_node_at_ring_speed(log_line: str) -> str:
    """8 x H100 on one NVSwitch node, all-reduce at the ring's ~369 GB/s busbw on the plateau (what the h100-nvlink
    preset quotes without NVLS), below an NCCL INFO line that says how NCCL ran."""
    algbw = lambda size: 369.0 / 1.75 * size / (size + (8 << 20))  # noqa: E731 (a latency-bound rise to the plateau)
    return f"hgx01:100:100 [0] NCCL INFO {log_line}\n# nccl-tests all_reduce_perf -b 1M -e 8G -f 2 -g 8\n" + \
        rank_lines([8], "NVIDIA H100 80GB HBM3", "hgx01") + sweep_rows(range(20, 34), algbw, 1.75)


@pytest.mark.parametrize("log_line, normal", [("NCCL version 2.14.3+cuda11.8", True),
                                              ("NCCL_NVLS_ENABLE set by environment to 0.", True),
                                              ("NCCL version 2.19.3+cuda12.2", False)])
def test_one_h100_node_is_judged_against_the_ring_where_nccl_ran_without_nvls(tmp_path, capsys, log_line, normal):
    """t12: one H100 node at the ring's 369 GB/s under NCCL 2.14 (before NVLS, 2.17) or NCCL_NVLS_ENABLE=0 was "78%
    of 475, below", with advice about switch ports and NICs that one node does not have. Under an NCCL with NVLS the
    same table is below, and the advice names the node's own links."""
    log = tmp_path / "ar.txt"
    log.write_text(_one_h100_node_at_ring_speed(log_line))
    found = _doctor(capsys, log)
    assert found["verdict"].startswith("all-reduce on 1 node x 8 H100 (h100-nvlink")
    if normal:
        assert "no NVLS" in found["verdict"] and found["verdict"].endswith("normal for this hardware")
    else:
        assert "below what this hardware gives" in found["verdict"] and "no NVLS" not in found["verdict"]
        assert "nvidia-smi topo -m" in found["likely_causes"][0] and "NIC" not in found["likely_causes"][0]


def test_a_paste_with_a_large_jobs_info_lines_is_read_and_only_one_past_64_mib_refused(tmp_path, capsys):
    """t12: a 19 MB paste (the table inside NCCL_DEBUG=INFO lines, as the README asks, of a job at scale) was refused
    as "the wrong file" at 16 MiB; it is read, with the same verdict as the bare table."""
    bare = _doctor(capsys, IB_8X8, "--nodes", 8, "--gpus-per-node", 8, "--gpu", "v100", "--network", "ib-edr")
    info = "".join(f"node{i % 64:02d}:{1000 + i}:{2000 + i} [{i % 8}] NCCL INFO Channel {i % 32:02d}/32 : "
                   f"{i % 64}[{i % 8}] -> {(i + 1) % 64}[{(i + 1) % 8}] via P2P/IPC/read\n" for i in range(230_000))
    big = tmp_path / "with_info.txt"
    big.write_text(info + IB_8X8.read_text())
    assert big.stat().st_size > 17 << 20
    found = _doctor(capsys, big, "--nodes", 8, "--gpus-per-node", 8, "--gpu", "v100", "--network", "ib-edr")
    assert found["plateau_share"] == bare["plateau_share"]
    huge = tmp_path / "huge.txt"
    huge.write_text("x" * (calibrate.MAX_OUTPUT_BYTES + 1))
    assert main(["doctor", str(huge), "--network", "ib-edr"]) == 2
    assert "bytes is the wrong file" in capsys.readouterr().err


@pytest.mark.parametrize("nodes", [2, 4])
def test_a_slow_table_no_cause_explains_gets_advice_for_its_own_node_count(tmp_path, capsys, nodes):
    """t14: a 2-node table at 65% of its hardware was told to "compare with nccl-tests on two nodes only"; two
    nodes are told to test each node alone, more nodes to test two."""
    plateau = 0.65 * 8 * 25 / (2 * (8 * nodes - 1) / (8 * nodes))  # algbw of 65% of 8 HDR NICs' wire
    paste = tmp_path / "slow.txt"
    paste.write_text(rank_lines([8] * nodes) + sweep_rows(range(20, 34), lambda s: plateau * s / (s + 4e6),
                                                          2 * (8 * nodes - 1) / (8 * nodes)))
    found = _doctor(capsys, paste, "--network", "ib-hdr", "--nics-per-node", 8)
    assert "below what this hardware gives" in found["verdict"]
    advice = found["likely_causes"][-1]
    assert ("each node alone" in advice) == (nodes == 2) and ("two nodes only" in advice) == (nodes > 2), advice
