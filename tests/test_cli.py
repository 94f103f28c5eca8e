"""The command line contract: `python -m gpen_core restore …` JSON records, outputs and exit codes.

In-process calls of ``gpen_core.cli.main`` (the same function ``python -m gpen_core``
runs); one subprocess checks the real entry point prints no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpen_core import cli
from gpen_core.cli import main
from gpen_core.engine.convert_first import ConvertFirst
from gpen_core.errors import InputError, ResourceError
from gpen_core.restorer import Restorer

from .conftest import ROOT, shared_path

STAGES = ("decode_s", "detect_s", "align_s", "restore_s", "paste_s", "encode_s")


def _records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_solvay_every_detected_face_restored_with_peaks_and_timings(
    models_with_detector: Path, gen256_narrow: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plainest use: a generated checkpoint, a models folder with only the mobilenet weights. The Solvay photo's
    left 596 px: its 12 faces are all there is to restore (the whole photo's 29 cost 2.4x the time, and this is
    about the record, not the count)."""
    solvay = tmp_path / "solvay_left.png"
    with Image.open(shared_path("faces", "Solvay_conference_1927.png")) as im:
        im.crop((0, 0, 596, im.height)).save(solvay)
    out = tmp_path / "out.png"
    rc = main(["restore", str(solvay), "-o", str(out), "--model", str(gen256_narrow), "--models-dir", str(models_with_detector), "--json"])
    assert rc == 0
    [rec] = _records(capsys.readouterr().out)
    assert rec["status"] == "ok" and rec["input"] == str(solvay) and rec["output"] == str(out)
    assert rec["faces"] >= 10 and rec["detector"] == "mobilenet0.25"
    assert rec["mode"] in ("low", "faces-only", "balanced", "quality") and rec["requested_mode"] == "auto" and rec["mode_reason"]
    assert rec["checkpoint"] == gen256_narrow.name or gen256_narrow.name in rec["checkpoint"]
    peaks = rec["peaks"]
    assert peaks["rss_bytes"] > peaks["baseline_rss_bytes"] > 0
    assert peaks["vram_bytes"] is None and peaks["method"] in ("vmhwm", "sampling")
    timings = rec["timings"]
    assert all(timings[k] >= 0 for k in STAGES) and timings["restore_s"] > 0
    assert timings["total_s"] >= sum(timings[k] for k in STAGES) - 1e-3
    with Image.open(out) as im:  # .png asked for, .png written (whatever the mode's own format)
        assert im.format == "PNG" and im.size == (596, 568)


