"""The identity check (gpen_core.faces.identity): dlib's descriptor distance between a face before and
after restoration, what the user can do about it, and where it is shown. Real photos from ../shared, the
real RetinaFace mobilenet0.25, dlib's real descriptor; skipped with the pip command where dlib is absent.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from gpen_core.errors import InputError, WeightsError
from gpen_core.faces import identity_model
from gpen_core.faces.align import align_transform
from gpen_core.faces.detect import Detection, FaceDetector
from gpen_core.faces.identity import IdentityPolicy, distance, policy_for
from gpen_core.faces.photo import FaceJob, restore_photo
from gpen_core.options import RestoreOptions

from .conftest import shared_path

needs_dlib = pytest.mark.skipif(not identity_model.available(), reason=f"needs dlib and its models: {identity_model.PIP_COMMAND}")


def invert(crop: np.ndarray) -> np.ndarray:
    return 255 - crop


def load_rgb(*parts: str) -> np.ndarray:
    return np.ascontiguousarray(cv2.imread(str(shared_path(*parts)))[:, :, ::-1])


@pytest.fixture(scope="module")
def detector() -> FaceDetector:
    return FaceDetector(shared_path("weights", "detection_mobilenet0.25_Final.pth"), "mobilenet0.25", "cpu")


@pytest.fixture(scope="module")
def solvay() -> np.ndarray:
    return load_rgb("faces", "Solvay_conference_1927.png")


@pytest.fixture(scope="module")
def solvay_faces(detector: FaceDetector, solvay: np.ndarray) -> list[Detection]:
    """Four of the photo's faces, largest first (a few seconds of checks, not 29 faces' worth)."""
    dets = detector.detect(solvay)
    return sorted(dets, key=lambda d: -(d.box[2] - d.box[0]))[:4]


def gpen_crop(detector: FaceDetector, rgb: np.ndarray, size: int = 512) -> np.ndarray:
    """The photo's largest face as GPEN aligns it (what the generator is given)."""
    det = max(detector.detect(rgb), key=lambda d: d.box[2] - d.box[0])
    fwd, _ = align_transform(det.landmarks, size)
    return cv2.warpAffine(rgb, fwd, (size, size), flags=cv2.INTER_LINEAR)


# ----------------------------------------------------------------------------- the number


@needs_dlib
def test_unchanged_face_measures_near_zero_and_is_not_flagged(solvay: np.ndarray, solvay_faces: list[Detection]) -> None:
    """The identity stand-in: the generator returns its input (small faces still get GPEN's smoothing)."""
    out = restore_photo(solvay, detections=solvay_faces, restore_fn=lambda c: c.copy(), size=256, job=FaceJob(identity=IdentityPolicy()))
    checks = [f.identity for f in out.faces]
    assert len(checks) == 4 and all(c is not None for c in checks)
    assert all(c.distance <= 0.05 and not c.over_threshold and c.action == "restored" for c in checks), checks
    assert out.timings["identity_s"] > 0 and not out.notes


@needs_dlib
def test_same_person_transformed_stays_under_the_threshold_and_different_people_over_it(detector: FaceDetector) -> None:
    """Two photos of one person made from one (shifted, blurred, JPEG at quality 30), each detected and aligned
    on its own; and the three FFHQ people against each other."""
    photos = [load_rgb("faces", f"ffhq_0000{i}_512.png") for i in range(3)]
    crops = [gpen_crop(detector, p) for p in photos]
    for photo, crop in zip(photos, crops):
        shifted = cv2.warpAffine(photo, np.float32([[1, 0, 40], [0, 1, 25]]), (512, 512), borderMode=cv2.BORDER_REFLECT)
        blurred = cv2.GaussianBlur(photo, (0, 0), 3)
        jpeg = cv2.imdecode(cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_QUALITY, 30])[1], cv2.IMREAD_UNCHANGED)
        for other in (shifted, blurred, jpeg):
            assert distance(crop, gpen_crop(detector, other)) < 0.6
    for i in range(3):
        for j in range(i + 1, 3):
            assert distance(crops[i], crops[j]) > 0.6, (i, j)


