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


def _tree(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_full_disk_leaves_the_earlier_sweep_whole_and_names_the_file(tmp_path, capsys):
    """One output rule (safeio.outputs.output_files): a sweep replaces its own earlier outputs; a write that fails
    half-way (RLIMIT_FSIZE: a file may not grow past 4 kB, as on a full disk; Python ignores SIGXFSZ, so the write
    raises EFBIG) is one line naming the file, exit 2, and leaves every earlier output and nothing else; a file
    edited since birder wrote it is never replaced."""
    import resource

    from birder.cli import main

    out = tmp_path / "s"
    argv = ["sweep", "--nodes", "1", "--optimizers", "sgdm", "--networks", "10gbe", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    before = _tree(out)
    assert {"sweep.csv", "throughput_vs_gpus.png", "time_breakdown.png", ".birder-manifest"} == set(before)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        status = main([*argv[:2], "2", *argv[3:]])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "File too large" in err[0] and f"{out}/" in err[0], err
    assert err[0].split(f"{out}/")[-1] in ("throughput_vs_gpus.png", "time_breakdown.png")  # the file, not a temporary
    assert _tree(out) == before  # the CSV (small enough) was not swapped in without its plots
    (out / "sweep.csv").write_text((out / "sweep.csv").read_text() + "my note\n")
    assert main(argv) == 2 and (out / "sweep.csv").read_text().endswith("my note\n")


def test_serialisers_escape_what_users_give():
    """A name with quotes, backslashes and control characters stays one TOML string, one Markdown table cell and
    one CSV cell that no spreadsheet runs."""
    import tomllib

    from safeio.serialise import csv_text, markdown_text, same_toml, toml_comment, toml_pair

    name = 'a"b\\c\n[network]\x1b\x7f\u2028 é'
    text = toml_comment("from\nname = 1") + "\n" + toml_pair("name", name, "x\ny = 2") + "\n"
    assert tomllib.loads(text) == {"name": name}
    assert same_toml(tomllib.loads(toml_pair("x", 1.0)), {"x": 1.0}) and not same_toml({"x": 1}, {"x": 1.0})
    cell = markdown_text("USD | x\n# Forged *heading*")
    assert "\n" not in cell and "|" not in cell.replace("\\|", "") and not cell.startswith("#")
    assert markdown_text("#1")[0] == "\\" and markdown_text("a-b") == "a-b"
    assert csv_text([{"n": "=cmd()", "x": "-1.5", "y": -2}], ["n", "x", "y"]) == "n,x,y\n'=cmd(),-1.5,-2\n"


def test_write_errors_on_stdout_are_one_line_and_exit_2(tmp_path):
    """The console script with stdout closed, or on a full device: one line naming the stream, exit 2 (never exit
    0 with the answer lost); on an ASCII-only terminal a non-ASCII name is printed escaped."""
    birder = str(Path(sys.executable).parent / "birder")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    closed = subprocess.run(f"{birder} predict --json >&-", shell=True, capture_output=True, text=True, env=env,
                            timeout=120)
    assert closed.returncode == 2 and "standard output is closed" in closed.stderr, closed.stderr
    with open("/dev/full", "w") as full:
        run = subprocess.run([birder, "predict", "--json"], stdout=full, stderr=subprocess.PIPE, text=True, env=env,
                             timeout=120)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        "birder predict: error: No space left on device: standard output"], run.stderr
    (tmp_path / "c.toml").write_text('name = "caf\\u00e9"\n[network]\npreset = "10gbe"\n')
    ascii_run = subprocess.run([birder, "predict", "--cluster", "c.toml"], capture_output=True, cwd=tmp_path,
                               env={**env, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"}, timeout=120)
    assert ascii_run.returncode == 0 and b"caf\\xe9" in ascii_run.stdout, ascii_run.stderr


@pytest.mark.parametrize("argv", [
    ["report", "--quick"], ["sweep", "--model", "resnet50"], ["collective", "--op", "all-reduce", "--bytes", "8"],
    ["validate"], ["calibrate", "log.txt"], ["bench"],
])
def test_every_out_refuses_an_empty_path_and_a_file_as_its_folder_in_the_same_words(tmp_path, monkeypatch, capsys,
                                                                                  argv):
    """A trial found `report --out ""` writing into the current folder while `sweep` refused it, and `calibrate`
    and `bench` calling an existing file "a folder that does not exist". Now each subcommand refuses both in one
    line, exit 2, in the same words, and writes nothing."""
    from birder.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "log.txt").write_text("")
    (tmp_path / "afile").write_text("kept")
    for out, words in (("", "expected a path, got ''"), ("afile/sub", f"{tmp_path / 'afile'} is not a directory")):
        try:
            code = main([*argv, "--out", out, "--quiet"])
        except SystemExit as exit_:  # argparse's own refusal
            code = exit_.code
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "log.txt"]
    assert (tmp_path / "afile").read_text() == "kept"
