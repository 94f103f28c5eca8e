"""GPEN's other tasks (colorize, inpaint, seg2face) against references made with the official code.

The references (../shared/reference/tasks/*_tiny64_seeded.pt) hold a small seeded FullGenerator
and what the official ``FaceColorization`` / ``FaceInpainting`` / ``Segmentation2Face``
``process`` returned for its inputs, in BGR uint8. Our engine takes RGB: inputs are flipped in
and outputs flipped back before comparing. Tolerance: max 3 grey levels, mean ≤ 0.5.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from .conftest import shared_path

REFS = {"colorize": "colorization", "inpaint": "inpainting", "seg2face": "seg2face"}


def _ref(task: str) -> dict:
    import torch

    d = torch.load(shared_path("reference", "tasks", f"{REFS[task]}_tiny64_seeded.pt"), weights_only=True)
    return {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in d.items() if k != "state_dict_fp16"} | {
        "state_dict_fp16": d["state_dict_fp16"]
    }


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The references' generators as checkpoint files (float32), one per task."""
    import torch

    folder = tmp_path_factory.mktemp("task_ckpts")
    out = {}
    for task in REFS:
        sd = {k: v.float() for k, v in _ref(task)["state_dict_fp16"].items()}
        out[task] = folder / f"tiny-{task}.pth"
        torch.save(sd, out[task])
    return out


def _close(ours_rgb: np.ndarray, ref_bgr: np.ndarray) -> None:
    ours = ours_rgb[..., ::-1].astype(int)
    assert ours.shape == ref_bgr.shape, f"shape {ours.shape}, official {ref_bgr.shape}"
    diff = np.abs(ours - ref_bgr.astype(int))
    assert diff.max() <= 3 and diff.mean() <= 0.5, f"max {diff.max()}, mean {diff.mean():.3f}"


def _run(ckpt: Path, image_bgr: np.ndarray, task: str, **kw):
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    mask = kw.pop("mask", None)
    opts = RestoreOptions(mode=kw.pop("mode", "quality"), model=str(ckpt), aligned=kw.pop("aligned", True), task=task, **kw)
    return Restorer(device="cpu")(np.ascontiguousarray(image_bgr[..., ::-1]), opts, mask=mask)


def test_aligned_colorize_matches_the_official_process(ckpts: dict[str, Path]) -> None:
    d = _ref("colorize")
    res = _run(ckpts["colorize"], d["grey_bgr_uint8"], "colorize")
    _close(res.image, d["output_bgr_uint8"])  # 80×80 in: resized to 64, colourised, back to 80, Y from the input
    assert res.task == "colorize" and res.dtype == "float32"
    assert res.peaks.rss_bytes > 0


def test_colorize_at_the_network_size_keeps_the_luminance_where_the_official_code_skips_it(ckpts: dict[str, Path]) -> None:
    """Our decision (docs/tasks.md): the official process skips the YUV step when the face is already
    at the network's size; we keep the face's own luminance at every size. So our result is the
    official colour (its U, V) with the input's Y, computed here with OpenCV from the official output."""
    d = _ref("colorize")
    grey, official = d["grey_same_size_bgr_uint8"], d["output_same_size_bgr_uint8"]
    res = _run(ckpts["colorize"], grey, "colorize")
    yuv = cv2.cvtColor(official, cv2.COLOR_BGR2YUV)
    yuv[:, :, 0] = cv2.cvtColor(grey, cv2.COLOR_BGR2YUV)[:, :, 0]
    _close(res.image, cv2.cvtColor(yuv, cv2.COLOR_YUV2BGR))
    assert not np.array_equal(res.image[..., ::-1], official)  # the quirk is not reproduced
    assert any("skips this step" in n for n in res.notes)


def test_aligned_inpaint_matches_the_official_process_at_the_network_size(ckpts: dict[str, Path]) -> None:
    d = _ref("inpaint")
    res = _run(ckpts["inpaint"], d["broken_bgr_uint8"], "inpaint")
    _close(res.image, d["output_bgr_uint8"])  # 256×256 in, 64×64 out, as official
    assert any("stays at that size" in n for n in res.notes)


def test_aligned_inpaint_with_a_separate_mask_paints_it_white_first(ckpts: dict[str, Path]) -> None:
    """The clean face plus the stroke mask is the same network input as the official broken face."""
    d = _ref("inpaint")
    mask = np.where(d["stroke_mask_bool"][..., None], 255, 0).astype(np.uint8).repeat(3, 2)
    res = _run(ckpts["inpaint"], d["face_bgr_uint8"], "inpaint", mask=mask)
    _close(res.image, d["output_bgr_uint8"])


def test_seg2face_matches_the_official_process_without_normalisation(ckpts: dict[str, Path]) -> None:
    d = _ref("seg2face")
    assert d["is_norm"] is False
    res = _run(ckpts["seg2face"], d["seg_bgr_uint8"], "seg2face")
    _close(res.image, d["output_bgr_uint8"])


