"""Every real face once, with the real mobilenet0.25 detector on real photos: close-ups, turned scans,
duplicate boxes, the switchable face check, and the line that says how a mode departs from official GPEN."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from gpen_core.faces import find
from gpen_core.faces.align import align_transform
from gpen_core.faces.detect import Detection, FaceDetector, unturn
from gpen_core.faces.find import DetectSizing, find_faces
from gpen_core.modes import MODES, official_departures

from .conftest import shared_path


@pytest.fixture(scope="module")
def detector() -> FaceDetector:
    return FaceDetector(shared_path("weights", "detection_mobilenet0.25_Final.pth"), "mobilenet0.25", "cpu")


def _rgb(path: Path) -> np.ndarray:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    assert bgr is not None, path
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


@pytest.fixture(scope="module")
def solvay() -> np.ndarray:
    return _rgb(shared_path("faces", "Solvay_conference_1927.png"))


@pytest.fixture(scope="module")
def solvay_found(detector: FaceDetector, solvay: np.ndarray) -> find.FoundFaces:
    return find_faces(detector, solvay)


def _ffhq(i: int = 1) -> np.ndarray:
    return _rgb(shared_path("faces", f"ffhq_0000{i}_512.png"))


def _iou(a, b) -> float:
    return find.overlap(a, b)[0]


# --------------------------------------------------------------------------- geometry, no network


@dataclass(frozen=True)
class _Det:
    box: tuple[float, float, float, float]
    score: float = 0.99


def test_a_box_inside_a_stronger_one_is_merged_neighbours_are_not() -> None:
    face = _Det((100, 100, 300, 340))
    inner = _Det((140, 120, 260, 260), 0.95)  # hair to nose, inside the face
    neighbour = _Det((290, 100, 480, 340), 0.97)  # overlaps the face a little (a crowd)
    kept, dropped = find.merge_duplicates([face, inner, neighbour])
    assert kept == [face, neighbour] and dropped == [inner]
    assert find.overlap(inner.box, face.box)[1] == pytest.approx(1.0)


@pytest.mark.parametrize("turn", [1, 2, 3])
def test_points_on_a_turned_image_map_back_exactly(turn: int) -> None:
    h, w = 5, 7
    img = np.arange(h * w).reshape(h, w)
    turned = np.rot90(img, turn)
    for r in range(turned.shape[0]):
        for c in range(turned.shape[1]):
            x, y = unturn(np.array([[c + 0.5, r + 0.5]]), turn, w, h)[0]
            assert img[int(y), int(x)] == turned[r, c]


# --------------------------------------------------------------------------- real photos, real detector


def test_solvay_keeps_at_least_27_faces_in_every_mode(
    detector: FaceDetector, solvay: np.ndarray, solvay_found: find.FoundFaces
) -> None:
    # Modes with the same detection rules find the same faces: each set of rules runs once (faces-only
    # and balanced keep find_faces' defaults, which solvay_found already ran with).
    sizing = DetectSizing()
    defaults = (sizing.max_side, sizing.shrink_above, sizing.interpolation)
    by_rules: dict[tuple, find.FoundFaces] = {defaults: solvay_found}
    for name, m in MODES.items():  # quality's ResNet-50 weights are absent: its rules, with mobilenet0.25
        rules = (m.detect_side, m.detect_shrink_above, m.detect_resize)
        if rules not in by_rules:
            by_rules[rules] = find_faces(detector, solvay, sizing=DetectSizing(*rules))
        found = by_rules[rules]
        assert len(found.faces) >= 27, (name, found.notes)
        assert not found.rejected and found.merged == 0, (name, found.notes)
        assert found.searched_turns == (0,)  # faces upright: no turned pass paid for


@pytest.mark.parametrize("turn", [1, 2, 3])
def test_a_turned_group_photo_gives_the_same_faces_at_the_same_places(
    detector: FaceDetector, solvay: np.ndarray, solvay_found: find.FoundFaces, turn: int
) -> None:
    turned = np.ascontiguousarray(np.rot90(solvay, turn))
    found = find_faces(detector, turned)
    assert len(found.faces) == len(solvay_found.faces)
    back = (4 - turn) % 4  # the turn that brings the turned photo upright
    words = {1: "90° counter-clockwise", 2: "180°", 3: "90° clockwise"}[back]
    assert any(f"found on the photo turned {words}" in n for n in found.notes), found.notes
    h, w = solvay.shape[:2]
    diffs = []
    for d in found.faces:
        # Its box and landmarks, in the upright photo's pixels, are one upright face's.
        corners = unturn(np.array(d.box, dtype=np.float64).reshape(2, 2), turn, w, h)
        box = (*corners.min(axis=0), *corners.max(axis=0))
        best = max(solvay_found.faces, key=lambda u: _iou(u.box, box))
        assert _iou(best.box, box) > 0.6
        lm = unturn(d.landmarks.astype(np.float64), turn, w, h)
        eye = float(np.linalg.norm(best.landmarks[1] - best.landmarks[0]))
        assert np.abs(lm - best.landmarks).max() < 0.35 * eye  # the same points, in the same order
        # The aligned crop (what the generator restores) is the same upright face: the paste
        # then puts it back at its place on the turned photo through the inverse transform.
        def crop(img: np.ndarray, lm: np.ndarray) -> np.ndarray:
            return cv2.warpAffine(img, align_transform(lm, 128)[0], (128, 128)).astype(np.int16)

        here = crop(turned, d.landmarks)
        other = max((u for u in solvay_found.faces if u is not best), key=lambda u: _iou(u.box, box) - abs(u.box[0] - box[0]))
        diffs.append((np.abs(here - crop(solvay, best.landmarks)).mean(), np.abs(here - crop(solvay, other.landmarks)).mean()))
    # Against the same face read upright it differs far less than against a neighbour's face.
    assert all(same < other for same, other in diffs), diffs
    assert float(np.median([same / other for same, other in diffs])) < 0.6, diffs


def test_a_close_up_crop_gives_exactly_one_face(detector: FaceDetector) -> None:
    # The face fills a 1000 px photo: the plain detector splits it into several boxes.
    close = cv2.resize(_ffhq(1)[140:440, 100:400], (1000, 1000), interpolation=cv2.INTER_CUBIC)
    assert len(detector.detect(close)) > 1  # what the issue is about: one face taken more than once
    found = find_faces(detector, close)
    assert len(found.faces) == 1, found.notes
    x0, y0, x1, y1 = found.faces[0].box
    assert (x1 - x0) > 500 and (y1 - y0) > 500  # the whole face, not a piece of it


def test_a_face_filling_a_big_photo_is_found_and_the_aligned_option_offered(detector: FaceDetector) -> None:
    big = cv2.resize(_ffhq(1), (1000, 1000), interpolation=cv2.INTER_CUBIC)
    found = find_faces(detector, big)
    assert len(found.faces) == 1
    assert any("large face" in n for n in found.notes)
    assert any("aligned option" in n for n in found.notes)  # offered, never switched silently


def _canvas(face: np.ndarray, angle: float, size: int = 900) -> np.ndarray:
    c = np.full((size, size, 3), 128, np.uint8)
    h, w = face.shape[:2]
    o = (size - w) // 2
    c[o : o + h, o : o + w] = face
    m = cv2.getRotationMatrix2D((size / 2, size / 2), angle, 1.0)
    return cv2.warpAffine(c, m, (size, size), flags=cv2.INTER_LINEAR, borderValue=(128, 128, 128))


@pytest.mark.parametrize("angle", [0, 15, 30, 45, 60, 75, 90])
def test_a_face_rotated_on_a_canvas_is_kept(detector: FaceDetector, angle: int) -> None:
    face = cv2.resize(_ffhq(0), (320, 320), interpolation=cv2.INTER_AREA)
    found = find_faces(detector, _canvas(face, angle))
    assert len(found.faces) == 1, (angle, found.notes, [r for _, r in found.rejected])
    d = found.faces[0]
    # The landmarks follow the face: eyes to mouth points along the face's own "down".
    eyes, mouth = d.landmarks[:2].mean(axis=0), d.landmarks[3:].mean(axis=0)
    down = mouth - eyes
    a = np.radians(angle)
    expected = np.array([np.sin(a), np.cos(a)])  # the canvas turns the face counter-clockwise
    assert float(down @ expected) / np.linalg.norm(down) > 0.8, (angle, down)


def test_an_upside_down_face_is_restored_upright(detector: FaceDetector) -> None:
    face = cv2.resize(_ffhq(2), (320, 320), interpolation=cv2.INTER_AREA)
    found = find_faces(detector, _canvas(face, 180))
    assert len(found.faces) == 1, found.notes
    d = found.faces[0]
    assert d.landmarks[3:, 1].mean() < d.landmarks[:2, 1].mean()  # mouth above the eyes in the photo
    crop = cv2.warpAffine(_canvas(face, 180), align_transform(d.landmarks, 256)[0], (256, 256))
    upright = cv2.warpAffine(_canvas(face, 0), align_transform(find_faces(detector, _canvas(face, 0)).faces[0].landmarks, 256)[0], (256, 256))
    assert np.abs(crop.astype(np.int16) - upright.astype(np.int16)).mean() < 15


def test_the_face_check_switch_keeps_what_it_would_drop_and_says_so(detector: FaceDetector) -> None:
    from skimage import data  # scikit-image's public-domain sample photos

    moon = np.repeat(data.moon()[..., None], 3, axis=2)
    checked = find_faces(detector, moon)
    unchecked = find_faces(detector, moon, face_check=False)
    assert checked.faces == () and checked.rejected, "the moon's false face must be rejected"
    assert len(unchecked.faces) == len(checked.rejected) and not unchecked.rejected
    assert any(n.startswith("face check off: kept") for n in unchecked.notes), unchecked.notes
    assert any("rejected by the face check" in n for n in checked.notes)


def test_departures_from_official_follow_the_mode_table() -> None:
    balanced = official_departures(MODES["balanced"], dtype="bfloat16", upscale=2)
    assert balanced.startswith("vs official GPEN: mobilenet0.25 detector (official ResNet-50)")
    assert "a 1000 px copy" in balanced and "bfloat16" in balanced and "ParseNet at 256 px" in balanced
    assert "detection at 1×" in balanced  # balanced does not detect on the upscaled photo
    low = official_departures(MODES["low"])
    assert "a 800 px copy" in low and "feathered-rectangle" in low
    # quality follows the official rules; only what the request changed shows.
    assert official_departures(MODES["quality"], dtype="float32", upscale=2, detector="resnet50", parsing=True) == ""
    assert official_departures(MODES["quality"], detector="mobilenet0.25") == (
        "vs official GPEN: mobilenet0.25 detector (official ResNet-50)"
    )


def test_smoothing_decides_on_the_unclipped_box() -> None:
    from gpen_core.faces.photo import FaceJob, restore_photo

    rgb = _ffhq(0)
    lm = np.array([[200, 240], [310, 240], [255, 300], [210, 360], [300, 360]], np.float32)
    lm.setflags(write=False)
    # A 300 px face cut by the photo's edge: clipped, its box is 60 px wide; the detector's is 300.
    edge = Detection((0.0, 100.0, 60.0, 400.0), 0.99, lm, unclipped=(-240.0, 100.0, 60.0, 400.0))
    clipped_only = Detection((0.0, 100.0, 60.0, 400.0), 0.99, lm)
    sharp = restore_photo(rgb, detections=[edge], restore_fn=lambda c: c.copy(), size=256, job=FaceJob(paste=False))
    smoothed = restore_photo(rgb, detections=[clipped_only], restore_fn=lambda c: c.copy(), size=256, job=FaceJob(paste=False))
    assert np.array_equal(sharp.faces[0].restored, sharp.faces[0].crop)  # not smoothed, as official
    assert not np.array_equal(smoothed.faces[0].restored, smoothed.faces[0].crop)


# --------------------------------------------------------------------------- the switch at the edges


def _moon() -> np.ndarray:
    from skimage import data  # scikit-image's public-domain sample photos

    return np.repeat(data.moon()[..., None], 3, axis=2)


def test_the_api_switch_and_the_official_line_reach_the_result(models_with_detector: Path, gen256: Path) -> None:
    from gpen_core.restorer import Restorer, RestoreOptions

    r = Restorer()
    on = r(_moon(), RestoreOptions(mode="low", model=str(gen256)))
    off = r(_moon(), RestoreOptions(mode="low", model=str(gen256), face_check=False))
    assert on.faces == () and on.rejected and any("rejected by the face check" in n for n in on.notes)
    assert len(off.faces) == len(on.rejected) and off.rejected == ()
    assert any(n.startswith("face check off: kept") for n in off.notes), off.notes
    for res in (on, off):
        assert any(n.startswith("vs official GPEN: mobilenet0.25 detector (official ResNet-50)") for n in res.notes), res.notes


def test_the_cli_flag_turns_the_check_off(models_with_detector: Path, gen256: Path, tmp_path: Path, capsys) -> None:
    import json

    from PIL import Image

    from gpen_core.cli import main

    src = tmp_path / "moon.png"
    Image.fromarray(_moon()).save(src)
    records = []
    for extra in ([], ["--no-face-check"]):
        out = tmp_path / f"out{len(records)}.png"
        argv = ["restore", str(src), "-o", str(out), "--mode", "low", "--model", str(gen256)]
        assert main([*argv, "--models-dir", str(models_with_detector), "--json", *extra]) == 0
        records.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    checked, unchecked = records
    assert checked["faces"] == 0 and unchecked["faces"] >= 1, (checked, unchecked)
    assert any(n.startswith("face check off: kept") for n in unchecked["notes"]), unchecked["notes"]
