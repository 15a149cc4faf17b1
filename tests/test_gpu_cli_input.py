"""`birder gpu-validate` / `bench` on bad input: one line on stderr, exit status 2, no traceback, nothing hangs."""

import subprocess
import sys
import textwrap

import pytest

from birder.cli import main

_WITHOUT_TORCH = textwrap.dedent("""
    import sys
    class Block:  # hides torch, as on a machine installed without the torch extra
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("No module named 'torch'")
    sys.meta_path.insert(0, Block())
    from birder.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("command", ["gpu-validate", "bench"])
def test_without_torch_the_commands_say_how_to_install_it(command):
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (f'birder {command}: error: needs torch, which is not installed: '
                                   f'pip install -e ".[torch]"')


def test_a_size_beyond_memory_is_refused_before_allocating(capsys):
    assert main(["bench", "--sizes", "10000000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "GB of memory" in err and "available" in err


@pytest.mark.parametrize("rank, prints", [("0", True), ("1", False)])
def test_under_torchrun_a_layout_mismatch_is_said_once(monkeypatch, capsys, rank, prints):
    for key, value in {"RANK": rank, "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(key, value)
    assert main(["gpu-validate", "--nodes", "2", "--gpus-per-node", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert ("torchrun started 3 ranks" in err and "\n" not in err) if prints else err == ""
