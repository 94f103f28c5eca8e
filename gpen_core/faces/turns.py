"""Quarter turns of an image: OpenCV's rotation codes and the map of points back onto the unturned image.

Shared by the detector (it looks at a photo turned, for faces on their side) and the screen's
second look; pure NumPy and OpenCV.
"""

from __future__ import annotations

import cv2
import numpy as np

# np.rot90(img, k) (counter-clockwise) as OpenCV's faster rotate.
CV2_TURN = {1: cv2.ROTATE_90_COUNTERCLOCKWISE, 2: cv2.ROTATE_180, 3: cv2.ROTATE_90_CLOCKWISE}


def unturn(pts: np.ndarray, turn: int, w: int, h: int) -> np.ndarray:
    """(N, 2) (x, y) points on a ``w``×``h`` image turned ``turn`` quarter turns counter-clockwise → on the image.

    Continuous pixel coordinates (a pixel centre is at +0.5), so pixel centres map exactly."""
    x, y = pts[:, 0], pts[:, 1]
    if turn == 1:
        return np.stack([w - y, x], axis=1)
    if turn == 2:
        return np.stack([w - x, h - y], axis=1)
    if turn == 3:
        return np.stack([y, h - x], axis=1)
    return np.asarray(pts, dtype=np.float64)
