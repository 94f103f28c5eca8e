"""The layout of gpen_core: rooms in layers (import-linter), few top-level modules, no oversized module.

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

# Modules allowed over MAX_LINES, each with why: only the network definitions, long by nature.
MAX_LINES = 500
LONG_MODULES = {
    "gpen_core.networks.arch": "the GPEN generator network definition",
    "gpen_core.networks.fast": "the fast generator network definitions",
}
MAX_TOP_LEVEL_MODULES = 12
RESTORER_MAX_LINES = 150
APP_MAX_LINES = 400


def _lint_imports() -> Path:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        found = shutil.which("lint-imports")
        if found is None:
            pytest.fail("lint-imports is missing: install the dev requirements (bash scripts/setup.sh --dev)")
        exe = Path(found)
    return exe


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


def test_the_import_contracts_hold() -> None:
    run = subprocess.run([str(_lint_imports()), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_the_contracts_catch_a_wrong_way_import(tmp_path: Path) -> None:
    """A copy of the package where the faces room imports a runtime must break the contract."""
    copy = tmp_path / "gpen_core"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    with (copy / "faces" / "masks.py").open("a") as f:
        f.write("\n\ndef _wrong_way():\n    from gpen_core.engine import pipeline  # noqa: F401\n")
    run = subprocess.run([str(_lint_imports()), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert run.returncode != 0, run.stdout[-3000:]
    assert "gpen_core.faces.masks -> gpen_core.engine.pipeline" in run.stdout


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
    assert length < RESTORER_MAX_LINES, f"Restorer is {length} lines; move work into the engine"


def test_the_app_is_layout_and_wiring_only() -> None:
    """app.py builds the page and hands each event to one library call; the work is gpen_core's."""
    lines = len((ROOT / "app.py").read_text(encoding="utf-8").splitlines())
    assert lines <= APP_MAX_LINES, f"app.py is {lines} lines (cap {APP_MAX_LINES}); move logic into gpen_core"
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    # One small app-state object holds what changes while serving: no module-level global statement.
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)], "app.py rebinds a module global"
