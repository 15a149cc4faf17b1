"""Shared by the bad-input suites: run `birder` in-process with a wall-time bound and judge the outcome.

``run_cli(argv, cwd, watched)`` calls ``birder.cli.main(argv)`` in this process (fast: no interpreter start),
with stdout and stderr captured, SIGALRM as the wall-time bound (a hang fails the test instead of blocking it),
and a snapshot of every file under the watched directories before and after. The invariants of a bad input:
exit status 2, exactly one line on stderr naming what is wrong, no traceback, no file created or modified,
stdout empty or one strict JSON document (no NaN/Infinity). ``count_bad_inputs()`` counts the distinct bad
inputs the suites hold (``python tests/bad_input_harness.py`` prints them).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path

WALL_S = 20.0  # in-process bound per call; a healthy bad-input call takes well under a second


class Hang(BaseException):  # noqa: N818 - not an Exception, so no `except Exception` in the code under test eats it
    """Raised by the alarm: the call did not return within its wall-time bound."""


@dataclass(frozen=True)
class Outcome:
    status: int
    stdout: str
    stderr: str
    seconds: float
    changed: list[str]


def snapshot(*roots: Path) -> dict[str, tuple[int, int, str]]:
    """path -> (size, mtime_ns, sha1) of every file under the roots (directories as entries of their own)."""
    state = {}
    for root in roots:
        for dirpath, _subdirs, filenames in os.walk(root):
            state[dirpath] = (0, 0, "dir")
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    info = os.lstat(path)
                    if not stat.S_ISREG(info.st_mode):  # a FIFO or a device: reading it could block; its kind counts
                        state[path] = (stat.S_IFMT(info.st_mode), info.st_mtime_ns, "special")
                        continue
                    digest = hashlib.sha1(Path(path).read_bytes()).hexdigest() if info.st_size < 1 << 20 else ""
                except OSError:  # unreadable on purpose (mode 000)
                    info, digest = os.lstat(path), "unreadable"
                state[path] = (info.st_size, info.st_mtime_ns, digest)
    return state


def strict_json(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (what browsers' JSON.parse refuses)."""

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@contextlib.contextmanager
def wall_bound(seconds: float):
    """Raise ``Hang`` once ``seconds`` have passed, and again every 0.25 s after that: an exception raised inside a
    callback that swallows it (a gc callback, a ``__del__``) must not let the call run on unbounded."""
    armed = [True]

    def expire(signum, frame):
        if armed[0]:
            raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(argv: list[str], cwd: Path, watched: tuple[Path, ...] = (), wall_s: float = WALL_S) -> Outcome:
    """``birder.cli.main(argv)`` in ``cwd``; an AssertionError past ``wall_s`` (a hang), a traceback let through."""
    from birder.cli import main

    before = snapshot(cwd, *watched)
    out, err = io.StringIO(), io.StringIO()
    old_cwd = os.getcwd()
    started = time.perf_counter()
    os.chdir(cwd)
    try:
        with wall_bound(wall_s), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(argv))
            except SystemExit as stop:  # argparse and anything else that exits
                status = stop.code
    except Hang:
        raise AssertionError(f"hang: `birder {' '.join(argv)}` gave no answer within {wall_s} s") from None
    finally:
        os.chdir(old_cwd)
    seconds = time.perf_counter() - started
    after = snapshot(cwd, *watched)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    if status is None:
        status = 0
    elif not isinstance(status, int):  # sys.exit("message") prints the message and exits 1
        err.write(f"{status}\n")
        status = 1
    return Outcome(status, out.getvalue(), err.getvalue(), seconds, changed)


def assert_rejected(outcome: Outcome, names: tuple[str, ...] = ()) -> None:
    """The invariants of a bad input (see the module docstring); ``names`` must all appear in the line."""
    lines = outcome.stderr.strip().splitlines()
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.status == 2, f"exit {outcome.status}; stderr {outcome.stderr!r}; stdout {outcome.stdout[:300]!r}"
    assert len(lines) == 1, f"{len(lines)} lines on stderr: {outcome.stderr!r}"
    for name in names:
        assert name.lower() in lines[0].lower(), f"{name!r} not named in {lines[0]!r}"
    assert not outcome.changed, f"files created or modified: {outcome.changed}"
    if outcome.stdout.strip():
        strict_json(outcome.stdout)


def assert_answered(outcome: Outcome, json_expected: bool) -> None:
    """Whatever the input: exit 0 with valid output, or exit 2 with one line; never a traceback or another code."""
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.status in (0, 2), f"exit {outcome.status}; stderr {outcome.stderr!r}"
    if outcome.status == 2:
        lines = outcome.stderr.strip().splitlines()
        assert len(lines) == 1, f"{len(lines)} lines on stderr: {outcome.stderr!r}"
        assert not outcome.stdout.strip() or strict_json(outcome.stdout) is not None
    else:
        assert outcome.stdout.strip(), "exit 0 without output"
        if json_expected:
            strict_json(outcome.stdout)


def count_bad_inputs() -> dict[str, int]:
    """Distinct bad inputs per interface, from the suites' tables: the command line (in-process rows and console
    script rows), the Python API, and the DDP hook's state loading (the bad state dicts of tests/test_gpu_hook.py
    and tests/test_gpu_birder_optimizer.py; those need torch, counted 0 without it)."""
    import sys

    sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]  # the tables, and the packages
    import test_bad_inputs_api as api
    import test_bad_inputs_cli as cli

    counts = {"cli": len({row.id for row in cli.ROWS + cli.SUBPROCESS_ROWS}),
              "python_api": len({row.id for row in api.ROWS})}
    try:
        import test_gpu_birder_optimizer as optimizer
        import test_gpu_hook as hook
    except ImportError:  # no torch: the hook is not installed either
        counts["hook_state_loading"] = 0
    else:
        hook_rows = hook.test_load_state_dict_refuses_what_it_would_drop_or_misread.pytestmark[0].args[1]
        counts["hook_state_loading"] = len(hook_rows) + len({name for name, _ in optimizer._mutations()})
    return counts


if __name__ == "__main__":
    counts = count_bad_inputs()
    here = Path(__file__).parent
    xfails = sum((here / name).read_text().count("mark.xfail") for name in ("test_bad_inputs_cli.py",
                                                                             "test_bad_inputs_api.py"))
    print("; ".join(f"{k}: {n} distinct bad inputs" for k, n in counts.items())
          + f"; total {sum(counts.values())}; xfail marks left: {xfails}")