@needs_dlib
def test_random_weight_generator_faces_are_all_flagged(models_with_detector: Path, gen256: Path) -> None:
    """Low mode with the check asked for (auto leaves low alone): a random-weight generator changes every face."""
    from gpen_app.panels import metrics_markdown
    from gpen_core.restorer import Restorer
    from gpen_core.result_json import result_record

    photo = load_rgb("faces", "Solvay_conference_1927.png")
    res = Restorer()(photo, RestoreOptions(mode="low", model=str(gen256), max_faces=3, identity="on"))
    assert len(res.faces) == 3
    assert all(f.identity is not None and f.identity.over_threshold for f in res.faces), [f.identity for f in res.faces]
    assert res.timings.identity_s > 0
    rec = result_record(res)["identity"]
    assert rec["threshold"] == 0.6 and "not a promise" in rec["threshold_meaning"]
    assert [f["over_threshold"] for f in rec["faces"]] == [True, True, True]
    md = metrics_markdown(res)
    assert "| Face | identity distance | pasted |" in md and md.count("(over 0.6)") == 3 and "| identity check |" in md
    assert "not a promise about restorations" in md


# ----------------------------------------------------------------------------- what the user can do


@needs_dlib
def test_keep_original_pastes_the_original_face_back_pixel_for_pixel(solvay: np.ndarray, solvay_faces: list[Detection]) -> None:
    kept = restore_photo(solvay, detections=solvay_faces, restore_fn=invert, size=256, job=FaceJob(identity=IdentityPolicy(limit=0.3)))
    assert np.array_equal(kept.image, solvay)
    assert all(f.identity.action == "kept original" and np.array_equal(f.restored, f.crop) for f in kept.faces)
    assert [n.split(":")[0] for n in kept.notes] == ["face 1", "face 2", "face 3", "face 4"]
    assert all("over your limit 0.3: kept the original face" in n for n in kept.notes)
    # Under a limit the faces are not touched by it: the inverted faces are pasted.
    pasted = restore_photo(solvay, detections=solvay_faces, restore_fn=invert, size=256, job=FaceJob(identity=IdentityPolicy(limit=1.99)))
    assert not np.array_equal(pasted.image, solvay) and not pasted.notes
    assert all(f.identity.action == "restored" for f in pasted.faces)


@needs_dlib
def test_keep_original_on_an_aligned_crop_returns_the_input() -> None:
    face = load_rgb("faces", "ffhq_00001_512.png")
    out = restore_photo(face, detections=None, restore_fn=invert, size=512, job=FaceJob(aligned=True, identity=IdentityPolicy(limit=0.6)))
    assert np.array_equal(out.image, face) and out.faces[0].identity.action == "kept original"


@needs_dlib
def test_blend_over_the_limit_moves_the_face_toward_the_original(solvay: np.ndarray, solvay_faces: list[Detection]) -> None:
    out = restore_photo(solvay, detections=solvay_faces[:1], restore_fn=invert, size=256, job=FaceJob(identity=IdentityPolicy(limit=0.3, alpha=0.25)))
    face = out.faces[0]
    restored = cv2.filter2D(invert(face.crop), -1, np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], np.float32) / 16)
    big = solvay_faces[0].box[2] - solvay_faces[0].box[0] >= 100
    expected = cv2.addWeighted(invert(face.crop) if big else restored, 0.25, face.crop, 0.75, 0.0)
    assert face.identity.action == "blended" and np.array_equal(face.restored, expected)
    assert "blended it toward the original (alpha 0.25)" in out.notes[0]


def test_an_out_of_range_limit_is_refused_in_plain_words() -> None:
    """It read "between 0 and 2 (0.6 (dlib's …)), got 2.5": parentheses in parentheses, and no field named."""
    with pytest.raises(InputError) as e:
        RestoreOptions(identity_limit=2.5).validated()
    msg = str(e.value)
    assert "'Identity limit'" in msg and "--identity-limit" in msg and "got 2.5" in msg, msg
    depth = 0
    for ch in msg:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        assert depth <= 1, msg


def test_options_refuse_a_limit_without_the_check_and_out_of_range_values() -> None:
    with pytest.raises(InputError, match="needs the identity check"):
        RestoreOptions(identity="off", identity_limit=0.6).validated()
    with pytest.raises(InputError, match="above 0 and below 2"):
        RestoreOptions(identity_limit=0.0).validated()
    with pytest.raises(InputError, match="below 1"):
        RestoreOptions(identity_limit=0.6, identity_alpha=1.0).validated()
    with pytest.raises(InputError, match="auto, on, off"):
        RestoreOptions(identity="always").validated()


