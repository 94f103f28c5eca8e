"""The hardware check's standard workloads: deterministic RGB uint8 H×W×3 images, faces at known places on a
textured canvas (a portrait from ``examples/`` for a real detector, or a fixed synthetic detection); and what
every measured request shares: its Restorer (:func:`fresh_restorer`) and its zero (:func:`idle_usage`).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpen_core.faces.align import reference_points

if TYPE_CHECKING:
    from gpen_core.networks.arch import GPENConfig

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
_EXAMPLE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


@dataclass(frozen=True)
class Workload:
    """One standard input: ``faces`` square faces of ``face_px`` pixels on a ``width``×``height`` canvas, or
    (``aligned``) an aligned face crop, restored directly: no detection, no paste-back."""

    name: str  # the key in the profile JSON and tables ("face", "photo", "group")
    label: str  # what a person would call it
    width: int
    height: int
    faces: int
    face_px: int = 0  # ignored for aligned inputs
    aligned: bool = False

    @property
    def pixels(self) -> int:
        return self.width * self.height


# Four faces in the group photo, not a dozen: faces are restored one at a time, so the cost per face is flat
# after the first (more faces add time, not information).
STANDARD: tuple[Workload, ...] = (
    Workload("face", "one aligned 512×512 face", 512, 512, 1, aligned=True),
    Workload("photo", "12 MP photo (4000×3000), one face", 4000, 3000, 1, face_px=900),
    Workload("group", "group photo (3000×2000), 4 faces", 3000, 2000, 4, face_px=260),
)


# GPEN's other tasks (gpen_core.modes.TASKS), one face each (the 1024 px networks cost ~5-7 CPU s a face:
# docs/tasks.md). A photo, not an aligned crop: its peak holds the crop, the network and paste-back's
# full-frame buffers. Seg2face takes aligned label maps only, at the network's 512 px.
TASK_WORKLOADS: dict[str, Workload] = {
    "colorize": Workload("task-photo", "photo (3000×2000), one face", 3000, 2000, 1, face_px=520),
    "inpaint": Workload("task-photo", "photo (3000×2000), one face", 3000, 2000, 1, face_px=520),
    "seg2face": Workload("label-map", "one aligned 512×512 label map", 512, 512, 1, aligned=True),
}


def damage_strokes(w: Workload) -> np.ndarray:
    """Inpainting's damage for ``w``: a uint8 H×W mask (255 = damaged), one thick stroke across the middle
    of every face (of the image, for an aligned crop), as a user paints it with the app's brush."""
    mask = np.zeros((w.height, w.width), np.uint8)
    for x0, y0, x1, y1 in face_boxes(w) or [(0, 0, w.width, w.height)]:
        cy, t = (y0 + y1) // 2, max(2, (y1 - y0) // 32)
        mask[cy - t : cy + t, x0 + (x1 - x0) // 8 : x1 - (x1 - x0) // 8] = 255
    return mask


@dataclass(frozen=True, eq=False)
class WorkloadImage:
    """A built workload; ``detections``: the synthetic boxes for a Restorer without a detector (() when aligned)."""

    image: np.ndarray
    detections: tuple  # tuple[faces.Detection, ...]


def canvas(width: int, height: int) -> np.ndarray:
    """A deterministic textured image: a smooth colour field plus a tiled 64×64 grain (a flat image compresses
    to nothing: the encode would look free)."""
    import cv2

    if width < 1 or height < 1:
        raise ValueError(f"canvas size must be positive, got {width}×{height}")
    rng = np.random.default_rng(0)
    small = rng.integers(40, 216, (max(2, height // 16), max(2, width // 16), 3), dtype=np.uint8)
    img = cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)
    grain = rng.integers(-12, 13, (64, 64, 3), dtype=np.int16)
    tiled = np.tile(grain, (math.ceil(height / 64), math.ceil(width / 64), 1))[:height, :width]
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
    """A :class:`detect.Detection` for ``box`` whose landmarks are GPEN's template scaled into it: aligning
    maps the box exactly onto the S×S crop, so a face costs what a real face of that size costs."""
    from gpen_core.faces.detect import Detection

    x0, y0, x1, y1 = box
    lm = (np.array([x0, y0], np.float64) + reference_points(512) * ((x1 - x0) / 512.0)).astype(np.float32)
    lm.setflags(write=False)
    return Detection(box=(float(x0), float(y0), float(x1), float(y1)), score=1.0, landmarks=lm)


def example_faces(folder: Path = EXAMPLES_DIR) -> list[Path]:
    """Portrait files in ``folder`` (sorted, so the choice is deterministic); [] when none."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in _EXAMPLE_SUFFIXES and p.is_file())


def _square_portrait(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        rgb = np.asarray(im.convert("RGB"))
    h, w = rgb.shape[:2]
    s = min(h, w)
    return rgb[(h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s]


def build(w: Workload, *, portraits: Sequence[Path] = ()) -> WorkloadImage:
    """Build ``w``; with ``portraits``, each face box (an aligned input: the whole image) receives one, resized,
    for a real detector to find. The synthetic detections (:func:`template_detection`) come either way."""
    import cv2

    img = canvas(w.width, w.height)
    faces = [_square_portrait(p) for p in portraits[:1 if w.aligned else None]]
    boxes = face_boxes(w) or [(0, 0, w.width, w.height)]
    for i, (x0, y0, x1, y1) in enumerate(boxes if faces else ()):
        img[y0:y1, x0:x1] = cv2.resize(faces[i % len(faces)], (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA)
    detections = () if w.aligned else tuple(template_detection(b) for b in boxes)
    return WorkloadImage(img, detections)


def synthetic_checkpoint(name: str, folder: str | os.PathLike[str], arch: "GPENConfig | None" = None) -> str:
    """Random weights (seed 0) of ``arch`` (default: the registry's ``name``) as a real file in ``folder``, written
    once and atomically, so two children never read half a file: loading from disk is part of what is measured."""
    path = os.path.join(folder, f"synthetic-{name}.pth")
    if os.path.exists(path):
        return path
    import torch

    from gpen_core.networks.synthetic import random_state_dict
    from gpen_core.platform import durable
    from gpen_core.weights.lookup import REGISTRY

    # Flushed: a torn file under the final name would be reused as it is (the existence check above).
    with durable.replacing(path, sync=True, sweep=True) as tmp:
        torch.save(random_state_dict(arch or REGISTRY[name].arch), tmp)
    return path


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
    """(RSS, allocated VRAM, reserved VRAM) now: the zero a measured request starts from. The identity check's
    models and freed heap are let go first, as every request does (counted in the zero, they made ``low`` after
    ``quality`` in one process read 0 MB)."""
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


def restorer_spec(models_dir: str | os.PathLike[str] | None, device: str, synthetic: bool | None) -> dict[str, Any]:
    """The keys of a measurement spec that :func:`fresh_restorer` reads: the models folder, the device, random
    weights unless ``synthetic`` is False, and this process's torch threads (the engine runs with them)."""
    torch = sys.modules.get("torch")
    return {"models_dir": None if models_dir is None else str(models_dir), "device": device,
            "synthetic_restorer": synthetic is not False,
            "threads": torch.get_num_threads() if torch is not None else None}


def fresh_restorer(spec: dict[str, Any]) -> tuple[Any, tuple[int, int | None, int | None]]:
    """The Restorer a measurement ``spec`` asks for (its threads, device, models folder, weights) and this
    process's :func:`idle_usage` then, the zero of its requests' peaks."""
    import torch

    from gpen_core.restorer import Restorer

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    restorer = Restorer(models_dir=spec["models_dir"], device=spec["device"],
                        synthetic_weights=spec["synthetic_restorer"])
    if restorer.device.startswith("cuda"):
        torch.zeros(1, device=restorer.device)  # the CUDA context is the process's, not the mode's
    return restorer, idle_usage(restorer.device)


def request_figures(res: Any, idle: tuple[int, int | None, int | None]) -> dict[str, Any]:
    """A measured request's peaks above ``idle`` (:func:`idle_usage`, never below 0; VRAM None without it) and
    its times, as :class:`WorkloadRun` and :class:`TaskRow` name them."""
    rss, alloc, reserved = idle
    p, n = res.peaks, len(res.faces)
    return {
        "peak_ram_bytes": max(0, p.rss_bytes - rss),
        "peak_vram_bytes": (None if p.vram_allocated_bytes is None or alloc is None
                            else max(0, p.vram_allocated_bytes - alloc)),
        "peak_vram_reserved_bytes": (None if p.vram_reserved_bytes is None or reserved is None
                                     else max(0, p.vram_reserved_bytes - reserved)),
        "total_s": round(res.timings.total_s, 4), "load_s": round(res.timings.load_s, 4),
        "seconds_per_face": round(res.timings.restore_s / n, 4) if n else None, "ran_mode": res.mode.name,
    }
