"""CUDA-path defects, each proven on a CPU machine: stubs of the torch.cuda calls record which
device they were given, errors are raised with the real libraries' messages, and the float32
overflow copy and VRAM figures are measured against the real networks."""

from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from gpen_core.modes import MODES
from tests.factories import TINY

ROOT = Path(__file__).resolve().parents[1]


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # its dataclasses look their module up while being defined
    spec.loader.exec_module(mod)
    return mod


class _Stream:
    def __init__(self, device: torch.device) -> None:
        self.device = device


class _Calls:
    """Stubs of the torch.cuda calls the timing code makes, recording their devices."""

    def __init__(self, current: int = 0) -> None:
        self.current = current
        self.synced: list[object] = []
        self.recorded: list[object] = []
        self.entered: list[torch.device] = []

    def install(self, mp: pytest.MonkeyPatch) -> None:
        calls = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                pass

            def record(self, stream=None) -> None:
                calls.recorded.append(stream.device if stream is not None else None)

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other) -> float:
                return 2.5

        @contextmanager
        def device(dev):
            calls.entered.append(torch.device(dev))
            yield

        mp.setattr(torch.cuda, "Event", Event)
        mp.setattr(torch.cuda, "device", device)
        mp.setattr(torch.cuda, "current_device", lambda: calls.current)
        mp.setattr(torch.cuda, "current_stream", lambda dev=None: _Stream(torch.device(dev) if dev is not None else None))
        mp.setattr(torch.cuda, "synchronize", lambda dev=None: calls.synced.append(torch.device(dev) if dev is not None else None))


# --------------------------------------------------------------------------- gpu_check


def test_the_memory_cap_gets_a_device_with_an_index(monkeypatch: pytest.MonkeyPatch) -> None:
    gc = _gpu_check()
    got: list[torch.device] = []

    def set_fraction(fraction: float, device=None) -> None:
        d = torch.device(device)
        if d.index is None:  # torch's own check, message as torch 2.x raises it
            raise ValueError("Expected a torch.device with a specified index or an integer, but got:cuda")
        got.append(d)

    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", set_fraction)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    gc.cap_memory(0.4, "cuda")
    gc.cap_memory(0.4, "cuda:1")
    assert got == [torch.device("cuda:0"), torch.device("cuda:1")]


def test_forward_timing_syncs_and_records_events_on_the_requests_device(monkeypatch: pytest.MonkeyPatch) -> None:
    gc = _gpu_check()
    calls = _Calls(current=0)
    calls.install(monkeypatch)
    times, y = gc.time_on_device(lambda: "out", "cuda:1", runs=3)
    assert times == [2.5, 2.5, 2.5] and y == "out"
    assert calls.synced == [torch.device("cuda:1")]
    assert calls.recorded == [torch.device("cuda:1")] * 6  # start and end of each run, on GPU 1's stream
    assert calls.entered == [torch.device("cuda:1")]  # the forward's kernels go to GPU 1's current stream


def test_the_advice_forward_child_waits_for_and_reads_the_requests_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tips' forward child on "cuda:1", run on the CPU: every sync and the VRAM read name GPU 1."""
    from gpen_core.hwcheck import advice_child

    calls = _Calls(current=0)
    calls.install(monkeypatch)
    reserved: list[object] = []
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda dev=None: reserved.append(dev) or 123)
    real_to, real_rand = torch.nn.Module.to, torch.rand

    def to(self, *args, **kwargs):  # the "cuda:1" placement stays on the CPU
        args = tuple(a for a in args if not (isinstance(a, (str, torch.device)) and str(a).startswith("cuda")))
        return real_to(self, *args, **kwargs) if args or kwargs else self

    monkeypatch.setattr(torch.nn.Module, "to", to)
    monkeypatch.setattr(torch, "rand", lambda *a, device=None, **k: real_rand(*a, **k))
    out = advice_child.measure_forward({"device": "cuda:1", "size": 64, "repeats": 1})
    assert out.vram_reserved_bytes == 123
    assert calls.synced and all(d == torch.device("cuda:1") for d in calls.synced)
    assert [torch.device(d) for d in reserved] == [torch.device("cuda:1")]


# --------------------------------------------------------------------------- out of memory


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "GET was unable to find an engine to execute this computation",
    ],
)
def test_cublas_and_cudnn_allocation_failures_are_out_of_memory(message: str) -> None:
    from gpen_core.platform.oom import is_oom

    assert is_oom(RuntimeError(message))


