"""Issue 19's retry, as a new user would: bad inputs that neither the suites (tests/test_bad_inputs_*.py) nor the
newcomer trial hold, each run through the real console script (or ``python -c`` for the Python API) in a fresh
scratch folder, with a timeout; the outcomes counted per class.

    .venv/bin/python tests/retry_new_bad_inputs.py          # prints one line per case, then the counts

Classes: hang (no answer within the timeout), traceback, writes into the package (a file of the toolkit's
packages or the checkout's sources created or changed), data loss (a file of the user's changed or removed),
injection (a file written holds keys, lines or formulas a user's string put there: the case's ``check``), wrong
exit 0 (a bad input accepted), unclear (not one line and exit 2), terminal injection (a control character
printed), leftover files (a temporary left in the scratch folder or an output folder; the manifest
``.birder-manifest`` is an output), clean. Not collected by pytest (the suites hold the fast versions of these
classes); a few minutes. ``--only PREFIX`` runs the cases whose id starts with PREFIX (``i31-``: issue 31's batch).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIRDER = str(Path(sys.executable).parent / "birder")
TIMEOUT_S = 20  # a bad input is refused before any work
VALID_TIMEOUT_S = 180  # a valid run (the name cases) may first measure the prediction intervals when not stored
SOURCES = ("birder", "birder_ref", "sim", "proofs_checks", "gpu_validation", "safeio", "tests", "examples",
           "benchmarks")
CLUSTER = '[network]\npreset = "10gbe"\n'
HEADER = "model,batch_per_gpu,network,optimizer,gpus,throughput\n"
ROWS = "resnet50,32,10gbe,sgdm,8,3693\nresnet50,32,10gbe,sgdm,16,2959\n"


@dataclass
class Case:
    id: str
    argv: list[str]  # birder's arguments; with ``python`` set, the code run by ``python -c``
    files: dict[str, str] = field(default_factory=dict)  # the user's files in the scratch folder
    setup: object = None  # callable(scratch) for links, pipes, sockets
    python: bool = False
    expect_exit: int = 2  # 0 for a valid input whose output must stay safe (names printed escaped)
    check: object = None  # callable(scratch) -> "" or what was injected into the files written
    stdout: str = "pipe"  # "closed" (>&-), "full" (/dev/full), "readonly" (1</dev/null): a write error on stdout
    env: dict = field(default_factory=dict)  # extra environment (PYTHONIOENCODING=ascii, LC_ALL=C)


def fifo(name):
    return lambda d: os.mkfifo(d / name)


def link(name, target):
    return lambda d: (d / name).symlink_to(target if str(target).startswith("/") else d / target)


def unix_socket(name):
    def make(d):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(d / name))  # left bound until the process ends: a socket file stays
        make.keep = s

    return make


def sparse(name, size):
    def make(d):
        with open(d / name, "wb") as f:
            f.truncate(size)

    return make


def api(code: str) -> list[str]:
    return ["import numpy as np\nfrom birder_ref import algorithm1, hierarchical, onebit_adam\n" + code]


NCCL = ROOT / "tests" / "fixtures" / "nccl_tests"
CALIBRATE = ["--op", "all-reduce", "--nodes", "8", "--gpus-per-node", "8", "--network", "100gbe"]
STEP = ("s = algorithm1.init(2, 4); g = np.ones((2, 4), np.float32); U = np.zeros((2, 4), np.float32); "
        "V = np.zeros(4, np.float32)\n")
CASES = [
    # outputs: the user's files and the toolkit's own
    Case("report-out-nested-user-files", ["report", "--quick", "--out", "R"],
         {"R/report.md": "x", "R/.birder-manifest": "report.md\n", "R/drafts/chapter1.tex": "mine"}),
    Case("report-out-manifest-but-extra-png", ["report", "--quick", "--out", "R"],
         {"R/report.md": "x", "R/.birder-manifest": "report.md\n", "R/holiday.png": "mine"}),
    Case("report-out-link-to-users-folder", ["report", "--quick", "--out", "L"], {"docs/notes.txt": "mine"},
         link("L", "docs")),
    Case("report-out-link-to-file", ["report", "--quick", "--out", "L"], {"notes.txt": "mine"},
         link("L", "notes.txt")),
    Case("report-out-dot", ["report", "--quick", "--out", "."], {"notes.txt": "mine"}),
    Case("report-out-under-fifo", ["report", "--quick", "--out", "p/r"], {}, fifo("p")),
    Case("report-out-venv", ["report", "--quick", "--out", str(ROOT / ".venv" / "report")]),
    Case("report-out-git", ["report", "--quick", "--out", str(ROOT / ".git" / "r")]),
    Case("bench-out-readme", ["bench", "--sizes", "64", "--repeats", "1", "--out", str(ROOT / "README.md")]),
    Case("bench-out-pyproject", ["bench", "--sizes", "64", "--repeats", "1", "--out", str(ROOT / "pyproject.toml")]),
    Case("bench-out-dotdot-into-package",
         ["bench", "--sizes", "64", "--repeats", "1", "--out", "../.." + str(ROOT / "sim" / "x.toml")]),
    Case("bench-out-link-to-preset", ["bench", "--sizes", "64", "--repeats", "1", "--out", "mine.toml"], {},
         link("mine.toml", str(ROOT / "sim" / "presets" / "gpus.toml"))),
    Case("bench-out-png-beside-is-a-fifo", ["bench", "--sizes", "64", "--repeats", "1", "--out", "p.toml"], {},
         fifo("p.png")),
    Case("collective-out-examples", ["collective", "--op", "all-gather", "--bytes", "8:64", "--out",
                                     str(ROOT / "examples")]),
    Case("collective-out-benchmarks-sub", ["collective", "--op", "broadcast", "--bytes", "8:64", "--out",
                                           str(ROOT / "benchmarks" / "new")]),
    Case("sweep-out-presets-via-link", ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--out", "L/presets"], {},
         link("L", str(ROOT / "sim"))),
    Case("validate-out-safeio", ["validate", "--no-cross-validation", "--out", str(ROOT / "safeio")]),
    Case("validate-out-dangling-link-deep", ["validate", "--no-cross-validation", "--out", "L/x"], {},
         link("L", "nowhere")),
    # inputs read with a bound
    Case("predict-cluster-stdin-pipe", ["predict", "--cluster", "/dev/stdin"]),
    Case("validate-csv-stdin-pipe", ["validate", "--csv", "/dev/stdin", "--no-cross-validation"]),
    Case("predict-cluster-link-to-fifo", ["predict", "--cluster", "c.toml"], {}, lambda d: (
        os.mkfifo(d / "p"), (d / "c.toml").symlink_to(d / "p"))),
    Case("predict-cluster-socket", ["predict", "--cluster", "s.toml"], {}, unix_socket("s.toml")),
    Case("collective-cluster-fifo", ["collective", "--op", "all-reduce", "--bytes", "8", "--cluster", "p.toml"], {},
         fifo("p.toml")),
    Case("predict-cluster-sparse-10gb", ["predict", "--cluster", "big.toml"], {}, sparse("big.toml", 10 << 30)),
    Case("validate-csv-sparse-1gb", ["validate", "--csv", "big.csv", "--no-cross-validation"], {},
         sparse("big.csv", 1 << 30)),
    Case("predict-cluster-proc-file", ["predict", "--cluster", "/proc/self/status"]),
    Case("cluster-latency-just-over-a-second", ["predict", "--cluster", "c.toml", "--nodes", "2"],
         {"c.toml": CLUSTER + "latency_us = 1000001\n"}),
    Case("cluster-message-overhead-huge", ["predict", "--cluster", "c.toml", "--nodes", "2"],
         {"c.toml": CLUSTER + "message_overhead_us = 5e6\n"}),
    Case("cluster-step-overhead-1e300", ["predict", "--cluster", "c.toml", "--nodes", "2"],
         {"c.toml": CLUSTER + "step_overhead_us = 1e300\n"}),
    Case("cluster-intra-fabric-absurd", ["predict", "--cluster", "c.toml"],
         {"c.toml": CLUSTER + "[intra]\nfabric_gbytes_per_s = 1e20\n"}),
    Case("csv-trailing-comma-header", ["validate", "--csv", "m.csv", "--no-cross-validation"],
         {"m.csv": HEADER.strip() + ",\n" + ROWS.replace("\n", ",\n")}),
    Case("csv-column-with-spaces", ["validate", "--csv", "m.csv", "--no-cross-validation"],
         {"m.csv": HEADER.replace("throughput", " throughput") + ROWS}),
    Case("csv-capitalised-duplicate", ["validate", "--csv", "m.csv", "--no-cross-validation"],
         {"m.csv": HEADER.strip() + ",Throughput\n" + ROWS.replace("\n", ",1\n")}),
    Case("csv-multi-node-without-calibration", ["validate", "--csv", "m.csv", "--no-cross-validation"],
         {"m.csv": HEADER + "resnet50,32,10gbe,sgdm,16,2959\n"}),
    Case("csv-two-calibrations-only", ["validate", "--csv", "m.csv"],
         {"m.csv": HEADER + "resnet50,32,10gbe,sgdm,8,3693\nresnet50,32,ib-hdr,sgdm,8,3700\n"}),
    # options that do not apply to the chosen optimizer
    Case("predict-adam-default-scheme-given", ["predict", "--optimizer", "adam", "--scheme", "hierarchical"]),
    Case("predict-marsit-warmup", ["predict", "--optimizer", "marsit", "--warmup-fraction", "0.2"]),
    Case("predict-onebit-adam-marsit-period", ["predict", "--optimizer", "onebit-adam", "--marsit-period", "4"]),
    Case("predict-zero-one-adam-hook", ["predict", "--optimizer", "zero-one-adam", "--hook", "blocking"]),
    Case("sweep-sgdm-only-hook", ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--hook", "blocking",
                                  "--out", "s"]),
    Case("bench-cpu-nccl-one-rank", ["bench", "--device", "cpu", "--backend", "nccl", "--ranks", "1",
                                     "--sizes", "64", "--repeats", "1"]),
    # the newer commands: calibrate's measurements and report's price file
    Case("calibrate-out-over-its-input-via-dotdot", ["calibrate", "m.txt", *CALIBRATE, "--out", "sub/../m.txt"],
         {"sub/keep": ""}, lambda d: shutil.copy(NCCL / "ib100_8x8v100_all_reduce.txt", d / "m.txt")),
    Case("calibrate-out-readme", ["calibrate", "m.txt", *CALIBRATE, "--out", str(ROOT / "README.md")], {},
         lambda d: shutil.copy(NCCL / "ib100_8x8v100_all_reduce.txt", d / "m.txt")),
    Case("calibrate-input-socket", ["calibrate", "s.txt", *CALIBRATE, "--out", "c.toml"], {}, unix_socket("s.txt")),
    Case("report-prices-stdin-pipe", ["report", "--quick", "--out", "r", "--prices", "/dev/stdin"]),
    Case("report-prices-inside-out", ["report", "--quick", "--out", "R", "--prices", "R/prices.toml"],
         {"R/prices.toml": "node = 10\n"}),
    # the Python API
    Case("api-state-m-masked", api(STEP + "s = s.__class__(np.ma.masked_array(s.m), s.b_hat, s.b, s.e, "
                                   "s.server_e, s.t)\nalgorithm1.step(s, g, u_worker=U, u_server=V)"), python=True),
    Case("api-hier-u-server-matrix", api("s = hierarchical.init(2, 2, 4)\nhierarchical.step(s, np.ones((2, 2, 4), "
                                         "np.float32), u_worker=np.zeros((2, 4), np.float32), "
                                         "u_server=np.zeros((1, 4), np.float32).view(np.matrix))"), python=True),
    Case("api-onebit-buffers-masked", api("b = np.ma.masked_array(np.ones((2, 16), np.float32))\n"
                                          "onebit_adam.compressed_allreduce(b, np.zeros((2, 16), np.float32), "
                                          "np.zeros((2, 8), np.float32))"), python=True),
    Case("api-u-worker-masked", api(STEP + "algorithm1.step(s, g, u_worker=np.ma.masked_array(U), u_server=V)"),
         python=True),
    # names printed safely (valid inputs: exit 0, nothing raw on the terminal)
    Case("name-carriage-return", ["predict", "--cluster", "c.toml"],
         {"c.toml": 'name = "ok\\rthroughput 999999999"\n' + CLUSTER}, expect_exit=0),
    Case("name-c1-csi", ["collective", "--op", "all-reduce", "--bytes", "8", "--cluster", "c.toml"],
         {"c.toml": 'name = "x\\u009b2J"\n' + CLUSTER}, expect_exit=0),
    Case("name-bell-and-title", ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--cluster", "c.toml",
                                 "--out", "s"], {"c.toml": 'name = "\\u001b]0;pwned\\u0007"\n' + CLUSTER},
         expect_exit=0),
    Case("out-path-with-escape", ["collective", "--op", "all-reduce", "--bytes", "8:16", "--out", "o\x1b[31mred"],
         expect_exit=0),
    Case("missing-csv-with-escape", ["validate", "--csv", "\x1b[2Jgone.csv"]),
]


# Issue 31's batch: outputs under the one rule, names that would inject into files, numbers outside physical and
# monetary ranges, write errors, and the API's byte orders and 0-d coefficients.
def toml_written(name: str, top: set[str], cluster_name: str | None = None):
    """A check: the TOML ``name`` written holds exactly the keys ``top`` (and the cluster name given)."""
    def check(scratch: Path) -> str:
        import tomllib

        path = scratch / name
        if not path.is_file():
            return ""
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            return "unreadable TOML"
        wrong_name = cluster_name is not None and data.get("name") != cluster_name
        return "keys or name changed" if set(data) != top or wrong_name else ""

    return check


def csv_safe(name: str):
    """A check: every row of the CSV ``name`` has the header's columns, and no cell starts like a formula."""
    def check(scratch: Path) -> str:
        import csv

        path = scratch / name
        if not path.is_file():
            return ""
        rows = list(csv.reader(path.open(encoding="utf-8")))
        if any(len(r) != len(rows[0]) for r in rows):
            return "columns"
        for cell in (c for r in rows for c in r):
            try:
                float(cell)
            except ValueError:
                if cell[:1] in ("=", "+", "-", "@"):
                    return "formula"
        return ""

    return check


