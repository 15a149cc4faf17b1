"""`birder check`: the property suite against birder_ref.algorithm1 or a plugged-in implementation.

The implementation is imported and driven in a child process (``proofs_checks.isolated``) with a time limit per
check, so the verdict can be trusted in CI: an implementation that exits, raises at import, hangs, ends its
process or prints to stdout gives exit status 2 and one line on stderr, never 0; with ``--json`` stdout stays one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from proofs_checks.runner import Report, Result, table
from proofs_checks.runner import select as select_checks
from proofs_checks.target import DEFAULT_IMPL
from safeio.text import printable, printable_lines

TEMPLATE = Path(__file__).with_name("template.py")
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_IMPORT_TIMEOUT_S = 20.0  # importing an implementation (and this suite) in the child: far below a check's limit
MAX_TIMEOUT_S = 86400.0  # a day: longer limits are a typo (1e308 would overflow select's timeout)
EXIT_GRACE_S = 30.0  # after the last check, how long the child may take to exit before it is stopped
SCAN_EVERY_S = 0.5  # how often the processes the implementation started are looked up while it runs
INTERFACE_HELP = """\
The interface (arrays are float32 NumPy arrays, or anything numpy.asarray reads, e.g. CPU/CUDA tensors):

  quantize(y, u) -> q         Eq. 5 with the draw injected: +1 where u < (clip(y, -1, 1) + 1) / 2, else -1
                              (any mapping of draws with P(+1) = (y + 1)/2 is accepted); u in [0, 1)
  init(n_workers, dim) -> state
                              fields m, b_hat, b, e (n, d) and server_e (d,) all zero, t = 0 (attributes or keys)
  step(state, grads, beta, eps, u_worker, u_server, T0=None) -> (u_bar, new_state)
                              Algorithm 1 lines 5-13, in this order, in float32:
                                t = t + 1
                                m = beta * m + (1 - beta) * g
                                b_hat = beta * b_hat + (1 - beta) * abs(g)
                                b = maximum(b, b_hat) if T0 is not None and t > T0 else b_hat
                                r = m / (b + eps);  y = r + e;  u = quantize(y, u_worker);  e = y - u
                                z = mean over workers of u + server_e
                                u_bar = quantize(z, u_server);  server_e = z - u_bar
                              grads, u_worker (n, d); u_server, u_bar (d,); the given state is left unchanged
                              and what step returns is never overwritten by a later call; inputs may be
                              strided, sliced, Fortran-ordered or read-only; positional and keyword calls agree;
                              several states may be alive at once; eps down to the smallest normal float32;
                              beta and eps Python or NumPy floats, T0 a Python or NumPy integer; a call gives
                              the same answer whatever was called before (no memo by object or by shape)

Paper claims (kind "paper") are the paper's equations, lemmas and Theorem 1; contract clauses (kind "contract")
are the interface's own rules: float32 dtypes, shapes, purity, no aliasing, r = m / (b + eps), |m| <= b in float32
(m and b with the same operations in the same order). `birder check --template` prints a minimal correct
implementation to copy. Each check has a severity: "error" (the algorithm is wrong) or "warning" (the interface's
robustness only: an input layout refused, an overflow only where |m| + |g| reaches 2^127). Exit status: 0 no error
(warnings are shown, and fail only under --strict), 1 a check of severity error fails (a wrong value, dtype or
shape, a t that never advances, a step that raises), 2 the implementation cannot be judged (it cannot be imported,
exits, raises at import, hangs past --import-timeout or --timeout, prints to stdout, lacks the interface). The
implementation runs in its own session; every process it started and left running is ended (and named on stderr)
before the verdict.
"""


class Unjudgeable(Exception):
    """The implementation cannot be judged; ``results`` holds the checks that finished before."""

    def __init__(self, message: str, results: list[Result], target: str, ended: list[int] = ()):
        super().__init__(message)
        self.results, self.target, self.ended = results, target, list(ended)


def _child_env() -> dict:
    """The environment of the child: this package's folder first on PYTHONPATH, so it imports this proofs_checks."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    return env


def _first_line(path: str, limit: int = 120) -> tuple[int, str]:
    data = Path(path).read_bytes()
    line = data.decode("utf-8", "replace").strip().splitlines()[0] if data.strip() else ""
    return len(data), (line[:limit] + "...") if len(line) > limit else line


