"""`python -m gpen_core restore FOLDER`: what it prints (results and summary on stdout, notes and
progress on stderr), what it skips and why; the CLI's other messages (--mask, -v, download progress)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpen_core.cli import main

from .hostile import png_bytes

NEITHER = "neither a photo by its name (.jpg, .jpeg, .png, .webp, .bmp, .tif, .tiff, .gif) nor a video by its first bytes"


def _face(path: Path, seed: int) -> Path:
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """Three aligned crops, a text file named .png, and three image-named entries that are not files."""
    src = tmp_path / "in"
    src.mkdir()
    for i, name in enumerate(("a.png", "b.png", "c.png")):
        _face(src / name, i)
    (src / "notes.png").write_text("These are my holiday notes, not a picture.\n")
    os.mkfifo(src / "pipe.jpg")  # reading it would block the run forever
    (src / "dir.jpg").mkdir()
    (src / "loop.jpg").symlink_to(src / "loop.jpg")
    (src / "readme.txt").write_text("not an image name: skipped, and said")
    return src


def test_a_folder_run_prints_results_and_a_summary_and_each_note_once(
    folder: Path, gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "out"
    rc = main(["restore", str(folder), "-o", str(dst), "--mode", "low", "--model", str(gen256), "--aligned"])
    out, err = capsys.readouterr()
    assert rc == 2  # one photo failed (bad input)

    # stdout: one result line per restored photo, then the summary with every failure and skip, and why.
    results = [line for line in out.splitlines() if " -> " in line]
    assert [Path(line.split(" -> ")[0]).name for line in results] == ["a.png", "b.png", "c.png"]
    assert all("1 face(s), mode low" in line and "peak RAM" in line for line in results)
    [head] = [line for line in out.splitlines() if line.startswith("summary: ")]
    assert re.match(r"summary: 8 files: 3 restored, 1 failed, 4 skipped; \d+\.\d s in all; peak RAM \d", head), head
    assert re.search(r"failed: .*notes\.png: .*not an image", out), out
    for name, why in (("pipe.jpg", "a FIFO (named pipe), not a file"), ("dir.jpg", "a folder, not a file"),
                      ("loop.jpg", "a symbolic link loop"), ("readme.txt", NEITHER)):
        assert f"skipped: {folder / name}: {why}" in out, out
        assert f"skipped: {folder / name}: {why}" in err  # said when found, before the run
    assert "note:" not in out and "[1/" not in out

    # stderr: each note once in the run, and a clean progress line per photo (not a terminal here).
    notes = [line for line in err.splitlines() if line.startswith("  note: ")]
    assert notes and len(notes) == len(set(notes)), notes
    assert "\r" not in err
    assert [line.split("]")[0] for line in err.splitlines() if re.match(r"\[\d/4\] ", line)] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert re.search(r"error: .*notes\.png: .*not an image", err)


def test_json_keeps_stdout_for_the_records(folder: Path, gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    main(["restore", str(folder), "-o", str(tmp_path / "out"), "--mode", "low", "--model", str(gen256), "--aligned", "--json"])
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    # every entry the summary counts has its record, the skipped ones (said when found) first, as --ray writes them
    assert [r["status"] for r in records] == ["skipped"] * 4 + ["ok", "ok", "ok", "error"]
    assert {r["input"]: r["note"] for r in records[:4]} == {
        str(folder / "dir.jpg"): "a folder, not a file", str(folder / "loop.jpg"): "a symbolic link loop",
        str(folder / "pipe.jpg"): "a FIFO (named pipe), not a file", str(folder / "readme.txt"): NEITHER}
    assert "summary: 8 files: 3 restored, 1 failed, 4 skipped" in err


def test_ray_without_json_prints_each_photos_notes_as_the_folder_run_does(
    folder: Path, gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records a --ray run gets back (here the folder run's own, as --json prints them) are printed as the
    folder run prints its photos: each result line, and each note once in the run."""
    import json

    from gpen_core.scaleout import batch

    argv = ["restore", str(folder), "-o", str(tmp_path / "out"), "--mode", "low", "--model", str(gen256), "--aligned"]
    main([*argv, "--json"])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["status"] for r in records} == {"ok", "error", "skipped"}  # the skips as --ray records them too
    # each note once, in the order the photos brought them (a run's machine load may change a note between runs)
    said = [f"  note: {n}" for n in dict.fromkeys(n for r in records if r["status"] == "ok" for n in r["notes"])]
    assert said

    def ray_batch(config: object, on_record) -> batch.BatchSummary:
        for i, rec in enumerate(records, 1):
            on_record(rec, i, len(records))
        return batch.BatchSummary(records, tmp_path / "out" / "manifest.jsonl")

    monkeypatch.setattr(batch, "run_batch", ray_batch)
    assert main([*argv, "--ray"]) == 2
    ray_out, ray_err = capsys.readouterr()
    assert [line for line in ray_err.splitlines() if line.startswith("  note: ")] == said
    assert [line.split(" -> ")[0] for line in ray_out.splitlines() if " -> " in line] == \
        [r["input"] for r in records if r["status"] == "ok"]


