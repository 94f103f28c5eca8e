"""The face pipeline on CPU: real RetinaFace mobilenet0.25 on real photos, paste-back rules, ParseNet wiring.

Failing image comparisons are saved under pytest's tmp_path (the path is in the
assertion message) for a human to look at.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from gpen_core.faces.align import align_transform, reference_points
from gpen_core.errors import InputError, WeightsError
from gpen_core.faces.detect import Detection, FaceDetector, _trained_with_relu
from gpen_core.faces.parse import ParsingMasker
from gpen_core.faces.paste import paste_box
from gpen_core.faces.photo import FaceJob, PhotoOutput, restore_photo
from gpen_core.faces.masks import parsing_labels_to_mask, rectangle_mask

from .conftest import shared_path

SMOOTH = np.array([[0.0625, 0.125, 0.0625], [0.125, 0.25, 0.125], [0.0625, 0.125, 0.0625]], np.float32)
# facexlib's FFHQ 5-point template at 512 (where RetinaFace puts the points on FFHQ-aligned faces).
FFHQ_TEMPLATE = np.array(
    [[192.98138, 239.94708], [318.90277, 240.1936], [256.63416, 314.01935],
     [201.26117, 371.41043], [313.08905, 371.15118]]
)


def invert(crop: np.ndarray) -> np.ndarray:
    """A visible stand-in for GPEN: every pasted pixel changes."""
    return 255 - crop


def load_rgb(path: Path) -> np.ndarray:
    arr = np.asarray(Image.open(path))
    return np.ascontiguousarray(arr[..., :3])  # the Solvay PNG is RGBA: drop alpha


def save_pair(tmp_path: Path, name: str, expected: np.ndarray, got: np.ndarray) -> Path:
    out = tmp_path / f"{name}.png"
    Image.fromarray(np.hstack([expected, got])).save(out)
    return out


def paste_union(dets: list[Detection], size: int, width: int, height: int) -> np.ndarray:
    union = np.zeros((height, width), bool)
    for d in dets:
        box = paste_box(align_transform(d.landmarks, size)[1], size, width, height)
        if box is not None:
            x0, y0, x1, y1 = box
            union[y0:y1, x0:x1] = True
    return union


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def detector() -> FaceDetector:
    return FaceDetector(shared_path("weights", "detection_mobilenet0.25_Final.pth"), "mobilenet0.25", "cpu")


@pytest.fixture(scope="module")
def solvay() -> np.ndarray:
    return load_rgb(shared_path("faces", "Solvay_conference_1927.png"))


@pytest.fixture(scope="module")
def solvay_dets(detector: FaceDetector, solvay: np.ndarray) -> list[Detection]:
    return detector.detect(solvay)


@pytest.fixture(scope="module")
def ffhq() -> np.ndarray:
    return load_rgb(shared_path("faces", "ffhq_00000_512.png"))


@pytest.fixture(scope="module")
def ffhq_dets(detector: FaceDetector, ffhq: np.ndarray) -> list[Detection]:
    return detector.detect(ffhq)


# --------------------------------------------------------------------------- detection


def test_solvay_faces_are_found_with_sane_boxes(solvay: np.ndarray, solvay_dets: list[Detection]) -> None:
    h, w = solvay.shape[:2]
    assert 10 <= len(solvay_dets) <= 40, f"{len(solvay_dets)} faces (the photo has about 29)"
    scores = [d.score for d in solvay_dets]
    assert scores == sorted(scores, reverse=True), "highest score first, as the official code"
    for d in solvay_dets:
        x0, y0, x1, y1 = d.box
        assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h
        assert 12 <= d.width <= 150 and 12 <= d.height <= 150, d.box  # faces here are ~30-50 px
        assert 0.5 <= d.height / d.width <= 2.0, d.box
        assert d.score >= 0.9
        assert d.landmarks.shape == (5, 2) and d.landmarks.dtype == np.float32
        lm = d.landmarks
        margin = 0.1 * max(d.width, d.height)
        assert np.all((lm[:, 0] >= x0 - margin) & (lm[:, 0] <= x1 + margin)), (d.box, lm)
        assert np.all((lm[:, 1] >= y0 - margin) & (lm[:, 1] <= y1 + margin)), (d.box, lm)
        assert lm[0, 0] < lm[1, 0] and lm[3, 0] < lm[4, 0]  # left eye/mouth corner left of right
        assert max(lm[0, 1], lm[1, 1]) < min(lm[3, 1], lm[4, 1])  # eyes above the mouth


def test_mobilenet_weights_are_recognised_as_the_relu_variant(detector: FaceDetector) -> None:
    # These weights come from biubug6's Face-Detector-1MB (ReLU, anchors 10..256); run with
    # facexlib's LeakyReLU/16..512 settings they give boxes twice the face and phantom faces.
    assert detector.variant == "1mb"


def test_trained_with_relu_reads_dead_channels() -> None:
    sd = {"body.stage1.1.1.running_mean": torch.ones(4), "body.stage1.1.1.running_var": torch.ones(4)}
    assert not _trained_with_relu(sd)
    sd["body.stage1.1.1.running_mean"][2] = 0.0
    sd["body.stage1.1.1.running_var"][2] = 1e-40
    assert _trained_with_relu(sd)
    sd["body.stage1.1.1.running_mean"][2] = -0.05  # LeakyReLU's dead channel: constant, not zero
    assert not _trained_with_relu(sd)


def test_no_face_on_flat_gray(detector: FaceDetector) -> None:
    assert detector.detect(np.full((480, 640, 3), 128, np.uint8)) == []


@pytest.mark.parametrize("name", ["ffhq_00000_512.png", "ffhq_00001_512.png", "ffhq_00002_512.png"])
def test_ffhq_crop_has_exactly_one_face_where_ffhq_puts_it(detector: FaceDetector, name: str) -> None:
    dets = detector.detect(load_rgb(shared_path("faces", name)))
    assert len(dets) == 1
    # FFHQ-aligned: the landmarks sit near the FFHQ template (10 % of the crop).
    assert np.abs(dets[0].landmarks - FFHQ_TEMPLATE).max() < 51.2, dets[0].landmarks


def test_shrunk_detection_maps_back_to_input_pixels(detector: FaceDetector, ffhq: np.ndarray, ffhq_dets) -> None:
    big = cv2.resize(ffhq, (1024, 1024), interpolation=cv2.INTER_LINEAR)
    dets = detector.detect(big, max_side=512)  # runs on a 512 copy: ~ the original
    assert len(dets) == 1
    np.testing.assert_allclose(np.array(dets[0].box), 2 * np.array(ffhq_dets[0].box), atol=12)
    np.testing.assert_allclose(dets[0].landmarks, 2 * ffhq_dets[0].landmarks, atol=8)


def test_detect_rejects_non_rgb(detector: FaceDetector) -> None:
    with pytest.raises(InputError, match="RGB uint8"):
        detector.detect(np.zeros((32, 32, 4), np.uint8))
    with pytest.raises(InputError):
        detector.detect(np.zeros((32, 32, 3), np.float32))


def test_bad_weights_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="not found"):
        FaceDetector(tmp_path / "missing.pth", "mobilenet0.25")
    junk = tmp_path / "junk.pth"
    torch.save({"conv.weight": torch.zeros(3)}, junk)
    with pytest.raises(WeightsError, match="not RetinaFace mobilenet0.25") as caught:
        FaceDetector(junk, "mobilenet0.25")
    assert "missing body.stage1" in str(caught.value) and "Error(s) in loading" not in str(caught.value)
    with pytest.raises(ValueError):
        FaceDetector(junk, "mobilenet2")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- paste-back


@pytest.fixture(scope="module")
def solvay_inverted(solvay: np.ndarray, solvay_dets: list[Detection]) -> PhotoOutput:
    return restore_photo(solvay, detections=solvay_dets, restore_fn=invert, size=256)


def test_paste_changes_only_inside_paste_boxes(
    tmp_path: Path, solvay: np.ndarray, solvay_dets: list[Detection], solvay_inverted: PhotoOutput
) -> None:
    out = solvay_inverted
    h, w = solvay.shape[:2]
    assert out.image.shape == solvay.shape and out.image.dtype == np.uint8
    assert out.image is not solvay
    assert len(out.faces) == len(solvay_dets)
    assert set(out.timings) == {"align_s", "restore_s", "paste_s", "identity_s"}
    union = paste_union(solvay_dets, 256, w, h)
    assert union.mean() < 0.5  # the boxes are local, not the frame
    if not np.array_equal(out.image[~union], solvay[~union]):
        path = save_pair(tmp_path, "outside_changed", solvay, out.image)
        pytest.fail(f"pixels outside every paste box changed; see {path}")
    for d in solvay_dets:  # every face really got the (inverted) restoration
        cx, cy = d.landmarks[2]  # nose tip: mask weight ~1 there
        y, x = int(round(cy)), int(round(cx))
        patch_in = solvay[y - 2 : y + 3, x - 2 : x + 3].astype(int)
        patch_out = out.image[y - 2 : y + 3, x - 2 : x + 3].astype(int)
        expected = 255 - patch_in
        err = np.abs(patch_out - expected).mean()
        if err > 25:
            path = save_pair(tmp_path, "face_not_pasted", solvay, out.image)
            pytest.fail(f"face at {d.box} not pasted (mean error {err:.1f} vs inverted input); see {path}")


def _official_full_frame_paste(rgb: np.ndarray, faces, size: int) -> np.ndarray:
    """The official face_enhancement.py compose, full-frame, as a reference."""
    h, w = rgb.shape[:2]
    full_mask = np.zeros((h, w), np.float32)
    full_img = np.zeros(rgb.shape, np.uint8)
    for face in faces:
        _, inv = align_transform(face.landmarks, size)
        tmp_mask = cv2.warpAffine(rectangle_mask(size), inv, (w, h), flags=3)
        tmp_img = cv2.warpAffine(face.restored, inv, (w, h), flags=3)
        sel = (tmp_mask - full_mask) > 0
        full_mask[sel] = tmp_mask[sel]
        full_img[sel] = tmp_img[sel]
    m = full_mask[:, :, None]
    return cv2.convertScaleAbs(rgb * (1 - m) + full_img * m)


def test_box_paste_equals_official_full_frame_paste(
    tmp_path: Path, solvay: np.ndarray, solvay_inverted: PhotoOutput
) -> None:
    reference = _official_full_frame_paste(solvay, solvay_inverted.faces, 256)
    # The box warp samples the crop at exactly the full-frame warp's positions: same pixels.
    if not np.array_equal(reference, solvay_inverted.image):
        diff = np.abs(reference.astype(int) - solvay_inverted.image.astype(int))
        path = save_pair(tmp_path, "box_vs_official", reference, solvay_inverted.image)
        pytest.fail(f"max diff {diff.max()}, {100 * (diff > 0).mean():.3f} % pixels differ; see {path}")


def test_small_faces_get_the_official_smoothing(solvay_inverted: PhotoOutput, ffhq, ffhq_dets) -> None:
    small = solvay_inverted.faces[0]  # Solvay faces are < 100 px
    assert min(small.box[2] - small.box[0], small.box[3] - small.box[1]) < 100
    np.testing.assert_array_equal(small.restored, cv2.filter2D(invert(small.crop), -1, SMOOTH))
    big = restore_photo(ffhq, detections=ffhq_dets, restore_fn=invert, size=256).faces[0]
    np.testing.assert_array_equal(big.restored, invert(big.crop))  # >= 100 px: untouched


def test_alpha_zero_leaves_the_photo_nearly_unchanged(
    tmp_path: Path, solvay: np.ndarray, solvay_dets: list[Detection]
) -> None:
    out = restore_photo(solvay, detections=solvay_dets, restore_fn=invert, size=256, job=FaceJob(alpha=0.0))
    for face in out.faces:
        np.testing.assert_array_equal(face.restored, face.crop)
    # What remains is the crop's bilinear warp there and back.
    diff = np.abs(out.image.astype(int) - solvay.astype(int))
    if diff.mean() > 0.5 or np.percentile(diff, 99.9) > 15:
        path = save_pair(tmp_path, "alpha0", solvay, out.image)
        pytest.fail(f"alpha=0 changed the photo: mean {diff.mean():.2f}; see {path}")


def test_alpha_between_moves_part_way(solvay: np.ndarray, solvay_dets: list[Detection]) -> None:
    det = solvay_dets[:1]
    full = restore_photo(solvay, detections=det, restore_fn=invert, size=256, job=FaceJob(alpha=1.0)).image.astype(int)
    half = restore_photo(solvay, detections=det, restore_fn=invert, size=256, job=FaceJob(alpha=0.5)).image.astype(int)
    changed = np.abs(full - solvay) > 20
    assert changed.any()
    assert np.abs(half - (full + solvay) / 2)[changed].mean() < 6


def test_no_face_returns_input_and_a_note() -> None:
    gray = np.full((120, 160, 3), 128, np.uint8)
    out = restore_photo(gray, detections=[], restore_fn=invert, size=256)
    assert out.image is not gray and np.array_equal(out.image, gray)
    assert out.faces == ()
    assert out.notes and out.notes[0].startswith("no face found")


def test_paste_false_returns_input_and_restored_crops(solvay: np.ndarray, solvay_dets: list[Detection]) -> None:
    before = solvay.copy()
    out = restore_photo(solvay, detections=solvay_dets[:3], restore_fn=invert, size=256, job=FaceJob(paste=False))
    assert np.array_equal(out.image, solvay) and out.image is not solvay
    assert np.array_equal(solvay, before)  # input untouched
    assert len(out.faces) == 3
    for face in out.faces:
        assert face.crop.shape == face.restored.shape == (256, 256, 3)
        assert np.abs(face.restored.astype(int) - face.crop).mean() > 20


def test_aligned_input_is_restored_at_its_own_size(tmp_path: Path, ffhq: np.ndarray) -> None:
    calls: list[tuple[int, int]] = []
    same = restore_photo(ffhq, detections=None, restore_fn=invert, size=512, progress=lambda a, b: calls.append((a, b)), job=FaceJob(aligned=True))
    np.testing.assert_array_equal(same.image, invert(ffhq))
    assert same.notes == () and calls == [(1, 1)]
    assert len(same.faces) == 1 and same.faces[0].box == (0.0, 0.0, 512.0, 512.0)

    resized = restore_photo(ffhq, detections=None, restore_fn=invert, size=256, job=FaceJob(aligned=True))
    assert resized.image.shape == ffhq.shape
    assert resized.faces[0].crop.shape == (256, 256, 3)
    assert any("resized" in n for n in resized.notes)
    err = np.abs(resized.image.astype(int) - invert(ffhq)).mean()
    if err > 8:
        path = save_pair(tmp_path, "aligned_resized", invert(ffhq), resized.image)
        pytest.fail(f"aligned 512→256→512 result is off by {err:.1f} on average; see {path}")

    unpasted = restore_photo(ffhq, detections=None, restore_fn=invert, size=256, job=FaceJob(aligned=True, paste=False))
    assert np.array_equal(unpasted.image, ffhq)


def test_progress_is_reported_per_face(solvay: np.ndarray, solvay_dets: list[Detection]) -> None:
    calls: list[tuple[int, int]] = []
    restore_photo(
        solvay, detections=solvay_dets[:4], restore_fn=invert, size=64, progress=lambda a, b: calls.append((a, b))
    )
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_contract_errors(solvay: np.ndarray, solvay_dets: list[Detection]) -> None:
    with pytest.raises(ValueError, match="restore_fn must return"):
        restore_photo(solvay, detections=solvay_dets[:1], restore_fn=lambda c: c[:10], size=256)
    with pytest.raises(InputError, match="alpha"):
        restore_photo(solvay, detections=solvay_dets, restore_fn=invert, size=256, job=FaceJob(alpha=1.5))
    with pytest.raises(ValueError, match="detections is None"):
        restore_photo(solvay, detections=None, restore_fn=invert, size=256)
    with pytest.raises(InputError):
        restore_photo(solvay[..., :2], detections=[], restore_fn=invert, size=256)


def test_parsing_fn_replaces_the_rectangle(solvay: np.ndarray, solvay_dets: list[Detection]) -> None:
    det = solvay_dets[:1]
    seen: list[tuple[int, ...]] = []

    def nothing(crop: np.ndarray) -> np.ndarray:
        seen.append(crop.shape)
        return np.zeros(crop.shape[:2], np.float32)

    out = restore_photo(solvay, detections=det, restore_fn=invert, size=256, job=FaceJob(parsing_fn=nothing))
    assert seen == [(256, 256, 3)]
    assert np.array_equal(out.image, solvay)  # a zero mask pastes nothing


def test_pasting_one_face_into_a_big_photo_allocates_no_full_frame_floats() -> None:
    h, w, size = 3000, 4000, 256
    rgb = np.full((h, w, 3), 90, np.uint8)
    landmarks = (reference_points(size) * 2.5 + (1700.0, 1200.0)).astype(np.float32)  # a ~640 px face
    det = Detection((1700.0, 1200.0, 2340.0, 1840.0), 0.99, landmarks)
    tracemalloc.start()
    try:
        out = restore_photo(rgb, detections=[det], restore_fn=invert, size=size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full_frame_float_set = h * w * 4 * 3  # one float32 H×W×3 buffer: what the official paste makes several of
    beyond_output = peak - out.image.nbytes  # the returned image itself is unavoidable
    assert beyond_output < h * w * 4, f"{beyond_output / 2**20:.0f} MiB beyond the output: a full-frame float mask?"
    assert peak < full_frame_float_set / 2, f"peak {peak / 2**20:.0f} MiB"
    assert out.image[1500, 2000, 0] != 90  # the face was pasted


# --------------------------------------------------------------------------- masks and ParseNet


def test_rectangle_mask_is_gpen_feathered_rectangle() -> None:
    m = rectangle_mask(512)
    assert m.shape == (512, 512) and m.dtype == np.float32 and not m.flags.writeable
    assert m[256, 256] == pytest.approx(1.0, abs=1e-4)
    assert m[0, 0] < 1e-3 and m[256, 0] < 1e-2
    assert 0.3 < m[256, 26] < 0.7  # the rectangle edge, blurred
    assert rectangle_mask(256).shape == (256, 256)


def test_parsing_labels_keep_face_hair_and_neck_drop_background_hat_cloth() -> None:
    # GPEN's MASK_COLORMAP (face_parse/face_parsing.py): 13 hair, 14 hat, 17 neck, 18 cloth.
    skin = np.ones((512, 512), np.int64)
    mask = parsing_labels_to_mask(skin, 256)
    assert mask.shape == (256, 256) and mask.dtype == np.float32
    assert mask[128, 128] == pytest.approx(1.0, abs=1e-3)
    assert mask[0].max() < 1e-3 and mask[:, -1].max() < 1e-3  # the zeroed 26 px border, blurred
    for off in (0, 14, 18):  # background, hat, cloth
        assert parsing_labels_to_mask(np.full((512, 512), off), 256).max() == 0
    for on in (13, 16, 17):  # hair, neck_l, neck: kept, as official
        assert parsing_labels_to_mask(np.full((512, 512), on), 256)[128, 128] == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ValueError):
        parsing_labels_to_mask(np.full((8, 8), 19), 8)


def _random_parsenet(path: Path, size: int) -> Path:
    from facexlib.parsing.parsenet import ParseNet

    torch.manual_seed(0)
    torch.save(ParseNet(in_size=size, out_size=size, parsing_ch=19).state_dict(), path)
    return path


def test_parsing_masker_shape_and_range_with_random_weights(tmp_path: Path) -> None:
    # The released 512 px network on a 64 px input: the same code path at 1/64 of the cost.
    masker = ParsingMasker(_random_parsenet(tmp_path / "parsenet512.pth", 512), "cpu", input_size=64)
    crop = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    mask = masker(crop)
    assert mask.shape == (256, 256) and mask.dtype == np.float32
    assert 0.0 <= mask.min() and mask.max() <= 1.0
    with pytest.raises(InputError):
        masker(crop[..., 0])


def test_parsing_masker_rejects_other_networks(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="ParseNet"):
        ParsingMasker(_random_parsenet(tmp_path / "parsenet64.pth", 64), "cpu")  # 64 px weights, 512 px net


def test_parsing_masker_loads_full_size_parsenet_weights(tmp_path: Path) -> None:
    # facexlib's parsing_parsenet.pth shapes (512 px) = GPEN's ParseNet-latest.pth. Only
    # loading: a forward pass at 512 takes seconds on 2 cores; the 64 px masker above runs the same code.
    masker = ParsingMasker(_random_parsenet(tmp_path / "parsenet512.pth", 512), "cpu")
    assert masker.input_size == 512 and "parsenet512.pth, 512 px input" in masker.description
