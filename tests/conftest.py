"""Test settings shared by the whole suite: Hypothesis is derandomized (no test may fail by chance); one fixture
for the torch tests that need a process group of one rank in this process; one for the runs a module starts in
the background; one `birder report --quick` run that several tests read."""

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "project",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("project")


@pytest.fixture
def one_rank():
    """A gloo process group of one rank (rank 0, world size 1) in this process, destroyed afterwards."""
    import torch.distributed as dist  # here, so tests without torch do not import it

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=0, world_size=1,
                                timeout=timedelta(seconds=30))
        try:
            yield
        finally:
            dist.destroy_process_group()


@pytest.fixture(scope="module", autouse=True)
def _background_started(request):
    """Starts a module's ``BACKGROUND`` runs (name -> a callable of no arguments) together, each in a thread, when
    the module's first test begins, so that its other tests run meanwhile; only when a selected test of the module
    asks for ``background``. For runs that mostly wait (a stall test sleeps out a process-group timeout with ~3 s
    of CPU in 30 s), not for CPU-bound work. The module ends after every run has ended (each has a backstop)."""
    runs = getattr(request.module, "BACKGROUND", {})
    if not any("background" in item.fixturenames for item in request.session.items
               if item.module is request.module):
        yield {}
        return
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        yield {name: pool.submit(run) for name, run in runs.items()}


@pytest.fixture(scope="module")
def background(_background_started):
    """The module's background runs by name: ``background[name].result()`` waits for one and returns (or raises)
    what it did."""
    return _background_started


@dataclass(frozen=True)
class QuickReport:
    """A finished ``birder report --quick`` process: where it wrote, and what it printed."""

    folder: Path
    done: subprocess.CompletedProcess

    def section(self, heading: str) -> str:
        """The Markdown of the section whose ``## `` heading starts with ``heading`` (each section is one)."""
        chunks = ("## " + chunk for chunk in (self.folder / "report.md").read_text().split("\n## ")[1:])
        (found,) = [chunk for chunk in chunks if chunk.startswith("## " + heading)]
        return found


@pytest.fixture(scope="session")
def quick_report(tmp_path_factory) -> QuickReport:
    """One ``birder report --quick`` in a fresh process, as a user starts it (~25 s): the test that the report never
    imports torch and the tests of its sections read the same run. The process prints, last, whether torch was
    imported. Under pytest-xdist the workers share one run: the first to ask starts it, under a lock in the
    folder the workers' temporary folders share, and the others read what it left there."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # every worker's basetemp lies in one folder of the run
    folder, record = shared / "quick_report" / "r", shared / "quick_report" / "done.json"
    folder.parent.mkdir(exist_ok=True)
    with open(shared / "quick_report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not record.exists():
            root = Path(__file__).resolve().parents[1]
            code = ("import sys; from birder.cli import main; rc = main(['report', '--quick', '--out', sys.argv[1]]); "
                    "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)")
            done = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=root, capture_output=True,
                                  text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)})
            record.write_text(json.dumps({"args": done.args, "returncode": done.returncode, "stdout": done.stdout,
                                          "stderr": done.stderr}))
    return QuickReport(folder, subprocess.CompletedProcess(**json.loads(record.read_text())))
