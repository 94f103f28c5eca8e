"""The CLI restoring a clip in segments, killed with ``kill -9`` after its first segment, then resumed by the same
command: the real ``low`` restore (conftest's ``segments_home``: a narrow random 256 px generator under GPEN-BFR-256's
name, the real RetinaFace mobilenet0.25 from ../shared)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")

from gpen_core.video.segments import work_folder  # noqa: E402

from .conftest import ROOT, shared_path  # noqa: E402
from .videoclips import frame_index, keyed_clip, keyed_frames, read_clip  # noqa: E402

FPS, FRAMES = 8, 24  # three 1 s segments of 8 frames


def face_clip(tmp: Path) -> Path:
    import cv2

    face = cv2.cvtColor(cv2.imread(str(shared_path("faces", "ffhq_00001_512.png"))), cv2.COLOR_BGR2RGB)
    canvas = np.full((208, 192, 3), 70, np.uint8)  # the face well below the index rows, which the paste must not reach
    canvas[64:192, 32:160] = cv2.resize(face, (128, 128), interpolation=cv2.INTER_AREA)
    return keyed_clip(tmp / "in.mp4", keyed_frames(FRAMES, canvas), fps=FPS, gop=FPS)


def _command(src: Path, dst: Path) -> list[str]:
    return [sys.executable, "-m", "gpen_core", "restore", str(src), "-o", str(dst), "--mode", "low", "--segments",
            "--segment-seconds", "1", "--json"]


@pytest.mark.slow
def test_killed_with_sigkill_then_the_same_command_resumes(
    tmp_path: Path, segments_home: Path, face_clip_and_reference: tuple[Path, Path]
) -> None:
    src, reference = face_clip_and_reference  # the uninterrupted run of the same command, made once (conftest)
    dst = tmp_path / "out.mp4"
    env = {**os.environ, "GPEN_HOME": str(segments_home), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_command(src, dst), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = work_folder(dst) / "seg-00000.mp4"
    deadline = time.monotonic() + 240
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    left = sorted(p.name for p in work_folder(dst).iterdir())
    assert "seg-00002.mp4" not in left and not dst.exists()  # killed midway: work was left to resume

    again = subprocess.run(_command(src, dst), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [json.loads(x) for x in again.stdout.splitlines()]
    kept = [x["segment"] for x in lines if x.get("status") == "kept"]
    assert 0 in kept and 2 not in kept  # the first segment was kept, the last one redone
    summary = lines[-1]["video"]
    assert summary["segments"] == 3 and summary["segments_kept"] == len(kept) and summary["audio"] == "copied"

    got, ref, want = read_clip(dst), read_clip(reference), read_clip(src)
    assert got["times"] == want["times"] == [Fraction(i, FPS) for i in range(FRAMES)]
    assert [frame_index(f) for f in got["frames"]] == list(range(FRAMES))  # none missing or doubled at a seam
    assert [a for a, _, _ in got["audio"]] == [a for a, _, _ in want["audio"]]  # bit for bit
    assert [t for _, t, _ in got["audio"]] == [t for _, t, _ in want["audio"]]
    diffs = [float(np.abs(a.astype(int) - b.astype(int)).mean()) for a, b in zip(got["frames"], ref["frames"])]
    assert max(diffs) <= 2, diffs  # as an uninterrupted run (x264's threads alone differ by a few levels at a few pixels)
    face = [float(np.abs(a.astype(int) - b.astype(int))[80:180, 50:140].mean()) for a, b in zip(got["frames"], want["frames"])]
    assert min(face) > 5  # the face really went through the (random) generator in every segment
    assert not work_folder(dst).exists()
