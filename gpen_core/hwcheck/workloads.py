"""The hardware check's standard workloads: deterministic images with faces at known places.

Three workloads cover what people actually run: one aligned 512×512 face (the
network alone), a 12-megapixel phone photo (4000×3000) with one face (full-frame
buffers), and a group photo with many small faces (per-face cost). Images are
built cheaply and identically every time: a textured canvas (smooth colour field
plus a tiled grain, so JPEG/PNG encoding costs what a real photo costs) and, for
each face, either

* a real portrait from the project's ``examples/`` folder pasted into the face's
  box, for runs with a real detector (which must find it), or
* a fixed synthetic :class:`~gpen_core.faces.detect.Detection` per face whose landmarks
  are GPEN's own 5-point template mapped into the box, for runs without one.

Memory and time do not depend on what the face looks like, so both kinds measure
the same cost. Pure numpy + OpenCV; RGB uint8 H×W×3 throughout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpen_core.faces.align import reference_points

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
_EXAMPLE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


@dataclass(frozen=True)
class Workload:
    """One standard input.

    ``aligned``: the image is itself an aligned face crop (restored directly, no
    detection, no paste-back). Otherwise ``faces`` square faces of ``face_px``
    pixels are laid out on a ``width``×``height`` canvas.
    """

    # Short key used in the profile JSON and tables ("face", "photo", "group").
    name: str
    # What a person would call it, for tables.
    label: str
    width: int
    height: int
    faces: int
    # Side of each face box, input pixels; ignored for aligned inputs.
    face_px: int = 0
    aligned: bool = False

    @property
    def pixels(self) -> int:
        return self.width * self.height


# The standard set. The group photo has 4 faces, not the dozen of a team photo: on a
# 2-core CPU GPEN-BFR-512 costs ~3.5 s a face in float32 (6.8 s of CPU time), and the
# whole check (four modes, three of them on the 512 model: 3 × 6 faces) must finish in
# under two minutes. Faces are restored one at a time, so memory and time per face are
# flat after the first: more faces add time, not information.
STANDARD: tuple[Workload, ...] = (
    Workload("face", "one aligned 512×512 face", 512, 512, 1, aligned=True),
    Workload("photo", "12 MP photo (4000×3000), one face", 4000, 3000, 1, face_px=900),
    Workload("group", "group photo (3000×2000), 4 faces", 3000, 2000, 4, face_px=260),
)


# GPEN's other tasks (gpen_core.modes.TASKS), one workload each, measured per mode that has a plan
# for them. One face, not four: the 1024 px networks cost ~5 CPU s a face in bfloat16 and ~7 in
# float32 here (docs/tasks.md), and the per-face cost is flat after the first. A photo rather
# than an aligned crop: its peak holds the aligned 1024 crop, the network and the full-frame
# buffers of paste-back (measured above the aligned 1024 face in every mode: docs/tasks.md).
# Seg2face takes aligned label maps only: its workload is one, at the network's 512 px.
TASK_WORKLOADS: dict[str, Workload] = {
    "colorize": Workload("task-photo", "photo (3000×2000), one face", 3000, 2000, 1, face_px=520),
    "inpaint": Workload("task-photo", "photo (3000×2000), one face", 3000, 2000, 1, face_px=520),
    "seg2face": Workload("label-map", "one aligned 512×512 label map", 512, 512, 1, aligned=True),
}


def damage_strokes(w: Workload) -> np.ndarray:
    """Inpainting's damage for workload ``w``: a uint8 H×W mask (255 = damaged) with one thick
    stroke across the middle of every face (or of the image, when it is an aligned crop), as a
    user paints it with the app's brush."""
    mask = np.zeros((w.height, w.width), np.uint8)
    for x0, y0, x1, y1 in face_boxes(w) or [(0, 0, w.width, w.height)]:
        cy, t = (y0 + y1) // 2, max(2, (y1 - y0) // 32)
        mask[cy - t : cy + t, x0 + (x1 - x0) // 8 : x1 - (x1 - x0) // 8] = 255
    return mask


@dataclass(frozen=True, eq=False)
class WorkloadImage:
    """A built workload: the RGB uint8 H×W×3 image and where its faces are.

    ``detections`` are the synthetic boxes (input pixels) to hand to the Restorer
    when there is no detector; empty for aligned inputs. ``real_faces`` tells
    whether a real portrait was composited into every box (so a detector can run).
    """

    workload: Workload
    image: np.ndarray
    detections: tuple  # tuple[faces.Detection, ...]
    real_faces: bool


def canvas(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A deterministic textured RGB uint8 height×width×3 image, in well under a second for 12 MP.

    A smooth colour field (random 1/16-resolution noise, bilinearly upscaled) plus a
    tiled 64×64 grain: flat images compress to nothing and would make the encode
    stage look free.
    """
    import cv2

    if width < 1 or height < 1:
        raise ValueError(f"canvas size must be positive, got {width}×{height}")
    rng = np.random.default_rng(seed)
    small = rng.integers(40, 216, (max(2, height // 16), max(2, width // 16), 3), dtype=np.uint8)
    img = cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)
    grain = rng.integers(-12, 13, (64, 64, 3), dtype=np.int16)
    reps = (math.ceil(height / 64), math.ceil(width / 64), 1)
    tiled = np.tile(grain, reps)[:height, :width]
    return np.clip(img.astype(np.int16) + tiled, 0, 255).astype(np.uint8)


def face_boxes(w: Workload) -> list[tuple[int, int, int, int]]:
    """The (x0, y0, x1, y1) box of every face of ``w``: a centred grid, no overlaps, inside the image."""
    if w.aligned:
        return []
    if w.faces < 1 or w.face_px < 8:
        raise ValueError(f"workload {w.name!r} needs at least one face of at least 8 px, got {w.faces} × {w.face_px} px")
    cols = math.ceil(math.sqrt(w.faces * w.width / w.height))
    rows = math.ceil(w.faces / cols)
    cell_w, cell_h = w.width / cols, w.height / rows
    if cell_w < w.face_px * 1.2 or cell_h < w.face_px * 1.2:
        raise ValueError(f"{w.faces} faces of {w.face_px} px do not fit a {w.width}×{w.height} image with room around them")
    boxes = []
    for i in range(w.faces):
        r, c = divmod(i, cols)
        cx, cy = (c + 0.5) * cell_w, (r + 0.5) * cell_h
        x0, y0 = int(cx - w.face_px / 2), int(cy - w.face_px / 2)
        boxes.append((x0, y0, x0 + w.face_px, y0 + w.face_px))
    return boxes


def template_detection(box: tuple[int, int, int, int]):
    """A :class:`detect.Detection` for ``box`` whose landmarks are GPEN's template scaled into it.

    Aligning with these landmarks maps the box exactly onto the S×S crop, so the
    crop, the restore and the paste-back cost what a real face of that size costs.
    """
    from gpen_core.faces.detect import Detection

    x0, y0, x1, y1 = box
    side = float(x1 - x0)
    ref = reference_points(512)
    lm = (np.array([x0, y0], np.float64) + ref * (side / 512.0)).astype(np.float32)
    lm.setflags(write=False)
    return Detection(box=(float(x0), float(y0), float(x1), float(y1)), score=1.0, landmarks=lm)


def example_faces(folder: Path = EXAMPLES_DIR) -> list[Path]:
    """Portrait files in ``folder`` (sorted, so the choice is deterministic); [] when none."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in _EXAMPLE_SUFFIXES and p.is_file())


def _load_portrait(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _square_crop(rgb: np.ndarray) -> np.ndarray:
    h, w = rgb.shape[:2]
    s = min(h, w)
    y, x = (h - s) // 2, (w - s) // 2
    return rgb[y : y + s, x : x + s]


def build(w: Workload, *, portraits: Sequence[Path] = (), seed: int = 0) -> WorkloadImage:
    """Build workload ``w``.

    With ``portraits`` (real face photos), each face box receives one of them,
    resized to the box (for a real detector to find); without, the box keeps the
    canvas texture and gets a template :func:`template_detection`. The synthetic
    detections are returned either way, so callers can fall back to them.
    """
    import cv2

    if w.aligned:
        img = canvas(w.width, w.height, seed)
        if portraits:
            face = _square_crop(_load_portrait(portraits[0]))
            img = np.ascontiguousarray(cv2.resize(face, (w.width, w.height), interpolation=cv2.INTER_AREA))
        return WorkloadImage(w, img, (), bool(portraits))
    img = canvas(w.width, w.height, seed)
    boxes = face_boxes(w)
    if portraits:
        loaded = [_square_crop(_load_portrait(p)) for p in portraits]
        for i, (x0, y0, x1, y1) in enumerate(boxes):
            face = loaded[i % len(loaded)]
            img[y0:y1, x0:x1] = cv2.resize(face, (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA)
    return WorkloadImage(w, img, tuple(template_detection(b) for b in boxes), bool(portraits))


def generator_source(model: str, override_paths: Mapping[str, str], synthetic: bool | None,
                     models_dir: Path | None) -> tuple[str | None, str]:
    """(the ``--model`` value, "real" | "synthetic") a measured run uses for generator ``model``:
    a model-config override, random weights (``synthetic`` True, or None and no file), or the
    file found. ``synthetic=False`` with no file raises WeightsError, naming the fix."""
    from gpen_core.weights import lookup as weights

    if model in override_paths:
        return override_paths[model], "synthetic"
    if synthetic is True:
        return None, "synthetic"
    located = weights.locate(model, models_dir=models_dir)
    if located is None and synthetic is False:
        weights.resolve(model, models_dir=models_dir, allow_download=False)  # raises, naming the fix
    return (str(located), "real") if located is not None else (None, "synthetic")


def idle_usage(device: str) -> tuple[int, int | None, int | None]:
    """(RSS, allocated VRAM, reserved VRAM) of the process now, after letting the identity check's
    models go and handing freed heap back: the zero a measured request starts from in a fresh process.

    Every request starts with the same trim (:mod:`gpen_core.restorer`): without it here, heap
    freed before the check but kept by the allocator counts in the zero and not in the request,
    and a run's peak can read below the zero (clamped to 0: nothing measured). The identity check's
    models (~45 MB) are the process's, outside any Restorer's model cache, so an earlier request's
    stay loaded. Counted in the zero, they made a mode that does not check identity look free: its
    request lets them go before its meter (:func:`gpen_core.engine.pipeline.ready_for`), and ``low``
    after ``quality`` in one process read 0 MB; a mode that checks identity never paid their load.
    Let go here, a mode that uses them loads them in its own first request, as in a worker process.
    """
    from gpen_core.faces.identity_model import release
    from gpen_core.platform.meter import current_rss
    from gpen_core.platform.oom import malloc_trim

    release()
    malloc_trim()
    if device.startswith("cuda"):
        import torch

        dev = torch.device(device)  # the measured device, not the current one ("cuda:1" is GPU 1)
        torch.cuda.synchronize(dev)
        return current_rss(), int(torch.cuda.memory_allocated(dev)), int(torch.cuda.memory_reserved(dev))
    return current_rss(), None, None
