"""Patterns as a type: each pattern's byte counts and pipelined edges agree with its messages, an unknown
pattern is refused, and ``birder_ref.schedules`` is a leaf that knows no optimizer."""

import ast
import sys
from pathlib import Path

import pytest

import birder_ref
from birder_ref.schedules import PATTERNS, Layout, Pattern, Phase, pattern_named


def phase_of(name: str, size: int, op: str) -> Phase:
    groups = (tuple(range(size)), tuple(range(size, 2 * size)))
    rounds = PATTERNS[name].n_rounds(size)
    return Phase("p", name, groups, 8, tuple(8 * (r + 1) for r in range(rounds)), op, 4)


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("op", ["reduce", "copy"])
def test_bytes_sent_and_edges_agree_with_the_messages(name, size, op):
    phase = phase_of(name, size, op)
    from_messages: dict[int, int] = {}
    pairs = set()
    for messages in phase.rounds():
        for m in messages:
            from_messages[m.src] = from_messages.get(m.src, 0) + m.nbytes
            pairs.add((m.src, m.dst))
    assert phase.bytes_sent() == from_messages
    edges = {e for group in phase.groups if len(group) > 1 for e in phase.pattern.edges(phase, group)}
    assert edges == pairs
    assert isinstance(phase.pattern, Pattern) and phase.pattern is PATTERNS[name]


def test_an_unknown_pattern_or_op_fails_loudly():
    with pytest.raises(ValueError, match="unknown pattern 'ring'"):
        Phase("p", "ring", ((0, 1),), 8, (1,), "reduce")
    with pytest.raises(ValueError, match="unknown op"):
        Phase("p", "all_to_all", ((0, 1),), 8, (1,), "sum")
    with pytest.raises(ValueError, match="pattern"):
        pattern_named(None)
    assert Phase("p", PATTERNS["push"], ((0, 1),), 8, (1,), "reduce") == Phase("p", "push", ((0, 1),), 8, (1,),
                                                                              "reduce")
    assert Layout(1, 2).n_ranks == 2


def birder_ref_imports(path: Path) -> set[str]:
    """The birder_ref modules a file imports, anywhere in it (function-local imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("birder_ref"):
            found |= {f"birder_ref.{a.name}" for a in node.names} if node.module == "birder_ref" else {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("birder_ref")}
    return found


def test_schedules_is_a_leaf_and_the_reference_has_no_import_cycle():
    package = Path(birder_ref.__file__).parent
    graph = {f"birder_ref.{f.stem}": birder_ref_imports(f) for f in package.glob("*.py") if f.stem != "__init__"}
    assert graph["birder_ref.schedules"] == {"birder_ref.validation"}
    assert graph["birder_ref.baseline_schedules"] <= {"birder_ref.schedules", "birder_ref.validation"}
    state: dict[str, str] = {}

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert state.get(module) != "open", f"import cycle: {' -> '.join(path + (module,))}"
        if state.get(module) == "done" or module not in graph:
            return
        state[module] = "open"
        for imported in graph[module]:
            visit(imported, path + (module,))
        state[module] = "done"

    for module in graph:
        visit(module, ())


def test_the_reference_imports_numpy_only():
    """birder_ref needs NumPy and the standard library alone (statistical tests of its draws live in proofs_checks):
    every import in every module, function-local ones included."""
    allowed = set(sys.stdlib_module_names) | {"numpy", "birder_ref"}
    for path in Path(birder_ref.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {sorted(roots - allowed)}: birder_ref imports NumPy only"


def test_the_layout_places_every_rank_once():
    layout = Layout(3, 4)
    places = [(layout.node_of(r), layout.local_rank(r)) for r in range(layout.n_ranks)]
    assert sorted(places) == [(k, j) for k in range(3) for j in range(4)]
    assert all(layout.node_ranks(k)[j] == k * 4 + j == layout.local_rank_group(j)[k] for k, j in places)
    assert layout.nodes_spanned(layout.node_ranks(1)) == 1 and layout.nodes_spanned(layout.local_rank_group(2)) == 3


def test_a_phases_cached_hash_agrees_with_equality_and_never_travels_to_another_process():
    """A phase keeps its hash (its groups hold every rank: hashing them on every cache lookup cost a 65,536-GPU
    prediction seconds), so equal phases built apart must hash alike; and since a str's hash differs between
    processes, a pickled phase carries its fields only, and another process hashes it afresh."""
    import pickle
    import subprocess

    a, b = phase_of("ring_reduce_scatter", 4, "reduce"), phase_of("ring_reduce_scatter", 4, "reduce")
    assert a is not b and a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert hash(a) == hash(a) and "_hash" in a.__dict__
    assert a != phase_of("ring_reduce_scatter", 5, "reduce")
    blob = pickle.dumps(a)
    assert "_hash" not in pickle.loads(blob).__dict__ and pickle.loads(blob) == a
    code = ("import pickle, sys; from tests.test_schedules_patterns import phase_of; "
            "p = pickle.loads(sys.stdin.buffer.read()); "
            "print(hash(p) == hash(phase_of('ring_reduce_scatter', 4, 'reduce')))")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=120, check=True,
                         cwd=Path(__file__).resolve().parents[1], env={"PYTHONHASHSEED": "random", "PATH": ""})
    assert out.stdout.strip() == b"True"
