"""Bad input on the command line: every subcommand, argument values and files, one row per distinct bad input.

Each row runs ``birder.cli.main(argv)`` in-process (bad_input_harness.run_cli) in an empty working directory and
asserts: exit status 2, exactly one line on stderr naming the offending flag, key or row, no traceback, no file
created or modified (working directory and input files), stdout empty or strict JSON, an answer within the wall
bound. ``{d}`` in an argument is the directory of the prepared bad files, ``{pkg}`` a package of the toolkit
(watched too: no command may write there), ``{root}`` the folder holding the packages, ``{nccl}`` real
nccl-tests outputs. No row is marked xfail: every bad input
here is handled. A few rows run the real console script in a subprocess with a timeout; a Hypothesis fuzz of argument
values and of TOML and CSV contents checks the same invariants for whatever outcome.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_harness import assert_answered, assert_rejected, run_cli, strict_json
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import sim

BIG = "1" + "0" * 400  # past float range: int() takes it, float() of it overflows
PACKAGE = Path(sim.__file__).parent  # {pkg}: a package of the toolkit, whose files no command may write
ROOT = PACKAGE.parent  # {root}: where the toolkit's packages lie (a checkout, or site-packages)
NCCL_OUTPUTS = Path(__file__).parent / "fixtures" / "nccl_tests"  # {nccl}: real nccl-tests outputs
CALIBRATE = "calibrate {d}/measured.txt --op all-reduce --nodes 8 --gpus-per-node 8 --network 100gbe "
HANG_S = 3.0  # wall bound of the rows that hung before issue 12's fixes: a fixed command answers well within it




def row(id_: str, argv: str | list[str], *names: str, wall_s: float = 20.0, marks=()):
    """One bad input: the arguments (a string split on spaces, or a list) and what the error line must name."""
    args = argv.split() if isinstance(argv, str) else list(argv)
    return pytest.param(args, names, wall_s, id=id_, marks=marks)


# --------------------------------------------------------------------------------------------- bad files
TOML = {
    "malformed.toml": "nodes = [\n",
    "empty.toml": "",
    "binary.toml": b"\xca\xfe\xba\xbe\x00\x01",
    "unknown_top.toml": 'nodez = 4\n[network]\npreset = "10gbe"\n',
    "unknown_network_key.toml": '[network]\npreset = "10gbe"\nline_rate_gbs = 100\n',
    "typo_no_preset.toml": '[network]\ntransport = "socket"\nline_rate_gbs = 100\nlatency_us = 20\n',
    "unknown_preset.toml": '[network]\npreset = "1tbe"\n',
    "unknown_transport.toml": '[network]\ntransport = "pigeon"\nline_rate_gbps = 10\nlatency_us = 20\n',
    "rate_string.toml": '[network]\ntransport = "socket"\nline_rate_gbps = "100 Gb/s"\nlatency_us = 20\n',
    "rate_zero.toml": '[network]\ntransport = "socket"\nline_rate_gbps = 0\nlatency_us = 20\n',
    "prices_unknown_network.toml": 'node = 10\n[nic]\n"warp-drive" = 3\n',
    "rate_tiny.toml": '[network]\ntransport = "socket"\nline_rate_gbps = 1e-9\nlatency_us = 20\n',
    "rate_negative.toml": '[network]\npreset = "10gbe"\nline_rate_gbps = -10\n',
    "rate_nan.toml": '[network]\npreset = "10gbe"\nline_rate_gbps = nan\n',
    "rate_inf.toml": '[network]\npreset = "10gbe"\nline_rate_gbps = inf\n',
    "latency_negative.toml": '[network]\npreset = "10gbe"\nlatency_us = -40\n',
    "latency_string.toml": '[network]\npreset = "10gbe"\nlatency_us = "fast"\n',
    "count_zero.toml": '[network]\npreset = "10gbe"\ncount = 0\n',
    "count_nine.toml": 'gpus_per_node = 8\n[network]\npreset = "10gbe"\ncount = 9\n',
    "count_fraction.toml": '[network]\npreset = "10gbe"\ncount = 1.5\n',
    "nodes_zero.toml": 'nodes = 0\n[network]\npreset = "10gbe"\n',
    "nodes_negative.toml": 'nodes = -2\n[network]\npreset = "10gbe"\n',
    "nodes_string.toml": 'nodes = "four"\n[network]\npreset = "10gbe"\n',
    "nodes_fraction.toml": 'nodes = 2.5\n[network]\npreset = "10gbe"\n',
    "gpus_zero.toml": 'gpus_per_node = 0\n[network]\npreset = "10gbe"\n',
    "gpu_unknown.toml": 'gpu = "z80"\n[network]\npreset = "10gbe"\n',
    "intra_zero.toml": '[network]\npreset = "10gbe"\n[intra]\nport_gbytes_per_s = 0\n',
    "intra_unknown_key.toml": '[network]\npreset = "10gbe"\n[intra]\nports = 4\n',
    "intra_unknown_preset.toml": '[network]\npreset = "10gbe"\n[intra]\npreset = "tin-cans"\n',
    "switch_below_one.toml": '[network]\npreset = "10gbe"\n[switch]\noversubscription = 0.5\n',
    "switch_unknown_key.toml": '[network]\npreset = "10gbe"\n[switch]\nradix = 64\n',
    "network_not_table.toml": 'network = "10gbe"\n',
    "no_network.toml": 'nodes = 2\n[network]\n',  # a [network] table with neither preset nor transport
    "rate_in_bits.toml": '[network]\npreset = "10gbe"\nline_rate_gbps = 100000000000\n',
    "latency_in_seconds.toml": '[network]\npreset = "10gbe"\nlatency_us = 0.00004\n',
    "nodes_huge.toml": 'nodes = 1000000\n[network]\npreset = "10gbe"\n',
    "switch_huge.toml": '[network]\npreset = "10gbe"\n[switch]\noversubscription = 1e243\n',
    "switch_inf.toml": '[network]\npreset = "10gbe"\n[switch]\noversubscription = inf\n',
    "leaf_zero.toml": '[network]\npreset = "10gbe"\n[switch]\nnodes_per_leaf = 0\n',
    "intra_latency_string.toml": '[network]\npreset = "10gbe"\n[intra]\nlatency_us = "slow"\n',
    "efficiency_above_one.toml": '[network]\npreset = "10gbe"\nefficiency = 1.5\n',
    "name_table.toml": '[name]\nx = 1\n[network]\npreset = "10gbe"\n',
    "too_large.toml": "# padding\n" * 120_000 + '[network]\npreset = "10gbe"\n',
    "good.toml": '[network]\npreset = "10gbe"\n',  # a valid file, for rows where something else is wrong
    # issue 19: values outside physical ranges
    "latency_1e308.toml": '[network]\npreset = "10gbe"\nlatency_us = 1e308\n',
    "latency_two_seconds.toml": '[network]\ntransport = "ib"\nline_rate_gbps = 100\nlatency_us = 2000000\n',
    "peer_overhead_huge.toml": '[network]\npreset = "10gbe"\npeer_overhead_us = 1e12\n',
    "retransmission_timeout_a_day.toml": '[network]\npreset = "10gbe"\nretransmission_timeout_s = 86400\n',
    "intra_port_absurd.toml": '[network]\npreset = "10gbe"\n[intra]\nport_gbytes_per_s = 1e300\n',
    "intra_port_in_bits.toml": '[network]\npreset = "10gbe"\n[intra]\nport_gbytes_per_s = 900000000000\n',
    "intra_latency_huge.toml": '[network]\npreset = "10gbe"\n[intra]\nlatency_us = 1e9\n',
    # issue 18: a measured link rate is positive and at most the line rate; it replaces line rate x efficiency
    "measured_above_line.toml": '[network]\npreset = "40gbe"\nmeasured_gbps = 41\n',
    "measured_zero.toml": '[network]\npreset = "40gbe"\nmeasured_gbps = 0\n',
    "measured_string.toml": '[network]\npreset = "40gbe"\nmeasured_gbps = "4.1 Gbps"\n',
    "measured_in_bits.toml": '[network]\ntransport = "socket"\nline_rate_gbps = 40\nmeasured_gbps = 4.1e9\n',
    "measured_and_efficiency.toml": '[network]\npreset = "40gbe"\nefficiency = 0.5\nmeasured_gbps = 4.1\n',
    # issue 31: numbers outside physical and monetary ranges, names that would inject
    "efficiency_1e-300.toml": '[network]\npreset = "10gbe"\nefficiency = 1e-300\n',
    "switch_buffer_1e308.toml": '[network]\npreset = "10gbe"\nswitch_buffer_bytes = 1e308\n',
    "intra_port_1e-300.toml": '[network]\npreset = "10gbe"\n[intra]\nport_gbytes_per_s = 1e-300\n',
    "leaf_1e30.toml": '[network]\npreset = "10gbe"\n[switch]\nnodes_per_leaf = 1000000000000000000000000000000\n',
    "nodes_1e30.toml": 'nodes = 1000000000000000000000000000000\n[network]\npreset = "10gbe"\n',
    "prices_node_1e308.toml": "node = 1e308\n",
    "prices_node_1e-300.toml": "node = 1e-300\n",
    "prices_node_1e23.toml": "node = 1e23\n",
    "prices_nic_1e-300.toml": "node = 10\n[nic]\n10gbe = 1e-300\n",
    "prices_currency_newline.toml": 'node = 10\ncurrency = "USD\\n# Forged heading"\n',
    "prices_currency_long.toml": 'node = 10\ncurrency = "' + "U" * 200 + '"\n',
    "users_cluster.toml": '# my hand-written cluster\nname = "mine"\n[network]\npreset = "ib-hdr"\n',
}
HEADER = "model,batch_per_gpu,network,optimizer,gpus,throughput\n"
GOOD_ROW = "resnet50,32,10gbe,sgdm,8,3693\n"
CSV = {
    "empty.csv": "",
    "header_only.csv": HEADER,
    "garbage.csv": "this is not,a csv\n\x00\x01\n",
    "missing_column.csv": "model,batch_per_gpu,network,optimizer,gpus\nresnet50,32,10gbe,sgdm,8\n",
    "throughput_text.csv": HEADER + "resnet50,32,10gbe,sgdm,8,fast\n",
    "throughput_negative.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,sgdm,16,-5\n",
    "throughput_nan.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,sgdm,16,nan\n",
    "throughput_huge.csv": HEADER + "resnet50,32,10gbe,sgdm,16,1e300\n",
    "throughput_past_linear.csv": HEADER + "resnet50,32,10gbe,sgdm,8,3693\nresnet50,32,10gbe,sgdm,16,29590\n",
    "throughput_zero.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,sgdm,16,0\n",
    "throughput_inf.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,sgdm,16,inf\n",
    "gpus_zero.csv": HEADER + "resnet50,32,10gbe,sgdm,0,3693\n",
    "gpus_fraction.csv": HEADER + "resnet50,32,10gbe,sgdm,8.5,3693\n",
    "gpus_not_multiple.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,sgdm,12,5000\n",
    "batch_zero.csv": HEADER + "resnet50,0,10gbe,sgdm,8,3693\n",
    "unknown_model.csv": HEADER + "resnet5000,32,10gbe,sgdm,8,3693\nresnet5000,32,10gbe,sgdm,16,2959\n",
    "unknown_network.csv": HEADER + "resnet50,32,carrier-pigeon,sgdm,8,3693\n",
    "unknown_optimizer.csv": HEADER + "resnet50,32,10gbe,lion,8,3693\nresnet50,32,10gbe,lion,16,2959\n",
    "short_row.csv": HEADER + "resnet50,32,10gbe\n",
    "duplicate_row.csv": HEADER + GOOD_ROW + GOOD_ROW,
    "gpus_past_bound.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,sgdm,1000000,3693\n",
    "batch_past_bound.csv": HEADER + GOOD_ROW + "resnet50,99999999999,10gbe,sgdm,16,3693\n",
    "good.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,sgdm,16,2959\n",  # valid, for rows where something else is
    # issue 19: columns repeated or unknown, and tables without a row to validate
    "duplicate_column.csv": HEADER.strip() + ",throughput\n" + GOOD_ROW.strip() + ",1\n"
                            + "resnet50,32,10gbe,sgdm,16,2959,1\n",
    "unknown_column.csv": HEADER.strip() + ",thruput\n" + GOOD_ROW.strip() + ",1\n"
                          + "resnet50,32,10gbe,sgdm,16,2959,1\n",
    "calibration_only.csv": HEADER + GOOD_ROW + "resnet50,32,10gbe,birder,8,3462\n",
    "header_repeated.csv": HEADER + GOOD_ROW + HEADER + "resnet50,32,10gbe,sgdm,16,2959\n",
}
IMPLS = {
    "impl_raises.py": "raise RuntimeError('broken on import')\n",
    "impl_syntax.py": "def step(:\n",
    "impl_exits0.py": "import sys\nsys.exit(0)\n",
    "impl_exits3.py": "import sys\nsys.exit(3)\n",
    "impl_partial.py": "def quantize(y, u):\n    return y\n",
    "impl_not_callable.py": "quantize = 1\ninit = 2\nstep = 3\n",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad_files")
    for name, content in {**TOML, **CSV, **IMPLS}.items():
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    (d / "a_directory.toml").mkdir()
    (d / "a_directory.csv").mkdir()
    (d / "a_file").write_text("a file where a directory is expected\n")
    os.mkfifo(d / "a_fifo")  # a special file: renaming an output over it would replace it (as over /dev/full)
    os.mkfifo(d / "fifo.toml")  # an input pipe with no writer: opening it for reading would block
    os.mkfifo(d / "fifo.csv")
    (d / "dangling").symlink_to(d / "no_such_target")
    shutil.copy(NCCL_OUTPUTS / "ib100_8x8v100_all_reduce.txt", d / "measured.txt")  # a user's measurement
    (d / "link_to_measured").symlink_to(d / "measured.txt")
    (d / "link_to_package").symlink_to(Path(sim.__file__).parent)
    users = d / "users_folder"  # a user's folder that happens to hold a report.md
    users.mkdir()
    (users / "report.md").write_text("my notes")
    (users / "thesis.tex").write_text("months of work")
    earlier = d / "earlier_report_and_more"  # an earlier report, then a file of the user's added to it
    earlier.mkdir()
    (earlier / "report.md").write_text("# Birder toolkit report")
    (earlier / ".birder-manifest").write_text("# files written by birder report\nreport.md\n")
    (earlier / "mine.txt").write_text("added by the user")
    for folder, name in (("users_sweep", "sweep.csv"), ("users_collective", "collective.png"),
                         ("users_validate", "validation.png")):  # a user's own files under an output's name
        (d / folder).mkdir()
        (d / folder / name).write_text("the user's own")
    (d / "edited").mkdir()  # written by birder calibrate, then edited: its digest no longer matches
    (d / "edited" / "c.toml").write_text('name = "c"\n[network]\npreset = "10gbe"\nlatency_us = 5  # mine\n')
    (d / "edited" / ".birder-manifest").write_text("# files written by birder\n" + "0" * 64 + "  c.toml\n")
    unreadable = d / "unreadable.toml"
    unreadable.write_text('[network]\npreset = "10gbe"\n')
    unreadable.chmod(0)
    unreadable_csv = d / "unreadable.csv"
    unreadable_csv.write_text(HEADER + GOOD_ROW)
    unreadable_csv.chmod(0)
    sys.path.insert(0, str(d))
    yield d
    sys.path.remove(str(d))
    unreadable.chmod(stat.S_IRUSR | stat.S_IWUSR)
    unreadable_csv.chmod(stat.S_IRUSR | stat.S_IWUSR)


def _subcommands() -> set[str]:
    from birder.cli import build_parser

    parser = build_parser()
    return set(next(a for a in parser._actions if a.dest == "command").choices)


HAS_COLLECTIVE = "collective" in _subcommands()
CAN_READ_UNREADABLE = os.geteuid() == 0  # root reads mode-000 files: that row would not be bad input

# ------------------------------------------------------------------------------------------------- rows
ROWS = [
    # top level
    row("no-subcommand", [], "command"),
    row("unknown-subcommand", "fly", "fly"),
    row("unknown-top-flag", "--verbose predict", "--verbose"),
    # predict: argument values
    row("predict-nodes-zero", "predict --nodes 0", "--nodes"),
    row("predict-nodes-negative", "predict --nodes -3", "--nodes"),
    row("predict-nodes-text", "predict --nodes abc", "--nodes"),
    row("predict-nodes-fraction", "predict --nodes 1.5", "--nodes"),
    row("predict-nodes-empty", ["predict", "--nodes", ""], "--nodes"),
    row("predict-nodes-nan", "predict --nodes nan", "--nodes"),
    row("predict-nodes-missing-value", "predict --nodes", "--nodes"),
    row("predict-nodes-huge", "predict --nodes 1000000 --json", "--nodes", wall_s=HANG_S),
    row("predict-batch-zero", "predict --batch-per-gpu 0", "--batch-per-gpu"),
    row("predict-batch-negative", "predict --batch-per-gpu -1", "--batch-per-gpu"),
    row("predict-batch-fraction", "predict --batch-per-gpu 1.5", "--batch-per-gpu"),
    row("predict-batch-huge", "predict --batch-per-gpu 100000000 --json", "--batch-per-gpu", wall_s=HANG_S),
    row("predict-gpus-per-node-zero", "predict --gpus-per-node 0", "--gpus-per-node"),
    row("predict-gpus-per-node-negative", "predict --gpus-per-node -8", "--gpus-per-node"),
    row("predict-gpus-per-node-text", "predict --gpus-per-node eight", "--gpus-per-node"),
    row("predict-model-unknown", "predict --model resnet5000", "resnet5000"),
    row("predict-model-empty", ["predict", "--model", ""], "model"),
    row("predict-model-and-params", "predict --model resnet50 --params 1000", "--params"),
    row("predict-params-zero", "predict --params 0", "--params"),
    row("predict-params-negative", "predict --params -5", "--params"),
    row("predict-params-text", "predict --params many", "--params"),
    row("predict-network-unknown", "predict --network 1tbe", "--network"),
    row("predict-network-and-cluster", "predict --network 10gbe --cluster {d}/rate_zero.toml", "--cluster"),
    row("predict-optimizer-unknown", "predict --optimizer lion", "--optimizer"),
    row("predict-optimizer-empty", ["predict", "--optimizer", ""], "--optimizer"),
    row("predict-compressed-optimizer-on-summation-servers",
        "predict --model bert-large --nodes 2 --optimizer birder --framework byteps", "birder", "byteps"),
    row("predict-compressed-optimizer-under-sharding",
        "predict --model bert-large --nodes 2 --optimizer zero-one-adam --framework fsdp", "zero-one-adam", "fsdp"),
    row("predict-scheme-unknown", "predict --optimizer birder --scheme tree", "--scheme"),
    row("predict-gpu-unknown", "predict --gpu z80", "--gpu"),
    row("predict-intra-unknown", "predict --intra tin-cans", "--intra"),
    row("predict-throughput-zero", "predict --single-node-throughput 0", "--single-node-throughput"),
    row("predict-throughput-negative", "predict --single-node-throughput -1", "--single-node-throughput"),
    row("predict-throughput-nan", "predict --single-node-throughput nan", "--single-node-throughput"),
    row("predict-throughput-inf", "predict --single-node-throughput inf", "--single-node-throughput"),
    row("predict-throughput-text", "predict --single-node-throughput fast", "--single-node-throughput"),
    row("predict-throughput-huge", "predict --single-node-throughput 1e12", "throughput"),
    row("predict-warmup-negative", "predict --optimizer onebit-adam --warmup-fraction -0.1", "warmup"),
    row("predict-warmup-above-one", "predict --optimizer onebit-adam --warmup-fraction 1.5", "warmup"),
    row("predict-warmup-text", "predict --warmup-fraction some", "--warmup-fraction"),
    row("predict-warmup-nan", "predict --warmup-fraction nan --json", "warmup"),
    row("predict-warmup-inf", "predict --optimizer onebit-adam --warmup-fraction inf --json", "warmup"),
    row("predict-oversubscription-zero", "predict --oversubscription 0", "--oversubscription"),
    row("predict-oversubscription-half", "predict --oversubscription 0.5", "--oversubscription"),
    row("predict-oversubscription-nan", "predict --oversubscription nan", "--oversubscription"),
    row("predict-oversubscription-text", "predict --oversubscription lots", "--oversubscription"),
    row("predict-oversubscription-inf", "predict --nodes 2 --oversubscription inf --json", "--oversubscription"),
    row("predict-oversubscription-huge", "predict --nodes 2 --oversubscription 1e243 --json", "--oversubscription",
        wall_s=HANG_S),
    row("predict-marsit-period-zero", "predict --optimizer marsit --marsit-period 0", "--marsit-period"),
    row("predict-marsit-period-negative", "predict --marsit-period -4", "--marsit-period"),
    row("predict-unknown-flag", "predict --bogus", "--bogus"),
    row("predict-throughput-with-unit", "predict --single-node-throughput 3693/s", "--single-node-throughput"),
    row("predict-params-with-unit", "predict --params 25M", "--params"),
    row("predict-oversubscription-ratio", "predict --oversubscription 2:1", "--oversubscription"),
    row("predict-warmup-percent", "predict --warmup-fraction 15%", "--warmup-fraction"),
    row("predict-abbreviated-flag", "predict --node 2", "--node"),
    row("predict-network-twice", "predict --network 10gbe --network 25gbe", "--network", "twice"),
    row("predict-nodes-twice-inline", "predict --nodes=2 --nodes 3", "--nodes", "twice"),
    row("predict-optimizer-twice", "predict --optimizer birder --optimizer sgdm", "--optimizer", "twice"),
    row("predict-positional", "predict resnet50", "resnet50"),
    # predict: the flags added with the simulator's rewrite, and the bounds of what it answers in seconds
    row("predict-throughput-below-float-clock", "predict --single-node-throughput 1e-300 --json",
        "--single-node-throughput", "1e-06"),
    row("predict-grad-dtype-unknown", "predict --grad-dtype fp8", "--grad-dtype"),
    row("predict-grad-dtype-empty", ["predict", "--grad-dtype", ""], "--grad-dtype"),
    row("predict-accumulation-zero", "predict --accumulation-steps 0", "--accumulation-steps"),
    row("predict-accumulation-negative", "predict --accumulation-steps -2", "--accumulation-steps"),
    row("predict-accumulation-fraction", "predict --accumulation-steps 2.5", "--accumulation-steps"),
    row("predict-accumulation-huge", "predict --accumulation-steps 65537 --json", "--accumulation-steps", "65,536"),
    row("predict-accumulation-beyond-float", f"predict --accumulation-steps {BIG} --json", "--accumulation-steps"),
    row("predict-params-beyond-float", f"predict --params {BIG} --json", "--params"),
    row("predict-params-huge", "predict --params 1000000000001 --json", "--params"),
    row("predict-marsit-period-beyond-float", f"predict --optimizer marsit --marsit-period {BIG} --json",
        "--marsit-period"),
    row("predict-nics-zero", "predict --nics-per-node 0", "--nics-per-node"),
    row("predict-nics-text", "predict --nics-per-node two", "--nics-per-node"),
    row("predict-nics-beyond-gpus", "predict --nics-per-node 9", "--nics-per-node"),
    row("predict-nics-uneven-cli-gpus", "predict --gpus-per-node 4 --nics-per-node 6", "--nics-per-node"),
    row("predict-nodes-per-leaf-zero", "predict --nodes-per-leaf 0", "--nodes-per-leaf"),
    row("predict-nodes-per-leaf-text", "predict --nodes-per-leaf rack", "--nodes-per-leaf"),
    row("predict-hook-unknown", "predict --hook async", "--hook"),
    row("predict-json-with-value", "predict --json=yes", "--json"),
    row("predict-quiet-with-value", "predict --quiet=1", "--quiet"),
    row("predict-nodes-just-past-bound", "predict --nodes 8193 --json", "--nodes", "65,536"),
    row("predict-gpus-per-node-past-bound", "predict --gpus-per-node 65537 --json", "--gpus-per-node"),
    row("predict-nodes-beyond-float", f"predict --nodes {BIG}", "--nodes"),
    row("predict-batch-just-past-bound", "predict --batch-per-gpu 65537 --json", "--batch-per-gpu", "65,536"),
    row("predict-oversubscription-past-bound", "predict --nodes 2 --oversubscription 64.5 --json",
        "--oversubscription", "64"),
    row("predict-oversubscription-negative-inf", "predict --oversubscription -inf", "--oversubscription"),
    # predict: cluster files
    row("cluster-empty-path", ["predict", "--cluster", ""], "--cluster"),
    row("cluster-missing", "predict --cluster {d}/nonexistent.toml", "nonexistent.toml"),
    row("cluster-directory", "predict --cluster {d}/a_directory.toml", "a_directory.toml"),
    row("cluster-malformed", "predict --cluster {d}/malformed.toml", "malformed.toml"),
    row("cluster-empty", "predict --cluster {d}/empty.toml", "empty.toml"),
    row("cluster-binary", "predict --cluster {d}/binary.toml", "binary.toml"),
    row("cluster-unknown-top-key", "predict --cluster {d}/unknown_top.toml", "nodez"),
    row("cluster-unknown-network-key", "predict --cluster {d}/unknown_network_key.toml", "line_rate_gbs"),
    row("cluster-typo-without-preset", "predict --cluster {d}/typo_no_preset.toml", "line_rate_gbs"),
    row("cluster-unknown-preset", "predict --cluster {d}/unknown_preset.toml", "1tbe"),
    row("cluster-unknown-transport", "predict --cluster {d}/unknown_transport.toml", "pigeon"),
    row("cluster-rate-string", "predict --cluster {d}/rate_string.toml", "line_rate_gbps"),
    row("cluster-rate-zero", "predict --cluster {d}/rate_zero.toml", "line_rate_gbps"),
    row("cluster-rate-tiny", "predict --cluster {d}/rate_tiny.toml", "below 0.01 Gb/s"),
    row("cluster-rate-negative", "predict --cluster {d}/rate_negative.toml", "line_rate_gbps"),
    row("cluster-rate-nan", "predict --cluster {d}/rate_nan.toml", "line_rate_gbps"),
    row("cluster-rate-inf", "predict --cluster {d}/rate_inf.toml", "line_rate_gbps"),
    row("cluster-latency-negative", "predict --cluster {d}/latency_negative.toml", "latency_us"),
    row("cluster-latency-string", "predict --cluster {d}/latency_string.toml", "latency_us"),
    row("cluster-count-zero", "predict --cluster {d}/count_zero.toml", "count"),
    row("cluster-count-nine", "predict --cluster {d}/count_nine.toml --json", "count"),
    row("cluster-count-fraction", "predict --cluster {d}/count_fraction.toml --json", "count"),
    row("cluster-nodes-zero", "predict --cluster {d}/nodes_zero.toml --json", "nodes"),
    row("cluster-nodes-negative", "predict --cluster {d}/nodes_negative.toml", "nodes"),
    row("cluster-nodes-string", "predict --cluster {d}/nodes_string.toml", "nodes"),
    row("cluster-nodes-fraction", "predict --cluster {d}/nodes_fraction.toml", "nodes"),
    row("cluster-gpus-zero", "predict --cluster {d}/gpus_zero.toml --json", "gpus_per_node"),
    row("cluster-gpu-unknown", "predict --cluster {d}/gpu_unknown.toml", "z80"),
    row("cluster-intra-zero", "predict --cluster {d}/intra_zero.toml", "port_gbytes_per_s"),
    row("cluster-intra-unknown-key", "predict --cluster {d}/intra_unknown_key.toml", "ports"),
    row("cluster-intra-unknown-preset", "predict --cluster {d}/intra_unknown_preset.toml", "tin-cans"),
    row("cluster-switch-below-one", "predict --cluster {d}/switch_below_one.toml", "oversubscription"),
    row("cluster-switch-unknown-key", "predict --cluster {d}/switch_unknown_key.toml", "radix"),
    row("cluster-network-not-table", "predict --cluster {d}/network_not_table.toml", "network"),
    row("cluster-no-network", "predict --cluster {d}/no_network.toml", "network"),
    row("cluster-rate-in-bits-per-second", "predict --cluster {d}/rate_in_bits.toml --json", "line_rate_gbps"),
    row("cluster-latency-in-seconds", "predict --cluster {d}/latency_in_seconds.toml --json", "latency_us"),
    row("cluster-unreadable", "predict --cluster {d}/unreadable.toml", "unreadable.toml",
        marks=pytest.mark.skipif(CAN_READ_UNREADABLE, reason="root reads mode-000 files")),
    row("cluster-nodes-past-bound", "predict --cluster {d}/nodes_huge.toml --json", "nodes_huge.toml", "65,536"),
    row("cluster-switch-huge", "predict --cluster {d}/switch_huge.toml --json", "oversubscription"),
    row("cluster-switch-inf", "predict --cluster {d}/switch_inf.toml --json", "oversubscription"),
    row("cluster-leaf-zero", "predict --cluster {d}/leaf_zero.toml", "nodes_per_leaf"),
    row("cluster-intra-latency-string", "predict --cluster {d}/intra_latency_string.toml", "latency_us"),
    row("cluster-efficiency-above-one", "predict --cluster {d}/efficiency_above_one.toml", "efficiency"),
    row("cluster-name-is-table", "predict --cluster {d}/name_table.toml --json", "name"),
    row("cluster-endless-device", "predict --cluster /dev/zero", "/dev/zero"),
    row("cluster-too-large", "predict --cluster {d}/too_large.toml", "too_large.toml"),
    row("cluster-with-cli-gpus-zero", "predict --cluster {d}/count_zero.toml --gpus-per-node 0", "--gpus-per-node"),
    # sweep
    row("sweep-nodes-empty", ["sweep", "--nodes", ""], "--nodes"),
    row("sweep-nodes-zero", "sweep --nodes 0", "--nodes"),
    row("sweep-nodes-one-zero", "sweep --nodes 1,0", "--nodes"),
    row("sweep-nodes-text", "sweep --nodes a,b", "--nodes"),
    row("sweep-nodes-duplicate", "sweep --nodes 2,1,2 --optimizers sgdm --networks 10gbe --out s", "--nodes"),
    row("sweep-networks-empty", ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--networks", "", "--out", "s"],
        "--networks"),
    row("sweep-networks-comma", "sweep --nodes 1 --optimizers sgdm --networks , --out s", "--networks"),
    row("sweep-networks-unknown", "sweep --networks 10gbe,1tbe", "1tbe"),
    row("sweep-optimizers-unknown", "sweep --optimizers sgdm,lion", "lion"),
    row("sweep-optimizers-empty", "sweep --nodes 1 --optimizers , --out s", "--optimizers"),
    row("sweep-cluster-with-networks", "sweep --cluster {d}/good.toml --networks 10gbe --nodes 1 --out s",
        "--networks"),
    row("sweep-throughput-text", "sweep --single-node-throughput sgdm=fast", "--single-node-throughput"),
    row("sweep-throughput-unknown-optimizer", "sweep --single-node-throughput lion=3", "lion"),
    row("sweep-throughput-missing-optimizer",
        "sweep --nodes 1 --optimizers sgdm,birder --single-node-throughput sgdm=3000 --out s", "birder"),
    row("sweep-throughput-negative", "sweep --single-node-throughput -3", "--single-node-throughput"),
    row("sweep-out-is-file", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out {d}/a_file", "a_file"),
    row("sweep-out-empty", ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--networks", "10gbe", "--out", ""],
        "--out"),
    row("sweep-batch-zero", "sweep --batch-per-gpu 0", "--batch-per-gpu"),
    row("sweep-model-unknown", "sweep --nodes 1 --model resnet5000 --optimizers sgdm --out s", "resnet5000"),
    row("sweep-cluster-missing", "sweep --cluster {d}/nonexistent.toml --nodes 1 --optimizers sgdm --out s",
        "nonexistent.toml"),
    row("sweep-unknown-flag", "sweep --node 4", "--node"),
    row("sweep-nodes-twice", "sweep --nodes 1 --nodes 2", "--nodes", "twice"),
    row("sweep-optimizers-duplicate", "sweep --nodes 1 --optimizers sgdm,sgdm --networks 10gbe --out s",
        "--optimizers"),
    row("sweep-networks-duplicate", "sweep --nodes 1 --optimizers sgdm --networks 10gbe,10gbe --out s",
        "--networks"),
    row("sweep-throughput-optimizer-twice",
        "sweep --nodes 1 --optimizers sgdm --networks 10gbe --single-node-throughput sgdm=1,sgdm=2 --out s", "sgdm"),
    row("sweep-grad-dtype-unknown", "sweep --grad-dtype int8", "--grad-dtype"),
    row("sweep-accumulation-zero", "sweep --accumulation-steps 0", "--accumulation-steps"),
    row("sweep-hook-unknown", "sweep --hook never", "--hook"),
    row("sweep-nics-zero", "sweep --nics-per-node 0", "--nics-per-node"),
    row("sweep-nodes-per-leaf-negative", "sweep --nodes-per-leaf -1", "--nodes-per-leaf"),
    row("sweep-oversubscription-nan", "sweep --nodes 1 --optimizers sgdm --oversubscription nan --out s",
        "--oversubscription"),
    row("sweep-gpus-per-node-zero", "sweep --gpus-per-node 0", "--gpus-per-node"),
    row("sweep-gpu-unknown", "sweep --gpu z80", "--gpu"),
    row("sweep-intra-unknown", "sweep --intra tin-cans", "--intra"),
    row("sweep-params-zero", "sweep --params 0", "--params"),
    row("sweep-scheme-unknown", "sweep --scheme star", "--scheme"),
    row("sweep-warmup-nan", "sweep --warmup-fraction nan", "--warmup-fraction"),
    row("sweep-marsit-period-zero", "sweep --marsit-period 0", "--marsit-period"),
    row("sweep-nodes-past-bound", "sweep --nodes 1,9000 --optimizers sgdm --networks 10gbe --out s", "--nodes",
        "65,536"),
    row("sweep-model-empty", ["sweep", "--model", "", "--nodes", "1", "--out", "s"], "--model"),
    row("sweep-cluster-empty-path", ["sweep", "--cluster", "", "--nodes", "1", "--out", "s"], "--cluster"),
    row("sweep-out-is-fifo", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out {d}/a_fifo", "a_fifo"),
    row("sweep-throughput-below-bound", "sweep --nodes 1 --optimizers sgdm --single-node-throughput sgdm=1e-7 --out s",
        "--single-node-throughput"),
    row("sweep-json-with-value", "sweep --json=1", "--json"),
    # validate
    row("validate-csv-missing", "validate --csv {d}/nonexistent.csv --no-cross-validation", "nonexistent.csv"),
    row("validate-csv-directory", "validate --csv {d}/a_directory.csv --no-cross-validation", "a_directory.csv"),
    row("validate-csv-throughput-huge", "validate --csv {d}/throughput_huge.csv --no-cross-validation",
        "samples/s per GPU"),
    row("validate-csv-throughput-past-linear", "validate --csv {d}/throughput_past_linear.csv --no-cross-validation",
        "linear scaling"),
    row("validate-csv-empty", "validate --csv {d}/empty.csv --no-cross-validation", "empty.csv"),
    row("validate-csv-header-only", "validate --csv {d}/header_only.csv --no-cross-validation", "header_only.csv"),
    row("validate-csv-garbage", "validate --csv {d}/garbage.csv --no-cross-validation", "garbage.csv"),
    row("validate-csv-missing-column", "validate --csv {d}/missing_column.csv --no-cross-validation", "throughput"),
    row("validate-csv-throughput-text", "validate --csv {d}/throughput_text.csv --no-cross-validation", "fast"),
    row("validate-csv-throughput-negative", "validate --csv {d}/throughput_negative.csv --no-cross-validation --json",
        "throughput"),
    row("validate-csv-throughput-nan", "validate --csv {d}/throughput_nan.csv --no-cross-validation --json",
        "throughput"),
    row("validate-csv-throughput-zero", "validate --csv {d}/throughput_zero.csv --no-cross-validation --json",
        "throughput"),
    row("validate-csv-throughput-inf", "validate --csv {d}/throughput_inf.csv --no-cross-validation --json",
        "throughput"),
    row("validate-csv-gpus-zero", "validate --csv {d}/gpus_zero.csv --no-cross-validation", "gpus"),
    row("validate-csv-gpus-fraction", "validate --csv {d}/gpus_fraction.csv --no-cross-validation", "8.5"),
    row("validate-csv-gpus-not-multiple", "validate --csv {d}/gpus_not_multiple.csv --no-cross-validation --json",
        "12"),
    row("validate-csv-batch-zero", "validate --csv {d}/batch_zero.csv --no-cross-validation", "batch"),
    row("validate-csv-unknown-model", "validate --csv {d}/unknown_model.csv --no-cross-validation", "resnet5000"),
    row("validate-csv-unknown-network", "validate --csv {d}/unknown_network.csv --no-cross-validation",
        "carrier-pigeon"),
    row("validate-csv-unknown-optimizer", "validate --csv {d}/unknown_optimizer.csv --no-cross-validation", "lion"),
    row("validate-csv-short-row", "validate --csv {d}/short_row.csv --no-cross-validation", "short_row.csv"),
    row("validate-csv-duplicate-row", "validate --csv {d}/duplicate_row.csv --no-cross-validation --json",
        "duplicate"),
    row("validate-out-is-file", "validate --csv {d}/good.csv --out {d}/a_file --no-cross-validation", "a_file"),
    row("validate-csv-empty-path", ["validate", "--csv", "", "--no-cross-validation"], "--csv"),
    row("validate-csv-unreadable", "validate --csv {d}/unreadable.csv --no-cross-validation", "unreadable.csv",
        marks=pytest.mark.skipif(CAN_READ_UNREADABLE, reason="root reads mode-000 files")),
    row("validate-csv-endless-device", "validate --csv /dev/zero --no-cross-validation", "/dev/zero"),
    row("validate-csv-binary", "validate --csv {d}/binary.toml --no-cross-validation", "binary.toml"),
    row("validate-csv-gpus-past-bound", "validate --csv {d}/gpus_past_bound.csv --json", "line 3", "gpus"),
    row("validate-csv-batch-past-bound", "validate --csv {d}/batch_past_bound.csv --json", "line 3", "batch_per_gpu"),
    row("validate-unknown-flag", "validate --cvs x.csv", "--cvs"),
    row("validate-out-empty", ["validate", "--csv", "{d}/good.csv", "--out", "", "--no-cross-validation"], "--out"),
    row("validate-out-is-fifo", "validate --csv {d}/good.csv --out {d}/a_fifo --no-cross-validation", "a_fifo"),
    row("validate-json-with-value", "validate --json=true", "--json"),
    row("validate-no-cross-validation-with-value", "validate --no-cross-validation=yes", "--no-cross-validation"),
    # check
    row("check-impl-missing", "check --impl no_such_module_anywhere", "no_such_module_anywhere"),
    row("check-impl-empty", ["check", "--impl", ""], "--impl"),
    row("check-impl-colon-only", "check --impl :", "--impl"),
    row("check-impl-no-attribute", "check --impl os:no_such_object", "no_such_object"),
    row("check-impl-no-interface", "check --impl json", "json"),
    row("check-impl-raises", "check --impl impl_raises", "impl_raises"),
    row("check-impl-syntax-error", "check --impl impl_syntax", "impl_syntax"),
    row("check-impl-partial", "check --impl impl_partial", "impl_partial"),
    row("check-impl-not-callable", "check --impl impl_not_callable", "impl_not_callable"),
    row("check-impl-exits-0", "check --impl impl_exits0 --json", "impl_exits0"),
    row("check-impl-exits-3", "check --impl impl_exits3", "impl_exits3"),
    row("check-impl-file-path", "check --impl {d}/impl_partial.py", "impl_partial"),
    row("check-impl-class", "check --impl birder_ref.algorithm1:State", "State"),
    row("check-impl-function", "check --impl birder_ref.algorithm1:step", "step"),
    row("check-impl-dotted-missing", "check --impl birder_ref.no_such_module", "no_such_module"),
    row("check-only-unknown", "check --only no_such_check", "no_such_check"),
    row("check-only-empty", ["check", "--only", "", "--json"], "--only"),
    row("check-unknown-flag", "check --implementation x", "--implementation"),
    row("check-impl-twice", "check --impl birder_ref.algorithm1 --impl json", "--impl", "twice"),
    row("check-timeout-nan", "check --timeout nan", "--timeout"),
    row("check-timeout-inf", "check --timeout inf", "--timeout"),
    row("check-timeout-zero", "check --timeout 0", "--timeout"),
    row("check-timeout-text", "check --timeout soon", "--timeout"),
    row("check-template-with-impl", "check --template --impl birder_ref.algorithm1", "--template", "--impl"),
    row("check-template-with-json", "check --template --json", "--template", "--json"),
    row("check-template-with-only", "check --template --only eq5_support", "--template", "--only"),
    row("check-template-with-timeout", "check --template --timeout 5", "--template", "--timeout"),
    row("check-parity-with-value", "check --parity=1", "--parity"),
    row("check-impl-py-missing", "check --impl {d}/no_such_impl.py", "no_such_impl.py"),
    row("check-impl-py-directory", "check --impl {d}/a_directory.toml", "a_directory.toml"),
    # gpu-validate
    row("gpu-validate-nodes-zero", "gpu-validate --nodes 0", "nodes"),
    row("gpu-validate-nodes-negative", "gpu-validate --nodes -1", "nodes"),
    row("gpu-validate-nodes-text", "gpu-validate --nodes two", "--nodes"),
    row("gpu-validate-gpus-zero", "gpu-validate --gpus-per-node 0", "gpus"),
    row("gpu-validate-steps-zero", "gpu-validate --steps 0", "steps"),
    row("gpu-validate-steps-negative", "gpu-validate --steps -6", "steps"),
    row("gpu-validate-seed-negative", "gpu-validate --seed -1", "seed"),
    row("gpu-validate-seed-huge", "gpu-validate --seed 99999999999", "seed"),
    row("gpu-validate-timeout-zero", "gpu-validate --timeout 0", "timeout"),
    row("gpu-validate-timeout-nan", "gpu-validate --timeout nan", "timeout"),
    row("gpu-validate-timeout-negative", "gpu-validate --timeout -5", "timeout"),
    row("gpu-validate-backend-unknown", "gpu-validate --backend mpi", "--backend"),
    row("gpu-validate-scheme-unknown", "gpu-validate --scheme ring", "--scheme"),
    row("gpu-validate-nonfinite-text", "gpu-validate --nonfinite-at two", "--nonfinite-at"),
    row("gpu-validate-nonfinite-rank-out", "gpu-validate --nonfinite-at 2:99", "nonfinite"),
    row("gpu-validate-nonfinite-step-out", "gpu-validate --nonfinite-at 99:0", "nonfinite"),
    row("gpu-validate-kill-text", "gpu-validate --kill-at x:y", "--kill-at"),
    row("gpu-validate-kill-rank-out", "gpu-validate --kill-at 2:9", "kill"),
    row("gpu-validate-hang-step-zero", "gpu-validate --hang-at 0:1", "hang"),
    row("gpu-validate-overflow-node-out", "gpu-validate --overflow-at 2:7", "overflow"),
    row("gpu-validate-overflow-flat", "gpu-validate --scheme flat --overflow-at 2:0", "only a node sum"),
    row("gpu-validate-overflow-one-gpu-nodes", "gpu-validate --nodes 2 --gpus-per-node 1 --overflow-at 2:0",
        "only a node sum"),
    row("gpu-validate-resume-negative", "gpu-validate --resume-at -1", "resume"),
    row("gpu-validate-resume-beyond", "gpu-validate --resume-at 100", "resume"),
    row("gpu-validate-too-many-ranks", "gpu-validate --nodes 5 --gpus-per-node 4", "20"),
    row("gpu-validate-timeout-with-unit", "gpu-validate --timeout 60s", "--timeout"),
    row("gpu-validate-steps-twice", "gpu-validate --steps 2 --steps 3", "--steps", "twice"),
    row("gpu-validate-nccl-without-cuda", "gpu-validate --backend nccl", "nccl"),
    row("gpu-validate-timeout-inf", "gpu-validate --timeout inf", "--timeout"),
    row("gpu-validate-timeout-text", "gpu-validate --timeout soon", "--timeout"),
    row("gpu-validate-json-with-value", "gpu-validate --json=1", "--json"),
    # bench
    row("bench-ranks-zero", "bench --ranks 0", "ranks"),
    row("bench-ranks-negative", "bench --ranks -2", "ranks"),
    row("bench-ranks-text", "bench --ranks two", "--ranks"),
    row("bench-sizes-zero", "bench --sizes 0", "sizes"),
    row("bench-sizes-negative", "bench --sizes -8", "sizes"),
    row("bench-sizes-text", "bench --sizes big", "--sizes"),
    row("bench-sizes-float", "bench --sizes 1e10", "--sizes"),
    row("bench-sizes-empty-list", "bench --sizes", "--sizes"),
    row("bench-repeats-zero", "bench --repeats 0", "repeats"),
    row("bench-repeats-negative", "bench --repeats -1", "repeats"),
    row("bench-device-unknown", "bench --device tpu", "--device"),
    row("bench-backend-unknown", "bench --backend mpi", "--backend"),
    row("bench-nccl-without-cuda", "bench --backend nccl --sizes 64 --repeats 1", "cuda"),
    row("bench-cuda-without-cuda", "bench --device cuda --sizes 64 --repeats 1", "cuda"),
    row("bench-gpus-per-node-zero", "bench --gpus-per-node 0 --sizes 64 --repeats 1", "gpus", wall_s=HANG_S),
    row("bench-gpus-per-node-not-divisor", "bench --ranks 3 --gpus-per-node 2 --sizes 64 --repeats 1", "ranks"),
    row("bench-out-empty", ["bench", "--sizes", "64", "--repeats", "1", "--out", ""], "--out"),
    row("bench-sizes-with-unit", "bench --sizes 1MiB", "--sizes"),
    row("bench-ranks-twice", "bench --ranks 2 --ranks 4", "--ranks", "twice"),
    row("bench-out-in-missing-dir", "bench --sizes 64 --repeats 1 --out {d}/no/such/dir/x.toml", "x.toml"),
    row("bench-out-is-directory", "bench --sizes 64 --repeats 1 --out {d}/a_directory.toml", "a_directory.toml"),
    row("bench-gpus-per-node-negative", "bench --gpus-per-node -2", "--gpus-per-node"),
    row("bench-gpus-per-node-text", "bench --gpus-per-node two", "--gpus-per-node"),
    row("bench-repeats-text", "bench --repeats many", "--repeats"),
    row("bench-out-is-existing-dir-slash", "bench --sizes 64 --repeats 1 --out {d}/a_directory.toml/", "a_directory"),
    row("bench-json-with-value", "bench --json=1", "--json"),
    row("bench-out-is-fifo", "bench --sizes 64 --repeats 1 --out {d}/a_fifo", "a_fifo"),
    row("bench-repeats-huge", "bench --sizes 64 --repeats 100000000", "--repeats", "1,000"),
    row("bench-ranks-past-cores", "bench --sizes 64 --repeats 1 --ranks 100000", "--ranks"),
    row("gpu-validate-steps-huge", "gpu-validate --steps 100000000", "--steps", "10,000"),
    row("gpu-validate-seed-two-to-32", "gpu-validate --seed 4294967296", "--seed"),
    row("gpu-validate-seed-text", "gpu-validate --seed lucky", "--seed"),
    # report
    row("report-out-under-file", "report --quick --out {d}/a_file/report", "a_file"),
    row("report-out-is-file", "report --quick --out {d}/a_file", "a_file"),
    row("report-unknown-flag", "report --fast", "--fast"),
    row("report-out-twice", "report --out a --out b", "--out", "twice"),
    row("report-quick-with-value", "report --quick=yes", "--quick"),
    row("report-json-with-value", "report --json=1", "--json"),
    row("report-quiet-with-value", "report --quiet=no", "--quiet"),
    row("report-out-is-fifo", "report --quick --out {d}/a_fifo", "a_fifo"),
    row("report-out-in-proc", "report --quick --out /proc/birder-report", "/proc/birder-report", wall_s=HANG_S),
    row("sweep-out-in-proc", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out /proc/birder-sweep",
        "/proc/birder-sweep", wall_s=HANG_S),
    # issue 19: outputs never destroy what we did not write, nor the toolkit's own files
    row("report-out-users-folder-with-report-md", "report --quick --out {d}/users_folder", "users_folder",
        wall_s=HANG_S),
    row("report-out-earlier-report-plus-users-file", "report --quick --out {d}/earlier_report_and_more",
        "mine.txt", wall_s=HANG_S),
    row("report-out-dangling-link", "report --quick --out {d}/dangling", "dangling", wall_s=HANG_S),
    row("report-out-package", "report --quick --out {pkg}", "toolkit", wall_s=HANG_S),
    row("report-out-inside-package", "report --quick --out {pkg}/new_report", "toolkit", wall_s=HANG_S),
    row("report-out-through-link-into-package", "report --quick --out {d}/link_to_package/r", "toolkit",
        wall_s=HANG_S),
    row("bench-out-shipped-preset", "bench --sizes 64 --repeats 1 --out {pkg}/presets/networks.toml", "toolkit"),
    row("bench-out-new-file-in-package", "bench --sizes 64 --repeats 1 --out {pkg}/mine.toml", "toolkit"),
    row("bench-out-dangling-link", "bench --sizes 64 --repeats 1 --out {d}/dangling", "dangling"),
    row("sweep-out-package", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out {pkg}", "toolkit"),
    row("sweep-out-presets", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out {pkg}/presets", "toolkit"),
    row("sweep-out-through-link", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out {d}/link_to_package",
        "toolkit"),
    row("validate-out-tests", "validate --csv {d}/good.csv --out {root}/tests --no-cross-validation", "toolkit",
        marks=pytest.mark.skipif(not (ROOT / "tests").is_dir(), reason="not a checkout")),
    row("validate-out-package", "validate --csv {d}/good.csv --out {pkg} --no-cross-validation", "toolkit"),
    row("sweep-out-under-dangling-link", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out {d}/dangling/s",
        "dangling"),
    row("validate-out-dangling-link", "validate --csv {d}/good.csv --out {d}/dangling --no-cross-validation",
        "dangling"),
    # issue 19: every input read with a bound
    row("predict-cluster-fifo", "predict --cluster {d}/fifo.toml", "fifo.toml", "FIFO", wall_s=HANG_S),
    row("sweep-cluster-fifo", "sweep --cluster {d}/fifo.toml --nodes 1 --optimizers sgdm --out s", "fifo.toml",
        wall_s=HANG_S),
    row("validate-csv-fifo", "validate --csv {d}/fifo.csv --no-cross-validation", "fifo.csv", wall_s=HANG_S),
    row("predict-cluster-tty-device", "predict --cluster /dev/tty", "/dev/tty", wall_s=HANG_S),
    row("validate-csv-null-device", "validate --csv /dev/null --no-cross-validation", "/dev/null", wall_s=HANG_S),
    row("cluster-latency-1e308", "predict --cluster {d}/latency_1e308.toml --nodes 2 --json", "latency_us"),
    row("cluster-latency-two-seconds", "predict --cluster {d}/latency_two_seconds.toml --nodes 2", "latency_us"),
    row("cluster-peer-overhead-huge", "predict --cluster {d}/peer_overhead_huge.toml --nodes 2", "peer_overhead_us"),
    row("cluster-retransmission-timeout-a-day", "predict --cluster {d}/retransmission_timeout_a_day.toml --nodes 2",
        "retransmission_timeout_s"),
    row("cluster-intra-port-absurd", "predict --cluster {d}/intra_port_absurd.toml", "port_gbytes_per_s"),
    row("cluster-intra-port-in-bits", "predict --cluster {d}/intra_port_in_bits.toml", "port_gbytes_per_s"),
    row("cluster-intra-latency-huge", "predict --cluster {d}/intra_latency_huge.toml", "latency_us"),
    row("validate-csv-duplicate-column", "validate --csv {d}/duplicate_column.csv --no-cross-validation --json",
        "throughput", "twice"),
    row("validate-csv-unknown-column", "validate --csv {d}/unknown_column.csv --no-cross-validation", "thruput"),
    row("validate-csv-calibration-only", "validate --csv {d}/calibration_only.csv --no-cross-validation --json",
        "single-node"),
    row("validate-csv-header-repeated", "validate --csv {d}/header_repeated.csv --no-cross-validation", "line 3"),
    row("predict-scheme-for-sgdm", "predict --scheme ring --json", "--scheme", "sgdm"),
    row("predict-scheme-for-onebit-adam", "predict --optimizer onebit-adam --scheme flat", "--scheme"),
    row("predict-hook-for-sgdm", "predict --hook overlapped", "--hook"),
    row("predict-hook-for-onebit-adam", "predict --optimizer onebit-adam --hook overlapped", "--hook"),
    row("predict-warmup-for-birder", "predict --optimizer birder --warmup-fraction 0.1", "--warmup-fraction"),
    row("predict-warmup-for-zero-one-adam", "predict --optimizer zero-one-adam --warmup-fraction 0.3",
        "--warmup-fraction"),
    row("predict-marsit-period-for-sgdm", "predict --marsit-period 3", "--marsit-period"),
    row("predict-marsit-period-for-birder", "predict --optimizer birder --marsit-period 3", "--marsit-period"),
    row("sweep-scheme-for-none", "sweep --nodes 1 --optimizers sgdm,adam --scheme ring --out s", "--scheme"),
    row("sweep-warmup-for-none", "sweep --nodes 1 --optimizers sgdm,birder --warmup-fraction 0.2 --out s",
        "--warmup-fraction"),
    row("bench-nccl-on-cpu", "bench --device cpu --backend nccl --sizes 64 --repeats 1", "nccl", "cpu"),
    row("calibrate-output-fifo", "calibrate {d}/a_fifo --out c.toml", "a_fifo", "FIFO", wall_s=HANG_S),
    row("calibrate-output-device", "calibrate /dev/zero --out c.toml", "/dev/zero", wall_s=HANG_S),
    row("calibrate-out-shipped-preset", "calibrate {nccl}/ib100_8x8v100_all_reduce.txt --out {pkg}/presets/gpus.toml",
        "toolkit", wall_s=HANG_S),
    row("calibrate-out-is-its-input", "calibrate {d}/measured.txt --op all-reduce --nodes 8 --gpus-per-node 8 "
        "--network 100gbe --out {d}/measured.txt", "input", wall_s=HANG_S),
    row("calibrate-out-is-a-link-to-its-input", "calibrate {d}/measured.txt --op all-reduce --nodes 8 "
        "--gpus-per-node 8 --network 100gbe --out {d}/link_to_measured", "input", wall_s=HANG_S),
    row("calibrate-out-directory", "calibrate {nccl}/ib100_8x8v100_all_reduce.txt --out {d}/a_directory.toml",
        "directory", wall_s=HANG_S),
    row("calibrate-out-dangling-link", "calibrate {nccl}/ib100_8x8v100_all_reduce.txt --out {d}/dangling",
        "dangling", wall_s=HANG_S),
    row("report-prices-fifo", "report --quick --out r --prices {d}/fifo.toml", "fifo.toml", wall_s=HANG_S),
    row("report-prices-unknown-network", "report --quick --out r --prices {d}/prices_unknown_network.toml",
        "warp-drive", wall_s=HANG_S),
    row("report-prices-device", "report --quick --out r --prices /dev/urandom", "/dev/urandom", wall_s=HANG_S),
    row("gpu-validate-timeout-1e308", "gpu-validate --timeout 1e308", "--timeout", "86400"),
    # issue 31: the one output rule (never over a file birder did not write, or one edited since)
    row("calibrate-out-users-cluster-file", CALIBRATE + "--out {d}/users_cluster.toml", "users_cluster.toml",
        "not written by birder", wall_s=HANG_S),
    row("calibrate-out-edited-since", CALIBRATE + "--out {d}/edited/c.toml", "c.toml", "changed since",
        wall_s=HANG_S),
    row("calibrate-out-is-the-manifest", CALIBRATE + "--out .birder-manifest", ".birder-manifest", wall_s=HANG_S),
    row("calibrate-out-name-forges-a-manifest-line", CALIBRATE.split() + ["--out", "x\n" + "0" * 64 + "  v.toml"],
        "control characters", wall_s=HANG_S),
    row("bench-out-users-cluster-file", "bench --sizes 64 --repeats 1 --out {d}/users_cluster.toml",
        "users_cluster.toml", "not written by birder"),
    row("sweep-out-users-csv", "sweep --nodes 1 --optimizers sgdm --networks 10gbe --out {d}/users_sweep",
        "sweep.csv", "not written by birder"),
    row("collective-out-users-png", "collective --op all-reduce --bytes 8:16 --out {d}/users_collective",
        "collective.png", "not written by birder"),
    row("validate-out-users-png", "validate --no-cross-validation --out {d}/users_validate", "validation.png",
        "not written by birder"),
    # issue 31: names that would add TOML keys or lines
    row("calibrate-name-quote-newline", CALIBRATE.split() + ["--out", "c.toml", "--name",
                                                            'a"\ngpu_speed_cv = 0.5'], "--name"),
    row("calibrate-name-escape", CALIBRATE.split() + ["--out", "c.toml", "--name", "\x1b[2Jx"], "--name"),
    # issue 31: numbers outside physical and monetary ranges, refused before the work
    row("predict-cluster-efficiency-1e-300", "predict --cluster {d}/efficiency_1e-300.toml", "efficiency"),
    row("predict-cluster-switch-buffer-1e308", "predict --cluster {d}/switch_buffer_1e308.toml",
        "switch_buffer_bytes"),
    row("predict-cluster-intra-port-1e-300", "predict --cluster {d}/intra_port_1e-300.toml", "port_gbytes_per_s"),
    row("predict-cluster-leaf-1e30", "predict --cluster {d}/leaf_1e30.toml", "nodes_per_leaf"),
    row("predict-cluster-nodes-1e30-overridden", "predict --cluster {d}/nodes_1e30.toml --nodes 2", "nodes"),
    row("predict-nodes-per-leaf-1e30", "predict --nodes-per-leaf 1000000000000000000000000000000",
        "--nodes-per-leaf"),
    row("report-prices-node-1e308", "report --quick --out r --prices {d}/prices_node_1e308.toml", "node", "1e+12",
        wall_s=HANG_S),
    row("report-prices-node-1e-300", "report --quick --out r --prices {d}/prices_node_1e-300.toml", "node",
        wall_s=HANG_S),
    row("report-prices-node-1e23", "report --quick --out r --prices {d}/prices_node_1e23.toml", "node",
        wall_s=HANG_S),
    row("report-prices-nic-1e-300", "report --quick --out r --prices {d}/prices_nic_1e-300.toml", "10gbe",
        wall_s=HANG_S),
    row("report-prices-currency-newline", "report --quick --out r --prices {d}/prices_currency_newline.toml",
        "currency", wall_s=HANG_S),
    row("report-prices-currency-long", "report --quick --out r --prices {d}/prices_currency_long.toml",
        "currency", wall_s=HANG_S),
    row("gpu-validate-timeout-a-microsecond", "gpu-validate --timeout 1e-6", "--timeout"),
    row("cluster-measured-above-line-rate", "predict --cluster {d}/measured_above_line.toml --nodes 2",
        "measured_gbps", "line rate"),
    row("cluster-measured-zero", "predict --cluster {d}/measured_zero.toml --nodes 2", "measured_gbps"),
    row("cluster-measured-string", "predict --cluster {d}/measured_string.toml --nodes 2", "measured_gbps"),
    row("cluster-measured-in-bits", "predict --cluster {d}/measured_in_bits.toml --nodes 2", "measured_gbps"),
    row("cluster-measured-and-efficiency", "predict --cluster {d}/measured_and_efficiency.toml --nodes 2",
        "measured_gbps", "efficiency"),
    row("predict-measured-above-line-rate", "predict --network 10gbe --nodes 2 --measured-gbps 25 --json",
        "--measured-gbps", "line rate"),
    row("predict-measured-zero", "predict --nodes 2 --measured-gbps 0", "--measured-gbps"),
    row("predict-measured-nan", "predict --nodes 2 --measured-gbps nan", "--measured-gbps"),
    row("predict-measured-text", "predict --nodes 2 --measured-gbps fast", "--measured-gbps"),
    row("predict-measured-tiny", "predict --nodes 2 --measured-gbps 1e-9", "--measured-gbps", "below"),
    row("predict-measured-above-cluster-line-rate", "predict --cluster {d}/good.toml --nodes 2 --measured-gbps 40",
        "--measured-gbps", "line rate"),
    row("sweep-measured-two-networks", "sweep --nodes 2 --optimizers sgdm --measured-gbps 4 --out s",
        "--measured-gbps", "one network"),
]

if HAS_COLLECTIVE:  # the subcommand is being added beside this suite; its rows run once it is there
    ROWS += [
        row("collective-op-unknown", "collective --op all-sum --bytes 1024", "--op"),
        row("collective-op-missing", "collective --bytes 1024", "--op"),
        row("collective-bytes-zero", "collective --op all-reduce --bytes 0", "--bytes"),
        row("collective-bytes-negative", "collective --op all-reduce --bytes -8", "--bytes"),
        row("collective-bytes-text", "collective --op all-reduce --bytes lots", "--bytes"),
        row("collective-bytes-nan", "collective --op all-reduce --bytes nan", "--bytes"),
        row("collective-bytes-missing", "collective --op all-reduce", "--bytes"),
        row("collective-nodes-zero", "collective --op all-reduce --bytes 1024 --nodes 0", "--nodes"),
        row("collective-gpus-zero", "collective --op all-reduce --bytes 1024 --gpus-per-node 0", "--gpus-per-node"),
        row("collective-algorithm-unknown", "collective --op all-reduce --bytes 1024 --algorithm star",
            "--algorithm"),
        row("collective-network-unknown", "collective --op all-reduce --bytes 1024 --network 1tbe", "--network"),
        row("collective-cluster-missing", "collective --op all-reduce --bytes 1024 --cluster {d}/nonexistent.toml",
            "nonexistent.toml"),
        row("collective-bytes-huge", "collective --op all-reduce --bytes 2000G", "--bytes", "1024G"),
        row("collective-bytes-beyond-float", f"collective --op all-reduce --bytes {BIG}", "--bytes"),
        row("collective-bytes-inf", "collective --op all-reduce --bytes inf", "--bytes"),
        row("collective-bytes-fraction", "collective --op all-reduce --bytes 1.5", "--bytes"),
        row("collective-bytes-range-reversed", "collective --op all-reduce --bytes 8M:1K", "--bytes"),
        row("collective-bytes-range-open", "collective --op all-reduce --bytes 1:", "--bytes"),
        row("collective-bytes-range-zero", "collective --op all-reduce --bytes 0:8", "--bytes"),
        row("collective-bytes-range-huge", "collective --op all-reduce --bytes 1:4096G", "--bytes"),
        row("collective-bytes-unit-unknown", "collective --op all-reduce --bytes 1T", "--bytes"),
        row("collective-tree-for-broadcast", "collective --op broadcast --bytes 8 --algorithm tree", "--algorithm"),
        row("collective-tree-for-all-gather", "collective --op all-gather --bytes 8 --algorithm tree",
            "--algorithm"),
        row("collective-nodes-negative", "collective --op all-reduce --bytes 8 --nodes -1", "--nodes"),
        row("collective-nodes-past-bound", "collective --op all-reduce --bytes 8 --nodes 8193", "--nodes"),
        row("collective-nics-uneven-gpus", "collective --op all-reduce --bytes 8 --nics-per-node 12",
            "--nics-per-node"),
        row("collective-oversubscription-half", "collective --op all-reduce --bytes 8 --oversubscription 0.5",
            "--oversubscription"),
        row("collective-nodes-per-leaf-zero", "collective --op all-reduce --bytes 8 --nodes-per-leaf 0",
            "--nodes-per-leaf"),
        row("collective-gpu-unknown", "collective --op all-reduce --bytes 8 --gpu z80", "--gpu"),
        row("collective-intra-unknown", "collective --op all-reduce --bytes 8 --intra tin-cans", "--intra"),
        row("collective-out-empty", ["collective", "--op", "all-reduce", "--bytes", "1:8", "--out", ""], "--out"),
        row("collective-out-is-file", "collective --op all-reduce --bytes 1:8 --out {d}/a_file", "a_file"),
        row("collective-out-is-fifo", "collective --op all-reduce --bytes 1:8 --out {d}/a_fifo", "a_fifo"),
        row("collective-json-with-value", "collective --op all-reduce --bytes 8 --json=1", "--json"),
        row("collective-op-twice", "collective --op all-reduce --op broadcast --bytes 8", "--op", "twice"),
        row("collective-empty-cluster-file", "collective --op all-reduce --bytes 8 --cluster {d}/empty.toml",
            "empty.toml"),
        row("collective-network-and-cluster",
            "collective --op all-reduce --bytes 1024 --network 10gbe --cluster {d}/rate_zero.toml", "--cluster"),
    ]


def _argv(args: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)).replace("{pkg}", str(PACKAGE)).replace("{root}", str(ROOT))
            .replace("{nccl}", str(NCCL_OUTPUTS)) for a in args]


@pytest.mark.parametrize("args, names, wall_s", ROWS)
def test_bad_input_cli(args, names, wall_s, files, tmp_path):
    watched = (files, PACKAGE) if any("{pkg}" in a or "{root}" in a or "link_to" in a for a in args) else (files,)
    outcome = run_cli(_argv(args, files), tmp_path, watched, wall_s=wall_s)
    assert_rejected(outcome, names)


# Valid inputs that hung or ran for minutes before (issue 12's B1: the flow engine's finish test at huge simulated
# times): each must now answer within HANG_S, exit 0, with strict JSON. Not counted as bad inputs.
FORMERLY_HANGING = [
    pytest.param("predict --nodes 4 --single-node-throughput 0.001 --json", id="tiny-throughput"),
    pytest.param("predict --nodes 2 --oversubscription 64 --json", id="oversubscription-at-bound"),
    pytest.param(f"predict --batch-per-gpu {65536} --json", id="batch-at-bound"),
    pytest.param("predict --nodes 2 --params 12 --single-node-throughput 1e-6 --json", id="one-parameter-slow-node"),
]


@pytest.mark.parametrize("argv", FORMERLY_HANGING)
def test_formerly_hanging_inputs_answer_fast(argv, tmp_path):
    outcome = run_cli(argv.split(), tmp_path, wall_s=HANG_S)
    assert outcome.status == 0 and not outcome.stderr.strip(), outcome
    assert strict_json(outcome.stdout)["iteration_s"] > 0
    assert not outcome.changed


def test_the_suite_holds_200_distinct_bad_inputs_and_no_xfail():
    from bad_input_harness import count_bad_inputs

    counts = count_bad_inputs()
    assert sum(counts.values()) >= 200 and counts["cli"] >= 200, counts
    assert not [r.id for r in ROWS + SUBPROCESS_ROWS if any(m.name == "xfail" for m in r.marks)]


def test_the_rows_are_distinct():
    ids = [r.id for r in ROWS]
    argvs = [tuple(r.values[0]) for r in ROWS]
    assert len(set(ids)) == len(ids) and len(set(argvs)) == len(argvs)


def test_quiet_is_offered_by_every_subcommand(tmp_path):
    from birder.cli import QUIET_HELP, build_parser

    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in subcommands.items():
        quiet = [a for a in sub._actions if "--quiet" in a.option_strings]
        assert len(quiet) == 1, name
    assert QUIET_HELP.startswith("silences progress bars")
    outcome = run_cli(["predict", "--quiet", "--json"], tmp_path)
    assert outcome.status == 0 and outcome.stderr == "" and strict_json(outcome.stdout)["throughput"] > 0


def test_the_wall_bound_turns_a_hang_into_a_failure(tmp_path):
    """The harness's own guarantee: a call that never returns fails, even if it swallows the first alarm."""
    import birder.cli

    def forever(args):
        try:  # swallows the first alarm, as an exception raised inside a gc callback is swallowed
            while True:
                pass
        except BaseException:
            pass
        while True:
            pass

    parser = birder.cli.build_parser

    def with_a_hanging_command():
        p = parser()
        p.set_defaults(func=forever)
        for action in p._actions:
            if action.dest == "command":
                action.choices["predict"].set_defaults(func=forever)
        return p

    birder.cli.build_parser = with_a_hanging_command
    try:
        with pytest.raises(AssertionError, match="hang: `birder predict` gave no answer within 0.5 s"):
            run_cli(["predict"], tmp_path, wall_s=0.5)
    finally:
        birder.cli.build_parser = parser


