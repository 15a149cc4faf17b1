"""The simulator's shape (sim/README.md, "Three layers"): prediction (the workload, system and network layers,
``sim.uncertainty`` and ``sim.api``) never imports validation (``sim.validation``), which imports prediction; and
no module of ``sim`` imports, directly or not, itself. Imports are read from the source (function-local ones
included), so an import that only runs on some path counts too."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "sim"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sim_imports(path: Path, modules: set[str]) -> set[str]:
    """The sim modules a file imports anywhere in it (``from sim.x import y`` counts sim.x.y where that is a
    module, else sim.x; a package's import also runs its ``__init__``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            found |= {n for n in names if n in modules} or {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    expanded = set()
    for name in found:
        parts = name.split(".")
        expanded |= {".".join(parts[:k]) for k in range(1, len(parts) + 1)}  # packages' __init__ run first
    return {m for m in expanded if m in modules and m != module_name(path)}


@lru_cache(maxsize=1)
def graph() -> dict[str, set[str]]:
    """Module -> the sim modules it imports, over every file of sim/."""
    files = sorted(SIM.rglob("*.py"))
    modules = {module_name(p) for p in files}
    return {module_name(p): sim_imports(p, modules) for p in files}


def reachable(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += sorted(g.get(m, ()))
    return seen


def test_prediction_imports_nothing_of_validation():
    g = graph()
    validation = {m for m in g if m == "sim.validation" or m.startswith("sim.validation.")}
    assert "sim.validation.stored" in validation and "sim.uncertainty" in g  # the graph sees the package
    prediction = [m for m in g if m not in validation and m not in ("sim.cli", "sim")]
    for module in prediction:
        reached = reachable(g, module) & validation
        assert not reached, f"{module} imports validation: {sorted(reached)}"
    assert reachable(g, "sim.validation.stored") >= {"sim.uncertainty", "sim.workload"}  # the other way, it does


def test_sim_has_no_import_cycle():
    g = graph()
    state: dict[str, str] = {}

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert state.get(module) != "open", f"import cycle: {' -> '.join(path + (module,))}"
        if state.get(module) == "done":
            return
        state[module] = "open"
        for imported in sorted(g[module]):
            visit(imported, path + (module,))
        state[module] = "done"

    for module in sorted(g):
        visit(module, ())


def test_birder_predict_loads_no_validation_module():
    """What runs, not only what the source says: a `birder predict --json` process never loads sim.validation."""
    code = ("import sys; from birder.cli import main; rc = main(['predict', '--model', 'resnet50', '--nodes', '2', "
            "'--json']); loaded = sorted(m for m in sys.modules if m.startswith('sim.validation')); "
            "print(rc, loaded, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stderr.strip().splitlines()[-1] == "0 []", done.stderr
