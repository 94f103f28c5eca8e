"""The CUDA path's correctness, proven on a CPU machine: fp16 overflow fallback, exact float32
(TF32 off), cuDNN autotuning only for fixed sizes, the request's own device for memory checks,
no CUDA touched for CPU runs or outside ZeroGPU's GPU functions, estimates that are at least
the measured peaks, and CUDA out-of-memory stepping down."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from gpen_core.engine import budget
from gpen_core.networks.checkpoint import build_from_state_dict
from gpen_core.networks.fast import FastGPEN
from gpen_core.networks.prepared import forward_checked, prepare
from gpen_core.modes import MODES
from gpen_core.networks.plan import ForwardPlan, cuda_numerics
from gpen_core.networks.synthetic import random_state_dict
from tests.factories import TINY

ROOT = Path(__file__).resolve().parents[1]


class _NoCuda:
    def __getattr__(self, name: str):
        raise AssertionError(f"torch.cuda.{name} was touched")


@pytest.fixture(scope="module")
def tiny_model():
    return build_from_state_dict(random_state_dict(TINY))


def _face(size: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.rand(1, 3, size, size, generator=g) * 2 - 1


# --------------------------------------------------------------------------- fp16 overflow


def test_a_float16_overflow_is_redone_in_float32_and_said(tiny_model, monkeypatch: pytest.MonkeyPatch) -> None:
    f16 = prepare(tiny_model, ForwardPlan(device="cpu", dtype="float16"))
    reference = prepare(tiny_model, ForwardPlan(device="cpu", dtype="float32"))(_face(64))
    original = FastGPEN.forward

    def overflowing(self: FastGPEN, x: torch.Tensor) -> torch.Tensor:
        y = original(self, x)
        if self.const.dtype == torch.float16:  # force what an fp16 activation past 65504 does
            return (y.half() * 70000).float()
        return y

    monkeypatch.setattr(FastGPEN, "forward", overflowing)
    assert not torch.isfinite(f16(_face(64))).all()  # the forced overflow is real
    y, note = forward_checked(f16, _face(64))
    assert bool(torch.isfinite(y).all())
    assert note is not None and "float16" in note and "float32" in note
    assert y.dtype == torch.float32 and y.shape == (1, 3, 64, 64)
    # Redone in float32 (with the float16-rounded weights): close to the float32 model.
    assert float((y - reference).abs().max()) < 0.05
    assert f16.plan.dtype == "float16"  # the cached forward itself is unchanged


def test_a_finite_float16_output_passes_unchanged(tiny_model) -> None:
    f16 = prepare(tiny_model, ForwardPlan(device="cpu", dtype="float16"))
    y, note = forward_checked(f16, _face(64))
    assert note is None
    assert torch.equal(y, f16(_face(64)))


def test_a_non_finite_float32_output_is_never_returned_silently(tiny_model, monkeypatch: pytest.MonkeyPatch) -> None:
    f32 = prepare(tiny_model, ForwardPlan(device="cpu", dtype="float32"))
    monkeypatch.setattr(FastGPEN, "forward", lambda self, x: torch.full((1, 3, 64, 64), float("nan")))
    _, note = forward_checked(f32, _face(64))
    assert note is not None and "inf or NaN" in note


# --------------------------------------------------------------------------- TF32 / cuDNN


def _flags() -> tuple:
    b = torch.backends
    return (b.cudnn.conv.fp32_precision, b.cuda.matmul.fp32_precision, b.cudnn.benchmark)


def test_exact_float32_turns_tf32_off_on_cuda_and_restores_it() -> None:
    before = _flags()
    with cuda_numerics("cuda:1", exact_float32=True, fixed_input=True):
        conv, matmul, bench = _flags()
        assert conv == "ieee" and matmul == "ieee"
        assert bench is True  # the generator's input size is fixed: autotune pays once
    assert _flags() == before


def test_variable_sizes_keep_cudnn_autotuning_off_and_cpu_runs_change_nothing() -> None:
    before = _flags()
    with cuda_numerics("cuda", exact_float32=False, fixed_input=False):
        assert _flags()[2] is False
    with cuda_numerics("cpu", exact_float32=True, fixed_input=True):
        assert _flags() == before


# --------------------------------------------------------------------------- memory checks


def test_free_vram_is_read_on_the_requests_device(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list = []

    def mem_get_info(device=None):
        if device is None:
            raise AssertionError("mem_get_info() without a device reads the current device")
        asked.append(torch.device(device))
        return (7_000_000_000 if torch.device(device).index == 1 else 1, 8_000_000_000)

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.delenv("GPEN_FREE_VRAM_BYTES", raising=False)
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert budget.free_memory("cuda:1").vram_bytes == 7_000_000_000
    assert asked == [torch.device("cuda:1")]


def test_on_zerogpu_the_budget_never_touches_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page-load weights panel calls the budget outside any spaces.GPU function."""
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(torch, "cuda", _NoCuda())
    free = budget.free_memory("cuda")
    assert free.vram_bytes is None and free.ram_bytes > 0