def test_a_blend_without_a_limit_is_refused_not_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--identity-alpha 0.5`` alone restored as if it were not given (it acts only over a limit): now refused."""
    from gpen_core.cli import main

    with pytest.raises(InputError, match="over an identity limit"):
        RestoreOptions(identity_alpha=0.5).validated()
    RestoreOptions(identity_limit=0.6, identity_alpha=0.5).validated()
    photo = shared_path("faces", "ffhq_00000_512.png")
    assert main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--identity-alpha", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "--identity-limit" in err and "Traceback" not in err, err
    assert not (tmp_path / "o.png").exists()


def test_the_apps_blend_slider_cannot_be_moved_before_a_limit_is_set() -> None:
    """In the app the blend slider sat beside an empty limit: moved first, every Restore failed with the refusal
    above. It is off until a limit is set, and clearing the limit turns it off again, back at 0."""
    import app

    alpha = next(b for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == "identity-alpha")
    limit = next(b for b in app.demo.blocks.values() if getattr(b, "elem_id", None) == "identity-limit")
    assert alpha.interactive is False  # as the page opens: the limit is 0 (measure only)
    dep = next(d for d in app.demo.fns.values() if (limit._id, "change") in d.targets)
    assert [o._id for o in dep.outputs] == [alpha._id]
    assert dep.fn(0.5)["interactive"] is True
    for cleared in (0, None):
        update = dep.fn(cleared)
        assert update["interactive"] is False and update["value"] == 0.0
        RestoreOptions(**app.fv.identity_options("auto", cleared, update["value"])).validated()


def test_cli_refuses_a_limit_with_the_check_off_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpen_core.cli import main

    photo = shared_path("faces", "ffhq_00000_512.png")
    rc = main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--identity", "off", "--identity-limit", "0.6"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs the identity check" in err and "Traceback" not in err
    assert not (tmp_path / "o.png").exists()


# ----------------------------------------------------------------------------- when it runs


def test_auto_runs_in_every_mode_but_low_and_never_for_seg2face(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity_model, "available", lambda: True)
    assert policy_for("balanced", RestoreOptions()) is not None
    assert policy_for("low", RestoreOptions()) is None
    assert policy_for("quality", RestoreOptions(task="seg2face", identity="on")) is None
    assert policy_for("quality", RestoreOptions(identity="off")) is None
    monkeypatch.setattr(identity_model, "available", lambda: False)
    assert policy_for("quality", RestoreOptions()) is None


def test_a_limit_asked_under_auto_runs_the_check_in_low_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--mode low --identity-limit 0.5`` pasted every restored face whatever its distance: auto leaves low alone,
    so the limit the user set was dropped without a word. A limit needs the check: asked, it runs (and is budgeted)."""
    from gpen_core.engine import budget
    from gpen_core.modes import MODES

    monkeypatch.setattr(identity_model, "available", lambda: True)
    monkeypatch.setattr(identity_model, "model", lambda off=None: None)
    opts = RestoreOptions(mode="low", identity_limit=0.5)
    policy = policy_for("low", opts)
    assert policy is not None and policy.limit == 0.5
    assert budget.identity_bytes(MODES["low"], "cpu", "enhance", budget.Work.of(opts).identity) > 0
    assert policy_for("low", RestoreOptions(mode="low")) is None  # no limit: auto still leaves low alone
    monkeypatch.undo()  # the real loader, told that dlib is missing: the limit is not dropped, the fix is named
    monkeypatch.setattr(identity_model, "_model", None)
    monkeypatch.setattr(identity_model, "_spec", lambda name: None)
    with pytest.raises(WeightsError, match="pip install -r requirements-identity.txt") as e:
        policy_for("balanced", RestoreOptions(identity_limit=0.5))
    # Its other fix, turning the check off, is refused beside the limit that asked for it: the message says both.
    assert "turn the identity check off and set no identity limit" in str(e.value), e.value
    with pytest.raises(InputError, match="an identity limit needs the identity check"):
        RestoreOptions(identity="off", identity_limit=0.5).validated()


def test_a_damaged_identity_install_names_the_requests_other_fix_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """dlib installed but its model file missing (a broken install): the message named only the pip command, where
    a missing package named turning the check off too. Every refusal of the loader now names the request's fixes."""
    from types import SimpleNamespace

    monkeypatch.setattr(identity_model, "_model", None)
    monkeypatch.setattr(identity_model, "_spec", lambda name: SimpleNamespace(submodule_search_locations=[str(tmp_path)]))
    with pytest.raises(WeightsError, match="is missing: pip install -r requirements-identity.txt") as e:
        policy_for("balanced", RestoreOptions(identity_limit=0.5))
    assert str(e.value).endswith(", or turn the identity check off and set no identity limit"), e.value


