"""GPEN's 5-point alignment against the official align_faces.py numbers in ../shared."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from gpen_core.faces.align import align_transform, reference_points, umeyama

from .conftest import shared_path

TOL = 1e-3


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(shared_path("reference", "alignment.json").read_text())


@pytest.mark.parametrize("size", [256, 512, 1024, 2048])
def test_template_matches_official(reference: dict, size: int) -> None:
    ours = reference_points(size)
    assert ours.shape == (5, 2) and ours.dtype == np.float64
    np.testing.assert_allclose(ours, np.array(reference["reference_points"][str(size)]), rtol=0, atol=TOL)


def test_all_inverse_transforms_match_official(reference: dict) -> None:
    cases = reference["inverse_transforms"]
    assert len(cases) == 12
    for i, case in enumerate(cases):
        fwd, inv = align_transform(np.array(case["landmarks_xy"]), case["crop_size"])
        assert fwd.shape == inv.shape == (2, 3)
        diff = np.abs(inv - np.array(case["tfm_inv"])).max()
        assert diff < TOL, f"case {i} (crop {case['crop_size']}): max abs diff {diff:.2e}"


def test_forward_and_inverse_are_inverses(reference: dict) -> None:
    case = reference["inverse_transforms"][5]
    fwd, inv = align_transform(np.array(case["landmarks_xy"]), case["crop_size"])
    composed = np.vstack([fwd, [0, 0, 1]]) @ np.vstack([inv, [0, 0, 1]])
    np.testing.assert_allclose(composed, np.eye(3), atol=1e-9)


def test_forward_maps_landmarks_onto_template(reference: dict) -> None:
    case = reference["inverse_transforms"][0]
    lm = np.array(case["landmarks_xy"])
    fwd, _ = align_transform(lm, case["crop_size"])
    mapped = np.hstack([lm, np.ones((5, 1))]) @ fwd.T
    # A similarity cannot hit 5 points exactly, but it lands within a few pixels of the template.
    assert np.abs(mapped - reference_points(case["crop_size"])).max() < 0.1 * case["crop_size"]


def test_similarity_recovers_a_known_transform() -> None:
    angle, scale, shift = np.deg2rad(17.0), 2.5, np.array([40.0, -12.0])
    rot = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    src = np.array([[10, 20], [80, 25], [45, 60], [20, 90], [75, 88]], dtype=np.float64)
    dst = src @ rot.T + shift
    m = umeyama(src, dst)[0][:2]
    np.testing.assert_allclose(m, np.hstack([rot, shift[:, None]]), atol=1e-3)
    # OpenCV's own estimate agrees (it uses the same model: rotation, uniform scale, shift).
    cv_m, _ = cv2.estimateAffinePartial2D(src.astype(np.float32), dst.astype(np.float32), method=cv2.LMEDS)
    np.testing.assert_allclose(m, cv_m, atol=1e-2)


@pytest.mark.parametrize("bad", [np.zeros((5, 3)), np.zeros((2,)), np.zeros((2, 2))])
def test_rejects_malformed_points(bad: np.ndarray) -> None:
    with pytest.raises(ValueError):
        align_transform(bad, 512)


def test_rejects_wrong_landmark_count_and_size() -> None:
    with pytest.raises(ValueError):
        align_transform(np.zeros((4, 2)), 512)
    with pytest.raises(ValueError):
        reference_points(0)
