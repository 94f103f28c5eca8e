"""Faces steady across frames (gpen_core.video.steady), on detections made up with known truth: tracks,
gaps filled only between two sightings, no ghosts, and a linear fit with no lag on steady motion."""

from __future__ import annotations

import numpy as np

from gpen_core.faces.detect import Detection
from gpen_core.video.steady import HALF_WINDOW, MAX_GAP, Steadier

# Five landmarks of a 40 px face at the origin (eyes, nose, mouth corners).
SHAPE = np.array([[12, 14], [28, 14], [20, 22], [14, 30], [26, 30]], np.float32)


def face(x: float, y: float, noise: np.ndarray | None = None) -> Detection:
    lm = SHAPE + np.array([x, y], np.float32) + (0 if noise is None else noise)
    lm.setflags(write=False)
    return Detection(box=(x, y, x + 40, y + 40), score=0.99, landmarks=lm.astype(np.float32))


def run(frames: list[list[Detection]], fps: float = 25.0) -> list[list]:
    st = Steadier()
    out = []
    for i, dets in enumerate(frames):
        st.push(i / fps, dets)
        while st.ready():
            out.append(st.pop())
    while st.pending():
        out.append(st.pop())
    return out


def test_steady_motion_comes_out_exactly_with_no_lag() -> None:
    frames = [[face(10 + 3.0 * i, 20 + 0.5 * i)] for i in range(20)]
    out = run(frames)
    assert len(out) == 20
    for i, faces in enumerate(out):
        assert len(faces) == 1
        np.testing.assert_allclose(faces[0].detection.landmarks, SHAPE + [10 + 3.0 * i, 20 + 0.5 * i], atol=1e-4)


def test_jitter_shrinks_by_the_window() -> None:
    rng = np.random.default_rng(0)
    frames = [[face(10 + 2.0 * i, 20, rng.normal(0, 0.6, (5, 2)).astype(np.float32))] for i in range(60)]
    out = run(frames)

    def movement(seq: list[np.ndarray]) -> float:  # frame-to-frame, the pan (2 px) taken out
        return float(np.mean([np.linalg.norm(b - a - [2.0, 0], axis=1).mean() for a, b in zip(seq, seq[1:])]))

    raw = movement([f[0].landmarks for f in frames])
    smooth = movement([f[0].detection.landmarks for f in out])
    assert raw > 0.9
    assert smooth < raw / 4  # a 7-frame window: the mean of 7 moves by about 1/7 of a single reading


def test_two_faces_keep_their_tracks() -> None:
    frames = [[face(10 + i, 20), face(200 - i, 30)] for i in range(10)]
    frames[4] = frames[4][::-1]  # the detector's order changes: the tracks must not swap
    out = run(frames)
    left = [next(f for f in faces if f.detection.box[0] < 100).track for faces in out]
    right = [next(f for f in faces if f.detection.box[0] > 100).track for faces in out]
    assert len(set(left)) == 1 and len(set(right)) == 1 and left[0] != right[0]


def test_a_missed_detection_between_two_sightings_is_filled() -> None:
    frames = [[face(10 + 4.0 * i, 20)] for i in range(12)]
    for i in (5, 6):
        frames[i] = []
    out = run(frames)
    assert [len(f) for f in out] == [1] * 12
    assert out[5][0].filled and out[6][0].filled and not out[4][0].filled
    np.testing.assert_allclose(out[5][0].detection.landmarks, SHAPE + [30.0, 20], atol=1e-3)  # on the line


def test_a_face_that_leaves_or_enters_is_never_invented() -> None:
    leaving = [[face(10 + i, 20)] if i < 6 else [] for i in range(12)]
    out = run(leaving)
    assert [len(f) for f in out] == [1] * 6 + [0] * 6
    entering = [[] if i < 6 else [face(10 + i, 20)] for i in range(12)]
    out = run(entering)
    assert [len(f) for f in out] == [0] * 6 + [1] * 6


def test_a_gap_longer_than_the_limit_is_not_filled() -> None:
    gap = MAX_GAP + 1
    frames = [[face(10.0, 20)] if not 4 <= i < 4 + gap else [] for i in range(14)]
    out = run(frames)
    assert [len(f) for f in out[4 : 4 + gap]] == [0] * gap


def test_look_ahead_is_the_half_window() -> None:
    assert Steadier().lookahead == max(HALF_WINDOW, MAX_GAP) == 3
