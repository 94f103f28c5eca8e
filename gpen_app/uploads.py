"""Uploads that arrive as bytes (a pasted image's ``data:`` URL), written as sent for the decoder to read."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from gpen_core.errors import InputError
from gpen_core.images.limits import DEFAULT_LIMITS, InputLimits, too_big
from gpen_core.images.outputs import save_result

_UNREADABLE = "The pasted image could not be read; save it as a file and upload that."


def max_event_body_bytes(limits: InputLimits = DEFAULT_LIMITS) -> int:
    """The largest request body an event needs: a pasted image at the file limit travels inside it as
    base64 (4 bytes per 3), plus 1 MB for the other arguments. Files travel through the upload route."""
    return limits.max_file_bytes * 4 // 3 + 1_000_000


def save_data_url(url: str, folder: Path, limits: InputLimits = DEFAULT_LIMITS, *, max_age_s: float | None = None) -> Path:
    """Write a base64 ``data:`` URL's bytes, as sent, to a fresh file ``p-XXXX/pasted`` under ``folder``; its path.
    :class:`InputError` when it is not base64 or over ``limits.max_file_bytes`` (from its length, before decoding).
    ``max_age_s``: files in ``folder`` older than that go first (nothing else deletes them while a server runs)."""
    head, _, data = url.partition(",")
    if not head.startswith("data:") or ";base64" not in head:
        raise InputError(_UNREADABLE)
    estimate = len(data) * 3 // 4
    if estimate > limits.max_file_bytes:
        raise too_big(estimate, limits)
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        raise InputError(_UNREADABLE) from None
    return save_result(folder, "pasted", raw, prefix="p-", max_age_s=max_age_s)


def save_bytes(raw: bytes, name: str, folder: Path, *, max_age_s: float | None = None) -> Path:
    """Write bytes that arrived in a request (an editor's layer), as sent, to a fresh file ``name`` under
    ``folder``; its path. Nothing is decoded: the decoder reads it, with its limits, only when used.
    ``max_age_s``: as :func:`save_data_url`."""
    return save_result(folder, Path(name).name, raw, prefix="b-", max_age_s=max_age_s)