def test_identity_every_asks_for_the_check_and_is_refused_with_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--identity-every 5`` on a clip in low (auto leaves low alone) or with ``--identity off`` was dropped without
    a word: it now runs the check as a limit does, and beside ``off`` it is refused."""
    monkeypatch.setattr(identity_model, "available", lambda: True)
    monkeypatch.setattr(identity_model, "model", lambda off=None: None)
    assert policy_for("low", RestoreOptions(mode="low", identity_every=5)) is not None
    with pytest.raises(InputError, match="--identity-every"):
        RestoreOptions(identity="off", identity_every=5).validated()


def test_identity_every_without_dlib_names_every_step_in_one_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--identity-every 5`` on a clip without dlib was told "turn the identity check off and set no identity limit";
    turned off, it was refused again for --identity-every. The first message names dropping it too."""
    monkeypatch.setattr(identity_model, "_model", None)
    monkeypatch.setattr(identity_model, "_spec", lambda name: None)
    with pytest.raises(WeightsError, match="pip install -r requirements-identity.txt") as e:
        policy_for("balanced", RestoreOptions(identity_every=5).for_clip())
    assert "turn the identity check off and drop --identity-every" in str(e.value), e.value
    assert "identity limit" not in str(e.value), e.value  # none was set
    RestoreOptions(identity="off").for_clip()  # what it says to do is taken


def test_on_without_dlib_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity_model, "_model", None)
    monkeypatch.setattr(identity_model, "_spec", lambda name: None)
    with pytest.raises(WeightsError, match="pip install -r requirements-identity.txt"):
        policy_for("low", RestoreOptions(identity="on"))


def test_panel_says_why_nothing_was_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from gpen_core.modes import MODES
    from gpen_app.face_views import identity_lines

    face = SimpleNamespace(identity=None)
    monkeypatch.setattr(identity_model, "available", lambda: False)
    result = SimpleNamespace(faces=(face,), task="enhance", mode=MODES["balanced"])
    assert "`pip install -r requirements-identity.txt`" in identity_lines(result)[-1]  # type: ignore[arg-type]
    monkeypatch.setattr(identity_model, "available", lambda: True)
    low = SimpleNamespace(faces=(face,), task="enhance", mode=MODES["low"])
    assert "off in low unless asked" in identity_lines(low)[-1]  # type: ignore[arg-type]


def test_a_group_photos_identity_table_is_a_row_per_face_that_fits_a_phone() -> None:
    """A column per face made a table wider than the panel (faces 5-10 clipped at 1400 px, worse on a phone): three
    columns whatever the number of faces, every face on its own row."""
    from types import SimpleNamespace

    from gpen_core.modes import MODES
    from gpen_app.face_views import identity_lines
    from gpen_core.result import IdentityCheck

    faces = tuple(SimpleNamespace(identity=IdentityCheck(0.85 if i % 2 else 0.42, "restored", None, 0.1)) for i in range(29))
    rows = [line for line in identity_lines(SimpleNamespace(faces=faces, task="enhance", mode=MODES["balanced"]))  # type: ignore[arg-type]
            if line.startswith("|")]
    assert rows[0] == "| Face | identity distance | pasted |"
    assert all(row.count("|") == 4 for row in rows), rows[:3]  # three cells each
    assert rows[2:] == [f"| {i + 1} | " + ("**0.85** (over 0.6)" if i % 2 else "0.42") + " | restored |" for i in range(29)]


# ----------------------------------------------------------------------------- the model file


def test_model_file_is_checked_by_size_and_sha256(tmp_path: Path) -> None:
    size, _ = identity_model.PACKAGE_FILES[identity_model.DESCRIPTOR_FILE]
    with pytest.raises(WeightsError, match="missing: pip install -r requirements-identity.txt"):
        identity_model.check_file(tmp_path / "absent.dat")
    short = tmp_path / "short.dat"
    short.write_bytes(b"\0" * 1000)
    with pytest.raises(WeightsError, match=f"1000 bytes, not {size}: reinstall it"):
        identity_model.check_file(short)
    same_size = tmp_path / "zeros.dat"
    with same_size.open("wb") as f:
        f.truncate(size)
    with pytest.raises(WeightsError, match=r"does not match face-recognition-models 0.3.0 \(sha256\)"):
        identity_model.check_file(same_size)


