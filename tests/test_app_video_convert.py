"""The Video tab converts first, as the CLI does: on hand-placed weights, a clip whose work on torch outlasts
converting its generator converts it in a child process before the first frame, shows that as progress, says so
in the result's notes and restores on OpenVINO; a short clip is not converted and its notes say why; the
visitor's Stop during the conversion kills the child and leaves nothing behind.

The clip goes through the app's own handler (the /restore_video event's function), with a generated 256 px GPEN
(conftest's ``gen256_narrow``, an eighth of the released width: converting it and its frames cost a fraction of the
full-width one's, and what is checked, when the conversion runs and what it says, is decided by the registry's
GPEN-BFR-256 figures) under GPEN-BFR-256's file name in a models folder of the test's own, ``low`` allowed on OpenVINO under ``auto`` and a recorded torch speed of
1 s a face, so 6 frames (6 s of work) outlast the 3.4 s conversion estimate and 3 frames (3 s) do not.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpen_core.runtimes.openvino import generator as ov_backend

from .conftest import shared_path
from .factories import low_on_openvino
from .videoclips import gradient_frames, make_clip

needs_openvino = pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")


@pytest.fixture()
def home(tmp_path: Path, gen256_narrow: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models folder of this test's own (the conversion writes into it): hand-placed weights, nothing converted."""
    from gpen_core.modes import MODES

    detector = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    home = tmp_path / "models"
    home.mkdir()
    (home / "GPEN-BFR-256.pth").symlink_to(gen256_narrow)
    (home / detector.name).symlink_to(detector)
    monkeypatch.setenv("GPEN_HOME", str(home))
    monkeypatch.setitem(MODES, "low", low_on_openvino())  # low itself keeps to torch under auto
    ov_backend.record_speed(256, "float32", torch_s=1.0, openvino_s=0.5, models_dir=home, source="test")
    return home


@pytest.fixture()
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from gpen_app import video_tab

    folder, real = tmp_path / "results", video_tab.results_path
    monkeypatch.setattr(video_tab, "results_path", lambda _app_dir, source, mode: real(folder, source, mode))
    return folder


def _restore_video():
    """The Video tab's Restore handler, as the page's event calls it."""
    import app

    return next(d.fn for d in app.demo.fns.values() if d.api_name == "restore_video")


def _run(clip: Path, shown: list[str], session: str = "visitor") -> tuple:
    def progress(fraction: float | None, desc: str | None = None) -> None:
        shown.append(desc or "")

    return _restore_video()(str(clip), "low", 0, 0, True, [], [], False, progress=progress,
                            request=SimpleNamespace(session_hash=session))


def _converted(home: Path) -> list[Path]:
    return list((home / "openvino").glob("GPEN-BFR-256-*/*/model.xml"))


@needs_openvino
@pytest.mark.slow  # one conversion of the narrow generator in a child process, then 6 frames
def test_a_long_clip_is_converted_first_and_restored_on_openvino(home: Path, results: Path, tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "long.mp4", gradient_frames(6))
    shown: list[str] = []
    out = _run(clip, shown)
    record, panel = out[4], out[2]
    assert "converting GPEN-BFR-256 for OpenVINO, once: about 5 s (estimate)" in shown, shown
    assert shown.index("converting GPEN-BFR-256 for OpenVINO, once: about 5 s (estimate)") < len(shown) - 1  # then frames
    first = record["notes"][0]
    assert first.startswith("GPEN-BFR-256 was converted for OpenVINO before the first face, in a separate process ("), first
    assert "~6 faces × 1.00 s" in first and first in panel
    assert _converted(home), "the child's conversion is in the models folder's cache"
    assert not any("convert" in n for n in record["notes"][1:]), record["notes"]  # the restore loaded it, converted nothing
    gen = [r for r in record["runtimes"] if r["network"] == "generator"]
    assert gen and gen[0]["runtime"] == "openvino", record["runtimes"]


@needs_openvino
def test_a_short_clip_is_not_converted_and_its_notes_say_why(home: Path, results: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import convert_first as cf

    monkeypatch.setattr(cf, "_in_child", lambda *a: pytest.fail("a short clip starts no conversion"))
    clip = make_clip(tmp_path / "short.mp4", gradient_frames(3))
    shown: list[str] = []
    record = _run(clip, shown)[4]
    assert not any(s.startswith("converting") for s in shown), shown
    assert record["notes"][0].startswith("GPEN-BFR-256 was not converted for OpenVINO before this run: its expected "
                                         "work (~3 faces × 1.00 s on torch"), record["notes"]
    assert not (home / "openvino").exists() or not _converted(home)


@needs_openvino
def test_the_visitors_stop_kills_the_conversion_and_leaves_nothing(home: Path, results: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop pressed while the child converts: the child is killed at once, its unfinished files and the clip's
    folder go, and the page says the clip stopped; another session's Stop does not reach it. The child is a
    stand-in that leaves a half-written conversion folder and hangs (a real one would finish in seconds)."""
    import app
    from gpen_core.engine import prepare

    from .worker_jobs import conversion_that_hangs

    monkeypatch.setattr(prepare, "prepare_in_child", conversion_that_hangs)
    clip = make_clip(tmp_path / "long.mp4", gradient_frames(6))
    shown: list[str] = []
    outcome: list[tuple] = []
    visitor = threading.Thread(target=lambda: outcome.append(_run(clip, shown, "visitor")))
    visitor.start()
    deadline = time.monotonic() + 60
    while not list(home.rglob(".convert-*")):
        assert time.monotonic() < deadline and visitor.is_alive(), shown
        time.sleep(0.05)
    assert not app.STATE.stops.stop("someone else") and visitor.is_alive()
    assert app.STATE.stops.stop("visitor")
    t0 = time.monotonic()
    visitor.join(30)
    assert not visitor.is_alive() and time.monotonic() - t0 < 5
    assert outcome and outcome[0][2].startswith("Stopped: 0 frames restored; nothing kept"), outcome
    assert not (home / "openvino").exists(), list(home.rglob("*"))  # the child's folders went with it
    assert not results.exists() or not list(results.iterdir())
