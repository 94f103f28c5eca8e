"""Face detection: facexlib's RetinaFace from a local, verified file. RGB uint8 H×W×3 in; BGR only on the way into
RetinaFace. facexlib and torch are imported when a detector is built."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import cv2
import numpy as np

from gpen_core.errors import GPENError, WeightsError
from gpen_core.faces.screen import CV2_TURN, Filtered, filter_detections, unturn
from gpen_core.rgb import check_rgb

if TYPE_CHECKING:
    import torch

DetectorName = Literal["mobilenet0.25", "resnet50"]
Resize = Literal["area", "linear"]
_RESIZE = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR}
# Our names → facexlib's RetinaFace(network_name=...).
_FACEXLIB_NETWORK = {"mobilenet0.25": "mobile0.25", "resnet50": "resnet50"}

# Two mobilenet0.25 RetinaFaces share keys and shapes: Pytorch_Retinaface (LeakyReLU 0.1, anchors 16..512;
# facexlib's) and Face-Detector-1MB (ReLU, anchors 10..256). 1MB weights under facexlib's settings give boxes
# twice the face and phantom faces, so the file decides the variant (_trained_with_relu).
_MOBILENET_1MB_MIN_SIZES = [[10, 20], [32, 64], [128, 256]]


@dataclass(frozen=True, eq=False)
class Detection:
    """One detected face, in input-image pixels."""

    box: tuple[float, float, float, float]  # (x0, y0, x1, y1), clipped to the image
    score: float
    # (5, 2) float32 (x, y), read-only: left eye, right eye, nose tip, left and right mouth corner
    # ("left" as seen on the face: on a turned photo they follow the face).
    landmarks: np.ndarray
    # The box as the detector gave it (None: ``box``); the official small-face smoothing decides on it.
    unclipped: tuple[float, float, float, float] | None = None
    turn: int = 0  # quarter turns (counter-clockwise) of the detection copy the face was found on

    @property
    def full_box(self) -> tuple[float, float, float, float]:
        return self.unclipped if self.unclipped is not None else self.box

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


def import_backends() -> None:
    """Import torch and facexlib now (a one-time process cost, kept out of per-request peaks), facexlib with the
    torchvision stand-ins (:mod:`gpen_core.compat.torchvision`)."""
    import torch  # noqa: F401

    from gpen_core.compat import torchvision as tv_shim

    try:
        with tv_shim.for_facexlib():
            import facexlib.detection.retinaface  # noqa: F401
    except ImportError:  # FaceDetector reports it with the fix when a detector is built
        pass


def load_state_dict(path: Path, what: str) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` on CPU, ``state_dict`` unwrapped, DataParallel's ``module.`` stripped."""
    from gpen_core.networks.checkpoint import read_network_weights

    # Out of memory is OutOfMemory (the ladder steps down), not "re-download"; corrupt only when the bytes are.
    return read_network_weights(path, what, missing=f"{what} weights not found at {path}. Download or resolve them "
                                "first (gpen_core.weights.lookup).")


def _trained_with_relu(sd: Mapping[str, Any]) -> bool:
    """True for a backbone trained with plain ReLU (1MB): a dead ReLU channel leaves the next BatchNorm's running
    mean and variance at ~0; under LeakyReLU(0.1) a dead channel is a constant negative: variance ~0, mean not."""
    for key, var in sd.items():
        if not (key.startswith("body.") and key.endswith(".running_var")):
            continue
        mean = sd.get(key[: -len("running_var")] + "running_mean")
        if mean is not None and bool(((var.abs() < 1e-20) & (mean.abs() < 1e-20)).any()):
            return True
    return False


def build_retinaface(weights_path: Path | None, network: DetectorName, device: str | torch.device = "cpu") -> tuple[Any, str]:
    """(facexlib's RetinaFace in eval, channels-last; its variant "pytorch_retinaface" or "1mb") for
    ``weights_path`` (None: random weights, a zeroed class head)."""
    import torch

    if network not in _FACEXLIB_NETWORK:
        raise ValueError(f"network must be one of {sorted(_FACEXLIB_NETWORK)}, got {network!r}")
    from gpen_core.compat import torchvision as tv_shim

    try:
        with tv_shim.for_facexlib():
            from facexlib.detection.retinaface import RetinaFace
    except ImportError as exc:
        raise GPENError(f"facexlib is not installed or broken ({exc}). Run `bash scripts/setup.sh`, or "
                        "`pip install --no-deps facexlib==0.3.0` in this environment.") from None

    device = torch.device(device)
    with warnings.catch_warnings():
        # facexlib passes torchvision's deprecated ``pretrained=False``: it downloads nothing.
        warnings.simplefilter("ignore", UserWarning)
        with tv_shim.for_facexlib():  # resnet50 is imported from torchvision when built
            net = RetinaFace(network_name=_FACEXLIB_NETWORK[network], half=False, phase="test", device=device)
    if weights_path is None:
        with torch.no_grad():
            for head in net.ClassHead:  # logits 0 → score 0.5, under any threshold we accept
                for p in head.parameters():
                    p.zero_()
        sd: dict[str, Any] = {}
    else:
        from gpen_core.networks.checkpoint import state_dict_problems

        sd = load_state_dict(Path(weights_path), f"RetinaFace {network}")
        if problems := state_dict_problems(net, sd):  # named key by key, not torch's first lines
            raise WeightsError(f"{weights_path} is not RetinaFace {network} weights: {problems}. "
                               "Check that the file matches the chosen network.")
        net.load_state_dict(sd, strict=True)
    variant = "pytorch_retinaface"
    if network == "mobilenet0.25" and sd and _trained_with_relu(sd):
        variant = "1mb"
        for module in net.modules():
            if isinstance(module, torch.nn.LeakyReLU):
                module.negative_slope = 0.0  # LeakyReLU(0) is ReLU
        net.cfg = {**net.cfg, "min_sizes": _MOBILENET_1MB_MIN_SIZES}  # read by PriorBox at each call
    # Channels-last weights make every convolution run NHWC (facexlib's NCHW input is
    # converted once by the first conv): 1.4-1.5x for ResNet-50 at 1000 px on the CPU.
    return net.to(device, memory_format=torch.channels_last).eval(), variant


