"""What the browser app shows, computed from a RestoreResult (no Gradio, nothing re-measured); RGB uint8 H×W×3."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import Any

import numpy as np
from PIL import Image

from gpen_core.platform.meter import format_bytes
from gpen_app.face_views import identity_lines
from gpen_app.overlay import boxes_record
from gpen_core.result import RestoreResult
from gpen_core.result_json import result_record

_RAM_METHOD = {
    "vmhwm": "kernel high-water mark (VmHWM), reset for this call: exact",
    "sampling": "psutil RSS sampled every 2 ms: can miss spikes shorter than that",
}
_STAGE_LABEL = {"load": "load model", "decode": "decode photo", "detect": "detect faces", "align": "align crops",
                "upscale": "upscale background", "restore": "restore faces", "paste": "paste back",
                "identity": "identity check", "encode": "encode result"}


def comparison_pair(before: np.ndarray, result: RestoreResult) -> tuple[np.ndarray, np.ndarray]:
    """(before, after) of equal size for the slider: ``before`` resized to the result, or for ``faces-only`` the
    input and restored crops as its face sheet."""
    if not result.mode.paste and result.faces and result.detector != "none":
        crops = [replace(f, restored=f.crop) for f in result.faces]
        from gpen_core.faces.paste import face_sheet

        cols = math.ceil(math.sqrt(len(crops)))  # a square-ish grid, not a 1×N strip
        return face_sheet(crops, cols=cols), face_sheet(list(result.faces), cols=cols)
    after = result.image
    if before.shape[:2] != after.shape[:2]:
        before = np.asarray(Image.fromarray(before).resize((after.shape[1], after.shape[0]), Image.Resampling.LANCZOS))
    return before, after


def file_name(source: str | None, fallback: str, mode: str, ext: str) -> str:
    """A download's name, ``<input stem>_gpen_<mode>.<ext>`` (``mode`` the one that ran), the stem in safe characters
    (``fallback`` when none is left)."""
    stem = PurePath(source).stem if source else fallback
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or fallback
    return f"{stem[:80]}_gpen_{mode}.{ext}"


def download_name(source: str | None, result: RestoreResult) -> str:
    """The photo's download name (:func:`file_name`); a faces-only sheet's ends ``_faces``."""
    suffix = "_faces" if not result.mode.paste and result.faces and result.detector != "none" else ""
    ext = "jpg" if result.output_format == "jpeg" else result.output_format
    return file_name(source, "photo", result.mode.name + suffix, ext)


def file_size_text(n: int) -> str:
    """'812.3 KB', '1.2 MB': as Gradio's file widget prints it (1024-based), so both show one figure."""
    units = ("B", "KB", "MB", "GB", "PB")
    x, i = float(n), 0
    while x > 1024 and i < len(units) - 1:
        x /= 1024
        i += 1
    return f"{x:.1f} {units[i]}"


def _encoded_size(encoded: bytes) -> tuple[int, int] | None:
    """(width, height) of the encoded result, from its header; None when there is none."""
    try:
        with Image.open(io.BytesIO(encoded)) as im:
            return im.size
    except Exception:  # not an image we can read back: the row then gives no output size
        return None


def no_strike(text: str) -> str:
    """``text`` with its '~' escaped: Markdown strikes through two estimates on one line ("~76 MB … ~284 MB")."""
    return text.replace("~", "\\~")


def mode_line(result: RestoreResult) -> str:
    """The mode that ran, what was asked, and why they differ."""
    line = f"**{result.mode.name}**"
    if result.requested_mode != result.mode.name:
        line += f" (asked for {result.requested_mode})"
    if result.mode_reason:
        line += f" — {no_strike(result.mode_reason)}"
    return line


def vram_text(result: RestoreResult) -> str:
    p = result.peaks
    if p.vram_allocated_bytes is None:
        return "no GPU" if not result.device.startswith("cuda") else "not measured"
    # Reserved leads, as on every "peak VRAM" (what the budget weighs); allocated is torch's live tensors in it.
    text = f"**{format_bytes(p.vram_reserved_bytes)}** reserved, {format_bytes(p.vram_allocated_bytes)} allocated"
    if p.baseline_vram_bytes is not None:
        text += f" (baseline {format_bytes(p.baseline_vram_bytes)} allocated)"
    return text


def ran_on(runtime: str, why: str) -> str:
    """A runtime and why it ran: "OpenVINO (measured faster here: …)" or "PyTorch (asked for)"."""
    name = "OpenVINO" if runtime == "openvino" else "PyTorch"
    return f"{name} ({why})" if why else name