# ------------------------------------------------------------------------------- the real console script
BIRDER = shutil.which("birder", path=str(Path(sys.executable).parent)) or shutil.which("birder") or "birder"
SUBPROCESS_WALL_S = 60


def _limit_memory(limit_bytes: int):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


def console(args: list[str], cwd: Path, timeout: float = SUBPROCESS_WALL_S, prelude: str | None = None,
            memory_limit: int | None = None):
    """Run the console script (or, with ``prelude``, ``python -c`` calling main after the prelude) with a timeout;
    a hang fails the test (the process group is killed) instead of blocking it."""
    if prelude is None:
        command = [BIRDER, *args]
    else:
        script = f"{prelude}\nimport sys\nfrom birder.cli import main\nsys.exit(main({args!r}))"
        command = [sys.executable, "-c", script]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True,
                               preexec_fn=None if memory_limit is None else _limit_memory(memory_limit))
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.communicate()
        pytest.fail(f"`birder {' '.join(args)}` did not answer within {timeout} s (hang)")
    return process.returncode, stdout, stderr


NO_TORCH = "import sys\nsys.modules['torch'] = None  # what an install without the torch extra looks like"
SUBPROCESS_ROWS = [
    pytest.param(["predict", "--nodes", "0"], None, ("--nodes",), id="console-predict-nodes-zero"),
    pytest.param(["sweep", "--nodes", "x"], None, ("--nodes",), id="console-sweep-nodes-text"),
    pytest.param(["gpu-validate", "--steps", "2"], NO_TORCH, ("pip install", "torch"),
                 id="console-gpu-validate-without-torch"),
    pytest.param(["bench", "--sizes", "64", "--repeats", "1"], NO_TORCH, ("pip install", "torch"),
                 id="console-bench-without-torch"),
    pytest.param(["predict", "--gpus-per-node", "1000000000", "--json"], "", ("--gpus-per-node", "65,536"),
                 id="console-predict-gpus-per-node-beyond-memory"),
    pytest.param(["bench", "--sizes", "10000000000", "--repeats", "1", "--out", "b.toml"], None, ("memory",),
                 id="console-bench-sizes-beyond-memory"),
    pytest.param(["predict", "--nodes", "2", "--gpus-per-node", "0"], None, ("--gpus-per-node",),
                 id="console-predict-gpus-per-node-zero"),
]


