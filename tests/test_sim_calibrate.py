"""`birder calibrate`: real nccl-tests pastes (tests/fixtures/nccl_tests, sources in SOURCES.md) read as users
paste them, the network fitted, and the cluster TOML it writes reproducing the measured table through
`birder collective --cluster`."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from nccl_pastes import rank_lines, sweep_rows

from birder.cli import main
from sim import calibrate
from sim.hardware import load_cluster
from sim.stragglers import STEP_JITTER_CV

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"
ALL_REDUCE_8X8 = FIXTURES / "ib100_8x8v100_all_reduce.txt"
ALL_TO_ALL_8X8 = FIXTURES / "ib100_8x8v100_alltoall.txt"
GB10_SMALL = FIXTURES / "roce200_2x1gb10_all_reduce_partial.txt"


def test_pastes_are_read_with_their_layout():
    small = calibrate.read_output(GB10_SMALL)
    assert [m.nbytes for m in small.rows] == [8192, 16384, 32768, 65536]
    assert small.rows[0].op == "all-reduce" and small.rows[0].time_s == pytest.approx(27.82e-6)
    assert small.hosts == ("spark-d708", "spark-dbf4") and small.ranks == 2 and small.gpu is None  # GB10: unknown
    # the thread's excerpt stops at 64 KB of a sweep its header runs to 8 GB: the paste is cut, and says so
    assert "stops at 65,536 bytes" in small.warnings[0] and "maxBytes 8,589,934,592" in small.warnings[0]
    whole = GB10_SMALL.read_text().replace("maxBytes 8589934592", "maxBytes 100000")  # 65536 x 2 is beyond it
    assert calibrate.parse_nccl_tests(whole, "whole").warnings == ()
    a2a = calibrate.read_output(ALL_TO_ALL_8X8, "all-to-all")  # no redop column, no Rank lines
    assert [(m.nbytes, m.busbw_gbytes_per_s) for m in a2a.rows] == [(268435456, 0.51), (536870912, 0.51)]
    assert a2a.hosts == () and a2a.ranks == 0


def test_mpi_prefixes_and_logs_around_the_table_are_ignored():
    text = GB10_SMALL.read_text().splitlines()
    noisy = ["$ mpirun -np 2 ./build/all_reduce_perf -b 8K -e 64K",
             "spark-d708:1:1 [0] NCCL INFO Bootstrap : Using enp1s0f0np0:10.0.0.1<0>"]
    noisy += [f"[1,0]<stdout>:{line}" for line in text]
    parsed = calibrate.parse_nccl_tests("\n".join(noisy), "noisy")
    assert parsed.rows[-1].nbytes == 65536 and len(parsed.rows) == 4 and parsed.ranks == 2
    # all_reduce_perf -S 1 ends each row with the time it was printed
    stamped = [f"{line}  2025-11-19 10:00:{i:02d}" if line[:1] == " " else line for i, line in enumerate(text)]
    assert calibrate.parse_nccl_tests("\n".join(stamped), "stamped").rows == calibrate.parse_nccl_tests(
        "\n".join(text), "plain").rows
    # all_reduce_perf -I 1 adds each side's per-iteration min, max, p99 and spread after its #wrong
    stats = ["27.01", "29.40", "29.40", "2.10"]
    per_iteration = [line.replace("#wrong", "#wrong   i_min   i_max   i_p99   i_cv%") if "#wrong" in line else
                     " ".join(line.split()[:9] + stats + line.split()[9:] + stats) if line[:1] == " " else line
                     for line in text]
    assert [(m.nbytes, m.time_s) for m in calibrate.parse_nccl_tests("\n".join(per_iteration), "I").rows] == [
        (m.nbytes, m.time_s) for m in parsed.rows]


@pytest.mark.parametrize("text, message", [
    ("", "no nccl-tests rows"),
    ("# all_reduce_perf\n# nothing measured\n", "no nccl-tests rows"),
    ("all_reduce_perf\n  8192  2048  float  sum  -1  nan  0.29  0.29  0  28.5  0.29  0.29  0\n", "line 2"),
    ("all_reduce_perf\n  8192  2048  float  sum  -1  27.8  0.29\n", "line 2: not an nccl-tests row"),
    ("all_reduce_perf all_gather_perf\n8192 2048 float sum -1 27.8 0.29 0.29 0 28.5 0.29 0.29 0\n",
     "cannot tell which collective"),
    ("8192 1024 float none -1 27.8 0.29 0.29 0 28.5 0.29 0.29 0\n", "pass --op"),  # all-gather or all-to-all
    ("8192 1024 float sum -1 27.8 0.29 0.29 0 28.5 0.29 0.29 0\n", "pass --op"),  # count per rank: reduce-scatter
    ("8192 2048 float sum 0 27.8 0.29 0.29 0 28.5 0.29 0.29 0\n", "rooted collective"),  # a root: reduce
])
def test_bad_pastes_are_refused_with_one_error(text, message):
    with pytest.raises(ValueError, match=message):
        calibrate.parse_nccl_tests(text, "paste")


def _second_run(text: str, hosts: tuple[str, str]) -> str:
    """``text`` followed by another run's header and Rank lines (on ``hosts``) and a size the first did not reach."""
    header = [line.replace("spark-d708", hosts[0]).replace("spark-dbf4", hosts[1])
              for line in text.splitlines() if line.startswith("#")]
    row = ("      131072         32768     float     sum      -1    80.00    1.64    1.64       0"
           "    80.10    1.64    1.64       0")
    return text + "\n".join(header + [row]) + "\n"


