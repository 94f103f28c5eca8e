"""Recall and false faces of :func:`gpen_core.faces.find.find_faces` per photo set, and the cost of a turned pass.

Its tables: docs/face-check.md, "Recall and false faces per photo set" and "What a turn costs".

    .venv/bin/python benchmarks/face_check.py [--sets calibration,held-out,rotated] [--cost] [--faceless]

``--faceless`` (``--sets ""`` skips the sets): CPU seconds per faceless 1280×720 frame (a synthetic landscape) as a
clip's frame is searched, upright only, and with every turn (``--orientations``, what each faceless frame paid before).

Sets (provenance in docs/face-check.md):
- calibration: the photos the face check's limits and the upright look were measured on: the Solvay
  photo and three FFHQ faces (../shared/faces), scikit-image's astronaut and camera, matplotlib's
  Grace Hopper, LFW faces #0, 1, 2, 50, 99 (scikit-image's ``lfw_subset``), and five non-face
  photos the detector is fooled by (scikit-image chelsea, gravel, coins, cell, moon).
- held-out: never looked at while choosing a limit: the other 95 LFW faces and the 100 LFW
  non-face patches (25×25 grey, scaled ×8), gradio's sample photos without people (cheetah,
  lion, tower, bus) and scikit-image's other photos (coffee, rocket, motorcycle, hubble, retina).
- rotated: held-out LFW faces 3-12 on a grey canvas turned 0-330° in 30° steps (synthetic).
Each face image holds one face (Solvay 29); a non-face image none. Up to that many kept boxes
count as found faces, every further one as a false face.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpen_core.faces.detect import FaceDetector  # noqa: E402
from gpen_core.faces.find import DetectSizing, find_faces  # noqa: E402

SHARED = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared"))  # as the tests find it


def _pkg(name: str) -> Path:
    spec = find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"{name} is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def _read(path: Path) -> np.ndarray:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    assert bgr is not None, path
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _grey(a: np.ndarray) -> np.ndarray:
    return np.repeat(a[..., None], 3, axis=2)


def _lfw(i: int) -> np.ndarray:
    from skimage import data

    patch = (data.lfw_subset()[i] * 255).round().astype(np.uint8)
    return _grey(cv2.resize(patch, (200, 200), interpolation=cv2.INTER_CUBIC))


CAL_LFW = (0, 1, 2, 50, 99)


def calibration() -> list[tuple[str, np.ndarray, int]]:
    sk = _pkg("skimage") / "data"
    out = [("solvay", _read(SHARED / "faces" / "Solvay_conference_1927.png"), 29)]
    out += [(f"ffhq{i}", _read(SHARED / "faces" / f"ffhq_0000{i}_512.png"), 1) for i in range(3)]
    out += [("astronaut", _read(sk / "astronaut.png"), 1), ("camera", _read(sk / "camera.png"), 1)]
    out += [("grace_hopper", _read(_pkg("matplotlib") / "mpl-data" / "sample_data" / "grace_hopper.jpg"), 1)]
    out += [(f"lfw{i}", _lfw(i), 1) for i in CAL_LFW]
    out += [(n, _read(sk / f"{n}.png"), 0) for n in ("chelsea", "gravel", "coins", "cell", "moon")]
    return out


def held_out() -> list[tuple[str, np.ndarray, int]]:
    sk = _pkg("skimage") / "data"
    gr = _pkg("gradio") / "media_assets" / "images"
    out = [(f"lfw{i}", _lfw(i), 1) for i in range(100) if i not in CAL_LFW]
    out += [(f"lfw_nonface{i}", _lfw(i), 0) for i in range(100, 200)]
    out += [(p.stem, _read(p), 0) for p in (gr / "cheetah.jpg", gr / "lion.jpg", gr / "tower.jpg", gr / "bus.png")]
    out += [(n, _read(sk / n), 0) for n in ("coffee.png", "rocket.jpg", "motorcycle_left.png", "hubble_deep_field.jpg", "retina.jpg")]
    return out


def rotated() -> list[tuple[str, np.ndarray, int]]:
    out = []
    for i in range(3, 13):
        face = _lfw(i)
        for angle in range(0, 360, 30):
            c = np.full((500, 500, 3), 128, np.uint8)
            c[150:350, 150:350] = face
            m = cv2.getRotationMatrix2D((250, 250), angle, 1.0)
            out.append((f"lfw{i}@{angle}", cv2.warpAffine(c, m, (500, 500), borderValue=(128, 128, 128)), 1))
    return out


def score(detector: FaceDetector, items, face_check: bool) -> dict:
    faces = found = false = 0
    missed: list[str] = []
    for name, rgb, n in items:
        kept = find_faces(detector, rgb, face_check=face_check).faces
        faces += n
        # Every face image holds exactly n faces (checked by eye): up to n kept are found, the rest false.
        found += min(n, len(kept))
        false += max(0, len(kept) - n)
        if len(kept) < n:
            missed.append(name)
    return {"images": len(items), "faces": faces, "found": found, "false": false, "missed": missed[:12]}


def cost(detector: FaceDetector) -> None:
    """CPU seconds of one detector pass on the Solvay photo's 1000 px copy, upright and turned (interleaved)."""
    rgb = _read(SHARED / "faces" / "Solvay_conference_1927.png")
    for _ in range(2):
        detector.detect(rgb)
    times: dict[int, list[float]] = {t: [] for t in range(4)}
    for _ in range(5):
        for t in range(4):
            c = time.process_time()
            detector.detect(rgb, turn=t)
            times[t].append(time.process_time() - c)
    for t, v in times.items():
        print(f"turn {90 * t:3d}°: median {np.median(v) * 1000:.0f} ms CPU ({', '.join(f'{x * 1000:.0f}' for x in v)})")
    c = time.process_time()
    find_faces(detector, rgb)
    up = time.process_time() - c
    c = time.process_time()
    find_faces(detector, rgb, orientations=True)
    every = time.process_time() - c
    print(f"find_faces upright only {up * 1000:.0f} ms CPU, with every turn {every * 1000:.0f} ms CPU")