@needs_dlib
def test_the_installed_models_match_and_the_68_point_model_is_never_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the descriptor and the 5-point model are loaded; the 68-point model (non-commercial licence) never is."""
    import dlib

    for name in identity_model.LOADED:
        identity_model.check_file(identity_model.descriptor_path(name), name)
    loaded: list[str] = []

    def recording(real: object) -> object:
        def load(path: str) -> object:
            loaded.append(Path(path).name)
            return real(path)  # type: ignore[operator]
        return load

    def refuse(*args: object) -> object:
        raise AssertionError(f"a face detector was loaded: {args}")

    monkeypatch.setattr(identity_model, "_model", None)
    monkeypatch.setattr(dlib, "face_recognition_model_v1", recording(dlib.face_recognition_model_v1))
    monkeypatch.setattr(dlib, "shape_predictor", recording(dlib.shape_predictor))
    monkeypatch.setattr(dlib, "cnn_face_detection_model_v1", refuse)
    monkeypatch.setattr(dlib, "get_frontal_face_detector", refuse)
    face = load_rgb("faces", "ffhq_00002_512.png")
    assert distance(face, face) == 0.0
    assert sorted(loaded) == sorted(identity_model.LOADED)
    assert "shape_predictor_68_face_landmarks.dat" not in loaded


# ----------------------------------------------------------------------------- where it is shown


def test_face_boxes_are_coloured_by_identity_distance_when_measured() -> None:
    from gpen_app.overlay import IDENTITY_COLORS, KEPT_COLOR, faces_overlay

    amber, magenta = IDENTITY_COLORS[1][1], IDENTITY_COLORS[2][1]
    record = {"mode": "balanced", "detector": "mobilenet0.25",
              "boxes": {"image_size": [200, 100], "kept": [[10, 10, 60, 60], [80, 10, 130, 60], [140, 10, 190, 60]],
                        "rejected": []},
              "identity": {"faces": [{"distance": 0.1}, {"distance": 0.5}, {"distance": 0.8}]}}
    img, caption = faces_overlay(np.full((100, 200, 3), 100, np.uint8), record)
    assert img is not None
    assert [tuple(img[10, x]) for x in (30, 100, 160)] == [KEPT_COLOR, amber, magenta]
    assert "coloured by identity distance" in caption and "over 0.6" in caption
    record["identity"] = {"faces": [None, None, None]}  # not measured: every kept box green, as before
    img, caption = faces_overlay(np.full((100, 200, 3), 100, np.uint8), record)
    assert [tuple(img[10, x]) for x in (30, 100, 160)] == [KEPT_COLOR] * 3 and "solid green" in caption


def test_cli_result_line_and_folder_summary_name_the_identity_figures() -> None:
    from gpen_core.cli_words import RunSummary, identity_text

    faces = [{"distance": 0.31, "over_threshold": False, "action": "restored"},
             {"distance": 0.72, "over_threshold": True, "action": "kept original"}, None]
    rec = {"status": "ok", "faces": 3, "peaks": {}, "identity": {"faces": faces}}
    assert identity_text(rec) == (", identity distance up to 0.72 over 2 faces, 1 over 0.6 (dlib's own same-person threshold on LFW photos, not a promise about restorations), "
                                  "1 kept original")
    assert identity_text({"identity": {"faces": [None]}}) == ""
    summary = RunSummary()
    summary.add(rec)
    summary.add({**rec, "identity": {"faces": [{"distance": 0.9, "over_threshold": True, "action": "blended"}]}})
    line = next(x for x in summary.lines() if x.startswith("  identity:"))
    assert "up to 0.90 over 3 faces, 2 over 0.6" in line and "1 kept original, 1 blended" in line


@needs_dlib
def test_a_request_without_the_check_lets_the_models_go() -> None:
    """``low`` after ``balanced`` in one app: the descriptor (~28 MB) does not stay for a mode that does not use it."""
    policy = policy_for("balanced", RestoreOptions(identity="on"))
    assert policy is not None and identity_model._model is not None
    assert policy_for("low", RestoreOptions()) is None
    assert identity_model._model is None


def test_zerogpu_face_seconds_include_the_identity_check() -> None:
    """A ZeroGPU Space's duration per face counts the check it runs on each face (it runs inside the GPU call)."""
    from gpen_core.platform.zerogpu import FaceClock

    clock = FaceClock()
    clock.record({"device": "cuda:0", "faces": 2,
                  "timings": {"align_s": 0.1, "restore_s": 1.0, "paste_s": 0.1, "identity_s": 0.4}})
    assert clock.seconds_per_face() == pytest.approx(0.8)


def test_seg2face_refuses_an_identity_limit() -> None:
    """seg2face's input is a label map: there is no face to compare, so a limit would be dropped without a word."""
    with pytest.raises(InputError, match="no face to compare in the seg2face task"):
        RestoreOptions(task="seg2face", aligned=True, identity_limit=0.5).validated()