def _cut_last_row(text: str, keep: int) -> str:
    """The paste ending inside its last row, after ``keep`` of its columns."""
    lines = text.splitlines()
    last = max(i for i, x in enumerate(lines) if x.strip()[:1].isdigit())
    return "\n".join(lines[:last] + [" ".join(lines[last].split()[:keep])]) + "\n"


def test_a_row_cut_before_its_in_place_columns_is_read_and_one_cut_inside_them_refused():
    whole = calibrate.parse_nccl_tests(GB10_SMALL.read_text(), "paste")
    cut = calibrate.parse_nccl_tests(_cut_last_row(GB10_SMALL.read_text(), 9), "paste")  # out-of-place whole
    assert [m.time_s for m in cut.rows] == [m.time_s for m in whole.rows]
    for keep in (8, 6):  # the trial's paste: cut inside busbw read "-1" (the root) as a time of -1.0 us
        with pytest.raises(ValueError, match=f"{keep} columns where the rows above have 13: the row is cut short"):
            calibrate.parse_nccl_tests(_cut_last_row(GB10_SMALL.read_text(), keep), "paste")


@pytest.mark.parametrize("edit, message", [
    # two runs one after the other whose sizes do not repeat: on other hosts (the Rank lines would count 4 hosts of
    # 1 GPU), or on the same ones (rows of two measurements in one fit)
    (lambda t: _second_run(t, ("spark-aaaa", "spark-bbbb")), "more than one run"),
    (lambda t: _second_run(t, ("spark-d708", "spark-dbf4")), "more than one run"),
    # the terminal's scrollback lost the first Rank lines: the hosts left would be read as the whole job
    (lambda t: "\n".join(x for x in t.splitlines() if "Rank  0 " not in x), "no Rank line for rank 0"),
    # all_reduce_perf -C 1 prints the CPU time of the launch in the time columns, not the collective's time
    (lambda t: t.replace("    time   algbw", " cputime   algbw"), "CPU time"),
    # nccl-tests built without MPI=1 under `srun --label -N 2`: each task ran its own single-node test (rank 0 alone
    # on its host), all in one log
    (lambda t: "\n".join(f"{task}: {x.replace('spark-d708', f'node-{task}')}" for task in range(2)
                         for x in t.splitlines() if "Rank  1 " not in x), "one single-node test per task.*MPI=1"),
    # the same, the two tasks' lines interleaved as srun prints them (t12: it got the generic "more than one run")
    (lambda t: "\n".join(f"{task}: {x.replace('spark-d708', f'node-{task}')}" for x in t.splitlines()
                         if "Rank  1 " not in x for task in range(2)), "run per host.*one single-node test per task"),
    # nccl-tests -o all: a table per reduction, each over the same sizes (t12: refused as "more than one run")
    (lambda t: t + "\n".join(x.replace(" sum ", " max ") for x in t.splitlines() if " sum " in x),
     "reduction sum .* and max .*a table per reduction \\(nccl-tests -o all\\)"),
    # the rows pasted without their column headers: a #wrong count is still a failed check (older nccl-tests print
    # the largest error there, far below 1 when the check passes)
    (lambda t: "\n".join(x for x in t.replace("0.51       0    30.25", "0.51       7    30.25").splitlines()
                         if not x.startswith("#")), "7 .*wrong"),
])
def test_pastes_that_would_fit_silently_wrong_are_refused(edit, message):
    with pytest.raises(ValueError, match=message):
        calibrate.parse_nccl_tests(edit(GB10_SMALL.read_text()), "paste")


def _calibrate(tmp_path, capsys, *args) -> dict:
    out = tmp_path / "cluster.toml"
    assert main(["calibrate", *map(str, args), "--out", str(out), "--json"]) == 0
    return json.loads(capsys.readouterr().out) | {"path": out}


