"""facexlib's RetinaFace on OpenVINO: H and W dynamic (a compile per shape costs more than a forward), float32 only
(boxes must not move); detection is facexlib's own post-processing. Standard library only at import.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpen_core.runtimes.openvino.base import (CacheKey, CompiledNet, cache_key, convert_traced, drop_mapped_pages,
                                              save_conversion, synthetic_file)
from gpen_core.runtimes.openvino.choice import SpeedRun, time_interleaved, torch_threads

if TYPE_CHECKING:
    import numpy as np

# weights path (None: random weights) → (facexlib RetinaFace, eval, variant); see detect.build_retinaface.
BuildNet = Callable[[Path | None], tuple[Any, str]]
# "torch" / "openvino" → the detector on that runtime as a request loads it (detect_rows, convert_s, load_s).
LoadAs = Callable[[str], Any]

DETECT_SIDE = 1000  # the longest side ``auto``'s measurement is taken at (the modes' detect_side)
_EXAMPLE_SIDE = 128  # tracing example: the IR's H and W are dynamic, a small trace converts 4x faster
_CFG_KEYS = ("min_sizes", "steps", "variance", "clip")  # what PriorBox and decode read from net.cfg
_BGR_MEAN = (104.0, 117.0, 123.0)  # facexlib's mean_tensor


def _facexlib_post() -> Any:  # facexlib's PriorBox, decode, decode_landm, py_cpu_nms (without torchvision)
    from gpen_core.compat import torchvision as tv_shim

    with tv_shim.for_facexlib():
        from facexlib.detection import retinaface_utils
    return retinaface_utils


# RAM a first-use conversion adds to the process: measured 2026-12-03 on the AMX Xeon.
CONVERT_RAM_MEASURED: dict[str, int] = {"resnet50": 452 * 2**20, "mobilenet0.25": 150 * 2**20}


def detector_key(weights: Path, network: str) -> CacheKey:  # float32 IR of ``network`` with ``weights``
    return cache_key(weights, "f32", name=f"retinaface-{network}-{weights.stem[:40]}")


class OVRetinaFace(CompiledNet):
    """A compiled RetinaFace."""

    def __init__(self, compiled: Any, meta: dict[str, Any], key: CacheKey, *, load_s: float,
                 convert_s: float | None) -> None:
        super().__init__(compiled, meta, key, load_s=load_s, convert_s=convert_s)
        self._priors: dict[tuple[int, int], Any] = {}  # (H, W) → facexlib's PriorBox output
        self.cfg: dict[str, Any] = meta["cfg"]  # facexlib's anchors and variances (the 1MB variant's own anchors)
        self.variant: str = meta["variant"]

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """1×3×H×W float32 (BGR minus facexlib's means) → (loc 1×A×4, conf 1×A×2 softmaxed, landmarks 1×A×10)."""
        import numpy as np

        if x.ndim != 4 or x.shape[:2] != (1, 3):
            raise ValueError(f"expected a 1×3×H×W input, got {tuple(x.shape)}")
        out = self.infer([np.ascontiguousarray(x, dtype=np.float32)],
                         lambda r: tuple(r.get_output_tensor(i).data.copy() for i in range(3)))
        if self.ir_dir is not None:
            drop_mapped_pages(self.ir_dir)
        return out

    def priors(self, h: int, w: int) -> Any:
        """facexlib's prior boxes for an H×W input (a pure-Python loop: ~50 ms at 1000 px, kept per size)."""
        hit = self._priors.get((h, w))
        if hit is None:  # FaceDetector serialises detect(); the last 8 sizes are kept
            hit = self._priors[(h, w)] = _facexlib_post().PriorBox(self.cfg, image_size=(h, w)).forward()
            while len(self._priors) > 8:
                self._priors.pop(next(iter(self._priors)))
        return hit

    def detect_faces(self, bgr: np.ndarray, *, conf_threshold: float, nms_threshold: float) -> np.ndarray:
        """facexlib's ``RetinaFace.detect_faces(bgr, ..., use_origin_size=True)`` with this forward:
        N×15 float32 rows (x0 y0 x1 y1 score, 5×(x, y)) in ``bgr``'s pixels, after NMS."""
        import numpy as np
        import torch

        post = _facexlib_post()
        x = bgr.astype(np.float32).transpose(2, 0, 1)[None] - np.asarray(_BGR_MEAN, np.float32).reshape(1, 3, 1, 1)
        h, w = x.shape[2:]
        loc, conf, landms = (torch.from_numpy(a) for a in self.forward(x))
        priors = self.priors(h, w)
        variance = self.cfg["variance"]
        # facexlib also divides by its resize factor, which is exactly 1 with use_origin_size.
        boxes = (post.decode(loc.squeeze(0), priors, variance) * torch.tensor([w, h, w, h], dtype=torch.float32)).numpy()
        scores = conf.squeeze(0).numpy()[:, 1]
        scale1 = torch.tensor([w, h] * 5, dtype=torch.float32)
        landmarks = (post.decode_landm(landms.squeeze(0), priors, variance) * scale1).numpy()
        inds = np.where(scores > conf_threshold)[0]
        inds = inds[scores[inds].argsort()[::-1]]  # facexlib's order, which NMS's ties follow
        bounding_boxes = np.hstack((boxes[inds], scores[inds, np.newaxis])).astype(np.float32, copy=False)
        keep = post.py_cpu_nms(bounding_boxes, nms_threshold)
        return np.concatenate((bounding_boxes[keep, :], landmarks[inds][keep]), axis=1)


def load(weights: Path | None, network: str, build: BuildNet, *, models_dir: str | os.PathLike[str] | None = None,
         threads: int | None = None) -> OVRetinaFace:
    """The compiled detector for ``weights`` (None: random, written once), from the cache or converted now from
    ``build``; raises as :meth:`~gpen_core.runtimes.openvino.base.CompiledNet.open`."""
    def random_weights() -> dict[str, Any]:
        return {k: v.contiguous() for k, v in build(None)[0].state_dict().items()}

    path = weights or synthetic_file(models_dir, f"random-retinaface-{network}.pth", random_weights)
    key = detector_key(Path(path), network)

    def convert_now() -> float:  # facexlib's RetinaFace (test phase) → IR in the cache; its seconds
        import openvino as ov
        import torch

        t0 = time.perf_counter()
        net, variant = build(Path(path))
        example = torch.zeros(1, 3, _EXAMPLE_SIDE, _EXAMPLE_SIDE)
        ov_model = convert_traced(net, example, ov.PartialShape([1, 3, -1, -1]))
        meta = {"network": key.name, "variant": variant, "cfg": {k: net.cfg[k] for k in _CFG_KEYS}}
        return save_conversion(ov_model, key, models_dir, meta, t0, lambda f, m: None)

    return OVRetinaFace.open(key, models_dir, threads, convert_now)


def measure_speed(network: str, load_as: LoadAs, *, models_dir: str | os.PathLike[str] | None = None,
                  how: SpeedRun) -> dict[str, Any]:
    """Seconds per detection at :data:`DETECT_SIDE` px, torch against OpenVINO, recorded for ``auto``."""
    import numpy as np

    from gpen_core.runtimes.openvino.generator import record_speed

    side, h = DETECT_SIDE, DETECT_SIDE * 3 // 4  # a BGR pattern: the time does not depend on the content
    yy, xx = np.mgrid[0:h, 0:side].astype(np.float32)
    img = np.stack([xx / side, yy / h, 0.5 + 0.3 * np.sin(xx * yy / 900.0)], axis=-1)
    bgr = np.ascontiguousarray((img * 255).clip(0, 255).astype(np.uint8))
    with torch_threads(how.threads):
        torch_det, ov_det = load_as("torch"), load_as("openvino")
        timed = time_interleaved({"torch": lambda: torch_det.detect_rows(bgr, 0.9),
                                  "openvino": lambda: ov_det.detect_rows(bgr, 0.9)}, how.runs)
    convert_s = None if ov_det.convert_s is None else round(ov_det.convert_s, 2)
    out: dict[str, Any] = {"network": f"retinaface-{network}", "size": DETECT_SIDE, "threads": how.threads,
                           "convert_s": convert_s, "load_s": round(ov_det.load_s, 2), **timed}
    out["speed_file"] = str(record_speed(DETECT_SIDE, "float32", out["torch_s"], out["openvino_s"],
                                         models_dir=models_dir, source=how.source, network=f"retinaface-{network}"))
    return out


def check_row(network: str, load_as: LoadAs, models_dir: Path, threads: int | None, runs: int,
              say: Callable[[float, str], None]) -> dict[str, Any]:
    """The hardware check's detector row (real weights when in ``models_dir``, else random); a failure is its
    ``error``."""
    from gpen_core.options import DETECTOR_WEIGHTS
    from gpen_core.weights.lookup import locate

    weights = locate(DETECTOR_WEIGHTS[network], models_dir=models_dir)  # type: ignore[index]
    kind = "synthetic" if weights is None else "real"
    row: dict[str, Any] = {"network": f"retinaface-{network}", "weights": kind, "runs": runs}
    say(0.0, f"backends: {network} detector at {DETECT_SIDE} px, torch and OpenVINO")
    try:
        row.update(measure_speed(network, load_as, models_dir=models_dir,
                                 how=SpeedRun(runs, threads, f"hardware check: RetinaFace {network}, {kind} weights")))
    except Exception as exc:  # one row failing must not cost the others
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row
