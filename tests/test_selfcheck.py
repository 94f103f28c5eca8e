"""The selfcheck finds tensors on the wrong device, statically and inside a forward, on a CPU-only machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpen_core.hwcheck import selfcheck as sc
from gpen_core.networks.checkpoint import build_from_state_dict
from gpen_core.networks.prepared import prepare
from gpen_core.networks.plan import ForwardPlan
from gpen_core.networks.synthetic import random_state_dict
from tests.factories import TINY

ROOT = Path(__file__).resolve().parents[1]
META = torch.device("meta")


@pytest.fixture(scope="module")
def tiny_cpu_model():
    return build_from_state_dict(random_state_dict(TINY))


def _target(build, forward=lambda obj, dev: None, expect=lambda out, dev: None) -> sc._Target:
    return sc._Target("test net", "tests", "float32", build, forward, expect)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_generator_prepared_for_meta_has_every_tensor_there(tiny_cpu_model, dtype: str) -> None:
    """The bug this guards: _Blur's raw/dw buffers stayed on the CPU (24 of 120 on meta)."""
    forward = prepare(tiny_cpu_model, ForwardPlan(device="meta", dtype=dtype))
    assert sc.misplaced(forward.net, META) == []
    target = sc._Target("tiny", "fast", dtype, lambda dev: forward, sc._generator_forward, sc._float32_output)
    assert sc.check_one(target, META).ok


def test_a_planted_cpu_buffer_fails_the_check_and_is_named(tiny_cpu_model) -> None:
    def build(dev):
        forward = prepare(tiny_cpu_model, ForwardPlan(device="meta", dtype="float16"))
        forward.net.to_rgbs[0].register_buffer("planted", torch.ones(3, 4), persistent=False)
        return forward

    check = sc.check_one(_target(build, sc._generator_forward, sc._float32_output), META)
    assert not check.ok
    assert check.problem is not None and "buffer to_rgbs.0.planted (3, 4) is on cpu, expected meta" in check.problem


def test_a_plain_tensor_attribute_that_to_device_does_not_move_is_found() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)
            self.mean = torch.tensor([1.0, 2.0, 3.0])  # like facexlib's RetinaFace.mean_tensor

    check = sc.check_one(_target(lambda dev: Net().to(dev)), META)
    assert not check.ok and check.problem is not None and "tensor attribute mean (3,) is on cpu" in check.problem


