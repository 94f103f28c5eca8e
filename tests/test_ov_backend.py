"""OpenVINO backend: same numbers as the official references, a cache that is reused, a measured auto choice."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from gpen_core.runtimes.openvino.choice import BackendChoice
import torch

from gpen_core.errors import GPENError, InputError, ResourceError
from gpen_core.runtimes.openvino import generator as ov_backend

from .conftest import ROOT, shared_path
from .fixtures_openvino import ConvertedIRs

pytestmark = pytest.mark.skipif(
    ov_backend.openvino_version() is None, reason="needs OpenVINO (pip install openvino; in requirements.txt)"
)


def _reference(name: str, tmp_path: Path) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """The shared reference as a checkpoint file (float32), its input and official output."""
    ref = torch.load(shared_path("reference", name), weights_only=True)
    ckpt = tmp_path / (Path(name).stem + ".pth")
    torch.save({k: v.float() for k, v in ref["state_dict"].items()}, ckpt)
    return ckpt, ref["input"], ref["output"]


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR over GPEN's [-1, 1] range on the raw floats (as benchmarks/bench_forward.py)."""
    mse = float((a.double() - b.double()).pow(2).mean())
    return math.inf if mse == 0 else 10 * math.log10(4.0 / mse)


def test_exportable_forward_is_the_same_function(tmp_path: Path) -> None:
    from gpen_core.networks.checkpoint import load_generator
    from gpen_core.runtimes.openvino.export import exportable

    ckpt, x, expected = _reference("gpen_tiny128_cm2.pt", tmp_path)
    model = exportable(load_generator(ckpt))
    with torch.no_grad():
        assert (model(x) - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("name", ["gpen_tiny64.pt", "gpen_tiny128_cm2.pt", "gpen_bfr256_random.pt"])
def test_f32_matches_the_official_reference(name: str, tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    ckpt, x, expected = _reference(name, tmp_path)
    # The real 256 px architecture's conversion is the session's (other tests read it too); the two
    # small references show that a first use converts and says how long.
    seeded = name == "gpen_bfr256_random.pt"
    if seeded:
        converted_ir.seed("gpen_bfr256_random")
    messages: list[str] = []
    fwd = ov_backend.load(ckpt, "f32", progress=lambda f, m: messages.append(m))
    if seeded:
        assert fwd.convert_s is None and not messages
    else:
        assert fwd.convert_s is not None and fwd.convert_s > 0  # first use converts, and says how long
        assert any("converted in" in m for m in messages)
    out = fwd(x)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == expected.shape
    assert (out - expected).abs().max() <= 1e-4
    # numpy in, numpy out; a batch runs face by face
    out_np = fwd(torch.cat([x, x]).numpy())
    assert out_np.shape == (2, *expected.shape[1:])
    assert abs(out_np[1] - expected[0].numpy()).max() <= 1e-4


def test_second_load_comes_from_the_cache_keyed_by_sha_version_precision_cpu(tmp_path: Path) -> None:
    ckpt, x, _ = _reference("gpen_tiny64.pt", tmp_path)
    first = ov_backend.load(ckpt, "f32")
    again = ov_backend.load(ckpt, "f32")
    assert first.convert_s is not None and again.convert_s is None
    key = again.key
    from gpen_core.weights.lookup import file_sha256

    assert key.weights_sha256 == file_sha256(ckpt)
    assert key.openvino == ov_backend.openvino_version().split("-")[0]
    compiled = key.compiled_dir(ov_backend.cache_root())
    assert compiled.name == f"compiled-f32-{ov_backend.cpu_key()}" and any(compiled.iterdir())  # the blob
    assert f"ov{key.openvino}" in str(compiled) and key.weights_sha256[:16] in str(compiled)
    assert torch.equal(first(x), again(x))
    # other weights → another entry, never the stale one
    sd = torch.load(ckpt, weights_only=True)
    sd["generator.to_rgb1.bias"] += 1.0
    other = tmp_path / "other.pth"
    torch.save(sd, other)
    fwd_other = ov_backend.load(other, "f32")
    assert fwd_other.convert_s is not None and not torch.equal(fwd_other(x), first(x))


def test_loading_from_the_cache_imports_no_torch(tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    ckpt, x, expected = _reference("gpen_tiny64.pt", tmp_path)
    converted_ir.seed("gpen_tiny64")  # into this test's models folder ($GPEN_HOME), as a first use leaves it
    import numpy as np

    np.save(tmp_path / "x.npy", x.numpy())
    code = (
        "import sys, numpy as np\n"
        "from gpen_core.runtimes.openvino import generator as ov_backend\n"
        f"fwd = ov_backend.load({str(ckpt)!r}, 'f32')\n"
        f"y = fwd(np.load({str(tmp_path / 'x.npy')!r}))\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
        "print(fwd.convert_s, 'torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["None", "False"]
    assert abs(np.load(tmp_path / "y.npy") - expected.numpy()).max() <= 1e-4


def test_bf16_is_within_45_db_of_f32(tmp_path: Path, converted_ir: ConvertedIRs) -> None:
    if "BF16" not in ov_backend.capabilities():
        pytest.skip(f"OpenVINO has no BF16 on this CPU (capabilities {ov_backend.capabilities()}; needs AVX-512 BF16 or AMX)")
    ckpt, x, expected = _reference("gpen_bfr256_random.pt", tmp_path)
    converted_ir.seed("gpen_bfr256_random")
    f32 = ov_backend.load(ckpt, "f32")(x)
    bf16 = ov_backend.load(ckpt, "bf16")(x)
    assert _psnr(bf16, f32) >= 45.0
    assert (f32 - expected).abs().max() <= 1e-4


def test_bf16_is_refused_where_the_cpu_has_none(tmp_path: Path) -> None:
    if "BF16" in ov_backend.capabilities():
        pytest.skip("this CPU has BF16 for OpenVINO")
    precision, note = ov_backend.choose_precision("bfloat16")
    assert precision == "f32" and "float32" in note
    ckpt, _, _ = _reference("gpen_tiny64.pt", tmp_path)
    with pytest.raises(GPENError, match=r"bf16 needs a CPU with AVX-512 BF16 or AMX; this one has neither\. Use precision 'f32'") as err:
        ov_backend.load(ckpt, "bf16")
    assert err.type is GPENError  # not ResourceError: OpenVINO itself is there


def test_auto_follows_the_measurement_for_this_cpu(tmp_path: Path) -> None:
    choice = ov_backend.choose_backend("auto", 512, "float32")
    backend, why = choice.runtime, choice.why
    assert backend == "torch" and "no OpenVINO measurement" in why
    ov_backend.record_speed(512, "float32", torch_s=1.7, openvino_s=1.2, source="test")
    choice = ov_backend.choose_backend("auto", 512, "float32")
    backend, why = choice.runtime, choice.why
    assert backend == "openvino" and "1.20 s" in why
    ov_backend.record_speed(512, "float32", torch_s=1.0, openvino_s=1.2, source="test")
    assert ov_backend.choose_backend("auto", 512, "float32").runtime == "torch"
    assert ov_backend.choose_backend("auto", 256, "float32").runtime == "torch"  # other size: not measured
    assert ov_backend.choose_backend("torch", 512, "float32") == BackendChoice("torch", "asked for")
    assert ov_backend.choose_backend("openvino", 256, "float32").runtime == "openvino"
    assert ov_backend.choose_backend("auto", 512, "float32", device="cuda").runtime == "torch"
    with pytest.raises(ResourceError, match="runs on the CPU only, and this request runs on cuda; use --backend torch"):
        ov_backend.choose_backend("openvino", 512, "float16", device="cuda")
    with pytest.raises(ValueError, match="unknown backend"):
        ov_backend.choose_backend("onnx", 512, "float32")
    assert ov_backend.speed_records()["512-float32"].source == "test"


def test_restorer_runs_the_openvino_backend_and_says_so(tmp_path: Path) -> None:
    import numpy as np

    from gpen_core.options import RestoreOptions
    from gpen_core.result_json import result_record
    from gpen_core.restorer import Restorer

    ckpt, _, _ = _reference("gpen_tiny64.pt", tmp_path)
    face = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    r = Restorer(models_dir=tmp_path / "models")
    opts = dict(mode="low", aligned=True, model=str(ckpt))
    first = r(face, RestoreOptions(backend="openvino", **opts))
    rec = result_record(first)
    assert rec["backend"] == "openvino" and first.backend_reason == "asked for"
    assert any("converted the generator to OpenVINO on first use in" in n for n in first.notes)
    assert any((tmp_path / "models" / "openvino").rglob("model.xml"))  # cached in the models folder
    again = r(face, RestoreOptions(backend="openvino", **opts))
    assert not any("OpenVINO on first use" in n for n in again.notes)
    torch_res = r(face, RestoreOptions(backend="torch", **opts))
    assert torch_res.backend == "torch"
    assert np.abs(torch_res.image.astype(int) - first.image.astype(int)).max() <= 1  # same face to a rounding step
    auto = r(face, RestoreOptions(backend="auto", **opts))
    assert auto.backend == "torch" and auto.backend_reason  # a path: no measurement to go by, and it says why
    with pytest.raises(InputError, match="unknown backend 'onnx'; choose auto, torch or openvino"):
        r(face, RestoreOptions(backend="onnx", **opts))


def test_cli_takes_the_backend_and_json_records_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], converted_ir: ConvertedIRs) -> None:
    import numpy as np
    from PIL import Image

    from gpen_core import cli

    args = cli._parser().parse_args(["restore", "x.png", "-o", "y.png", "--backend", "openvino"])
    assert args.backend == "openvino"
    assert cli._parser().parse_args(["restore", "x.png", "-o", "y.png"]).backend == "auto"
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["restore", "x.png", "-o", "y.png", "--backend", "onnx"])
    ckpt, _, _ = _reference("gpen_tiny64.pt", tmp_path)
    converted_ir.seed("gpen_tiny64")  # the CLI's models folder ($GPEN_HOME): the conversion is not what is tested
    src = tmp_path / "face.png"
    Image.fromarray((np.random.default_rng(1).random((64, 64, 3)) * 255).astype(np.uint8)).save(src)
    code = cli.main(["restore", str(src), "-o", str(tmp_path / "out.png"), "--aligned", "--mode", "low",
                     "--model", str(ckpt), "--backend", "openvino", "--json"])
    assert code == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["backend"] == "openvino" and record["backend_reason"] == "asked for"
