"""The faces' networks on OpenVINO: built here, handed to :mod:`gpen_core.faces` ready to run.

The faces room never imports a runtime (``.importlinter``); the engine, which sees both,
builds the OpenVINO network and passes it in as ``runner`` / ``parser``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpen_core.faces.detect import DetectorName, FaceDetector, build_retinaface
from gpen_core.faces.parse import ParsingMasker, choose_parse_dtype


def openvino_detector(
    weights_path: Path | None, network: DetectorName, *, models_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
) -> FaceDetector:
    """RetinaFace ``network`` on OpenVINO (CPU; converted once, cached under ``models_dir``).

    ``weights_path=None``: the synthetic detector's random weights (the hardware check).
    ``threads``: OpenVINO inference threads (None: OpenVINO's own count).
    Raises :class:`~gpen_core.errors.ResourceError` when OpenVINO cannot run here."""
    from gpen_core.runtimes.openvino import detector as ov_detect

    runner = ov_detect.load(weights_path, network, lambda p: build_retinaface(p, network), models_dir=models_dir,
                            threads=threads)
    return FaceDetector(weights_path, network, "cpu", runner=runner)


def openvino_masker(
    weights_path: Path | None,
    *,
    input_size: int = 512,
    cpu_dtype: str = "float32",
    dtype_name: str | None = None,
    models_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    progress: Any = None,
) -> ParsingMasker:
    """GPEN's ParseNet paste mask on OpenVINO at ``input_size`` (CPU; converted once, cached).

    The precision follows the mode's dtype as on torch (:func:`choose_parse_dtype`), unless
    ``dtype_name`` ("float32" / "bfloat16") forces it. ``threads``: OpenVINO inference threads (None: its own);
    ``progress(fraction, message)`` hears about a first-use conversion."""
    from gpen_core.runtimes.openvino import parser as ov_parse
    from gpen_core.runtimes.openvino.base import choose_precision

    name = dtype_name or choose_parse_dtype("cpu", cpu_dtype)
    path = Path(weights_path) if weights_path is not None else ov_parse.synthetic_weights(models_dir)
    parser = ov_parse.load(path, input_size, choose_precision(name)[0], models_dir=models_dir, threads=threads,
                           progress=progress)
    return ParsingMasker(weights_path, "cpu", input_size=input_size, parser=parser)
