"""The inpainting editor's images reach our decoder and its limits, or nothing decodes them.

Gradio's ``ImageEditor.preprocess`` would open the background, every layer and the composite
with Pillow before the handler runs, whatever the task (gpen_app.gradio_seam.raw_editor).
Server and client share this process: its resident set is sampled while a request runs.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from PIL import Image

import app

from .test_app_client import EXAMPLE, _peak_rss_growth

ARGS = ("low", "default", "default", 1.0, 0.9, 50, False, "default", 1)  # mode … upscale
TEXT = b"These are my holiday notes, not a picture.\n"


@pytest.fixture(scope="module")
def client(server_url: str) -> object:
    from gradio_client import Client

    return Client(server_url, verbose=False)

@pytest.fixture(scope="module")
def clear_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real, fully transparent 13000×13000 RGBA PNG: ~0.7 MB on disk, 676 MB as Gradio's RGBA array."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    side = 13000
    z = zlib.compressobj(9)
    row = b"\x00" * (4 * side + 1)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    path = tmp_path_factory.mktemp("editor") / "layer.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0))
                     + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path


def _editor(background: Path | None = None, layers: tuple[Path, ...] = ()) -> dict:
    from gradio_client import handle_file

    return {"background": handle_file(str(background)) if background else None,
            "layers": [handle_file(str(p)) for p in layers], "composite": None}


def test_layers_the_task_does_not_use_are_checked_by_their_header_only(client, clear_bomb: Path) -> None:
    """enhance with four bomb layers in the editor: refused in our words from the PNG header (each declares
    13000×13000), and the server's memory hardly moves (Gradio's decode: +2.7 GB)."""
    assert clear_bomb.stat().st_size < 1_000_000
    editor = _editor(layers=(clear_bomb,) * 4)
    with pytest.raises(Exception):  # warm: the first request imports the engine
        client.predict(_photo(), *ARGS, "enhance", None, api_name="/restore")
    grew, outcome = _peak_rss_growth(lambda: client.predict(_photo(), *ARGS, "enhance", editor, api_name="/restore"))
    text = str(outcome)
    assert text.startswith("Cannot use this input. Damage layer 1: The image is 13000×13000"), text
    assert "limit is 50 megapixels" in text, text
    assert grew <= 200 * 2**20, f"the server's peak grew {grew / 2**20:.0f} MiB"


def test_an_inpaint_layer_over_the_limits_is_refused_by_our_decoder(client, clear_bomb: Path) -> None:
    grew, outcome = _peak_rss_growth(lambda: client.predict(_photo(), *ARGS, "inpaint", _editor(layers=(clear_bomb,)), api_name="/restore"))
    text = str(outcome)
    assert text.startswith("Cannot use this input. The damage layer: "), text
    assert "13000×13000" in text and "limit is 50 megapixels" in text, text
    assert grew <= 200 * 2**20, f"the server's peak grew {grew / 2**20:.0f} MiB"


@pytest.mark.parametrize("task", ["enhance", "inpaint"])
def test_a_text_file_in_the_editor_gets_our_message_whatever_the_task(client, tmp_path: Path, task: str) -> None:
    """A text file handed over as the editor's background, a layer or the composite, named as an image or
    not: our decoder's words naming the part, never Gradio's "upstream app has raised an exception" nor a
    request that goes on as if nothing had been sent."""
    for name in ("notes.png", "notes.txt"):
        notes = tmp_path / name
        notes.write_bytes(TEXT)
        for part, editor in (("The editor's background", _editor(background=notes)),
                             ("The damage layer", _editor(background=EXAMPLE, layers=(notes,))),
                             ("The editor's composite", {**_editor(background=EXAMPLE), "composite": _file(notes)})):
            with pytest.raises(Exception) as e:
                client.predict(_photo(), *ARGS, task, editor, api_name="/restore")
            text = str(e.value)
            assert "upstream Gradio app" not in text, text
            assert text.startswith(f"Cannot use this input. {part}: The file is not an image: it contains text."), text
            assert text.rstrip().endswith("Choose an image file and try again."), text


def test_images_in_the_editor_let_a_request_go_on(client) -> None:
    """The photo as the background (the page's own value) and no layers: enhance goes on to the engine
    (no weights here: "Weights missing"), and so does inpaint with nothing painted."""
    for task in ("enhance", "inpaint"):
        with pytest.raises(Exception) as e:
            client.predict(_photo(), "balanced", *ARGS[1:], task, _editor(background=EXAMPLE), api_name="/restore")
        assert str(e.value).startswith("Weights missing"), str(e.value)


def test_the_editor_files_are_checked_by_header_in_plain_values(tmp_path: Path, clear_bomb: Path) -> None:
    from gpen_core.errors import InputError
    from gpen_app.damage_layers import check_editor_files

    from gpen_core.images.decode import probe_image

    with Image.open(EXAMPLE) as im:
        size = im.size
    assert probe_image(str(EXAMPLE)) == ("JPEG", size)  # the header only
    notes = tmp_path / "bg.png"
    notes.write_bytes(TEXT)
    check_editor_files(None)
    check_editor_files({"background": str(EXAMPLE), "layers": [], "composite": None})
    with pytest.raises(InputError, match=r"^The editor's background: The file is not an image: it contains text\."):
        check_editor_files({"background": str(notes), "layers": [], "composite": None})
    with pytest.raises(InputError, match=r"^Damage layer 2: The image is 13000×13000"):
        check_editor_files({"background": str(EXAMPLE), "layers": [str(EXAMPLE), str(clear_bomb)], "composite": None})
    with pytest.raises(InputError, match=r"^The editor sent 5 layers; the damage may be painted on at most 4\."):
        check_editor_files({"background": None, "layers": [str(EXAMPLE)] * 5, "composite": None})


def test_a_layer_of_another_size_is_refused_with_both_sizes(client, tmp_path: Path) -> None:
    """Never stretched to the photo (the CLI's --mask is refused the same way)."""
    with Image.open(EXAMPLE) as im:
        w, h = im.size
    layer = np.zeros((h // 2, w // 2, 4), np.uint8)
    layer[10:20, 10:40] = 255
    path = tmp_path / "half.png"
    Image.fromarray(layer, "RGBA").save(path)
    with pytest.raises(Exception) as e:
        client.predict(_photo(), "balanced", *ARGS[1:], "inpaint", _editor(layers=(path,)), api_name="/restore")
    text = str(e.value)
    assert f"{w // 2}×{h // 2}" in text and f"{w}×{h}" in text and "photo's size" in text, text


def _photo() -> object:
    return _file(EXAMPLE)


def _file(path: Path) -> object:
    from gradio_client import handle_file

    return handle_file(str(path))


def test_the_pages_blobs_become_files_and_leave_the_editor(tmp_path: Path) -> None:
    """The page's editor sends its images beforehand (accept_blobs) and then only their id: each blob is
    written as sent, none decoded, and the editor's store forgets them (it would grow with every edit)."""
    from gradio.components.image_editor import EditorData, EditorDataBlobs

    editor = app.damage_in
    editor.blob_storage["abc"] = EditorDataBlobs(background=b"bg-bytes", layers=[None, TEXT], composite=None)
    value = editor.preprocess(EditorData(id="abc"))
    assert value["background"] and Path(value["background"]).read_bytes() == b"bg-bytes"
    assert [Path(p).read_bytes() for p in value["layers"]] == [TEXT] and value["composite"] is None
    assert "abc" not in editor.blob_storage
    with pytest.raises(gr.Error, match="no longer on the server"):  # never "nothing painted" in silence
        editor.preprocess(EditorData(id="gone"))


def test_the_editors_blob_store_stays_bounded() -> None:
    """Blobs posted under fresh ids without an event never read them: the oldest go, by count and by bytes."""
    from gradio.components.image_editor import EditorDataBlobs

    from gpen_app.gradio_seam import BoundedBlobs

    store = BoundedBlobs(lambda: False, max_ids=3, max_bytes=1000)
    for i in range(10):
        store[f"id{i}"] = EditorDataBlobs(background=b"x" * 100, layers=[], composite=None)
    assert list(store) == ["id7", "id8", "id9"]
    store["big"] = EditorDataBlobs(background=b"x" * 900, layers=[b"y" * 50], composite=None)
    assert list(store) == ["big"]  # 950 + 100 would pass 1000: the older ones go, the newest stays
    assert isinstance(app.damage_in.blob_storage, BoundedBlobs)


@pytest.mark.parametrize("task", ["inpaint", "enhance"])
def test_a_visitors_editor_stays_the_hardened_one_after_the_page_updates_it(task: str) -> None:
    """Each upload and task change sets the editor's value and visibility in the visitor's session. Gradio answers a
    prop update (gr.update) with a new editor for that session, built from the constructor's arguments: Gradio's own
    preprocess (every layer opened by Pillow) and an unbounded blob store. The session must keep ours."""
    import asyncio

    from gradio.components.image_editor import EditorData, EditorDataBlobs
    from gradio.state_holder import SessionState

    from gpen_app.gradio_seam import BoundedBlobs

    session = SessionState(app.demo)
    for i, fn in app.demo.fns.items():
        if app.damage_in in fn.outputs:  # the page's events that set the editor, as a photo arrives
            value = fn.fn(*(task if c is app.task_in else str(EXAMPLE) for c in fn.inputs))
            asyncio.run(app.demo.postprocess_data(fn, value, session))
    editor = session[app.damage_in._id]
    assert isinstance(editor.blob_storage, BoundedBlobs)
    editor.blob_storage["sess"] = EditorDataBlobs(background=None, layers=[TEXT], composite=None)
    value = editor.preprocess(EditorData(id="sess"))  # Gradio's own would open the text with Pillow and fail
    assert [Path(p).read_bytes() for p in value["layers"]] == [TEXT]