def _readme_peaks() -> dict[str, float]:
    """The measured CPU peaks per mode from the generated modes table (README, or docs/ if it moved there)."""
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        text = doc.read_text()
        if "<!-- modes-table:start -->" in text:
            break
    else:
        pytest.fail("no generated modes table (<!-- modes-table:start -->) in README.md or docs/*.md")
    block = text.split("<!-- modes-table:start -->")[1].split("<!-- modes-table:end -->")[0]
    peaks = {}
    for line in block.splitlines():
        m = re.match(r"\| `([a-z-]+)` \|[^|]*\| ([\d.]+) (MB|GB) \|", line)
        if m:
            peaks[m.group(1)] = float(m.group(2)) * (1e6 if m.group(3) == "MB" else 1e9)
    return peaks


_WORKLOADS = ((512, 512), (4000, 3000), (3000, 2000))


def test_cpu_estimates_are_at_least_the_measured_peaks_and_say_estimate(tmp_path: Path) -> None:
    peaks = _readme_peaks()
    assert set(peaks) == set(MODES)
    for workload in _WORKLOADS:
        for name, mode in MODES.items():
            need, source = budget.estimate_peak(mode, "cpu", workload, models_dir=tmp_path)  # no saved profile there
            assert "estimate" in source
            assert need >= peaks[name], f"{name} at {workload}: estimate {need / 1e6:.0f} MB < measured {peaks[name] / 1e6:.0f} MB"


def _weight_bytes(model: str, dtype: str) -> int:
    """Bytes of the released generator's parameters in ``dtype`` (counted on the meta device)."""
    from gpen_core.networks.arch import GPEN

    from tests.factories import RELEASED

    with torch.device("meta"):
        n = sum(p.numel() for p in GPEN(RELEASED[model]).parameters())
    return n * {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]


def test_cuda_estimates_say_estimate_hold_the_weights_and_keep_the_modes_order(tmp_path: Path) -> None:
    """No GPU peak has been measured into the CUDA figures here, so what can be checked is what they
    must be anyway: labelled an estimate, never below the generator's own weights in the mode's CUDA
    dtype (VRAM a GPU run cannot go under), and lighter modes asking for less, which auto relies on."""
    for workload in _WORKLOADS:
        need = {}
        for name, mode in MODES.items():
            need[name], source = budget.estimate_peak(mode, "cuda", workload, models_dir=tmp_path)
            assert "estimate" in source, (name, source)
            floor = _weight_bytes(mode.model, mode.cuda_dtype)
            assert need[name] > floor, f"{name}: CUDA estimate {need[name] / 1e6:.0f} MB < its weights {floor / 1e6:.0f} MB"
        assert need["low"] < need["balanced"] <= need["quality"], need
        assert need["faces-only"] <= need["balanced"], need


# --------------------------------------------------------------------------- whole requests


def test_a_cpu_restore_touches_no_cuda_and_meters_no_vram(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import pipeline
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    pipeline.import_engine()  # imports may probe CUDA once per process; requests must not
    r = Restorer(device="cpu", synthetic_weights=True)
    monkeypatch.setattr(torch, "cuda", _NoCuda())
    res = r(np.zeros((256, 256, 3), np.uint8), RestoreOptions(mode="low", aligned=True))
    assert res.device == "cpu" and res.peaks.vram_allocated_bytes is None and res.peaks.vram_device is None


def test_cuda_out_of_memory_steps_down_frees_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import pipeline
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    real = pipeline.run_attempt
    tried: list[str] = []

    def run_attempt(models, device, req, *args, **kwargs):
        tried.append(req.mode.name)
        if req.mode.name == "balanced":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(models, device, req, *args, **kwargs)

    monkeypatch.setattr(pipeline, "run_attempt", run_attempt)
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64e9))
    r = Restorer(device="cpu", synthetic_weights=True)
    res = r(np.zeros((256, 256, 3), np.uint8), RestoreOptions(mode="balanced", aligned=True))
    assert tried == ["balanced", "low"] and res.mode.name == "low"
    assert any("ran out of memory in balanced" in n for n in res.notes)
    assert [a.outcome for a in res.attempts] == ["out of memory", "ok"]
    assert r.loaded()["generator"] == "GPEN-BFR-256"  # the heavier model was freed, not kept beside


