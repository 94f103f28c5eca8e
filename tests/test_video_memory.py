"""A clip four times as long costs no more memory: the whole process's peak (VmHWM) for an 8 s clip is
within 25 MiB of a 2 s clip's, each restored in a fresh process, and nothing piles up in $TMPDIR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")

from .videoclips import make_clip  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
W, H, FPS = 384, 288, 25  # a frame is 324 KiB: 150 more frames held would be 47 MiB, well over the 25 MiB allowed

# The child: restore the clip with a stand-in engine that makes a new frame each time (as a restore
# does), then print its whole-process peak. The engine is what a stream holds no matter the length;
# the networks' own memory is the same for every frame and is not what this measures.
CHILD = """
import json, resource, sys
import numpy as np
from gpen_core.video.engine_seam import FrameOut
from gpen_core.video.stream import restore_video

class Copy:
    device = "cpu"
    def detect(self, rgb):
        return []
    def restore(self, rgb, detections):
        return FrameOut(np.ascontiguousarray(rgb[:, ::-1]), ())

r = restore_video(sys.argv[1], sys.argv[2], engine=Copy())
print(json.dumps({"frames": r.frames, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "clip_peak": r.peaks.rss_bytes}))
"""


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (H, W, 3), np.uint8)
    return [np.roll(base, 3 * i, axis=1) for i in range(n)]


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def _restore_in_child(src: Path, dst: Path, tmpdir: Path) -> tuple[dict, int]:
    """(the child's report, the most $TMPDIR held while it ran)."""
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT)}
    most = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, _folder_bytes(tmpdir))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(src), str(dst)], env=env, capture_output=True, text=True,
                             timeout=300, cwd=ROOT)
    finally:
        done.set()
        watcher.join()
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), most


def test_an_8_second_clip_peaks_within_25_mib_of_a_2_second_one(tmp_path: Path) -> None:
    long_frames = _frames(8 * FPS)
    short = make_clip(tmp_path / "short.mp4", long_frames[: 2 * FPS])
    long = make_clip(tmp_path / "long.mp4", long_frames)
    del long_frames
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    a, _ = _restore_in_child(short, tmp_path / "short_out.mp4", tmpdir)
    b, most_tmp = _restore_in_child(long, tmp_path / "long_out.mp4", tmpdir)
    assert (a["frames"], b["frames"]) == (2 * FPS, 8 * FPS)
    grew = (b["peak_kib"] - a["peak_kib"]) / 1024
    print(f"whole-process peak: 2 s {a['peak_kib'] / 1024:.0f} MiB, 8 s {b['peak_kib'] / 1024:.0f} MiB (+{grew:.1f} MiB)")
    assert grew <= 25
    assert most_tmp <= 32 << 20
    assert not any(tmpdir.iterdir())