def _process_table() -> dict[int, tuple[int, int, int, int]]:
    """Every process on this machine as pid -> (parent pid, process group, session, start time), read from /proc;
    empty where there is no /proc."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):  # it ended meanwhile
            continue
        table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    return table


class ProcessTracker:
    """The processes the implementation's child process started, and theirs: the child's process group and
    session, and every descendant seen while it ran (so one that left the group with setsid is known too)."""

    def __init__(self, root: int):
        self.root, self.seen = root, {}  # pid -> start time (a pid reused later by another process is left alone)

    def scan(self) -> None:
        table = _process_table()
        family = {self.root}
        for pid, (ppid, group, session, started) in sorted(table.items(), key=lambda item: item[1][3]):
            if pid != self.root and (ppid in family or group == self.root or session == self.root):
                family.add(pid)
                self.seen.setdefault(pid, started)

    def adopt(self, descendants: dict[str, int]) -> None:
        """Processes the child itself found it had started (pid -> start time, ``isolated._descendants``)."""
        for pid, started in descendants.items():
            if int(pid) != self.root:
                self.seen.setdefault(int(pid), started)

    def end_all(self) -> list[int]:
        """Kill every tracked process still running (the group and session once more included); their pids."""
        self.scan()
        try:
            os.killpg(self.root, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        table, ended = _process_table(), []
        for pid, started in self.seen.items():
            if pid in table and table[pid][3] == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                    ended.append(pid)
                except (ProcessLookupError, PermissionError):
                    pass
        return sorted(ended)


def _stop(process: subprocess.Popen) -> None:
    """Kill the child and anything it started (it runs in its own process group, which this command created)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


def run_isolated(impl: str | None, names: list[str] | None, parity: bool, timeout: float, quiet: bool,
                 import_timeout: float = DEFAULT_IMPORT_TIMEOUT_S) -> Report:
    """Run the checks in a child process; raise Unjudgeable when the implementation cannot be judged. The child
    has ``import_timeout`` seconds to import the implementation and ``timeout`` seconds for each check."""
    options = {"impl": impl, "only": names, "parity": parity}
    total = len(select_checks(names, parity))
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryDirectory(prefix="birder-check-") as scratch:
        out_path, err_path = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "proofs_checks.isolated", str(write_fd), json.dumps(options)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(write_fd,), env=_child_env(),
                start_new_session=True)
        os.close(write_fd)
        tracker = ProcessTracker(process.pid)
        started = time.perf_counter()
        results, target, current, error, done = [], impl or DEFAULT_IMPL, None, None, False
        buffer = b""
        bar = tqdm(total=total, desc="birder check", unit="check", disable=True if quiet else None)
        try:
            with os.fdopen(read_fd, "rb", buffering=0) as channel:
                deadline, loaded = time.monotonic() + import_timeout, False
                while not done and error is None:
                    wait = max(0.0, deadline - time.monotonic())
                    ready, _, _ = select.select([channel], [], [], min(wait, SCAN_EVERY_S))
                    tracker.scan()
                    if not ready and time.monotonic() < deadline:
                        continue
                    if not ready:
                        if not loaded:
                            error = (f"importing the implementation did not finish within {import_timeout:g} s: its "
                                     "import hangs or is too slow (raise the limit with --import-timeout)")
                        else:
                            what = f"check {current}" if current else "the checks"
                            error = (f"{what} did not finish within {timeout:g} s: the implementation hangs or is "
                                     "too slow (raise the limit with --timeout)")
                        break
                    chunk = channel.read(65536)
                    if not chunk:
                        break
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        message = json.loads(line)
                        event = message["event"]
                        tracker.adopt(message.get("descendants", {}))
                        if event == "loaded":
                            target, loaded = message["target"], True
                            deadline = time.monotonic() + timeout
                        elif event == "start":
                            current = message["name"]
                            deadline = time.monotonic() + timeout
                        elif event == "result":
                            results.append(Result(**message["result"]))
                            current = None
                            bar.update(1)
                        elif event == "error":
                            error = message["message"]
                        elif event == "done":
                            done, seconds = True, round(time.perf_counter() - started, 2)
        finally:
            bar.close()
            if process.poll() is None and not done:
                _stop(process)
        try:
            code = process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:  # done, but a thread the implementation started keeps it alive
            _stop(process)
            code = process.returncode
        ended = tracker.end_all()  # processes the implementation started and left running
        if ended:
            shown = ", ".join(map(str, ended[:10])) + (f" and {len(ended) - 10} more" if len(ended) > 10 else "")
            print(f"birder check: ended {len(ended)} process{'es' if len(ended) > 1 else ''} the implementation "
                  f"started and left running (pid {shown})", file=sys.stderr)
        if error is None and not done:
            where = f"during check {current}" if current else "while importing the implementation"
            tail = Path(err_path).read_text("utf-8", "replace").strip().splitlines()
            error = (f"the checking process ended {where} (exit status {code}): the implementation ended it"
                     + (f"; its last words: {tail[-1][:160]}" if tail else ""))
        if error is None:
            size, first = _first_line(out_path)
            if size:
                error = (f"the implementation printed {size} bytes to stdout (first line: {first!r}): the verdict "
                         "is withheld, as output it does not control could be taken for the verdict; print to "
                         "stderr instead")
        if error is not None:
            raise Unjudgeable(error, results, target, ended)
        return Report(target, results, seconds, processes_ended=tuple(ended))


