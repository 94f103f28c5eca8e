"""Which faces a clip restores: the face check's refusals said per clip (count, frames, boxes per frame for the
viewer) and a choice of tracks, through the real FrameEngine and frame loop over a scripted frame session."""

from __future__ import annotations

from collections.abc import Iterator
import threading
from contextlib import contextmanager, nullcontext
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

av = pytest.importorskip("av")

from gpen_core.errors import InputError  # noqa: E402
from gpen_core.faces.detect import Detection  # noqa: E402
from gpen_core.modes import get_mode  # noqa: E402
from gpen_core.options import RestoreOptions  # noqa: E402
from gpen_core.result import FrameOutput, Timings  # noqa: E402
from gpen_core.video.engine_seam import FrameEngine  # noqa: E402
from gpen_core.video.stream import VideoOptions, restore_video  # noqa: E402

from .videoclips import gradient_frames, make_clip  # noqa: E402

LEFT, RIGHT, ODD = (4.0, 4.0, 24.0, 24.0), (36.0, 4.0, 60.0, 28.0), (10.0, 30.0, 30.0, 46.0)


def _det(box: tuple[float, ...]) -> Detection:
    x0, y0, x1, y1 = box
    lm = np.array([[x0 + 5, y0 + 6], [x1 - 5, y0 + 6], [(x0 + x1) / 2, y0 + 11], [x0 + 6, y1 - 5], [x1 - 6, y1 - 5]], np.float32)
    return Detection(box, 0.99, lm)  # type: ignore[arg-type]


class Session:
    """Two faces in every frame; the face check refuses one more in frames 1 and 3. Records what it restores."""

    def __init__(self) -> None:
        self.mode, self.notes, self.finds, self.frame = get_mode("low"), (), None, 0
        self.restored: list[list[tuple[float, ...]]] = []

    def detect(self, rgb: np.ndarray) -> list[Detection]:
        rejected = ((_det(ODD), "its landmarks do not form a face"),) if self.frame in (1, 3) else ()
        faces = (_det(LEFT), _det(RIGHT))  # as the real session's FoundFaces
        self.finds = SimpleNamespace(faces=faces, rejected=rejected, unchecked=(), merged=0, large=0)
        self.frame += 1
        return list(faces)

    def restore(self, rgb: np.ndarray, detections: list, check_identity: bool = True) -> FrameOutput:
        self.restored.append([tuple(d.box) for d in detections])
        return FrameOutput(rgb, (), (), Timings(0, 0, 0, 0))


class Restorer:
    device = "cpu"

    def __init__(self) -> None:
        self.session = Session()

    @contextmanager
    def frames(self, options: RestoreOptions, size: tuple[int, int]) -> Iterator[Session]:
        yield self.session


def _run(tmp_path: Path, tracks: frozenset[int] | None = None) -> tuple[object, list, Session]:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(5))
    restorer = Restorer()
    records: list = []
    engine = FrameEngine(restorer, RestoreOptions(mode="low"), (64, 48))
    result = restore_video(src, tmp_path / "out.mp4", video=VideoOptions(tracks=tracks), engine=engine,
                           on_frame=records.append)
    return result, records, restorer.session


def test_the_face_checks_refusals_are_said_per_clip_and_drawn_per_frame(tmp_path: Path) -> None:
    result, records, session = _run(tmp_path)
    notes = [n for n in result.notes if "face check" in n]  # type: ignore[attr-defined]
    assert len(notes) == 1 and "rejected 2 detections in 2 frames (its landmarks do not form a face)" in notes[0]
    assert "--no-face-check" in notes[0]
    assert [r.rejected for r in records] == [(), (ODD,), (), (ODD,), ()]  # each frame's own refusals
    assert all(len(r.faces) == 2 for r in records) and len(session.restored) == 5


def test_only_the_chosen_tracks_are_restored_and_every_track_is_recorded(tmp_path: Path) -> None:
    _, records, session = _run(tmp_path, frozenset({1}))
    ids = sorted({f.track for r in records for f in r.faces})
    assert ids == [0, 1]  # both faces followed (the viewer names them) ...
    right = next(f.track for f in records[0].faces if f.box[0] > 30)
    assert right == 1 and all(len(boxes) == 1 and boxes[0][0] > 30 for boxes in session.restored)  # ... one restored


def test_an_empty_choice_of_faces_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no face chosen"):
        VideoOptions(tracks=frozenset()).validated()


