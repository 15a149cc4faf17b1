"""The child process of ``birder check``: import the implementation and run the checks, reporting on a pipe.

The implementation runs here, never in the ``birder`` process: whatever it does (``sys.exit`` at import, raising,
hanging, killing its process, printing to stdout) the parent sees it and gives a verdict it can vouch for. The
child writes one JSON object per line to the file descriptor it is given: ``loaded`` (the target's name), then
``start`` and ``result`` per check, then ``done``; or ``error`` (one line) when the implementation cannot be
judged. Its stdout and stderr are the parent's capture files, so an implementation's prints never reach the
parent's output.

Run by ``proofs_checks.cli``: ``python -m proofs_checks.isolated FD JSON_OPTIONS``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict


def _hypothesis_home_in(folder: str) -> None:
    """Hypothesis keeps a .hypothesis folder in the current directory: keep it out of the user's folder."""
    try:
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:  # Hypothesis is a test extra; ratio_bound says so when it is missing
        return
    set_hypothesis_home_dir(folder)


def _descendants() -> dict[str, int]:
    """This process's descendants and the processes of its group and session, pid -> start time, looked up while
    it still lives: a process started in a session of its own is then still its child, where after it exits it
    would be nobody's that the parent could trace (the parent's own scans may all have missed it on a loaded
    machine)."""
    from proofs_checks.cli import ProcessTracker

    tracker = ProcessTracker(os.getpid())
    tracker.scan()
    return {str(pid): started for pid, started in tracker.seen.items()}


def main(fd: int, options: dict) -> int:
    channel = os.fdopen(fd, "w", buffering=1)

    def send(event: str, **fields) -> None:
        if event in ("done", "error"):  # the last word: name what the implementation started while this lives
            fields["descendants"] = _descendants()
        channel.write(json.dumps({"event": event, **fields}) + "\n")
        channel.flush()

    from proofs_checks.registry import Context
    from proofs_checks.runner import run_one, select
    from proofs_checks.target import load_target

    try:
        checks = select(options.get("only"), options.get("parity", False))
        target = load_target(options.get("impl"), search_cwd=True)
    except ValueError as error:
        send("error", message=str(error))
        return 0
    except BaseException as error:  # noqa: BLE001 - an implementation may raise anything at import
        send("error", message=f"importing the implementation raised {type(error).__name__}: {error}")
        return 0
    send("loaded", target=target.name, checks=[c.name for c in checks])
    ctx = Context(target)
    for chk in checks:
        send("start", name=chk.name)
        try:
            result = run_one(ctx, chk)
        except SystemExit as error:
            send("error", message=f"the implementation called sys.exit({error.code!r}) during check {chk.name}")
            return 0
        except BaseException as error:  # noqa: BLE001 - KeyboardInterrupt, GeneratorExit, ... from the target
            send("error", message=f"the implementation raised {type(error).__name__} during check {chk.name}: "
                                  f"{error}")
            return 0
        send("result", result=asdict(result))
    send("done")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="birder-check-hypothesis-") as home:
        _hypothesis_home_in(home)
        code = main(int(sys.argv[1]), json.loads(sys.argv[2]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # threads the implementation started do not keep the process alive
