"""ParseNet on OpenVINO (gpen_core.runtimes.openvino.parser): the torch parser's numbers, cached once, picked by ``auto``.

The numerical checks use the official reference's small ParseNet (../shared/reference/parse,
128 px) and the FFHQ faces in ../shared/faces; the model-cache checks convert the released
architecture with random weights at 256 px (``balanced``'s parse input; about 10 s once per module).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from gpen_core.runtimes.openvino import generator as ov_backend
from gpen_core.runtimes.openvino import parser as ov_parse
from gpen_core.runtimes.openvino.choice import SpeedRun
from gpen_core.modes import MODES
from gpen_core.options import RestoreOptions
from gpen_core.faces.parse import choose_parse_dtype
from gpen_core.networks.parsenet import FaceParser, build

from .conftest import SHARED, shared_path

pytestmark = pytest.mark.skipif(ov_backend.unavailable_reason() is not None,
                                reason=f"needs OpenVINO: {ov_backend.unavailable_reason()}")
_BF16 = ov_backend.unavailable_reason() is None and "BF16" in ov_backend.capabilities()
FACES = ("ffhq_00000_512.png", "ffhq_00001_512.png", "ffhq_00002_512.png")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One models folder for the module, so each network is converted once."""
    return tmp_path_factory.mktemp("ov_parse_home")


@pytest.fixture(scope="module")
def tiny(home: Path) -> tuple[dict, Path, torch.nn.Module]:
    """(reference, its weights as a file, the torch network) of the official 128 px reference ParseNet."""
    ref = torch.load(shared_path("reference", "parse", "parsenet_tiny128_seeded.pt"), weights_only=True)
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in ref["state_dict_fp16"].items()}
    path = home / "parsenet_tiny128.pth"
    torch.save(sd, path)
    return ref, path, build(sd, ref["config"])


@pytest.fixture(scope="module")
def ov32(tiny: tuple[dict, Path, torch.nn.Module], home: Path) -> ov_parse.OVParser:
    ref, path, _ = tiny
    return ov_parse.load(path, 128, "f32", models_dir=home, config=ref["config"])


def _face(name: str) -> np.ndarray:
    bgr = cv2.imread(str(shared_path("faces", name)), cv2.IMREAD_COLOR)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _torch_parser(tiny: tuple[dict, Path, torch.nn.Module], channels_last: bool) -> FaceParser:
    import copy

    return FaceParser(copy.deepcopy(tiny[2]), input_size=128, channels_last=channels_last)


def test_float32_logits_match_the_torch_parser_on_the_reference(tiny, ov32: ov_parse.OVParser) -> None:
    ref = tiny[0]
    face = cv2.cvtColor(ref["face_bgr_uint8"].numpy(), cv2.COLOR_BGR2RGB)
    got = ov32.logits(face)
    assert got.shape == (1, 19, 512, 512) and got.dtype == np.float32
    # The reference's logits, brought to 512 as FaceParser.labels does. torch in the official
    # layout, whole, reproduces them bit for bit on the CPU they were made on, and within 1e-5 of
    # their scale on others (test_parsenet.py): the same check here, so the bound below is OpenVINO's own.
    want = F.interpolate(ref["logits"], size=(512, 512), mode="bilinear", align_corners=False).numpy()
    parser = _torch_parser(tiny, channels_last=False)
    parser.strips = False
    torch_logits = parser.logits(face, out_size=512).numpy()
    assert float(np.abs(torch_logits - want).max()) <= 1e-5 * float(np.abs(want).max())
    # OpenVINO's convolutions sum in their own (blocked) order, as torch's channels-last ones do.
    # The logits reach 124 (a float32 ulp: 7.6e-6) and this random-weight net amplifies rounding
    # (the reference is 2.2e-4 from a float64 forward), so the bound is the one test_parsenet.py
    # holds channels-last to: 1e-5 of the logits' scale (1.2e-3; measured 4.0e-4 = 3.3e-6 of it).
    scale = float(np.abs(want).max())
    diff = float(np.abs(got - want).max())
    assert diff <= 1e-5 * scale, f"max abs diff {diff:.2e} on logits up to {scale:.0f}"
    assert np.array_equal(ov32.labels(face), want[0].argmax(0))


