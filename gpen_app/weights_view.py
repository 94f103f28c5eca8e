"""The Restore tab's weights box: what the panel says, and the Download button's work (on a shared server
without ``--allow-downloads``, the operator's command instead)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpen_core.errors import GPENError, InputError, WeightsError
from gpen_core.platform.meter import format_bytes
from gpen_app import panels as ui
from gpen_app import readiness
from gpen_app.app_state import Policy
from gpen_core.weights import lookup as weights
from gpen_core.weights.missing import download_command, files_text, manual_fix
from gpen_core.weights.registry import REGISTRY, unpinned_note
from gpen_app.user_paths import checked_model, models_folder_shown, public_message

DOWNLOADS_OFF = ("Downloads are off on this shared server: visitors cannot make it fetch files. The operator can run "
                 "`{command}`, or start the server with `--allow-downloads`.")
_STATE_TEXT = {"verified": "present, verified", "corrupt": "**corrupt**", "missing": "missing"}


def state_text(name: str, state: str) -> str:
    """'present, verified' only where a published sha256 was matched."""
    note = unpinned_note(name)
    return f"present ({note})" if state == "verified" and note else _STATE_TEXT[state]


def _file_line(name: str, files: Mapping[str, readiness.FileState]) -> str:
    f = files.get(name)
    if f is None:
        return f"- {name}: a checkpoint in the models folder, checked when you press Restore"
    size = "" if f.usable else f", {readiness.size_text(f.download_bytes, f.download_bytes_estimated)} to download"
    return f"- {state_text(name, f.state)}: {readiness.label(name)} (`{REGISTRY[name].filename}`{size})"


def weights_markdown(r: readiness.Readiness, files: Mapping[str, readiness.FileState], folder: str, *,
                     mode: str | None, message: str = "", upscaler: Sequence[str] = ()) -> str:
    """The weights panel: for ``mode`` None (auto) what runs now and what a download adds, else that mode's files;
    ``message`` goes under the list; ``upscaler``: the Upscale choice's unusable file, listed apart."""
    if mode is None:
        summary = readiness.summary(r, files)
        lines = ["#### Weights", f"**{ui.no_strike(summary[:1].upper() + summary[1:])}.**", ""]
        shown = r.modes[r.recommended].files
        if r.runs_now and r.runs_now != r.recommended:
            shown = tuple(dict.fromkeys(r.modes[r.runs_now].files + shown))
        lines.append(f"Files for {' and '.join(dict.fromkeys(m for m in (r.runs_now, r.recommended) if m))}:")
        # Download fetches the recommended set; a cheaper step is one Memory-mode click away.
        cheaper = [o for o in r.offers[:-1] if o.enables]
        if cheaper:
            lines[-1:-1] = [f"Smaller download: choose **{o.enables[0]}** as Memory mode and Download fetches only "
                            f"{ui.no_strike(readiness.files_text(o.files, files))}." for o in cheaper] + [""]
    else:
        m = r.modes[mode]
        head = f"**{mode}** has all its files." if m.ready else (
            f"**{mode}** cannot run yet: download {readiness.files_text(m.missing, files)}.")
        lines = ["#### Weights", head, "", f"Files for {mode}:"]
        shown = m.files
    lines += [_file_line(n, files) for n in shown]
    if upscaler:
        lines += ["", "For the Upscale choice:"] + [_file_line(n, files) for n in upscaler]
    others = [n for n in r.corrupt if n not in shown and n not in upscaler]
    if others:
        lines += ["", "Also corrupt (download again, or delete): " + ", ".join(readiness.label(n) for n in others)]
    lines += ["", f"Models folder: `{folder}`"]
    if message:
        lines += ["", message]
    return "\n".join(lines)


def download_button_label(r: Any, files: Mapping[str, Any], mode: str | None, upscaler: Sequence[str] = ()) -> str:
    """'Download ResNet-50 detector (109 MB) for quality' ('... and upscaling' with ``upscaler``'s file)."""
    names = readiness.download_for(r, mode)
    purposes = ([mode or r.recommended] if names else []) + (["upscaling"] if upscaler else [])
    return f"Download {readiness.files_text((*names, *upscaler), files)} for {' and '.join(purposes)}"


def all_weights_markdown(files: Mapping[str, readiness.FileState], folder: str) -> str:
    """Every checkpoint the registry knows and its state, as a list (a narrow column squeezes a table); a present
    file's size is its size on disk, in the units of the download sizes."""
    lines = [f"Models folder: `{folder}`", ""]
    for f in files.values():
        spec = REGISTRY[f.name]
        size = (readiness.size_text(f.on_disk_bytes, False) if f.on_disk_bytes is not None
                else readiness.size_text(f.download_bytes, f.download_bytes_estimated))
        lines.append(f"- **{f.name}** · {spec.kind} · `{spec.filename}` · {size} · {state_text(f.name, f.state)}")
    return "\n".join(lines)


