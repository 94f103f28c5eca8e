"""The Video tab as plain values: the upload note (a shared server's cap said before anyone waits), the estimates,
the progress line, the measured panel and one frame's before/after (RGB uint8 H×W×3, upright)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from gpen_core.engine import convert_first
from gpen_core.engine.profile_store import load_profile
from gpen_core.errors import InputError
from gpen_core.faces import identity_model
from gpen_core.images.outputs import private_folder
from gpen_core.platform import durable
from gpen_core.platform.meter import format_bytes
from gpen_app.messages import shown_error
from gpen_app.panels import file_name, notes_lines, peak_ram_row
from gpen_core.progress import duration_text, left_text
from gpen_core.video.command import resume_command
from gpen_core.video.frames import upright_rgb
from gpen_core.video.identity import summary_lines
from gpen_core.video.limits import ClipCap, FrameGuard
from gpen_core.video.probe import expected_frames, open_video
from gpen_core.video.resumable import SEGMENTS_FROM_S

PLACEHOLDER = "*Upload a video: its length, size and audio appear here, then the measured figures of the restore.*"
_AUDIO = {"copied": "copied as it was (packets untouched)",
          "re-encoded": "re-encoded to AAC (MP4 cannot hold the original codec)", "none": "none in the input"}


@dataclass(frozen=True)
class ClipNote:
    markdown: str
    duration_s: float | None  # the clip's length as declared (None: not declared)
    usable: bool
    shown: Any = None  # an unusable clip's messages.ShownError (plain text for the pop-up, Markdown for the panel)
    # The server's cap as the run applies it (decoded frames and time: a header can lie); None: no cap.
    cap: ClipCap | None = None
    frames: int = 0  # the frames a restore will write (declared, or its length at the average rate; capped); 0: unknown
    info: Any = None  # the probe's ClipInfo (packets counted), for the part's frames before a run


def _rotation(path: str) -> int:
    """The clip's display rotation in degrees, from its first frame (0 when none decodes: the restore says why)."""
    import av

    container, _ = open_video(path)
    with container:
        try:
            return next((round(f.rotation or 0) % 360 for f in container.decode(container.streams.video[0])), 0)
        except (av.FFmpegError, EOFError):
            return 0


def clip_note(path: str, cap_s: float | None, public: bool = False) -> ClipNote:
    """What the clip is (size, length, frames, audio) and, on a capped server, how much of it will be restored;
    for a file that is no usable video, the problem (``public``: as :func:`.messages.shown_error` says it)."""
    try:
        container, info = open_video(path, count=True)
        with container:
            audio = " and ".join(a.codec_context.name for a in container.streams.audio)  # "aac": an MP4 takes it as it is
        turned = _rotation(path)
    except Exception as exc:  # a GPENError names the problem; a bug is logged with its trace, one line shown
        shown = shown_error(exc, doing="Reading the video", names={path: Path(path).name}, public=public)
        return ClipNote(shown.panel, None, False, shown)
    w, h = info.size
    uw, uh = (h, w) if turned in (90, 270) else (w, h)  # a phone's portrait clip: stored landscape, shown upright
    size = f"{uw}×{uh} {info.codec}" + (f" (stored {w}×{h}, shown turned {turned}°)" if turned else "")
    length = f"{info.duration_s:.1f} s" if info.duration_s else "length not declared"
    frames = f"{info.frames} frame{'s' * (info.frames != 1)}" if info.frames else _undeclared_frames(info.packets, expected_frames(info))
    lines = ["### Ready to restore", "",
             f"{size}, {length}, {frames}, {f'{audio} audio' if audio else 'no audio'}. "
             "Press **Restore video**."]
    whole = f"`{resume_command(Path(path).name)}`"  # segments a rerun resumes after a stop or a crash
    cap = ClipCap.of_seconds(cap_s, "this server's limit (--max-video-seconds)") if cap_s else None
    over = cap is not None and info.frames > cap.frames
    if cap is not None and (info.duration_s is None or info.duration_s > cap.seconds or over):
        lines += ["", f"**This shared server restores the first {cap.seconds:g} s only, at most {cap.frames} frames** "
                      f"(its limit, --max-video-seconds; the clip is {length}, {frames}). Trim the clip first, or restore "
                      f"the whole clip on your own machine with the command line, in segments that the same command "
                      f"resumes after a stop: {whole}"]
    elif cap is not None:  # its header says it fits; what decodes decides (a header can be edited)
        lines += ["", f"This shared server restores at most {cap.text()} (its limit, --max-video-seconds): a clip longer "
                      "than its header says is cut there, and the result says so."]
    elif info.duration_s and info.duration_s >= SEGMENTS_FROM_S:
        lines += ["", f"This clip is long ({length}): the page restores it in one go, and Stop or a crash keeps nothing. "
                      f"For a run that resumes where it stopped, use the command line: {whole}"]
    return ClipNote("\n".join(lines), info.duration_s, True, cap=cap, frames=expected_frames(info, cap=cap), info=info)


