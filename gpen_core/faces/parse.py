"""Face parsing: GPEN's ParseNet as the paste mask of a restored crop.

The official ``FaceEnhancement.process`` pastes every face through this mask (see
:mod:`gpen_core.faces.masks` for the recipe, :mod:`gpen_core.networks.parsenet` for the network).
torch is imported when a parser is built, not at import.
"""

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
    """The dtype ParseNet runs in: bfloat16 only on a CPU with native bf16 when the mode asks for it.

    ``cpu_dtype`` is the mode's CPU dtype (:attr:`MemoryMode.cpu_dtype`; "auto" counts as
    "bfloat16"). Measured on this network with one thread (docs/paste-mask.md): on an AMX
    CPU bf16 is 3.6× (512 px) to 4.8× (256 px) faster than float32 and changes the paste
    mask less than one grey level of input noise does; without native bf16 (AVX2) it is 5×
    slower. So "bfloat16" becomes bfloat16 where
    :func:`gpen_core.networks.plan.cpu_features` says ``native_bf16``, float32 elsewhere; "float32"
    (``quality``: the official mask) stays float32. Any other device (CUDA) runs float32, the
    official mask: no bf16 speed-up there has been measured.
    """
    if str(device).split(":")[0] != "cpu" or cpu_dtype not in ("bfloat16", "auto"):
        return "float32"
    from gpen_core.networks import plan  # torch; looked up at call time so tests can patch cpu_features

    return "bfloat16" if plan.cpu_features()["native_bf16"] else "float32"


class ParsingMasker:
    """GPEN's ParseNet (``ParseNet-latest.pth``, or facexlib's ``parsing_parsenet.pth``: same
    network) as the paste mask of a restored crop.

    ``masker(restored_rgb_crop)`` → float32 H×W in [0, 1] (the crop's size), as the official
    code: labels at 512×512, GPEN's class table (background, hat and cloth off; skin,
    features, ears, hair and neck on), a 26 px border zeroed, GaussianBlur(101, σ 4) twice,
    resized to the crop. ``input_size``: 512 official; 256 parses a shrunk face (about a
    quarter of the compute). ``cpu_dtype``: the mode's CPU dtype; "bfloat16" runs the parser
    in bf16 where the CPU has it natively (:func:`choose_parse_dtype`), float32 elsewhere.
    ``dtype`` forces a dtype (tests, benchmarks). Pass it as ``parsing_fn`` to
    :func:`gpen_core.faces.photo.restore_photo`. ``weights_path=None`` builds the released network
    with random weights (the hardware check: same cost). The OpenVINO parser runs the same
    network converted to OpenVINO (:mod:`gpen_core.runtimes.openvino.parser`, cached under ``models_dir``; CPU
    only; bf16 where the dtype is bfloat16 and the plugin has it), handed in as ``parser`` by
    :func:`gpen_core.engine.network_loads.openvino_masker`.
    """

    def __init__(
        self,
        weights_path: Path | None,
        device: str | torch.device = "cpu",
        *,
        input_size: int = 512,
        cpu_dtype: str = "float32",
        dtype: torch.dtype | None = None,
        parser: Any = None,
    ) -> None:
        self.weights_path = Path(weights_path) if weights_path is not None else None
        self.input_size = input_size
        self.backend = "torch" if parser is None else "openvino"
        if parser is not None:  # built on another runtime by the engine (this room never imports one)
            self._parser = parser
            self.device = parser.device
            return
        import torch

        from gpen_core.networks.parsenet import RELEASED_CONFIG, FaceParser, ParseNet

        if dtype is None:
            dtype = getattr(torch, choose_parse_dtype(device, cpu_dtype))
        kwargs = {"device": device, "input_size": input_size, "dtype": dtype, "channels_last": True}
        if self.weights_path is None:
            self._parser = FaceParser(ParseNet(**RELEASED_CONFIG).eval(), source="synthetic weights", **kwargs)
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
        """The parser's class per pixel of an RGB uint8 face (:meth:`__call__`'s network call; the hardware
        check times it per backend)."""
        return self._parser.labels(face_rgb)

    def __call__(self, restored_rgb_crop: np.ndarray) -> np.ndarray:
        crop = check_rgb(restored_rgb_crop, "restored crop")
        size = crop.shape[0]
        if crop.shape[1] != size:
            raise ValueError(f"a restored crop is square, got {crop.shape[1]}×{crop.shape[0]}")
        return parsing_labels_to_mask(self.labels(crop), size)
