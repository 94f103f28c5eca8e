"""Segments joined into one MP4 without re-encoding, the input's audio copied once: :func:`join_segments`.
Decode timestamps are made anew so they never run backwards at a seam (docs/video-segments.md, "Cut, restore, join")."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpen_core.errors import InputError
from gpen_core.platform import durable
from gpen_core.video.output import AudioOutcome, add_audio, disk_errors, flush
from gpen_core.video.probe import open_clip
from gpen_core.video.segments import SegmentPlan


def reorder_depth(path: Path) -> int:
    """How many frames a decoder holds back in a segment file: max over its packets of (decode position −
    presentation rank); InputError when it cannot be read."""
    import av

    try:
        with av.open(str(path)) as c:
            pts = [p.pts for p in c.demux(c.streams.video[0]) if p.size]
    except (av.FFmpegError, OSError) as exc:
        raise InputError(f"segment {path.name} cannot be read ({exc}): restore again with --fresh") from None
    rank = {p: r for r, p in enumerate(sorted(pts))}
    return max([0] + [i - rank[p] for i, p in enumerate(pts)])


def check_segment(path: Path, plan: SegmentPlan, index: int) -> bool:
    """True when ``path`` holds segment ``index`` whole: it decodes, frame for frame at the plan's timestamps."""
    import av

    seg = plan.segments[index]
    tb = plan.tb
    try:
        with av.open(str(path)) as c:
            vs = c.streams.video[0]
            times = [f.pts * vs.time_base for f in c.decode(vs)]
    except (av.FFmpegError, OSError, ValueError):
        return False
    if len(times) != seg.frames or not times:
        return False
    end = seg.end_pts * tb if seg.end_pts is not None else None
    return times[0] == seg.start_pts * tb and (end is None or times[-1] < end)


def _video_packets(folder: Path, plan: SegmentPlan, depth: int) -> Iterator[tuple[float, int, Any]]:
    """(time s, 0, packet) of every segment in order, pts in the plan's time base and dts made anew."""
    import av

    tb = plan.tb
    # Presentation times so far, sorted (segments follow each other in time): one int a frame, a few MB an hour.
    shown: list[int] = []
    i = 0
    for seg in plan.segments:
        with av.open(str(folder / seg.file)) as c:
            vs = c.streams.video[0]
            packets = [p for p in c.demux(vs) if p.size]  # one segment's compressed packets
            shown.extend(sorted(int(p.pts * vs.time_base / tb) for p in packets))
            step = shown[1] - shown[0] if len(shown) > 1 else 1
            for p in packets:
                pts = int(p.pts * vs.time_base / tb)
                dts = shown[i - depth] if i >= depth else shown[0] - (depth - i) * step
                duration = int(p.duration * vs.time_base / tb) if p.duration else 0
                p.pts, p.dts, p.time_base, p.duration = pts, dts, tb, duration
                i += 1
                yield float(dts * tb), 0, p


def join_segments(src: str, plan: SegmentPlan, folder: Path, dst: Path, audio: bool = True) -> AudioOutcome:
    """Write ``dst`` from the plan's segment files in ``folder`` and ``src``'s audio; how that audio was written."""
    depth = max(reorder_depth(folder / s.file) for s in plan.segments)
    with open_clip(src) as container:
        # flushed: the whole clip's restoring; swept: a join killed earlier left its partial under another pid
        with disk_errors(dst.parent, "the joined video"), durable.replacing(dst, sync=True, sweep=True) as tmp:
            routes = _write_joined(container, plan, folder, tmp, depth, audio)
        return AudioOutcome.of(routes)


def _write_joined(container: Any, plan: SegmentPlan, folder: Path, tmp: Path, depth: int, audio: bool) -> list[Any]:
    """The segments' video and (``audio``) the input's audio, interleaved by time, into ``tmp``; the audio routes."""
    import av

    with av.open(str(folder / plan.segments[0].file)) as first:
        out = av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"})
        try:
            v = out.add_stream_from_template(first.streams.video[0])
            v.time_base = plan.tb
            routes = add_audio(out, list(container.streams.audio)) if audio else []
            for _, kind, item in heapq.merge(_video_packets(folder, plan, depth), _audio_items(container, routes),
                                             key=lambda x: (x[0], x[1])):
                if kind == 0:
                    item.stream = v
                    out.mux(item)
                    continue
                route, packet = item
                for data in [packet] if route.copy else packet.decode():
                    route.mux(out, data)
            flush(out, [r.out for r in routes if not r.copy])
        finally:
            out.close()
    return routes


def _audio_items(container: Any, routes: list[Any]) -> Iterator[tuple[float, int, Any]]:
    """(time s, 1, (its route, packet)) for each audio packet of the input, in file order."""
    if not routes:
        return
    by_index = {r.source.index: r for r in routes}
    for packet in container.demux(*[r.source for r in routes]):
        if packet.dts is None or packet.size == 0:
            continue
        t = float(packet.dts * packet.time_base)
        yield t, 1, (by_index[packet.stream.index], packet)
