"""The Space install, as Hugging Face Spaces do it: a fresh venv, a plain `pip install -r
requirements.txt`, then the app imported and one photo restored.

Marked ``install``: not in the default test command (pytest.ini); run it with
``bash scripts/test.sh -m install``. The venv (PyTorch's CUDA build: ~6.5 GB) is made fresh whenever
requirements.txt changes and kept, keyed by the file's hash, under
~/.cache/gpen-space-venv/ (older ones are deleted): the first run on a machine took
24 min on 2 busy cores, later runs re-run the same `pip install -r` (a no-op when
satisfied), `pip check`, the restore and the OpenCV check in about a minute.
GPEN_SPACE_FRESH=1 forces a new venv; GPEN_SPACE_VENV=DIR puts it elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.install]

OPENCV_DISTRIBUTIONS = ("opencv-python", "opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless")
EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"

RESTORE = r"""
import importlib.metadata as md, json, sys
import app
class NoProgress:
    def __call__(self, *a, **k): pass
pair, download, panel, faces, record = app.restore(sys.argv[1], "low", "default", "default", 1.0, 0.9, 50, False, progress=NoProgress())
cv = sorted(d for d in {x.metadata["Name"].lower() for x in md.distributions()} if d.startswith("opencv"))
import cv2
print(json.dumps({"mode": record["mode"], "faces": record["faces"], "download": download, "opencv": cv, "cv2": cv2.__version__}))
"""


def _base_python() -> str:
    """The interpreter the project's venv was made from (a venv's own python would nest)."""
    candidate = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(candidate if candidate.exists() else Path(sys.base_prefix) / "bin" / "python3")


def test_plain_pip_install_of_requirements_runs_the_app_with_one_opencv(low_mode_home: Path) -> None:
    stamp = hashlib.sha256((ROOT / "requirements.txt").read_bytes()).hexdigest()[:16]
    parent = Path(os.environ.get("GPEN_SPACE_VENV") or Path.home() / ".cache" / "gpen-space-venv")
    venv = parent / stamp
    for old in parent.glob("*") if parent.is_dir() else ():
        if old != venv:
            shutil.rmtree(old, ignore_errors=True)  # a venv for requirements that changed since
    fresh = os.environ.get("GPEN_SPACE_FRESH") == "1" or not (venv / ".installed").exists()
    py = venv / "bin" / "python"
    t0 = time.monotonic()
    if fresh:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True, timeout=300)
    # Exactly what a Space runs: no --no-deps, no constraints, no second step.
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements.txt")],
                             cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    (venv / ".installed").touch()
    installed_s = time.monotonic() - t0
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr

    env = dict(os.environ, GPEN_HOME=str(low_mode_home), GPEN_OFFLINE="1", PYTHONPATH="")
    run = subprocess.run([str(py), "-c", RESTORE, str(EXAMPLE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["mode"] == "low" and out["faces"] >= 1 and Path(out["download"]).stat().st_size > 1000
    opencv = [d for d in out["opencv"] if d in OPENCV_DISTRIBUTIONS]
    assert opencv == ["opencv-python"], f"OpenCV distributions installed: {out['opencv']} (exactly one allowed)"
    print(f"space install ({'fresh venv' if fresh else 'kept venv'}): pip install took {installed_s:.0f} s; restore ok ({out})")

    # The project's own venv has PyTorch's CPU build and no torchvision on a machine without a
    # GPU (scripts/setup.sh), so there the stand-ins' comparisons with torchvision skip. This venv
    # has the real torchvision of requirements.txt: run them here, none may skip.
    pytest_pin = next(line.strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines() if line.startswith("pytest=="))
    subprocess.run([str(py), "-m", "pip", "install", "-q", pytest_pin], check=True, capture_output=True, timeout=600)
    shim = subprocess.run([str(py), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_tv_shim.py"],
                          cwd=ROOT, env=dict(env, GPEN_HOME=str(low_mode_home)), capture_output=True, text=True, timeout=1800)
    assert shim.returncode == 0, shim.stdout[-3000:] + shim.stderr[-3000:]
    assert "skipped" not in shim.stdout.splitlines()[-1], shim.stdout[-3000:]