def test_a_request_whose_float16_face_overflows_gets_the_float32_redo_and_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole request path: float16 (forced onto the CPU here), an overflow, the note."""
    from gpen_core.networks import plan as plan_mod
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from tests.factories import write_checkpoint

    ckpt = write_checkpoint(tmp_path / "tiny.pth", TINY)
    face = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    expected = Restorer(device="cpu")(face, RestoreOptions(mode="low", model=str(ckpt), aligned=True))  # float32

    monkeypatch.setattr(plan_mod, "choose_plan", lambda device, dtype, **kw: (ForwardPlan(device="cpu", dtype="float16"), None))
    original = FastGPEN.forward

    def overflowing(self: FastGPEN, x: torch.Tensor) -> torch.Tensor:
        y = original(self, x)
        return (y.half() * 70000).float() if self.const.dtype == torch.float16 else y

    monkeypatch.setattr(FastGPEN, "forward", overflowing)
    res = Restorer(device="cpu")(face, RestoreOptions(mode="low", model=str(ckpt), aligned=True))
    assert res.dtype == "float16"
    assert "float16 overflowed on the face (inf/NaN in its output): redone in float32 (1 face)" in res.notes
    diff = np.abs(res.image.astype(int) - expected.image.astype(int))
    assert diff.max() <= 12, "the redone face is not the float32 one"  # not the garbage an overflow makes


# --------------------------------------------------------------------------- ZeroGPU


def test_zerogpu_duration_grows_with_faces_from_measured_seconds_with_a_floor_and_cap() -> None:
    from gpen_core.platform import zerogpu

    clock = zerogpu.FaceClock()
    assert clock.seconds_per_face() == zerogpu.ESTIMATED_S_PER_FACE  # labelled: not measured
    load = zerogpu.ESTIMATED_LOAD_S
    assert clock.duration(1, aligned=True) == int(zerogpu.FLOOR_S + load + zerogpu.ESTIMATED_S_PER_FACE * zerogpu.MARGIN)
    assert clock.duration(500, aligned=False) == zerogpu.CAP_S
    clock.record({"faces": 4, "device": "cpu", "timings": {"restore_s": 40.0}})  # CPU runs do not count
    assert clock.seconds_per_face() == zerogpu.ESTIMATED_S_PER_FACE
    clock.record({"faces": 4, "device": "cuda:0", "timings": {"restore_s": 0.8, "align_s": 0.1, "paste_s": 0.3}})
    assert clock.seconds_per_face() == pytest.approx(0.3)
    assert clock.duration(50, aligned=False) == int(zerogpu.FLOOR_S + load + 50 * 0.3 * zerogpu.MARGIN)
    assert clock.duration(2, aligned=False) == int(zerogpu.FLOOR_S + load + 2 * 0.3 * zerogpu.MARGIN)


# One stand-in ZeroGPU Space for the module: the app imported once with SPACES_ZERO_GPU set and a
# ``spaces`` module whose GPU decorator does what the real one does around the handler. First it stands
# in for the engine call (a typed result, as a GPU restore returns it) and records the duration asked;
# then it runs the handler as ZeroGPU does (in another process: what the call remembers stays there, its
# return value comes back pickled) on a file that is not an image. One RESULT line per part.
_FAKE_SPACES_APP = r"""
import json, os, pickle, sys, types
import numpy as np
from gpen_core.modes import MODES
from gpen_core.result import Face, Peaks, RestoreResult, Timings
crop = np.zeros((8, 8, 3), np.uint8)
face = Face((0.0, 0.0, 8.0, 8.0), 0.99, np.zeros((5, 2), np.float32), crop, crop)
RESULT = RestoreResult(image=np.zeros((16, 16, 3), np.uint8), faces=(face, face), mode=MODES["balanced"],
                       timings=Timings(total_s=1.0, restore_s=0.2, align_s=0.0, paste_s=0.1), peaks=Peaks(2, 1, "vmhwm"),
                       requested_mode="auto", mode_reason="", checkpoint="GPEN-BFR-512", detector="mobilenet0.25",
                       device="cuda:0", dtype="float16", output_format="png", encoded=b"png", input_size=(16, 16),
                       processed_size=(16, 16), before=np.zeros((16, 16, 3), np.uint8))
