"""Shared fixtures: the read-only ../shared data (skipped cleanly when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """Path under ../shared, or skip the test naming what is missing."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs {p} (the project's ../shared test data), which is not present")
    return p


@pytest.fixture(autouse=True)
def _isolated_models_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets an empty models folder and no network downloads by default."""
    home = tmp_path_factory.mktemp("gpen_home")
    monkeypatch.setenv("GPEN_HOME", str(home))
    monkeypatch.setenv("GPEN_OFFLINE", "1")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(home / "modelscope"))
    return home
