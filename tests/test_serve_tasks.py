"""Ray Serve's HTTP route takes GPEN's other tasks: ``task`` (and ``aligned``) in the query or a form,
inpainting's damage mask as a multipart file; bad values answer 400 with the fix, before any work.

The deployment is driven without a Ray cluster: a real Starlette Request over a built body, the
replica's ``restore`` replaced by a recorder (the engine's own task handling is tested elsewhere).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gpen_core.scaleout import serve

pytest.importorskip("starlette")


def _request(body: bytes, query: str = "", content_type: str = "application/octet-stream") -> Any:
    from starlette.requests import Request

    sent = {"done": False}

    async def receive() -> dict[str, Any]:
        if sent["done"]:
            return {"type": "http.disconnect"}
        sent["done"] = True
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/restore", "query_string": query.encode(),
             "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]}
    return Request(scope, receive)


def _multipart(files: dict[str, bytes], fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = "gpen-test-boundary"
    parts = []
    for name, data in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}.png"\r\n'
                     "Content-Type: image/png\r\n\r\n".encode() + data + b"\r\n")
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def _deployment() -> tuple[Any, list[tuple[bytes, Any, Any]]]:
    from .test_app import _fake_result

    calls: list[tuple[bytes, Any, Any]] = []
    dep = serve.RestoreDeployment.__new__(serve.RestoreDeployment)  # no Restorer: the recorder stands in

    def restore(image: bytes, options: Any = None, mask: Any = None) -> serve.Served:
        calls.append((image, options, mask))
        return serve.Served(_fake_result(), "replica-1", "node0001", 4242)

    dep.restore = restore  # type: ignore[method-assign]
    return dep, calls


def test_the_task_in_the_query_reaches_the_engine() -> None:
    dep, calls = _deployment()
    resp = asyncio.run(dep(_request(b"photo bytes", "mode=balanced&task=colorize")))
    assert resp.status_code == 200, resp.body
    (image, opts, mask), = calls
    assert image == b"photo bytes" and mask is None
    assert opts.task == "colorize" and opts.mode == "balanced" and not opts.aligned


def test_seg2face_with_aligned_is_accepted_and_without_it_refused_with_the_fix() -> None:
    dep, calls = _deployment()
    assert asyncio.run(dep(_request(b"map", "task=seg2face&aligned=1"))).status_code == 200
    assert calls[-1][1].task == "seg2face" and calls[-1][1].aligned
    resp = asyncio.run(dep(_request(b"map", "task=seg2face")))
    assert resp.status_code == 400 and len(calls) == 1
    assert "aligned inputs only" in json.loads(resp.body)["error"]


@pytest.mark.parametrize(("query", "says"), [
    ("task=colour", "unknown task 'colour'; choose one of: enhance, colorize, inpaint, seg2face"),
    ("task=colorize&mode=low", "low mode has no plan for the colorize task"),
    ("task=inpaint&aligned=maybe", "aligned must be true or false"),
    ("task=inpaint&strength=2", "unknown field strength"),
])
def test_a_bad_task_request_answers_400_naming_the_fix_without_restoring(query: str, says: str) -> None:
    dep, calls = _deployment()
    resp = asyncio.run(dep(_request(b"photo", query)))
    assert resp.status_code == 400
    assert says in json.loads(resp.body)["error"]
    assert calls == []


def test_inpaint_takes_the_photo_and_its_damage_mask_as_a_multipart_form() -> None:
    pytest.importorskip("python_multipart")
    dep, calls = _deployment()
    body, ctype = _multipart({"image": b"PHOTO", "mask": b"MASK"}, {"task": "inpaint", "mode": "quality"})
    resp = asyncio.run(dep(_request(body, content_type=ctype)))
    assert resp.status_code == 200, resp.body
    (image, opts, mask), = calls
    assert (image, mask) == (b"PHOTO", b"MASK")
    assert opts.task == "inpaint" and opts.mode == "quality"


def test_a_form_field_wins_over_the_query_and_a_mask_needs_inpaint() -> None:
    pytest.importorskip("python_multipart")
    dep, calls = _deployment()
    body, ctype = _multipart({"image": b"PHOTO"}, {"task": "colorize"})
    assert asyncio.run(dep(_request(body, "task=inpaint", ctype))).status_code == 200
    assert calls[-1][1].task == "colorize" and calls[-1][2] is None
    body, ctype = _multipart({"image": b"PHOTO", "mask": b"MASK"}, {"task": "colorize"})
    resp = asyncio.run(dep(_request(body, content_type=ctype)))
    assert resp.status_code == 400 and "a damage mask is for task=inpaint" in json.loads(resp.body)["error"]
    body, ctype = _multipart({"mask": b"MASK"}, {"task": "inpaint"})
    resp = asyncio.run(dep(_request(body, content_type=ctype)))
    assert resp.status_code == 400 and "file field named 'image'" in json.loads(resp.body)["error"]
    assert len(calls) == 1


def test_the_app_client_sends_the_mask_to_the_replica() -> None:
    import numpy as np

    from .test_app import _fake_result

    sent: list[tuple[Any, ...]] = []

    class Handle:
        def __init__(self) -> None:
            self.restore = self

        def remote(self, *args: Any) -> "Handle":
            sent.append(args)
            return self

        def result(self) -> serve.Served:
            return serve.Served(_fake_result(), "replica-1", "node0001", 4242)

    pytest.importorskip("ray.exceptions", reason="needs Ray (requirements-ray.txt)")
    client = serve.RayRestorer(None)
    client._handle = Handle()
    damage = np.zeros((300, 400), np.uint8)
    client(b"photo", None, mask=damage)
    assert sent[0][0] == b"photo" and sent[0][2] is damage
