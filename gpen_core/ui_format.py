"""What the browser app shows, computed from a RestoreResult: pure functions, no Gradio.

Everything here reads the result the engine returned and never re-measures or
recomputes a figure: the panel is the RestoreResult, formatted. Images are RGB
uint8 H×W×3 in and out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import Any, Protocol

import numpy as np

from .meter import format_bytes
from .modes import AUTO, MODES, MemoryMode
from .restorer import DETECTOR_WEIGHTS, face_sheet
from .result import Face, RestoreResult

AUTO_HINT = "picks the best mode that fits the memory free now, per photo"

_RAM_METHOD = {
    "vmhwm": "kernel high-water mark (VmHWM), reset for this call: exact",
    "sampling": "psutil RSS sampled every 2 ms: can miss spikes shorter than that",
}
_STAGE_LABEL = {
    "load": "load model",
    "decode": "decode photo",
    "detect": "detect faces",
    "align": "align crops",
    "restore": "restore faces",
    "paste": "paste back",
    "encode": "encode result",
}


class WeightInfo(Protocol):
    """The fields of ``gpen_core.weights.WeightStatus`` this module reads."""

    name: str
    filename: str
    kind: str
    present: bool


# ------------------------------------------------------------------ choices


def mode_choices() -> list[tuple[str, str]]:
    """(label, value) pairs for the memory-mode radio: ``auto`` first, each with its one-line hint."""
    return [(f"{AUTO} — {AUTO_HINT}", AUTO)] + [(f"{m.name} — {m.hint}", m.name) for m in MODES.values()]


# ------------------------------------------------------------- result views


def comparison_pair(before: np.ndarray, result: RestoreResult) -> tuple[np.ndarray, np.ndarray]:
    """(before, after) of equal size for the before/after slider.

    ``before`` is the decoded input photo. Modes that paste compare the photo with
    the restored photo; when the input was shrunk first, ``before`` is shrunk the
    same way so the two line up. ``faces-only`` compares the aligned input crops
    with the restored crops, laid out like the downloadable face sheet.
    """
    if not result.mode.paste and result.faces and result.detector != "none":
        crops = [replace(f, restored=f.crop) for f in result.faces]
        return face_sheet(crops), face_sheet(list(result.faces))
    after = result.image
    if before.shape[:2] != after.shape[:2]:
        from PIL import Image

        before = np.asarray(Image.fromarray(before).resize((after.shape[1], after.shape[0]), Image.Resampling.LANCZOS))
    return before, after


def face_pairs(result: RestoreResult, gap: int = 6) -> list[tuple[np.ndarray, str]]:
    """One gallery item per face: the aligned input crop beside the restored crop, with a caption."""
    items = []
    for i, face in enumerate(result.faces, 1):
        items.append((side_by_side(face.crop, face.restored, gap), face_caption(i, face)))
    return items


def side_by_side(left: np.ndarray, right: np.ndarray, gap: int = 6) -> np.ndarray:
    """``left`` and ``right`` (same height) in one RGB image, separated by a white gap."""
    h = max(left.shape[0], right.shape[0])
    out = np.full((h, left.shape[1] + gap + right.shape[1], 3), 255, np.uint8)
    out[: left.shape[0], : left.shape[1]] = left
    out[: right.shape[0], left.shape[1] + gap :] = right
    return out


def face_caption(index: int, face: Face) -> str:
    x0, y0, x1, y1 = face.box
    return f"face {index} · score {face.score:.2f} · {x1 - x0:.0f}×{y1 - y0:.0f} px"


def download_name(source: str | None, result: RestoreResult) -> str:
    """File name for the downloadable: ``<input stem>_gpen_<mode>.<ext>`` (safe characters only)."""
    stem = PurePath(source).stem if source else "photo"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "photo"
    suffix = "_faces" if not result.mode.paste and result.faces and result.detector != "none" else ""
    ext = "jpg" if result.output_format == "jpeg" else result.output_format
    return f"{stem[:80]}_gpen_{result.mode.name}{suffix}.{ext}"


# ---------------------------------------------------------------- the panel


def file_size_text(n: int) -> str:
    """A download's size: kB below a megabyte (format_bytes would round it to 0 MB)."""
    return f"{n / 1e3:.0f} kB" if n < 1e6 else format_bytes(n)


