"""How a clip is written and which part of it: :class:`VideoOptions`."""

from __future__ import annotations

from dataclasses import dataclass

from gpen_core.errors import InputError
from gpen_core.video.limits import ClipCap


@dataclass(frozen=True)
class VideoOptions:
    """How the clip is written and which part of it."""

    # x264's constant rate factor: 0 lossless … 51 worst; 18 looks like the input to most eyes.
    crf: int = 18
    # Restore only from ``start_s`` to ``end_s`` (seconds from the clip's start); None: its start / end.
    start_s: float | None = None
    end_s: float | None = None
    # A server's limit (decoded frames and time, from ``start_s``); where it cuts the clip, the notes say so.
    cap: ClipCap | None = None
    # False: the output has no sound (asked for, e.g. audio an MP4 cannot take); the notes say so.
    audio: bool = True
    # Restore only these faces (track ids, as FrameRecord.faces numbers them: 0 for the first face seen);
    # the others are left as they were. None: every face.
    tracks: frozenset[int] | None = None
    # Leave these faces as they were (track ids as above); every other face, one first seen later too, is restored.
    skip: frozenset[int] = frozenset()

    def validated(self) -> "VideoOptions":
        if not 0 <= self.crf <= 51:
            raise InputError(f"crf must be 0 (lossless) … 51 (smallest), got {self.crf}; 18 is the default")
        if self.start_s is not None and self.start_s < 0:
            raise InputError(f"start must be at least 0 seconds, got {self.start_s}")
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise InputError(f"end ({self.end_s} s) must be after start ({self.start_s} s)")
        if self.tracks is not None and not self.tracks:
            raise InputError("no face chosen to restore: choose at least one face (track), or all of them")
        if any(t < 0 for t in self.skip) or (self.tracks is not None and self.tracks & self.skip):
            raise InputError(f"faces to leave as they were (track ids from 0: {sorted(self.skip)}) must not also be "
                             f"chosen to restore ({sorted(self.tracks or ())})")
        return self

    @property
    def trimmed(self) -> bool:
        return self.start_s is not None or self.end_s is not None
