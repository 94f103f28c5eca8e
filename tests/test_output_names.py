"""Output names: one file per input even when two photos share a stem; manifest.jsonl keeps every run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpen_core.cli import main
from gpen_core.images.outputs import output_stems

from .conftest import shared_path


def test_a_lone_stem_is_kept_and_shared_stems_keep_their_extension() -> None:
    assert output_stems(["photo.jpg", "b.png"]) == ["photo", "b"]
    assert output_stems(["same.jpg", "same.png"]) == ["same_jpg", "same_png"]
    # compared case-blind, as macOS and Windows folders compare names
    assert output_stems(["Same.JPG", "same.png", "other.png"]) == ["Same_JPG", "same_png", "other"]
    # a file really named same_jpg.png keeps its name; the derived one is numbered
    assert output_stems(["same.jpg", "same.png", "same_jpg.png"]) == ["same_jpg-2", "same_png", "same_jpg"]
    # one name in two folders of one run
    assert output_stems(["a/x.jpg", "b/x.jpg"]) == ["x_jpg", "x_jpg-2"]


def _face(size: tuple[int, int]) -> np.ndarray:
    img = Image.open(shared_path("faces", "ffhq_00000_512.png")).convert("RGB").resize(size)
    return np.asarray(img)


def test_two_photos_with_one_stem_are_both_restored_by_the_cli(
    gen256: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(_face((256, 256))).save(src / "same.jpg", quality=95)
    Image.fromarray(_face((256, 256))[:, ::-1]).save(src / "same.png")
    dst = tmp_path / "out"
    argv = ["restore", str(src), "-o", str(dst), "--mode", "low", "--model", str(gen256), "--aligned", "--json"]
    assert main(argv) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [r["status"] for r in recs] == ["ok", "ok"]
    assert {Path(r["input"]).name: Path(r["output"]).name for r in recs} == {"same.jpg": "same_jpg.jpg", "same.png": "same_png.jpg"}
    assert sorted(p.name for p in dst.iterdir()) == ["same_jpg.jpg", "same_png.jpg"]

    assert main(argv) == 0  # a rerun finds both
    assert [json.loads(line)["status"] for line in capsys.readouterr().out.splitlines() if line.strip()] == ["skipped"] * 2


def test_ray_listing_uses_the_same_names(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="needs pyarrow (comes with requirements-ray.txt)")
    from gpen_core.scaleout.batch import list_inputs

    for name in ("same.jpg", "same.png", "solo.png"):
        (tmp_path / name).write_bytes(b"x")
    inputs, _, _ = list_inputs(str(tmp_path))
    assert [(Path(i.shown).name, i.stem) for i in inputs] == [("same.jpg", "same_jpg"), ("same.png", "same_png"), ("solo.png", "solo")]


def test_a_ray_rerun_appends_to_the_manifest_with_its_own_run_id(tmp_path: Path) -> None:
    """A rerun where everything is done starts no Ray: the manifest keeps the first run's records."""
    pytest.importorskip("ray", reason="needs Ray: pip install -r requirements-ray.txt")
    from gpen_core.scaleout.batch import MANIFEST, BatchConfig, run_batch

    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    for name in ("same.jpg", "same.png"):
        (src / name).write_bytes(b"x")
    for name in ("same_jpg.jpg", "same_png.jpg"):
        (out / name).write_bytes(b"done")
    first = {"run": "earlier", "input": str(src / "same.jpg"), "status": "ok", "peaks": {"rss_bytes": 123}}
    (out / MANIFEST).write_text(json.dumps(first) + "\n")

    one = run_batch(BatchConfig(source=str(src), output=out))
    two = run_batch(BatchConfig(source=str(src), output=out))
    lines = [json.loads(line) for line in (out / MANIFEST).read_text().splitlines()]
    assert lines[0] == first
    assert lines[1:] == one.records + two.records and len(lines) == 5
    assert {r["status"] for r in lines[1:]} == {"skipped"}
    assert one.run_id and two.run_id and one.run_id != two.run_id
    assert [r["run"] for r in lines[1:]] == [one.run_id] * 2 + [two.run_id] * 2


def test_the_sweep_in_a_shared_temp_folder_touches_only_our_subfolders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GRADIO_TEMP_DIR pointed at a shared folder: other programs' old files stay."""
    import time
    from types import SimpleNamespace

    from gpen_core.images import outputs
    from gpen_core.images.outputs import sweep_temp

    shared = tmp_path / "shared-tmp"
    theirs = [shared / "notes.txt", shared / "0123abcd" / "their-upload.jpg", shared / "other-app" / "db.sqlite"]
    ours = [shared / "results" / "r-x" / "a_gpen_low.jpg", shared / "pasted" / "p-1" / "pasted"]
    own = tmp_path / "gpen-gradio-1000"  # the app's own folder: Gradio's uploads for us go too
    upload = own / "0123abcd" / "photo.jpg"
    for f in theirs + ours + [upload]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x")
    later = time.time() + 7200  # two hours on (a file's ctime cannot be set back)
    monkeypatch.setattr(outputs, "time", SimpleNamespace(time=lambda: later))
    assert sweep_temp(shared, 3600) == 2
    assert all(f.exists() for f in theirs) and not any(f.exists() for f in ours)
    assert sweep_temp(own, 3600) == 1 and not upload.exists()


def test_the_sweep_keeps_a_file_copied_here_just_now_with_its_old_mtime(tmp_path: Path) -> None:
    """Gradio caches a file with shutil.copy2 (the source's mtime kept): a second app starting beside the first
    must not delete the copy the first has just handed to its visitor."""
    import os
    import shutil
    import time

    from gpen_core.images.outputs import sweep_temp

    source = tmp_path / "examples" / "old.jpg"
    source.parent.mkdir()
    source.write_bytes(b"x")
    os.utime(source, (time.time() - 7200,) * 2)  # checked out two hours ago
    cached = tmp_path / "gpen-gradio-1000" / "0123abcd" / "old.jpg"
    cached.parent.mkdir(parents=True)
    shutil.copy2(source, cached)
    assert cached.stat().st_mtime < time.time() - 3600  # as old as its source, by mtime
    assert sweep_temp(cached.parents[1], 3600) == 0 and cached.read_bytes() == b"x"
