"""A clip's segments restored by two Ray workers (marker ``ray``): the same output as one process, one manifest
line per segment. A local 2-CPU Ray on 127.0.0.1 for the module, as tests/test_ray.py starts its own; the real
``low`` restore (random GPEN-BFR-256, the real RetinaFace mobilenet0.25 from ../shared)."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")
ray = pytest.importorskip("ray", reason="needs Ray: bash scripts/setup.sh --ray (pip install -r requirements-ray.txt)")

from gpen_core.options import RestoreOptions  # noqa: E402
from gpen_core.video.resumable import LocalRunner, restore_in_segments, settings_text  # noqa: E402

from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: E402,F401
from .segclips import frame_index  # noqa: E402
from .test_video_resume import FPS, FRAMES, face_clip  # noqa: E402
from .videoclips import read_clip  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from gpen_core.scaleout.runtime import ray_session

    with ray_session(num_cpus=2, temp_dir=tmp_path_factory.mktemp("ray")) as session:
        yield session


def test_two_ray_workers_restore_the_segments_as_one_process_does(
    tmp_path: Path, low_mode_home: Path, ray_local: object, one_thread: None
) -> None:
    from gpen_core.restorer import Restorer
    from gpen_core.scaleout.video_ray import RayRunner

    src = face_clip(tmp_path)
    options = RestoreOptions(mode="low")
    settings = settings_text(options, 18)
    runner = RayRunner(options, 18, models_dir=str(low_mode_home), device="cpu", workers=2)
    on_ray = restore_in_segments(src, tmp_path / "ray.mp4", runner, settings, segment_seconds=1.0)
    local = restore_in_segments(src, tmp_path / "one.mp4", LocalRunner(Restorer(), options, 18), settings,
                                segment_seconds=1.0)
    assert runner.used_workers == 2
    assert on_ray.segments == local.segments == 3 and on_ray.frames == FRAMES and on_ray.audio == "copied"
    workers = {r.worker for r in on_ray.records}
    assert all(r.peak_rss_bytes and r.seconds > 0 and r.frames == FRAMES // 3 for r in on_ray.records)
    got, ref, want = read_clip(tmp_path / "ray.mp4"), read_clip(tmp_path / "one.mp4"), read_clip(src)
    assert got["times"] == want["times"] == [Fraction(i, FPS) for i in range(FRAMES)]
    assert [frame_index(f) for f in got["frames"]] == list(range(FRAMES))
    assert [a for a, _, _ in got["audio"]] == [a for a, _, _ in want["audio"]]
    diffs = [float(np.abs(a.astype(int) - b.astype(int)).mean()) for a, b in zip(got["frames"], ref["frames"])]
    assert max(diffs) <= 2, diffs
    print(f"segments on {len(workers)} Ray worker process(es): {sorted(workers)}")
