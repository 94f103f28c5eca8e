"""The layout of gpen_core and the app's gpen_app: rooms in layers (import-linter), few top-level modules, no oversized module,
no import circle, few long functions and private names crossing modules.

The import rule itself is ``.importlinter`` at the project root, checked by ``lint-imports``
(the test command runs it too); these tests run it and check that it would catch a
violation, so a broken configuration cannot pass silently. The size cap is a smell
detector, not the design.
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gpen_core"
# The app's own parts beside app.py: judged by the same house rules as the engine.
APP_PKG = ROOT / "gpen_app"

# Every module of gpen_core at most MAX_LINES, the network definitions included: a long one is
# split by what it holds (the fast GPEN: its layers, the network, the prepared forward).
MAX_LINES = 500
MAX_TOP_LEVEL_MODULES = 12
RESTORER_MAX_LINES = 150
APP_MAX_LINES = 400
ENGINE_MAX_LINES = 22_000
# House rules: functions at most 80 lines, no private (``_name``) import from another module of
# gpen_core, no import circle between its modules. Counted as the project's before-stop hook counts
# them (nested functions included; any ``from gpen_core... import _x`` or relative one). Both caps
# are met in full (0): a new long function or private import fails here.
MAX_FUNCTION_LINES = 80
MAX_LONG_FUNCTIONS = 0
MAX_PRIVATE_IMPORTS = 0
# Long parameter lists: what travels together is one frozen value (a request context, a face job, a
# measurement spec), so at most 5 functions take 8 or more parameters (self/cls not counted), each
# named here with why it may.
MANY_PARAMETERS = 8
MAX_MANY_PARAMETER_FUNCTIONS = 5
ALLOWED_MANY_PARAMETERS = {
    # The network definition mirrors the official ParseNet's constructor, so checkpoints and the
    # reference code read the same.
    ("gpen_core/networks/parsenet.py", "__init__"),
    # Public entry points users call with keyword arguments (README, docs/video.md, the CLI, the app):
    # grouping them would break every existing caller.
    ("gpen_core/video/stream.py", "restore_video"),
    ("gpen_core/video/resumable.py", "restore_in_segments"),
    # The hardware check's entry point, called with keywords by the CLI, the app and the tests; it
    # gathers them into one hwcheck.runner.CheckSpec at once.
    ("gpen_core/hwcheck/runner.py", "run_profile"),
}


def _lint_imports() -> Path:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        found = shutil.which("lint-imports")
        if found is None:
            pytest.fail("lint-imports is missing: install the dev requirements (bash scripts/setup.sh --dev)")
        exe = Path(found)
    return exe


def _modules() -> dict[str, Path]:
    """Dotted name → file for every module of gpen_core and gpen_app (a package is its __init__)."""
    out = {}
    for path in sorted([*PKG.rglob("*.py"), *APP_PKG.rglob("*.py")]):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def test_the_import_contracts_hold() -> None:
    run = subprocess.run([str(_lint_imports()), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


@pytest.mark.parametrize("module, line, broken", [
    ("faces/masks.py", "from gpen_core.engine import pipeline", "gpen_core.faces.masks -> gpen_core.engine.pipeline"),
    ("__main__.py", "from gpen_app import panels", "gpen_core.__main__ -> gpen_app.panels"),  # in no layer, still judged
])
def test_the_contracts_catch_a_wrong_way_import(tmp_path: Path, module: str, line: str, broken: str) -> None:
    """A copy of the packages where the faces room imports the engine, or the engine the app, must break a contract."""
    copy = tmp_path / "gpen_core"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(APP_PKG, tmp_path / "gpen_app", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    with (copy / module).open("a") as f:
        f.write(f"\n\ndef _wrong_way():\n    {line}  # noqa: F401\n")
    run = subprocess.run([str(_lint_imports()), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert run.returncode != 0, run.stdout[-3000:]
    assert broken in run.stdout


def test_every_room_is_in_the_layers_contract_and_states_its_rule() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    layers = cfg["importlinter:contract:layers"]["layers"]
    named = {m.strip() for line in layers.splitlines() for m in line.replace(":", "|").split("|") if m.strip()}
    rooms = {p.parent.name for p in PKG.glob("*/__init__.py")}
    modules = {p.stem for p in PKG.glob("*.py")} - {"__init__", "__main__"}
    missing = {f"gpen_core.{r}" for r in rooms | modules} - named
    assert not missing, f"not placed in a layer of .importlinter: {sorted(missing)}"
    for init in PKG.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc.splitlines()[0]) > 20, f"{init.relative_to(ROOT)} needs a one-line rule as its docstring"


def test_few_modules_at_the_top_level() -> None:
    top = sorted(p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}; move them into a room"


def test_no_module_is_oversized() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in _modules().items()}
    too_long = {n: s for n, s in sizes.items() if s > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}; split them by what they hold"


def test_the_engine_stays_thin() -> None:
    """The engine's lines, counted as ``find gpen_core -name '*.py' | xargs wc -l`` counts them: the app's parts live
    in gpen_app, so a growing engine is new engine work, to be weighed against what it costs a reader."""
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in PKG.rglob("*.py"))
    assert lines <= ENGINE_MAX_LINES, f"gpen_core is {lines} lines (cap {ENGINE_MAX_LINES}): say each rule once"


def test_restorer_class_is_a_thin_facade() -> None:
    tree = ast.parse((PKG / "restorer.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Restorer")
    assert cls.end_lineno is not None
    length = cls.end_lineno - cls.lineno + 1
    assert length < RESTORER_MAX_LINES, f"Restorer is {length} lines; move work into the engine"


def test_the_app_is_layout_and_wiring_only() -> None:
    """app.py builds the page and hands each event to one library call; the work is gpen_core's."""
    lines = len((ROOT / "app.py").read_text(encoding="utf-8").splitlines())
    assert lines <= APP_MAX_LINES, f"app.py is {lines} lines (cap {APP_MAX_LINES}); move logic into gpen_app or gpen_core"
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    # One small app-state object holds what changes while serving: no module-level global statement.
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)], "app.py rebinds a module global"


