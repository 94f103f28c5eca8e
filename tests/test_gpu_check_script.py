"""scripts/gpu_check.sh as a lent GPU machine runs it: the machine's own Python, no registry, and
facexlib only from the carried wheel. Here (no CUDA) it must import everything the check needs
and then stop with exit 2 and "no CUDA device"."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "wheels" / "gpu"
# Installed here, absent from the lent machine's image: hidden from the test's interpreter.
NOT_ON_THE_IMAGE = ("facexlib", "gradio", "openvino", "modelscope", "filterpy", "numba", "llvmlite", "matplotlib", "ray")


def _hidden(entry: str) -> bool:
    base = entry.lower().replace("-", "_")
    return any(base == n or base.startswith(n + "_") or base.startswith(n + ".") or base.startswith(n + "-") for n in NOT_ON_THE_IMAGE)


@pytest.fixture(scope="module")
def image_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python like the lent image's: this venv's packages minus those the image lacks."""
    return _stand_in(tmp_path_factory.mktemp("gpu-image"), _hidden)


def _stand_in(tmp: Path, hidden) -> Path:
    """A venv seeing this venv's packages except those ``hidden(entry name)`` picks."""
    farm = tmp / "site"
    farm.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not hidden(entry.name) and not entry.name.endswith(".pth"):
            (farm / entry.name).symlink_to(entry)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "gpu_image.pth").write_text(str(farm) + "\n")
    return py


def test_the_image_stand_in_really_lacks_facexlib(image_python: Path) -> None:
    p = subprocess.run([str(image_python), "-c", "import torch, cv2, numpy, psutil; import facexlib"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONNOUSERSITE="1"))
    assert p.returncode != 0 and "No module named 'facexlib'" in p.stderr


@pytest.mark.skipif(not any(WHEELS.glob("facexlib-*.whl")), reason="no facexlib wheel in wheels/gpu/: run `bash scripts/gpu_check.sh --fetch-wheels` (scripts/setup.sh --dev does)")
def test_gpu_check_sh_imports_from_the_carried_wheel_and_exits_2_without_cuda(image_python: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPEN_HOME")}
    env.update(GPU_CHECK_PYTHON=str(image_python), OUT=str(out), CUDA_VISIBLE_DEVICES="", TMPDIR=str(tmp_path))
    p = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    text = p.stdout + p.stderr
    assert p.returncode == 2, text[-3000:]
    assert "no CUDA device" in text
    # Everything the check needs was imported first, facexlib from the unpacked wheel.
    line = next((x for x in text.splitlines() if x.startswith("gpu_check: imported facexlib ")), None)
    assert line is not None, text[-3000:]
    assert "0.3.0" in line and f"{tmp_path}/gpen-gpu-wheels." in line
    for name in ("torch", "cv2", "numpy", "psutil"):
        assert f"gpu_check: imported {name} " in text
    assert (out / "gpu_check.log").is_file() and "no CUDA device" in (out / "gpu_check.log").read_text()
    assert not (out / "gpu_check.json").exists()  # nothing measured, nothing written
    assert not list(tmp_path.glob("gpen-gpu-*"))  # its temporary folders are gone


def test_gpu_check_sh_says_how_to_get_a_missing_wheel(tmp_path: Path) -> None:
    """Run from a copy of the script whose wheels folder is empty: exit 3 with the command to run."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "gpu_check.sh").write_text((ROOT / "scripts" / "gpu_check.sh").read_text())
    (tmp_path / "requirements.txt").write_text((ROOT / "requirements.txt").read_text())
    p = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, OUT=str(tmp_path / "out")), timeout=60)
    assert p.returncode == 3
    assert "no facexlib 0.3.0 wheel" in p.stderr and "--fetch-wheels" in p.stderr


def test_gpu_check_sh_names_a_missing_module_and_exits_3(tmp_path: Path) -> None:
    """An interpreter without OpenCV and torch: the module and its package are named, exit 3, no traceback."""
    lacking = ("cv2", "opencv", "torch")
    (tmp_path / "py").mkdir()
    py = _stand_in(tmp_path / "py", lambda e: _hidden(e) or any(e.lower().startswith(n) for n in lacking))
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    (tree / "scripts" / "gpu_check.sh").write_text((ROOT / "scripts" / "gpu_check.sh").read_text())
    (tree / "requirements.txt").write_text((ROOT / "requirements.txt").read_text())
    for d in ("benchmarks", "gpen_core"):
        (tree / d).symlink_to(ROOT / d)
    (tree / "wheels" / "gpu").mkdir(parents=True)  # the carried wheel, present (its contents never imported here)
    import zipfile

    with zipfile.ZipFile(tree / "wheels" / "gpu" / "facexlib-0.3.0-py3-none-any.whl", "w") as z:
        z.writestr("facexlib/__init__.py", "")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPEN_HOME")}
    env.update(GPU_CHECK_PYTHON=str(py), OUT=str(tmp_path / "out"), TMPDIR=str(tmp_path))
    p = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=tree, capture_output=True, text=True, env=env, timeout=300)
    text = p.stdout + p.stderr
    assert p.returncode == 3, text[-3000:]
    assert "no module 'cv2' (package opencv-python-headless)" in text and "GPU_CHECK_PYTHON" in text, text[-3000:]
    assert "Traceback" not in text and "ModuleNotFoundError" not in text, text[-3000:]


def test_gpu_check_sh_names_a_missing_interpreter(tmp_path: Path) -> None:
    p = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, GPU_CHECK_PYTHON=str(tmp_path / "no-python"), OUT=str(tmp_path / "out")))
    assert p.returncode == 3 and "no Python interpreter" in p.stderr, p.stderr
