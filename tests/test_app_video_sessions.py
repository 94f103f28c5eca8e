"""The Video tab's work belongs to its visitor: a Stop ends only the session's own clip, and a clip whose
visitor went away stops within a few frames and leaves nothing behind, so the next request runs at once.

The app is served in-process (as in test_app_client); the clip's frames go through a stand-in engine
that takes a known time a frame (no network), so what is measured is the app's wiring, not the model.
"""

from __future__ import annotations

import functools
import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import app
from gpen_core.video.engine_seam import FrameOut

from .videoclips import gradient_frames, make_clip

FRAMES = 120
SECONDS_A_FRAME = 0.05  # the whole clip: 6 s of engine time


class Slow:
    """The engine stand-in: no faces, each frame inverted after a fixed wait; counts the frames it restored."""

    device = "cpu"
    delay = SECONDS_A_FRAME  # 0 where the test needs only the outcome

    def __init__(self) -> None:
        self.restored = 0

    def detect(self, rgb: np.ndarray) -> list:
        return []

    def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
        time.sleep(self.delay)
        self.restored += 1
        return FrameOut(255 - rgb, ())


@pytest.fixture()
def engines(monkeypatch: pytest.MonkeyPatch) -> list[Slow]:
    """Every clip the app restores in this test goes through its own :class:`Slow` (listed in start order)."""
    from gpen_core.video import stream

    made: list[Slow] = []
    real = stream.restore_video

    def with_slow_engine(*args, **kwargs):
        made.append(Slow())
        return real(*args, **kwargs, engine=made[-1])

    monkeypatch.setattr(stream, "restore_video", functools.wraps(real)(with_slow_engine))
    return made


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "visitor clip.mp4", gradient_frames(FRAMES))


