"""The `birder` console script: help, one-line errors with exit status 2, and the report it writes."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIRDER = shutil.which("birder", path=str(Path(sys.executable).parent)) or "birder"


def birder(*args, timeout=300):
    return subprocess.run([BIRDER, *args], capture_output=True, text=True, timeout=timeout)


def test_help_lists_the_subcommands():
    result = birder("--help")
    assert result.returncode == 0 and "report" in result.stdout


def test_version_names_the_installed_release():
    from importlib.metadata import version

    result = birder("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"birder {version('birder-toolkit')}"


@pytest.mark.parametrize("args", [(), ("no-such-command",), ("report", "--bogus")])
def test_bad_arguments_give_one_line_on_stderr_and_exit_2(args):
    result = birder(*args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "error" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unwritable_report_directory_is_one_clear_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = birder("report", "--quick", "--out", str(blocker / "report"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "birder report: error:" in result.stderr


def test_a_sweeps_cluster_line_names_the_node_counts_it_sweeps(tmp_path, capsys):
    """t14: a sweep over 1 to 64 nodes headed its output "1 node x 8 A100", the first count's description."""
    from birder.cli import main

    for nodes, shown in (("1,2", "1, 2 nodes (swept) x 8 A100"), ("2", "2 nodes x 8 A100")):
        assert main(["sweep", "--nodes", nodes, "--optimizers", "sgdm", "--networks", "10gbe",
                     "--out", str(tmp_path / nodes.replace(",", "-"))]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith(f"cluster 10gbe: {shown}, "), first