def _trees() -> dict[str, tuple[Path, ast.Module]]:
    return {name: (path, ast.parse(path.read_text(encoding="utf-8"))) for name, path in _modules().items()}


def _imported_modules(name: str, path: Path, tree: ast.Module, modules: set[str]) -> set[str]:
    """The gpen_core modules ``name`` imports anywhere in its file: at the top, in a function, under
    TYPE_CHECKING (a lazy import hides a circle from Python, not from the design)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # "from pkg import mod" imports the module pkg.mod; "from mod import name", the module mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in modules and t != name}
    return out


def _circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_circle_finder_finds_a_circle_through_a_lazy_import() -> None:
    modules = {"p", "p.a", "p.b", "p.c"}
    src = {"p.a": "from p import b\n", "p.b": "def f():\n    from .c import x\n", "p.c": "import p.a\n"}
    edges = {m: _imported_modules(m, Path(m.replace(".", "/") + ".py"), ast.parse(src.get(m, "")), modules) for m in modules}
    assert edges["p.a"] == {"p.b"} and edges["p.b"] == {"p.c"} and edges["p.c"] == {"p.a"}
    assert _circles(edges) == [frozenset({"p.a", "p.b", "p.c"})]
    edges["p.c"] = set()
    assert _circles(edges) == []


def test_no_import_circle_between_gpen_core_modules() -> None:
    trees = _trees()
    edges = {name: _imported_modules(name, path, tree, set(trees)) for name, (path, tree) in trees.items()}
    new = [sorted(c) for c in _circles(edges)]
    assert not new, f"import circles between gpen_core modules: {new}; move what both need into a third module"


def test_few_functions_over_80_lines() -> None:
    long = [f"{path.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for path, tree in _trees().values() for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert len(long) <= MAX_LONG_FUNCTIONS, f"{len(long)} functions over {MAX_FUNCTION_LINES} lines (cap {MAX_LONG_FUNCTIONS}): {long}"


def test_few_private_names_imported_across_modules() -> None:
    crossing = [f"{path.relative_to(ROOT)}:{n.lineno} {a.name}"
                for path, tree in _trees().values() for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and ((n.module or "").startswith(("gpen_core", "gpen_app")) or n.level)
                for a in n.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert len(crossing) <= MAX_PRIVATE_IMPORTS, (
        f"{len(crossing)} private names imported across modules (cap {MAX_PRIVATE_IMPORTS}): {crossing}; "
        "make them public or move them")


# Renames into place go through one helper, which names the temporary so a killed run's is swept, and
# flushes where a loss costs a long rerun; a hand-rolled os.replace skips one or the other. No exception.
DURABLE_HELPER = PKG / "platform" / "durable.py"


def _renames(tree: ast.Module) -> list[int]:
    """Lines calling os.replace/os.rename/os.renames/shutil.move, or Path.replace/rename (one argument, unlike
    str.replace), or importing one of those by name from os or shutil."""
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module in ("os", "shutil"):
            lines += [n.lineno for a in n.names if a.name in ("replace", "rename", "renames", "move")]
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            continue
        owner = n.func.value.id if isinstance(n.func.value, ast.Name) else None
        if (owner, n.func.attr) in {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move")}:
            lines.append(n.lineno)
        elif owner not in ("os", "shutil") and n.func.attr in ("replace", "rename") and len(n.args) == 1 and not n.keywords:
            lines.append(n.lineno)
    return lines


def test_the_rename_finder_tells_a_path_rename_from_a_string_replace() -> None:
    src = ("import os\nos.replace(a, b)\ntmp.replace(dst)\np.rename(q)\ns.replace('a', 'b')\n"
           "dataclasses.replace(x, y=1)\nfrom os import rename\nshutil.move(a, b)\n")
    assert sorted(_renames(ast.parse(src))) == [2, 3, 4, 7, 8]


def test_every_rename_into_place_goes_through_the_durable_helper() -> None:
    files = [p for p in [*PKG.rglob("*.py"), *APP_PKG.rglob("*.py")] if p != DURABLE_HELPER] + [ROOT / "app.py"]
    found = [f"{p.relative_to(ROOT)}:{line}" for p in files if p.exists()
             for line in _renames(ast.parse(p.read_text(encoding="utf-8")))]
    assert not found, f"renames outside gpen_core/platform/durable.py: {found}; use durable.replacing/install/move_aside"
    assert _renames(ast.parse(DURABLE_HELPER.read_text(encoding="utf-8"))), "the helper itself renames"


def _parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional-only, positional and keyword-only parameters, ``self``/``cls`` not counted (``*args``
    and ``**kwargs`` neither: the house rules forbid flag soup in their place)."""
    a = fn.args
    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    first = (a.posonlyargs + a.args)[:1]
    return count - 1 if first and first[0].arg in ("self", "cls") else count


