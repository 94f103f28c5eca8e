"""Is it still the same person? dlib's descriptor distance between a face before and after restoration.

Both aligned crops (the generator's input and output) are cut to dlib's 150×150 chip by the one transform
dlib's 5-point alignment finds on the *input*, inside a fixed box of GPEN's template (no detector runs), so
only the face itself can move the number (within 0.02-0.08 of dlib's own pipeline on FFHQ: docs/identity.md).
RGB uint8 in; the models load at the first face (:mod:`identity_model`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import cv2
import numpy as np

from gpen_core.options import RestoreOptions
from gpen_core.result import IdentityCheck

# Where dlib's HOG detector puts the face in a 512 px GPEN crop (left, top, right, bottom): the mean
# over 15 crops (the three FFHQ faces and 12 Solvay faces in ../shared; std 14-23 px, which the
# landmark model absorbs). Scaled to the crop's size; the detector itself never runs here.
FACE_BOX_512 = (122.5, 169.2, 376.6, 423.2)


def descriptor_pair(before: np.ndarray, after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """dlib's 128-D descriptors (float64) of two aligned crops (RGB uint8 S×S×3), both cut by the chip
    transform found on ``before``."""
    from gpen_core.faces.identity_model import chips, descriptors

    size = before.shape[0]
    x0, y0, x1, y1 = (round(v * size / 512) for v in FACE_BOX_512)
    d = descriptors(chips(before, [after], (x0, y0, x1, y1)))
    return d[0], d[1]


def distance(before: np.ndarray, after: np.ndarray) -> float:
    """Euclidean distance of :func:`descriptor_pair`."""
    d0, d1 = descriptor_pair(before, after)
    return float(np.linalg.norm(d0 - d1))


@dataclass(frozen=True)
class IdentityPolicy:
    """What to do with a face whose restoration moved it further than ``limit`` from the input:
    paste ``alpha`` × restored + (1 − alpha) × original (0: the original face, untouched).
    ``limit`` None: measure only."""

    limit: float | None = None
    alpha: float = 0.0

    def check(self, crop: np.ndarray, restored: np.ndarray) -> tuple[IdentityCheck, np.ndarray | None]:
        """The check of one face, and the crop to paste: ``restored``, a blend toward ``crop``, or
        None where the original is kept (nothing is pasted, so its pixels stay as they were)."""
        t = time.perf_counter()
        pair = descriptor_pair(crop, restored)
        dist = float(np.linalg.norm(pair[0] - pair[1]))
        seconds = time.perf_counter() - t
        if self.limit is None or dist <= self.limit:
            return IdentityCheck(dist, "restored", self.limit, seconds, pair), restored
        if self.alpha <= 0.0:
            return IdentityCheck(dist, "kept original", self.limit, seconds, pair), None
        blended = cv2.addWeighted(restored, self.alpha, crop, 1.0 - self.alpha, 0.0)
        return IdentityCheck(dist, "blended", self.limit, seconds, pair), blended


def face_note(index: int, check: IdentityCheck, alpha: float) -> str | None:
    """The note for a face the policy acted on (None when it pasted the restoration)."""
    if check.action == "restored":
        return None
    what = "kept the original face" if check.action == "kept original" else f"blended it toward the original (alpha {alpha:g})"
    return (f"face {index}: identity distance {check.distance:.2f} is over your limit {check.limit:g}: {what}")


def runs(mode_name: str, opts: RestoreOptions) -> bool:
    """Whether a request (a photo, or a clip's frames) checks identity: "auto" in every mode but low (its cost is a
    large share there, docs/identity.md) where dlib is installed; "on" always; "off" or seg2face (a label map) never."""
    return runs_for(mode_name, opts.identity, opts.task)


def runs_for(mode_name: str, identity: str, task: str = "enhance") -> bool:
    """:func:`runs` from the switch (``RestoreOptions.identity``) and the task alone (the memory budget's question)."""
    from gpen_core.faces.identity_model import available

    if identity == "off" or task == "seg2face":
        return False
    return identity == "on" or not (mode_name == "low" or not available())


def policy_for(mode_name: str, opts: RestoreOptions) -> IdentityPolicy | None:
    """The identity check a request runs (:func:`runs`), or None, when the loaded models are let go (a
    lighter mode after a heavier one keeps to its own size). "on" loads them here, so a missing or
    damaged install fails before any face is restored, naming the pip command."""
    from gpen_core.faces.identity_model import model, release

    if not runs(mode_name, opts):
        release()
        return None
    model()
    return IdentityPolicy(opts.identity_limit, opts.identity_alpha)
