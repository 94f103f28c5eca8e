"""A clip restored at constant memory: :func:`restore_video`. Three threads and two bounded queues (decode →
detect, steady, restore → encode) hold at most 10 frames whatever the clip's length, and only the output is
written, under a temporary name until complete (docs/video.md, "What is held at once")."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpen_core.errors import GPENError, InputError, ResourceError
from gpen_core.options import RestoreOptions
from gpen_core.platform import durable
from gpen_core.platform.meter import PeakMeter, mark_call_worker
from gpen_core.platform.oom import is_oom, out_of_memory_advice
from gpen_core.progress import CountProgress as Progress  # frames done, frames expected or 0 when unknown
from gpen_core.video.engine_seam import FrameEngine, clip_device
from gpen_core.video.errors import VideoStopped, no_frames
from gpen_core.video.frame_loop import FrameLoop, Restored
from gpen_core.video.frames import upright_rgb, written_notes
from gpen_core.video.limits import FrameGuard
from gpen_core.video.options import VideoOptions
from gpen_core.video.output import AudioOutcome, VideoWriter, add_audio, check_output, write_failed
from gpen_core.video.probe import expected_frames, open_video, preflight
from gpen_core.video.result import Damage, FaceTrack, FrameRecord, VideoResult
from gpen_core.video.steady import Steadier

if TYPE_CHECKING:
    import numpy as np

__all__ = ["VideoOptions", "restore_video"]  # VideoOptions: its home is video/options.py

DECODE_QUEUE = 3
ENCODE_QUEUE = 3
_END = object()

OnFrame = Callable[[FrameRecord], None]


# What the decoder hands the main thread, typed, so no reader counts positions in a tuple. Audio, and the
# restored frames, go on as the encoder's work: a call of the writer's (functools.partial) the encoder makes.
@dataclass(frozen=True)
class DecodedFrame:
    """A frame as decoded: its output pts and time (trim shift applied), upright RGB, rotation and colour tags."""

    pts: int
    time: float
    rgb: np.ndarray
    rotation: int
    colour: Any


@dataclass(frozen=True)
class DecodeStopped:
    """The decoder stopped: what it said. What decoded before it is written."""

    detail: str


def restore_video(src: str | os.PathLike[str], dst: str | os.PathLike[str], restorer: Any = None,
                  options: RestoreOptions | None = None, video: VideoOptions | None = None, *,
                  progress: Progress | None = None, on_frame: OnFrame | None = None,
                  stop: threading.Event | None = None, engine: Any = None) -> VideoResult:
    """Restore every face of the clip ``src`` and write ``dst`` (H.264 yuv420p MP4), frame by frame.

    ``restorer``: default the process-wide one. ``on_frame(record)``: each written frame's faces. ``stop``: set it
    to stop; the partial output is removed and :class:`VideoStopped` raised. ``engine``: a test's stand-in for the
    :class:`~gpen_core.video.engine_seam.FrameEngine` over ``restorer``. Kept from the input: frame count and
    timestamps, audio (copied; AAC where MP4 cannot take it), display rotation (frames written upright), colour
    properties. InputError, before anything is written, for a file that is no usable video, audio an MP4 cannot
    take (``video.audio=False`` drops it), or a decoded frame :class:`~gpen_core.video.limits.FrameGuard` refuses.
    ``video.cap`` stops at a server's limit; the notes say where."""
    vopts = (video or VideoOptions()).validated()
    src_s, dst_p = os.fspath(src), Path(dst)
    check_output(dst_p, src_s)  # before any frame: the folder writable, not a device, not the input by any link
    container, info = open_video(src_s, count=True)  # the progress's total
    # flushed: minutes to hours of restoring; swept: what a killed earlier run on this output left
    with container, durable.replacing(dst_p, sync=True, sweep=True) as tmp:
        ahead = preflight(container, src_s, vopts.audio)
        if engine is None:
            from gpen_core.engine.pipeline import import_engine
            from gpen_core.restorer import get_restorer

            import_engine()  # the one-time import is the process's, not the clip's peak
            restorer = restorer or get_restorer()
        t0 = time.perf_counter()
        run = _Run(container, info, tmp, vopts, stop or threading.Event(), progress, on_frame)
        run.notes.update(dict.fromkeys(ahead))
        run.engine_for = lambda size: engine or FrameEngine(restorer, options or RestoreOptions(), size)
        try:
            with PeakMeter(clip_device(engine, restorer)) as meter:
                run.go()
        except Exception as exc:
            _translate(exc, run)
            raise
        finally:
            run.shut()
            if engine is None and run.engine is not None:
                run.engine.close()  # the frame session holds the restorer's lock
        assert meter.peaks is not None
        return run.result(str(dst_p), meter.peaks, time.perf_counter() - t0)