def test_the_parameter_counter_counts_what_a_caller_passes() -> None:
    tree = ast.parse("class C:\n    def m(self, a, /, b, *, c, d=1, **k): ...\ndef f(a, b=2, *args, e): ...")
    counts = {n.name: _parameter_count(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert counts == {"m": 4, "f": 3}


def _gradio_handler(path: Path, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """An event handler of the app (it takes Gradio's ``request``): one argument per input component, in the order
    the page wires them, so its list is the page's, not a group to name."""
    return path.is_relative_to(APP_PKG) and "request" in {a.arg for a in fn.args.args + fn.args.kwonlyargs}


def test_few_functions_take_long_parameter_lists() -> None:
    many = {(str(path.relative_to(ROOT)), n.name): _parameter_count(n)
            for path, tree in _trees().values() for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameter_count(n) >= MANY_PARAMETERS
            and not _gradio_handler(path, n)}
    assert len(ALLOWED_MANY_PARAMETERS) <= MAX_MANY_PARAMETER_FUNCTIONS
    unlisted = {f"{path} {name} ({k})": k for (path, name), k in many.items() if (path, name) not in ALLOWED_MANY_PARAMETERS}
    assert not unlisted, (
        f"{len(unlisted)} functions take {MANY_PARAMETERS} or more parameters: {sorted(unlisted)}; group what travels "
        "together into a small frozen dataclass named for what it holds (not **kwargs)"
    )


# Every child process of gpen_core starts through platform.worker (typed outcome back, the caller's
# limits and sys.path, dies with its parent); the one exception outlives its parent by design.
CHILD_PROCESS_MODULES = {
    "gpen_core/platform/worker.py",  # the helper itself
    # Ray's reaper must outlive the process it watches (a new session, no site), which a worker never does.
    "gpen_core/scaleout/reaper.py",
}


def test_every_child_process_starts_through_the_worker() -> None:
    starts = sorted(f"{path.relative_to(ROOT)}:{n.lineno}"
                    for path, tree in _trees().values() if str(path.relative_to(ROOT)) not in CHILD_PROCESS_MODULES
                    for n in ast.walk(tree)
                    if (isinstance(n, ast.Import) and any(a.name.split(".")[0] in ("subprocess", "multiprocessing") for a in n.names))
                    or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ("subprocess", "multiprocessing")))
    assert not starts, f"child processes started outside gpen_core.platform.worker: {starts}; use worker.run"
