"""What a restored clip reports: :class:`VideoResult` (whole clip) and :class:`FrameRecord` (one frame)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from gpen_core.result import NetworkRuntime, Peaks
from gpen_core.result_json import peaks_record
from gpen_core.video.identity import FaceCheck, VideoIdentity

AudioHandling = Literal["copied", "re-encoded", "none"]


@dataclass(frozen=True)
class Damage:
    """Where decoding stopped on a damaged file: the frames before ``frame`` were restored and written."""

    frame: int  # index of the first frame that did not decode (= frames written)
    time_s: float  # its time in the clip (the last good frame's end), seconds
    detail: str  # what the demuxer or decoder said


@dataclass(frozen=True)
class FaceTrack:
    """One face in one frame, in display pixels: the smoothed landmarks the restore aligned on. ``track``: its id
    across frames; ``filled``: interpolated between two sightings; ``identity``: its check here (None: not checked)."""

    track: int
    box: tuple[float, float, float, float]
    landmarks: np.ndarray  # (5, 2) float32 x, y
    filled: bool = False
    identity: FaceCheck | None = None


@dataclass(frozen=True)
class FrameRecord:
    """One written frame: its index, its time in seconds (pts × time base) and the faces restored in it."""

    index: int
    time_s: float
    faces: tuple[FaceTrack, ...]  # every face tracked in it (VideoOptions.tracks may have restored fewer)
    rejected: tuple[tuple[float, float, float, float], ...] = ()  # boxes the face check refused: left as they were

    def to_json(self) -> dict:
        faces = [{"face": f.track + 1, "box": [round(float(v), 2) for v in f.box],
                  "landmarks": [[round(float(x), 3), round(float(y), 3)] for x, y in f.landmarks],
                  "identity": None if f.identity is None else f.identity.to_json()} for f in self.faces]
        return {"frame": self.index, "time": round(self.time_s, 6), "faces": faces,
                "rejected": [[round(float(v), 2) for v in b] for b in self.rejected]}


@dataclass(frozen=True)
class VideoResult:
    """A restored clip: what was written, what it cost, and every change from what was asked (``notes``).

    ``duration_s``: last frame's end minus the first's start; ``fps``: frames / duration. ``peaks``: the whole
    clip's, measured once around decode, restore and encode. ``damage``: where a damaged input stopped decoding."""

    output: str
    frames: int
    fps: float
    duration_s: float
    size: tuple[int, int]  # written width, height (upright)
    mode: str
    mode_reason: str
    audio: AudioHandling
    crf: int
    seconds_per_frame: float
    total_s: float
    faces_per_frame_max: int
    peaks: Peaks
    rotation: int  # the input's display rotation in degrees (counter-clockwise); frames were written upright
    lookahead_frames: int
    notes: tuple[str, ...]
    damage: Damage | None = None
    runtimes: tuple[NetworkRuntime, ...] = ()  # what ran each network (torch / openvino) and why, as a photo's result
    identity: VideoIdentity | None = None  # the identity check along each face's track; None: it did not run
    # The mode's memory plan for one frame (an estimate, budget.request_plan): bytes above the process as the frame
    # session began, to set beside the measured peaks. None on a GPU, or where no frame session ran.
    planned_bytes: int | None = None

    def __post_init__(self) -> None:
        # How faces are pasted (the mode's, said as its networks load) tells nothing of a clip with no face in it.
        if not self.faces_per_frame_max:
            object.__setattr__(self, "notes", tuple(n for n in self.notes if not n.startswith("paste mask:")))

    def to_json(self) -> dict:
        d = self.damage
        damage = None if d is None else {"frame": d.frame, "time": round(d.time_s, 6), "detail": d.detail}
        return {"output": self.output, "frames": self.frames, "fps": round(self.fps, 4),
                "duration": round(self.duration_s, 6), "size": list(self.size), "mode": self.mode,
                "mode_reason": self.mode_reason, "audio": self.audio, "crf": self.crf,
                "seconds_per_frame": round(self.seconds_per_frame, 4), "total_s": round(self.total_s, 3),
                "rotation": self.rotation, "lookahead_frames": self.lookahead_frames,
                # as a photo's: vram_bytes allocated, vram_reserved_bytes the "peak VRAM" shown
                "peaks": peaks_record(self.peaks), "planned_bytes": self.planned_bytes, "damage": damage,
                "runtimes": [asdict(r) for r in self.runtimes],  # as a photo's record
                "identity": None if self.identity is None else self.identity.to_json(), "notes": list(self.notes)}
