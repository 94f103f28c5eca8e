"""Faces in clips with the real RetinaFace mobilenet0.25 (../shared): steady landmarks on a panning and a
still shot, faces found upright on a rotated clip, the CLI's JSON lines, and one clip through the real
restore (``low``, a random GPEN-BFR-256). Skipped cleanly without ../shared."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.options import RestoreOptions  # noqa: E402
from gpen_core.video.engine_seam import FrameEngine, FrameOut  # noqa: E402
from gpen_core.video.stream import restore_video  # noqa: E402

from .conftest import shared_path  # noqa: E402
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: E402,F401
from .videoclips import make_clip, read_clip  # noqa: E402

PAN_PX = 2  # the crop window moves this far a frame


def _rgb(path: Path) -> np.ndarray:
    import cv2

    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


class DetectOnly(FrameEngine):
    """The real detection (and its mode plan) with the restore left out: what the steadying sees, fast."""

    raw: list

    def detect(self, rgb: np.ndarray) -> list:
        found = super().detect(rgb)
        self.raw.append(found)
        return found

    def restore(self, rgb: np.ndarray, detections: list) -> FrameOut:
        return FrameOut(rgb, ())


def _engine(size: tuple[int, int]) -> DetectOnly:
    from gpen_core.restorer import Restorer

    engine = DetectOnly(Restorer(synthetic_weights=True), RestoreOptions(mode="low"), size)
    engine.raw = []
    return engine


def _movement(per_frame: list[dict[int, np.ndarray]], step: float) -> float:
    """Mean frame-to-frame landmark movement (px, per landmark) with the known pan taken out."""
    moves = [
        np.linalg.norm(b[k] - a[k] - [-step, 0.0], axis=1).mean()
        for a, b in zip(per_frame, per_frame[1:]) for k in b if k in a
    ]
    assert len(moves) >= 20, "too few faces followed to measure"
    return float(np.mean(moves))


def _raw_tracks(raw: list[list]) -> list[dict[int, np.ndarray]]:
    """The detector's own landmarks, each face keyed by its first frame's box order (matched by nearest centre)."""
    first = [np.array(d.box) for d in raw[0]]
    out = []
    for dets in raw:
        frame = {}
        for d in dets:
            c = np.array(d.box)
            k = int(np.argmin([np.abs(c - f).sum() for f in first]))
            frame[k] = np.asarray(d.landmarks)
        out.append(frame)
    return out


@pytest.mark.parametrize("step, limit", [(PAN_PX, 0.35), (0, 0.1)], ids=["panning", "still"])
def test_landmarks_stay_steady(tmp_path: Path, models_with_detector: Path, one_thread: None, step: int, limit: float) -> None:
    photo = _rgb(shared_path("faces", "Solvay_conference_1927.png"))
    w, h, n = 480, 270, 16
    frames = [np.ascontiguousarray(photo[200 : 200 + h, 300 + step * i : 300 + step * i + w]) for i in range(n)]
    src = make_clip(tmp_path / "pan.mp4", frames)
    engine = _engine((w, h))
    records = []
    restore_video(src, tmp_path / "out.mp4", engine=engine, on_frame=records.append)
    assert len(records) == n
    smooth = _movement([{f.track: f.landmarks for f in r.faces} for r in records], step)
    raw = _movement(_raw_tracks(engine.raw), step)
    print(f"landmark movement {'panning' if step else 'still'}: raw {raw:.3f} px, steadied {smooth:.3f} px")
    assert smooth <= limit
    if step:
        assert raw >= 0.5  # the clip is as hard as the target says: the detector alone moves ~0.9 px


def test_faces_in_a_rotated_clip_are_found_upright(tmp_path: Path, models_with_detector: Path, one_thread: None) -> None:
    face = _rgb(shared_path("faces", "ffhq_00000_512.png"))
    import cv2

    canvas = np.full((192, 256, 3), 90, np.uint8)
    canvas[16:176, 48:208] = cv2.resize(face, (160, 160), interpolation=cv2.INTER_AREA)
    stored = np.ascontiguousarray(np.rot90(canvas, -1))  # the camera held sideways: stored turned clockwise...
    src = make_clip(tmp_path / "phone.mp4", [stored] * 3, rotation=90)  # ...and shown turned back (+90°: cclock)
    engine = _engine((256, 192))
    records = []
    result = restore_video(src, tmp_path / "out.mp4", engine=engine, on_frame=records.append)
    assert result.size == (256, 192) and read_clip(tmp_path / "out.mp4")["size"] == (256, 192)
    for r in records:
        assert len(r.faces) == 1
        lm = r.faces[0].landmarks
        eyes_y, mouth_y = lm[:2, 1].mean(), lm[3:, 1].mean()
        assert eyes_y < mouth_y - 20 and lm[0, 0] < lm[1, 0]  # upright: eyes over the mouth, left eye left
    assert all(d.turn == 0 for dets in engine.raw for d in dets)  # found on the upright pass, no turned search


def test_cli_prints_a_json_line_per_frame_then_the_summary(
    tmp_path: Path, low_mode_home: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from gpen_core.cli import main

    monkeypatch.setattr(FrameEngine, "restore", lambda self, rgb, dets: FrameOut(rgb, ()))  # detection only: quick
    face = _rgb(shared_path("faces", "ffhq_00001_512.png"))
    import cv2

    canvas = np.full((144, 192, 3), 70, np.uint8)
    canvas[8:136, 32:160] = cv2.resize(face, (128, 128), interpolation=cv2.INTER_AREA)
    src = make_clip(tmp_path / "clip.bin", [canvas] * 4, audio="aac", audio_seconds=0.2, container="mp4")  # no video extension
    code = main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--mode", "low", "--json", "--crf", "20"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [x["frame"] for x in lines[:4]] == [0, 1, 2, 3]
    assert [x["time"] for x in lines[:4]] == [0.0, 0.04, 0.08, 0.12]
    f = lines[0]["faces"][0]
    assert len(f["box"]) == 4 and np.array(f["landmarks"]).shape == (5, 2)
    assert 32 < f["landmarks"][0][0] < 160 and 8 < f["landmarks"][0][1] < 136  # display pixels, on the face
    summary = lines[4]
    assert summary["status"] == "ok" and summary["output"] == str(tmp_path / "out.mp4")
    v = summary["video"]
    assert v["frames"] == 4 and v["audio"] == "copied" and v["crf"] == 20 and v["mode"] == "low"
    assert v["peaks"]["rss_bytes"] > 0 and v["seconds_per_frame"] > 0 and v["fps"] == pytest.approx(25.0)
    assert len(lines) == 5


def test_cli_writes_a_clips_summary_on_stdout_as_a_photos_result(
    tmp_path: Path, low_mode_home: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without --json the summary line goes where a photo's result line goes (stdout: a script can read
    it), the progress on stderr; with --json stdout holds only the records (the test above)."""
    from gpen_core.cli import main

    monkeypatch.setattr(FrameEngine, "restore", lambda self, rgb, dets: FrameOut(rgb, ()))  # detection only: quick
    src = make_clip(tmp_path / "clip.mp4", [np.full((96, 128, 3), 70, np.uint8)] * 4, container="mp4")
    out = tmp_path / "out.mp4"
    code = main(["restore", str(src), "-o", str(out), "--mode", "low"])
    got = capsys.readouterr()
    assert code == 0
    [line] = got.out.splitlines()
    assert line.startswith(f"{src} -> {out}: 4 frames (") and ", mode low, " in line
    assert f"-> {out}" not in got.err and "clip.mp4: frame 4/4" in got.err


