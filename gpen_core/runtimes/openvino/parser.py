"""GPEN's ParseNet on OpenVINO, :class:`~gpen_core.networks.parsenet.FaceParser`'s recipe with a static 1×S×S×3
input (the logits brought to 512×512 in the graph), converted once per input size. Standard library only at import.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpen_core.progress import Progress
from gpen_core.runtimes.openvino.base import (CacheKey, CompiledNet, Precision, cache_key, choose_precision,
                                              convert_traced, save_conversion, synthetic_file)
from gpen_core.runtimes.openvino.choice import SpeedRun, time_interleaved, torch_threads

if TYPE_CHECKING:
    import numpy as np

PARSE_SIZE = 512  # labels are always 512×512, as gpen_core.networks.parsenet.PARSE_SIZE (the official FaceParse.size)

# RAM a first-use conversion adds to the process, per input size: measured 2026-12-03 on the AMX Xeon.
CONVERT_RAM_MEASURED: dict[int, int] = {512: 762 * 2**20, 256: 704 * 2**20}


def parse_key(weights: Path, input_size: int, precision: Precision, sha256: str | None = None) -> CacheKey:
    """The cache key of ``weights`` converted for an S×S input (the IR's shape is static)."""
    return cache_key(weights, precision, sha256, f"parsenet-{weights.stem[:32]}-{int(input_size)}px")


def synthetic_weights(models_dir: str | os.PathLike[str] | None = None) -> Path:
    """A seeded random ParseNet of the released architecture, written once (for timing without the weights)."""
    def state_dict() -> dict[str, Any]:
        import torch

        from gpen_core.networks.parsenet import RELEASED_CONFIG, ParseNet

        torch.manual_seed(0)
        return ParseNet(**RELEASED_CONFIG).state_dict()

    return synthetic_file(models_dir, "random-parsenet.pth", state_dict)


def convert(weights: str | os.PathLike[str], input_size: int, *, models_dir: str | os.PathLike[str] | None = None,
            config: Mapping[str, Any] | None = None, progress: Progress | None = None,
            sha256: str | None = None) -> float:
    """Convert ParseNet weights (``config``: default the released network) to IR for an S×S input in the cache;
    its seconds."""
    import torch
    from torch.nn import functional as F

    from gpen_core.networks.parsenet import build, load_state_dict

    t0 = time.perf_counter()
    say = progress or (lambda f, m: None)
    path, s = Path(weights), int(input_size)
    say(0.0, f"OpenVINO: converting {path.name} for {s} px parsing (first use on this machine; cached afterwards)")
    net = build(load_state_dict(path), config, source=str(path))

    class Exportable(torch.nn.Module):
        """NHWC float input (the official [-1, 1] values) → 1×C×512×512 float logits."""

        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.net.parse(x.permute(0, 3, 1, 2))
            if s != PARSE_SIZE:  # as FaceParser.logits(out_size=512): bilinear, half-pixel centres
                y = F.interpolate(y, size=(PARSE_SIZE, PARSE_SIZE), mode="bilinear", align_corners=False)
            return y

    ov_model = convert_traced(Exportable().eval(), torch.zeros(1, s, s, 3))
    del net
    meta = {"weights": str(path), "input_size": s}
    return save_conversion(ov_model, parse_key(path, s, "f32", sha256), models_dir, meta, t0, say)


class OVParser(CompiledNet):
    """A compiled ParseNet with FaceParser's contract: ``labels(face)``, RGB uint8 H×W×3 → int64 512×512 labels."""

    device = "cpu"

    def __init__(self, compiled: Any, meta: dict[str, Any], key: CacheKey, *, load_s: float,
                 convert_s: float | None) -> None:
        import numpy as np

        super().__init__(compiled, meta, key, load_s=load_s, convert_s=convert_s)
        self.input_size = int(meta["input_size"])
        # The official img2tensor (x / 255 * 2 - 1 in float64, then float32), bit for bit (see parsenet._INPUT_LUT).
        self._lut = (np.arange(256, dtype=np.float64) / 255.0 * 2 - 1).astype(np.float32)

    def _run(self, face_rgb: np.ndarray, reduce: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        import cv2

        from gpen_core.rgb import check_rgb

        check_rgb(face_rgb, "the face to parse")
        s = self.input_size
        x = face_rgb
        if x.shape[:2] != (s, s):
            x = cv2.resize(x, (s, s), interpolation=cv2.INTER_LINEAR)  # official: cv2.resize default
        return self.infer([self._lut[x][None]], lambda r: reduce(r.get_output_tensor(0).data))

    def logits(self, face_rgb: np.ndarray) -> np.ndarray:
        """1×C×512×512 float32 logits (a copy)."""
        return self._run(face_rgb, lambda y: y.astype("float32", copy=True))

    def labels(self, face_rgb: np.ndarray) -> np.ndarray:
        """int64 512×512 class labels (0..18, GPEN's CelebAMask-HQ order)."""
        return self._run(face_rgb, lambda y: y[0].argmax(axis=0))


def load(weights: str | os.PathLike[str], input_size: int, precision: Precision = "f32", *,
         models_dir: str | os.PathLike[str] | None = None, config: Mapping[str, Any] | None = None,
         progress: Progress | None = None, threads: int | None = None) -> OVParser:
    """The compiled parser for ``weights`` at an S×S input, from the cache or converted now; raises as
    :meth:`~gpen_core.runtimes.openvino.base.CompiledNet.open`."""
    path = Path(weights)
    key = parse_key(path, input_size, precision)
    return OVParser.open(key, models_dir, threads, lambda: convert(
        path, input_size, models_dir=models_dir, config=config, progress=progress, sha256=key.weights_sha256))


def measure_speed(input_size: int, dtype: str, *, load_as: Callable[[str], Any],
                  weights: str | os.PathLike[str] | None = None, models_dir: str | os.PathLike[str] | None = None,
                  how: SpeedRun, progress: Progress | None = None) -> dict[str, Any]:
    """Time torch's and OpenVINO's parser (``load_as(runtime)``, as a request loads them) for one (S, dtype) on a
    face-like image and record the medians for ``auto``; the row. ``weights``: None for :func:`synthetic_weights`."""
    import numpy as np

    from gpen_core.runtimes.openvino import generator as ov_backend

    runs = how.runs
    say = progress or (lambda f, m: None)
    path = Path(weights) if weights is not None else synthetic_weights(models_dir)
    precision, note = choose_precision(dtype)
    with torch_threads(how.threads):
        say(0.0, f"parser: {input_size} px {dtype}, torch and OpenVINO {precision}")
        tp, op = load_as("torch"), load_as("openvino")
        yy, xx = np.mgrid[0:512, 0:512] / 511.0
        face = (np.stack([xx, yy, 0.5 + 0.3 * np.sin(12 * xx * yy)], -1).clip(0, 1) * 255).astype(np.uint8)
        calls = {"torch": lambda: tp.labels(face), "openvino": lambda: op.labels(face)}
        timed = time_interleaved(calls, runs, lambda r: say(
            0.7 + 0.3 * r / runs, f"parser: timed call {r + 1} of {runs} (torch and OpenVINO, interleaved)"))
    row: dict[str, Any] = {"size": int(input_size), "dtype": dtype, "precision": precision, "note": note, "weights": str(path),
                           "convert_s": None if op.convert_s is None else round(op.convert_s, 2), **timed}
    row["speed_file"] = str(ov_backend.record_speed(input_size, dtype, row["torch_s"], row["openvino_s"],
                                                    models_dir=models_dir, source=how.source, network="parsenet"))
    return row


def check_pairs(uses: Iterable[tuple[int, str]], models_dir: str | os.PathLike[str] | None, names: Sequence[str]) -> list[dict[str, Any]]:
    """The hardware check's parser pairs for the (input size, dtype) ``uses`` of its modes, with the first of
    ``names`` in the models folder (None: :func:`synthetic_weights`)."""
    from gpen_core.weights.lookup import locate

    found = next((p for p in (locate(n, models_dir=models_dir) for n in names) if p is not None), None)
    return [{"size": int(s), "dtype": d, "weights": None if found is None else str(found)} for s, d in sorted(set(uses))]


def check_row(pair: Mapping[str, Any], models_dir: str | os.PathLike[str], threads: int | None, runs: int, say: Progress,
              load_as: Callable[[str], Any]) -> dict[str, Any]:
    """One parser pair measured and recorded for the hardware check (an error is a row, not a raise)."""
    how = "real weights" if pair["weights"] else "random weights of the released network (time does not depend on the values)"
    try:
        return measure_speed(pair["size"], pair["dtype"], weights=pair["weights"], models_dir=models_dir,
                             how=SpeedRun(runs, threads, f"hardware check: ParseNet, {how}"), progress=say,
                             load_as=load_as)
    except Exception as exc:  # one pair failing must not cost the others
        return {"size": pair["size"], "dtype": pair["dtype"], "error": f"{type(exc).__name__}: {exc}"}
