"""Pixels between PyAV and the engine: a decoded frame to upright RGB, and RGB to the encoder's yuv420p, in the
frame's colour matrix and range (tagged on the output, so colours survive); frames are written upright, untagged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# FFmpeg's AVColorSpace numbers → the matrices swscale converts with (SMPTE 170M is BT.601's).
_SWS_MATRIX = {1: 1, 4: 4, 5: 5, 6: 5, 7: 7, 9: 9, 10: 9}


@dataclass(frozen=True)
class Colour:
    """A frame's colour properties as FFmpeg numbers (2 and 0: unspecified)."""

    primaries: int = 2
    transfer: int = 2
    matrix: int = 2
    range: int = 0

    @classmethod
    def of(cls, frame: Any) -> "Colour":
        return cls(int(frame.color_primaries), int(frame.color_trc), int(frame.colorspace), int(frame.color_range))

    @property
    def sws_matrix(self) -> int | None:
        return _SWS_MATRIX.get(self.matrix)

    @property
    def sws_range(self) -> int:
        return 2 if self.range == 2 else 1  # unspecified is limited (MPEG) range, as players assume


def upright_rgb(frame: Any, reformatter: Any) -> tuple[np.ndarray, int, Colour]:
    """(RGB uint8 H×W×3 as displayed, the display rotation in degrees, the frame's :class:`Colour`)."""
    colour = Colour.of(frame)
    rgb = reformatter.reformat(frame, format="rgb24", src_colorspace=colour.sws_matrix,
                               src_color_range=colour.sws_range, dst_color_range=2).to_ndarray()
    rotation = int(round(frame.rotation or 0))
    k = round(rotation / 90) % 4  # np.rot90's turns (counter-clockwise) that bring it upright
    if k:
        rgb = np.ascontiguousarray(np.rot90(rgb, k))
    return rgb, rotation % 360, colour


def written_notes(size: tuple[int, int], rotation: int) -> list[str]:
    """What writing frames of ``size`` (upright, width × height) from a clip displayed turned ``rotation``° changes,
    said the same by one pass and by segments: odd sides padded (:func:`to_yuv`), the turn applied to the pixels."""
    notes = []
    if size[0] % 2 or size[1] % 2:
        notes.append(f"frames are {size[0]}×{size[1]}; H.264 yuv420p needs even sides, so each odd side "
                     "was padded with one copy of its last row/column")
    if rotation:
        notes.append(f"the input is displayed turned {rotation}°: frames were restored and written upright "
                     "(no rotation tag), so it shows the same way up")
    return notes


def to_yuv(rgb: np.ndarray, colour: Colour, reformatter: Any) -> Any:
    """An ``av.VideoFrame`` in yuv420p from RGB uint8, in the input's matrix and range (tagged with them). yuv420p
    needs even sides: an odd side gets one more row/column, a copy of the last (padded, never cropped)."""
    import av

    h, w = rgb.shape[:2]
    if h % 2 or w % 2:
        rgb = np.pad(rgb, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
    return reformatter.reformat(frame, format="yuv420p", src_color_range=2, dst_colorspace=colour.sws_matrix,
                                dst_color_range=colour.sws_range)
