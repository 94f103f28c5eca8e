"""Out of memory inside OpenVINO and OpenBLAS is recognised as out of memory, not a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from gpen_core.platform.oom import is_oom

from .conftest import ROOT


@pytest.mark.parametrize(
    "text, oom",
    [
        # OpenVINO's CPU plugin under prlimit --as: its JIT kernel's code buffer (Xbyak) cannot be mapped
        ("Exception from src/inference/src/cpp/core.cpp:112:\n[CPU] Convolution node with name '__module.x/aten::_convolution/"
         "Convolution' Exception from src/plugins/intel_cpu/src/nodes/conv.cpp: can't alloc", True),
        ("Exception from src/core/src/runtime/aligned_buffer.cpp: Cannot allocate memory for type: f32", True),
        # OpenBLAS's last words, as a worker process's stderr tail reports them
        ("the worker exited with status 1: OpenBLAS error: Memory allocation still failed after 10 retries, giving up.", True),
        # the CPU plugin's register allocator: a compiler limit, not memory
        ("[CPU] Subgraph node: Can't allocate registers for a snippet: not enough registers", False),
        ("Incorrect weights in bin file!", False),
    ],
)
def test_is_oom_knows_openvino_and_openblas(text: str, oom: bool) -> None:
    assert is_oom(RuntimeError(text)) is oom


_PROBE = """
import mmap, sys
import numpy as np
from gpen_core.platform.oom import reserve_blas_buffers
if sys.argv[1] == "reserved":
    reserve_blas_buffers()
hold = []
try:
    while True:  # take the whole address space the cap leaves, as a big request does
        hold.append(mmap.mmap(-1, 8 << 20))
except OSError:
    pass
del hold[-2:]  # 16 MiB back: room for a small product, not for OpenBLAS's buffers
a = np.ones((512, 512), np.float32)
print("product", (a @ a)[0, 0], flush=True)
"""


@pytest.mark.skipif(shutil.which("prlimit") is None or not sys.platform.startswith("linux"), reason="needs prlimit (util-linux)")
def test_reserved_blas_buffers_survive_a_full_address_space() -> None:
    """Under an address-space cap, OpenBLAS exits the process (status 1) at a product it cannot map
    buffers for; with its buffers reserved at engine import the same product runs."""

    def run(how: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["prlimit", f"--as={1200 << 20}", sys.executable, "-c", _PROBE, how], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    cold = run("cold")
    if cold.returncode == 0:
        pytest.skip("this OpenBLAS found room for its buffers anyway: nothing to show here")
    assert "Memory allocation still failed" in cold.stdout + cold.stderr
    reserved = run("reserved")
    assert reserved.returncode == 0, reserved.stdout + reserved.stderr
    assert "product 512.0" in reserved.stdout