def test_a_uri_folder_holding_a_video_is_refused_by_its_bytes_before_ray_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """file:/// goes through the URI listing (pyarrow's filesystem): a clip there, whatever its name, is said and
    the run refused, as for a local folder; the listing comes before Ray starts."""
    pytest.importorskip("ray", reason="needs Ray: pip install -r requirements-ray.txt")
    pytest.importorskip("av")
    from gpen_core.scaleout import runtime

    from .videoclips import gradient_frames, make_clip

    monkeypatch.setattr(runtime, "ray_session", lambda *a, **k: pytest.fail("Ray started although the video was not said"))
    src = tmp_path / "in"
    src.mkdir()
    _face(src / "a.png", 0)
    make_clip(src / "holiday.dat", gradient_frames(3), container="mp4")
    assert main(["restore", f"file://{src}", "-o", str(tmp_path / "out"), "--ray", "--mode", "low"]) == 2
    err = capsys.readouterr().err
    assert f"folder file://{src} holds 1 video (holiday.dat)" in err and f"file://{src}/holiday.dat" in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_what_a_folder_run_skips_is_said_alike_with_ray(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """readme.txt (neither a photo nor a video), a folder, a FIFO and a link loop named as photos: both runs say
    each skipped, and why, in the same words (the photos are done already: nothing restored, Ray never starts)."""
    pytest.importorskip("ray", reason="needs Ray: pip install -r requirements-ray.txt")
    from gpen_core.scaleout import runtime

    monkeypatch.setattr(runtime, "ray_session", lambda *a, **k: pytest.fail("Ray started with nothing to restore"))
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a.png", "b.png", "c.png", "notes.png"):
        (out / name).write_bytes(b"done")
    said = []
    for extra in ([], ["--ray"]):
        assert main(["restore", str(folder), "-o", str(out), "--mode", "low", *extra]) == 0
        said.append(sorted(line for line in capsys.readouterr().err.splitlines() if line.startswith("skipped: ")))
    assert said[0] == said[1] and len(said[0]) == 8, said
    assert f"skipped: {folder / 'readme.txt'}: {NEITHER}" in said[0]
    assert f"skipped: {folder / 'pipe.jpg'}: a FIFO (named pipe), not a file" in said[1]


def test_a_subfolder_is_said_alike_with_ray_and_for_a_uri_folder(
    gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--ray listed files only: scans/2019/ was dropped without a word where the plain run names it as not searched.
    Both say it in the same words (a hidden folder and the run's own output folder are not named), a file:/// URI too."""
    pytest.importorskip("ray", reason="needs Ray: pip install -r requirements-ray.txt")
    from gpen_core.scaleout import runtime

    monkeypatch.setattr(runtime, "ray_session", lambda *a, **k: pytest.fail("Ray started with nothing to restore"))
    src = tmp_path / "scans"
    for sub in ("2019", ".thumbnails", "out"):
        (src / sub).mkdir(parents=True)
    _face(src / "a.png", 0)
    (src / "out" / "a.png").write_bytes(b"done")
    why = "a folder: subfolders are not searched (give it as an input of its own)"
    said = []
    for source, extra in ((str(src), []), (str(src), ["--ray"]), (f"file://{src}", ["--ray"])):
        assert main(["restore", source, "-o", str(src / "out"), "--mode", "low", "--model", str(gen256), *extra]) == 0
        said.append(sorted(line for line in capsys.readouterr().err.splitlines() if ": a folder" in line))
    assert said[0] == said[1] == [f"skipped: {src / '2019'}: {why}"], said
    assert said[2] == [f"skipped: file://{src / '2019'}: {why}"], said


def test_a_folder_of_only_unreadable_entries_says_what_was_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "dir.jpg").mkdir()
    assert main(["restore", str(src), "-o", str(tmp_path / "out")]) == 2
    assert f"has no images" in (err := capsys.readouterr().err) and f"skipped {src / 'dir.jpg'}: a folder, not a file" in err
    os.mkfifo(tmp_path / "p.png")
    assert main(["restore", str(tmp_path / "p.png"), "-o", str(tmp_path / "o.png")]) == 2
    assert "is a FIFO (named pipe), not a file" in capsys.readouterr().err


def test_a_subfolder_is_named_as_not_searched(gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Photos in a subfolder (scans/2019/) were left out without a word: the summary's "skipped and why" and the
    no-images message named only image-named entries."""
    src = tmp_path / "scans"
    (src / "2019").mkdir(parents=True)
    (src / ".thumbnails").mkdir()  # a hidden folder is nobody's photos
    _face(src / "2019" / "a.png", 0)
    assert main(["restore", str(src), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"skipped {src / '2019'}: a folder: subfolders are not searched" in err and ".thumbnails" not in err, err
    _face(src / "b.png", 1)
    main(["restore", str(src), "-o", str(src / "out"), "--mode", "low", "--model", str(gen256), "--aligned"])
    out = capsys.readouterr().out
    assert "1 restored" in out and f"skipped: {src / '2019'}: a folder: subfolders are not searched" in out, out
    main(["restore", str(src), "-o", str(src / "out"), "--mode", "low", "--model", str(gen256), "--aligned"])
    assert f"skipped: {src / 'out'}: a folder" not in capsys.readouterr().out  # the run's own output folder is not one


def test_progress_redraws_in_a_terminal_and_steps_aside_for_other_lines() -> None:
    from gpen_core.cli_words import ProgressLine

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, out = Tty(), io.StringIO()
    bar = ProgressLine(3, tty)
    bar.step("a.png")
    bar.say("a line", out)
    bar.step("b.png")
    bar.step("c.png")
    text = tty.getvalue()
    assert text.count("\r[") == 3 + 1 and text.endswith("\n") and "\n" not in text[:-1]  # one line, redrawn
    assert out.getvalue() == "a line\n"


# ------------------------------------------------------------------ messages


def test_mask_errors_name_the_mask_not_the_photo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    photo = _face(tmp_path / "photo.png", 0)
    text = tmp_path / "m.png"
    text.write_text("not a picture")
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_bytes(30000, 30000, 8, 0))
    base = ["restore", str(photo), "-o", str(tmp_path / "o.png"), "--task", "inpaint", "--mode", "balanced"]
    for mask, says in ((text, "not an image"), (bomb, "30000×30000"), (tmp_path / "none.png", "does not exist")):
        assert main([*base, "--mask", str(mask)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: the mask {mask}") and says in err, err
        assert str(photo) not in err


def test_verbose_is_taken_after_the_subcommand_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from gpen_core.errors import WeightsError
    from gpen_core.restorer import Restorer

    def fail(self: Restorer, *a: object, **k: object) -> None:
        raise WeightsError("weights missing", details="looked in: /the/models/folder")

    monkeypatch.setattr(Restorer, "__call__", fail)
    photo = _face(tmp_path / "p.png", 0)
    argv = ["restore", str(photo), "-o", str(tmp_path / "o.png"), "--mode", "low"]
    assert main(argv) == 3
    assert "looked in" not in capsys.readouterr().err
    assert main([*argv, "-v"]) == 3  # the README's order
    assert "looked in: /the/models/folder" in capsys.readouterr().err
    assert main(["-v", *argv]) == 3
    assert "looked in: /the/models/folder" in capsys.readouterr().err


def test_download_progress_in_a_log_is_one_line_per_step(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from gpen_core.weights import lookup as weights

    def fake_download(name: str, models_dir: object = None, progress=None) -> Path:
        for done in range(0, 1001, 50):
            progress(done * 1000, 1_000_000)
        return tmp_path / "x.pth"

    monkeypatch.setattr(weights, "download", fake_download)
    assert main(["download", "GPEN-BFR-256", "--no-convert"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert lines[0] == "GPEN-BFR-256: 0.0%" and lines[-1] == "GPEN-BFR-256: 100.0%" and len(lines) == 11, lines


def test_seg2face_on_a_photo_warns_and_names_no_paste_mask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--aligned seg2face pastes nothing: no paste mask in its notes; an ordinary photo is said not to be a label map."""
    import json

    import cv2
    import torch

    from .conftest import shared_path

    d = torch.load(shared_path("reference", "tasks", "seg2face_tiny64_seeded.pt"), weights_only=True)
    ckpt = tmp_path / "tiny-seg2face.pth"
    torch.save({k: v.float() for k, v in d["state_dict_fp16"].items()}, ckpt)
    label_map = tmp_path / "map.png"
    cv2.imwrite(str(label_map), d["seg_bgr_uint8"].numpy())
    photo = tmp_path / "photo.png"
    with Image.open(shared_path("faces", "ffhq_00000_512.png")) as im:
        im.convert("RGB").resize((d["seg_bgr_uint8"].shape[1], d["seg_bgr_uint8"].shape[0])).save(photo)
    notes = {}
    for src in (label_map, photo):
        assert main(["restore", str(src), "-o", str(tmp_path / f"out_{src.name}"), "--task", "seg2face", "--aligned",
                     "--model", str(ckpt), "--mode", "quality", "--json"]) == 0
        notes[src.name] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["notes"]
    for name, said in notes.items():
        assert not any("paste mask" in n for n in said), (name, said)
    assert not any("label map" in n for n in notes["map.png"]), notes["map.png"]
    assert any(n.startswith("this does not look like a label map") for n in notes["photo.png"]), notes["photo.png"]


def test_autos_choice_and_its_warning_are_printed_as_the_json_records_them(
    gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auto`` resolved to a mode is said beside the result, as the app's Mode row and a clip's notes say it: the
    printed summary gave the mode alone, so "even it may need … free" reached only ``--json``'s mode_reason."""
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(200 * 2**20))  # less than any mode's plan: auto warns
    src = tmp_path / "in"
    src.mkdir()
    for name in ("a.png", "b.png"):
        _face(src / name, 0)
    assert main(["restore", str(src), "-o", str(tmp_path / "out"), "--model", str(gen256), "--aligned"]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("  note: auto chose low, the lightest mode: even it may need")]
    assert len(said) == 1, err  # once in the run, not once a photo


def test_a_folder_with_nothing_to_restore_is_refused_alike_with_ray(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--ray listed a local folder by a rule of its own: with nothing to restore it named no skipped entry."""
    pytest.importorskip("ray", reason="needs Ray: pip install -r requirements-ray.txt")
    src = tmp_path / "in"
    (src / "dir.jpg").mkdir(parents=True)
    (src / "2019").mkdir()
    said = []
    for extra in ([], ["--ray"]):
        assert main(["restore", str(src), "-o", str(tmp_path / "out"), *extra]) == 2
        said.append(capsys.readouterr().err.strip().splitlines()[-1])
    assert said[0] == said[1], said
    assert f"skipped {src / '2019'}: a folder: subfolders" in said[1] and f"skipped {src / 'dir.jpg'}" in said[1], said


def test_several_photos_go_into_a_new_folder_whose_name_has_a_dot(gen256: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`-o results.2024` for two photos: only a folder can hold them, so it is made (a single photo's
    `-o out.2024` stays refused as a format we do not write)."""
    photos = [_face(tmp_path / f"{name}.png", i) for i, name in enumerate(("a", "b"))]
    dst = tmp_path / "results.2024"
    assert main(["restore", *map(str, photos), "-o", str(dst), "--mode", "low", "--model", str(gen256), "--aligned"]) == 0
    assert sorted(p.stem for p in dst.iterdir()) == ["a", "b"]
    assert main(["restore", str(photos[0]), "-o", str(tmp_path / "one.2024"), "--mode", "low", "--aligned"]) == 2
    assert "cannot write .2024 files" in capsys.readouterr().err and not (tmp_path / "one.2024").exists()


def test_a_hidden_file_is_left_out_without_a_word_as_a_hidden_folder_is(gen256: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _face(folder / "a.png", 0)
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")  # what macOS leaves in every folder it opens
    (folder / ".thumbnails").mkdir()
    (folder / "notes.txt").write_text("said: not a photo")
    rc = main(["restore", str(folder), "-o", str(tmp_path / "out"), "--mode", "low", "--model", str(gen256), "--aligned"])
    out, err = capsys.readouterr()
    assert rc == 0 and f"skipped: {folder / 'notes.txt'}: {NEITHER}" in err
    assert ".DS_Store" not in out + err and ".thumbnails" not in out + err


def test_a_photo_given_twice_is_restored_once_and_the_repeat_said(gen256: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`restore scans/ scans/a.png` or a shell glob that meets itself: one result per file, not a_png and a_png-2."""
    src = tmp_path / "scans"
    src.mkdir()
    a, b = _face(src / "a.png", 0), _face(src / "b.png", 1)
    dst = tmp_path / "out"
    assert main(["restore", str(src), str(a), "-o", str(dst), "--mode", "low", "--model", str(gen256), "--aligned"]) == 0
    out, err = capsys.readouterr()
    assert sorted(p.name for p in dst.iterdir()) == ["a.jpg", "b.jpg"]
    assert f"skipped: {a}: the same file as an input before it" in err
    assert "summary: 3 files: 2 restored, 0 failed, 1 skipped" in out, out


def test_a_photo_over_the_pixel_limit_is_refused_in_words_true_on_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 108 MP scan on one's own machine: no server is involved, and no warning of Pillow's comes first."""
    (big := tmp_path / "scan.png").write_bytes(png_bytes(12000, 9000, 8, 2))
    assert main(["restore", str(big), "-o", str(tmp_path / "out.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {big}: The image is 12000×9000 (108 megapixels); the limit is 50 megapixels"), err
    assert "server" not in err and "Resize it to at most 8164×6123" in err


def test_a_folder_of_phone_photos_says_why_its_heic_and_avif_files_are_left_out(tmp_path: Path) -> None:
    """An iPhone's IMG_0001.HEIC is a photo: "neither a photo by its name" is wrong, and leaves the user without
    the fix that the same file given alone gets."""
    import struct

    from gpen_core.images.outputs import folder_inputs

    src = tmp_path / "iphone"
    src.mkdir()
    _face(src / "a.png", 0)
    for name, brands in (("IMG_0001.HEIC", b"heicmif1heic"), ("pic.avif", b"avif\0\0\0\0avifmif1")):
        (src / name).write_bytes(struct.pack(">I", 24) + b"ftyp" + brands[:4] + b"\0\0\0\0" + brands[-8:] + bytes(64))
    (src / "notes.txt").write_text("not a photo")
    found, skipped = folder_inputs(src)
    why = {p.name: w for p, w in skipped}
    assert [p.name for p in found] == ["a.png"] and why["notes.txt"] == NEITHER
    assert why["IMG_0001.HEIC"].startswith("HEIC/HEIF photos (the iPhone default) are not supported"), why
    assert "Export it as JPEG" in why["IMG_0001.HEIC"]
    assert why["pic.avif"].startswith("AVIF files are not supported") and "Convert it to PNG or JPEG" in why["pic.avif"]