def download_failed_text(error: str, remaining: Sequence[str], folder: str) -> str:
    """The panel after a failed download: the error, then every file still to fetch with the one command."""
    text = "**Download failed.** " + ui.markdown_text(error)
    if len(remaining) > 1:
        text += ("\n\n" + ui.markdown_text(f"Still to get: {files_text(remaining)}.\n{manual_fix(remaining, folder)}"))
    return text


@dataclass(frozen=True)
class WeightsView:
    panel: str  # Markdown
    download_label: str | None  # the Download button's label; None: no button (nothing to fetch, or not allowed)
    overview: str  # every checkpoint of the registry, Markdown


@dataclass(frozen=True)
class WeightsRequest:
    """The panel's inputs, already normalised (None: the mode's choice)."""

    mode: str | None  # None: auto
    model: str | None
    detector: str | None
    aligned: bool = False
    upscale: int = 1


def _assess(device: str, req: WeightsRequest, any_model_path: bool,
            ) -> tuple[readiness.Readiness, dict[str, readiness.FileState]]:
    try:
        model = checked_model(req.model, any_path=any_model_path)
    except InputError:  # an unusable Generator value is Restore's to refuse, with its message
        model = req.model
    return readiness.current(device, model=model, detector=req.detector, aligned=req.aligned)


def wanted(r: readiness.Readiness, files: dict, req: WeightsRequest) -> tuple[str, ...]:
    """What Download fetches: the set that enables the recommended (or chosen) mode, and the Upscale choice's file."""
    return readiness.download_for(r, req.mode) + readiness.upscaler_download(files, req.upscale)


def check_mode_ready(device: str, req: WeightsRequest, policy: Policy = Policy(), other_tab: bool = False) -> None:
    """Before Restore clears the result: WeightsError for a chosen mode whose files are missing, naming the Download
    button (or the operator's command); ``other_tab``: asked from the Video tab, so it says where the panel is."""
    if req.mode is None:
        return
    r, files = _assess(device, req, policy.any_model_path)
    names = readiness.download_for(r, req.mode)
    if not names:
        return
    label = download_button_label(r, files, req.mode, readiness.upscaler_download(files, req.upscale))
    where = f"on the Restore tab choose {req.mode} and press" if other_tab else "press"  # the panel lives there
    fix = (f"{where} “{label}” in the weights panel (under the options)" if policy.downloads_allowed
           else f"ask the operator to run “{download_command(names)}”")
    raise WeightsError(f"{req.mode} needs {readiness.files_text(names, files)}, not in the models folder yet: {fix}, "
                       "or choose another mode (auto picks one that runs). Your last result is kept.")


def weights_view(device: str, req: WeightsRequest, policy: Policy = Policy(), message: str = "") -> WeightsView:
    """The weights panel for ``req`` on this machine now, under the server's ``policy``."""
    r, files = _assess(device, req, policy.any_model_path)
    folder = models_folder_shown(policy.shared)
    upscaler = readiness.upscaler_download(files, req.upscale)
    names = wanted(r, files, req)
    if names and not policy.downloads_allowed and not message:
        message = ui.markdown_text(DOWNLOADS_OFF.format(command=download_command(names)))
    panel = weights_markdown(r, files, folder, mode=req.mode, message=message, upscaler=upscaler)
    label = download_button_label(r, files, req.mode, upscaler) if names and policy.downloads_allowed else None
    return WeightsView(panel, label, all_weights_markdown(files, folder))


def download(device: str, req: WeightsRequest, progress: Callable[[float, str], None], policy: Policy = Policy(),
             cancel: threading.Event | None = None) -> WeightsView:
    """Download what the panel offers, up to the first failure; the panel again with the outcome. InputError when
    ``policy`` forbids it; ``cancel`` (Stop) ends the file being fetched at its next chunk, nothing installed."""
    r, files = _assess(device, req, policy.any_model_path)
    names = wanted(r, files, req)
    if names and not policy.downloads_allowed:
        raise InputError(DOWNLOADS_OFF.format(command=download_command(names)))
    message = f"Downloaded {', '.join(names)}." if names else ""
    for i, name in enumerate(names):
        def report(done: int, total: int | None, i: int = i, name: str = name) -> None:
            shown = f"downloading {name}: {format_bytes(done)}" + (f" of {format_bytes(total)}" if total else "")
            progress((i + (done / total if total else 0.0)) / len(names), shown)

        try:
            weights.download(name, progress=report, cancel=cancel)
        except weights.DownloadCancelled:
            message = f"Download stopped; nothing was installed ({', '.join(names[i:])} still missing)."
            break
        except GPENError as exc:
            message = download_failed_text(public_message(str(exc)) if policy.shared else str(exc), names[i:],
                                           models_folder_shown(policy.shared))
            break
    return weights_view(device, req, policy, message)