def test_the_cli_restores_only_the_faces_numbered_and_says_each_frames_numbers(tmp_path: Path, monkeypatch) -> None:
    import json

    from gpen_core import cli
    from gpen_core.video import command

    assert command.face_numbers("2, 3") == frozenset({1, 2}) and command.face_numbers(None) is None
    for bad in ("0", "a,b", ""):
        with pytest.raises(InputError, match="--tracks takes face numbers from 1"):
            command.face_numbers(bad)
    seen: dict = {}

    def fake_restore(src, dst, restorer, options, video, **kw):  # the CLI's request, as restore_video gets it
        seen["tracks"] = video.tracks
        raise InputError("stop here")

    monkeypatch.setattr("gpen_core.video.stream.restore_video", fake_restore)
    monkeypatch.setattr(cli, "_load_engine", lambda: None)
    src = make_clip(tmp_path / "in.mp4", gradient_frames(3))
    code = cli.main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--tracks", "2", "--mode", "low"])
    assert seen["tracks"] == frozenset({1}) and code == 2  # --tracks beside --segments: test_video_outputs' segment flags
    (tmp_path / "json").mkdir()
    record = _run(tmp_path / "json", None)[1][1].to_json()
    assert [f["face"] for f in record["faces"]] == [1, 2] and record["rejected"] == [list(ODD)]
    json.dumps(record)


def test_the_shrink_note_names_the_size_autos_choice_writes() -> None:
    # auto plans for the frame as it is; when it chooses low (longest side 2048), frames are written shrunk
    engine = FrameEngine(Restorer(), RestoreOptions(), (4000, 3000))
    try:
        notes = [n for n in engine.notes if "shrinks frames" in n]
        assert notes == ["low mode shrinks frames over 2048 px: 4000×3000 restored and written at 2048×1536"]
        assert engine.fit(np.zeros((3000, 4000, 3), np.uint8)).shape == (1536, 2048, 3)
    finally:
        engine.close()


class Arrivals(Session):
    """Faces 1 (LEFT) and 2 (RIGHT) in every frame; a third (ODD) from frame ``late`` on. Counts frames per run."""

    def __init__(self, late: int) -> None:
        super().__init__()
        self.late = late

    def detect(self, rgb: np.ndarray) -> list[Detection]:
        faces = (_det(LEFT), _det(RIGHT)) + ((_det(ODD),) if self.frame >= self.late else ())
        self.finds = SimpleNamespace(faces=faces, rejected=(), unchecked=(), merged=0, large=0)
        self.frame += 1
        return list(faces)


class ArrivalsRestorer(Restorer):
    def __init__(self, late: int) -> None:
        self.session = Arrivals(late)

    @contextmanager
    def frames(self, options: RestoreOptions, size: tuple[int, int]) -> Iterator[Session]:
        self.session.frame, self.session.restored = 0, []  # each run (Find faces, a restore) from the clip's start
        yield self.session


def test_a_face_left_out_stays_as_it_was_and_a_face_first_seen_later_is_restored(tmp_path: Path) -> None:
    src = make_clip(tmp_path / "in.mp4", gradient_frames(8))
    restorer = ArrivalsRestorer(late=5)
    engine = FrameEngine(restorer, RestoreOptions(mode="low"), (64, 48))
    result = restore_video(src, tmp_path / "out.mp4", video=VideoOptions(skip=frozenset({1})), engine=engine)
    # face 2 (RIGHT) never restored; face 1 in every frame, and face 3, never asked about, from its first frame on
    assert [sorted(b) for b in restorer.session.restored] == [[LEFT]] * 5 + [sorted([LEFT, ODD])] * 3
    assert "face 2 left as it was, as asked; every other face was restored" in result.notes
    with pytest.raises(InputError, match="must not also be chosen"):
        VideoOptions(tracks=frozenset({1}), skip=frozenset({1})).validated()


def test_the_video_tab_restores_a_face_find_faces_never_offered_beside_one_unticked(tmp_path: Path) -> None:
    """Find faces reads the part's first PREVIEW_S seconds; a face first seen after them is not offered. Unticking
    one offered face leaves only that one as it was: the late face is restored, and offered after the restore."""
    from gpen_app import video_view
    from gpen_app.video_wiring import _Handlers

    src = str(make_clip(tmp_path / "in.mp4", gradient_frames(16), time_base=Fraction(1, 2)))  # 8 s at 2 fps
    late = int(video_view.PREVIEW_S * 2) + 2  # frame 12: 6 s, after Find's window
    restorer = ArrivalsRestorer(late)
    state = SimpleNamespace(backend=None, engine=lambda: restorer,
                            policy=SimpleNamespace(video_cap_s=None, shared=False))
    on = _Handlers(state, lambda *a, **k: nullcontext(), tmp_path / "results", None)
    _, _, _, offered = on.find(src, "low", 0, 0, True)
    assert [k for _, k in offered] == [0, 1]  # faces 1 and 2; the late one not yet seen
    out = on.run(src, "low", (0, 0, True, [0], offered, False, False), lambda *a, **k: None, threading.Event(),
                 lambda: True, [0, 0])
    restored = restorer.session.restored
    assert len(restored) == 16 and all(LEFT in b and RIGHT not in b for b in restored)  # face 2: as it was
    assert [ODD in b for b in restored] == [False] * late + [True] * (16 - late)  # the late face: restored
    choices, kept = out[8], out[9]
    assert [k for _, k in choices] == [0, 1, 2] and kept == [0, 2]  # after it, every face offered, face 2 unticked
    assert "face 2 left as it was" in out[2]