def _translate(exc: Exception, run: "_Run") -> None:
    """Raise the clip's failure as a GPENError with its fix (never a traceback for the user); else return."""
    import av

    if isinstance(exc, GPENError):
        return
    mode = getattr(getattr(run.engine, "mode", None), "name", "this")
    if is_oom(exc):
        raise ResourceError(f"out of memory at frame {run.written} in {mode} mode (a clip does not step down "
                            "mid-way: its look would change). Restore it in a lighter mode (--mode low). "
                            f"{out_of_memory_advice()}") from None
    if isinstance(exc, (av.FFmpegError, OSError)):  # the encoder's, past what disk_errors names
        raise write_failed(Path(run.writer.out.name).parent, f"the video at frame {run.written}", exc) from None


class _Run:
    """One clip's threads and state. :meth:`go` runs it; :meth:`shut` stops whatever still runs."""

    def __init__(self, container: Any, info: Any, tmp: Path, vopts: VideoOptions, stop: threading.Event,
                 progress: Progress | None, on_frame: OnFrame | None) -> None:
        self.container, self.info, self.vopts, self.stop = container, info, vopts, stop
        self.progress, self.on_frame = progress, on_frame
        self.expected = expected_frames(info, vopts.start_s, vopts.end_s, vopts.cap)  # for progress; 0: unknown
        self.abort = threading.Event()  # every thread stops: an error, a stop, the end of the trim
        self.decoded: queue.Queue = queue.Queue(DECODE_QUEUE)
        self.to_encode: queue.Queue = queue.Queue(ENCODE_QUEUE)
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.engine_for: Any = None  # (width, height) upright -> the clip's engine, called at the first frame
        self.engine: Any = None
        self.loop: FrameLoop | None = None  # made with the engine, at the first frame
        self.guard = FrameGuard(container.name, info.size)  # the name the clip was opened by
        self.cut = ""  # why the decoder stopped before the clip's end, when a cap stopped it
        self.damage: Damage | None = None
        self.notes: dict[str, None] = {}
        self.written = self.max_faces = self.rotation = 0
        self.first_time: float | None = None
        self.last_time = 0.0
        self.last_duration = 0.0
        self.size = (0, 0)
        import av

        out = av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"})
        audio = list(container.streams.audio) if vopts.audio else []
        self.writer = VideoWriter(out, add_audio(out, audio), vopts.crf, info.time_base, info.rate)

    # ------------------------------------------------------------ threads
    def _thread(self, name: str, target: Callable[[], None]) -> threading.Thread:
        def body() -> None:
            mark_call_worker()  # its work is the clip's own, not concurrent work
            try:
                target()
            except BaseException as exc:  # handed to the main thread, which raises it
                self.errors.append(exc)
                self.abort.set()

        t = threading.Thread(target=body, name=name, daemon=True)
        self.threads.append(t)
        t.start()
        return t

    def _put(self, q: queue.Queue, item: Any) -> bool:
        """Put with back-pressure; False once the run is aborting."""
        while not self.abort.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, q: queue.Queue) -> Any:
        while True:
            self._check()
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue

    def _check(self) -> None:
        if self.errors:
            raise self.errors[0]
        if self.stop.is_set():
            s = "s" if self.written != 1 else ""
            raise VideoStopped(f"stopped after {self.written} frame{s}: the partial output was removed")

    def shut(self) -> None:
        self.abort.set()
        for q in (self.decoded, self.to_encode):  # unblock a thread waiting on a full queue
            with suppress(queue.Empty):
                while True:
                    q.get_nowait()
        for t in self.threads:
            t.join(timeout=10)
        if not self.writer.closed:
            with suppress(Exception):  # closing a half-written file we then delete
                self.writer.out.close()

    # ------------------------------------------------------------ decoding (its own thread)
    def _decode(self) -> None:
        import av

        c = self.container
        vs = c.streams.video[0]
        tb = vs.time_base
        t_first = float(vs.start_time * tb) if vs.start_time is not None else 0.0
        start, end = self.vopts.start_s, self.vopts.end_s
        # Trimmed: timestamps move back by the start, audio's and video's alike, so they stay in sync.
        shift = start or 0.0
        cap, taken = self.vopts.cap, 0
        capped = cap is not None and (end is None or shift + cap.seconds < end)  # else the user's end comes first
        if capped:
            end = shift + cap.seconds
        if start:
            c.seek(int((t_first + start) / tb), stream=vs, backward=True)
        rf = av.video.reformatter.VideoReformatter()
        step = int(round(1 / (float(vs.average_rate or 25) * tb))) or 1
        pts = None
        try:
            for packet in c.demux(vs, *c.streams.audio):
                if self.abort.is_set():
                    return
                if packet.stream.type == "audio":
                    if not self._audio_packet(packet, t_first, start, end):
                        return
                    continue
                for frame in packet.decode():
                    pts = frame.pts if frame.pts is not None else (0 if pts is None else pts + step)
                    t = float(pts * tb) - t_first
                    if start and t < start - 1e-6:
                        continue
                    stop = end is not None and t >= end - 1e-9
                    if stop or (cap is not None and taken >= cap.frames):
                        if cap is not None and (not stop or capped):
                            self.cut = f"{cap.reason} allows {cap.text()}"
                        self._put(self.decoded, _END)
                        return
                    self.guard.check(frame, pts, tb)  # before its pixels are converted
                    rgb, rotation, colour = upright_rgb(frame, rf)
                    taken += 1
                    out_pts = pts - int(round(shift / tb))
                    if not self._put(self.decoded, DecodedFrame(out_pts, t - shift, rgb, rotation, colour)):
                        return
        except (av.FFmpegError, EOFError) as exc:
            self._put(self.decoded, DecodeStopped(str(exc).strip() or type(exc).__name__))
        self._put(self.decoded, _END)

    def _audio_packet(self, packet: Any, t_first: float, start: float | None, end: float | None) -> bool:
        """Route one audio packet (copied, or decoded for AAC) inside the trim; False once aborting."""
        route = next((r for r in self.writer.routes if r.source.index == packet.stream.index), None)
        if route is None:
            return True
        if packet.dts is None or packet.size == 0:  # the demuxer's flush packet at the end: the decoder's last frames
            items = [] if route.copy else packet.decode()
        else:
            t = float(packet.pts * packet.time_base) - t_first if packet.pts is not None else 0.0
            if (start and t < start) or (end is not None and t >= end):
                return True
            if route.copy and start:
                shift = int(round(start / packet.time_base))
                packet.pts -= shift
                packet.dts -= shift
            items = [packet] if route.copy else packet.decode()
        return all(self._put(self.decoded, partial(self.writer.audio, route, x)) for x in items)

    # ------------------------------------------------------------ encoding (its own thread)
    def _encode(self) -> None:
        while True:
            try:
                work = self.to_encode.get(timeout=0.1)
            except queue.Empty:
                if self.abort.is_set():
                    return
                continue
            if work is _END:
                self.writer.close()
                return
            work()

    # ------------------------------------------------------------ the main thread
    def go(self) -> None:
        self._thread("gpen-video-decode", self._decode)
        encoder = self._thread("gpen-video-encode", self._encode)
        decoded = 0
        while (item := self._get(self.decoded)) is not _END and not isinstance(item, DecodeStopped):
            if isinstance(item, DecodedFrame):
                self._take(item)
                decoded += 1
            else:
                self._send(item)  # audio, for the encoder
        stopped = item.detail if isinstance(item, DecodeStopped) else None  # what the decoder said, if it stopped early
        if decoded == 0:
            vo, length = self.vopts, self.info.duration_s
            end = f"{vo.end_s:g} s" if vo.end_s is not None else "the end"
            span = f" between {vo.start_s or 0:g} s and {end}" if vo.trimmed else ""
            if vo.start_s and length and vo.start_s >= length:  # a trim past the end, not a damaged file
                raise InputError(f"the part{span} starts at or past the clip's end (it is {length:.2f} s long): "
                                 "choose an earlier start")
            raise no_frames(span, stopped)
        for done in self.loop.drain():
            self._write(done)
        self._send(_END)
        while encoder.is_alive():
            encoder.join(timeout=0.1)
            self._check()
        self._check()
        self._note_damage(decoded, stopped)

    def _send(self, item: Any) -> None:
        if not self._put(self.to_encode, item):
            self._check()
            raise RuntimeError("the video encoder stopped without saying why")

    def _take(self, item: DecodedFrame) -> None:
        self._check()
        self.rotation = item.rotation
        if self.loop is None:  # the engine for the clip's upright frame size: the first decoded frame's
            self.engine = self.engine_for((item.rgb.shape[1], item.rgb.shape[0]))
            self.loop = FrameLoop(self.engine, check=self._check, tracks=self.vopts.tracks, skip=self.vopts.skip)
        for done in self.loop.push(item.time, item.rgb, (item.pts, item.time, item.colour)):
            self._write(done)

    def _write(self, done: Restored) -> None:
        pts, t, colour = done.payload
        self._send(partial(self.writer.frame, done.image, pts, colour))
        if self.first_time is None:
            self.first_time = t
        elif t > self.last_time:
            self.last_duration = t - self.last_time
        self.last_time = t
        self.size = (done.image.shape[1], done.image.shape[0])
        self.max_faces = max(self.max_faces, len(done.faces))
        checks = done.checks or (None,) * len(done.faces)
        record = FrameRecord(self.written, t, tuple(
            FaceTrack(f.track, tuple(float(v) for v in f.detection.box), f.detection.landmarks, f.filled, c)
            for f, c in zip(done.faces, checks)), done.rejected)
        self.written += 1
        if self.on_frame is not None:
            self.on_frame(record)
        if self.progress is not None:
            self.progress(self.written, self.expected)

    def _note_damage(self, decoded: int, detail: str | None) -> None:
        end = self.last_time + self.last_duration
        frames, declared = self.info.frames, self.info.duration_s
        if detail is None and not (self.vopts.trimmed or self.cut):  # a trim's or a cap's end is no damage
            if frames and decoded < frames:
                detail = f"the file declares {frames} frames but ends after {decoded} (truncated?)"
            elif declared and end < declared - max(2 * self.last_duration, 0.1):
                detail = f"the file declares {declared:.3f} s but its frames end at {end:.3f} s (truncated?)"
        if detail is not None:
            self.damage = Damage(decoded, end, detail)
            self.notes.setdefault(f"the video is damaged from frame {decoded} ({end:.3f} s) on ({detail}): the output "
                                  f"holds the {decoded} frames before it")

    def result(self, output: str, peaks: Any, total_s: float) -> VideoResult:
        # a one-frame clip has no step between frames: its frame lasts one period of the stream's rate
        step = self.last_duration or (1 / float(self.info.rate) if self.info.rate else 0.0)
        duration = (self.last_time + step - (self.first_time or 0.0)) if self.written else 0.0
        audio = AudioOutcome.of(self.writer.routes)
        assert self.loop is not None  # made in go, which ran
        notes = {**self.notes, **dict.fromkeys(self.guard.notes), **self.loop.notes}
        if self.cut:
            notes.setdefault(f"only the first {self.written} frames ({duration:.2f} s) were restored: {self.cut}")
        notes.update(dict.fromkeys(audio.notes))
        notes.update(dict.fromkeys(written_notes(self.size, self.rotation)))
        counted = self.loop.tally.notes(self.engine.opts) if self.loop.tally is not None else []
        unseen = sorted(self.vopts.tracks - self.loop.seen) if self.vopts.tracks is not None else []
        if unseen:  # numbered from 1, as --tracks and the per-frame records number them
            seen = ", ".join(str(t + 1) for t in sorted(self.loop.seen)) or "none"
            many = len(unseen) > 1
            notes.setdefault(f"face{'s' if many else ''} {', '.join(str(t + 1) for t in unseen)} (asked for) "
                             f"{'were' if many else 'was'} not in the restored frames (faces seen: {seen}): "
                             f"nothing was restored for {'them' if many else 'it'}")
        if self.vopts.skip:  # a face first seen later is restored, so only these few are named
            left, gone = ([str(t + 1) for t in sorted(s)] for s in (self.vopts.skip, self.vopts.skip - self.loop.seen))
            many = len(left) > 1
            gone_text = f" (not in the restored frames: {', '.join(gone)})" if gone else ""
            notes.setdefault(f"face{'s' if many else ''} {', '.join(left)} left as {'they were' if many else 'it was'}, "
                             f"as asked; every other face was restored{gone_text}")
        return VideoResult(
            output=output, frames=self.written, fps=self.written / duration if duration > 0 else 0.0,
            duration_s=duration, size=self.size, audio=audio.handling, crf=self.vopts.crf,
            seconds_per_frame=total_s / max(1, self.written), total_s=total_s, faces_per_frame_max=self.max_faces,
            peaks=peaks, rotation=self.rotation, lookahead_frames=Steadier.lookahead,
            notes=tuple([*getattr(self.engine, "notes", []), *counted, *notes]), damage=self.damage,
            **self.loop.summary(),
        )