@pytest.fixture()
def results(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The folder this test's clips are written under (the app's own results folder is shared by every app on
    the machine run by the same user: other runs' folders would come and go in it). In the system's temp
    folder, the one Gradio serves files from (pytest's tmp_path is elsewhere when a worker has a TMPDIR)."""
    from gpen_app import video_tab

    folder, real = Path(tempfile.mkdtemp(prefix="gpen-test-results-")), video_tab.results_path
    monkeypatch.setattr(video_tab, "results_path", lambda _app_dir, source, mode: real(folder, source, mode))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _folders(results: Path) -> set[Path]:
    return set(results.glob("video-*")) if results.exists() else set()


def _wait(condition, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def _fn_index(api_name: str) -> int:
    return next(i for i, d in app.demo.fns.items() if d.api_name == api_name)


def _press_stop(server_url: str, session: str, listen: bool = True) -> dict:
    """The Video tab's Stop as the page sends it (a private event: the page's Origin), for ``session``; its outcome
    (``listen``: read it from the session's stream, which must then be no one else's)."""
    button = next(b._id for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == "video-stop")
    index = next(i for i, d in app.demo.fns.items() if any(t[0] == button for t in d.targets))
    body = {"data": [], "fn_index": index, "session_hash": session, "event_data": None, "trigger_id": None}
    r = httpx.post(f"{server_url}/gradio_api/queue/join", json=body, headers={"Origin": server_url}, timeout=30)
    assert r.status_code == 200, r.text[:300]
    if not listen:
        return {"success": True}
    with httpx.stream("GET", f"{server_url}/gradio_api/queue/data", params={"session_hash": session}, timeout=60) as s:
        for line in s.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_completed":
                return json.loads(line[5:])
    raise AssertionError("the Stop event never completed")


def test_a_stop_ends_only_its_own_sessions_clip(server_url: str, engines: list[Slow], clip: Path, results: Path) -> None:
    from gradio_client import Client, handle_file

    before = _folders(results)
    a = Client(server_url, verbose=False)
    job = a.submit(handle_file(str(clip)), "low", api_name="/restore_video")
    _wait(lambda: engines and engines[0].restored >= 3)
    other = secrets.token_hex(6)  # another visitor's page: its Stop must not reach A's clip
    assert _press_stop(server_url, other).get("success") is True
    video, _, md, _, record = job.result(timeout=60)
    assert engines[0].restored == FRAMES and record["frames"] == FRAMES, md
    assert Path(video).stat().st_size > 0 and "Measured for this clip" in md
    # A's own Stop ends A's clip: said as an outcome (not an error), and nothing of it kept
    job = a.submit(handle_file(str(clip)), "low", api_name="/restore_video")
    _wait(lambda: len(engines) == 2 and engines[1].restored >= 3)
    _press_stop(server_url, a.session_hash, listen=False)  # A's client reads A's stream
    video, _, md, _, record = job.result(timeout=60)
    assert video is None and record in ({}, None) and md.startswith("Stopped: "), md
    assert engines[1].restored < FRAMES / 2
    assert "frames restored; nothing kept" in md and f"of {FRAMES} frames" in md
    assert len(_folders(results) - before) == 1  # the finished clip's folder; the stopped one's is gone
    assert app.STATE.stops.running() == 0


def _upload(server_url: str, path: Path) -> dict:
    with path.open("rb") as f:
        r = httpx.post(f"{server_url}/gradio_api/upload", files={"files": (path.name, f, "video/mp4")}, timeout=30)
    r.raise_for_status()
    return {"path": r.json()[0], "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}


def test_a_clip_whose_visitor_left_stops_and_leaves_nothing(server_url: str, engines: list[Slow], clip: Path,
                                                            results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradio_client import Client, handle_file

    before = _folders(results)
    session = secrets.token_hex(6)
    # the clip, the mode, then start, end, face check, faces to restore and the page's state, as the page sends them
    body = {"data": [_upload(server_url, clip), "low", 0, 0, True, [], None, True, False], "fn_index": _fn_index("restore_video"), "session_hash": session,
            "event_data": None, "trigger_id": None}
    assert httpx.post(f"{server_url}/gradio_api/queue/join", json=body, timeout=30).status_code == 200
    with httpx.stream("GET", f"{server_url}/gradio_api/queue/data", params={"session_hash": session}, timeout=60) as s:
        for _ in s.iter_lines():
            if engines and engines[0].restored >= 5:
                break  # the visitor closes the page: its stream ends here
    left_at = engines[0].restored

    def still() -> bool:  # the clip's engine no longer restores
        n = engines[0].restored
        time.sleep(5 * SECONDS_A_FRAME)
        return engines[0].restored == n

    _wait(still, timeout=10)
    assert engines[0].restored - left_at <= 25, (left_at, engines[0].restored)  # a few frames (50 ms each), not the 120
    _wait(lambda: app.STATE.stops.running() == 0, timeout=10)
    assert _folders(results) == before  # what the clip wrote is gone
    # the next visitor's request runs at once (the lane is free: the left clip's 115 other frames, 5.8 s, are not
    # waited for), and to its end
    monkeypatch.setattr(Slow, "delay", 0.0)
    t0 = time.monotonic()
    video, _, md, _, record = Client(server_url, verbose=False).predict(handle_file(str(clip)), "low", api_name="/restore_video")
    took = time.monotonic() - t0
    assert record["frames"] == FRAMES and engines[1].restored == FRAMES
    assert took < FRAMES * SECONDS_A_FRAME * 0.75, took


def _completed(server_url: str, session: str) -> dict:
    with httpx.stream("GET", f"{server_url}/gradio_api/queue/data", params={"session_hash": session}, timeout=60) as s:
        for line in s.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_completed":
                return json.loads(line[5:])
    raise AssertionError("the event never completed")


def test_a_file_that_is_no_video_is_refused_by_its_own_name_in_plain_words(server_url: str, tmp_path: Path) -> None:
    """The pop-up (what API clients read) names the upload as its visitor knows it, never the server's temp
    path, in plain text (no Markdown escapes, no panel footer), and closes by itself."""
    bad = tmp_path / "notes.mp4"
    bad.write_bytes(b"hello, this is text")
    session = secrets.token_hex(6)
    body = {"data": [_upload(server_url, bad), "low", 0, 0, True, [], None, True, False], "fn_index": _fn_index("restore_video"), "session_hash": session,
            "event_data": None, "trigger_id": None}
    assert httpx.post(f"{server_url}/gradio_api/queue/join", json=body, timeout=30).status_code == 200
    done = _completed(server_url, session)
    assert done["success"] is False
    text, duration = done["output"]["error"], done["output"].get("duration")
    assert text.startswith("Cannot use this input. notes.mp4 is not a video ("), text
    assert str(app.TEMP_ROOT) not in text and "\\(" not in text and "Nothing was restored" not in text, text
    assert isinstance(duration, (int, float)) and 5 <= duration <= 60, duration  # a refusal's pop-up closes


def test_the_documented_restore_video_example_runs_as_written(server_url: str, engines: list[Slow], clip: Path,
                                                              capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/app-server.md's /restore_video block (the README points to it), with only the address and the clip changed."""
    import re

    from .conftest import ROOT

    monkeypatch.setattr(Slow, "delay", 0.0)  # only the outcome matters here
    doc = (ROOT / "docs" / "app-server.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- api-video-example:start -->\s*```python\n(.*?)```\s*<!-- api-video-example:end -->", doc, re.S)
    assert block, "docs/app-server.md has no api-video-example block"
    code = block.group(1)
    assert 'Client("http://127.0.0.1:7860/")' in code and 'handle_file("clip.mp4")' in code and "faces-only\"" not in code
    code = code.replace('"http://127.0.0.1:7860/"', repr(server_url)).replace('"clip.mp4"', repr(str(clip)))
    scope: dict[str, object] = {}
    exec(compile(code, "docs/app-server.md", "exec"), scope)  # noqa: S102 - our own docs
    record = scope["record"]
    assert isinstance(record, dict) and record["frames"] == FRAMES and Path(str(scope["video"])).suffix == ".mp4"
    assert str(FRAMES) in capsys.readouterr().out
    # Named as a photo's download is: safe characters, and the mode that ran ("auto" was asked)
    assert Path(str(scope["video"])).name == f"visitor_clip_gpen_{record['mode']}.mp4" and record["mode"] != "auto"


def test_the_identity_and_turned_switches_reach_the_clips_options(server_url: str, engines: list[Slow], clip: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The Video tab's Identity check switch, as /restore_video's input: off is the request's "off", on (its
    default) the photo tab's "auto" (every mode but low, where dlib is installed); and its Search turned faces
    switch, the last input: off (default) searches each frame upright, on turned too (--orientations)."""
    from gradio_client import Client, handle_file

    from gpen_core.video import stream

    monkeypatch.setattr(Slow, "delay", 0.0)
    asked: list[tuple[str, bool]] = []
    wrapped = stream.restore_video

    def spy(*args, **kwargs):
        asked.append((args[3].identity, args[3].orientations))  # (src, dst, restorer, options, ...)
        return wrapped(*args, **kwargs)

    monkeypatch.setattr(stream, "restore_video", spy)
    client = Client(server_url, verbose=False)
    client.predict(handle_file(str(clip)), "auto", api_name="/restore_video")
    client.predict(handle_file(str(clip)), "auto", 0, 0, True, [], False, api_name="/restore_video")
    client.predict(handle_file(str(clip)), "auto", 0, 0, True, [], True, True, api_name="/restore_video")
    assert asked == [("auto", False), ("off", False), ("auto", True)]
    assert len(engines) == 3


def test_each_clip_sweeps_the_apps_results_older_than_its_age(engines: list[Slow], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A clip's folder holds files Gradio's clean-up never learns of where no page shows them (an API caller's
    copy of the original span): each clip sweeps the app's results older than TEMP_MAX_AGE_S first, as each photo
    restore does, so a server that only restores clips keeps nothing past the hour docs/serving.md promises."""
    from types import SimpleNamespace

    from gpen_core.images import outputs

    monkeypatch.setattr(Slow, "delay", 0.0)
    swept: list[tuple[Path, float]] = []
    real = outputs.sweep
    monkeypatch.setattr(outputs, "sweep", lambda folder, age: swept.append((Path(folder), age)) or real(folder, age))
    handler = next(d.fn for d in app.demo.fns.values() if d.api_name == "restore_video")
    short = make_clip(tmp_path / "short.mp4", gradient_frames(3))
    out = handler(str(short), "low", 0, 0, True, [], [], False, False, progress=lambda *a, **k: None,
                  request=SimpleNamespace(session_hash="visitor"))
    try:
        assert Path(out[0]).is_file() and Path(out[0]).is_relative_to(app.RESULTS_DIR), out[0]  # swept before, kept
        assert swept == [(app.RESULTS_DIR, app.TEMP_MAX_AGE_S)], swept
    finally:
        shutil.rmtree(Path(out[0]).parent, ignore_errors=True)