def test_tensors_without_normalisation_feed_and_read_zero_to_one() -> None:
    import torch

    from gpen_core.networks.tensors import to_image, to_tensor

    rgb = np.array([[[0, 51, 255]]], np.uint8)
    assert torch.allclose(to_tensor(rgb, norm=False).flatten(), torch.tensor([0.0, 0.2, 1.0]))
    assert torch.allclose(to_tensor(rgb).flatten(), torch.tensor([-1.0, -0.6, 1.0]))
    out = torch.tensor([-0.5, 0.5, 1.5]).view(1, 3, 1, 1)
    assert to_image(out, norm=False).tolist() == [[[0, 127, 255]]]
    assert to_image(out).tolist() == [[[63, 191, 255]]]


# ------------------------------------------------------------------ options, registry, modes, budget


def test_task_options_are_checked_with_the_fix() -> None:
    from gpen_core.errors import InputError
    from gpen_core.options import RestoreOptions

    with pytest.raises(InputError, match="aligned inputs only"):
        RestoreOptions(task="seg2face").validated()
    with pytest.raises(InputError, match="unknown task"):
        RestoreOptions(task="sharpen").validated()
    with pytest.raises(InputError, match="upscale 1"):
        RestoreOptions(task="colorize", upscale=2).validated()
    with pytest.raises(InputError, match="low mode has no plan for the colorize task.*balanced"):
        RestoreOptions(task="colorize", mode="low").validated()
    RestoreOptions(task="colorize", mode="balanced").validated()


def test_registry_has_the_official_task_generators() -> None:
    from gpen_core.weights.registry import REGISTRY

    for name, size in (("GPEN-Colorization-1024", 1024), ("GPEN-Inpainting-1024", 1024), ("GPEN-Seg2face-512", 512)):
        spec = REGISTRY[name]
        assert spec.kind == "generator" and spec.arch_params.size == size and spec.arch_params.channel_multiplier == 2
        assert spec.urls == (f"https://public-vigen-video.oss-cn-shanghai.aliyuncs.com/robin/models/{name}.pth",)
        assert spec.sha256 is None  # no published hash: trust on first use


def test_the_out_of_memory_ladder_and_auto_skip_modes_without_a_plan() -> None:
    from gpen_core.engine import budget
    from gpen_core.modes import MODES, lighter_than

    assert lighter_than(MODES["balanced"], "colorize") is None  # faces-only does not paste; low has no plan
    assert lighter_than(MODES["balanced"]).name == "low"
    big = budget.choose("cpu", (1000, 800), free=budget.Free(64 * 2**30, None), work=budget.Work(task="colorize"))
    assert big.mode.name == "quality" and "1024 px colorize" in big.reason
    small = budget.choose("cpu", (1000, 800), free=budget.Free(300 * 2**20, None), work=budget.Work(task="colorize"))
    assert small.mode.name == "balanced" and "even it may need" in small.reason


# ------------------------------------------------------------------ CLI


def test_cli_aligned_tasks_write_the_official_pixels(ckpts: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpen_core.cli import main

    for task, key, ref_key in (("colorize", "grey_bgr_uint8", "output_bgr_uint8"), ("inpaint", "broken_bgr_uint8", "output_bgr_uint8"),
                               ("seg2face", "seg_bgr_uint8", "output_bgr_uint8")):
        d = _ref(task)
        src, dst = tmp_path / f"{task}_in.png", tmp_path / f"{task}_out.png"
        cv2.imwrite(str(src), d[key])
        rc = main(["restore", str(src), "-o", str(dst), "--task", task, "--aligned", "--model", str(ckpts[task]),
                   "--mode", "quality", "--json"])
        assert rc == 0
        rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert rec["task"] == task and rec["dtype"] == "float32" and rec["peaks"]["rss_bytes"] > 0
        _close(cv2.imread(str(dst))[..., ::-1], d[ref_key])


def test_cli_refuses_a_mask_without_inpaint_and_low_for_a_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpen_core.cli import main

    photo = tmp_path / "p.png"
    cv2.imwrite(str(photo), np.full((64, 64, 3), 128, np.uint8))
    assert main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--mask", str(photo)]) == 2
    assert "--task inpaint" in capsys.readouterr().err
    assert main(["restore", str(photo), "-o", str(tmp_path / "o.png"), "--task", "colorize", "--mode", "low"]) == 2
    assert "balanced" in capsys.readouterr().err


# ------------------------------------------------------------------ whole photos, real detector


@pytest.fixture(scope="module")
def solvay() -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(shared_path("faces", "Solvay_conference_1927.png"))), cv2.COLOR_BGR2RGB)


