"""A request loads only what it runs: no module it does not use.

Each check runs in a fresh interpreter: what the test process imported for other tests
must not hide a module a request pulls in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT, shared_path

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"
# Modules a torch request on the CPU never needs, and what each costs in RSS when imported anyway
# (measured on the CPU build of torch 2.13): sympy 34 MiB (pulled in by any random op on the meta
# device), OpenVINO's runtime, scipy, torchvision and torch._dynamo (~100 MiB).
UNUSED = ("sympy", "openvino", "scipy", "torchvision", "torch._dynamo")


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_loading_a_checkpoint_imports_no_sympy(gen256: Path) -> None:
    code = """
import sys
from gpen_core.networks.checkpoint import load_generator
load_generator(sys.argv[1])
print("loaded:", " ".join(m for m in ("sympy",) if m in sys.modules) or "-")
"""
    assert _run(code, str(gen256)) == "loaded: -"


def test_a_low_request_on_torch_imports_nothing_it_does_not_run(tmp_path: Path, gen256: Path) -> None:
    home = tmp_path / "models"
    home.mkdir()
    (home / "GPEN-BFR-256.pth").symlink_to(gen256)
    (home / "detection_mobilenet0.25_Final.pth").symlink_to(shared_path("weights", "detection_mobilenet0.25_Final.pth"))
    code = f"""
import sys
from gpen_core.options import RestoreOptions
from gpen_core.restorer import Restorer
res = Restorer(models_dir=sys.argv[1])(sys.argv[2], RestoreOptions(mode="low"))
assert res.backend == "torch" and res.faces, (res.backend, res.notes)
print("imported:", " ".join(m for m in {UNUSED!r} if m in sys.modules) or "-")
"""
    # auto on torch for every network (no speed record, the per-CPU-kind defaults off)
    assert _run(code, str(home), str(EXAMPLE), env={"GPEN_OPENVINO_DEFAULTS": "0", "GPEN_OFFLINE": "1"}) == "imported: -"