def test_other_cudnn_errors_are_not_memory() -> None:
    from gpen_core.platform.oom import is_oom

    assert not is_oom(RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM"))
    assert not is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasSgemm`"))


# --------------------------------------------------------------------------- float16 overflow copy


def test_the_float32_copy_is_made_once_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    from gpen_core.networks.checkpoint import build_from_state_dict
    from gpen_core.networks.fast import FastGPEN
    from gpen_core.networks.prepared import forward_checked, prepare
    from gpen_core.networks.plan import ForwardPlan
    from gpen_core.networks.synthetic import random_state_dict

    f16 = prepare(build_from_state_dict(random_state_dict(TINY)), ForwardPlan(device="cpu", dtype="float16"))
    original = FastGPEN.forward
    monkeypatch.setattr(FastGPEN, "forward", lambda self, x: (original(self, x).half() * 70000).float()
                        if self.const.dtype == torch.float16 else original(self, x))
    copies = []
    real_deepcopy = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda obj, *a, **k: (copies.append(1) if isinstance(obj, FastGPEN) else None)
                        or real_deepcopy(obj, *a, **k))
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    notes = [forward_checked(f16, x)[1] for _ in range(3)]  # three overflowing faces
    assert all(n and "redone in float32" in n for n in notes)
    assert len(copies) == 1  # one float32 copy, kept for the next faces
    net = f16.float32_twin().net
    assert f16.twin_bytes == sum(t.numel() * 4 for t in (*net.parameters(), *net.buffers())) > 0


def test_the_budget_counts_the_float32_copy_as_measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """GPEN-BFR-256 (low's generator, float16 on a GPU): the copy the overflow path really builds
    fits the figure the budget adds for it, and a CUDA estimate includes it."""
    from gpen_core.engine import budget
    from gpen_core.networks.prepared import prepare
    from gpen_core.networks.plan import ForwardPlan
    from gpen_core.networks.synthetic import random_generator
    from tests.factories import RELEASED

    fwd = prepare(random_generator(RELEASED["GPEN-BFR-256"]), ForwardPlan(device="cpu", dtype="float16"))
    fwd.float32_twin()
    measured = fwd.twin_bytes
    est = budget.vram_estimate(MODES["low"])
    assert measured <= est.float32_fallback <= measured * 1.05
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    need, source = budget.estimate_peak(MODES["low"], "cuda", (512, 512), models_dir=tmp_path)
    assert need == est.total and need >= est.weights + measured
    assert "VRAM estimate" in source and "float32 copy" in source


# --------------------------------------------------------------------------- free VRAM


def test_free_vram_counts_what_torch_holds_on_that_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.engine import budget

    asked: list[torch.device] = []

    def mem_get_info(device=None):
        asked.append(torch.device(device))
        return (1_000_000_000, 8_000_000_000)

    def memory_reserved(device=None):
        asked.append(torch.device(device))
        return 3_000_000_000  # the resident model and cached blocks: handed out again

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "memory_reserved", memory_reserved)
    monkeypatch.delenv("GPEN_FREE_VRAM_BYTES", raising=False)
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert budget.free_memory("cuda:1").vram_bytes == 4_000_000_000
    assert asked == [torch.device("cuda:1")] * 2


# --------------------------------------------------------------------------- device and dtype


def test_a_cuda_index_this_machine_lacks_is_refused_at_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from gpen_core.errors import InputError
    from gpen_core.restorer import Restorer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    r = Restorer(device="cuda:5", synthetic_weights=True)
    with pytest.raises(InputError, match=r"'cuda:5' does not exist: this machine has 1 CUDA device \(cuda:0\)"):
        r(np.zeros((64, 64, 3), np.uint8))
    assert Restorer(device="cuda:0").device == "cuda:0"


def test_emulated_bfloat16_is_not_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Turing GPU (7.5): torch.cuda.is_bf16_supported() says yes (emulated), the plan says float16."""
    from gpen_core.networks.plan import choose_plan

    asked: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: asked.append(torch.device(dev)) or (7, 5))
    plan, note = choose_plan("cuda:1", "bfloat16")
    assert plan.dtype == "float16" and note and "no bfloat16" in note
    assert asked == [torch.device("cuda:1")]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (8, 0))
    assert choose_plan("cuda", "bfloat16")[0].dtype == "bfloat16"


# --------------------------------------------------------------------------- ZeroGPU
# (An error inside the ZeroGPU call reaching the failure panel: tests/test_cuda_path.py, in its one stand-in
# Space process.)


def test_zerogpu_duration_counts_loads_and_upscaling() -> None:
    from gpen_core.platform import zerogpu

    clock = zerogpu.FaceClock()
    plain = clock.duration(1, aligned=False)
    up = clock.duration(1, aligned=False, upscale=4, image_size=(1000, 1000))
    # 1 MP ×4 = 16 MP upscaled at the labelled estimate per megapixel, with the margin
    assert up - plain == pytest.approx(16 * zerogpu.ESTIMATED_S_PER_UPSCALED_MP * zerogpu.MARGIN, abs=1)
    assert plain >= zerogpu.FLOOR_S + zerogpu.ESTIMATED_LOAD_S
    clock.record({"device": "cuda:0", "faces": 1, "input_size": [1000, 1000], "upscale": {"factor": 4},
                  "timings": {"restore_s": 0.1, "load_s": 4.0, "upscale_s": 8.0}})
    assert clock.load_seconds() == 4.0  # measured, not the estimate
    assert clock.seconds_per_upscaled_mp() == pytest.approx(0.5)
    assert clock.duration(1, aligned=False, upscale=4, image_size=(1000, 1000)) == int(
        zerogpu.FLOOR_S + 4.0 + (0.1 + 16 * 0.5) * zerogpu.MARGIN)