def test_whole_photo_colorize_colours_faces_only_and_keeps_the_luminance(
    ckpts: dict[str, Path], solvay: np.ndarray, models_with_detector: Path
) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    res = Restorer(models_dir=models_with_detector, device="cpu")(
        solvay, RestoreOptions(mode="balanced", model=str(ckpts["colorize"]), task="colorize")
    )
    assert len(res.faces) >= 20
    grey = cv2.cvtColor(solvay, cv2.COLOR_RGB2GRAY)
    y = cv2.cvtColor(res.image, cv2.COLOR_RGB2YUV)[..., 0].astype(int)
    # The photo's own detail everywhere; strong colour on a very dark or bright pixel leaves the RGB
    # range and is clipped back (as in the official YUV step), which moves Y there.
    assert np.mean(np.abs(y - grey) <= 2) > 0.99
    spread = res.image.max(axis=2).astype(int) - res.image.min(axis=2)
    inside = np.zeros(grey.shape, bool)
    for f in res.faces:  # the paste reaches a little beyond the detector's box: GPEN's crop is looser
        x0, y0, x1, y1 = f.box
        w, h = x1 - x0, y1 - y0
        inside[max(0, int(y0 - h)) : int(y1 + h), max(0, int(x0 - w)) : int(x1 + w)] = True
    assert spread[inside].max() > 10  # the faces got colour
    assert spread[~inside].max() <= 2  # the rest stayed grey
    assert any("left the rest of the photo grey" in n for n in res.notes)


def test_whole_photo_inpaint_repairs_only_the_face_the_mask_touches(
    ckpts: dict[str, Path], solvay: np.ndarray, models_with_detector: Path
) -> None:
    from gpen_core.errors import InputError
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    r = Restorer(models_dir=models_with_detector, device="cpu")
    mask = np.zeros(solvay.shape[:2], np.uint8)
    cv2.line(mask, (1100, 230), (1125, 260), 255, 4)  # across one face in the second row
    opts = RestoreOptions(mode="balanced", model=str(ckpts["inpaint"]), task="inpaint")
    res = r(solvay, opts, mask=mask)
    assert len(res.faces) == 1
    x0, y0, x1, y1 = res.faces[0].box
    assert x0 < 1112 < x1 and y0 < 245 < y1
    changed = np.abs(res.image.astype(int) - solvay.astype(int)).max(axis=2) > 0
    assert changed.any()
    near = cv2.dilate(mask, np.ones((61, 61), np.uint8)) > 0
    assert not changed[~near].any()  # the photo keeps its own pixels away from the damage
    assert any("inpainted 1 of" in n for n in res.notes)

    broken = solvay.copy()
    broken[mask > 0] = 255  # the same strokes, white in the photo itself
    res2 = r(broken, opts)
    assert len(res2.faces) == 1  # the same face (the detector sees the white stroke: its box moves a little)
    assert np.allclose(res2.faces[0].box, res.faces[0].box, atol=6)

    with pytest.raises(InputError, match="nothing to inpaint"):
        r(solvay, opts, mask=np.zeros_like(mask))
    with pytest.raises(InputError, match="photo's size"):
        r(solvay, opts, mask=mask[:100])


def test_white_in_the_photo_counts_in_the_inner_face_only() -> None:
    from gpen_core.faces.tasks import touches

    crop = np.zeros((256, 256), np.float32)
    crop[230:, :] = 1.0  # a white collar at the bottom of the crop: 10 % of it
    assert not touches(crop, from_photo=True)
    assert touches(crop, from_photo=False)  # a mask the user drew counts anywhere
    crop[:] = 0
    crop[120:125, 70:190] = 1.0  # one thin stroke across the face
    assert touches(crop, from_photo=True)


def test_ray_batch_runs_take_the_task_and_check_it(capsys: pytest.CaptureFixture[str]) -> None:
    from gpen_core import cli

    args = ["restore", "photos/", "-o", "out/", "--ray", "--task", "seg2face", "--json"]
    assert cli.main(args) == 2  # the task reached the batch's options, which refuse it before Ray starts
    assert "aligned inputs only" in capsys.readouterr().err
    assert cli.main([*args[:6], "inpaint", "--mask", "m.png", "--json"]) == 2
    assert "white strokes in each photo" in capsys.readouterr().err


def test_ray_batch_runs_take_every_option_a_photo_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``restore --ray`` builds its options as a photo restored here does: no flag is dropped on the way to Ray."""
    import types

    from gpen_core import cli
    from gpen_core.scaleout import batch

    seen = []
    monkeypatch.setattr(batch, "run_batch", lambda config, on_record: seen.append(config) or types.SimpleNamespace(exit_code=0))
    assert cli.main(["restore", "photos/", "-o", "out/", "--ray", "--json", "--no-face-check", "--identity", "off",
                     "--upscale", "2", "--alpha", "0.5", "--detector", "resnet50", "--orientations"]) == 0
    o = seen[0].options
    assert (o.face_check, o.identity, o.upscale, o.alpha, o.detector, o.orientations) == (False, "off", 2, 0.5, "resnet50", True)
