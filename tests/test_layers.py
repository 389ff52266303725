"""The layers import downward only: the engine and the SQL front end know nothing of each other, the planner
joins them, the database sits on the planner, and the command, the benchmarks, TPC-H and the connectors sit on
the database. ``ivm/errors.py`` is below everything. Every import of every module counts, including those
inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# layer -> the layers it may import (besides itself and ivm.errors)
ALLOWED = {
    "ivm.engine": set(),
    "sql": set(),
    "planner": {"ivm.engine", "sql"},
    "ivm.db": {"ivm.engine", "sql", "planner"},
    "ivm": {"ivm.engine", "ivm.db"},  # the package's front door: connect() and the engine's names
    "tpch": {"ivm", "ivm.engine", "sql", "planner", "ivm.db"},
    "connectors": {"ivm", "ivm.engine", "sql", "planner", "ivm.db", "tpch"},
    "ivm.bench": {"ivm", "ivm.engine", "sql", "planner", "ivm.db"},
    "ivm.cli": {"ivm", "ivm.engine", "sql", "planner", "ivm.db", "ivm.bench", "tpch", "connectors"},
}
BOTTOM = "ivm.errors"


def layer_of(module: str) -> str | None:
    if module == BOTTOM or module.startswith(BOTTOM + "."):
        return BOTTOM
    best = None
    for layer in ALLOWED:
        if (module == layer or module.startswith(layer + ".")) and (best is None or len(layer) > len(best)):
            best = layer
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports by absolute name (``from X import y`` counts ``X.y`` if that is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = ROOT / Path(*f"{node.module}.{a.name}".split("."))
                is_module = sub.with_suffix(".py").exists() or sub.is_dir()
                out.add(f"{node.module}.{a.name}" if is_module else node.module)
    return out


def upward_edges() -> set[tuple[str, str]]:
    bad = set()
    for top in ("ivm", "sql", "planner", "tpch", "connectors"):
        for path in sorted((ROOT / top).rglob("*.py")):
            mod = module_name(path)
            mine = layer_of(mod)
            for target in imports(path):
                theirs = layer_of(target)
                if theirs is None or theirs in (mine, BOTTOM):
                    continue
                if mine == BOTTOM or theirs not in ALLOWED[mine]:
                    bad.add((mod, target))
    return bad


def test_every_import_points_down():
    bad = upward_edges()
    assert not bad, "imports against the layers: " + ", ".join(f"{a} -> {b}" for a, b in sorted(bad))


def test_the_errors_module_imports_nothing_of_the_project():
    assert not {m for m in imports(ROOT / "ivm" / "errors.py") if layer_of(m)}


def test_layer_of():
    assert layer_of("ivm.engine.trace.spine") == "ivm.engine"
    assert layer_of("ivm.db.connection") == "ivm.db"
    assert layer_of("ivm") == "ivm"
    assert layer_of("ivm.errors") == BOTTOM
    assert layer_of("sqlglot") is None
