"""What one request asks for: :class:`RestoreOptions`, and the detector names it accepts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import get_args

import numpy as np

from gpen_core.errors import InputError
from gpen_core.modes import (AUTO, IDENTITY_THRESHOLD, IDENTITY_THRESHOLD_MEANING, PILLOW_MAX_PIXELS, Detector, OutputFormat,
                             get_mode, get_task)

ImageSource = np.ndarray | bytes | str | os.PathLike[str]

IDENTITY_CHOICES = ("auto", "on", "off")
BACKENDS = ("auto", "torch", "openvino")
UPSCALES = (1, 2, 4)
MAX_FACES_HELP = "restore at most this many faces, highest detection score first"


def default_upscaler(factor: int) -> str:
    """The registry name of the upscaler that enlarges ×``factor`` (2 or 4): what a request without ``upscaler`` loads."""
    return f"realesrnet_x{factor}"


DETECTOR_WEIGHTS: dict[str, str] = {
    "mobilenet0.25": "retinaface-mobilenet0.25",
    "resnet50": "retinaface-resnet50",
}


@dataclass(frozen=True)
class RestoreOptions:
    """What one request asks for; every field has a sensible default."""

    mode: str = AUTO  # a memory mode's name, or "auto": the best mode that fits the memory free now
    model: str | None = None  # generator override: a registry name (GPEN-BFR-1024) or a GPEN checkpoint's path
    detector: Detector | None = None  # None: the mode's
    alpha: float = 1.0  # GPEN's blend: 1.0 = restored face only, 0.0 = original crop
    threshold: float = 0.9  # RetinaFace confidence threshold (official GPEN's default)
    # At most this many faces, highest detection score first (as official GPEN); the result says when it bites.
    max_faces: int = 50
    aligned: bool = False  # the input is an aligned face crop: restored directly, no detection
    # Check each detection before restoring it (gpen_core.faces.screen). False keeps every detection above
    # the threshold; the notes name the ones the check would have dropped.
    face_check: bool = True
    # Also search the photo turned 90°, 180° and 270° when the upright pass found faces (a scan mixing
    # orientations); the turns are always searched when the upright pass finds none.
    orientations: bool = False
    output_format: str | None = None  # "png" or "jpeg"; None: the mode's
    # Background upscaling, as GPEN's --use_sr --sr_scale: 1 (off), 2 or 4; faces are restored at that size.
    upscale: int = 1
    # Upscaler: a registry name (realesrnet_x2 / realesrnet_x4) or a checkpoint path; None: realesrnet_x{upscale}.
    upscaler: str | None = None
    tile: int | None = None  # upscaler tile side in input px; None: the largest that fits the mode's budget
    # Generator runtime on the CPU: "torch", "openvino" (converted once, cached in the models folder), or
    # "auto": the one measured faster on this CPU.
    backend: str = "auto"
    # Which of GPEN's released tasks (gpen_core.modes.TASKS): "enhance" restores faces; "colorize",
    # "inpaint" (white = damaged) and "seg2face" (aligned label maps) run their own generators (docs/tasks.md).
    task: str = "enhance"
    # Identity check (dlib's face descriptor, docs/identity.md): "auto" measures every restored face in every
    # mode but low when dlib is installed (≈0.15 s of CPU a face); "on" also in low, and says when dlib is
    # missing; "off" never.
    identity: str = "auto"
    # Over this identity distance, paste the original face instead (or a blend, identity_alpha); None
    # measures only. modes.IDENTITY_THRESHOLD is dlib's own "different people" line on LFW.
    identity_limit: float | None = None
    # For a face over identity_limit: 0 keeps the original face; 0 < a < 1 pastes a × restored + (1 − a) × original.
    identity_alpha: float = 0.0
    # A clip checks identity on frames 1, 1 + N, 1 + 2N… only (the check is a large share of a GPU frame).
    identity_every: int = 1
    # The largest photo decoded, in pixels. None: images.limits' default, which a server's visitor cannot change; a
    # local run sets its own (the CLI always: --max-megapixels), and its refusal then names how to raise it.
    max_pixels: int | None = None

    @property
    def identity_switch(self) -> str:
        """The identity switch as it acts: a limit or a clip's every-Nth-frame needs the check, so under "auto" either
        runs it as "on" (in low too, naming the pip command where dlib is missing) rather than being dropped unsaid."""
        asked = self.identity_limit is not None or self.identity_every != 1
        return "on" if self.identity == AUTO and asked else self.identity

    @property
    def upscaler_name(self) -> str:
        """The upscaler this request loads when ``upscale`` > 1: the caller's, else the factor's."""
        return self.upscaler or default_upscaler(self.upscale)

    def for_clip(self) -> "RestoreOptions":
        """:meth:`validated` for a clip's frames, whole pictures pasted back: InputError, first, for what a clip cannot
        take (so the CLI refuses it before any model loads or conversion, and the frame session as it opens)."""
        fixes = [fix for fix, on in (("turn off 'aligned'", self.aligned), ("use upscale 1", self.upscale > 1),
                                     ("use the enhance task", self.task != "enhance")) if on]
        if fixes:  # only what was asked: "--upscale 2" was told to turn off an 'aligned' it never set
            raise InputError(f"video frames are restored as whole photos with the enhance task: {' and '.join(fixes)}")
        if self.mode != AUTO and not get_mode(self.mode).paste:
            raise InputError(f"{self.mode} mode returns face crops only; a video needs a mode that pastes faces back")
        return self.validated()

    def validated(self) -> "RestoreOptions":
        if self.mode != AUTO:
            get_mode(self.mode)
        if not 0.0 <= self.alpha <= 1.0:
            raise InputError(f"blend strength (alpha) must be between 0 and 1, got {self.alpha}")
        if not 0.0 < self.threshold < 1.0:
            raise InputError(f"detection threshold must be between 0 and 1 (exclusive), got {self.threshold}")
        if self.max_faces < 1:
            raise InputError(f"max faces must be at least 1, got {self.max_faces}")
        if self.backend not in BACKENDS:
            raise InputError(f"unknown backend {self.backend!r}; choose auto, torch or openvino")
        if self.detector is not None and self.detector not in DETECTOR_WEIGHTS:
            raise InputError(f"unknown detector {self.detector!r}; choose {' or '.join(DETECTOR_WEIGHTS)}")
        if self.upscale not in UPSCALES:
            raise InputError(f"upscale must be 1 (off), 2 or 4, got {self.upscale!r}")
        if self.tile is not None and not 16 <= self.tile <= 4096:
            raise InputError(f"upscaler tile must be between 16 and 4096 pixels, got {self.tile}")
        given = [f for f, v in (("--tile", self.tile), ("--upscaler", self.upscaler)) if v is not None]
        if given and self.upscale == 1:  # they choose how the background is upscaled: nothing is, without upscale
            one = len(given) == 1
            raise InputError(f"{' and '.join(given)} {'chooses' if one else 'choose'} how the background is upscaled, and "
                             f"upscale is 1 (off): add --upscale 2 (or 4), or leave {'it' if one else 'them'} out")
        if self.upscale > 1 and self.aligned:
            raise InputError("upscaling is for whole photos; turn off 'aligned' (an aligned face crop) or upscale 1")
        task = get_task(self.task)
        if task.aligned_only and not self.aligned:
            raise InputError(f"the {task.name} task takes aligned inputs only (as the official code): turn on 'aligned'")
        if task.name != "enhance" and self.upscale > 1:
            raise InputError(f"background upscaling is for face restoration; use upscale 1 with the {task.name} task")
        if self.mode != AUTO and self.mode not in task.modes:
            raise InputError(
                f"{self.mode} mode has no plan for the {task.name} task: its generator {task.model} is larger than "
                f"{self.mode} promises to fit. Choose {', '.join(task.modes)} or auto (docs/tasks.md)"
            )
        if self.identity not in IDENTITY_CHOICES:
            raise InputError(f"identity check must be {', '.join(IDENTITY_CHOICES)}, got {self.identity!r}")
        if self.identity_limit is not None and not 0.0 < self.identity_limit < 2.0:
            raise InputError(f"the identity limit (the app's 'Identity limit', --identity-limit) must be above 0 and "
                             f"below 2, got {self.identity_limit}: it is a face-descriptor distance, and "
                             f"{IDENTITY_THRESHOLD:g} is {IDENTITY_THRESHOLD_MEANING}")
        if self.identity_limit is not None and self.identity == "off":
            raise InputError("an identity limit needs the identity check: turn it on (or auto), or drop the limit")
        if self.identity_every != 1 and self.identity == "off":
            raise InputError("--identity-every sets how often the identity check runs: turn it on (or auto), or drop it")
        if self.identity_alpha and self.identity_limit is None:
            raise InputError("the identity blend (the app's 'Over the limit' slider, --identity-alpha) acts only on faces "
                             "over an identity limit: set one too (the app's 'Identity limit', --identity-limit), or leave "
                             "the blend at 0")
        if self.identity_every < 1:
            raise InputError(f"identity_every is a number of frames, 1 (every frame) or more, got {self.identity_every}")
        if not 0.0 <= self.identity_alpha < 1.0:
            raise InputError(f"identity blend (identity_alpha) must be at least 0 (the original face) and below 1, "
                             f"got {self.identity_alpha}")
        if self.max_pixels is not None and not 0 < self.max_pixels <= PILLOW_MAX_PIXELS:
            raise InputError(f"the pixel limit (--max-megapixels) must be above 0 and at most {PILLOW_MAX_PIXELS // 10**6} "
                             f"megapixels (Pillow, the decoder, refuses larger images), got {self.max_pixels / 1e6:g}")
        if self.output_format is not None and self.output_format not in get_args(OutputFormat):
            raise InputError(f"output format must be {' or '.join(get_args(OutputFormat))}, got {self.output_format!r}")
        if self.identity_limit is not None and task.name == "seg2face":
            raise InputError("an identity limit has no face to compare in the seg2face task (a label map): drop the limit")
        return self
