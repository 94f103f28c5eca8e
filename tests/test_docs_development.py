"""docs/development.md's "Reading one request, file by file" names the functions a request reaches: each name
there must still be in the code (a renamed or removed function fails here, not in a reader's search)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from .conftest import ROOT

_PACKAGE = ROOT / "gpen_core"


def _section() -> str:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    return text.split("## Reading one request, file by file", 1)[1].split("\n## ", 1)[0]


def _names(section: str) -> list[str]:
    """The code names in backquotes (a name broken over two lines joined), commands and flags left out."""
    spans = (re.sub(r"\s+", "", s) for s in re.findall(r"`([^`]+)`", section) if not s.lstrip().startswith(("python", "-")))
    return [s.removeprefix("gpen_core/").removesuffix(".py").lstrip(".").replace("/", ".") for s in spans]


_SOURCE = "\n".join(p.read_text(encoding="utf-8") for p in _PACKAGE.rglob("*.py"))
_MODULES = sorted(".".join(p.relative_to(_PACKAGE).with_suffix("").parts) for p in _PACKAGE.rglob("*.py"))


def _resolves(name: str) -> bool:
    """``room.module.attr…`` (or ``module.attr…`` by the module's own name) imports and has each attribute;
    a bare name (a stage's helper, a method, a queue) is defined or assigned somewhere in gpen_core."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        mods = [m for m in _MODULES if m == head or m.endswith("." + head)]
        if mods and i == len(parts):
            return True  # a module named as a whole (``__main__`` is never imported: it runs the command)
        for mod in mods:
            obj = importlib.import_module(f"gpen_core.{mod}".removesuffix(".__init__"))
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
                return True
            except AttributeError:
                continue
        if mods:
            return False
    last = parts[-1]
    return re.search(rf"(def|class) {re.escape(last)}\b|self\.{re.escape(last)}\b", _SOURCE) is not None and all(
        re.search(rf"(def|class) {re.escape(p)}\b", _SOURCE) for p in parts[:-1])


def test_every_name_in_the_reading_path_is_in_the_code() -> None:
    names = _names(_section())
    assert len(names) > 60, names  # the section was found and read
    missing = [n for n in names if not _resolves(n)]
    assert not missing, f"docs/development.md names what the code no longer has: {missing}"


def test_the_check_catches_a_name_that_is_gone() -> None:
    assert _resolves("engine.pipeline.run_attempt") and _resolves("budget.request_plan") and _resolves("_Run._decode")
    assert not _resolves("engine.pipeline.run_attempts") and not _resolves("budget.no_such") and not _resolves("_no_such_helper")


def _layer_table() -> str:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    return text.split("| layer | modules |", 1)[1].split("\n\n", 1)[0]


def test_the_layer_table_names_every_room_and_module_there_is() -> None:
    """The table of rooms in layers left out the video room (and a module in most rooms): a reader could not place
    the code a clip runs. Each room of .importlinter's layers and each module file must be in it, and nothing else."""
    table = _layer_table()
    named = set(re.findall(r"`([a-z_]+)/?`", table))
    rooms = re.findall(r"gpen_core\.([a-z_]+)", (ROOT / ".importlinter").read_text().split("[importlinter:contract:", 2)[1])
    packages = (_PACKAGE, ROOT / "gpen_app")  # the engine's rooms, then the app's own parts in their row
    leaves = {p.stem for pkg in packages for p in pkg.rglob("*.py") if p.stem not in ("__init__", "__main__")}
    assert set(rooms) <= named, sorted(set(rooms) - named)
    assert leaves <= named, sorted(leaves - named)
    folders = {p.name for pkg in packages for p in [pkg, *pkg.rglob("*")] if p.is_dir() and p.name != "__pycache__"}
    unknown = {n for n in named - leaves - folders - set(rooms) if not re.search(rf"def {n}\b", _SOURCE)}
    assert not unknown, sorted(unknown)  # a module named that is gone (a function named is fine while it exists)
