"""dlib's face descriptor (ResNet, 128-D), found in the ``face-recognition-models`` package, checked, loaded once.

Optional (``requirements-identity.txt``); nothing is imported or read until the first face is measured, and
each file is checked by size and sha256 against the 0.3.0 package first. Only :data:`LOADED` are ever opened:
the package also carries a 68-point landmark model under a non-commercial licence.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np

from gpen_core.errors import WeightsError

PIP_COMMAND = "pip install -r requirements-identity.txt  (dlib-bin==20.0.1.post1 face-recognition-models==0.3.0)"
DESCRIPTOR_FILE = "dlib_face_recognition_resnet_model_v1.dat"
LANDMARKS_FILE = "shape_predictor_5_face_landmarks.dat"  # public domain (dlib's own 5-point data)
LOADED = (DESCRIPTOR_FILE, LANDMARKS_FILE)
# The files of face-recognition-models 0.3.0 (bytes, sha256), as measured from its PyPI sdist.
# Only LOADED are opened; the others are listed so a reader sees what the package holds.
PACKAGE_FILES: dict[str, tuple[int, str]] = {
    DESCRIPTOR_FILE: (22466066, "55533b28a95800a551ba546ba62fe69625c7e95a7061c338adffead08719da30"),
    LANDMARKS_FILE: (9150489, "c4b1e9804792707d3a405c2c16a80a20269e6675021f64a41d30fffafbc41888"),
    # Non-commercial licence (iBUG 300-W): never loaded.
    "shape_predictor_68_face_landmarks.dat": (99693937, "fbdc2cb80eb9aa7a758672cbfdda32ba6300efe9b6e6c7a299ff7e736b11b92f"),
    "mmod_human_face_detector.dat": (729940, "4cb19393e2fbaf2b1609a9319ad5386618c886a6234ec1b971f3e87c85d87fe6"),
}

_lock = threading.Lock()
_model: Any = None


def _spec(name: str) -> Any:
    """The import system's spec of an installed top-level package, or None (imports nothing)."""
    return importlib.util.find_spec(name)


def available() -> bool:
    """Whether both packages are installed (imports neither)."""
    return _spec("dlib") is not None and _spec("face_recognition_models") is not None


def descriptor_path(name: str = DESCRIPTOR_FILE) -> Path:
    """A model file (default: the descriptor) inside the installed package. The package itself is never imported
    (its ``__init__`` imports ``pkg_resources``); its folder is found by the import system."""
    spec = _spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(f"the identity check needs the face-recognition-models package: {PIP_COMMAND}, "
                           "or turn the identity check off")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / name


def check_file(path: Path, name: str = DESCRIPTOR_FILE) -> None:
    """Raise :class:`WeightsError` naming the pip command unless ``path`` has the recorded size and sha256."""
    size, sha256 = PACKAGE_FILES[name]
    if not path.is_file():
        raise WeightsError(f"the identity model {path} is missing: {PIP_COMMAND}")
    got = path.stat().st_size
    if got != size:
        raise WeightsError(f"the identity model {path} is {got} bytes, not {size}: reinstall it ({PIP_COMMAND})")
    from gpen_core.weights.checksums import file_sha256

    if file_sha256(path) != sha256:
        raise WeightsError(f"the identity model {path} does not match face-recognition-models 0.3.0 (sha256): "
                           f"reinstall it ({PIP_COMMAND})")


def model() -> Any:
    """(dlib's ``face_recognition_model_v1``, its 5-point ``shape_predictor``), loaded once per
    process after both files are checked."""
    global _model
    with _lock:
        if _model is None:
            if _spec("dlib") is None:
                raise WeightsError(f"the identity check needs dlib: {PIP_COMMAND}, or turn the identity check off")
            paths = [descriptor_path(name) for name in LOADED]
            for name, path in zip(LOADED, paths):
                check_file(path, name)
            import dlib

            _model = (dlib.face_recognition_model_v1(str(paths[0])), dlib.shape_predictor(str(paths[1])))
        return _model


def release() -> bool:
    """Let the models go (a request that does not check identity, e.g. ``low`` after ``balanced``:
    a lighter mode keeps to a fresh process's size). True when they were loaded."""
    global _model
    with _lock:
        held, _model = _model is not None, None
    if held:
        import gc

        from gpen_core.platform.oom import malloc_trim

        gc.collect()
        malloc_trim()
    return held


def chips(crop: np.ndarray, others: list[np.ndarray], rect: tuple[int, int, int, int]) -> list[np.ndarray]:
    """dlib's 150×150 chips (``get_face_chip``, padding 0.25) of ``crop`` and of each of ``others``
    (same size), all cut by the one transform dlib's 5 landmarks find on ``crop`` inside ``rect``
    (left, top, right, bottom px). RGB uint8 in and out."""
    import dlib

    _, predictor = model()
    with _lock:
        shape = predictor(np.ascontiguousarray(crop), dlib.rectangle(*rect))
        details = dlib.get_face_chip_details(shape, 150, 0.25)
        return [np.asarray(dlib.extract_image_chip(np.ascontiguousarray(c), details)) for c in (crop, *others)]


def descriptors(face_chips: list[np.ndarray]) -> np.ndarray:
    """128-D descriptors (N×128 float64) of RGB uint8 150×150×3 chips, one batch, one at a time
    per process (dlib's network holds its buffers between calls)."""
    net, _ = model()
    with _lock:
        out = net.compute_face_descriptor([np.ascontiguousarray(c) for c in face_chips])
    return np.array([np.array(d, dtype=np.float64) for d in out])
