"""gpu_validation's shape (issue 32): the package users import holds no test of itself and imports nothing from
tests/ (the multi-rank test bodies live in tests/gpu_scenarios/), no module of it is over 600 lines without a reason
stated at its top (its docstring says "Over 600 lines: ..."), and Birder's step reads in one screen. Read from the
source: imports anywhere in a file count, function-local ones too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpu_validation"
TESTS = ROOT / "tests"
MAX_LINES = 600
STEP_LINES = 60  # one screen


def modules_of_tests() -> set[str]:
    """What tests/ holds that a module could import: tests itself, its packages and its modules."""
    packages = {p.name for p in TESTS.iterdir() if (p / "__init__.py").exists()}
    return {"tests"} | {p.stem for p in TESTS.glob("*.py")} | packages


def imported_names(tree: ast.AST) -> list[str]:
    """Every module name an import statement names, and every string constant that reads as a dotted module path
    (a name given to importlib or to a forkserver's preload list)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier() is False \
                and all(part.isidentifier() for part in node.value.split(".")):
            names.append(node.value)
    return names


def test_gpu_validation_imports_nothing_from_the_tests():
    tests = modules_of_tests()
    assert {"gpu_scenarios", "conftest", "tests"} <= tests  # what the check looks for is there to find
    assert "gpu_scenarios" in imported_names(ast.parse((TESTS / "test_gpu_habits.py").read_text()))  # it sees them
    for path in sorted(PACKAGE.glob("*.py")):
        found = [n for n in imported_names(ast.parse(path.read_text())) if n.split(".")[0] in tests]
        assert not found, f"{path.relative_to(ROOT)} imports from tests/: {found}"


def test_no_gpu_validation_module_is_over_600_lines_without_a_stated_reason():
    for path in sorted(PACKAGE.glob("*.py")):
        lines = len(path.read_text().splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert lines <= MAX_LINES or "Over 600 lines:" in docstring, \
            f"{path.relative_to(ROOT)} has {lines} lines and states no reason at its top ('Over 600 lines: ...')"


def test_birders_step_is_one_screen():
    tree = ast.parse((PACKAGE / "optimizer.py").read_text())
    birder = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Birder")
    step = next(n for n in birder.body if isinstance(n, ast.FunctionDef) and n.name == "step")
    assert step.end_lineno - step.lineno + 1 <= STEP_LINES, f"Birder.step is {step.end_lineno - step.lineno + 1} lines"
