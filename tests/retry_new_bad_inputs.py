"""Issue 19's retry, as a new user would: bad inputs that neither the suites (tests/test_bad_inputs_*.py) nor the
newcomer trial hold, each run through the real console script (or ``python -c`` for the Python API) in a fresh
scratch folder, with a timeout; the outcomes counted per class.

    .venv/bin/python tests/retry_new_bad_inputs.py          # prints one line per case, then the counts

Classes: hang (no answer within the timeout), traceback, writes into the package (a file of the toolkit's
packages or the checkout's sources created or changed), data loss (a file of the user's changed or removed),
wrong exit 0 (a bad input accepted), unclear (not one line and exit 2), terminal injection (a control character
printed), clean. Not collected by pytest (the suites hold the fast versions of these classes); about two minutes.
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
TIMEOUT_S = 20
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
        process = subprocess.Popen(command, cwd=scratch, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:  # stdin stays open with no writer: /dev/stdin is a pipe that never ends
            out, err = process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return "hang"
        last = (err.strip().splitlines() or [""])[-1]
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
        if process.returncode != case.expect_exit or (case.expect_exit == 2 and len(err.strip().splitlines()) != 1):
            return "unclear"
        leftovers = [p.name for p in scratch.iterdir() if p.name.startswith(".")]
        return f"left {leftovers}" if leftovers else "clean"
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
        done = subprocess.run([BIRDER, "report", "--quick", "--out", "R"], cwd=scratch, capture_output=True,
                              text=True, timeout=300)
        left = sorted(x.name for x in scratch.iterdir())
        if done.returncode != 0:
            return "unclear"
        rerun = subprocess.run([BIRDER, "report", "--quick", "--out", "R"], cwd=scratch, capture_output=True,
                               text=True, timeout=300)  # an earlier report is replaced
        return "clean" if left == ["R"] and rerun.returncode == 0 else f"left {left} / rerun {rerun.returncode}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    counts: Counter[str] = Counter()
    for case in CASES:
        verdict = run(case)
        counts[verdict] += 1
        print(f"{verdict:24} {case.id}", flush=True)
    for name, check in (("killed-report-leftovers", killed_report_leaves_nothing),
                        ("report-working-folder", report_leaves_only_its_folder)):
        verdict = check()
        counts[verdict] += 1
        print(f"{verdict:24} {name}", flush=True)
    classes = ("data loss", "writes into the package", "hang", "traceback", "wrong exit 0", "unclear",
               "terminal injection", "clean")
    print("; ".join(f"{c}: {counts.get(c, 0)}" for c in classes)
          + "".join(f"; {k}: {v}" for k, v in counts.items() if k not in classes)
          + f"; total {sum(counts.values())}")
    return 0 if counts["clean"] == sum(counts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