def test_a_clip_through_the_real_restore_changes_the_face_only(tmp_path: Path, low_mode_home: Path, one_thread: None) -> None:
    import cv2

    from gpen_core.restorer import Restorer

    face = _rgb(shared_path("faces", "ffhq_00002_512.png"))
    canvas = np.full((192, 320, 3), 120, np.uint8)
    canvas[32:160, 16:144] = cv2.resize(face, (128, 128), interpolation=cv2.INTER_AREA)
    src = make_clip(tmp_path / "in.mp4", [canvas] * 2, crf=10)
    result = restore_video(src, tmp_path / "out.mp4", Restorer(), RestoreOptions(mode="low"))
    got, want = read_clip(tmp_path / "out.mp4")["frames"], read_clip(src)["frames"]
    assert result.frames == 2 and result.mode == "low" and result.faces_per_frame_max == 1
    diff = np.abs(got[0].astype(int) - want[0].astype(int)).mean(axis=2)
    assert diff[40:150, 30:130].mean() > 10  # the random generator's face was pasted there
    assert diff[:, 200:].mean() < 3  # far from the face the frame is the input's
    assert result.peaks.rss_bytes > result.peaks.baseline_rss_bytes


def test_a_stopped_or_refused_clip_leaves_the_restorer_free(tmp_path: Path, models_with_detector: Path, one_thread: None) -> None:
    import threading

    from gpen_core.errors import InputError
    from gpen_core.restorer import Restorer
    from gpen_core.video.errors import VideoStopped

    from .videoclips import gradient_frames

    restorer = Restorer(synthetic_weights=True)
    src = make_clip(tmp_path / "in.mp4", gradient_frames(12))
    stop = threading.Event()
    with pytest.raises(VideoStopped):
        restore_video(src, tmp_path / "out.mp4", restorer, RestoreOptions(mode="low"), stop=stop,
                      on_frame=lambda r: stop.set())
    assert not restorer.busy  # the frame session's lock was let go
    with pytest.raises(InputError, match="face crops only"):
        restore_video(src, tmp_path / "out.mp4", restorer, RestoreOptions(mode="faces-only"))
    assert not restorer.busy
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_cli_folder_of_a_photo_and_a_damaged_video_exits_5_with_both_written(
    tmp_path: Path, low_mode_home: Path, one_thread: None, capsys: pytest.CaptureFixture
) -> None:
    import cv2

    from gpen_core.cli import main

    from .videoclips import gradient_frames

    folder = tmp_path / "in"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), gradient_frames(1, 64, 48)[0])  # no face: a quick photo
    frames = [np.random.default_rng(i).integers(0, 255, (48, 64, 3), np.uint8) for i in range(12)]
    data = make_clip(tmp_path / "good.mkv", frames, crf=0).read_bytes()
    (folder / "b.dat").write_bytes(data[: len(data) // 2])  # a video cut in half, with no video extension
    code = main(["restore", str(folder), "-o", str(tmp_path / "out"), "--mode", "low", "--json"])
    records = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 5
    video = next(r for r in records if r.get("input", "").endswith("b.dat"))
    assert video["status"] == "damaged" and video["video"]["damage"]["frame"] == video["video"]["frames"] > 0
    assert (tmp_path / "out" / "b.mp4").exists()
    assert any(r.get("input", "").endswith("a.png") and r["status"] == "ok" for r in records)
    assert sorted(p.suffix for p in (tmp_path / "out").iterdir()) == [".jpg", ".mp4"]  # low writes JPEG photos


def test_a_clip_and_a_photo_go_into_a_new_folder_whose_name_has_a_dot(
    tmp_path: Path, low_mode_home: Path, one_thread: None, capsys: pytest.CaptureFixture
) -> None:
    """`-o results.v2` for a clip and a photo: only a folder holds both, so it is made (one clip's `-o out.v2`
    stays refused: an MP4 or a folder)."""
    import cv2

    from gpen_core.cli import main

    from .videoclips import gradient_frames

    cv2.imwrite(str(tmp_path / "a.png"), gradient_frames(1, 64, 48)[0])
    clip = make_clip(tmp_path / "b.mp4", gradient_frames(3, 64, 48))
    dst = tmp_path / "results.v2"
    assert main(["restore", str(clip), str(tmp_path / "a.png"), "-o", str(dst), "--mode", "low"]) == 0
    assert sorted(p.name for p in dst.iterdir()) == ["a.jpg", "b.mp4"]  # low writes JPEG photos
    assert main(["restore", str(clip), "-o", str(tmp_path / "one.v2"), "--mode", "low"]) == 2
    assert "a restored video is an MP4" in capsys.readouterr().err and not (tmp_path / "one.v2").exists()


def test_a_folder_of_clips_says_what_it_skipped_before_the_first_clip(
    tmp_path: Path, low_mode_home: Path, one_thread: None, capsys: pytest.CaptureFixture
) -> None:
    from gpen_core.cli import main

    from .videoclips import gradient_frames

    folder = tmp_path / "in"
    folder.mkdir()
    make_clip(folder / "b.mp4", gradient_frames(3, 64, 48))
    (folder / "readme.txt").write_text("notes, not a video")
    (folder / "sub").mkdir()
    assert main(["restore", str(folder), "-o", str(tmp_path / "out"), "--mode", "low"]) == 0
    err = capsys.readouterr().err
    first_frame = err.index("b.mp4: frame")
    for name, why in (("readme.txt", "neither a photo"), ("sub", "a folder")):
        said = err.index(f"skipped: {folder / name}: ")
        assert said < first_frame and why in err[said:].splitlines()[0], err


def test_find_faces_numbers_the_faces_of_the_parts_start_without_restoring(tmp_path: Path, models_with_detector: Path,
                                                                        one_thread: None) -> None:
    import cv2

    from gpen_app import video_view
    from gpen_core.restorer import Restorer

    face = _rgb(shared_path("faces", "ffhq_00002_512.png"))
    canvas = np.full((192, 320, 3), 120, np.uint8)
    canvas[32:160, 16:144] = cv2.resize(face, (128, 128), interpolation=cv2.INTER_AREA)
    src = make_clip(tmp_path / "in.mp4", [canvas] * 4)
    restorer = Restorer(synthetic_weights=True)
    found = video_view.find_faces(str(src), tmp_path / "scratch.mp4", restorer, RestoreOptions(mode="low"), None, None)
    assert len(found) == 4 and video_view.track_choices(found) == [("face 1: frames 1–4 (4 frames)", 0)]
    assert video_view.found_text(found) == "1 face followed in 4 frames."
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"] and not restorer.busy  # nothing left, lock let go


def test_a_clip_over_max_faces_says_so_once(
    tmp_path: Path, low_mode_home: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A clip keeps at most max faces per frame as a photo does, and its notes say so once (not per frame)."""
    import cv2

    from gpen_core.cli import main

    monkeypatch.setattr(FrameEngine, "restore", lambda self, rgb, dets: FrameOut(rgb, ()))  # detection only: quick
    canvas = np.full((144, 320, 3), 70, np.uint8)
    for x, name in ((16, "ffhq_00001_512.png"), (176, "ffhq_00000_512.png")):
        canvas[8:136, x:x + 128] = cv2.resize(_rgb(shared_path("faces", name)), (128, 128), interpolation=cv2.INTER_AREA)
    src = make_clip(tmp_path / "clip.mp4", [canvas] * 3, container="mp4")
    code = main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--mode", "low", "--json", "--max-faces", "1"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [len(x["faces"]) for x in lines[:3]] == [1, 1, 1]
    capped = [n for n in lines[3]["video"]["notes"] if "max faces = 1" in n]
    assert capped == ["found more than 1 face in 3 frames (up to 2 in one); restored the 1 with the highest detection "
                      "scores in each (max faces = 1)"]


def test_a_clips_faceless_frames_run_the_detector_once_each_and_every_turn_with_orientations(
    tmp_path: Path, low_mode_home: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A frame is upright (its display matrix turned it): a faceless one (a landscape, a title card) ran the turned
    copies too, four detector passes a frame. --orientations, once refused on a clip, asks for them on every frame;
    a clip with no face in any frame says so once, and where turned faces were not searched, how to search them."""
    from gpen_core.cli import main
    from gpen_core.faces.detect import FaceDetector

    monkeypatch.setattr(FrameEngine, "restore", lambda self, rgb, dets: FrameOut(rgb, ()))  # detection only: quick
    turns: list[int] = []
    real = FaceDetector.detect

    def spy(self, rgb, **kw):
        turns.append(kw.get("turn", 0))
        return real(self, rgb, **kw)

    monkeypatch.setattr(FaceDetector, "detect", spy)
    src = make_clip(tmp_path / "clip.mp4", [np.full((96, 128, 3), 70, np.uint8)] * 3, container="mp4")
    assert main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--mode", "low", "--backend", "torch"]) == 0
    assert turns == [0, 0, 0]
    err = capsys.readouterr().err
    assert err.count("no face found in any of the 3 frames, each searched upright: if the clip was filmed on its side") == 1
    assert "Video tab: Search turned faces; CLI: --orientations" in err, err
    assert "paste mask" not in err, err  # how faces are pasted says nothing of a clip without one
    turns.clear()
    assert main(["restore", str(src), "-o", str(tmp_path / "turned.mp4"), "--mode", "low", "--backend", "torch",
                 "--orientations"]) == 0
    assert turns == [0, 1, 2, 3] * 3
    assert "no face found in any of the 3 frames, each searched upright and turned 90°, 180° and 270°" in capsys.readouterr().err


def test_a_face_found_only_turned_is_said_once_for_the_clip(
    tmp_path: Path, low_mode_home: Path, one_thread: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A clip filmed on its side with --orientations: each frame's face is found on a turned copy, and the clip's
    notes say so once with the count, as a photo's notes say it (they said nothing)."""
    import cv2

    from gpen_core.cli import main

    monkeypatch.setattr(FrameEngine, "restore", lambda self, rgb, dets: FrameOut(rgb, ()))  # detection only: quick
    canvas = np.full((160, 160, 3), 70, np.uint8)
    canvas[16:144, 16:144] = cv2.resize(_rgb(shared_path("faces", "ffhq_00001_512.png")), (128, 128),
                                        interpolation=cv2.INTER_AREA)
    src = make_clip(tmp_path / "side.mp4", [np.ascontiguousarray(np.rot90(canvas))] * 3, container="mp4")
    code = main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--mode", "low", "--backend", "torch",
                 "--json", "--orientations"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 0 and [len(x["faces"]) for x in lines[:3]] == [1, 1, 1]
    assert [n for n in lines[3]["video"]["notes"] if "turned" in n] == [
        "3 faces in 3 frames found only on the frame turned 90°, 180° or 270°: restored upright, pasted back as in "
        "the frame"]
