"""Is it still the same person? dlib's descriptor distance between a face before and after restoration, both
crops cut by the one chip transform found on the input, so only the face moves the number (docs/identity.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import cv2
import numpy as np

from gpen_core.errors import WeightsError
from gpen_core.faces import identity_model
from gpen_core.options import RestoreOptions
from gpen_core.result import IdentityCheck

# Where dlib's HOG detector puts the face in a 512 px GPEN crop (left, top, right, bottom): the mean over
# 15 crops in ../shared (std 14-23 px, which the landmark model absorbs); scaled to the crop's size.
FACE_BOX_512 = (122.5, 169.2, 376.6, 423.2)


def descriptor_pair(before: np.ndarray, after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """dlib's 128-D float64 descriptors of two aligned RGB uint8 S×S×3 crops, cut as ``before`` is."""
    size = before.shape[0]
    x0, y0, x1, y1 = (round(v * size / 512) for v in FACE_BOX_512)
    d = identity_model.descriptors(identity_model.chips(before, [after], (x0, y0, x1, y1)))
    return d[0], d[1]


def distance(before: np.ndarray, after: np.ndarray) -> float:
    """Euclidean distance of :func:`descriptor_pair`."""
    d0, d1 = descriptor_pair(before, after)
    return float(np.linalg.norm(d0 - d1))


@dataclass(frozen=True)
class IdentityPolicy:
    """A face restored further than ``limit`` from its input is pasted as ``alpha`` × restored + (1 − alpha) ×
    original (0: the original, untouched); ``limit`` None: measure only."""

    limit: float | None = None
    alpha: float = 0.0

    def check(self, crop: np.ndarray, restored: np.ndarray) -> tuple[IdentityCheck, np.ndarray | None]:
        """(the check, the crop to paste: ``restored``, a blend toward ``crop``, or None: the original kept)."""
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
    """Whether a request checks identity: "auto" where dlib is installed, in every mode but low (docs/identity.md);
    "on" always; "off" or seg2face (a label map) never."""
    return runs_for(mode_name, opts.identity_switch, opts.task)


def runs_for(mode_name: str, identity: str, task: str = "enhance") -> bool:
    """:func:`runs` from the switch (``RestoreOptions.identity``) and the task alone (the memory budget's question)."""
    if identity == "off" or task == "seg2face":
        return False
    return identity == "on" or not (mode_name == "low" or not identity_model.available())


def _off(opts: RestoreOptions) -> str:
    """The fix besides installing dlib, whole: with the check off, a limit or --identity-every is refused too."""
    asked = [fix for fix, on in (("set no identity limit", opts.identity_limit is not None),
                                 ("drop --identity-every", opts.identity_every != 1)) if on]
    return " and ".join(["or turn the identity check off", *asked])


def policy_for(mode_name: str, opts: RestoreOptions) -> IdentityPolicy | None:
    """The identity check a request runs, or None (the models let go). Loads them, so a missing or damaged install
    fails before any face is restored, naming the pip command."""
    if not runs(mode_name, opts):
        identity_model.release()
        return None
    try:
        identity_model.model()
    except WeightsError as exc:  # missing or damaged: installing it is one fix, the request's own are the others
        raise WeightsError(f"{exc}, {_off(opts)}") from None
    return IdentityPolicy(opts.identity_limit, opts.identity_alpha)