def mode_line(result: RestoreResult) -> str:
    """The mode that ran, what was asked, and why they differ."""
    line = f"**{result.mode.name}**"
    if result.requested_mode != result.mode.name:
        line += f" (asked for {result.requested_mode})"
    if result.mode_reason:
        line += f" — {result.mode_reason}"
    return line


def vram_text(result: RestoreResult) -> str:
    p = result.peaks
    if p.vram_allocated_bytes is None:
        return "no GPU" if not result.device.startswith("cuda") else "not measured"
    text = f"**{format_bytes(p.vram_allocated_bytes)}** allocated, {format_bytes(p.vram_reserved_bytes)} reserved"
    if p.baseline_vram_bytes is not None:
        text += f" (baseline {format_bytes(p.baseline_vram_bytes)})"
    return text


def stage_rows(result: RestoreResult) -> list[tuple[str, float]]:
    """(stage, seconds) for every stage that took time, then the total."""
    rows = [(_STAGE_LABEL.get(k, k), v) for k, v in result.timings.stages().items() if v > 0]
    return rows + [("total", result.timings.total_s)]


def metrics_markdown(result: RestoreResult) -> str:
    """The measured panel beside every result (Markdown): memory, time, faces, what ran, notes."""
    p = result.peaks
    w, h = result.input_size
    pw, ph = result.processed_size
    size = f"{w}×{h}" + (f", processed at {pw}×{ph}" if (pw, ph) != (w, h) and pw else "")
    fmt = "JPEG" if result.output_format == "jpeg" else result.output_format.upper()
    lines = [
        "### Measured for this request",
        "",
        "| Measure | Value |",
        "|---|---|",
        f"| Peak RAM | **{format_bytes(p.rss_bytes)}** (baseline {format_bytes(p.baseline_rss_bytes)} before the call, "
        f"+{format_bytes(p.rss_delta_bytes)}) |",
        f"| RAM method | {_RAM_METHOD.get(p.method, p.method)} |",
        f"| Peak VRAM | {vram_text(result)} |",
        f"| Faces | {len(result.faces)} |",
        f"| Mode | {mode_line(result)} |",
        f"| Device · dtype | {result.device} · {result.dtype} |",
        f"| Checkpoint · detector | {result.checkpoint} · {result.detector} |",
        f"| Photo | {size} → {fmt}, {file_size_text(len(result.encoded)) if result.encoded else 'n/a'} |",
        "",
        "| Stage | Seconds |",
        "|---|---:|",
    ]
    lines += [f"| {'**total**' if name == 'total' else name} | {s:.2f} |" for name, s in stage_rows(result)]
    lines += ["", "**Notes** (everything changed from your request)", ""]
    lines += [f"- {n}" for n in result.notes] if result.notes else ["- none: ran exactly as requested"]
    return "\n".join(lines)


# -------------------------------------------------------------- weights


def needed_weights(mode: MemoryMode, model: str | None = None, detector: str | None = None, *, aligned: bool = False) -> list[str]:
    """Registry names (or a checkpoint path) that a request in ``mode`` loads.

    ``model``/``detector`` are the Advanced overrides; an aligned face skips detection.
    ParseNet is optional (a rectangle mask is used without it) and is not listed.
    """
    names = [model or mode.model]
    if not aligned:
        names.append(DETECTOR_WEIGHTS[detector or mode.detector])
    return names


def missing_weights(needed: Iterable[str], statuses: Sequence[WeightInfo]) -> list[str]:
    """The registry names in ``needed`` whose files are not in the models folder.

    Names that are not in the registry (a checkpoint path typed into Advanced) are
    not listed: they cannot be downloaded and the restore says if the file is missing.
    """
    present = {s.name: s.present for s in statuses}
    return [n for n in needed if n in present and not present[n]]


