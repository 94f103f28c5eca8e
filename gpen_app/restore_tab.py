"""The Restore tab's photo side: an upload's preview, the Upscale line, a result's outputs (RGB uint8 H×W×3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import gradio as gr
import numpy as np

from gpen_core.engine import budget
from gpen_core.errors import InputError, Stopped
from gpen_core.images.decode import decode_image, decoded_size, shrink_to_max_side
from gpen_core.images.outputs import save_result
from gpen_core.modes import AUTO, MODES
from gpen_core.options import RestoreOptions
from gpen_core.platform.meter import format_bytes
from gpen_app import panels as ui
from gpen_app import readiness
from gpen_app.app_state import Policy
from gpen_core.cli_words import photo_header
from gpen_app.face_views import face_pairs
from gpen_app.messages import TITLES, AlreadyShown, ShownError, shown_error, toast_seconds
from gpen_core.result import RestoreResult
from gpen_core.upscale import tiles
from gpen_app.user_paths import models_folder_shown, public_message

PREVIEW_SIDE = 1024  # the before-view shown on upload, from our own decoder
STOPPED = dict(TITLES)[Stopped]  # a Stop's title: how its error is known again once the engine call returned it shown


class Preview(NamedTuple):
    """An upload as our decoder sees it: the before-view (None when refused) and the panel's Markdown."""

    before: np.ndarray | None
    markdown: str


def max_faces_field(value: float | None) -> int:
    """The Max faces field as RestoreOptions.max_faces: InputError when it is empty (below 1: RestoreOptions says)."""
    if value is None:
        raise InputError("Max faces is empty: enter how many faces to restore at most (1 or more).")
    return int(value)


def preview(path: str, public: bool = False) -> Preview:
    """``path`` decoded at most :data:`PREVIEW_SIDE` px by our decoder, and the panel: its size, format and notes, or
    the problem (``public``: as :func:`~gpen_app.messages.shown_error` says it)."""
    try:
        decoded = decode_image(path, reduce_to=PREVIEW_SIDE)
    except Exception as exc:  # a GPENError names the problem; a bug is logged with its trace, one line shown
        shown = shown_error(exc, doing="Reading the file", names={path: Path(path).name}, public=public)
        return Preview(None, shown.panel)
    rgb = shrink_to_max_side(decoded.rgb, PREVIEW_SIDE)[0]
    w, h = decoded.original_size
    lines = ["### Ready to restore", "", f"{w}×{h} {decoded.format}, as our decoder reads it (shown in the slider). "
             "Press **Restore**.", ""]
    lines += [f"- {ui.markdown_text(n)}" for n in preview_notes(decoded, rgb.shape[1], rgb.shape[0])]
    return Preview(rgb, "\n".join(lines))


def preview_notes(decoded: Any, shown_w: int, shown_h: int) -> tuple[str, ...]:
    """The decoder's notes, the preview's own shrink said as such: the restore decodes the whole photo."""
    w, h = decoded.upright_size  # the restore sees it upright
    notes = tuple(n for n in decoded.notes if n not in decoded.shrinks)
    if (shown_w, shown_h) == (w, h):
        return notes
    sizes = {m.name: decoded_size(decoded.format, (w, h), m.max_side) for m in MODES.values()}
    shrinking = [f"{name} to {'×'.join(map(str, s))}" for name, s in sizes.items() if s != (w, h)]
    line = f"shown here at {shown_w}×{shown_h} to load quickly; Restore reads all {w}×{h} pixels"
    return notes + ((line + (f" (shrunk by {', '.join(shrinking)}: the result says so)" if shrinking else "")),)


def upscale_text(image: str | None, upscale: int, mode: str | None, device: str, models: Any = None,
                 policy: Policy = Policy()) -> str:
    """Before Restore: the Upscale line (result size, extra memory) and a missing upscaler file, said as the weights
    panel says it under ``policy``."""
    if upscale <= 1:
        return ""
    folder = models_folder_shown(policy.shared)
    note = readiness.upscaler_note(upscale, readiness.current_files(), folder,
                                   policy.downloads_allowed)
    return "\n\n".join(t for t in (_upscale_line(image, upscale, mode, device, models), note) if t)


