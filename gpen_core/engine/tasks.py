"""The engine's steps around GPEN's other tasks: what the faces are taken from and colorization's last step. The
image operations are :mod:`gpen_core.faces.tasks`'; this module decides and words the notes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gpen_core.errors import InputError


def task_input(task: Any, rgb: np.ndarray, mask: np.ndarray | None, aligned: bool, notes: list[str]):
    """(the image the faces are taken from, inpainting's damage (faces.tasks.Damage) or None, colorization's grey photo or None)."""
    import cv2

    from gpen_core.faces import tasks

    if task.name == "colorize":
        grey, had_colour = tasks.to_grey(rgb)
        if had_colour:
            notes.append("the photo had colour: it was made grey first, as GPEN's colorization network expects")
        return grey, None, grey
    if task.name == "seg2face":
        note = label_map_warning(rgb)
        if note:
            notes.append(note)
    if task.name != "inpaint":
        return rgb, None, None
    if mask is not None and mask.shape[:2] != rgb.shape[:2]:  # the mode shrank the photo: the mask follows
        mask = cv2.resize(mask, (rgb.shape[1], rgb.shape[0]), interpolation=cv2.INTER_AREA)
    damage, source = tasks.damage_mask(rgb, mask)
    notes.append(f"damage to inpaint: {source}, {100 * float(damage.mask.mean()):.1f}% of the photo")
    if aligned:  # the whole image is the face: the network sees the damage white, as official
        return (tasks.paint_damage(rgb, damage.mask) if mask is not None else rgb), None, None
    if not damage.mask.any():
        raise InputError(
            "nothing to inpaint: no damage was marked. Paint the damaged parts white with the brush "
            "(CLI: --mask PATH, white = damaged, or white strokes in the photo itself)"
        )
    return rgb, damage, None


# A label map is a few flat colours, one per face part (CelebAMask-HQ's 19), plus some mixed ones
# at their edges once resized or saved as JPEG; a photo spreads over thousands of colours.
LABEL_MAP_TOP_COLOURS = 32
LABEL_MAP_MIN_SHARE = 0.8


def label_map_warning(rgb: np.ndarray) -> str | None:
    """A note when ``rgb`` (RGB uint8) does not look like seg2face's colour label map (its most common colours cover
    too little of it, sampled on every 4th pixel of every 4th row), else None."""
    sample = np.ascontiguousarray(rgb[::4, ::4]).reshape(-1, 3).astype(np.uint32)
    if sample.size == 0:
        return None
    packed = (sample[:, 0] << 16) | (sample[:, 1] << 8) | sample[:, 2]
    counts = np.sort(np.unique(packed, return_counts=True)[1])[::-1]
    share = float(counts[:LABEL_MAP_TOP_COLOURS].sum()) / len(packed)
    if share >= LABEL_MAP_MIN_SHARE:
        return None
    return (f"this does not look like a label map: {len(counts)} distinct colours, the {LABEL_MAP_TOP_COLOURS} most common "
            f"cover {100 * share:.0f}% of it (a label map is a few flat colours, one per face part). seg2face draws a face "
            "from such a map; from a photo its result means nothing (docs/tasks.md)")


def colorized(photo: Any, grey: np.ndarray, pasted: bool, aligned: bool, notes: list[str]) -> Any:
    """The colorization result: the photo's own luminance everywhere, the network's colour on the faces."""
    from gpen_core.faces.tasks import keep_luminance

    if aligned:
        at_net = bool(photo.faces) and photo.faces[0].restored.shape[:2] == grey.shape[:2]
        quirk = (" (the official code skips this step for a face already at the network's size; we keep it, so the "
                 "detail is always the photo's own: docs/tasks.md)") if at_net else ", as official"
        notes.append(f"colorized: the network's colour with the face's own luminance (YUV){quirk}")
        return replace(photo, image=keep_luminance(grey, photo.image))
    if not pasted:
        notes.append("colorized faces only: the coloured face crops are the result (this mode does not paste)")
        return photo
    if photo.faces:
        notes.append(
            "colorized the faces and left the rest of the photo grey (GPEN colours faces only); the photo's own "
            "luminance is kept everywhere, so only the faces' colour changed"
        )
    return replace(photo, image=keep_luminance(grey, photo.image))
