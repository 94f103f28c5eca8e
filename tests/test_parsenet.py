"""GPEN's ParseNet and paste mask against the official code's numbers (../shared/reference/parse)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from gpen_core.faces import masks
from gpen_core.errors import WeightsError
from gpen_core.networks.parsenet import RELEASED_CONFIG, FaceParser, ParseNet, build, load_state_dict

from .conftest import shared_path


@pytest.fixture(scope="module")
def ref() -> dict:
    return torch.load(shared_path("reference", "parse", "parsenet_tiny128_seeded.pt"), weights_only=True)


def _tiny(ref: dict) -> ParseNet:
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in ref["state_dict_fp16"].items()}
    return build(sd, ref["config"])


def _released_keys() -> dict[str, tuple[int, ...]]:
    rows = shared_path("reference", "parse", "keys_parsenet_latest.tsv").read_text().splitlines()[1:]
    table = {}
    for row in rows:
        key, shape = row.split("\t")
        table[key] = tuple(int(n) for n in shape.split("x")) if shape else ()
    return table


def test_released_key_table_is_ours() -> None:
    with torch.device("meta"):
        net = ParseNet(**RELEASED_CONFIG)
    assert {k: tuple(v.shape) for k, v in net.state_dict().items()} == _released_keys()


def test_facexlib_parsenet_has_the_same_keys_and_numbers() -> None:
    # facexlib's ParseNet(in_size=512, out_size=512, parsing_ch=19) is GPEN's network:
    # parsing_parsenet.pth and ParseNet-latest.pth fit the same class.
    from gpen_core.compat import torchvision as tv_shim

    with tv_shim.for_facexlib():  # facexlib's package import reaches for torchvision, absent from the CPU build
        from facexlib.parsing.parsenet import ParseNet as FacexlibParseNet

    with torch.device("meta"):
        theirs = FacexlibParseNet(in_size=512, out_size=512, parsing_ch=19)
    assert {k: tuple(v.shape) for k, v in theirs.state_dict().items()} == _released_keys()
    small = {**RELEASED_CONFIG, "in_size": 64, "out_size": 64, "base_ch": 8, "ch_range": (8, 16)}
    torch.manual_seed(3)
    f = FacexlibParseNet(**small).eval()
    ours = build(f.state_dict(), small)
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        assert torch.equal(f(x)[0], ours(x)[0]) and torch.equal(f(x)[0], ours.parse(x))


def test_forward_matches_the_official_logits(ref: dict) -> None:
    face_rgb = cv2.cvtColor(ref["face_bgr_uint8"].numpy(), cv2.COLOR_BGR2RGB)
    # The official layout (NCHW) and input (official_input: float64 x / 255 * 2 - 1, then
    # float32) reproduce the reference bit for bit on the CPU it was made on. Another CPU's
    # convolution kernels sum in another order: 4.3e-4 on the AMD Zen 4's oneDNN kernels, on
    # logits up to 124 that this random-weight net amplifies rounding into (about 60 ulps, as
    # channels-last below); bound: 1e-5 of the logits' scale, and the same mask. The generator's
    # float32 normalisation (x / 255 - 0.5) / 0.5 moved a third of the inputs by one ulp.
    # Whole (strips=False): the strips are checked against this in tests/test_parsenet_strips.py.
    parser = FaceParser(_tiny(ref), input_size=ref["config"]["in_size"], channels_last=False, strips=False)
    logits = parser.logits(face_rgb)
    want = ref["logits"]
    diff = float((logits - want).abs().max())
    assert diff <= 1e-5 * float(want.abs().max()), f"max abs diff {diff:.2e} on logits up to {float(want.abs().max()):.0f}"
    labels = logits.argmax(dim=1)[0].numpy()
    assert np.array_equal(masks.labels_to_mask_uint8(labels), ref["mask_uint8"].numpy())


def test_channels_last_differs_from_the_reference_by_summation_order_only(ref: dict) -> None:
    # What the app runs (channels-last: NHWC convolutions, faster with oneDNN) sums each
    # convolution in another order. The logits reach 124, where a float32 ulp is 7.6e-6, and
    # this random-weight net amplifies rounding: the reference itself is 2.2e-4 from a float64
    # forward of the same weights, and channels-last lands 4.5e-4 (about 60 ulps) from it,
    # within the sum of the two paths' own rounding. Bound: 1e-5 of the logits' scale (1.2e-3).
    face_rgb = cv2.cvtColor(ref["face_bgr_uint8"].numpy(), cv2.COLOR_BGR2RGB)
    logits = FaceParser(_tiny(ref), input_size=ref["config"]["in_size"], channels_last=True).logits(face_rgb)
    want = ref["logits"]
    assert float((logits - want).abs().max() / want.abs().max()) <= 1e-5
    assert np.array_equal(logits.argmax(dim=1)[0].numpy(), want.argmax(dim=1)[0].numpy())


def test_official_input_is_bit_exact() -> None:
    from gpen_core.networks.parsenet import official_input

    rgb = np.arange(256, dtype=np.uint8).repeat(3).reshape(16, 16, 3)
    want = torch.from_numpy((rgb / 255.0 * 2 - 1).transpose(2, 0, 1).copy()).unsqueeze(0).float()  # official img2tensor
    got = official_input(rgb)
    assert got.dtype == torch.float32 and torch.equal(got, want)


def test_channels_last_and_256_input_run_the_same_network(ref: dict) -> None:
    face_rgb = cv2.cvtColor(ref["face_bgr_uint8"].numpy(), cv2.COLOR_BGR2RGB)
    a = FaceParser(_tiny(ref), input_size=128, channels_last=False).logits(face_rgb)
    b = FaceParser(_tiny(ref), input_size=128, channels_last=True).logits(face_rgb)
    assert float((a - b).abs().max() / a.abs().max()) < 1e-5
    half = FaceParser(_tiny(ref), input_size=64).logits(face_rgb, out_size=128)
    assert half.shape == a.shape  # shrunk input, logits brought back to the official size
    assert FaceParser(_tiny(ref), input_size=128).labels(face_rgb).shape == (512, 512)


def test_class_table_is_gpens(ref: dict) -> None:
    assert masks.MASK_COLORMAP.tolist() == list(ref["mask_colormap"])
    names = dict(enumerate(masks.CLASS_NAMES))
    assert (names[13], names[14], names[17], names[18]) == ("hair", "hat", "neck", "cloth")
    assert masks.OFF_CLASSES == ("background", "hat", "cloth")
    assert np.array_equal(masks.labels_to_mask_uint8(ref["labels"].numpy()), ref["label_mask_uint8"].numpy())


def test_mask_postprocess_is_official(ref: dict) -> None:
    m512 = ref["label_mask512_nearest_uint8"].numpy()
    got = masks.mask_postprocess(m512 / 255.0)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref["mask_postprocessed"].numpy(), atol=1e-5, rtol=0)
    # The whole recipe from labels: nearest to 512, post-process, resize to the crop.
    labels = ref["labels"].numpy()
    np.testing.assert_allclose(
        masks.parsing_labels_to_mask(labels, 512), ref["mask_postprocessed"].numpy(), atol=1e-5, rtol=0
    )
    assert masks.parsing_labels_to_mask(labels, 256).shape == (256, 256)


def test_loading_reports_the_file_and_refuses_other_networks(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="not found"):
        load_state_dict(tmp_path / "ParseNet-latest.pth")
    small = {**RELEASED_CONFIG, "in_size": 64, "out_size": 64}
    torch.manual_seed(0)
    wrong = tmp_path / "ParseNet-latest.pth"
    torch.save({"module." + k: v for k, v in ParseNet(**small).state_dict().items()}, wrong)
    with pytest.raises(WeightsError, match="not GPEN/facexlib ParseNet"):
        FaceParser.from_file(wrong)  # 64 px weights: fewer levels than the released 512 px net
    assert set(load_state_dict(wrong)) == set(ParseNet(**small).state_dict())  # "module." stripped


def test_every_mode_says_which_paste_mask_it_used(_isolated_models_home: Path) -> None:
    from gpen_core.engine.model_cache import ModelCache
    from gpen_core.modes import MODES

    cache = ModelCache(_isolated_models_home)
    notes: list[str] = []
    assert cache.parser(MODES["low"], "cpu", notes) is None
    assert notes == ["paste mask: GPEN's feathered rectangle (low skips the face-parsing mask to save time)"]
    notes.clear()
    assert cache.parser(MODES["balanced"], "cpu", notes) is None  # no parser weights yet
    assert len(notes) == 1 and "rectangle, because no face-parsing weights" in notes[0]
    assert "ParseNet-latest.pth" in notes[0] and "parsing_parsenet.pth" in notes[0]

    torch.manual_seed(0)
    torch.save(ParseNet(**RELEASED_CONFIG).state_dict(), _isolated_models_home / "parsing_parsenet.pth")
    notes.clear()
    with pytest.raises(WeightsError):  # present, but not the pinned facexlib file: refused, not pasted silently
        cache.parser(MODES["balanced"], "cpu", notes)
    (_isolated_models_home / "parsing_parsenet.pth").rename(_isolated_models_home / "ParseNet-latest.pth")
    masker = cache.parser(MODES["balanced"], "cpu", notes)
    assert masker is not None and masker.input_size == 256
    from gpen_core.faces.parse import choose_parse_dtype

    dt = choose_parse_dtype("cpu", "bfloat16")  # balanced: bf16 where this CPU has it natively (test_parse_dtype.py)
    assert notes[-1] == f"paste mask: GPEN's face-parsing mask (ParseNet-latest.pth, 256 px input, {dt})"
    assert cache.parser(MODES["quality"], "cpu", notes).input_size == 512