def _undeclared_frames(packets: Any, n: int) -> str:
    """``n`` frames the header does not declare, from ``packets`` (probe.PacketTimes or None), labelled an estimate."""
    if packets is None or not n:
        return "frame count not declared"
    how = "counted from its packets" if packets.complete else f"estimated from its first {len(packets.times)} packets"
    return f"about {n} frames ({how}; not declared)"


def progress_text(done: int, expected: int, rate: Any) -> str:
    """"frame 12 of 48, about 35 s left" from ``rate`` (:class:`gpen_core.video.rate.Rate`: from the first frame
    out, the networks' loading left out); without a declared count, the frames done."""
    if done <= 0:
        return "loading the networks and reading the first frames (the time left shows from the second frame)"
    of = f" of {expected}" if expected > 0 else ""
    if rate.seconds_per_frame is None:
        return f"frame {done}{of}, timing the next frames"
    if rate.left_s is None:
        return f"frame {done}{of} ({rate.seconds_per_frame:.1f} s a frame)"
    return f"frame {done}{of}, {left_text(rate.left_s)}"


def progress_fraction(done: int, expected: int) -> float | None:
    """The bar's fraction; None (an indeterminate bar) without a frame count."""
    return min(1.0, done / expected) if expected > 0 else None


@dataclass(frozen=True)
class Span:
    """The part of the clip a run restores: what the visitor asked, with a shared server's cap applied."""

    start_s: float | None
    end_s: float | None
    capped: bool  # the server's limit shortened it (said in the notes)
    notes: tuple[str, ...] = ()  # what differs from what was asked, for the clip's notes (an end past the clip's)


def span(clip: ClipNote, start_s: float | None, end_s: float | None, cap_s: float | None) -> Span:
    """Start/end as asked (empty: the clip's own), then at most ``cap_s`` seconds; InputError for a start at or after
    the clip's end or an end before the start."""
    start = float(start_s) if start_s else None  # 0 and empty both mean the clip's start ...
    end = float(end_s) if end_s else None  # ... and its end (the field shows 0 when empty)
    if start is not None and start < 0 or end is not None and end < 0:
        raise InputError("Start and end are seconds from the clip's start: 0 or more (leave them empty for the whole clip).")
    if clip.duration_s and start is not None and start >= clip.duration_s:
        raise InputError(f"Start ({start:g} s) is at or after the clip's end ({clip.duration_s:.2f} s): choose an earlier start.")
    if end is not None and start is not None and end <= start:
        raise InputError(f"End ({end:g} s) must be after start ({start:g} s).")
    past = end is not None and clip.duration_s is not None and end > clip.duration_s
    notes = (f"end {end:g} s is past the clip's end ({clip.duration_s:.2f} s): restored to the clip's end",) if past else ()
    last = end if end is not None else clip.duration_s
    if cap_s and (last is None or last - (start or 0.0) > cap_s):
        return Span(start, (start or 0.0) + cap_s, True)
    return Span(start, end, False, notes)


def output_name(source: str | None, mode: str) -> str:
    return file_name(source, "video", mode, "mp4")


def named_by_mode(result: Any, source: str | None) -> Any:
    """The VideoResult with its file renamed after the mode that ran (auto chooses after :func:`results_path`)."""
    out = Path(result.output)
    named = out.with_name(output_name(source, result.mode))
    durable.install(out, named, sync=False)  # a download, re-made on request: not worth a flush
    return replace(result, output=str(named))