class FaceDetector:
    """RetinaFace from a local, verified weights file. Shareable: the network call holds a lock (facexlib keeps
    per-call state on the module). ``weights_path=None``: random weights (the hardware check). ``runner``: the
    network on OpenVINO (engine.network_loads.openvino_detector; this room imports no runtime)."""

    def __init__(self, weights_path: Path | None, network: DetectorName, device: str | torch.device = "cpu", *,
                 runner: Any = None) -> None:
        import torch

        if network not in _FACEXLIB_NETWORK:
            raise ValueError(f"network must be one of {sorted(_FACEXLIB_NETWORK)}, got {network!r}")
        self.network: DetectorName = network
        self.device = torch.device(device)
        self.weights_path = Path(weights_path) if weights_path is not None else None
        self.backend: Literal["torch", "openvino"] = "torch" if runner is None else "openvino"
        self._ov: Any = runner
        self.convert_s: float | None = None  # seconds of a first-use conversion (else None)
        self.load_s: float | None = None  # OpenVINO: reading and compiling it (or importing its cached blob)
        if runner is not None:
            if self.device.type != "cpu":
                raise ValueError(f"the OpenVINO detector runs on the CPU only, not {self.device}; build it on torch")
            self.variant, self.convert_s, self.load_s = runner.variant, runner.convert_s, runner.load_s
            self._detect_faces = runner.detect_faces  # the same post-processing on OpenVINO's outputs
        else:
            net, self.variant = build_retinaface(self.weights_path, network, self.device)
            self._detect_faces = partial(net.detect_faces, use_origin_size=True)
        self._lock = threading.Lock()

    def detect(self, rgb: np.ndarray, *, threshold: float = 0.9, max_side: int = 1000, shrink_above: int | None = None,
               interpolation: Resize = "area", turn: int = 0) -> list[Detection]:
        """Faces in an RGB uint8 H×W×3 image, highest score first (as official), in its pixels. ``max_side``: on a
        copy at most this long, made only for images longer than ``shrink_above`` (official: 1000 px above 1500 px,
        "linear"; None: ``max_side``). ``turn``: on the copy turned that many quarter turns counter-clockwise."""
        rgb = check_rgb(rgb)
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {threshold}")
        if max_side < 16:
            raise ValueError(f"max_side must be at least 16 px, got {max_side}")
        if turn not in (0, 1, 2, 3) or interpolation not in _RESIZE:
            raise ValueError(f"turn must be 0-3 and interpolation one of {sorted(_RESIZE)}, got {turn}, {interpolation!r}")
        h, w = rgb.shape[:2]
        small = rgb
        if max(h, w) > max(max_side, shrink_above or 0):
            s = max_side / max(h, w)
            new_w, new_h = max(1, round(w * s)), max(1, round(h * s))
            small = cv2.resize(rgb, (new_w, new_h), interpolation=_RESIZE[interpolation])
        sh, sw = small.shape[:2]
        fx, fy = w / sw, h / sh
        if turn:
            small = cv2.rotate(small, CV2_TURN[turn])
        # facexlib's detect_faces takes OpenCV's BGR (it subtracts BGR means 104/117/123),
        # any dtype (it casts to float32), and with use_origin_size=True does not resize.
        rows = self.detect_rows(cv2.cvtColor(small, cv2.COLOR_RGB2BGR), threshold)

        found: list[Detection] = []
        for row in rows:
            corners = unturn(row[0:4].reshape(2, 2), turn, sw, sh) * (fx, fy)
            ux0, uy0 = corners.min(axis=0)
            ux1, uy1 = corners.max(axis=0)
            x0, x1 = np.clip((ux0, ux1), 0, w)
            y0, y1 = np.clip((uy0, uy1), 0, h)
            if x1 - x0 < 1 or y1 - y0 < 1:
                continue
            lm = unturn(row[5:15].reshape(5, 2), turn, sw, sh) * (fx, fy)
            lm = lm.astype(np.float32)
            lm.setflags(write=False)
            unclipped = (float(ux0), float(uy0), float(ux1), float(uy1))
            found.append(Detection((float(x0), float(y0), float(x1), float(y1)), float(row[4]), lm, unclipped, turn))
        found.sort(key=lambda d: d.score, reverse=True)  # stable: ties keep the detector's order
        return found

    def detect_rows(self, bgr: np.ndarray, threshold: float = 0.9) -> np.ndarray:
        """N×15 float64 rows (x0 y0 x1 y1 score, 5×(x, y)) after NMS for a BGR uint8 image at its size (the network
        call, which the hardware check times)."""
        import torch

        with self._lock, torch.inference_mode():
            rows = self._detect_faces(bgr, conf_threshold=threshold, nms_threshold=0.4)
        return np.asarray(rows, dtype=np.float64).reshape(-1, 15)

    def screen(self, rgb: np.ndarray, detections: list[Detection], *, threshold: float = 0.9) -> Filtered:
        """``detections`` split into faces and false faces: the geometry and the second look at ``threshold``."""
        def look(crop: np.ndarray) -> list[Detection]:
            return self.detect(crop, threshold=threshold, max_side=max(crop.shape[:2]))

        return filter_detections(detections, rgb=check_rgb(rgb), detect=look, threshold=threshold)
