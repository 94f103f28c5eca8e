"""Draw docs/paste_mask.png: GPEN's two paste masks over a real face.

No ParseNet weights exist on the machine this was made on, so the parsing mask is made
from a label map drawn by hand from the face's 5 landmarks (skin, hair, neck, cloth,
background in GPEN's class numbers), then run through the real recipe
(gpen_core.faces.masks.parsing_labels_to_mask). The figure says so.

    .venv/bin/python -m benchmarks.paste_mask_figure [--out docs/paste_mask.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np

from gpen_core.faces.align import align_transform
from gpen_core.faces.detect import FaceDetector
from gpen_core.faces.masks import parsing_labels_to_mask, rectangle_mask

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
S = 512
PANEL = 300

# GPEN class numbers (gpen_core.faces.masks.CLASS_NAMES)
BACKGROUND, SKIN, HAIR, NECK, CLOTH = 0, 1, 13, 17, 18
COLOURS = {BACKGROUND: (40, 40, 40), SKIN: (230, 180, 150), HAIR: (120, 70, 30), NECK: (200, 150, 120), CLOTH: (60, 90, 160)}


def hand_label_map() -> np.ndarray:
    """A plausible parsing of an aligned GPEN crop, from the template geometry alone."""
    lab = np.zeros((S, S), np.uint8)
    cv2.ellipse(lab, (256, 215), (175, 185), 0, 180, 360, HAIR, -1)  # hair cap
    cv2.rectangle(lab, (200, 380), (312, 512), NECK, -1)  # neck
    cv2.ellipse(lab, (256, 560), (260, 110), 0, 180, 360, CLOTH, -1)  # shoulders, collar
    cv2.ellipse(lab, (256, 290), (135, 175), 0, 0, 360, SKIN, -1)  # face
    return lab


def overlay(face: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The face where the mask pastes; where it does not (the photo stays), dark blue."""
    grey = cv2.cvtColor(cv2.cvtColor(face, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB) // 4 + np.array([0, 0, 70], np.uint8)
    m = mask[:, :, None]
    return (face * m + grey * (1 - m)).astype(np.uint8)


def panel(img: np.ndarray, title: str, sub: str) -> np.ndarray:
    p = cv2.resize(img, (PANEL, PANEL), interpolation=cv2.INTER_AREA)
    bar = np.full((52, PANEL, 3), 255, np.uint8)
    cv2.putText(bar, title, (6, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(bar, sub, (6, 42), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (80, 80, 80), 1, cv2.LINE_AA)
    return np.vstack([p, bar])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "paste_mask.png"))
    args = ap.parse_args()
    rgb = cv2.cvtColor(cv2.imread(str(SHARED / "faces" / "ffhq_00001_512.png")), cv2.COLOR_BGR2RGB)
    det = FaceDetector(SHARED / "weights" / "detection_mobilenet0.25_Final.pth", "mobilenet0.25").detect(rgb)[0]
    fwd, _ = align_transform(det.landmarks, S)
    face = cv2.warpAffine(rgb, fwd, (S, S), flags=cv2.INTER_LINEAR)  # GPEN's aligned crop

    labels = hand_label_map()
    colour = np.zeros((S, S, 3), np.uint8)
    for k, c in COLOURS.items():
        colour[labels == k] = c
    parse = parsing_labels_to_mask(labels, S)
    rect = rectangle_mask(S)
    row = np.hstack([
        panel(face, "aligned face (GPEN crop)", "FFHQ 00001, real detector"),
        panel(overlay(face, rect), "rectangle mask (fallback)", "pasted; blue: photo kept"),
        panel(colour, "label map DRAWN BY HAND", "hair+neck kept, cloth+bg off"),
        panel(overlay(face, parse), "GPEN parsing mask of it", "pasted; blue: photo kept"),
    ])  # fmt: skip
    foot = np.full((28, row.shape[1], 3), 255, np.uint8)
    cv2.putText(foot, "No ParseNet weights here: panel 4 is GPEN's real mask recipe applied to the hand-drawn labels of panel 3.",
                (6, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 160), 1, cv2.LINE_AA)  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out), cv2.cvtColor(np.vstack([row, foot]), cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    print(out)


if __name__ == "__main__":
    main()