def test_calibrated_cluster_reproduces_the_measured_all_reduce(tmp_path, capsys):
    """8 nodes x 8 V100 on 100 Gb/s InfiniBand (nccl-tests issue 78): busbw 4.33 GB/s, a third of what the
    hardware preset assumes. After the fit, `birder collective --cluster` gives both sizes within 2%."""
    fit = _calibrate(tmp_path, capsys, ALL_REDUCE_8X8, "--op", "all-reduce", "--nodes", 8, "--gpus-per-node", 8,
                     "--gpu", "v100", "--network", "ib-edr")
    assert fit["fitted"] == ["efficiency"] and 0.3 < fit["constants"]["efficiency"] < 0.4
    text = fit["path"].read_text()
    assert "efficiency = " in text and "# FITTED to" in text and str(ALL_REDUCE_8X8) in text
    assert "nodes = 8  # given (--nodes): the output prints no Rank lines" in text
    assert 'gpu = "v100"  # given (--gpu)' in text
    calibrated = load_cluster(fit["path"])
    assert calibrated.nic.fitted
    # fitted on collectives, not on training steps: it keeps the generic per-step jitter a site profile drops
    assert calibrated.step_jitter_cv == STEP_JITTER_CV > 0
    measured = {m.nbytes: m.time_s for m in calibrate.read_output(ALL_REDUCE_8X8, "all-reduce").rows}
    for nbytes, seconds in measured.items():
        assert main(["collective", "--cluster", str(fit["path"]), "--op", "all-reduce", "--bytes", str(nbytes),
                     "--json"]) == 0
        simulated = json.loads(capsys.readouterr().out)["time_s"]
        assert simulated == pytest.approx(seconds, rel=0.02)
    assert main(["predict", "--cluster", str(fit["path"]), "--model", "resnet50", "--nodes", "64",
                 "--single-node-throughput", "2500", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["nodes"] == 64 and not predicted["site_profile"]
    # nccl-tests rows bound collective times, not training throughput: the corpus's bounds, and it says so
    assert predicted["interval_basis"].startswith("generic bounds (birder calibrate fitted collective times")
    assert predicted["throughput_low"] <= predicted["throughput"] <= predicted["throughput_high"]


def test_latency_is_fitted_where_the_table_holds_small_messages(tmp_path, capsys):
    """Two DGX Sparks over 200 Gb/s RoCE (dgx-spark-playbooks 103), 8 to 64 KB: the layout comes from the Rank
    lines, the latency is fitted, every row within 15%, and the table's stopping short of the plateau is said."""
    fit = _calibrate(tmp_path, capsys, GB10_SMALL, "--network", "roce-200gbe")
    assert (fit["nodes"], fit["gpus_per_node"]) == (2, 1)
    assert set(fit["fitted"]) == {"efficiency", "latency_us"}
    assert all(abs(r["relative_error"]) < 0.15 for r in fit["rows"])
    assert fit["warnings"] and "plateau" in fit["warnings"][0] and "the paste stops at" in fit["warnings"][1]
    assert "warning: " + fit["warnings"][1] in fit["path"].read_text()
    # the file says which of the layout the log gave, and what it could not: GB10 is no GPU the model knows
    text = fit["path"].read_text()
    assert "nodes = 2  # from the Rank lines" in text and "gpus_per_node = 1  # from the Rank lines" in text
    assert 'gpu = "a100"  # assumed (the default): the Rank lines name NVIDIA GB10' in text


def test_a_network_given_by_transport_and_line_rate(tmp_path, capsys):
    """No preset: sockets at 100 Gb/s, their transport's constants as the start; the file says transport and rate."""
    fit = _calibrate(tmp_path, capsys, ALL_REDUCE_8X8, "--op", "all-reduce", "--nodes", 8, "--gpus-per-node", 8,
                     "--transport", "socket", "--line-rate-gbps", "100")
    text = fit["path"].read_text()
    assert 'transport = "socket"' in text and "line_rate_gbps = 100" in text and fit["base"] == "socket"
    assert load_cluster(fit["path"]).nic.line_rate == 100e9
    assert all(abs(r["relative_error"]) < 0.02 for r in fit["rows"])


def test_two_tables_of_one_cluster_fit_together(tmp_path, capsys):
    """The same cluster's all-reduce and all-to-all (issue 78) share one efficiency: both within 12%."""
    fit = _calibrate(tmp_path, capsys, ALL_REDUCE_8X8, ALL_TO_ALL_8X8, "--op", "all-reduce", "--op", "all-to-all",
                     "--nodes", 8, "--gpus-per-node", 8, "--gpu", "v100", "--network", "ib-edr")
    assert {r["op"] for r in fit["rows"]} == {"all-reduce", "all-to-all"}
    assert all(abs(r["relative_error"]) < 0.12 for r in fit["rows"])


@pytest.mark.parametrize("extra, message", [
    (["--network", "ib-edr"], "no Rank lines: give --nodes and --gpus-per-node"),
    (["--nodes", "8", "--gpus-per-node", "8"], "name the network"),
    (["--nodes", "8", "--gpus-per-node", "8", "--network", "ib-edr", "--op", "all-gather"], "--op given 2 times"),
    (["--nodes", "8", "--gpus-per-node", "8", "--network", "10gbe"], "the table is faster than 1 x 10 Gb/s"),
])
def test_bad_calibrate_input_is_one_line_and_exit_2(tmp_path, extra, message):
    out = tmp_path / "c.toml"
    run = subprocess.run([sys.executable, "-m", "birder.cli", "calibrate", str(ALL_REDUCE_8X8), "--op", "all-reduce",
                          *extra, "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 2 and message in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_outputs_of_different_gpus_are_not_fitted_together(tmp_path, capsys):
    """Two pastes of one layout whose Rank lines name different GPUs are two clusters: refused, not fitted as one
    cluster of the default GPU."""
    text = GB10_SMALL.read_text()
    pastes = [tmp_path / "h100.txt", tmp_path / "a100.txt"]
    for path, name in zip(pastes, ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), strict=True):
        path.write_text(text.replace("NVIDIA GB10", name))
    assert main(["calibrate", *map(str, pastes), "--network", "roce-200gbe", "--out", str(tmp_path / "c.toml")]) == 2
    assert "different GPUs (a100, h100)" in capsys.readouterr().err and not (tmp_path / "c.toml").exists()


def test_a_paste_without_its_binary_is_an_all_reduce_when_its_columns_say_so():
    """nccl-tests prints a reduction op, root -1 and count x element size = size only for all_reduce_perf: a paste
    that lost its command line is still read as an all-reduce; all-gather's columns (redop none) are not enough."""
    table = "\n".join(line for line in GB10_SMALL.read_text().splitlines() if "all_reduce_perf" not in line)
    assert "all_reduce_perf" not in table
    parsed = calibrate.parse_nccl_tests(table, "paste")
    assert {m.op for m in parsed.rows} == {"all-reduce"} and len(parsed.rows) == 4
    half = "   8192    4096    half    sum    -1   27.8  0.29  0.29  0  28.5  0.29  0.29  0\n"
    assert calibrate.parse_nccl_tests(half, "paste").rows[0].op == "all-reduce"


@pytest.mark.parametrize("type_name", ["bfloat16", "f8e4m3", "int32", "uint8"])
def test_types_whose_names_hold_digits_are_rows(type_name):
    """`all_reduce_perf -d bfloat16` (or int32, f8e4m3): a type name with digits is still a row (the trial's bf16
    table was refused as holding no rows)."""
    size = 8192
    count = size // calibrate.TYPE_BYTES[type_name]
    row = f"   {size}    {count}    {type_name}    sum    -1   27.8  0.29  0.29  0  28.5  0.29  0.29  0\n"
    parsed = calibrate.parse_nccl_tests("all_reduce_perf\n" + row, "paste")
    assert [(m.op, m.nbytes) for m in parsed.rows] == [("all-reduce", size)]


def _alpha_beta_paste(path: Path, busbw: float, latency_s: float = 40e-6, largest: int = 30) -> Path:
    """An all-reduce table as nccl-tests prints it (no binary name: the columns say all-reduce) for 2 nodes x 8
    GPUs: ``latency_s`` plus the bytes at ``busbw`` bytes/s of bus bandwidth, doubling from 8 B to 2^``largest``
    bytes (1 GiB: 20 of its 28 rows under 4 MB, as in the trial's paste)."""
    lines = ["#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
             "   busbw  #wrong"]
    for k in range(3, largest + 1):
        size = 1 << k
        seconds = latency_s + 2 * 15 / 16 * size / busbw
        algbw = size / seconds / 1e9
        cells = f"{seconds * 1e6:.2f} {algbw:.2f} {algbw * 2 * 15 / 16:.2f} 0"
        lines.append(f"{size} {size // 4} float sum -1 {cells} {cells}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_plateau_is_fitted_and_its_binding_limit_named(tmp_path, capsys):
    """A 4.6 GB/s busbw plateau on 100gbe: the efficiency is fitted on the large rows (each band counts apart
    from its number of rows), so the 1 GiB row is reproduced within 1% (an unweighted fit over all 28 rows gave
    8% fast, held by the 5 GB/s host-staged path with a meaningless efficiency); the error is reported per band,
    and the limit that binds is the sockets' share of the wire, which the efficiency sets."""
    paste = _alpha_beta_paste(tmp_path / "ar.txt", 4.6e9)
    fit = _calibrate(tmp_path, capsys, paste, "--network", "100gbe", "--nodes", 2, "--gpus-per-node", 8)
    large = next(b for b in fit["band_errors"] if b["band"].startswith("large"))
    assert large["rows"] == 5 and large["max_relative_error"] < 0.01
    assert [b["rows"] for b in fit["band_errors"]] == [17, 6, 5] and fit["unidentified"] == {}
    assert "efficiency" in fit["fitted"] and "# FITTED to" in fit["path"].read_text().split("efficiency =")[1]
    cluster = load_cluster(fit["path"])
    assert calibrate.efficiency_limit(cluster).startswith("sockets shared by its GPUs binds, 4.6")


def test_an_efficiency_the_table_cannot_pin_is_reported_as_such(tmp_path, capsys):
    """A 5.1 GB/s plateau is above the 5.00 GB/s host-staged socket path of 100gbe: that path binds whatever the
    efficiency above 0.625, so the efficiency is NOT IDENTIFIED (with the range that gives the same times), never
    FITTED to a value the table does not choose."""
    paste = _alpha_beta_paste(tmp_path / "ar.txt", 5.1e9)
    fit = _calibrate(tmp_path, capsys, paste, "--network", "100gbe", "--nodes", 2, "--gpus-per-node", 8)
    why = fit["unidentified"]["efficiency"]
    assert "host-staged socket path (5.00 GB/s per NIC) binds" in why and "from 0.625 to 1" in why
    line = next(x for x in fit["path"].read_text().splitlines() if x.startswith("efficiency ="))
    assert "not identified by the table" in line and "FITTED" not in line
    assert main(["calibrate", str(paste), "--network", "100gbe", "--nodes", "2", "--gpus-per-node", "8", "--out",
                 str(tmp_path / "again.toml")]) == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "NOT IDENTIFIED: the host-staged" in text and "large, >= 64 MiB    5 rows" in text


@pytest.mark.parametrize("network, busbw, binding", [("ib-ndr", 200e9, "the GPU-NIC PCIe link binds"),
                                                     ("100gbe", 40e9, "host-staged socket path binds")])
def test_a_table_past_the_limit_that_binds_is_refused_not_fitted(tmp_path, network, busbw, binding):
    """A table faster than the named hardware allows through whichever limit of the NIC's path binds: the trial's
    paste of 320 GB/s on 2 x 8 GPUs with one NDR NIC, whose GPU's PCIe link binds so that the efficiency is not
    pinned, was written with errors up to 1,235%; it is refused, naming the limit, and nothing is written."""
    paste = _alpha_beta_paste(tmp_path / "ar.txt", busbw)
    out = tmp_path / "c.toml"
    run = subprocess.run([sys.executable, "-m", "birder.cli", "calibrate", str(paste), "--network", network,
                          "--nodes", "2", "--gpus-per-node", "8", "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "the table is faster than 1 x" in run.stderr and binding in run.stderr
    assert not out.exists()


@pytest.mark.parametrize("mid_size_speed_up, first_plateau_speed_up, plateau_speed_up, refused", [
    (1.25, 1.0, 1.0, False), (1.25, 0.97, 0.97, False), (1.0, 1.08, 1.08, True), (1.25, 1.08, 1.08, True),
    (1.25, 1.08, 1.0, False)])
def test_too_fast_is_judged_on_the_plateau_not_on_the_models_mid_size_curve(mid_size_speed_up, first_plateau_speed_up,
                                                                          plateau_speed_up, refused):
    """t12: a 2 x 8 A100 table over 8 HDR NICs that doctor called 97% of the wire was refused as "faster than 8 x 200
    Gb/s can carry" for its 64 MiB row, faster than the model's approach to the plateau; the wire is judged where
    the bytes' rate is the time (from 256 MiB), on the median plateau row as doctor judges it (t14: a table refused
    for its 256 MiB row alone), and a table past it there is still refused."""
    from sim.collective import predict_collective

    base, _ = calibrate.base_cluster(2, 8, "a100", "ib-hdr", None, None, 8)
    at_line_rate = calibrate._with(base, {"efficiency": 1.0, "latency_us": base.nic.latency * 1e6,
                                          "peer_overhead_us": base.nic.peer_overhead * 1e6})
    rows = []
    for k in range(26, 34):
        size = 1 << k
        speed_up = (mid_size_speed_up if size < calibrate.PLATEAU_BYTES else
                    first_plateau_speed_up if size == calibrate.PLATEAU_BYTES else plateau_speed_up)
        seconds = predict_collective("all-reduce", size, at_line_rate)["time_s"] / speed_up
        rows.append(calibrate.Measurement("all-reduce", size, seconds, size / seconds / 1e9 * 1.875, k))
    if refused:
        with pytest.raises(ValueError, match="the table is faster than 8 x 200 Gb/s per node can carry .* its plateau "
                                             "sizes are still 8% longer at the median"):
            calibrate.fit_network(base, tuple(rows))
    else:
        assert calibrate.fit_network(base, tuple(rows)).constants["efficiency"] > 0.9


def test_a_table_faster_than_the_simulators_fixed_costs_writes_a_latency_every_command_reads(tmp_path, capsys):
    """Small messages at 5 us on ib-hdr, faster than the simulator's other fixed costs allow with no latency at
    all: the latency stops at the least the fit takes (it ran to 7e-21 us, which `predict --cluster` refused), is
    NOT IDENTIFIED with that reason, and the file loads."""
    paste = _alpha_beta_paste(tmp_path / "ar.txt", 20e9, latency_s=5e-6)
    fit = _calibrate(tmp_path, capsys, paste, "--network", "ib-hdr", "--nodes", 2, "--gpus-per-node", 8)
    assert fit["constants"]["latency_us"] == pytest.approx(calibrate.GRID_RANGE["latency_us"][0])
    assert "the least the fit takes" in fit["unidentified"]["latency_us"]
    assert load_cluster(fit["path"]).nic.latency == pytest.approx(0.1e-6)


def test_a_table_of_latency_bound_rows_only_is_refused_for_a_network_fit(tmp_path):
    """nccl-tests -b 8 -e 1K: no row spends most of its time moving bytes, so the table cannot say what the link
    carries (its efficiency was written FITTED at 0.998, and predict narrowed its interval on it as a measured
    link); refused, naming the sweep to run. The same cluster's sweep to 1 GiB is fitted."""
    out = tmp_path / "c.toml"
    for largest, refused in ((10, True), (30, False)):
        paste = _alpha_beta_paste(tmp_path / "ar.txt", 8e9, largest=largest)
        run = subprocess.run([sys.executable, "-m", "birder.cli", "calibrate", str(paste), "--network", "ib-hdr",
                              "--nodes", "2", "--gpus-per-node", "8", "--out", str(out)], capture_output=True,
                             text=True)
        assert (run.returncode == 2) == refused and out.exists() != refused, run.stderr
        if refused:
            assert "cannot say what the link carries" in run.stderr and "-e 256M" in run.stderr
            assert len(run.stderr.strip().splitlines()) == 1


ALL_REDUCE_ROW = "   8192    2048    float    sum    -1   27.8  0.29  0.29  0  28.5  0.29  0.29  0\n"
ALL_GATHER_ROW = "   8192     128    float   none    -1   27.8  0.29  0.27  0  28.5  0.29  0.27  0\n"  # 16 ranks


@pytest.mark.parametrize("row, op, message", [
    (ALL_REDUCE_ROW, "all-gather", "every row's columns show an all-reduce"),
    (ALL_REDUCE_ROW, "reduce-scatter", "every row's columns show an all-reduce"),
    (ALL_GATHER_ROW, "all-reduce", "show another collective"),
])
def test_an_op_the_rows_columns_contradict_is_refused(row, op, message):
    """--op names the collective where the paste does not; where its rows' columns say otherwise it is refused (an
    all-gather table fitted as an all-reduce had twice its efficiency, silently)."""
    with pytest.raises(ValueError, match=message):
        calibrate.parse_nccl_tests(row, "paste", op)
    agreeing = {ALL_REDUCE_ROW: "all-reduce", ALL_GATHER_ROW: "all-gather"}[row]
    assert calibrate.parse_nccl_tests(row, "paste", agreeing).rows[0].op == agreeing


def _ranks(n: int) -> str:
    return rank_lines([8] * (n // 8) + ([n % 8] if n % 8 else []))


def _table(n: int, factor: float, redop: str = "sum", root: str = "-1", per_rank: bool = False) -> str:
    """A doubling sweep on ``n`` ranks whose busbw is ``factor`` x algbw, with the columns given."""
    return sweep_rows(range(20, 31), lambda size: 1e-9 * size / (20e-6 + size / 90e9), factor, redop, root,
                      n if per_rank else 1)


@pytest.mark.parametrize("binary", ["sendrecv_perf", "broadcast_perf", "reduce_perf", "gather_perf", "scatter_perf",
                                    "hypercube_perf", "sendrecv_perf_mpi"])
@pytest.mark.parametrize("op", [None, "all-reduce"])
def test_a_paste_of_a_binary_no_fit_reads_is_refused_by_its_name_with_or_without_op(binary, op):
    """t12: sendrecv_perf's rows print an all-reduce's columns (redop sum, root -1, the whole count), so its table was
    read as an all-reduce (12% of the wire, "one NIC used of 8"); reduce_perf's was read so under --op all-reduce."""
    text = f"# nccl-tests 2.13.8\n$ mpirun -np 16 ./build/{binary} -b 1M -e 1G -f 2 -g 1\n" + _ranks(16) + \
        _table(16, 1.875)
    with pytest.raises(ValueError, match=f"the output is of {binary.removesuffix('_mpi')}, whose bus bandwidth"):
        calibrate.parse_nccl_tests(text, "paste", op)


@pytest.mark.parametrize("n", [3, 4, 8, 16, 28, 64])
@pytest.mark.parametrize("op, table_of, factor", [
    ("all-reduce", "sendrecv, broadcast or reduce", lambda n: 1.0),
    ("all-reduce", "all-gather", lambda n: (n - 1) / n),
    ("all-gather", "all-reduce", lambda n: 2 * (n - 1) / n),
    ("all-gather", "broadcast", lambda n: 1.0),
    ("reduce-scatter", "all-reduce", lambda n: 2 * (n - 1) / n),
    ("all-to-all", "sendrecv", lambda n: 1.0),
])
def test_a_table_whose_bus_factor_is_another_collectives_is_refused_whatever_the_op_given(n, op, table_of, factor):
    """Unnamed, a sendrecv table has an all-reduce's columns; busbw / algbw (1 against 2(n-1)/n) still tells them apart
    on 3 ranks or more, as it tells (n-1)/n's collectives from 2(n-1)/n's and from 1."""
    reduces = op in ("all-reduce", "reduce-scatter")
    text = _ranks(n) + _table(n, factor(n), "sum" if reduces else "none", per_rank=op != "all-reduce")
    with pytest.raises(ValueError, match=f"busbw / algbw is .* where nccl-tests prints .* for {op} on {n} ranks"):
        calibrate.parse_nccl_tests(text, "paste", op)
    right = _ranks(n) + _table(n, calibrate.BUS_FACTOR[op](n), "sum" if reduces else "none",
                               per_rank=op != "all-reduce")
    assert calibrate.parse_nccl_tests(right, "paste", op).rows[0].op == op


@pytest.mark.parametrize("op", ["all-reduce", "all-gather"])
def test_a_table_of_more_ranks_than_its_rank_lines_is_refused_as_a_cut_paste(op):
    """t12's 8+8+8+4 paste had 28 Rank lines under an all-reduce of 32 ranks' factor: the last lines were lost."""
    text = _ranks(28) + _table(32, calibrate.BUS_FACTOR[op](32), "sum" if op == "all-reduce" else "none",
                               per_rank=op != "all-reduce")
    with pytest.raises(ValueError, match=f"{op}'s factor on 32 ranks, but the paste's Rank lines name 28"):
        calibrate.parse_nccl_tests(text, "paste", op)


@pytest.mark.parametrize("redop, op", [("none", "all-reduce"), ("none", "reduce-scatter"), ("sum", "all-gather"),
                                       ("max", "all-to-all")])
def test_an_op_whose_reduction_the_rows_redop_contradicts_is_refused(redop, op):
    """t12: a reduce_scatter_perf table (redop sum) passed as --op all-to-all gave "399% of the hardware"."""
    text = _ranks(8) + _table(8, calibrate.BUS_FACTOR[op](8), redop, per_rank=True)
    with pytest.raises(ValueError, match=f"--op {op} but the row"):
        calibrate.parse_nccl_tests(text, "paste", op)


def test_reduce_scatter_is_an_op_calibrate_takes_and_names(tmp_path, capsys):
    with pytest.raises(ValueError, match="pass --op all-reduce.all-gather.reduce-scatter.all-to-all"):
        calibrate.parse_nccl_tests(ALL_GATHER_ROW.replace("none", "sum"), "paste")
    paste = tmp_path / "rs.txt"
    paste.write_text(ALL_GATHER_ROW.replace("none", "sum"))
    # one 8 KB row: taken as a reduce-scatter, then refused by the fit, not by the option's choices
    assert main(["calibrate", str(paste), "--op", "reduce-scatter", "--network", "ib-hdr", "--nodes", "2",
                 "--gpus-per-node", "8", "--out", str(tmp_path / "c.toml")]) == 2
    assert "cannot say what the link carries" in capsys.readouterr().err


OLD_FORMAT = ("#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  "
              "error\n   1073741824   268435456     float     sum   106014   10.13   18.99  {error}   106202   10.11   "
              "18.96  {error}\n")


@pytest.mark.parametrize("error, footer, refused", [
    ("4e+00", "", True),  # nccl-tests before 2.13: the largest error, far past float's 1e-5 x (ranks - 1)
    ("2e-06", "", False),  # within it: the check passed
    ("4e+00", "# Out of bounds values : 0 OK\n", False),  # the run's own footer says it passed
])
def test_an_old_error_column_past_its_types_tolerance_is_a_failed_run(error, footer, refused):
    text = "all_reduce_perf\n" + OLD_FORMAT.format(error=error) + footer
    if refused:
        with pytest.raises(ValueError, match=re.escape(f"an error of {error} (float, past its check's tolerance)")):
            calibrate.parse_nccl_tests(text, "paste")
    else:
        assert len(calibrate.parse_nccl_tests(text, "paste").rows) == 1


def test_one_paste_of_two_gpu_kinds_or_two_data_types_is_refused_saying_so():
    text = GB10_SMALL.read_text()
    mixed = text.replace("spark-d708 device  0 [000f:01:00] NVIDIA GB10",
                         "spark-d708 device  0 [000f:01:00] NVIDIA A100-SXM4-80GB").replace(
        "NVIDIA GB10", "NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match=r"GPUs of different kinds \(a100, h100\)"):
        calibrate.parse_nccl_tests(mixed, "paste")
    rows = [x for x in text.splitlines() if x.strip()[:1].isdigit()]
    every_type = text + "\n".join(x.replace(" float ", "double").replace(" 2048 ", " 1024 ") for x in rows) + "\n"
    with pytest.raises(ValueError, match="in float .* and in double .*: the paste holds a table per data type"):
        calibrate.parse_nccl_tests(every_type, "paste")


def test_a_socket_table_past_the_generic_share_but_within_the_wire_is_fitted_with_the_whole_wire(tmp_path, capsys):
    """2 x 8 GPUs on 10 GbE at 1.17 GB/s busbw, 94% of the wire (the paper's own 10 GbE site, whose fit keeps the
    whole wire): past the generic share 8 GPUs' sockets keep of a 32 Gb/s link (0.64), so it was refused as
    faster than the hardware. The share is written as the whole wire, the table reproduced, and doctor calls it
    normal; a table past the wire itself is still refused."""
    paste = _alpha_beta_paste(tmp_path / "ar.txt", 1.17e9)
    args = ("--network", "10gbe", "--nodes", 2, "--gpus-per-node", 8)
    fit = _calibrate(tmp_path, capsys, paste, *args)
    assert "share_at_8_gpus = 1" in fit["warnings"][0]
    assert "share_at_8_gpus = 1.0  # the table is faster than the generic share" in fit["path"].read_text()
    assert load_cluster(fit["path"]).nic.share_at_8_gpus == 1.0
    large = next(b for b in fit["band_errors"] if b["band"].startswith("large"))
    assert large["max_relative_error"] < 0.02
    assert main(["doctor", str(paste), "--gpu", "a100", *map(str, args), "--json"]) == 0
    assert "normal for this hardware, its GPUs' sockets keeping the whole wire" in json.loads(
        capsys.readouterr().out)["verdict"]
    past = _alpha_beta_paste(tmp_path / "past.txt", 1.40e9)
    assert main(["calibrate", str(past), *map(str, args), "--out", str(tmp_path / "past.toml")]) == 2
    assert "the wire binds" in capsys.readouterr().err


def test_machines_that_share_a_host_name_are_told_apart_by_their_gpus_bus_ids(tmp_path, capsys):
    # the GB10 thread's two hosts each run rank on bus id 000f:01:00; containers that all call themselves localhost
    # print one name for both, and two ranks of one machine on one bus id are what NCCL refuses
    text = re.sub(r"on spark-\w+ ", "on localhost ", GB10_SMALL.read_text())
    shared = calibrate.parse_nccl_tests(text, "shared")
    assert shared.hosts == ("localhost #1", "localhost #2") and shared.ranks_per_host == (1, 1)
    assert calibrate.layout([shared], None, None) == (2, 1)
    assert any("two ranks on one GPU (device and bus id) of host localhost" in w for w in shared.warnings)
    # one name on distinct GPUs is one machine, as before (a single-node paste), and so is one bus id printed
    # under two device numbers
    one = calibrate.parse_nccl_tests(text.replace("device  0 [000f:01:00]", "device  1 [0010:01:00]", 1), "one")
    assert one.hosts == ("localhost",) and calibrate.layout([one], None, None) == (1, 2)
    assert calibrate.parse_nccl_tests(text.replace("device  0", "device  1", 1), "one").hosts == ("localhost",)
    # srun --gpus-per-task=1: every rank is device 0 of its own host, bus ids decide nothing across hosts
    distinct = calibrate.parse_nccl_tests(GB10_SMALL.read_text(), "distinct")
    assert distinct.hosts == ("spark-d708", "spark-dbf4") and not any("bus id" in w for w in distinct.warnings)
    paste = tmp_path / "localhost.txt"
    paste.write_text(text)
    assert main(["calibrate", str(paste), "--network", "roce-200gbe", "--gpus-per-node", "1", "--nodes", "2",
                 "--out", str(tmp_path / "c.toml"), "--quiet"]) == 0
    assert "2 machines of that name" in capsys.readouterr().out


@pytest.mark.parametrize("nodes, per_node, refused", [(2, 8, False), (2, 4, True), (4, 8, True), (1, 16, False)])
def test_a_layout_the_rows_bus_factor_contradicts_is_refused_where_no_rank_lines_give_it(nodes, per_node, refused):
    """t14: a 2 x 8 all-reduce pasted without its Rank lines (busbw / algbw 1.875, 16 ranks' factor) was fitted as
    2 x 4 and as 4 x 8 without a word (efficiency 0.85 and 0.95 where the run's own layout fits 0.91). The layout
    the options give must hold the ranks the factor names."""
    paste = sweep_rows(range(20, 34), lambda s: 22.0 * s / (s + 4e6), 2 * 15 / 16)
    output = calibrate.parse_nccl_tests(paste, "paste", "all-reduce")
    if refused:
        with pytest.raises(ValueError, match=f"all-reduce's factor on 16 ranks, but --nodes {nodes} x "
                                             f"--gpus-per-node {per_node} give {nodes * per_node}"):
            calibrate.layout([output], nodes, per_node)
    else:
        assert calibrate.layout([output], nodes, per_node) == (nodes, per_node)


def test_a_sendrecv_table_without_rank_lines_is_refused_on_the_layout_the_options_give():
    """The last session's doubt: an unnamed sendrecv_perf table (busbw = algbw) without Rank lines was read as an
    all-reduce. On the options' 16 ranks its factor of 1 is all-reduce's on 2 only: refused, naming sendrecv."""
    paste = sweep_rows(range(20, 34), lambda s: 22.0 * s / (s + 4e6), 1.0)
    output = calibrate.parse_nccl_tests(paste, "paste", "all-reduce")
    with pytest.raises(ValueError, match="factor on 2 ranks, but --nodes 2 x --gpus-per-node 8 give 16.*sendrecv"):
        calibrate.layout([output], 2, 8)
