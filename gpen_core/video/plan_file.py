"""plan.json on disk: written atomically, read back as untrusted input (:func:`load_plan`: every field's type and
range, segments covering the clip whole), checked against the run; a plan that fails is refused with ``--fresh``."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import fields
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpen_core.errors import InputError
from gpen_core.platform import durable
from gpen_core.video.engine_seam import Tally
from gpen_core.video.segments import PLAN, PLAN_VERSION, FinishedFile, Segment, SegmentPlan, input_fingerprint

# A plan is a few KB an hour (one line a segment); anything far larger was not written by this program.
MAX_PLAN_BYTES = 32 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TIME_BASE = re.compile(r"([1-9][0-9]{0,9})/([1-9][0-9]{0,9})")
_INT, _NUM, _OPT_INT, _STR, _LIST = "an integer", "a number", "an integer or null", "a string", "a list"
# Each record's keys and kinds, read off its dataclass (annotations as text; the tuples are JSON lists).
_KINDS = {"int": _INT, "float": _NUM, "int | None": _OPT_INT, "str": _STR}
_PLAN_FIELDS, _SEGMENT_FIELDS, _FINISHED_FIELDS, _TALLY_FIELDS = (
    {f.name: _KINDS.get(f.type, _LIST) for f in fields(cls) if f.name != "tally"}
    for cls in (SegmentPlan, Segment, FinishedFile, Tally))


class PlanError(InputError):
    """plan.json is not one this program wrote for this clip (edited, damaged, or from another version)."""


def write_plan(folder: Path, plan: SegmentPlan) -> None:
    """Atomically and flushed: a killed write or a power cut leaves the old plan or none, never half of one."""
    durable.write_text(folder / PLAN, plan.to_json(), sync=True)


def read_plan(folder: Path) -> SegmentPlan | None:
    """The plan in ``folder``; None when there is none; PlanError when it is there but not a valid plan."""
    path = folder / PLAN
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
            data = f.read(MAX_PLAN_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link planted under the plan's name (ELOOP), a folder (EISDIR), or unreadable
        raise _refuse(path, f"it cannot be read ({exc.strerror})") from None
    if len(data) > MAX_PLAN_BYTES:
        raise _refuse(path, f"it is over {MAX_PLAN_BYTES >> 20} MiB")
    return load_plan(data, path)


def load_plan(data: bytes | str, path: Path | str = PLAN) -> SegmentPlan:
    """The plan in ``data`` (plan.json's text), every field checked; PlanError naming the first fault and the fix."""
    try:
        d = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _refuse(path, f"it is not JSON ({str(exc)[:80]})") from None
    try:
        return _build(d)
    except _Fault as fault:
        raise _refuse(path, str(fault)) from None


def plan_segment_count(folder: Path) -> int:
    """How many segments the plan in ``folder`` lists, read leniently (0 when unusable): a plan that
    fails :func:`load_plan` still names the segment files ``--fresh`` removes."""
    try:
        with open(folder / PLAN, "rb") as f:
            d = json.loads(f.read(MAX_PLAN_BYTES))
        segments = d.get("segments") if isinstance(d, dict) else None
        return min(len(segments), 99999) if isinstance(segments, list) else 0
    except (OSError, ValueError, RecursionError):
        return 0


def same_source(plan: SegmentPlan, src: str | os.PathLike[str], settings: str, segment_seconds: float) -> str:
    """Why ``plan`` was made for something else ("" when it fits this run): path, size, time, content, options."""
    src_s = os.path.abspath(os.fspath(src))
    st = os.stat(src_s)
    if plan.input != src_s:
        return f"it is for {plan.input}"
    if (plan.input_bytes, plan.input_mtime_ns) != (st.st_size, st.st_mtime_ns):
        return "the input file has changed since"
    if (plan.input_head_sha256, plan.input_tail_sha256) != input_fingerprint(src_s):
        return "the input file's content has changed since (same size and time, other bytes)"
    if plan.settings != settings:
        return "it was made with other options (mode, model, crf…)"
    if plan.segment_seconds != segment_seconds:
        return f"it cuts {plan.segment_seconds:g} s segments, not {segment_seconds:g} s"
    return ""


def same_cuts(plan: SegmentPlan, now: SegmentPlan) -> str:
    """Why the stored ``plan`` does not cut the input as planning it ``now`` does ("" when it does)."""
    if plan.frames != now.frames:
        return f"the input has {now.frames} video frames, the plan counted {plan.frames}"
    if (plan.time_base, plan.segments) != (now.time_base, now.segments):
        return "its segments are not where the input's keyframes cut it"
    return ""


class _Fault(Exception):
    """What is wrong with a plan, for the message."""


def _refuse(path: Path | str, why: str) -> PlanError:
    return PlanError(f"{path} is not a plan this program wrote for this clip: {why}. It was edited, damaged or written "
                     "by another version; add --fresh to start over (the work folder's segments are deleted)")


def _fields(d: Any, spec: dict[str, str], where: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise _Fault(f"{where} is not an object")
    missing, extra = spec.keys() - d.keys(), d.keys() - spec.keys()
    if missing or extra:
        raise _Fault(f"{where} lacks {sorted(missing)}" if missing else f"{where} has unknown keys {sorted(extra)[:5]}")
    for key, kind in spec.items():
        v = d[key]
        ok = {_INT: type(v) is int, _OPT_INT: v is None or type(v) is int, _STR: isinstance(v, str),
              _LIST: isinstance(v, list), _NUM: type(v) in (int, float) and math.isfinite(v)}[kind]
        if not ok:
            raise _Fault(f"{where}'s {key} is {json.dumps(v)[:40]}, not {kind}")
    return d


def _check(ok: bool, why: str) -> None:
    if not ok:
        raise _Fault(why)


def _build(d: Any) -> SegmentPlan:
    if isinstance(d, dict) and d.get("version") != PLAN_VERSION:
        raise _Fault(f"its version is {json.dumps(d.get('version'))[:20]}, this program writes {PLAN_VERSION}")
    d = _fields(d, _PLAN_FIELDS, "the plan")
    _check(os.path.isabs(d["input"]), "its input is not an absolute path")
    _check(d["input_bytes"] >= 0 and d["frames"] >= 1 and d["duration_s"] >= 0 and d["segment_seconds"] > 0,
           "a size, count or length is negative or zero")
    _check(all(_SHA256.fullmatch(d[k]) for k in ("input_head_sha256", "input_tail_sha256")),
           "the input's fingerprint is not two sha256 hex digests")
    _check(_TIME_BASE.fullmatch(d["time_base"]) is not None, f"its time base {d['time_base'][:20]!r} is not N/M with N, M > 0")
    segments = tuple(_segment(s, i) for i, s in enumerate(d["segments"]))
    _check_cover(segments, d["frames"])
    finished = tuple(_finished(f, len(segments)) for f in d["finished"])
    _check(len({f.index for f in finished}) == len(finished), "a segment is listed as finished twice")
    return SegmentPlan(**{**d, "segments": segments, "finished": finished, "time_base": str(Fraction(d["time_base"]))})


def _segment(s: Any, i: int) -> Segment:
    s = _fields(s, _SEGMENT_FIELDS, f"segment {i}")
    _check(s["index"] == i, f"segment {i}'s index is {s['index']}")
    _check(s["frames"] >= 1 and s["first_frame"] >= 0 and s["start_s"] >= 0, f"segment {i} has a negative or zero count")
    _check(s["context_pts"] <= s["start_pts"], f"segment {i}'s context starts after its first frame")
    end, tail = s["end_pts"], s["tail_pts"]
    _check(end is None or end > s["start_pts"], f"segment {i} ends before it starts")
    _check(tail is None or (end is not None and tail >= end), f"segment {i}'s tail is before its end")
    return Segment(**s)


def _check_cover(segments: tuple[Segment, ...], frames: int) -> None:
    """The segments follow each other from the clip's first frame to its end, and hold all its frames."""
    _check(bool(segments), "it lists no segments")
    _check(segments[0].first_frame == 0 and segments[0].context_pts == segments[0].start_pts,
           "its first segment does not start at the clip's first frame")
    for a, b in zip(segments, segments[1:]):
        _check(a.end_pts == b.start_pts and b.first_frame == a.first_frame + a.frames,
               f"segments {a.index} and {b.index} do not follow each other")
    last = segments[-1]
    _check(last.end_pts is None and last.tail_pts is None, f"its last segment ({last.index}) does not run to the clip's end")
    _check(last.first_frame + last.frames == frames, f"its segments hold {last.first_frame + last.frames} frames, "
           f"the plan counts {frames}")


def _finished(f: Any, n: int) -> FinishedFile:
    # "tally" is optional: a plan written before it was recorded still resumes (its kept segments uncounted)
    tally = f.get("tally") if isinstance(f, dict) else None
    f = _fields({k: v for k, v in f.items() if k != "tally"} if isinstance(f, dict) else f, _FINISHED_FIELDS,
                "a finished segment")
    _check(0 <= f["index"] < n and f["bytes"] > 0 and _SHA256.fullmatch(f["sha256"]) is not None,
           f"finished segment {f['index']} is not one of its segments, or its size or hash is malformed")
    try:  # counts another version wrote differently: the segment is kept uncounted, never hours of work refused
        counted = None if tally is None else _tally(tally, f["index"])
    except _Fault:
        counted = None
    return FinishedFile(**f, tally=counted)


def _tally(t: Any, index: int) -> Tally:
    where = f"finished segment {index}'s tally"
    t = _fields(t, _TALLY_FIELDS, where)
    lists = [k for k, kind in _TALLY_FIELDS.items() if kind == _LIST]
    _check(all(t[k] >= 0 for k in _TALLY_FIELDS if k not in lists), f"{where} has a negative count")
    _check(all(isinstance(r, str) for k in lists for r in t[k]), f"{where}'s reasons are not strings")
    return Tally(**{**t, **{k: tuple(t[k]) for k in lists}})