@pytest.mark.parametrize("args, prelude, names", SUBPROCESS_ROWS)
def test_bad_input_console_script(args, prelude, names, tmp_path):
    timeout = SUBPROCESS_WALL_S
    limit = 4 << 30 if "1000000000" in args else None  # an address-space limit: the allocation fails at once
    status, stdout, stderr = console(args, tmp_path, timeout=timeout, prelude=prelude or None, memory_limit=limit)
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    assert status == 2 and len(lines) == 1, (status, stderr)
    assert all(n.lower() in lines[0].lower() for n in names), lines[0]
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())
    assert not stdout.strip() or strict_json(stdout)


def test_the_formerly_hanging_console_script_answers_fast(tmp_path):
    """`predict --single-node-throughput 0.001` livelocked the flow engine (issue 12's hang): a valid input, whose
    answer (an iteration of days) must now come within seconds, exit 0, strict JSON, no orphan left running."""
    status, stdout, stderr = console(["predict", "--nodes", "4", "--single-node-throughput", "0.001", "--json"],
                                     tmp_path, timeout=6)
    assert status == 0, (status, stderr)
    assert strict_json(stdout)["iteration_s"] > 1000


def test_ctrl_c_is_one_line_and_status_130(tmp_path):
    """A KeyboardInterrupt inside a command (what Ctrl-C raises) is one line and exit status 130."""
    status, _, stderr = console(["predict"], tmp_path, prelude=(
        "import sim.cli\n"
        "def interrupted(args):\n    raise KeyboardInterrupt\n"
        "sim.cli.run_predict = interrupted"))
    assert status == 130 and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr


