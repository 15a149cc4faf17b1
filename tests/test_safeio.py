"""safeio sits below every job: the simulator, the torch code and the check suite import nothing of the command
line (``birder``), and the judge (``proofs_checks``) imports nothing of the code it judges."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _imported_after(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", ["sim.cli", "sim.api", "sim.collective_plots", "gpu_validation.cli",
                                    "gpu_validation.bench", "proofs_checks.cli", "safeio.atomic",
                                    "safeio.argtypes"])
def test_no_job_imports_the_command_line_package(module):
    imported = _imported_after(module)
    assert not {m for m in imported if m == "birder" or m.startswith("birder.")}, module


def test_the_judge_imports_nothing_of_the_code_it_judges():
    code = ("import pkgutil, importlib, sys, proofs_checks; "
            "[importlib.import_module('proofs_checks.' + m.name) "
            " for m in pkgutil.iter_modules(proofs_checks.__path__)]; "
            "print('\\n'.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    imported = set(out.stdout.split())
    assert "proofs_checks.cli" in imported
    assert not {m for m in imported if m.startswith(("gpu_validation", "birder."))}


def test_a_killed_swap_is_undone_and_its_temporaries_removed(tmp_path):
    """SIGKILL between the two renames of a directory swap leaves the previous output at .NAME.PID.old and no
    NAME: the next run puts it back, then replaces it; a dead run's temporary is removed, a live one's kept."""
    from safeio.atomic import atomic_path

    dead = 2**30  # beyond any pid_max
    (tmp_path / f".out.{dead}.old").mkdir()
    (tmp_path / f".out.{dead}.old" / "report.md").write_text("previous")
    (tmp_path / f".out.{dead}.x1y2z3.tmp").mkdir()
    live = tmp_path / f".out.{os.getpid()}.abc.tmp"
    live.mkdir()
    with atomic_path(tmp_path / "out") as tmp:
        assert (tmp_path / "out" / "report.md").read_text() == "previous"  # restored before the new run writes
        tmp.mkdir()
        (tmp / "report.md").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "out"])
    assert (tmp_path / "out" / "report.md").read_text() == "new"


def test_inputs_are_regular_files_of_bounded_size_and_a_fifo_never_blocks(tmp_path):
    from safeio.inputs import read_text_bounded

    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match="FIFO"):
        read_text_bounded(tmp_path / "pipe", 100, "cluster file")  # returns at once: no writer needed
    with pytest.raises(ValueError, match="device"):
        read_text_bounded("/dev/zero", 100, "cluster file")
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(ValueError, match="101 bytes"):
        read_text_bounded(tmp_path / "big", 100, "cluster file")
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfmodel\n")
    assert read_text_bounded(tmp_path / "bom.csv", 100, "table") == "model\n"


def test_outputs_inside_the_toolkit_are_refused_even_through_a_link(tmp_path):
    import sim
    from safeio.outputs import check_output_dir, check_output_file, check_replaceable_dir

    package = Path(sim.__file__).parent
    (tmp_path / "link").symlink_to(package)
    for path in (package, package / "presets" / "networks.toml", tmp_path / "link" / "new.toml"):
        with pytest.raises(ValueError, match="toolkit"):
            check_output_file(path)
    with pytest.raises(ValueError, match="toolkit"):
        check_output_dir(tmp_path / "link" / "sweep")
    assert check_replaceable_dir(tmp_path / "new") == (tmp_path / "new").resolve()


def test_printable_escapes_controls_and_keeps_letters():
    from safeio.text import printable, printable_lines

    assert printable("a\nb\x1b[2J\x9b\u2028 é 名") == "a\\nb\\x1b[2J\\x9b\\u2028 é 名"
    assert printable_lines("one\x07\ntwo") == "one\\x07\ntwo"


def test_a_killed_sweeps_plot_staging_is_removed_by_the_next_sweep(tmp_path):
    from birder.cli import main

    out = tmp_path / "s"
    out.mkdir()
    (out / f".birder-outputs.{2**30}.k1ll3d.tmp").mkdir()  # what SIGKILL while drawing leaves
    (out / "notes.txt").write_text("the user's, kept")
    assert main(["sweep", "--nodes", "1", "--optimizers", "sgdm", "--networks", "10gbe", "--out", str(out),
                 "--json"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".birder-manifest", "notes.txt", "sweep.csv",
                                                     "throughput_vs_gpus.png", "time_breakdown.png"]
