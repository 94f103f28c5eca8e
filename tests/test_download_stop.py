"""The app's Stop download button: it cancels the queued event and stops the file being fetched, nothing installed."""

from __future__ import annotations

import dataclasses
import threading

import pytest

import app
from gpen_core.weights import lookup as weights

from .test_weights_install import _Drip


def test_the_stop_button_cancels_the_download_event() -> None:
    stop = next(b for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == "stop-download")
    [download] = [k for k, f in app.demo.fns.items() if getattr(f.fn, "__name__", "") == "download_weights"]
    deps = app.demo.config["dependencies"]
    assert any(download in d.get("cancels", []) and [stop._id, "click"] in [list(t) for t in d["targets"]] for d in deps)
    assert any(f.fn == app.STATE.download_stop.set for f in app.demo.fns.values())


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

        t = threading.Thread(target=lambda: got.update(out=app.download_weights("low", "default", "default", True,
                                                                                   progress=progress)), daemon=True)
        t.start()
        assert started.wait(60), "the download never started"
        app.STATE.download_stop.set()  # what the Stop button's click does
        t.join(60)
        assert not t.is_alive(), "the download did not stop"
    panel, button, _ = got["out"]  # type: ignore[misc]
    assert "Download stopped; nothing was installed (GPEN-BFR-256" in panel
    folder = weights.models_dir()
    assert not any(p.name.startswith((".GPEN-BFR-256", "GPEN-BFR-256")) for p in folder.iterdir())