def copy_nccl(name: str = "m.txt"):
    return lambda d: shutil.copy(NCCL / "ib100_8x8v100_all_reduce.txt", d / name)


def earlier_sweep(folder: str):
    """An earlier `birder sweep` into ``folder`` (its manifest lists what it wrote)."""
    def make(d):
        subprocess.run([BIRDER, "sweep", "--nodes", "1", "--optimizers", "sgdm", "--networks", "10gbe", "--out",
                        str(d / folder), "--quiet"], check=True, capture_output=True, timeout=VALID_TIMEOUT_S)

    return make


CAL_TOP = {"name", "nodes", "gpus_per_node", "gpu", "network"}
NAME_CLUSTER = 'name = "{}"\n[network]\npreset = "10gbe"\n'
SWEEP1 = ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--quiet"]
CASES += [
    # outputs: never over a file birder did not write
    Case("i31-calibrate-out-link-to-users-file", ["calibrate", "m.txt", *CALIBRATE, "--out", "L.toml"],
         {"mine.toml": "# mine\n"}, lambda d: (copy_nccl()(d), (d / "L.toml").symlink_to(d / "mine.toml"))),
    Case("i31-calibrate-manifest-is-a-link", ["calibrate", "m.txt", *CALIBRATE, "--out", "mine.toml"],
         {"mine.toml": "# mine\n", "elsewhere": "x  mine.toml\n"},
         lambda d: (copy_nccl()(d), (d / ".birder-manifest").symlink_to(d / "elsewhere"))),
    Case("i31-calibrate-edited-same-size", ["calibrate", "m.txt", *CALIBRATE, "--out", "c.toml"], {},
         lambda d: (copy_nccl()(d), subprocess.run([BIRDER, "calibrate", str(d / "m.txt"), *CALIBRATE, "--out",
                                                    str(d / "c.toml")], capture_output=True, timeout=120),
                    (d / "c.toml").write_text((d / "c.toml").read_text().replace("8", "9", 1)))),
    Case("i31-sweep-out-users-plot-only", [*SWEEP1, "--out", "S"], {"S/time_breakdown.png": "my figure"}),
    Case("i31-sweep-csv-is-a-link", [*SWEEP1, "--out", "S"], {"mine.csv": "a,b\n"},
         lambda d: ((d / "S").mkdir(), (d / "S" / "sweep.csv").symlink_to(d / "mine.csv"))),
    Case("i31-collective-csv-is-a-folder", ["collective", "--op", "all-reduce", "--bytes", "8:16", "--out", "C"],
         {"C/collective.csv/keep": "x"}),
    Case("i31-validate-out-users-corpus-plot", ["validate", "--no-cross-validation", "--out", "V"],
         {"V/corpus_left_out.png": "mine"}),
    Case("i31-bench-png-beside-is-users", ["bench", "--sizes", "64", "--repeats", "1", "--out", "p.toml"],
         {"p.png": "my picture"}),
    Case("i31-sweep-again-keeps-users-notes", [*SWEEP1, "--networks", "10gbe", "--out", "S"], {"S/notes.txt": "mine"},
         earlier_sweep("S"), expect_exit=0),
    # names that would add keys, lines or formulas to a file
    Case("i31-calibrate-name-line-separator", ["calibrate", "m.txt", *CALIBRATE, "--out", "c.toml", "--name",
                                               "a\u2028gpu = 'h100'"], {}, copy_nccl()),
    Case("i31-calibrate-input-path-with-newline", ["calibrate", "m\nname = 'x'.txt", *CALIBRATE, "--out", "c.toml"],
         {}, copy_nccl("m\nname = 'x'.txt"), expect_exit=0, check=toml_written("c.toml", CAL_TOP, "c")),
    Case("i31-calibrate-name-quotes-backslash", ["calibrate", "m.txt", *CALIBRATE, "--out", "c.toml", "--name",
                                                 'a\\" = 1 #"""'], {}, copy_nccl(), expect_exit=0,
         check=toml_written("c.toml", CAL_TOP, 'a\\" = 1 #"""')),
    Case("i31-sweep-cluster-name-formula", [*SWEEP1, "--cluster", "c.toml", "--out", "S"],
         {"c.toml": NAME_CLUSTER.format('=HYPERLINK(\\"http://x\\")')}, expect_exit=0, check=csv_safe("S/sweep.csv")),
    Case("i31-sweep-cluster-name-comma-quote", [*SWEEP1, "--cluster", "c.toml", "--out", "S"],
         {"c.toml": NAME_CLUSTER.format('a,\\"b\\",c')}, expect_exit=0, check=csv_safe("S/sweep.csv")),
    Case("i31-prices-currency-tab", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": 'node = 10\ncurrency = "US\\tD"\n'}),
    Case("i31-prices-currency-spaces", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": 'node = 10\ncurrency = "   "\n'}),
    # numbers outside physical and monetary ranges
    Case("i31-prices-node-just-above", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": "node = 1000000000001\n"}),
    Case("i31-prices-node-below-finest", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": "node = 0.00005\n"}),
    Case("i31-prices-nic-inf", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": "node = 10\n[nic]\n10gbe = inf\n"}),
    Case("i31-prices-port-nan", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": "node = 10\n[switch_port]\n10gbe = nan\n"}),
    Case("i31-cluster-efficiency-under-1pc", ["predict", "--cluster", "c.toml"],
         {"c.toml": CLUSTER + "efficiency = 0.0099\n"}),
    Case("i31-cluster-switch-buffer-half-byte", ["predict", "--cluster", "c.toml"],
         {"c.toml": CLUSTER + "switch_buffer_bytes = 0.5\n"}),
    Case("i31-cluster-intra-fabric-1e-7", ["predict", "--cluster", "c.toml"],
         {"c.toml": CLUSTER + "[intra]\nfabric_gbytes_per_s = 1e-7\n"}),
    Case("i31-cluster-buffer-alpha-1000", ["predict", "--cluster", "c.toml"],
         {"c.toml": CLUSTER + "buffer_alpha = 1000\n"}),
    Case("i31-cluster-per-flow-1e6", ["predict", "--cluster", "c.toml"], {"c.toml": CLUSTER + "per_flow_gbps = 1e6\n"}),
    Case("i31-cluster-gpus-1e30-overridden", ["predict", "--cluster", "c.toml", "--gpus-per-node", "8"],
         {"c.toml": "gpus_per_node = 1000000000000000000000000000000\n" + CLUSTER}),
    Case("i31-predict-single-node-1e308", ["predict", "--nodes", "2", "--single-node-throughput", "1e308"]),
    Case("i31-collective-bytes-1e30", ["collective", "--op", "all-reduce", "--bytes", "1" + "0" * 30]),
    Case("i31-calibrate-line-rate-1e308", ["calibrate", "m.txt", "--op", "all-reduce", "--nodes", "8",
                                           "--gpus-per-node", "8", "--transport", "socket", "--line-rate-gbps",
                                           "1e308", "--out", "c.toml"], {}, copy_nccl()),
    Case("i31-predict-measured-1e-300", ["predict", "--network", "100gbe", "--measured-gbps", "1e-300"]),
    Case("i31-sweep-single-node-1e-300", [*SWEEP1, "--networks", "10gbe", "--single-node-throughput", "sgdm=1e-300",
                                          "--out", "S"]),
    Case("i31-gpu-validate-steps-1e30", ["gpu-validate", "--steps", "1000000000000000000000000000000"]),
    Case("i31-bench-repeats-1e30", ["bench", "--sizes", "64", "--repeats", "1000000000000000000000000000000"]),
    # write errors: the standard output closed or full, an ASCII-only terminal, a device as the output
    Case("i31-predict-stdout-closed", ["predict", "--nodes", "2"], stdout="closed"),
    Case("i31-collective-json-stdout-full", ["collective", "--op", "all-reduce", "--bytes", "8", "--json"],
         stdout="full"),
    Case("i31-calibrate-out-dev-full", ["calibrate", "m.txt", *CALIBRATE, "--out", "/dev/full"], {}, copy_nccl()),
    Case("i31-predict-ascii-terminal", ["predict", "--cluster", "c.toml"], {"c.toml": NAME_CLUSTER.format("Zürich")},
         env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}, expect_exit=0),
    Case("i31-calibrate-non-ascii-name-c-locale", ["calibrate", "m.txt", *CALIBRATE, "--out", "c.toml", "--name",
                                                   "Zürich"], {}, copy_nccl(),
         env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}, expect_exit=0,
         check=toml_written("c.toml", CAL_TOP, "Zürich")),
    # the Python API: other byte orders and 0-d coefficients accepted, wrong dtypes and shapes still refused
    Case("i31-api-beta-numpy-float32-scalar", api(STEP + "algorithm1.step(s, g, beta=np.float32(0.9), u_worker=U, "
                                                  "u_server=V)"), python=True, expect_exit=0),
    Case("i31-api-grads-little-endian-float64", api(STEP + "algorithm1.step(s, g.astype('<f8'), u_worker=U, "
                                                    "u_server=V)"), python=True),
    Case("i31-api-quantize-u-big-endian-float64", api("from birder_ref import quantize\nquantize(np.zeros(4, "
                                                      "np.float32), np.zeros(4, '>f8'))"), python=True),
    Case("i31-api-hier-T0-1d", api("s = hierarchical.init(2, 2, 4)\nhierarchical.step(s, np.ones((2, 2, 4), "
                                   "np.float32), u_worker=np.zeros((2, 4), np.float32), u_server=np.zeros(4, "
                                   "np.float32), T0=np.array([1]))"), python=True),
    Case("i31-api-onebit-big-endian", api("b = np.ones((2, 16), '>f4')\nout = onebit_adam.compressed_allreduce(b, "
                                          "np.zeros((2, 16), '>f4'), np.zeros((2, 8), '>f4'))\n"
                                          "assert out[0].dtype == np.float32"), python=True, expect_exit=0),
    Case("i31-api-train-lr-0d", api("from birder_ref import driver\nfrom birder_ref.optimizers import SGDM\n"
                                    "from birder_ref.schedules import Layout\n"
                                    "driver.train(driver.figure8(), SGDM(), Layout(1, 2), 3, np.array(0.1))"),
         python=True, expect_exit=0),
]


def two_sweeps_at_once(folder: str):
    """A second sweep into ``folder`` running while the case's own runs (a concurrent writer of one manifest)."""
    def make(d):
        make.process = subprocess.Popen([BIRDER, *SWEEP1, "--networks", "ib-hdr", "--out", str(d / folder)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    return make


def manifest_lists(folder: str, *names: str):
    """A check: after the runs, the manifest in ``folder`` lists every one of ``names`` (none lost to a race)."""
    def check(scratch: Path) -> str:
        for _ in range(600):  # the other sweep may still be running
            process = getattr(two_sweeps_at_once, "process", None)
            if process is None or process.poll() is not None:
                break
            time.sleep(0.5)
        text = (scratch / folder / ".birder-manifest").read_text() if (scratch / folder / ".birder-manifest"
                                                                         ).is_file() else ""
        return "" if all(f"  {n}" in text for n in names) else "manifest entries lost"

    return check


# A second batch of issue 31, written after the first came back clean: the manifest itself, names that would
# forge manifest lines, concurrent writers, state arrays in the other byte order, other NumPy scalar types.
CASES += [
    Case("i31b-calibrate-out-is-the-manifest", ["calibrate", "m.txt", *CALIBRATE, "--out", ".birder-manifest"],
         {}, copy_nccl()),
    Case("i31b-manifest-is-a-folder", ["calibrate", "m.txt", *CALIBRATE, "--out", "c.toml"],
         {".birder-manifest/keep": "x"}, copy_nccl()),
    Case("i31b-out-name-forges-a-manifest-line", ["calibrate", "m.txt", *CALIBRATE, "--out",
                                                  "x\n" + "0" * 64 + "  victim.toml"],
         {"victim.toml": "# mine\n"}, copy_nccl()),
    Case("i31b-manifest-too-large", ["calibrate", "m.txt", *CALIBRATE, "--out", "c.toml"],
         {"c.toml": "# mine\n", ".birder-manifest": "c.toml\n" + "#" * (2 << 20)}, copy_nccl()),
    Case("i31b-two-sweeps-one-folder", [*SWEEP1, "--networks", "10gbe", "--out", "S"], {}, two_sweeps_at_once("S"),
         expect_exit=0, check=manifest_lists("S", "sweep.csv", "time_breakdown.png")),
    Case("i31b-sweep-out-read-only-folder", [*SWEEP1, "--networks", "10gbe", "--out", "ro"], {"ro/keep": "x"},
         lambda d: (d / "ro").chmod(0o555), expect_exit=0 if os.geteuid() == 0 else 2),  # root writes there
    Case("i31b-stdout-read-only-descriptor", ["predict", "--nodes", "2"], stdout="readonly"),
    Case("i31b-missing-non-ascii-file-ascii-terminal", ["predict", "--cluster", "Zürich.toml"],
         env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}),
    Case("i31b-sweep-stdout-closed-writes-nothing", [*SWEEP1, "--networks", "10gbe", "--out", "S"], stdout="closed"),
    Case("i31b-prices-currency-number", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": "node = 10\ncurrency = 840\n"}),
    Case("i31b-prices-node-bool", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": "node = true\n"}),
    Case("i31b-prices-node-int-beyond-64-bits", ["report", "--quick", "--out", "R", "--prices", "p.toml"],
         {"p.toml": "node = 99999999999999999999\n"}),
    Case("i31b-cluster-incast-certain-below-onset", ["predict", "--cluster", "c.toml"],
         {"c.toml": CLUSTER + "incast_onset_bytes = 1e6\nincast_certain_bytes = 2\n"}),
    Case("i31b-api-state-big-endian", api(STEP + "s = s.__class__(*(x.astype('>f4') for x in (s.m, s.b_hat, s.b, "
                                          "s.e, s.server_e)), s.t)\nu, s2 = algorithm1.step(s, g, u_worker=U, "
                                          "u_server=V)\nassert s2.m.dtype == np.float32"),
         python=True, expect_exit=0),
    Case("i31b-api-beta-longdouble-0d", api(STEP + "u, s2 = algorithm1.step(s, g, beta=np.array(0.9, np.longdouble), "
                                            "u_worker=U, u_server=V)\nassert u.dtype == np.float32 and "
                                            "s2.m.dtype == np.float32, (u.dtype, s2.m.dtype)"),
         python=True, expect_exit=0),
    Case("i31b-api-eps-complex-0d", api(STEP + "algorithm1.step(s, g, eps=np.array(1e-8 + 0j), u_worker=U, "
                                        "u_server=V)"), python=True),
    Case("i31b-api-grads-big-endian-fortran", api(STEP + "gb = np.asfortranarray(g.astype('>f4'))\n"
                                                  "u, s2 = algorithm1.step(s, gb, u_worker=U, u_server=V)\n"
                                                  "assert s2.m.dtype == np.float32"), python=True, expect_exit=0),
    Case("i31b-api-T0-numpy-bool-0d", api(STEP + "algorithm1.step(s, g, T0=np.array(True), u_worker=U, "
                                          "u_server=V)"), python=True),
    Case("i31b-api-lr-0d-object", api("from birder_ref import driver\nfrom birder_ref.optimizers import SGDM\n"
                                      "from birder_ref.schedules import Layout\ndriver.train(driver.figure8(), "
                                      "SGDM(), Layout(1, 2), 3, np.array('0.1', dtype=object))"), python=True),
]


def fingerprint(roots) -> dict[str, tuple[int, str]]:
    """path -> (size, SHA-1) of every file (large ones: size and mtime; a sparse 10 GB file is not read)."""
    state = {}
    for root in roots:
        root = Path(root)
        paths = [root] if root.is_file() else (p for p in root.rglob("*") if "__pycache__" not in p.parts)
        for p in paths:
            if p.is_file() and not p.is_symlink():
                info = p.stat()
                digest = hashlib.sha1(p.read_bytes()).hexdigest() if info.st_size < 1 << 20 else str(info.st_mtime_ns)
                state[str(p)] = (info.st_size, digest)
    return state


def package_roots() -> list[Path]:
    return [ROOT / name for name in SOURCES] + [ROOT / n for n in ("README.md", "pyproject.toml", "Makefile")]


def controls(text: str) -> bool:
    return any(not c.isprintable() for line in text.split("\n") for c in line)


def run(case: Case) -> str:
    scratch = Path(tempfile.mkdtemp(prefix="retry-"))
    try:
        for name, text in case.files.items():
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            (scratch / name).write_text(text)
        if case.setup:
            case.setup(scratch)
        users = fingerprint([scratch])
        package = fingerprint(package_roots())
        command = [sys.executable, "-c", case.argv[0]] if case.python else [BIRDER, *case.argv]
        stdout = {"pipe": subprocess.PIPE, "full": "/dev/full", "readonly": "/dev/null"}.get(case.stdout)
        if case.stdout in ("full", "readonly"):  # a full device, or a descriptor open for reading only
            stdout = open(stdout, "w" if case.stdout == "full" else "r")  # noqa: SIM115
        process = subprocess.Popen(command, cwd=scratch, stdin=subprocess.PIPE, stdout=stdout,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True,
                                   env={**os.environ, **case.env},
                                   preexec_fn=(lambda: os.close(1)) if case.stdout == "closed" else None)
        if case.stdout in ("full", "readonly"):
            stdout.close()
        try:  # stdin stays open with no writer: /dev/stdin is a pipe that never ends
            out, err = process.communicate(timeout=TIMEOUT_S if case.expect_exit == 2 else VALID_TIMEOUT_S)
            out = out or ""
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return "hang"
        last = (err.strip().splitlines() or [""])[-1]
        if case.python and case.expect_exit == 0:  # a valid call the API must accept
            return "clean" if process.returncode == 0 else f"refused: {last[:80]}"
        if case.python:  # the API's answer to bad input is a ValueError (its traceback is Python's way to show it)
            if process.returncode == 0:
                return "wrong exit 0"
            if not last.startswith("ValueError"):
                return "traceback"
        elif "Traceback" in err:
            return "traceback"
        if fingerprint(package_roots()) != package:
            return "writes into the package"
        after = fingerprint([scratch])
        if any(after.get(path) != state for path, state in users.items()):
            return "data loss"
        if case.python:
            return "terminal injection" if controls(last) else "clean"
        if controls(out) or controls(err.rstrip("\n")):
            return "terminal injection"
        if process.returncode == 0 and case.expect_exit == 2:
            return "wrong exit 0"
        if case.check and case.check(scratch):
            return "injection"
        if process.returncode != case.expect_exit or (case.expect_exit == 2 and len(err.strip().splitlines()) != 1):
            return "unclear"
        leftovers = [str(p.relative_to(scratch)) for p in scratch.rglob(".*") if p.name != ".birder-manifest"
                     and not (p.is_relative_to(scratch / ".cache"))]
        return "leftover files" if leftovers else "clean"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def killed_report_leaves_nothing() -> str:
    """SIGKILL during `report`, then SIGTERM during the next one: no temporary folder of either is left."""
    scratch = Path(tempfile.mkdtemp(prefix="retry-"))
    try:
        for sig in (signal.SIGKILL, signal.SIGTERM):
            p = subprocess.Popen([BIRDER, "report", "--quick", "--out", "R"], cwd=scratch, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(x.name.startswith(f".R.{p.pid}.")  # its own temporary
                                                          for x in scratch.iterdir()):
                time.sleep(0.1)
            time.sleep(1.0)
            p.send_signal(sig)
            p.wait(timeout=60)
        left = sorted(x.name for x in scratch.iterdir())
        return "clean" if left == [] else f"left {left}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report_leaves_only_its_folder() -> str:
    """A whole `report --quick` run: the working folder holds the report folder and nothing else (.hypothesis)."""
    scratch = Path(tempfile.mkdtemp(prefix="retry-"))
    try:
        try:
            done = subprocess.run([BIRDER, "report", "--quick", "--out", "R"], cwd=scratch, capture_output=True,
                                  text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return "hang"
        left = sorted(x.name for x in scratch.iterdir())
        if done.returncode != 0:
            return "unclear"
        try:  # an earlier report is replaced
            rerun = subprocess.run([BIRDER, "report", "--quick", "--out", "R"], cwd=scratch, capture_output=True,
                                   text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return "hang"
        return "clean" if left == ["R"] and rerun.returncode == 0 else f"left {left} / rerun {rerun.returncode}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    counts: Counter[str] = Counter()
    for case in CASES:
        if not case.id.startswith(only):
            continue
        verdict = run(case)
        counts[verdict] += 1
        print(f"{verdict:24} {case.id}", flush=True)
    for name, check in (("killed-report-leftovers", killed_report_leaves_nothing),
                        ("report-working-folder", report_leaves_only_its_folder)):
        if only:
            break
        verdict = check()
        counts[verdict] += 1
        print(f"{verdict:24} {name}", flush=True)
    classes = ("data loss", "injection", "writes into the package", "hang", "traceback", "wrong exit 0", "unclear",
               "terminal injection", "leftover files", "clean")
    print("; ".join(f"{c}: {counts.get(c, 0)}" for c in classes)
          + "".join(f"; {k}: {v}" for k, v in counts.items() if k not in classes)
          + f"; total {sum(counts.values())}")
    return 0 if counts["clean"] == sum(counts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
