"""What a clip will cost in each mode, said before it starts: seconds a face (measured on this machine by
the hardware check, else a built-in figure, labelled so) times the clip's frames.

A clip's faces are not known before it runs, so the table gives the time for one face in every frame;
each further face adds as much again. No web framework here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Seconds a face, generator only, on the project's CPU (AMD EPYC Zen 4 with native bfloat16, 2 threads,
# OpenVINO where auto runs it): docs/performance.md's per-face tables. Detection, pasting and encoding
# add to each frame; a CPU without native bfloat16 runs `balanced` in float32, at about `quality`'s time.
BUILT_IN_S_PER_FACE = {"low": 0.13, "balanced": 0.77, "quality": 1.57}
BUILT_IN_SOURCE = "built-in: the project's CPU (Zen 4, 2 threads)"


@dataclass(frozen=True)
class ModeEstimate:
    mode: str
    seconds_per_face: float
    source: str  # "measured on this machine (date)" or the built-in figure's origin


def measured_per_face(mode: str, device: str) -> tuple[float, str] | None:
    """(seconds a face, where from) from this machine's saved hardware check, or None (none valid here)."""
    try:
        from gpen_core.engine.profile_store import load_profile

        prof = load_profile(device)
    except Exception:  # noqa: BLE001 - an unreadable or older profile: the built-in figure says so instead
        return None
    row = prof.modes.get(mode) if prof is not None else None
    spf = getattr(row, "seconds_per_face", None)
    if row is None or not spf or getattr(row, "stepped_down_to", None) or getattr(row, "failed", None):
        return None
    return float(spf), f"measured on this machine ({prof.created[:10]})"


def estimates(modes: Sequence[str], device: str,
              measure: Callable[[str, str], tuple[float, str] | None] = measured_per_face) -> list[ModeEstimate]:
    """Each mode's seconds a face: measured where the hardware check has, else built in."""
    out = []
    for m in modes:
        got = measure(m, device)
        if got is None and m in BUILT_IN_S_PER_FACE:
            got = (BUILT_IN_S_PER_FACE[m], BUILT_IN_SOURCE)
        if got is not None:
            out.append(ModeEstimate(m, got[0], got[1]))
    return out


def estimate_markdown(frames: int, rows: Sequence[ModeEstimate]) -> str:
    """The table shown at upload: per mode, seconds a face and the clip's time with one face in every frame."""
    if frames <= 0 or not rows:
        return ""
    from gpen_core.presentation.video_tab import duration_text

    lines = [f"**Estimate** for {frames} frames with one face in each (each further face adds as much again; "
             "detection and encoding add a little per frame):", "",
             "| Mode | Seconds a face | This clip | From |", "|---|---|---|---|"]
    lines += [f"| {r.mode} | {r.seconds_per_face:.2f} | about {duration_text(frames * r.seconds_per_face)} | {r.source} |"
              for r in rows]
    return "\n".join(lines)
