"""The engine as a clip sees it: plan the mode once, then ``detect(rgb)`` and ``restore(rgb, detections)`` per frame.

The one place that knows how the video path reaches the engine. Today it goes through the public
facade: detection with :func:`gpen_core.faces.find.find_faces` on the restorer's cached detector,
restoring with ``Restorer.__call__(frame, options, detections=...)`` (the networks stay resident in
its model cache between calls). When the engine offers a per-frame session, only this module changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpen_core.errors import InputError
from gpen_core.modes import AUTO, MemoryMode, get_mode
from gpen_core.options import RestoreOptions

# Notes of a frame that say nothing about the clip (each frame's own meter inside the clip's).
_FRAME_ONLY = ("peak includes concurrent work",)


@dataclass(frozen=True)
class FrameOut:
    """One restored frame: RGB uint8 H×W×3 (the input's size unless the mode shrinks it) and the restore's notes."""

    image: np.ndarray
    notes: tuple[str, ...]


class FrameEngine:
    """Per-frame access to a :class:`~gpen_core.restorer.Restorer` for one clip of ``size`` (width, height, upright).

    ``auto`` is planned once for the whole clip from its frame size; every mode that pastes applies.
    """

    def __init__(self, restorer: Any, options: RestoreOptions, size: tuple[int, int]) -> None:
        opts = options.validated()
        if opts.aligned:
            raise InputError("a video is not an aligned face crop: restore it without the aligned option")
        if opts.task not in ("enhance", "colorize"):
            raise InputError(f"the {opts.task} task is for photos; a video can be enhanced or colorized")
        self.restorer = restorer
        self.device: str = restorer.device
        self.mode, self.reason = self._plan(opts, size)
        if not self.mode.paste:
            raise InputError(
                f"{self.mode.name} returns the restored face crops, not the picture: a video needs a mode that pastes "
                "the faces back (auto, low, balanced or quality)"
            )
        # The clip searches upright faces only: frames are already turned upright by their display matrix.
        self.options = replace(opts, mode=self.mode.name, orientations=False)
        self.notes: list[str] = [self.reason] if self.reason and opts.mode == AUTO else []

    def _plan(self, opts: RestoreOptions, size: tuple[int, int]) -> tuple[MemoryMode, str]:
        if opts.mode != AUTO:
            return get_mode(opts.mode), ""
        from gpen_core.engine import budget

        models = self.restorer.models
        choice = budget.choose(
            device=self.device, image_size=size, models_dir=models.models_dir,
            available=lambda m: models.weights_present(m, opts, False), upscale=opts.upscale, tile=opts.tile, task=opts.task,
        )
        return choice.mode, f"auto chose {choice.mode.name} for the whole clip ({size[0]}×{size[1]} frames): {choice.reason}"

    def detect(self, rgb: np.ndarray) -> list[Any]:
        """The faces of one upright RGB frame (``Detection`` list, frame pixels), highest score first, at most max_faces."""
        from gpen_core.faces.find import find_faces

        mode, opts = self.mode, self.options
        detector = self.restorer.models.detector(opts.detector or mode.detector, self.device, opts, self.notes, mode=mode)
        found = find_faces(
            detector, rgb, threshold=opts.threshold, max_side=mode.detect_side, shrink_above=mode.detect_shrink_above,
            interpolation=mode.detect_resize, face_check=opts.face_check, orientations=False,
        )
        return list(found.faces)[: opts.max_faces]

    def restore(self, rgb: np.ndarray, detections: list[Any]) -> FrameOut:
        """Restore ``detections`` (steadied) in ``rgb`` and paste them back; a frame without faces is returned as it is."""
        if not detections and not (self.mode.max_side and max(rgb.shape[:2]) > self.mode.max_side):
            return FrameOut(rgb, ())
        result = self.restorer(rgb, self.options, detections=detections)
        notes = tuple(n for n in result.notes if not n.startswith(_FRAME_ONLY))
        return FrameOut(result.image, notes)
