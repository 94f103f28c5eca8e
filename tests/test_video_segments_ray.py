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
from .test_video_resume import FPS, FRAMES, face_clip  # noqa: E402
from .videoclips import frame_index, read_clip  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from gpen_core.scaleout.runtime import ray_session

    with ray_session(num_cpus=2, temp_dir=tmp_path_factory.mktemp("ray")) as session:
        yield session


def test_two_ray_workers_restore_the_segments_as_one_process_does(
    tmp_path: Path, low_mode_home: Path, ray_local: object, one_thread: None, capsys: pytest.CaptureFixture
) -> None:
    import json

    from gpen_core.cli import main
    from gpen_core.restorer import Restorer

    src = face_clip(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    code = main(["restore", str(src), "-o", str(out / "ray.mp4"), "--ray", "--workers", "2", "--mode", "low",
                 "--segment-seconds", "1", "--models-dir", str(low_mode_home), "--json"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 0
    summary = lines[-1]["video"]
    assert summary["segments"] == 3 and summary["frames"] == FRAMES and summary["audio"] == "copied"
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted(m["segment"] for m in manifest) == [0, 1, 2] and len({m["run"] for m in manifest}) == 1
    assert all(m["status"] == "ok" and m["seconds"] > 0 and m["peaks"]["rss_bytes"] > 0 for m in manifest)
    workers = {m["worker"] for m in manifest}
    assert len(workers) == 2, workers  # two worker processes shared the three segments

    options = RestoreOptions(mode="low")
    restore_in_segments(src, tmp_path / "one.mp4", LocalRunner(Restorer(), options, 18), settings_text(options, 18),
                        segment_seconds=1.0)
    got, ref, want = read_clip(out / "ray.mp4"), read_clip(tmp_path / "one.mp4"), read_clip(src)
    assert got["times"] == want["times"] == [Fraction(i, FPS) for i in range(FRAMES)]
    assert [frame_index(f) for f in got["frames"]] == list(range(FRAMES))
    assert [a for a, _, _ in got["audio"]] == [a for a, _, _ in want["audio"]]
    diffs = [float(np.abs(a.astype(int) - b.astype(int)).mean()) for a, b in zip(got["frames"], ref["frames"])]
    assert max(diffs) <= 2, diffs
