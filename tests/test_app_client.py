"""The app served in-process and called the way API users call it: gradio_client and raw HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from PIL import Image

import app

from .conftest import ROOT
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"
ARGS = ("low", "default", "default", 1.0, 0.9, 50, False)  # mode, model, detector, alpha, threshold, max faces, aligned


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
    # >=: a warm server may restore a small photo in memory an earlier request freed (its peak is then its start)
    assert record["peaks"]["rss_bytes"] >= record["peaks"]["baseline_rss_bytes"] > 0
    assert record["timings"]["total_s"] > 0
    assert "Peak RAM" in md and f"| Faces | {record['faces']} |" in md


def test_missing_weights_reach_the_client_as_the_fix(client) -> None:
    from gradio_client import handle_file

    with pytest.raises(Exception) as e:
        client.predict(handle_file(str(EXAMPLE)), *ARGS, api_name="/restore")
    assert "GPEN-BFR-256" in str(e.value) and "python -m gpen_core download" in str(e.value)


def test_restore_video_through_gradio_client(client, low_mode_home: Path, tmp_path: Path) -> None:
    """The docs/video.md example: a clip in, the restored MP4, the frame pair, the panel and the JSON record out."""
    from gradio_client import handle_file

    from .test_app_video import _clip

    clip = _clip(tmp_path / "clip.mp4", frames=4, fps=2, side=96)
    video, pair, md, _, record = client.predict(handle_file(str(clip)), "low", api_name="/restore_video")
    assert Path(video).suffix == ".mp4" and Path(video).stat().st_size > 0  # a path in gradio_client's temp folder
    assert len(pair) == 2 and "Measured for this clip" in md
    assert record["frames"] == 4 and record["mode"] == "low" and record["audio"] == "none"


def test_restore_video_takes_a_part_and_the_face_check_as_documented(client, low_mode_home: Path, tmp_path: Path) -> None:
    """docs/video.md's positional form: start and end in seconds, then the face check."""
    from gradio_client import handle_file

    from .test_app_video import _clip

    clip = _clip(tmp_path / "clip.mp4", frames=8, fps=2, side=96)  # 4 s
    video, pair, md, _, record = client.predict(handle_file(str(clip)), "low", 1.0, 2.5, False, api_name="/restore_video")
    assert record["frames"] == 3 and Path(video).stat().st_size > 0  # 1.0, 1.5 and 2.0 s


def test_only_restore_is_public(client) -> None:
    api = client.view_api(print_info=False, return_format="dict")
    assert sorted(api["named_endpoints"]) == ["/restore", "/restore_video"]


def test_direct_run_skipping_the_queue_is_refused(server_url: str) -> None:
    body = {"data": [None, *ARGS]}
    r = httpx.post(f"{server_url.rstrip('/')}/gradio_api/run/restore", json=body, timeout=30)
    assert 400 <= r.status_code < 500
    assert "queue" in r.text.lower()


# ------------------------------------------------ raw uploads reach our decoder


def _peak_rss_growth(call) -> tuple[int, object]:
    """(bytes the process's resident set grew above its RSS before ``call``, at its highest, and the call's outcome).

    Server and client share this process. RSS is sampled every millisecond from a thread
    (the engine's own meter resets the kernel's high-water mark inside each request, so
    VmHWM cannot see what happened before the engine ran); a full decode of the bomb
    takes over a second, hundreds of samples.
    """
    import threading

    import psutil

    proc = psutil.Process()
    before = proc.memory_info().rss
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.001)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        outcome: object = call()
    except Exception as exc:  # the refusal is the expected outcome
        outcome = exc
    finally:
        stop.set()
        t.join()
    return peak[0] - before, outcome


