"""The app served in-process and called the way API users call it: gradio_client and raw HTTP."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

import app

from .conftest import ROOT
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"
ARGS = ("low", "default", "default", 1.0, 0.9, 50, False)  # mode, model, detector, alpha, threshold, max faces, aligned


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    _, url, _ = app.demo.launch(server_port=free_port(), prevent_thread_lock=True, quiet=True, **app.launch_options())
    try:
        yield url
    finally:
        app.demo.close()


@pytest.fixture(scope="module")
def client(server_url: str):
    from gradio_client import Client

    return Client(server_url, verbose=False)


def test_restore_through_gradio_client(client, low_mode_home: Path) -> None:
    from gradio_client import handle_file

    slider, download, md, gallery, record = client.predict(handle_file(str(EXAMPLE)), *ARGS, api_name="/restore")

    before, after = (Path(p) for p in slider)
    with Image.open(before) as b, Image.open(after) as a, Image.open(EXAMPLE) as src:
        assert b.format == a.format == "PNG"  # lossless, not Gradio's default WebP
        assert b.size == a.size == src.size
    with Image.open(download) as d:
        assert d.format == "JPEG" and d.size == (384, 384)
    assert record["mode"] == "low" and record["faces"] == len(gallery) >= 1
    assert record["peaks"]["rss_bytes"] > record["peaks"]["baseline_rss_bytes"] > 0
    assert record["timings"]["total_s"] > 0
    assert "Peak RAM" in md and f"| Faces | {record['faces']} |" in md


def test_missing_weights_reach_the_client_as_the_fix(client) -> None:
    from gradio_client import handle_file

    with pytest.raises(Exception) as e:
        client.predict(handle_file(str(EXAMPLE)), *ARGS, api_name="/restore")
    assert "GPEN-BFR-256" in str(e.value) and "python -m gpen_core download" in str(e.value)


def test_only_restore_is_public(client) -> None:
    api = client.view_api(print_info=False, return_format="dict")
    assert list(api["named_endpoints"]) == ["/restore"]


def test_direct_run_skipping_the_queue_is_refused(server_url: str) -> None:
    body = {"data": [None, *ARGS]}
    r = httpx.post(f"{server_url.rstrip('/')}/gradio_api/run/restore", json=body, timeout=30)
    assert 400 <= r.status_code < 500
    assert "queue" in r.text.lower()