def _upscale_line(image: str | None, factor: int, mode: str | None, device: str, models: Any = None) -> str:
    """'**Upscale ×2:** result W×H; extra memory about N (estimate, …)', or why it is refused; ``auto`` resolved as a
    restore would (``models``, the app's ModelCache, passes over modes missing files)."""
    if not image:
        return f"×{factor}: upload a photo to see the result size."
    header = photo_header(image)
    if header is None:
        return ""
    fmt, size = header
    w, h = size
    name = mode or AUTO
    if name == AUTO:
        opts = RestoreOptions(upscale=factor)
        available = (lambda m: models.weights_present(m, opts, False)) if models is not None else None
        models_dir = getattr(models, "models_dir", None)
        name = budget.choose(device, size, models_dir, available=available, work=budget.Work(upscale=factor)).mode.name
    else:  # a mode asked for decodes a big JPEG at its DCT scale, as the restore will (auto decodes it whole)
        w, h = decoded_size(fmt, size, MODES[name].max_side)
    p = tiles.preview(w, h, factor, name)
    if p.problem:
        return f"**Upscale ×{factor}:** {p.problem}"
    if not MODES[name].paste:
        return f"**Upscale ×{factor}:** {name} returns the restored faces only: the background is not upscaled."
    picked = f"; {name}, the mode auto picks now" if (mode or AUTO) == AUTO else ""
    return (f"**Upscale ×{factor}:** result {p.out_size[0]}×{p.out_size[1]}; extra memory about "
            f"{format_bytes(p.extra_bytes)} (estimate, not yet measured; {p.tiles} tiles of {p.tile} px{picked}).")


class RestoreView(NamedTuple):
    """What one restore shows, in the order of the app's outputs."""

    pair: tuple[np.ndarray, np.ndarray]  # the slider's before / after, lined up
    download: str  # path of the full-resolution file
    markdown: str  # the measured panel
    faces: list[tuple[np.ndarray, str]]  # (original | restored, caption) per face
    record: dict[str, Any]  # the JSON record


def restore_view(source: str, result: RestoreResult, results_dir: Path, max_age_s: float, public: bool = False) -> RestoreView:
    """The outputs of ``result``, its bytes saved under ``results_dir``. "Before" is the engine's decoded input:
    decoding again here, outside the meter, would push the peak past the reported one. ``public`` (a shared server):
    a checkpoint named by path (the Generator field's file) by its folder's role, as error messages name it."""
    if result.before is None:
        raise ValueError("the engine returned a result without its decoded input (RestoreResult.before)")
    path = save_result(results_dir, ui.download_name(source, result), result.encoded, max_age_s=max_age_s)
    panel, record = result, result
    if public:  # in the Markdown, the role's brackets escaped: the page renders HTML, and would hide a bare tag
        panel = _by_role(result, lambda s: public_message(s).replace("<", "\\<").replace(">", "\\>"))
        record = _by_role(result, public_message)
    return RestoreView(ui.comparison_pair(result.before, result), str(path), ui.metrics_markdown(panel),
                       face_pairs(result), ui.as_record(record))


def _by_role(result: RestoreResult, shown: Callable[[str], str]) -> RestoreResult:
    """``result`` with its generator's name (a path, from the Generator field) as ``shown`` writes it, in the
    sentences that name it too (the runtime's reason, the notes)."""
    return replace(result, checkpoint=shown(result.checkpoint), notes=tuple(map(shown, result.notes)),
                   mode_reason=shown(result.mode_reason), backend_reason=shown(result.backend_reason),
                   runtimes=tuple(replace(r, name=shown(r.name), reason=shown(r.reason)) for r in result.runtimes))


def crop_mode_photo(image: str | None, record: dict[str, Any] | None) -> np.ndarray | None:
    """The uploaded photo as the preview decodes it, for a mode that returns face crops (the faces are drawn on it);
    else None."""
    mode = MODES.get(str((record or {}).get("mode")))
    if not image or mode is None or mode.paste:
        return None
    return preview(image).before


class StopOutcome:
    """The innermost context of a photo restore: its visitor's own Stop (raised as :class:`Stopped`, or returned by
    the engine call as its shown error) is an outcome, as a clip's is: a pop-up that closes by itself (gr.Info headed
    "Stopped", not an error's), the panel saying what happened, the result left empty (the press cleared the last
    one). After the block, ``outputs`` holds the handler's return value; every other error goes on unchanged."""

    def __init__(self, public: bool = False) -> None:
        self.public = public
        self.outputs: tuple[Any, Any, str, list[Any], Any] | None = None

    def __enter__(self) -> StopOutcome:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        shown: ShownError | None = exc.shown if isinstance(exc, AlreadyShown) else None
        if isinstance(exc, Stopped):
            shown = shown_error(exc, public=self.public)
        if shown is None or shown.title != STOPPED:
            return False
        gr.Info(shown.text, duration=toast_seconds(shown.text), title=shown.title)
        self.outputs = (None, None, ui.markdown_text(shown.text), [], None)
        return True


def failure_panel(taken: str | None, had_result: bool) -> str:
    """The panel after a failed restore: its error's words (``taken``: what the pop-up said; none when the page
    learnt of it otherwise) and what became of the result (``had_result``: the press cleared one from the page)."""
    panel = taken or ui.error_markdown("Restore failed", "See the message that popped up.")
    return ui.nothing_restored(panel, "the previous result was cleared" if had_result else None)