def faceless(detector: FaceDetector, frames: int = 20, rounds: int = 3) -> None:
    """CPU seconds per faceless frame, as ``low`` sizes a clip's frames (800 px detection copy), rounds interleaved;
    one torch thread (a second one's spinning on a busy machine counts as CPU time and would swamp the figure)."""
    import torch

    torch.set_num_threads(1)
    y, x = np.mgrid[0:720, 0:1280]
    rng = np.random.default_rng(0)
    pics = []  # sky over ground, panning, a little noise
    for i in range(frames):
        f = np.stack([80 + 100 * (y < 300) + (x + 8 * i) % 97, 120 + 60 * (y >= 300) + y // 20,
                      200 * (y < 300) + 40], axis=2) + rng.integers(-6, 7, (720, 1280, 3))
        pics.append(f.clip(0, 255).astype(np.uint8))
    sizing = DetectSizing(800)
    times: dict[str, list[float]] = {"upright only (a clip's default)": [], "every turn (--orientations)": []}
    for _ in range(rounds):
        for name, turned in zip(times, (False, True)):
            c = time.process_time()
            assert not any(find_faces(detector, p, sizing=sizing, upright=True, orientations=turned).faces for p in pics)
            times[name].append((time.process_time() - c) / frames)
    for name, v in times.items():
        print(f"{name}: fastest {min(v):.3f}, median {np.median(v):.3f} s CPU a faceless frame "
              f"({', '.join(f'{t:.3f}' for t in v)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="calibration,held-out,rotated")
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--faceless", action="store_true")
    args = ap.parse_args()
    det = FaceDetector(SHARED / "weights" / "detection_mobilenet0.25_Final.pth", "mobilenet0.25", "cpu")
    sets = {"calibration": calibration, "held-out": held_out, "rotated": rotated}
    for name in filter(None, args.sets.split(",")):
        items = sets[name]()
        for check in (True, False):
            print(name, "face check", "on" if check else "off", score(det, items, check), flush=True)
    if args.cost:
        cost(det)
    if args.faceless:
        faceless(det)


if __name__ == "__main__":
    main()