# ----------------------------------------------------------------------------------------------- fuzz
FUZZ = settings(max_examples=100, phases=(Phase.explicit, Phase.reuse, Phase.generate),
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
NUMBERS = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "nan", "inf", "-inf", "1e308", "1e-308", "", " ", "1.5", "0x10", "1_000",
                     "٣", "2,1", "1e3", "+4", "--", "None", "true"]),
    st.integers(-10, 10).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=6),
)
# Cheap configurations only: small node counts, so a valid draw answers in a fraction of a second.
PREDICT_FLAGS = ["--nodes", "--batch-per-gpu", "--gpus-per-node", "--params", "--warmup-fraction",
                 "--oversubscription", "--marsit-period", "--accumulation-steps", "--nics-per-node",
                 "--nodes-per-leaf"]


@FUZZ
@given(flag=st.sampled_from(PREDICT_FLAGS), value=NUMBERS,
       optimizer=st.sampled_from(["sgdm", "birder", "onebit-adam", "marsit"]))
def test_fuzz_predict_argument_values(flag, value, optimizer, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("fuzz")
    args = ["predict", "--optimizer", optimizer, "--nodes", "2", "--json", flag, value]
    assert_answered(run_cli(args, cwd, wall_s=10), json_expected=True)


SIZES = st.one_of(NUMBERS, st.builds(lambda n, unit: f"{n}{unit}", st.integers(-3, 1 << 50),
                                     st.sampled_from(["", "K", "M", "G", "k", "T", "B"])))


@FUZZ
@given(size=SIZES, high=st.one_of(st.none(), SIZES), op=st.sampled_from(["all-reduce", "all-gather", "broadcast"]),
       algorithm=st.sampled_from(["auto", "ring", "tree"]))
def test_fuzz_collective_sizes(size, high, op, algorithm, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("fuzz")
    spec = size if high is None else f"{size}:{high}"
    args = ["collective", "--op", op, "--bytes", spec, "--algorithm", algorithm, "--nodes", "2", "--json"]
    outcome = run_cli(args, cwd, wall_s=10)
    assert_answered(outcome, json_expected=True)
    if outcome.status == 2:
        assert "--bytes" in outcome.stderr or "--algorithm" in outcome.stderr, outcome.stderr


TOML_KEYS = {
    "": ["nodes", "gpus_per_node", "gpu", "name", "extra"],
    "network": ["preset", "transport", "line_rate_gbps", "latency_us", "count", "efficiency", "bogus"],
    "intra": ["preset", "port_gbytes_per_s", "latency_us"],
    "switch": ["oversubscription"],
}
TOML_VALUES = st.one_of(
    st.sampled_from(['"10gbe"', '"ib-hdr"', '"socket"', '"ib"', '"a100"', '"a100-nvlink"', '""', '"x"', "0", "-1",
                     "1", "2", "8", "nan", "inf", "-inf", "1.5", "100", "1e9", "true", "[]", "{}", '"100 Gb/s"']),
    st.integers(-3, 9).map(str),
)


@st.composite
def toml_documents(draw):
    lines = []
    for table, keys in TOML_KEYS.items():
        chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=3))
        if table:
            if not chosen and draw(st.booleans()):
                continue
            lines.append(f"[{table}]")
        lines += [f"{key} = {draw(TOML_VALUES)}" for key in chosen]
    return "\n".join(lines) + "\n"


