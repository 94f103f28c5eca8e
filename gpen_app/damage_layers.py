"""Inpainting's damage painted in an image editor, as one mask: every file it hands over is checked by its header
(:func:`check_editor_files`) whatever the task, a layer decoded, with the upload limits, only when used."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpen_core.errors import InputError
from gpen_core.images.decode import DEFAULT_LIMITS, InputLimits, decode_image, probe_image

# The page's editor has one layer for the damage; an API caller may send a few (decoded one at a time).
MAX_LAYERS = 4


def _named_layers(layers: Sequence[Any]) -> list[tuple[str, Any]]:
    """(the name a message gives it, its file) for each layer sent; InputError past :data:`MAX_LAYERS`."""
    files = [p for p in layers if p]
    if len(files) > MAX_LAYERS:
        raise InputError(f"The editor sent {len(files)} layers; the damage may be painted on at most {MAX_LAYERS}.")
    return [("The damage layer" if len(files) == 1 else f"Damage layer {i}", p) for i, p in enumerate(files, 1)]


def damage_from_layers(layers: Sequence[str | None], limits: InputLimits = DEFAULT_LIMITS) -> np.ndarray | None:
    """The strokes of the editor's ``layers`` (image files) as a uint8 H×W mask (255 = damaged), or None when nothing
    is painted: any pixel a layer covers (alpha above 0; an opaque layer: a channel over 127). :class:`InputError`
    naming the layer for a file that is not an image within the limits, layers of different sizes, or more than
    :data:`MAX_LAYERS`."""
    painted: np.ndarray | None = None
    for name, path in _named_layers(layers):
        try:
            layer = decode_image(path, limits)
        except InputError as exc:
            raise InputError(f"{name}: {exc}") from None
        hit = layer.alpha > 0 if layer.alpha is not None else layer.rgb.max(axis=2) > 127
        del layer
        if painted is not None and hit.shape != painted.shape:
            raise InputError(f"{name} is {hit.shape[1]}×{hit.shape[0]} but the first is {painted.shape[1]}×{painted.shape[0]}: "
                             "paint every layer at the photo's size")
        painted = hit if painted is None else (painted | hit)
    if painted is None or not painted.any():
        return None
    return painted.astype(np.uint8) * 255


def check_editor_files(value: Mapping[str, Any] | None, limits: InputLimits = DEFAULT_LIMITS) -> None:
    """Every file the editor handed over (``{"background", "layers", "composite"}``, paths) is an image within
    the upload limits, or :class:`InputError` names the part. Headers only: a task that never reads the editor
    pays kilobytes for it, yet a bomb sent as its background gets our message, not silence."""
    if not value:
        return
    parts = [("The editor's background", value.get("background")), *_named_layers(value.get("layers") or []),
             ("The editor's composite", value.get("composite"))]
    for name, path in parts:
        if not path:
            continue
        try:
            probe_image(str(path), limits)
        except InputError as exc:
            raise InputError(f"{name}: {exc}") from None
