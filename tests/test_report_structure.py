"""The report's modules: sections import a shared core (``birder.report_core``), never the driver
(``birder.report``), and no module of ``birder/`` takes part in an import cycle (imports inside functions too)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "birder"


def birder_imports(path: Path) -> set[str]:
    """The ``birder.*`` modules ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "birder":
                found |= {f"birder.{alias.name}" for alias in node.names}
            elif node.module.startswith("birder."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("birder.")}
    return found


def test_no_import_cycle_and_sections_never_import_the_driver():
    graph = {f"birder.{p.stem}": birder_imports(p) for p in PACKAGE.glob("*.py")}
    for module, imported in graph.items():
        if module.startswith("birder.report_") or module == "birder.comparison":
            assert "birder.report" not in imported, module
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for nxt in sorted(graph.get(module, ())):
            assert state.get(nxt) != "open", " -> ".join([*path, module, nxt])
            if nxt not in state:
                visit(nxt, [*path, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert {"birder.report_core", "birder.report_grid", "birder.report_decision"} <= set(graph)