def test_folder_input_writes_one_file_per_image_and_skips_existing(
    models_with_detector: Path, gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    face = np.asarray(Image.open(shared_path("faces", "ffhq_00000_512.png")).convert("RGB").resize((256, 256)))
    for name in ("a.png", "b.v2.jpg"):  # a stem with a dot keeps it, and gets the format's suffix
        Image.fromarray(face).save(src / name)
    (src / "notes.txt").write_text("not an image")  # ignored: not an image suffix
    dst = tmp_path / "out"
    argv = ["restore", str(src), "-o", str(dst), "--mode", "low", "--model", str(gen256), "--aligned", "--json"]
    asked: list[int] = []  # what the run did before its first photo (a conversion) leads each record's notes

    def converted_first(args: object, photos: list[Path], say: object) -> ConvertFirst:
        asked.append(len(photos))
        return ConvertFirst("converted", "GPEN-BFR-256 was converted for OpenVINO before the first face", 3.0)

    monkeypatch.setattr(cli, "convert_before_photos", converted_first)
    assert main(argv) == 0
    skip, *recs = _records(capsys.readouterr().out)
    assert (Path(skip["input"]).name, skip["status"]) == ("notes.txt", "skipped")  # recorded, as --ray records it
    assert asked == [2] and all(r["notes"][0].startswith("GPEN-BFR-256 was converted") for r in recs)
    assert [Path(r["input"]).name for r in recs] == ["a.png", "b.v2.jpg"]
    # a folder output takes the mode's format: low writes JPEG
    assert [Path(r["output"]).name for r in recs] == ["a.jpg", "b.v2.jpg"] and all(r["faces"] == 1 for r in recs)
    assert sorted(p.name for p in dst.iterdir()) == ["a.jpg", "b.v2.jpg"]
    first = (dst / "a.jpg").stat().st_mtime_ns

    assert main(argv) == 0
    assert [r["status"] for r in _records(capsys.readouterr().out)] == ["skipped", "skipped", "skipped"]
    assert (dst / "a.jpg").stat().st_mtime_ns == first

    assert main([*argv, "--overwrite"]) == 0
    assert [r["status"] for r in _records(capsys.readouterr().out)] == ["skipped", "ok", "ok"]  # notes.txt, then both


def test_missing_weights_exit_3_fast_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fast: no download is tried and no model loads (benchmarks/bench.py --refusals times it)."""
    import socket

    tried: list[object] = []

    def refuse(address: object, *a: object, **k: object) -> None:
        tried.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    built: list[object] = []
    from gpen_core.networks import checkpoint

    monkeypatch.setattr(checkpoint, "build_from_state_dict", lambda *a, **k: built.append(a) or pytest.fail("a model was built"))
    photo = tmp_path / "p.png"
    Image.new("RGB", (64, 64), (120, 90, 80)).save(photo)
    empty = tmp_path / "models"
    empty.mkdir()
    rc = main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--mode", "low", "--models-dir", str(empty)])
    assert rc == 3 and tried == [] and built == []
    err = capsys.readouterr().err
    assert "GPEN-BFR-256" in err and "download" in err and str(empty) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert not (tmp_path / "o.png").exists()


def test_a_run_that_fails_makes_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o out.jxl` (a format we do not write) made a folder out.jxl to put p.jpg in; a models folder (--models-dir,
    GPEN_HOME) was made by a run that then failed for want of its weights: nothing was ever written there."""
    photo = _photo(tmp_path / "p.png")
    with monkeypatch.context() as m:
        m.setattr(Restorer, "__call__", lambda *a, **k: pytest.fail("the restore ran with an output it cannot write"))
        for out in (tmp_path / "out.jxl", tmp_path / "new" / "out.jxl"):
            assert main(["restore", str(photo), "-o", str(out), "--mode", "low"]) == 2
            err = capsys.readouterr().err
            assert "cannot write .jxl files; use .png, .jpg" in err and "or a folder: one that exists" in err, err
            assert not out.exists() and not (tmp_path / "new").exists()
    monkeypatch.setenv("GPEN_HOME", str(tmp_path / "home" / "gpen"))
    for extra in (["--models-dir", str(tmp_path / "missing" / "x")], []):
        assert main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--mode", "low", *extra]) == 3
        assert "GPEN-BFR-256" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists() and not (tmp_path / "home").exists()
    from .videoclips import gradient_frames, make_clip

    clips = [make_clip(tmp_path / f"c{i}.mp4", gradient_frames(3)) for i in (1, 2)]
    assert main(["restore", *map(str, clips), "-o", str(tmp_path / "clips"), "--mode", "low", "--no-segments"]) == 3
    assert "GPEN-BFR-256" in capsys.readouterr().err
    assert not (tmp_path / "clips").exists()  # made for the clips' outputs, none written: removed again
    (tmp_path / "kept").mkdir()
    assert main(["restore", *map(str, clips), "-o", str(tmp_path / "kept"), "--mode", "low", "--no-segments"]) == 3
    assert (tmp_path / "kept").is_dir()  # the user's own folder stays, empty or not


def test_download_without_names_fetches_the_defaults_with_the_paste_mask(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m gpen_core download` gets what every mode runs with, GPEN's parsing mask (ParseNet-latest) included."""
    from gpen_core.weights import lookup as weights

    asked: list[str] = []

    def fake_download(name: str, models_dir: object = None, progress: object = None) -> Path:
        asked.append(name)
        return tmp_path / weights.REGISTRY[name].filename

    monkeypatch.setattr(weights, "download", fake_download)
    assert main(["download", "--models-dir", str(tmp_path)]) == 0
    assert asked == ["GPEN-BFR-512", "GPEN-BFR-256", "retinaface-mobilenet0.25", "retinaface-resnet50", "ParseNet-latest"]
    assert "ParseNet-latest: " in capsys.readouterr().out


def test_a_damaged_clip_into_an_mp4_is_not_called_a_photo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an .mp4 whose start is gone (or never was one) was told "clip.mp4 is a photo (a GIF is restored as a still)"
    clip, notes = tmp_path / "clip.mp4", tmp_path / "notes.mp4"
    clip.write_bytes(bytes(range(256)) * 40)  # no container's header, nor an image's
    notes.write_text("this is text, not a video")
    for src, what in ((clip, "no format this reads"), (notes, "text")):
        assert main(["restore", str(src), "-o", str(tmp_path / "out.mp4"), "--mode", "low"]) == 2
        err = capsys.readouterr().err
        assert f"{src.name} is neither a video nor a photo this can read ({what})" in err, err
        assert "is a photo" not in err and "Re-export or re-download" in err
    assert not (tmp_path / "out.mp4").exists()


def test_bad_input_and_bad_usage_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "notes.png"
    fake.write_text("this is text, not a picture")
    assert main(["restore", str(fake), "-o", str(tmp_path / "o.png"), "--mode", "low"]) == 2
    err = capsys.readouterr().err
    assert "not an image" in err and "Traceback" not in err

    assert main(["restore", str(tmp_path / "missing.jpg"), "-o", str(tmp_path / "o.png")]) == 2
    assert "does not exist" in capsys.readouterr().err

    assert main(["restore", str(fake), "-o", str(tmp_path / "o.gif")]) == 2
    assert "use .png, .jpg or .jpeg" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exc:  # argparse: unknown mode
        main(["restore", str(fake), "-o", str(tmp_path / "o.png"), "--mode", "ultra"])
    assert exc.value.code == 2


def test_out_of_memory_exits_4_with_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    photo = tmp_path / "p.png"
    Image.new("RGB", (64, 64)).save(photo)

    def oom(self: Restorer, *a: object, **k: object) -> None:
        raise ResourceError("out of memory even in low mode; close other programs or use a smaller photo")

    monkeypatch.setattr(Restorer, "__call__", oom)
    assert main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--json"]) == 4
    captured = capsys.readouterr()
    [rec] = _records(captured.out)
    assert rec["status"] == "error" and rec["exit_code"] == 4 and "out of memory" in rec["error"]
    assert "Traceback" not in captured.err


def test_the_module_entry_point_prints_a_message_not_a_traceback(tmp_path: Path) -> None:
    photo = tmp_path / "p.png"
    Image.new("RGB", (64, 64)).save(photo)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "gpen_core", "restore", str(photo), "-o", str(tmp_path / "o.png"), "--mode", "quality"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert p.returncode == 3, p.stderr
    assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr


# ------------------------------------------------------------ safe output, clear failures


def _photo(path: Path, size: tuple[int, int] = (64, 64)) -> Path:
    Image.new("RGB", size, (120, 90, 80)).save(path)
    return path


def test_an_existing_output_is_reported_as_skipped_without_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    photo = _photo(tmp_path / "p.png")
    out = tmp_path / "o.png"
    out.write_bytes(b"keep me")
    assert main(["restore", str(photo), "-o", str(out), "--mode", "low"]) == 0
    err = capsys.readouterr().err
    assert f"skipped: {photo}: {out} is already there" in err and "--overwrite to replace it" in err, err
    assert out.read_bytes() == b"keep me"


def test_a_rerun_says_each_skipped_photo_in_a_short_line_and_why_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A resumed folder of many photos: each already-done one a line naming it and its output, the reason and the
    two ways past it once (it was said in full for every photo, as if each had gone wrong)."""
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir(), out.mkdir()
    photos = [_photo(src / f"p{i}.png") for i in range(3)]
    done = [out / f"{p.stem}.jpg" for p in photos]  # low writes JPEG
    for d in done:
        d.write_bytes(b"keep me")
    assert main(["restore", str(src), "-o", str(out), "--mode", "low"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("skipped: ")]
    assert sorted(lines) == [f"skipped: {p}: {d} is already there" for p, d in zip(photos, done)], err
    assert err.count("never replaced unasked") == 1 and err.count("--overwrite to replace it") == 1, err
    assert all(d.read_bytes() == b"keep me" for d in done)


def test_a_second_run_of_another_photo_with_the_same_name_says_it_was_not_restored(
        models_with_detector: Path, gen256_narrow: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``restore a/photo.png -o out/`` then ``restore b/photo.png -o out/``: an output is named after its input, so b's
    result is a's file. The second run said "skipped: out/photo.jpg exists (use --overwrite)", naming neither b nor
    that b was not restored."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a, b = _photo(tmp_path / "a" / "photo.png"), _photo(tmp_path / "b" / "photo.png", (80, 64))
    run = ["-o", str(tmp_path / "out"), "--mode", "low", "--model", str(gen256_narrow), "--models-dir", str(models_with_detector)]
    assert main(["restore", str(a), *run]) == 0
    [earlier] = (tmp_path / "out").iterdir()  # out/photo.jpg: low's format
    first = earlier.read_bytes()
    capsys.readouterr()
    assert main(["restore", str(b), *run, "--json"]) == 0
    out, err = capsys.readouterr()
    [rec] = _records(out)
    assert rec["status"] == "skipped" and rec["input"] == str(b) and rec["output"] == str(earlier)
    assert f"skipped: {b}: {earlier} is already there" in err and "another named like it" in err, err
    assert f"{earlier} is already there" in rec["note"] and "another named like it" in rec["note"], rec["note"]
    assert "give another -o" in rec["note"] and "--overwrite to replace it" in rec["note"], rec["note"]
    assert earlier.read_bytes() == first and [p.name for p in (tmp_path / "out").iterdir()] == [earlier.name]


def test_a_scan_over_the_pixel_limit_is_refused_naming_the_flag_that_raises_it_for_one_run(
        models_with_detector: Path, gen256_narrow: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A local user's 52 MP scan was refused by the 50 MP limit with no way past it; the refusal names the flag and the
    value that admits it, and with it the scan is restored (a flat PNG: 52 MP decoded, 165 KB on disk)."""
    scan = tmp_path / "scan.png"
    Image.new("RGB", (8000, 6500), (120, 90, 80)).save(scan)
    run = ["restore", str(scan), "-o", str(tmp_path / "out.png"), "--mode", "low", "--model", str(gen256_narrow),
           "--models-dir", str(models_with_detector)]
    assert main(run) == 2
    err = capsys.readouterr().err
    assert "8000×6500 (52 megapixels); the limit is 50 megapixels" in err and "--max-megapixels 52)" in err, err
    assert main([*run, "--max-megapixels", "52", "--json"]) == 0
    [rec] = _records(capsys.readouterr().out)
    assert rec["status"] == "ok" and rec["faces"] == 0
    with Image.open(tmp_path / "out.png") as im:  # low restores at most 2048 px, the note says so
        assert im.size == (2048, 1664) and any("8000×6500" in n for n in rec["notes"]), rec["notes"]
    assert main([*run, "--max-megapixels", "179"]) == 2  # past Pillow's own refusal: said before any work
    assert "at most 178 megapixels" in capsys.readouterr().err
    from .videoclips import gradient_frames, make_clip

    clip = make_clip(tmp_path / "clip.mp4", gradient_frames(2))  # a frame's limit is the video's own
    assert main(["restore", str(clip), "-o", str(tmp_path / "o.mp4"), "--max-megapixels", "60"]) == 2
    assert "--max-megapixels is for photos, and there is no photo to restore (clip.mp4: videos only)" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["parent is a file", "under /proc", "under /sys"])
def test_an_output_that_cannot_be_written_exits_2_before_any_work(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    photo = _photo(tmp_path / "p.png")
    (tmp_path / "afile").write_text("x")
    out = {
        "parent is a file": tmp_path / "afile" / "o.png",
        "under /proc": Path("/proc/self/gpen-out/o.png"),  # a kernel file system: even root cannot create files
        "under /sys": Path("/sys/kernel/o.png"),
    }[where]

    def no_work(self: Restorer, *a: object, **k: object) -> None:
        pytest.fail("the restore ran although the output cannot be written")

    monkeypatch.setattr(Restorer, "__call__", no_work)  # refused before any work: that is what makes it fast
    assert main(["restore", str(photo), "-o", str(out), "--mode", "low"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and f"cannot write {out}" in err


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all\n"], ids=["0-byte", "text"])
def test_an_empty_or_unreadable_checkpoint_exits_3_with_the_fix(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    photo = _photo(tmp_path / "p.png", (256, 256))
    ckpt = tmp_path / "GPEN-BFR-256.pth"
    ckpt.write_bytes(content)
    rc = main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--mode", "low", "--aligned", "--model", str(ckpt)])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "Traceback" not in err and str(ckpt) in err
    assert ("empty (0 bytes)" in err) if not content else ("not a PyTorch checkpoint" in err)
    # The user's own file: what to check, never "delete it" (advice for the models folder's own files).
    assert "Check that the path names a GPEN generator checkpoint" in err and "Delete" not in err, err
    assert ckpt.read_bytes() == content
    from gpen_core.weights.lookup import models_dir

    (models_dir() / ckpt.name).write_bytes(content)  # the registry's file in the models folder: download it again
    assert main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--mode", "low", "--aligned",
                 "--model", "GPEN-BFR-256"]) == 3
    assert "download it again" in (err := capsys.readouterr().err) and "Check that the path" not in err, err


def test_a_10mb_icc_profile_does_not_reach_the_output(gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A huge colour profile must not be copied into the result: the output opens in Pillow and OpenCV,
    and the note says what happened to the profile."""
    import cv2

    from tests.hostile import big_icc

    face = np.asarray(Image.open(shared_path("faces", "ffhq_00000_512.png")).convert("RGB").resize((256, 256)))
    photo = tmp_path / "icc.jpg"
    Image.fromarray(face).save(photo, quality=95, icc_profile=big_icc())
    for ext in (".png", ".jpg"):
        out = tmp_path / f"o{ext}"
        assert main(["restore", str(photo), "-o", str(out), "--mode", "low", "--aligned", "--model", str(gen256)]) == 0
        assert "converted to sRGB" in capsys.readouterr().err
        with Image.open(out) as im:
            im.load()
            assert im.size == (256, 256) and len(im.info.get("icc_profile") or b"") < 1_000_000
        assert cv2.imread(str(out)) is not None


def test_a_float32_rgb_tiff_is_restored(gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import cv2

    face = np.asarray(Image.open(shared_path("faces", "ffhq_00000_512.png")).convert("RGB").resize((256, 256)))
    photo = tmp_path / "face.tif"
    assert cv2.imwrite(str(photo), np.ascontiguousarray(face[..., ::-1]).astype(np.float32) / 255.0)
    out = tmp_path / "o.png"
    assert main(["restore", str(photo), "-o", str(out), "--mode", "low", "--aligned", "--model", str(gen256)]) == 0
    assert "floating-point TIFF in [0, 1] scaled to 8 bit" in capsys.readouterr().err
    with Image.open(out) as im:
        assert im.size == (256, 256)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS / RLIMIT_DATA memory caps need Linux")
@pytest.mark.parametrize(
    "limit, caps, what",
    # Per PyTorch build (oom.ENGINE_IMPORT: the CPU build needs far less than the CUDA one), a cap of about 0.6 of
    # the address space or 0.4 of the data segment that importing it needs, and how the message words that cap.
    [("RLIMIT_AS", {"cpu": (630_000_000, "630 MB"), "cuda": (2_280_000_000, "2.3 GB")}, "address space"),
     ("RLIMIT_DATA", {"cpu": (156_000_000, "156 MB"), "cuda": (400_000_000, "400 MB")}, "data")],
    ids=["as", "data"],
)
def test_a_failed_torch_import_under_a_memory_cap_exits_4_and_says_what_it_needs(
    limit: str, caps: dict[str, tuple[int, str]], what: str, tmp_path: Path
) -> None:
    """A memory cap too small for PyTorch is reported in one line, never a traceback or a crash:
    under `prlimit --as=1200M` importing torch raises an ImportError, and under `--data=400M` it
    crashes torch itself (SIGSEGV in ctypes), so the CLI tries it in a child first."""
    import resource
    from importlib import metadata

    value, worded = caps["cpu" if metadata.version("torch").endswith("+cpu") else "cuda"]
    says = f"{worded} of {what}"
    photo = _photo(tmp_path / "p.png")

    def cap() -> None:
        kind = getattr(resource, limit)
        resource.setrlimit(kind, (value, resource.getrlimit(kind)[1]))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "gpen_core", "restore", str(photo), "-o", str(tmp_path / "o.png"), "--mode", "low"],
        capture_output=True, text=True, env=env, timeout=120, preexec_fn=cap,
    )
    assert p.returncode == 4, p.stderr[-3000:]
    assert p.stderr.startswith("error: not enough memory to start") and "Traceback" not in p.stderr
    assert "MB of RAM" in p.stderr and f"limited to {says}" in p.stderr
    assert not (tmp_path / "o.png").exists()


def test_a_photos_peak_vram_is_the_reserved_figure_as_a_clips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """"peak VRAM" on a result line is what the allocator reserved (what the budget and a clip's line weigh), not the
    smaller allocated figure; the JSON keeps both under their own keys."""
    from gpen_core.modes import MODES
    from gpen_core.result import Peaks, RestoreResult, Timings

    photo = tmp_path / "in.png"
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(photo)

    def fake(self: Restorer, image: object, options: object = None, **kw: object) -> RestoreResult:
        return RestoreResult(image=np.zeros((64, 64, 3), np.uint8), faces=(), timings=Timings(total_s=0.5),
                             peaks=Peaks(2_000_000_000, 1_000_000_000, "sampling", 700_000_000, 900_000_000, 100_000_000, "cuda:0"),
                             mode=MODES["low"], requested_mode="low", mode_reason="", checkpoint="GPEN-BFR-256",
                             detector="mobilenet0.25", device="cuda:0", dtype="float16", output_format="png",
                             encoded=photo.read_bytes(), notes=(), input_size=(64, 64), processed_size=(64, 64))

    monkeypatch.setattr(Restorer, "__call__", fake)
    assert main(["restore", str(photo), "-o", str(tmp_path / "out.png"), "--mode", "low"]) == 0
    line = capsys.readouterr().out
    assert "peak VRAM 900 MB reserved" in line and "700 MB" not in line
    assert main(["restore", str(photo), "-o", str(tmp_path / "out2.png"), "--mode", "low", "--json"]) == 0
    peaks = json.loads(capsys.readouterr().out)["peaks"]
    assert (peaks["vram_bytes"], peaks["vram_reserved_bytes"]) == (700_000_000, 900_000_000)


def test_an_unknown_device_is_refused_once_with_the_devices_to_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--device gpu`` (the README lists cpu, cuda, cuda:N) ended in a Python traceback from deep in the first model
    load; the library raised a bare ValueError."""
    src = tmp_path / "in"
    src.mkdir()
    for name in ("a.png", "b.png"):
        Image.fromarray(np.full((64, 64, 3), 128, np.uint8)).save(src / name)
    assert main(["restore", str(src), "-o", str(tmp_path / "out"), "--mode", "low", "--device", "gpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("unknown device 'gpu'; use 'cpu', 'cuda' or 'cuda:N'") == 1, err  # once for the run, not per photo
    with pytest.raises(InputError, match="unknown device 'mps'"):
        Restorer(device="mps")(src / "a.png")


def test_a_transparent_photo_written_as_jpeg_is_not_said_to_keep_its_alpha(
        gen256_narrow: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The notes said both "alpha kept in the PNG output" and that the alpha was not in the result: a JPEG (the
    ``low`` mode's format) has none, and the first note read as a promise."""
    rgba = np.dstack([np.full((64, 64, 3), 128, np.uint8), np.full((64, 64), 100, np.uint8)])
    Image.fromarray(rgba, "RGBA").save(tmp_path / "see-through.png")
    for out, kept in (("out.jpg", False), ("out.png", True)):
        assert main(["restore", str(tmp_path / "see-through.png"), "-o", str(tmp_path / out), "--mode", "low",
                     "--model", str(gen256_narrow), "--aligned", "--json"]) == 0
        notes = " ".join(_records(capsys.readouterr().out)[0]["notes"])
        assert ("alpha kept in the PNG output" in notes) is False and ("alpha channel is left out" in notes) is not kept, notes
        with Image.open(tmp_path / out) as im:
            assert ("A" in im.getbands()) is kept


def test_the_cli_module_imports_no_numpy_so_help_is_quick() -> None:
    """`python -m gpen_core --help`, `download` and `info` need no array library: the CLI's imports stay plain
    Python until a command needs more (numpy, Pillow and the engine come with the command that uses them)."""
    code = ("import sys, gpen_core.cli; heavy = [m for m in ('numpy', 'PIL', 'torch', 'cv2', 'av') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_every_option_of_every_subcommand_says_what_it_does() -> None:
    """`info --help` listed `--models-dir MODELS_DIR` and `--json` with no word on what they do."""
    import argparse

    from gpen_core.cli import _parser

    [commands] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    silent = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, sub in commands.choices.items()
              for a in sub._actions if not a.help]
    assert silent == []
