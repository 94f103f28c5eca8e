"""What a clip restored in segments reports: :class:`SegmentedResult`, a :class:`VideoResult` filled as fully as
a one-pass run's (mode, peaks, fps, size, rotation, damage, timings), plus how the segments went."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpen_core.result import Peaks
from gpen_core.video.identity import merged
from gpen_core.video.result import VideoResult


@dataclass(frozen=True)
class SegmentedResult(VideoResult):
    """A one-pass result's every field, and: ``segments`` cut, ``segments_kept``/``frames_kept`` finished by an
    earlier, interrupted run, ``join_s`` the join's seconds, ``records`` each segment's outcome (by index).

    ``peaks``: this process's, measured once around the whole run (segments, join); Ray workers' own peaks are
    in ``records`` and, when higher, named in ``peaks.shared``. ``damage``: always None (a segment that does
    not decode to the plan's frames is refused instead)."""

    segments: int = 0
    segments_kept: int = 0
    frames_kept: int = 0
    join_s: float = 0.0
    records: tuple[Any, ...] = ()  # SegmentRecord

    def to_json(self) -> dict:
        return {**super().to_json(), "segments": self.segments, "segments_kept": self.segments_kept,
                "frames_kept": self.frames_kept, "join_s": round(self.join_s, 3)}


@dataclass(frozen=True)
class SegmentedRun:
    """What :func:`segmented_result` needs of a finished run besides its records."""

    output: str
    frames: int
    duration_s: float
    segments: int
    frames_kept: int
    audio: str
    crf: int
    total_s: float
    join_s: float
    rotation: int
    peaks: Peaks


def segmented_result(run: SegmentedRun, records: list[Any], notes: list[str]) -> SegmentedResult:
    """The run's :class:`SegmentedResult`: its size read from the written file's header, its mode the segments'."""
    from gpen_core.platform.meter import format_bytes
    from gpen_core.video.probe import open_video
    from gpen_core.video.steady import Steadier

    container, info = open_video(run.output)
    container.close()
    ran = [r for r in records if not r.kept]
    mode = next((r.mode for r in ran if r.mode), "as the earlier run" if records else "")
    reason = next((r.mode_reason for r in ran if r.mode_reason), "")
    peaks = run.peaks
    worker = max((r.peak_rss_bytes or 0 for r in ran), default=0)
    if worker > peaks.rss_bytes:  # Ray: the segments ran in workers, each its own process
        why = f"this process only; the highest segment worker's peak was {format_bytes(worker)}"
        peaks = replace(peaks, shared="; ".join(x for x in (peaks.shared, why) if x))
    ordered = tuple(sorted(records, key=lambda r: r.index))
    return SegmentedResult(
        output=run.output, frames=run.frames, fps=run.frames / run.duration_s if run.duration_s > 0 else 0.0,
        duration_s=run.duration_s, size=info.size, mode=mode, mode_reason=reason, audio=run.audio,  # type: ignore[arg-type]
        crf=run.crf, seconds_per_frame=run.total_s / max(1, run.frames), total_s=run.total_s,
        faces_per_frame_max=max((r.faces_max for r in records), default=0), peaks=peaks, rotation=run.rotation,
        lookahead_frames=Steadier().lookahead, notes=tuple(notes), damage=None, segments=run.segments,
        segments_kept=len(records) - len(ran), frames_kept=run.frames_kept, join_s=run.join_s, records=ordered,
        runtimes=next((tuple(r.runtimes) for r in ran if r.runtimes), ()),
        identity=merged([getattr(r, "identity", None) for r in ordered]),
    )
