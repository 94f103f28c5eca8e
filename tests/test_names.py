"""One meaning per name: the callbacks and records that several rooms share are defined once."""

from __future__ import annotations

import re

from .conftest import ROOT

PKG = ROOT / "gpen_core"


def _definitions(name: str) -> list[str]:
    """Where ``name`` is defined at a module's top level (a class, or an assignment of a type alias)."""
    pattern = re.compile(rf"^(class {name}\b|{name}\s*(:[^=]*)?=)", re.M)
    return sorted(str(p.relative_to(ROOT)) for p in PKG.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8")))


def test_progress_is_defined_once_for_each_thing_it_counts() -> None:
    assert _definitions("Progress") == ["gpen_core/progress.py"]
    assert _definitions("CountProgress") == ["gpen_core/progress.py"]


def test_prepared_means_one_thing() -> None:
    assert _definitions("Prepared") == ["gpen_core/engine/stages.py"]  # a decoded photo; a conversion's outcome is ConversionOutcome
