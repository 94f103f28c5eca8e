"""GPEN's ParseNet as the paste mask of a restored crop, as official (:mod:`gpen_core.faces.masks`). torch is
imported when a parser is built."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from gpen_core.rgb import check_rgb
from gpen_core.faces.masks import parsing_labels_to_mask

if TYPE_CHECKING:
    import torch

ParseDType = Literal["float32", "bfloat16"]


def choose_parse_dtype(device: str | torch.device, cpu_dtype: str = "float32") -> ParseDType:
    """ParseNet's dtype: bfloat16 on a CPU with native bf16 when the mode's ``cpu_dtype`` is "bfloat16" or "auto"
    (several times faster, the mask within input noise; emulated 5× slower: docs/paste-mask.md), else float32."""
    if str(device).split(":")[0] != "cpu" or cpu_dtype not in ("bfloat16", "auto"):
        return "float32"
    from gpen_core.networks import plan  # torch; looked up at call time so tests can patch cpu_features

    return "bfloat16" if plan.cpu_features()["native_bf16"] else "float32"


class ParsingMasker:
    """``parsing_fn``: ``masker(restored_rgb_crop)`` → float32 H×W in [0, 1]. ``input_size``: 512 official, 256 a
    quarter of the compute; ``cpu_dtype``: the mode's, ``dtype`` forces one; ``weights_path=None``: random weights
    (the hardware check); ``parser``: the network on OpenVINO (this room never imports a runtime)."""

    def __init__(self, weights_path: Path | None, device: str | torch.device = "cpu", *, input_size: int = 512,
                 cpu_dtype: str = "float32", dtype: torch.dtype | None = None, parser: Any = None) -> None:
        self.weights_path = Path(weights_path) if weights_path is not None else None
        self.input_size = input_size
        self.backend = "torch" if parser is None else "openvino"
        if parser is not None:
            self._parser = parser
            self.device = parser.device
            return
        import torch

        from gpen_core.networks.parsenet import RELEASED_CONFIG, FaceParser, ParseNet

        if dtype is None:
            dtype = getattr(torch, choose_parse_dtype(device, cpu_dtype))
        kwargs = {"device": device, "input_size": input_size, "dtype": dtype, "channels_last": True}
        if self.weights_path is None:
            self._parser = FaceParser(ParseNet(**RELEASED_CONFIG).eval(), **kwargs)
        else:
            self._parser = FaceParser.from_file(self.weights_path, **kwargs)
        self.device = self._parser.device

    @property
    def convert_s(self) -> float | None:
        """Seconds of a first-use OpenVINO conversion when this load did one, else None."""
        return getattr(self._parser, "convert_s", None)

    @property
    def description(self) -> str:
        """What the notes say: the file, the input size, the dtype (and OpenVINO when it ran there)."""
        name = self.weights_path.name if self.weights_path is not None else "synthetic weights"
        if self.backend == "openvino":
            return f"{name}, {self.input_size} px input, {self._parser.dtype_name}, OpenVINO"
        dt = str(self._parser.dtype).removeprefix("torch.")
        return f"{name}, {self.input_size} px input, {dt}"

    def labels(self, face_rgb: np.ndarray) -> np.ndarray:
        """The class per pixel of an RGB uint8 face: the network call, which the hardware check times."""
        return self._parser.labels(face_rgb)

    def __call__(self, restored_rgb_crop: np.ndarray) -> np.ndarray:
        crop = check_rgb(restored_rgb_crop, "restored crop")  # square: the generator's size
        return parsing_labels_to_mask(self.labels(crop), crop.shape[0])