def video_markdown(result: Any, identity_on: bool = True) -> str:
    """The clip's measured panel (Markdown) from its VideoResult; ``identity_on``: the tab's Identity check switch."""
    p = result.peaks
    vram = "no GPU" if p.vram_reserved_bytes is None else format_bytes(p.vram_reserved_bytes)
    rotation = f"turned upright from {result.rotation}°, written with no rotation tag" if result.rotation else "none in the input"
    w, h = result.size
    lines = [
        "### Measured for this clip", "",
        "| Measure | Value |", "|---|---|",
        peak_ram_row(p, "the clip"),
        *([f"| Memory plan | +{format_bytes(result.planned_bytes)} above the clip's start: what {result.mode} was chosen "
           "or checked by for frames of this size (an estimate; the row above is measured) |"]
          if getattr(result, "planned_bytes", None) is not None else []),
        f"| Peak VRAM | {vram} |",
        f"| Frames | {result.frames} ({result.duration_s:.2f} s at {result.fps:.2f} fps on average), {w}×{h} |",
        f"| Faces | up to {result.faces_per_frame_max} in a frame |",
        f"| Seconds per frame | {result.seconds_per_frame:.2f} ({result.total_s:.1f} s in all) |",
        f"| Mode | {_mode_cell(result)} |",
        f"| Audio | {_AUDIO.get(result.audio, result.audio)} |",
        f"| Rotation | {rotation} |",
        "| Timestamps | each frame's own, kept (no forced frame rate) |",
        f"| Video | H.264, CRF {result.crf} |",
        f"| Identity | {_identity_cell(result.identity, result.mode, identity_on)} |",
    ]
    if p.shared:  # the meter's own words (threads, page faults) stay in the JSON's peaks.shared
        lines.append("| Note on the peaks | other work in this app ran during the clip, so the peak may include some "
                     "of its memory |")
    # A cap's cut and damage are the stream's notes (the one wording); result.damage stays for the JSON and exit 5.
    return "\n".join(lines + notes_lines(list(result.notes)))


def _identity_cell(ident: Any, mode: str, switched_on: bool = True) -> str:
    """What was checked and flagged, or why nothing was: the switch the visitor turned off first, then
    :func:`gpen_core.faces.identity.runs_for`'s order."""
    if ident is None:
        if switched_on and mode == "low":
            return ("not checked: low mode leaves it out, as for photos (it would be a large share of its time; "
                    "docs/identity.md)")
        if switched_on and not identity_model.available():
            return f"not checked: dlib is not installed here. Fix: `{identity_model.PIP_COMMAND}`"
        return "not checked: the Identity check switch is off"
    head, *tracks = summary_lines(ident)
    cell = head.removeprefix("identity: ")
    if tracks:
        cell += "; " + "; ".join(t.strip() for t in tracks)
    return cell + " (frames numbered as on the slider)"


def _mode_cell(result: Any) -> str:
    """The mode, and why when it is not the one asked; a reason the notes already give is pointed to, not repeated."""
    if not result.mode_reason:
        return result.mode
    if result.mode_reason in result.notes:
        return f"{result.mode} (why: the first note)" if result.notes[0] == result.mode_reason else f"{result.mode} (why: see the notes)"
    return f"{result.mode} ({result.mode_reason})"


def frame_at(path: str, time_s: float) -> np.ndarray | None:
    """The frame of ``path`` shown at ``time_s`` (the last starting at or before it), RGB upright, or None;
    InputError, before any pixel is converted, for a clip over the photo limits."""
    import av

    container, info = open_video(path)
    with container:
        vs = container.streams.video[0]
        tb = vs.time_base
        if time_s > 0 and tb:
            container.seek(int(time_s / tb), stream=vs, backward=True)
        chosen = None
        guard = FrameGuard(path, info.size)
        for frame in container.decode(vs):
            t = float(frame.pts * tb) if frame.pts is not None and tb else 0.0
            if chosen is not None and t > time_s + 1e-6:
                break
            guard.check(frame, None, tb)
            chosen = frame  # converted once, when chosen
        return None if chosen is None else upright_rgb(chosen, av.video.reformatter.VideoReformatter())[0]


