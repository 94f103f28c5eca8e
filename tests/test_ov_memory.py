"""OpenVINO generator memory: buffers handed back after each face, mapped weight pages out of RSS.

The fake-model tests need no OpenVINO; the mapping tests need Linux's /proc; the real-model
test needs OpenVINO and the shared tiny reference.
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpen_core.runtimes.openvino import generator as ov_backend
from gpen_core.runtimes.openvino.base import CacheKey

from .conftest import shared_path

linux_only = pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="needs Linux /proc/self/smaps")
_PAGE = mmap.PAGESIZE


class _FakeTensor:
    def __init__(self, data: np.ndarray) -> None:
        self.data = data


class _FakeRequest:
    def __init__(self, model: _FakeCompiled) -> None:
        self.model = model
        self.buffer = np.zeros((1, 3, 8, 8), np.float32)  # reused between calls, like OpenVINO's

    def infer(self, inputs: list[np.ndarray]) -> None:
        self.model.events.append("infer")
        self.buffer[...] = inputs[0] * 2.0

    def get_output_tensor(self, i: int) -> _FakeTensor:
        return _FakeTensor(self.buffer)


class _FakeCompiled:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.request: _FakeRequest | None = None

    def create_infer_request(self) -> _FakeRequest:
        self.request = _FakeRequest(self)
        return self.request

    def release_memory(self) -> None:
        self.events.append("release")


def _fake_forward() -> tuple[ov_backend.OVForward, _FakeCompiled]:
    compiled = _FakeCompiled()
    key = CacheKey("0" * 64, "2026.4.1", "f32", "generic")
    return ov_backend.OVForward(compiled, {"size": 8}, key, load_s=0.0, convert_s=None), compiled


def test_every_face_hands_its_buffers_back() -> None:
    fwd, compiled = _fake_forward()
    x = np.random.default_rng(0).uniform(-1, 1, (3, 3, 8, 8)).astype(np.float32)
    out = fwd(x)
    # one infer per face, each followed by a release before the next face runs
    assert compiled.events == ["infer", "release"] * 3
    np.testing.assert_array_equal(out, x * 2.0)


def test_the_result_is_a_copy_of_the_reused_output_buffer() -> None:
    fwd, compiled = _fake_forward()
    x = np.ones((1, 3, 8, 8), np.float32)
    out = fwd(x)
    assert compiled.request is not None
    compiled.request.buffer[...] = -7.0  # the next call overwrites the request's buffer
    np.testing.assert_array_equal(out, 2.0)


def _mapped_rss(folder: Path) -> int:
    """Resident bytes of this process's mappings of files under ``folder`` (from /proc/self/smaps)."""
    prefix = os.path.realpath(folder) + os.sep
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = len(fields) == 6 and fields[5].startswith(prefix)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1]) * 1024
    return total


@linux_only
def test_read_only_mapped_weights_leave_rss_and_read_back_the_same(tmp_path: Path) -> None:
    weights = tmp_path / "ir" / "model.bin"
    weights.parent.mkdir()
    data = np.random.default_rng(1).integers(0, 255, 64 * _PAGE, dtype=np.uint8).tobytes()
    weights.write_bytes(data)
    outside = tmp_path / "other.bin"
    outside.write_bytes(data)
    with open(weights, "rb") as f, open(outside, "rb") as g:
        ro = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        other = mmap.mmap(g.fileno(), 0, prot=mmap.PROT_READ)
    try:
        assert ro[:] == data and other[:] == data  # every page touched: resident
        before = _mapped_rss(weights.parent)
        assert before >= len(data) - _PAGE
        dropped = ov_backend.drop_mapped_pages(weights.parent)
        assert dropped >= len(data)
        assert _mapped_rss(weights.parent) <= 2 * _PAGE  # out of this process's RSS
        assert _mapped_rss(tmp_path) >= len(data) - _PAGE  # a mapping outside the folder is untouched
        assert ro[:] == data  # pages come back from the page cache, unchanged
    finally:
        ro.close()
        other.close()


@linux_only
def test_writable_mappings_are_never_dropped(tmp_path: Path) -> None:
    path = tmp_path / "ir" / "scratch.bin"
    path.parent.mkdir()
    path.write_bytes(bytes(16 * _PAGE))
    with open(path, "r+b") as f:
        rw = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private, writable: dropping would lose writes
    try:
        rw[:4] = b"kept"
        assert ov_backend.drop_mapped_pages(path.parent) == 0
        assert rw[:4] == b"kept"
    finally:
        rw.close()


def test_nothing_is_dropped_off_linux(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert ov_backend.drop_mapped_pages(tmp_path) == 0


@linux_only
@pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (pip install openvino; in requirements.txt)")
def test_loaded_generator_keeps_no_idle_weight_pages_and_stays_exact(tmp_path: Path) -> None:
    import torch

    ref = torch.load(shared_path("reference", "gpen_tiny64.pt"), weights_only=True)
    ckpt = tmp_path / "gpen_tiny64.pth"
    torch.save({k: v.float() for k, v in ref["state_dict"].items()}, ckpt)
    fwd = ov_backend.load(ckpt, "f32")
    ir = fwd.key.ir_dir(ov_backend.cache_root())
    weights = (ir / "model.bin").stat().st_size
    assert fwd.dropped_bytes >= weights - _PAGE  # the IR's weights were mapped, and dropped after compiling
    assert _mapped_rss(ir) < weights // 4
    calls: list[str] = []
    real = fwd._compiled

    class Spy:
        def release_memory(self) -> None:
            calls.append("release")
            real.release_memory()

    fwd._compiled = Spy()  # type: ignore[assignment]
    first, second = fwd(ref["input"]), fwd(ref["input"])
    assert calls == ["release", "release"]
    # released buffers are rebuilt, and the weights read back from the page cache: same numbers
    assert (first - ref["output"]).abs().max() <= 1e-4
    assert torch.equal(first, second)


def test_request_hands_freed_memory_back_after_detection_and_after_each_face(
    gen256: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glibc keeps what the detector and the generator freed unless asked (quality: -186 MiB peak measured);
    the pipeline asks right after detection and right after each face's forward, before the parser runs."""
    from gpen_core.networks import prepared
    from gpen_core.platform import oom
    from gpen_core.restorer import Restorer, RestoreOptions
    from gpen_core.hwcheck.workloads import template_detection

    events: list[str] = []
    real_forward = prepared.forward_checked
    monkeypatch.setattr(oom, "malloc_trim", lambda: events.append("trim"))

    def forward(*a: Any, **k: Any) -> Any:
        events.append("forward")
        return real_forward(*a, **k)

    monkeypatch.setattr(prepared, "forward_checked", forward)
    rgb = np.random.default_rng(3).integers(0, 255, (600, 900, 3), dtype=np.uint8)
    boxes = [template_detection((40, 60, 340, 360)), template_detection((450, 100, 750, 400))]
    res = Restorer()(rgb, RestoreOptions(mode="low", model=str(gen256)), detections=boxes)
    assert len(res.faces) == 2
    first = events.index("forward")
    assert "trim" in events[1:first]  # after detection (the facade's own trim at the start is events[0])
    for i, e in enumerate(events):
        if e == "forward":
            assert events[i + 1] == "trim"  # each face's activations go back before the next stage