def _grey_bomb(path: Path, side: int = 13000) -> Path:
    """A real greyscale PNG of side×side zeros (169 MP for 13000): ~170 KB on disk, 169 MB decoded as L, 507 MB as RGB."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    z = zlib.compressobj(9)
    row = b"\x00" * (side + 1)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path


def test_greyscale_bomb_is_refused_by_our_decoder_before_anything_decodes_it(client, low_mode_home: Path, tmp_path: Path) -> None:
    """Gradio's own image decoding would open a 13000×13000 greyscale PNG in full (+646–792 MB RSS)
    before our limit could refuse it: the raw upload must reach our decoder first."""
    from gradio_client import handle_file

    bomb = _grey_bomb(tmp_path / "grey_bomb.png")
    assert bomb.stat().st_size < 400_000
    grew, outcome = _peak_rss_growth(lambda: client.predict(handle_file(str(bomb)), *ARGS, api_name="/restore"))
    assert isinstance(outcome, Exception), outcome
    assert "13000×13000" in str(outcome) and "50" in str(outcome)  # our decoder's message: the size and the limit
    assert grew <= 150 * 2**20, f"the server's peak grew {grew / 2**20:.0f} MiB before refusing"


def test_16_bit_greyscale_face_is_scaled_not_clipped(client, low_mode_home: Path, tmp_path: Path) -> None:
    """16-bit samples are scaled to 8 bits, not clipped (clipping turns the face all white: mean 255 vs 113)."""
    import numpy as np
    from gradio_client import handle_file

    from .hostile import png16_bytes

    with Image.open(EXAMPLE) as im:
        grey = np.asarray(im.convert("L"))
    face16 = tmp_path / "face16.png"
    face16.write_bytes(png16_bytes(grey.astype(np.uint16) * 257))
    slider, _, md, _, record = client.predict(handle_file(str(face16)), *ARGS, api_name="/restore")
    with Image.open(slider[0]) as b:
        before = np.asarray(b.convert("L"), np.float64)
    assert abs(before.mean() - grey.mean()) < 1.0, (before.mean(), grey.mean())
    assert any("16-bit" in n for n in record["notes"]), record["notes"]


def test_la_png_keeps_its_transparency_in_png_output(client, low_mode_home: Path, tmp_path: Path) -> None:
    """A greyscale PNG with alpha (LA) keeps its transparency in PNG output."""
    import numpy as np
    from gradio_client import handle_file

    with Image.open(EXAMPLE) as im:
        grey = np.asarray(im.convert("L"))
    alpha = np.full(grey.shape, 255, np.uint8)
    alpha[:, :40] = 0  # a transparent strip down the left edge
    la = tmp_path / "face_la.png"
    Image.fromarray(np.dstack([grey, alpha]), "LA").save(la)
    args = (*ARGS, "png")  # output format: PNG
    _, download, _, _, record = client.predict(handle_file(str(la)), *args, api_name="/restore")
    with Image.open(download) as out:
        assert out.format == "PNG" and out.mode in ("RGBA", "LA"), out.mode
        a = np.asarray(out.getchannel("A"))
    assert (a[:, :40] == 0).all() and (a[:, 60:] == 255).all()
    assert record["output_format"] == "png" if "output_format" in record else True


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("empty.png", b"", ("empty", "0 bytes")),
        ("notes.png", b"These are my holiday notes, not a picture.\n", ("not an image",)),
    ],
)
def test_unreadable_uploads_get_our_message_not_gradios(client, tmp_path: Path, name: str, data: bytes, says: tuple[str, ...]) -> None:
    """An empty file or a text file gets our message, not Gradio's "The upstream Gradio app has raised an exception"."""
    from gradio_client import handle_file

    f = tmp_path / name
    f.write_bytes(data)
    with pytest.raises(Exception) as e:
        client.predict(handle_file(str(f)), *ARGS, api_name="/restore")
    text = str(e.value)
    assert "upstream Gradio app" not in text and "Cannot use this input" in text
    for s in says:
        assert s in text, text


