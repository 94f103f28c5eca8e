"""Face parsing: GPEN's ParseNet as the paste mask of a restored crop.

The official ``FaceEnhancement.process`` pastes every face through this mask (see
:mod:`gpen_core.masks` for the recipe, :mod:`gpen_core.parsenet` for the network).
torch is imported when a parser is built, not at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .detect import check_rgb
from .masks import parsing_labels_to_mask

if TYPE_CHECKING:
    import torch


class ParsingMasker:
    """GPEN's ParseNet (``ParseNet-latest.pth``, or facexlib's ``parsing_parsenet.pth``: same
    network) as the paste mask of a restored crop.

    ``masker(restored_rgb_crop)`` → float32 H×W in [0, 1] (the crop's size), as the official
    code: labels at 512×512, GPEN's class table (background, hat and cloth off; skin,
    features, ears, hair and neck on), a 26 px border zeroed, GaussianBlur(101, σ 4) twice,
    resized to the crop. ``input_size``: 512 official; 256 parses a shrunk face (about a
    quarter of the compute). ``dtype``: float32, or bfloat16 where the CPU has native bf16.
    Pass it as ``parsing_fn`` to :func:`gpen_core.photo.restore_photo`. ``weights_path=None``
    builds the released network with random weights (the hardware check: same cost).
    """

    def __init__(
        self,
        weights_path: Path | None,
        device: str | torch.device = "cpu",
        *,
        input_size: int = 512,
        dtype: torch.dtype | None = None,
    ) -> None:
        import torch

        from .parsenet import RELEASED_CONFIG, FaceParser, ParseNet

        self.weights_path = Path(weights_path) if weights_path is not None else None
        kwargs = {"device": device, "input_size": input_size, "dtype": dtype or torch.float32, "channels_last": True}
        if self.weights_path is None:
            self._parser = FaceParser(ParseNet(**RELEASED_CONFIG).eval(), source="synthetic weights", **kwargs)
        else:
            self._parser = FaceParser.from_file(self.weights_path, **kwargs)
        self.device = self._parser.device
        self.input_size = input_size

    @property
    def description(self) -> str:
        """What the notes say: the file and the input size."""
        dt = str(self._parser.dtype).removeprefix("torch.")
        name = self.weights_path.name if self.weights_path is not None else "synthetic weights"
        return f"{name}, {self.input_size} px input, {dt}"

    def __call__(self, restored_rgb_crop: np.ndarray) -> np.ndarray:
        crop = check_rgb(restored_rgb_crop, "restored crop")
        size = crop.shape[0]
        if crop.shape[1] != size:
            raise ValueError(f"a restored crop is square, got {crop.shape[1]}×{crop.shape[0]}")
        return parsing_labels_to_mask(self._parser.labels(crop), size)