def test_a_tensor_created_on_the_cpu_inside_the_forward_is_caught() -> None:
    class Net(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.ones(x.shape[1:])  # forgot device=x.device

    check = sc.check_one(_target(lambda dev: Net().to(dev), lambda net, dev: net(torch.empty(1, 3, 8, 8, device=dev))), META)
    assert not check.ok and check.problem is not None
    assert "mixes devices ['cpu', 'meta']" in check.problem and "(3, 8, 8) float32 tensor is on cpu" in check.problem


def test_a_cpu_weight_that_conv2d_silently_accepts_on_meta_is_caught() -> None:
    """F.conv2d computes a meta output from a CPU weight without complaint; the watch does not."""
    hidden = torch.ones(3, 1, 3, 3)  # not reachable from the module: the static check cannot see it

    def forward(net, dev):
        return F.conv2d(torch.empty(1, 3, 8, 8, device=dev), hidden, groups=3)

    assert F.conv2d(torch.empty(1, 3, 8, 8, device="meta"), hidden, groups=3).device == META  # the trap
    check = sc.check_one(_target(lambda dev: nn.Identity(), forward), META)
    assert not check.ok and check.problem is not None
    assert "aten.conv2d" in check.problem and "(3, 1, 3, 3) float32 tensor is on cpu" in check.problem


def test_explicit_transfers_are_not_mixes() -> None:
    watch = sc.DeviceMixWatch()
    with watch:
        x = torch.ones(4, 4)
        y = x.to("meta")
        _ = (y * 2).to("cpu") if False else y * 2
        torch.empty(4, 4, device="meta").copy_(x)
    assert watch.problem is None


def test_a_meta_forward_that_stops_at_its_host_copy_passes_but_other_errors_fail() -> None:
    class ToHost(nn.Module):
        def forward(self, x: torch.Tensor):
            return (x * 2).cpu().numpy()

    ok = sc.check_one(_target(lambda dev: ToHost(), lambda net, dev: net(torch.empty(2, 2, device=dev))), META)
    assert ok.ok

    def broken(net, dev):
        raise RuntimeError("shape mismatch in layer 3")

    bad = sc.check_one(_target(lambda dev: nn.Identity(), broken), META)
    assert not bad.ok and bad.problem is not None and "shape mismatch in layer 3" in bad.problem


def test_report_json_and_table_name_the_first_problem() -> None:
    report = sc.SelfCheckReport(
        "meta",
        (sc.Check("generator A", "p", "float16", True), sc.Check("detector B", "p", "float32", False, "buffer x is on cpu")),
    )
    data = report.to_json()
    assert data["device"] == "meta" and data["ok"] is False
    assert [c["network"] for c in data["checks"]] == ["generator A", "detector B"]
    assert set(data["checks"][0]) == {"network", "path", "dtype", "ok", "problem"}
    assert report.table().splitlines()[-1] == "FAILED: detector B (float32): buffer x is on cpu"
    assert "FAILED on meta: 1 of 2 networks; the first: detector B (float32): buffer x is on cpu" in report.summary()
    assert "all 1 networks" in sc.SelfCheckReport("cuda:0", report.checks[:1]).summary()


def _selfcheck(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "gpen_core", "selfcheck", *args], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA; the no-CUDA message cannot be shown")
def test_asking_for_cuda_without_one_says_so_and_exits_2() -> None:
    r = _selfcheck("--device", "cuda")
    assert r.returncode == 2, r.stderr
    assert "no CUDA device is available" in r.stderr and "--device cpu" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_selfcheck_on_meta_lists_every_network_all_ok(capsys: pytest.CaptureFixture[str]) -> None:
    """What CI runs (``python -m gpen_core selfcheck --device meta --json``): every network of every
    mode on the meta device. Through the CLI's main in this process: a fresh interpreter adds only
    its imports (the one above shows the command itself starts and exits)."""
    from gpen_core.cli import main

    rc = main(["selfcheck", "--device", "meta", "--json"])
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert rc == 0, f"{out.err}\n{json.dumps(data, indent=1)}"
    assert data["device"] == "meta" and data["ok"] is True
    seen = {(c["network"], c["dtype"]) for c in data["checks"]}
    for dtype in ("float32", "bfloat16", "float16"):
        assert ("generator GPEN-BFR-512", dtype) in seen
    networks = {c["network"] for c in data["checks"]}
    assert {"detector retinaface-mobilenet0.25", "detector retinaface-resnet50", "parser parsenet (facexlib)"} <= networks
    if (ROOT / "gpen_core" / "upscaler.py").exists():
        assert any(n.startswith("upscaler") for n in networks)
    assert all(c["ok"] and c["problem"] is None for c in data["checks"])


# --------------------------------------------------------------------------- benchmarks/gpu_check.py


def _gpu_check():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return gpu_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA; the no-CUDA exit cannot be shown")
def test_gpu_check_without_cuda_says_so_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--json", str(out), "--readme"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == _gpu_check().NO_CUDA_EXIT == 2
    assert "no CUDA device" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def _fake_result(ms: float, face_mb: float, photo_mb: float) -> dict:
    def rows(workload: str, mb: float) -> list[dict]:
        return [{"workload": workload, "run": run, "vram_reserved_mb": mb - (100 if run == "cold" else 0)} for run in ("cold", "warm", "warm")]

    return {
        "gpu": "NVIDIA H200 (139 GiB)",
        "date": "2026-12-03",
        "forward": [
            {"model": "GPEN-BFR-512", "dtype": "float16", "cudnn_benchmark": False, "ms_median": 1.0},
            {"model": "GPEN-BFR-512", "dtype": "float16", "cudnn_benchmark": True, "ms_median": ms},
        ],
        "modes": {"balanced": {"rows": rows("face", face_mb) + rows("photo", photo_mb)}},
    }


def test_gpu_readme_row_reports_the_measurement_and_whether_targets_are_met() -> None:
    gc = _gpu_check()
    row = gc.readme_row(_fake_result(12.34, 800, 1200))
    assert row.startswith("| GPU: 512 float16 | ≤ 1 GB VRAM, ≤ 25 ms per face (H200) | 12.3 ms per face")
    assert "800 MB VRAM reserved for a one-face request (balanced)" in row and "1200 MB for a 4000×3000 photo" in row
    assert "NVIDIA H200" in row and row.endswith("| yes |")
    assert gc.readme_row(_fake_result(30.0, 800, 1200)).endswith("| **no** |")  # too slow
    assert gc.readme_row(_fake_result(12.0, 1100, 1200)).endswith("| **no** |")  # face over 1 GB
    assert gc.readme_row(_fake_result(12.0, 800, 1600)).endswith("| **no** |")  # photo over 1.5 GB


def test_gpu_readme_row_says_not_measured_yet_without_a_measurement_and_fits_the_performance_table() -> None:
    gc = _gpu_check()
    row = gc.readme_row(None)
    assert "not measured yet" in row and row.endswith("| – |")
    text = gc.PERFORMANCE.read_text(encoding="utf-8")
    new = gc.replace_gpu_row(text, row)
    assert row in new.split("\n") and len(new.split("\n")) == len(text.split("\n"))
    with pytest.raises(ValueError):
        gc.replace_gpu_row("no table here", row)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_forward_measure_runs_on_cuda() -> None:
    row = _gpu_check().step_forward("cuda", "GPEN-BFR-256", "float16", runs=3)
    assert row["vram_reserved_mb"] > 0 and row["ms_median"] > 0 and row["output_finite"]


@pytest.mark.slow
def test_gpu_check_mode_worker_runs_end_to_end_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-mode step of gpu_check, run on the CPU, so a lent GPU's minutes are not spent on a typo."""
    from gpen_core.hwcheck import workloads

    gc = _gpu_check()
    # The script's own inputs with its 12 MP photo made 320×240: the worker's steps are the same, and
    # decoding, detecting in and pasting into the full photo three times on a CPU finds no more typos.
    small = tuple(replace(w, width=320, height=240, face_px=96) if w.name == "photo" else w for w in workloads.STANDARD)
    monkeypatch.setattr(workloads, "STANDARD", small)
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(gc._inputs(tmp_path)))
    data = gc._run_worker("low", inputs, tmp_path, 900, device="cpu")
    assert "error" not in data, data.get("error")
    rows = data["rows"]
    assert sorted({r["workload"] for r in rows}) == ["face", "photo"] and len(rows) == 6
    for r in rows:
        assert r["faces"] == 1 and r["mode_ran"] == "low" and r["device"] == "cpu"
        assert r["vram_reserved_mb"] is None and r["rss_above_idle_mb"] is not None and r["attempts"][-1]["outcome"] == "ok"