@pytest.mark.parametrize("name", FACES)
def test_float32_labels_are_the_torch_parsers_on_real_faces(tiny, ov32: ov_parse.OVParser, name: str) -> None:
    face = _face(name)
    got = ov32.labels(face)
    assert got.shape == (512, 512) and got.dtype == np.int64
    assert len(np.unique(got)) >= 4  # a real label map, not a constant one
    for channels_last in (False, True):  # the official layout and what the app runs
        logits = _torch_parser(tiny, channels_last).logits(face, out_size=512)[0].numpy()
        want = logits.argmax(0)
        # The two runtimes sum each convolution in their own order; a pixel whose two best classes
        # tie within that rounding (1e-5 of the logits' scale, the bound of the logits test above)
        # may take either. Every other pixel has the same class (measured: 0 or 1 differ per face).
        top2 = np.sort(logits, axis=0)[-2:]
        near_tie = (top2[1] - top2[0]) <= 1e-5 * float(np.abs(logits).max())
        differ = got != want
        assert not (differ & ~near_tie).any(), f"{(differ & ~near_tie).sum()} pixels differ beyond a tie (channels_last={channels_last})"
        assert differ.sum() <= 10, f"{differ.sum()} pixels differ (channels_last={channels_last})"


@pytest.mark.skipif(not _BF16, reason="needs a CPU whose OpenVINO plugin has BF16 (AVX-512 BF16 / AMX)")
def test_bf16_labels_agree_with_float32(tiny, ov32: ov_parse.OVParser, home: Path) -> None:
    ref, path, _ = tiny
    ov16 = ov_parse.load(path, 128, "bf16", models_dir=home, config=ref["config"])
    assert ov16.convert_s is None and ov16.dtype_name == "bfloat16"  # the f32 IR, compiled for bf16
    for name in FACES:
        a, b = ov16.labels(_face(name)), ov32.labels(_face(name))
        agree = float((a == b).mean())
        assert 0.95 <= agree < 1.0, f"{name}: {agree:.4f}"  # < 1: bf16 really ran (measured 0.996-0.9996)