def metrics_markdown(result: RestoreResult) -> str:
    """The measured panel beside every result (Markdown): memory, time, faces, what ran, notes."""
    p = result.peaks
    w, h = result.input_size
    pw, ph = result.processed_size
    size = f"{w}×{h}" + (f", processed at {pw}×{ph}" if (pw, ph) != (w, h) and pw else "")
    up = result.upscale
    if up is not None:
        size += f", upscaled ×{up.factor} to {pw * up.factor}×{ph * up.factor} ({up.tiles} tile{'s' if up.tiles > 1 else ''} of {up.tile} px, {up.dtype})"
    fmt = result.output_format.upper()
    out = _encoded_size(result.encoded)
    final = (pw * up.factor, ph * up.factor) if up is not None else ((pw, ph) if pw else (w, h))
    if out is not None and not result.mode.paste and result.faces:
        n = len(result.faces)
        fmt = f"sheet of {n} restored face{'s' if n > 1 else ''}, {out[0]}×{out[1]} {fmt}"
    elif out is not None and out != final:
        fmt = f"{out[0]}×{out[1]} {fmt}"
    networks = "; ".join(f"{r.network} {r.name}: {ran_on(r.runtime, r.reason)}" for r in result.runtimes)
    lines = [
        "### Measured for this request", "", "| Measure | Value |", "|---|---|",
        peak_ram_row(p, "the call"),
        f"| RAM method | {_RAM_METHOD.get(p.method, p.method)} |",
        f"| Peak VRAM | {vram_text(result)} |",
        f"| Faces | {len(result.faces)} |",
        f"| Mode | {mode_line(result)} |",
        f"| Device · dtype | {result.device} · {result.dtype} |",
        f"| Generator runtime | {ran_on(result.backend, result.backend_reason)} |",
        *([f"| Runtime per network | {networks} |"] if networks else []),
        f"| Checkpoint · detector | {result.checkpoint} · {result.detector} |",
        f"| Photo | {size} → {fmt}, {file_size_text(len(result.encoded)) if result.encoded else 'n/a'} |",
        "", "| Stage | Seconds |", "|---|---:|",
        *(f"| {_STAGE_LABEL.get(k, k)} | {s:.2f} |" for k, s in result.timings.stages().items() if s > 0),
        f"| **total** | {result.timings.total_s:.2f} |",
    ]
    return "\n".join(lines + identity_lines(result) + notes_lines(result.notes))


def peak_ram_row(p: Any, before: str) -> str:
    """The panels' Peak RAM row from a result's peaks, with the baseline ``before`` ("the call", "the clip")."""
    return (f"| Peak RAM | **{format_bytes(p.rss_bytes)}** (baseline {format_bytes(p.baseline_rss_bytes)} "
            f"before {before}, +{format_bytes(p.rss_delta_bytes)}) |")


def notes_lines(notes: Sequence[str]) -> list[str]:
    return ["", "**Notes** (everything changed from your request)", "",
            *([f"- {n}" for n in notes] if notes else ["- none: ran exactly as requested"])]


def as_record(result: RestoreResult) -> dict[str, Any]:
    """The API's JSON beside the images: the CLI's --json fields and the ``boxes`` the app draws."""
    return {**result_record(result), "boxes": boxes_record(result)}


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")
# A URL, or a `code span` as the engine's messages write commands.
_TOKEN = re.compile(r"(https?://[^\s<>()\"']+[^\s<>()\"'.,;:])|`([^`\n]+)`")


def markdown_text(message: str) -> str:
    """A plain multi-line message as Markdown: its Markdown characters escaped (``a_b_c.pth`` is no italics), URLs as
    links, `commands` kept as code spans, line breaks kept."""

    def line(text: str) -> str:
        out, pos = [], 0
        for m in _TOKEN.finditer(text):
            out.append(_MD_SPECIAL.sub(r"\\\1", text[pos : m.start()]))
            out.append(f"<{m.group(1)}>" if m.group(1) else f"`{m.group(2)}`")
            pos = m.end()
        out.append(_MD_SPECIAL.sub(r"\\\1", text[pos:]))
        return "".join(out)

    return "  \n".join(line(t) for t in message.splitlines())


def error_markdown(title: str, message: str) -> str:
    """What the result panel shows about a problem: named, then the message (a refused upload's panel ends here; a
    failed restore's adds what became of the result, :func:`nothing_restored`)."""
    return f"### ⚠ {title}\n\n{markdown_text(message)}"


def nothing_restored(panel: str, previous: str | None) -> str:
    """A failed restore's ``panel`` and its outcome: nothing restored, and ``previous`` (what became of the last
    result) only where there was one: on a fresh page "the previous result was cleared" was untrue."""
    return f"{panel}\n\n*Nothing was restored{f': {previous}' if previous else ''}.*"
