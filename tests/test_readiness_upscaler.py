"""The Upscale choice's file before Restore: readiness.upscaler_note / upscaler_download,
and the app's Upscale line and Weights panel built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpen_app import readiness
from gpen_app.readiness import FileState
from gpen_core.weights.lookup import REGISTRY

from .fixtures_models import low_mode_session_home  # noqa: F401

FOLDER = "/models"


def files(**states: str) -> dict[str, FileState]:
    """Every registry file verified, except those named (``realesrnet_x2="missing"``)."""
    return {n: FileState(n, states.get(n, "verified"), None, False) for n in REGISTRY}  # type: ignore[arg-type]


def test_one_times_says_nothing_even_without_any_upscaler() -> None:
    nothing = files(realesrnet_x2="missing", realesrnet_x4="missing")
    for factor in (1, "1", None, 0):
        assert readiness.upscaler_note(factor, nothing, FOLDER) == ""
        assert readiness.upscaler_download(nothing, factor) == ()
    assert readiness.upscaler_note(3, nothing, FOLDER) == ""  # no ×3 upscaler: the engine refuses the factor itself


def test_present_upscaler_says_nothing() -> None:
    assert readiness.upscaler_note(2, files(realesrnet_x4="missing"), FOLDER) == ""
    assert readiness.upscaler_note(4, files(realesrnet_x2="missing"), FOLDER) == ""
    assert readiness.upscaler_download(files(), 2) == ()


def test_missing_upscaler_names_the_file_where_it_goes_and_the_fix() -> None:
    text = readiness.upscaler_note(2, files(realesrnet_x2="missing"), FOLDER)
    assert "`realesrnet_x2.pth` is missing" in text and "×2 upscaler" in text
    assert "`python -m gpen_core download realesrnet_x2`" in text
    assert "Download** button" in text and f"`{Path(FOLDER) / 'realesrnet_x2.pth'}`" in text
    assert "ModelScope cache" in text  # where the engine also looks for the ×2 file
    assert "Weights missing" in text  # what Restore would say

    x4 = readiness.upscaler_note("4", files(realesrnet_x4="missing"), FOLDER)
    assert "`realesrnet_x4.pth` is missing" in x4 and "download realesrnet_x4`" in x4
    assert "ModelScope" not in x4  # ModelScope ships only the ×2 file
    assert readiness.upscaler_download(files(realesrnet_x4="missing"), 4) == ("realesrnet_x4",)


def test_corrupt_upscaler_counts_as_missing_and_says_corrupt() -> None:
    text = readiness.upscaler_note(2, files(realesrnet_x2="corrupt"), FOLDER)
    assert "`realesrnet_x2.pth` is corrupt" in text and "Download it again" in text
    assert readiness.upscaler_download(files(realesrnet_x2="corrupt"), 2) == ("realesrnet_x2",)


def test_each_factor_offers_the_registry_upscaler_the_engine_loads() -> None:
    from gpen_core.options import UPSCALES

    upscalers = {n for n, s in REGISTRY.items() if s.kind == "upscaler"}
    none_usable = files(**{n: "missing" for n in upscalers})
    offered = {f: readiness.upscaler_download(none_usable, f) for f in UPSCALES if f > 1}
    assert offered == {2: ("realesrnet_x2",), 4: ("realesrnet_x4",)}  # model_cache.upscaler's default names
    assert upscalers == {n for names in offered.values() for n in names}


def test_from_the_real_lookup_the_ui_line_and_panel_follow_the_file(monkeypatch: pytest.MonkeyPatch,
                                                                    _isolated_models_home: Path) -> None:
    """weights.status() of an empty models folder, then with the file there (trust on first use)."""
    from gpen_core.weights import lookup as weights

    empty = readiness.files_from_status(weights.status())
    assert readiness.upscaler_download(empty, 2) == ("realesrnet_x2",)
    assert str(_isolated_models_home / "realesrnet_x2.pth") in readiness.upscaler_note(2, empty, str(weights.models_dir()))
    (_isolated_models_home / "realesrnet_x2.pth").write_bytes(b"not checked until loaded")
    here = readiness.files_from_status(weights.status())
    assert readiness.upscaler_note(2, here, str(weights.models_dir())) == ""
    assert readiness.upscaler_download(here, 4) == ("realesrnet_x4",)


def test_app_warns_before_restore_and_offers_the_upscaler_for_download(low_mode_session_home: Path, _isolated_models_home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own models folder with low's files (the upscaler is added to it, with its sidecar)."""
    import app
    from gpen_core.weights import lookup as weights
    from gpen_core.errors import WeightsError

    from .test_app import EXAMPLE, RecordingProgress

    home = _isolated_models_home
    for f in low_mode_session_home.glob("*.pth"):
        (home / f.name).symlink_to(f)
    assert app.upscale_view(str(EXAMPLE), 1, "auto") == ""
    line = app.upscale_view(str(EXAMPLE), 2, "auto")
    assert line.startswith("**Upscale ×2:** result") and "`realesrnet_x2.pth` is missing" in line, line
    assert "download realesrnet_x2" in app.upscale_view(None, 2, "auto")  # said even before a photo is chosen

    panel, button, _ = app.weights_view("low", "default", "default", False, 1)
    assert button["visible"] is False and "upscaler" not in panel  # low has its files; 1× needs no upscaler
    panel, button, _ = app.weights_view("low", "default", "default", False, 2)
    assert button["visible"] is True and button["value"].startswith("Download ×2 upscaler") and "for upscaling" in button["value"]
    assert "For the Upscale choice:" in panel and "`realesrnet_x2.pth`" in panel

    asked: list[str] = []

    def offline(name: str, **_: object) -> Path:
        asked.append(name)
        raise WeightsError(f"{name} is not available: no network.")

    monkeypatch.setattr(weights, "download", offline)
    panel, _, _ = app.download_weights("low", "default", "default", False, 4, progress=RecordingProgress())
    assert asked == ["realesrnet_x4"] and "Download failed" in panel

    (home / "realesrnet_x2.pth").write_bytes(b"trusted on first use")
    assert "missing" not in app.upscale_view(str(EXAMPLE), 2, "auto")
    assert app.weights_view("low", "default", "default", False, 2)[1]["visible"] is False