def frame_pair(source: str, output: str, time_s: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(before, after) at ``time_s``, cropped to one size (H.264 pads odd sides), or None when either has no frame."""
    before, after = frame_at(source, time_s), frame_at(output, time_s)
    if before is None or after is None:
        return None
    h, w = min(before.shape[0], after.shape[0]), min(before.shape[1], after.shape[1])
    return np.ascontiguousarray(before[:h, :w]), np.ascontiguousarray(after[:h, :w])


def results_path(results_dir: Path, source: str | None, mode: str) -> Path:
    """A fresh path for one clip's output under ``results_dir`` (a folder per request: names never clash, nor can
    another visitor guess them: :func:`~gpen_core.images.outputs.private_folder`)."""
    return private_folder(results_dir, "video-") / output_name(source, mode)


# ------------------------------------------------------------------ before a clip starts

# Seconds a face, generator only, on the project's CPU (Zen 4, native bfloat16, 2 threads, OpenVINO where auto
# runs it): docs/performance.md's per-face tables. Without native bfloat16 `balanced` takes about `quality`'s time.
BUILT_IN_S_PER_FACE = {"low": 0.13, "balanced": 0.77, "quality": 1.57}
PER_FACE_SOURCE = "built-in: the project's CPU (Zen 4, 2 threads)"


class ModeEstimate(NamedTuple):
    mode: str
    seconds_per_face: float
    source: str  # "measured on this machine (date)" or PER_FACE_SOURCE


def measured_per_face(mode: str, device: str) -> tuple[float, str] | None:
    """(seconds a face, where from) from this machine's saved hardware check, or None (none valid here)."""
    try:
        prof = load_profile(device)
    except Exception:  # noqa: BLE001 - an unreadable or older profile: the built-in figure says so instead
        return None
    row = prof.modes.get(mode) if prof is not None else None
    if row is None or not row.seconds_per_face or row.stepped_down_to or row.failed:
        return None
    return float(row.seconds_per_face), f"measured on this machine ({prof.created[:10]})"


def estimates(modes: Sequence[str], device: str,
              measure: Callable[[str, str], tuple[float, str] | None] = measured_per_face) -> list[ModeEstimate]:
    """Each mode's seconds a face: measured where the hardware check has, else built in."""
    built_in = {m: (s, PER_FACE_SOURCE) for m, s in BUILT_IN_S_PER_FACE.items()}
    got = ((m, measure(m, device) or built_in.get(m)) for m in modes)
    return [ModeEstimate(m, *g) for m, g in got if g is not None]


def estimate_markdown(frames: int, rows: Sequence[ModeEstimate]) -> str:
    """The table shown at upload: per mode, seconds a face and the clip's time with one face in every frame."""
    if frames <= 0 or not rows:
        return ""
    lines = [f"**Estimate** for {frames} frames with one face in each (each further face adds as much again; "
             "detection and encoding add a little per frame):", "",
             "| Mode | Seconds a face | This clip | From |", "|---|---|---|---|"]
    lines += [f"| {r.mode} | {r.seconds_per_face:.2f} | about {duration_text(frames * r.seconds_per_face)} "
              f"| {r.source} |" for r in rows]
    return "\n".join(lines)


def converting_text(model: str, seconds: convert_first.Figure) -> str:
    """"converting GPEN-BFR-512 for OpenVINO, once: about 13 s (estimate)", the progress line meanwhile."""
    measured = seconds.source != convert_first.BUILT_IN_SOURCE
    label = "estimate from this machine's hardware check" if measured else "estimate"
    return f"converting {model} for OpenVINO, once: about {duration_text(seconds.value)} ({label})"


def convert_before_clip(clip: ClipNote, part: Span, mode: str, engine: object, stop: threading.Event,
                        show: Callable[[str], None]) -> convert_first.ConvertFirst:
    """Convert ``mode``'s generator when the frames of ``part`` (at most the clip's cap) on torch outlast the
    conversion; ``stop``: the visitor's Stop, which kills it."""
    frames = expected_frames(clip.info, part.start_s, part.end_s, clip.cap)  # the upload note's count, of the part
    run = convert_first.Run(mode, frames, clip.info.size, str(getattr(engine, "device", "cpu")))
    return convert_first.convert_before(run, models_dir=getattr(engine, "models_dir", None), stop=stop,
                                        starting=lambda model, s: show(converting_text(model, s)))