@FUZZ
@given(document=toml_documents())
def test_fuzz_cluster_toml(document, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("fuzz")
    (cwd / "c.toml").write_text(document)
    outcome = run_cli(["predict", "--cluster", "c.toml", "--nodes", "2", "--gpus-per-node", "2", "--json"], cwd,
                      wall_s=10)
    assert_answered(outcome, json_expected=True)


CSV_GOOD = {"model": "resnet50", "batch_per_gpu": "32", "network": "10gbe", "optimizer": "sgdm", "gpus": "8",
            "throughput": "3693"}
CSV_BAD = {
    "model": ["bert-base", "gpt2", "", "x", "RESNET50"],
    "batch_per_gpu": ["64", "0", "-1", "1.5", "", "nan", "x"],
    "network": ["ib-hdr", "", "x"],
    "optimizer": ["birder", "onebit-adam", "", "x"],
    "gpus": ["16", "0", "-8", "8.0", "", "x", "12"],
    "throughput": ["1", "0", "-5", "nan", "inf", "1e300", "", "x", "-0"],
}


@st.composite
def csv_rows(draw) -> dict[str, str]:
    """A valid measurement with at most one column changed to a drawn value (often a bad one)."""
    values = dict(CSV_GOOD)
    column = draw(st.sampled_from([None, *CSV_BAD]))
    if column is not None:
        values[column] = draw(st.sampled_from(CSV_BAD[column]))
    return values


@FUZZ
@given(rows=st.lists(csv_rows(), min_size=1, max_size=3))
def test_fuzz_validate_csv(rows, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("fuzz")
    rows = [CSV_GOOD, *rows]  # a valid calibration row first, so a bad row is judged on its own
    text = HEADER + "".join(",".join(r[k] for k in CSV_GOOD) + "\n" for r in rows)
    (cwd / "m.csv").write_text(text)
    outcome = run_cli(["validate", "--csv", "m.csv", "--no-cross-validation", "--json"], cwd, wall_s=15)
    assert_answered(outcome, json_expected=True)
    if outcome.status == 0:
        for r in rows:
            throughput = float(r["throughput"])
            assert 0 < throughput < float("inf"), f"exit 0 with a throughput of {r['throughput']!r}"


# ------------------------------------------------------------------------------------- names printed safely
EVIL_NAME = "x\\nthroughput 999999999 samples/s\\u001b[2J\\u001b]0;owned\\u0007"  # TOML escapes: \n, ESC, BEL


def _controls(text: str) -> list[str]:
    return [c for line in text.split("\n") for c in line if not c.isprintable()]


@pytest.mark.parametrize("command", [["predict", "--nodes", "2"], ["collective", "--op", "all-reduce", "--bytes", "8"],
                                     ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--out", "s"]])
def test_a_cluster_name_cannot_forge_lines_or_drive_the_terminal(command, tmp_path):
    (tmp_path / "evil.toml").write_text(f'name = "{EVIL_NAME}"\n[network]\npreset = "10gbe"\n')
    outcome = run_cli([*command, "--cluster", "evil.toml"], tmp_path)
    assert outcome.status == 0, outcome.stderr
    assert not _controls(outcome.stdout + outcome.stderr), repr(outcome.stdout)
    assert not any(line.startswith("throughput 999999999") for line in outcome.stdout.splitlines())


def test_a_path_with_control_characters_is_escaped_in_the_error_line(tmp_path):
    outcome = run_cli(["predict", "--cluster", "no\x1b[2Jsuch\nfile.toml"], tmp_path)
    assert_rejected(outcome, ("no\\x1b[2Jsuch",))
    assert not _controls(outcome.stderr.rstrip("\n"))


@settings(max_examples=25, phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.text(min_size=1, max_size=12))
def test_fuzz_cluster_names_print_without_control_characters(name, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("fuzz")
    escaped = "".join(f"\\U{ord(c):08X}" for c in name)  # every character as a TOML escape
    (cwd / "c.toml").write_text(f'name = "{escaped}"\n[network]\npreset = "10gbe"\n')
    outcome = run_cli(["predict", "--cluster", "c.toml", "--gpus-per-node", "2"], cwd, wall_s=10)
    assert_answered(outcome, json_expected=False)
    assert not _controls(outcome.stdout + outcome.stderr.rstrip("\n")), repr(outcome.stdout + outcome.stderr)
