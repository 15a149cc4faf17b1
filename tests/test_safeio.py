"""safeio sits below every job: the simulator, the torch code and the check suite import nothing of the command
line (``birder``), and the judge (``proofs_checks``) imports nothing of the code it judges."""

from __future__ import annotations

import subprocess
import sys

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