def _parse_only(only: str | None) -> list[str] | None:
    if only is None:
        return None
    names = [n.strip() for n in only.split(",") if n.strip()]
    if not names:
        raise ValueError("--only needs at least one check name (NAME[,NAME])")
    return names


def run(args: argparse.Namespace) -> int:
    if args.template:
        given = [flag for flag, value in (("--impl", args.impl), ("--only", args.only), ("--parity", args.parity),
                                          ("--json", args.json), ("--strict", args.strict),
                                          ("--timeout", args.timeout != DEFAULT_TIMEOUT_S),
                                          ("--import-timeout", args.import_timeout != DEFAULT_IMPORT_TIMEOUT_S))
                 if value not in (None, False)]
        if given:
            raise ValueError(f"--template prints the template and runs no check: drop {', '.join(given)}")
        print(TEMPLATE.read_text(), end="")
        return 0
    for flag, value in (("--timeout", args.timeout), ("--import-timeout", args.import_timeout)):
        if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
            raise ValueError(f"{flag} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} (a day), "
                             f"got {value:g}")
    names = _parse_only(args.only)
    select_checks(names, args.parity)  # an unknown name: ValueError, one line, exit 2
    quiet = bool(getattr(args, "quiet", False))
    try:
        report = run_isolated(args.impl, names, args.parity, args.timeout, quiet, args.import_timeout)
    except Unjudgeable as stopped:
        if args.json:
            print(json.dumps({"passed": False, "error": str(stopped), "impl": stopped.target,
                              "processes_ended": stopped.ended,
                              "checks": Report(stopped.target, stopped.results, 0.0).to_json()["checks"]}))
        said = " ".join(str(stopped).split())
        line = said if said.startswith("--impl") else f"--impl {stopped.target}: {said}"
        print(f"birder check: error: {printable(line)}", file=sys.stderr)  # a name cannot drive the terminal
        return 2
    report = replace(report, strict=bool(getattr(args, "strict", False)))
    broken = report.interface_broken
    message = (f"--impl {report.target}: the implementation lacks the interface: {' '.join(broken.split())}"
               if broken else None)
    if args.json:
        print(json.dumps({**report.to_json(), **({"error": message} if message else {})}))
    elif not message:  # an implementation that cannot be judged gets the one error line, not a table of blocks
        print(printable_lines(table(report)))
    if message:
        print(f"birder check: error: {printable(message)}", file=sys.stderr)
        return 2
    return 0 if report.passed else 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "check",
        help="the paper's claims as checks, against the reference or your implementation",
        description="Check an implementation of Birder (quantize, init, step) against every claim of the paper\n"
                    "and every clause of the interface.\n\n" + INTERFACE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--impl", metavar="MODULE[:OBJECT]", default=None,
                   help=f"the implementation to judge: a module (the current directory is searched), MODULE:OBJECT, "
                        f"or a file path/to/impl.py[:OBJECT] (default {DEFAULT_IMPL})")
    p.add_argument("--only", metavar="NAME[,NAME]", help="run only these checks")
    p.add_argument("--parity", action="store_true",
                   help="also require bit-for-bit agreement with birder_ref (not a claim of the paper)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"seconds one check may take before the implementation is declared hung, exit 2 (default "
                        f"{DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g})")
    p.add_argument("--import-timeout", type=float, default=DEFAULT_IMPORT_TIMEOUT_S, metavar="S",
                   help=f"seconds importing the implementation may take before it is declared hung, exit 2 (default "
                        f"{DEFAULT_IMPORT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g})")
    p.add_argument("--template", action="store_true",
                   help="print a minimal correct implementation (NumPy) to copy, and exit")
    p.add_argument("--strict", action="store_true",
                   help="warnings fail too (exit 1): input layouts refused, overflow only at float32's extremes")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