def test_a_server_path_in_the_payload_is_not_read(server_url: str) -> None:
    """A client naming a server file instead of uploading one gets no decoder to probe with."""
    from gradio_client import Client

    client = Client(server_url, verbose=False)
    fake = {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}, "orig_name": "passwd.png"}
    with pytest.raises(Exception) as e:
        client.predict(fake, *ARGS, api_name="/restore")
    assert "root:" not in str(e.value)


def test_readme_api_example_runs_as_written(server_url: str, low_mode_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's "Use it from Python / the API" block, with only the address and the photo changed."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- api-example:start -->\s*```python\n(.*?)```\s*<!-- api-example:end -->", readme, re.S)
    assert block, "README has no api-example block"
    code = block.group(1)
    assert 'Client("http://127.0.0.1:7860/")' in code and 'handle_file("photo.jpg")' in code
    code = code.replace('"http://127.0.0.1:7860/"', repr(server_url)).replace('"photo.jpg"', repr(str(EXAMPLE)))
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own README
    record = scope["record"]
    assert isinstance(record, dict) and record["mode"] == "low"  # auto with only low's files here
    with Image.open(scope["download"]) as d:  # type: ignore[arg-type]
        assert d.format == "PNG"
    assert "low" in capsys.readouterr().out


# ------------------------------------------------ what API clients read, what they may call


def test_api_errors_are_plain_text_that_starts_with_the_problem(client, tmp_path: Path) -> None:
    """gradio_client users read the error as sent: no HTML, the problem first (the page formats it with CSS)."""
    from gradio_client import handle_file

    with pytest.raises(Exception) as e:  # no weights in this test's models folder
        client.predict(handle_file(str(EXAMPLE)), *ARGS, api_name="/restore")
    text = str(e.value)
    assert text.startswith("Weights missing. "), text
    assert "python -m gpen_core download" in text
    for tag in ("<strong>", "<br>", "<code>", "<a ", "&lt;", "&#"):
        assert tag not in text, f"{tag!r} in the API error: {text}"
    notes = tmp_path / "notes.png"
    notes.write_bytes(b"not a picture")
    with pytest.raises(Exception) as e:
        client.predict(handle_file(str(notes)), *ARGS, api_name="/restore")
    assert str(e.value).startswith("Cannot use this input. ") and "<" not in str(e.value)


def _png_of_size(path: Path, megabytes: float) -> Path:
    """A real RGB PNG of noise (incompressible) of about ``megabytes`` MB, under the pixel limit."""
    import numpy as np

    side = int((megabytes * 1e6 / 3) ** 0.5)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)).save(path, compress_level=1)
    return path


def test_an_over_size_file_gets_our_message_with_its_size_and_the_limit(server_url: str, client, tmp_path: Path) -> None:
    """A 30 MB PNG: Gradio lets it arrive (its own refusal is only a toast), our decoder names the size and the
    limit, in the panel (the upload's preview) and for API clients."""
    from gradio_client import handle_file

    big = _png_of_size(tmp_path / "big.png", 30.5)
    size_mb = big.stat().st_size / 1e6
    assert 25 < size_mb < app.UPLOAD_MAX_BYTES / 1e6
    with big.open("rb") as f:
        r = httpx.post(f"{server_url.rstrip('/')}/gradio_api/upload", files={"files": ("big.png", f, "image/png")}, timeout=120)
    assert r.status_code == 200, r.text[:300]  # not Gradio's 413
    said = f"The file is {size_mb:.1f} MB; the limit is 25 MB"
    _, _, panel, _, _ = app.preview(str(big))  # what the page shows on upload
    assert said in panel and panel.startswith("### ⚠ Cannot use this input"), panel
    with pytest.raises(Exception) as e:
        client.predict(handle_file(str(big)), *ARGS, api_name="/restore")
    assert said in str(e.value)


