"""The layout of gpen_core (issue #11): no import circle, no oversized module, a thin Restorer.

Read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` of a gpen_core module, at module level, inside functions and
under ``TYPE_CHECKING`` alike, is an edge of the import graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gpen_core"

# Modules allowed over MAX_LINES, each with why: only the network definitions, long by nature.
MAX_LINES = 500
LONG_MODULES = {
    "gpen_core.arch": "the GPEN generator network definition",
    "gpen_core.fast": "the fast generator network definitions",
}
RESTORER_MAX_LINES = 150


def _modules() -> dict[str, Path]:
    """Dotted name → file for every module of gpen_core (a package is its __init__)."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(base: str, level: int, is_pkg: bool, module: str | None) -> str:
    """The absolute module a relative ``from`` import names, seen from module ``base``."""
    parts = base.split(".")
    if not is_pkg:
        parts = parts[:-1]  # a module's imports are relative to its package
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the gpen_core modules it imports anywhere in its source."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(name, node.level, is_pkg, node.module) if node.level else (node.module or "")
                # ``from pkg import sub`` imports the submodule when there is one, else a name of pkg.
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in modules else src for a in node.names]
            for t in targets:
                # ``import gpen_core.x.y`` or a name inside a module: the longest known module prefix.
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(_modules())


def test_the_cycle_finder_finds_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    """The checker itself: a circle closed only by a function-level relative import is found."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("from .a import x\n")
    mods = {"p": pkg / "__init__.py", "p.a": pkg / "a.py", "p.b": pkg / "b.py", "p.c": pkg / "c.py"}
    g = import_graph(mods)
    assert g["p.a"] == {"p.b"} and g["p.b"] == {"p.c"} and g["p.c"] == {"p.a"}
    assert find_cycle(g) == ["p.a", "p.b", "p.c", "p.a"]
    (pkg / "c.py").write_text("import os\n")
    assert find_cycle(import_graph(mods)) is None


def test_gpen_core_has_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert "gpen_core.restorer" in graph and "gpen_core.profile.runner" in graph  # the walk saw the package
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_budget_and_the_profile_store_never_reach_the_engine(graph: dict[str, set[str]]) -> None:
    """``auto``'s policy and the saved-profile lookup are pure: they never import the Restorer or the runner."""
    engine = {"gpen_core.restorer", "gpen_core.pipeline", "gpen_core.profile.runner"}
    for start in ("gpen_core.budget", "gpen_core.profile.store", "gpen_core.profile.records", "gpen_core.profile.report"):
        assert not (_closure(graph, start) & engine), f"{start} reaches {sorted(_closure(graph, start) & engine)}"
    # Only the runner (and the CLI that drives it, and the facade's own users) import the Restorer.
    assert "gpen_core.restorer" in graph["gpen_core.profile.runner"]


def test_no_module_is_oversized_except_the_listed_ones() -> None:
    modules = _modules()
    assert set(LONG_MODULES) <= set(modules), f"stale exceptions: {sorted(set(LONG_MODULES) - set(modules))}"
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules.items()}
    too_long = {n: s for n, s in sizes.items() if s > MAX_LINES and n not in LONG_MODULES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}; split them by what they hold"


def test_restorer_class_is_a_thin_facade() -> None:
    tree = ast.parse((PKG / "restorer.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Restorer")
    assert cls.end_lineno is not None
    length = cls.end_lineno - cls.lineno + 1
    assert length < RESTORER_MAX_LINES, f"Restorer is {length} lines; move work into pipeline / model_cache"