def test_a_second_load_reuses_the_cache_without_torch(tiny, ov32: ov_parse.OVParser, home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ref, path, _ = tiny
    assert ov32.convert_s is not None or ov32.key.ir_dir(ov_parse.cache_root(home)).is_dir()
    monkeypatch.setattr(ov_parse, "convert", lambda *a, **k: pytest.fail("converted again"))
    again = ov_parse.load(path, 128, "f32", models_dir=home, config=ref["config"])
    assert again.convert_s is None and again.key == ov32.key
    face = _face(FACES[0])
    want = ov32.labels(face)
    # Another process: loads and parses from the cache with torch never imported.
    code = (
        "import sys, json, cv2, numpy as np\n"
        "from gpen_core.runtimes.openvino import parser as ov_parse\n"
        f"p = ov_parse.load({str(path)!r}, 128, 'f32', models_dir={str(home)!r})\n"
        f"face = cv2.cvtColor(cv2.imread({str(SHARED / 'faces' / FACES[0])!r}), cv2.COLOR_BGR2RGB)\n"
        "lab = p.labels(face)\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'convert_s': p.convert_s, 'hist': np.bincount(lab.ravel(), minlength=19).tolist()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"torch": False, "convert_s": None, "hist": np.bincount(want.ravel(), minlength=19).tolist()}


def test_the_cache_is_keyed_by_input_size_and_precision(tiny) -> None:
    path = tiny[1]
    a, b, c = (ov_parse.parse_key(path, 128, "f32"), ov_parse.parse_key(path, 256, "f32"), ov_parse.parse_key(path, 128, "bf16"))
    root = Path("/models")
    assert a.ir_dir(root) != b.ir_dir(root) and a.ir_dir(root).parent.name.startswith("parsenet-parsenet_tiny128-128px-")
    assert a.ir_dir(root) == c.ir_dir(root) and a.compiled_dir(root) != c.compiled_dir(root)


def _balanced_dtype() -> str:
    return choose_parse_dtype("cpu", MODES["balanced"].cpu_dtype)


def test_the_note_names_the_backend_and_the_cache_key_holds_it(home: Path) -> None:
    from gpen_core.engine.model_cache import ModelCache

    cache = ModelCache(home, synthetic_weights=True)
    dt = _balanced_dtype()
    notes: list[str] = []
    ov = cache.parser(MODES["balanced"], "cpu", notes, RestoreOptions(backend="openvino"))
    assert isinstance(ov._parser, ov_parse.OVParser) and ov._parser.dtype_name == dt
    assert notes[-1] == f"paste mask: GPEN's face-parsing mask (synthetic weights, 256 px input, {dt}, OpenVINO)"
    assert len(notes) == 2 and notes[0].startswith("converted the parser to OpenVINO on first use in ")
    notes.clear()
    assert cache.parser(MODES["balanced"], "cpu", notes, RestoreOptions(backend="openvino")) is ov  # resident: no reload
    assert notes == [f"paste mask: GPEN's face-parsing mask (synthetic weights, 256 px input, {dt}, OpenVINO)"]
    tp = cache.parser(MODES["balanced"], "cpu", notes, RestoreOptions(backend="torch"))
    assert tp is not ov and tp.backend == "torch"
    assert notes[-1] == f"paste mask: GPEN's face-parsing mask (synthetic weights, 256 px input, {dt})"
    # The same synthetic weights on both backends: the bf16 (or float32) OpenVINO paste labels
    # agree with torch float32's on a real face.
    ref = FaceParser.from_file(ov_parse.synthetic_weights(home), input_size=256, dtype=torch.float32)
    face = _face(FACES[1])
    assert float((ov._parser.labels(face) == ref.labels(face)).mean()) >= 0.95


def test_auto_follows_the_recorded_measurement(home: Path) -> None:
    from gpen_core.engine.model_cache import ModelCache

    dt = _balanced_dtype()
    auto = RestoreOptions(backend="auto")
    for torch_s, ov_s, want in ((1.0, 0.5, "openvino"), (0.5, 1.0, "torch")):
        ov_backend.record_speed(256, dt, torch_s, ov_s, models_dir=home, network="parsenet", source="test")
        masker = ModelCache(home, synthetic_weights=True).parser(MODES["balanced"], "cpu", [], auto)
        assert masker.backend == want
    assert ov_backend.choose_backend("auto", 512, "float32", network="parsenet", models_dir=home).runtime == "torch"  # not measured
    # The hardware check's measurement writes what auto reads.
    cache = ModelCache(home, synthetic_weights=True)  # both parsers as a request loads them, as the hardware check does

    def load_as(runtime: str):  # noqa: ANN202
        return cache.parser(MODES["balanced"], "cpu", [], RestoreOptions(backend=runtime))

    how = SpeedRun(runs=1, threads=1, source="test check")
    row = ov_parse.measure_speed(256, dt, load_as=load_as, models_dir=home, how=how)
    assert row["convert_s"] is None and len(row["torch_times"]) == len(row["openvino_times"]) == 1
    assert Path(row["speed_file"]).is_file()
    rec = ov_backend.speed_records(home)[f"parsenet-256-{dt}"]  # read back from the store the row names
    assert (rec.torch_s, rec.openvino_s, rec.source) == (row["torch_s"], row["openvino_s"], "test check")
    faster = "openvino" if row["openvino_s"] < row["torch_s"] else "torch"
    assert ov_backend.choose_backend("auto", 256, dt, network="parsenet", models_dir=home).runtime == faster