def test_an_unknown_run_route_is_404_not_500(server_url: str) -> None:
    r = httpx.post(f"{server_url.rstrip('/')}/gradio_api/run/predict", json={"data": []}, timeout=30)
    assert r.status_code == 404, (r.status_code, r.text[:300])


def _fn_index(name: str) -> int:
    return next(i for i, d in app.demo.fns.items() if d.fn is not None and d.fn.__name__ == name)


def _join(server_url: str, name: str, data: list, headers: dict[str, str] | None = None) -> tuple[httpx.Response, str]:
    import secrets

    session = secrets.token_hex(6)
    body = {"data": data, "fn_index": _fn_index(name), "session_hash": session, "event_data": None, "trigger_id": None}
    return httpx.post(f"{server_url.rstrip('/')}/gradio_api/queue/join", json=body, headers=headers or {}, timeout=30), session


def _events(server_url: str, session: str) -> list[dict]:
    """The queue's messages for ``session`` up to its event's completion."""
    import json

    seen: list[dict] = []
    with httpx.stream("GET", f"{server_url.rstrip('/')}/gradio_api/queue/data", params={"session_hash": session}, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                if seen[-1].get("msg") in ("process_completed", "close_stream", "unexpected_error"):
                    break
    return seen


@pytest.mark.parametrize("name", ["download_weights", "hardware_check", "weights_view", "preview"])
def test_private_events_refuse_calls_that_do_not_come_from_the_page(server_url: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradio hides private events from its API, but its queue runs any event by number for whoever posts it."""
    from gpen_core.weights import lookup as weights

    started: list[str] = []
    monkeypatch.setattr(weights, "download", lambda n, **_: started.append(n))
    data = {"download_weights": ["auto", "GPEN-BFR-2048", "default", False, 1, "enhance"], "hardware_check": [],
            "weights_view": ["auto", "default", "default", False, 1, "enhance"], "preview": [None]}[name]
    r, _ = _join(server_url, name, data)  # as gradio_client or curl sends it: no Origin
    assert r.status_code == 403 and "not part of its API" in r.json()["detail"], (r.status_code, r.text[:300])
    assert started == []
    r, _ = _join(server_url, name, data, {"Origin": "http://evil.example"})
    assert r.status_code == 403


def test_the_page_still_runs_its_private_events(server_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpen_core.weights import lookup as weights

    monkeypatch.setenv("GPEN_HOME", str(tmp_path))  # nothing present: the panel offers a download
    started: list[str] = []
    monkeypatch.setattr(weights, "download", lambda n, **_: started.append(n))
    origin = server_url.rstrip("/")
    r, session = _join(server_url, "download_weights", ["low", "default", "default", False, 1, "enhance"], {"Origin": origin})
    assert r.status_code == 200, r.text[:300]
    done = _events(server_url, session)[-1]
    assert done.get("success") is True, done
    assert started == ["GPEN-BFR-256", "retinaface-mobilenet0.25"]  # low's two files


def test_a_visitor_who_clicked_an_example_still_uploads_raw(tmp_path: Path) -> None:
    """An Example's click sets the photo with a prop update (gr.update), which Gradio answers with a new gr.Image for
    that session, built from the constructor's arguments: Gradio's own preprocess (every later upload opened and
    decoded by Pillow, before our decoder and its limits). The session must keep ours."""
    import asyncio

    from gradio.data_classes import FileData
    from gradio.state_holder import SessionState

    session = SessionState(app.demo)
    clicks = [fn for fn in app.demo.fns.values() if fn.outputs == [app.image_in]]  # the page's Examples, clicked
    assert clicks
    for fn in clicks:
        asyncio.run(app.demo.postprocess_data(fn, fn.fn(fn.inputs[0].preprocess(0)), session))
    notes = tmp_path / "notes.png"
    notes.write_bytes(b"not a picture: our decoder names it, Pillow would fail on it")
    assert session[app.image_in._id].preprocess(FileData(path=str(notes))) == str(notes)  # handed over unopened
