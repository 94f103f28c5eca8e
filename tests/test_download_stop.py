"""The app's Stop download button: it cancels the queued event and stops the file being fetched, nothing installed."""

from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace

import pytest

import app
from gpen_core.weights import lookup as weights

from .test_weights_install import _Drip


def test_the_stop_button_cancels_the_download_event_and_shows_only_while_one_runs() -> None:
    stop = next(b for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == "stop-download")
    start = next(b for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == "download-weights")
    assert not stop.visible  # nothing to stop until a download starts
    [download] = [k for k, f in app.demo.fns.items() if getattr(f.fn, "__name__", "") == "download_weights"]
    deps = app.demo.config["dependencies"]

    def handlers(block, event: str) -> list:
        return [d for d in deps if [block._id, event] in [list(t) for t in d["targets"]]]

    assert any(download in d["cancels"] for d in handlers(stop, "click"))  # Gradio files the cancel as its own dependency
    [on_stop] = [app.demo.fns[d["id"]] for d in handlers(stop, "click") if app.demo.fns[d["id"]].fn is not None]
    [on_start] = [app.demo.fns[d["id"]] for d in handlers(start, "click")]  # shows Stop, then downloads, then hides Stop
    assert [o._id for o in on_start.outputs] == [stop._id] and on_start.fn()["visible"] is True
    after = [f for f in app.demo.fns.values() if f.trigger_after == download]
    assert after and stop._id in [o._id for o in after[0].outputs]
    with app.STATE.downloads.own("visitor") as token:  # a download of this session running
        assert on_stop.fn("downloads", SimpleNamespace(session_hash="visitor"))["visible"] is False  # hides itself ...
        assert token.is_set()  # ... and stops the fetch


def test_stop_ends_a_running_download_and_the_panel_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(v, raising=False)
    got: dict[str, object] = {}
    with _Drip(total=50_000_000, chunk=8192, every_s=0.02) as drip:
        spec = dataclasses.replace(weights.REGISTRY["GPEN-BFR-256"], urls=(drip.url,), modelscope=None)
        monkeypatch.setitem(weights.REGISTRY, "GPEN-BFR-256", spec)
        started = threading.Event()

        def progress(f: float, desc: str | None = None) -> None:
            if f > 0:
                started.set()

        mine = SimpleNamespace(session_hash="downloading-visitor")
        t = threading.Thread(target=lambda: got.update(out=app.download_weights("low", "default", "default", True,
                                                                                   progress=progress, request=mine)), daemon=True)
        t.start()
        assert started.wait(60), "the download never started"
        # Another visitor's Stop (their own page, no download of theirs running) leaves this download alone.
        app.stop_own("downloads", SimpleNamespace(session_hash="another-visitor"))
        t.join(1.0)
        assert t.is_alive(), "another visitor's Stop ended this visitor's download"
        app.stop_own("downloads", mine)  # what this visitor's Stop button does
        t.join(60)
        assert not t.is_alive(), "the download did not stop"
    panel, button, _ = got["out"]  # type: ignore[misc]
    assert "Download stopped; nothing was installed (GPEN-BFR-256" in panel
    folder = weights.models_dir()
    assert not any(p.name.startswith((".GPEN-BFR-256", "GPEN-BFR-256")) for p in folder.iterdir())