calls = []
stand_in = [True]
spaces = types.ModuleType("spaces")
def GPU(fn=None, duration=60):
    def deco(f):
        def wrapped(*a, **k):
            if stand_in[0]:  # stands in for the engine call
                calls.append(duration(*a, **k) if callable(duration) else duration)
                return RESULT
            state = sys.modules["app"].STATE
            before = dict(state._errors)
            try:
                out = f(*a, **k)
            finally:
                state._errors.clear(); state._errors.update(before)
            return pickle.loads(pickle.dumps(out))
        return wrapped
    return deco
spaces.GPU = GPU
sys.modules["spaces"] = spaces
import app
args = ("photo.png", "auto", None, None, 1.0, 0.9, 4, False)
app.restore(*args)
app.restore(*args)
try:
    app.hardware_check()
    refused = None
except Exception as exc:
    refused = str(exc)
import inspect
print("RESULT " + json.dumps({"durations": calls, "refused": refused,
      "params": list(inspect.signature(app.restore).parameters)}))
stand_in[0] = False
class Req:
    session_hash = "visitor-1"
raised = None
try:
    app.restore(sys.argv[1], "auto", None, None, 1.0, 0.9, 4, False, request=Req())
except Exception as exc:
    raised = type(exc).__name__ + ": " + str(exc)
print("RESULT " + json.dumps({"raised": raised, "panel": app.show_failure(False, Req())[1]}))
"""


@pytest.fixture(scope="module")
def zerogpu_app(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """(the stand-in engine call's part, the failing call's part) of one stand-in ZeroGPU Space process."""
    import json
    import os
    import subprocess
    import sys

    home = tmp_path_factory.mktemp("zerogpu")
    bad = home / "photo.png"
    bad.write_bytes(b"this is not an image")
    env = dict(os.environ, SPACES_ZERO_GPU="true", PYTHONPATH=str(ROOT), GPEN_HOME=str(home))
    p = subprocess.run([sys.executable, "-c", _FAKE_SPACES_APP, str(bad)], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=300)
    lines = [json.loads(x[len("RESULT "):]) for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert len(lines) == 2, p.stderr[-3000:]
    return lines[0], lines[1]


def test_the_app_asks_zerogpu_for_measured_seconds_and_refuses_the_hardware_check_plainly(zerogpu_app: tuple[dict, dict]) -> None:
    from gpen_core.platform import zerogpu

    out = zerogpu_app[0]
    # First call: the labelled estimates per face and for loading; second: 0.15 s per face measured by the first.
    base = zerogpu.FLOOR_S + zerogpu.ESTIMATED_LOAD_S
    assert out["durations"] == [int(base + 4 * zerogpu.ESTIMATED_S_PER_FACE * zerogpu.MARGIN), int(base + 4 * 0.15 * zerogpu.MARGIN)]
    assert out["refused"] and "not available on a ZeroGPU Space" in out["refused"]
    assert "progress" in out["params"] and "request" in out["params"]  # Gradio still injects them


def test_an_error_inside_the_zerogpu_call_reaches_the_failure_panel(zerogpu_app: tuple[dict, dict]) -> None:
    """The engine fails inside the GPU call (a file that is not an image): the pop-up and the
    page's failure panel both carry its message, not the generic fallback."""
    out = zerogpu_app[1]
    assert out["raised"] and out["raised"].startswith("Error")
    assert "The file is not an image" in out["raised"]
    assert "The file is not an image" in out["panel"]  # not the generic "See the message that popped up"


def test_every_reason_that_shows_a_built_in_figure_says_it_is_an_estimate(tmp_path: Path) -> None:
    small = budget.Free(ram_bytes=300_000_000, vram_bytes=None)
    step = budget.check_fits(MODES["quality"], "cpu", (4000, 3000), models_dir=tmp_path, free=small)
    assert step is not None and "built-in estimate" in step.reason
    lightest = budget.choose("cpu", (4000, 3000), models_dir=tmp_path, free=small)
    assert "the lightest mode" in lightest.reason and "built-in estimate" in lightest.reason
    # A CUDA request whose free VRAM cannot be read (ZeroGPU) is checked against RAM and says RAM.
    assert " RAM " in budget.choose("cuda", (512, 512), models_dir=tmp_path, free=budget.Free(64_000_000_000, None)).reason


def test_the_profile_fingerprint_on_zerogpu_touches_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Page load reads the saved profile, whose fingerprint names the GPU."""
    from gpen_core.engine import profile_store as store

    store._machine_part.cache_clear()
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setenv("ZEROGPU_CUDA_DEVICE_NAME", "NVIDIA H200 MIG 3g.71gb")
    monkeypatch.setattr(torch, "cuda", _NoCuda())
    try:
        assert dict(store._machine_part("cuda"))["gpu_name"] == "NVIDIA H200 MIG 3g.71gb"
    finally:
        store._machine_part.cache_clear()
