"""The runtime package's floors, held as data: read top-down, every module imports only its own room
(a top-level module or subpackage of ``offsetbatch``) and rooms on floors below it. Every import
counts: module level, inside functions, and under ``TYPE_CHECKING`` (a type hint that points up is
still a dependency a reader has to follow up). Rooms that share a floor do not import each other.
docs/architecture.md draws the same picture."""

from __future__ import annotations

import ast
from pathlib import Path

import offsetbatch

PACKAGE = Path(offsetbatch.__file__).parent
# Top to bottom. "offsetbatch" is the package's own __init__: the façade ``from offsetbatch import
# pipeline_dag`` (it imports the DAG factory lazily).
FLOORS: list[tuple[str, ...]] = [
    ("offsetbatch",),
    ("monitor",),
    ("ops",),
    ("dag",),
    ("maintenance",),
    ("plan", "commit"),
    ("pipeline",),
    ("config", "job"),
    ("sinks", "formats"),
    ("source", "jobspec", "job_secrets"),
    ("ledger", "storage"),
    ("connections",),
    ("validation", "redact", "model", "errors", "paths", "faults", "spark_session"),
]
FLOOR = {room: depth for depth, rooms in enumerate(FLOORS) for room in rooms}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["offsetbatch", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module: str, path: Path) -> set[str]:
    """The package's modules ``module`` imports, anywhere in it."""
    out = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


GRAPH = {module: _imported(module, path) for module, path in MODULES.items()}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "offsetbatch"


def test_every_room_has_a_floor():
    assert sorted({room(m) for m in MODULES} - set(FLOOR)) == []


def test_no_module_imports_a_floor_above_its_own_or_beside_it():
    wrong = sorted(f"{a} -> {b} (floor {FLOOR[room(a)]} -> {FLOOR[room(b)]})"
                   for a, targets in GRAPH.items() for b in targets
                   if room(a) != room(b) and FLOOR[room(b)] <= FLOOR[room(a)])
    assert wrong == []


# Inside ``sinks/``, the same rule one level down: the registry on top, then each sink's package
# (none imports another sink), then the seam every sink builds on, then what the seam is made of.
SINK_FLOORS: list[tuple[str, ...]] = [
    ("sinks",),
    ("delta", "files", "iceberg", "kafka", "postgres"),
    ("base", "keyed", "markers"),
    ("staging", "uris", "rejected_files", "maintenance"),
]
SINK_FLOOR = {room: depth for depth, rooms in enumerate(SINK_FLOORS) for room in rooms}


def sink_room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "sinks"


def test_every_module_of_sinks_has_a_floor():
    assert sorted({sink_room(m) for m in MODULES if room(m) == "sinks"} - set(SINK_FLOOR)) == []


def test_inside_sinks_no_module_imports_a_floor_above_its_own_or_beside_it():
    wrong = sorted(f"{a} -> {b} (floor {SINK_FLOOR[sink_room(a)]} -> {SINK_FLOOR[sink_room(b)]})"
                   for a, targets in GRAPH.items() if room(a) == "sinks" for b in targets
                   if room(b) == "sinks" and sink_room(a) != sink_room(b)
                   and SINK_FLOOR[sink_room(b)] <= SINK_FLOOR[sink_room(a)])
    assert wrong == []


def test_no_import_circles():
    """Tarjan's strongly connected components over every module: none larger than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_check_sees_imports_in_functions_and_under_type_checking(tmp_path):
    """The walker itself: an in-function and a TYPE_CHECKING import are edges like any other."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from offsetbatch.config import X\n"
                   "def f():\n    from offsetbatch import storage\n    import offsetbatch.ledger.store\n")
    assert _imported("offsetbatch.errors", src) == {"offsetbatch.config", "offsetbatch.storage",
                                                    "offsetbatch.ledger.store"}
