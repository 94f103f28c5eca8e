"""The hardware check's parser and detector rows time what a request loads: both sides of each row come from the
engine's one load (``ModelCache.parser`` / ``ModelCache.detector``), asked for that runtime. The networks are stood
in for (no weights, no conversion): quick. That no module of the check builds one itself: tests/test_names.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpen_core.engine.model_cache import ModelCache
from gpen_core.hwcheck import backends
from gpen_core.runtimes.openvino import generator as ov_backend


class _Loaded:
    """A loaded detector's and parser's shape: the runtime it runs on and the calls the check times."""

    convert_s = None
    load_s = 0.25

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def detect_rows(self, bgr: np.ndarray, threshold: float) -> np.ndarray:
        return np.zeros((0, 15))

    def labels(self, face: np.ndarray) -> np.ndarray:
        return np.zeros(face.shape[:2], np.uint8)


def _measure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, detector_runs_on: str | None = None) -> tuple[list, dict]:
    asked: list[tuple[Any, ...]] = []

    def detector(self: ModelCache, network, device, opts=None, notes=None, mode=None):  # noqa: ANN001
        asked.append(("detector", network, device, opts.backend, self.synthetic_weights, self.openvino_threads))
        return _Loaded(detector_runs_on or opts.backend)

    def parser(self: ModelCache, mode, device, notes, opts=None, progress=None):  # noqa: ANN001
        asked.append(("parser", mode.name, device, opts.backend, self.synthetic_weights, self.openvino_threads))
        return _Loaded(opts.backend)

    monkeypatch.setattr(ModelCache, "detector", detector)
    monkeypatch.setattr(ModelCache, "parser", parser)
    monkeypatch.setattr(ov_backend, "unavailable_reason", lambda: None)
    spec = {"pairs": [], "runs": 2, "models_dir": str(tmp_path), "threads": 1, "detect": ["mobilenet0.25"],
            "parse": [{"size": 512, "dtype": "float32", "weights": str(tmp_path / "ParseNet-latest.pth")}]}
    return asked, backends.measure(spec, lambda f, d: None)


def test_both_sides_of_the_parser_and_detector_rows_are_the_engines_loads(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    asked, result = _measure(monkeypatch, tmp_path)
    # quality parses at 512 px float32; the check's OpenVINO side runs on its thread count, as torch beside it
    assert asked == [("parser", "quality", "cpu", "torch", True, 1), ("parser", "quality", "cpu", "openvino", True, 1),
                     ("detector", "mobilenet0.25", "cpu", "torch", True, 1),
                     ("detector", "mobilenet0.25", "cpu", "openvino", True, 1)]
    (parse,), (detect,) = result["parse"], result["detect"]
    assert "error" not in parse and len(parse["torch_times"]) == len(parse["openvino_times"]) == 2
    assert "error" not in detect and len(detect["torch_times"]) == 2 and detect["load_s"] == 0.25


def test_a_side_the_engine_loads_on_another_runtime_is_that_rows_error(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """Never a timing of torch labelled OpenVINO (the engine may keep a network on torch, e.g. short of memory)."""
    _, result = _measure(monkeypatch, tmp_path, detector_runs_on="torch")
    (detect,) = result["detect"]
    assert detect["error"] == "RuntimeError: the engine loaded the mobilenet0.25 detector on torch, not openvino"
    assert "torch_s" not in detect and "error" not in result["parse"][0]