def weights_markdown(
    statuses: Sequence[WeightInfo],
    needed: Sequence[str],
    folder: str,
    *,
    heading: str = "",
    message: str = "",
) -> str:
    """The weights panel: which checkpoints this mode needs and whether each is present.

    ``heading`` says which mode is meant (``auto`` names the mode it would pick);
    ``message`` is shown under the table (a download's outcome, or the error
    message with the manual fix when downloading is impossible).
    """
    by_name = {s.name: s for s in statuses}
    missing = missing_weights(needed, statuses)
    lines = [heading] if heading else []
    if missing:
        files = ", ".join(f"`{by_name[n].filename}`" for n in missing)
        lines.append(f"**Missing for this mode:** {files}. Press *Download weights*, or put the files in `{folder}`.")
    else:
        lines.append(f"All weights this mode needs are in `{folder}`.")
    lines.append("")
    for name in needed:
        s = by_name.get(name)
        if s is None:
            lines.append(f"- {name}: a checkpoint path, checked when you press Restore")
        else:
            lines.append(f"- {'present' if s.present else '**missing**'}: {name} (`{s.filename}`)")
    if message:
        lines += ["", message]
    return "\n".join(lines)


def all_weights_markdown(statuses: Sequence[WeightInfo], folder: str) -> str:
    """Every checkpoint the registry knows, present or not (the collapsed overview)."""
    lines = [f"Models folder: `{folder}`", "", "| Weights | Kind | File | Status |", "|---|---|---|---|"]
    for s in statuses:
        size = getattr(s, "size_bytes", None)
        state = "present" if s.present else "missing"
        if s.present and getattr(s, "verified", None) is False:
            state = "present, checksum not verified"
        lines.append(f"| {s.name} | {s.kind} | `{s.filename}`{f' ({file_size_text(size)})' if size else ''} | {state} |")
    return "\n".join(lines)


def download_progress_text(name: str, done: int, total: int | None) -> str:
    if total:
        return f"downloading {name}: {format_bytes(done)} of {format_bytes(total)}"
    return f"downloading {name}: {format_bytes(done)}"


def as_record(result: RestoreResult) -> dict[str, Any]:
    """The JSON summary the API returns beside the images (same fields as the CLI's --json)."""
    from .cli import result_record

    return result_record(result)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def markdown_text(message: str) -> str:
    """A plain multi-line message (an error with paths and file names) as literal Markdown.

    Markdown characters are escaped so ``detection_mobilenet0.25_Final.pth`` is not
    turned into italics, and every line break is kept.
    """
    lines = [_MD_SPECIAL.sub(r"\\\1", line) for line in message.splitlines()]
    return "  \n".join(lines)


# ----------------------------------------------------------- hardware check

HARDWARE_INTRO = (
    "#### How much memory do I need?\n"
    "Measures every memory mode on **this** machine with the engine's own meter: one aligned "
    "512×512 face, a 12-megapixel photo with one face and a group photo, each mode in a fresh "
    "process. Without the weights it runs the exact networks with random weights (memory and "
    "time do not depend on the values), so you learn what fits before downloading anything. "
    "About a minute on a 2-core CPU. The result is saved in the models folder and `auto` uses it."
)


def profile_markdown(profile: Any, free: Any = None) -> str:
    """The hardware check as Markdown: recommendation first, then the table, machine facts and notes."""
    from . import profile as prof

    lines = [
        f"**Recommendation:** {prof.recommendation(profile, free)}",
        "",
        prof.format_table(profile, free),
        "",
        f"Measured {profile.created} on {prof.machine_line(profile)}.",
        "Peaks are above the idle process, the worst of the three workloads; *fits?* compares them with "
        "the memory free now, less a 20 % safety margin.",
        "",
    ]
    lines += [f"- {markdown_text(n)}" for n in profile.notes]
    return "\n".join(lines)


def profile_chart(profile: Any) -> Any:
    """Peak memory per mode as a long table for a bar chart: columns mode, memory ("RAM"/"VRAM"), MB."""
    import pandas as pd

    from . import profile as prof

    rows = []
    for r in prof.chart_rows(profile):
        rows.append({"mode": r["mode"], "memory": "RAM", "MB": r["peak RAM MB"]})
        if r["peak VRAM MB"] is not None:
            rows.append({"mode": r["mode"], "memory": "VRAM", "MB": r["peak VRAM MB"]})
    return pd.DataFrame(rows, columns=["mode", "memory", "MB"])
