"""The Restore tab's weights box, one call each: what the panel says, and the Download button's work. On a
shared server without ``--allow-downloads`` the panel names the operator's command instead of a button.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpen_core.errors import GPENError, InputError, WeightsError
from gpen_core.platform.meter import format_bytes
from gpen_core.presentation import panels as ui
from gpen_core.presentation import readiness
from gpen_core.presentation.app_state import Policy
from gpen_core.weights import lookup as weights
from gpen_core.weights.user_paths import checked_model

DOWNLOADS_OFF = ("Downloads are off on this shared server: visitors cannot make it fetch files. The operator can run "
                 "`python -m gpen_core download {names}`, or start the server with `--allow-downloads`.")


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


def _assess(device: str, req: WeightsRequest, any_model_path: bool):
    try:
        model = checked_model(req.model, any_path=any_model_path)
    except InputError:  # an unusable Generator value is Restore's to refuse, with its message
        model = req.model
    statuses = weights.status()
    r, files = readiness.current(device, model=model, detector=req.detector, aligned=req.aligned)
    return r, files, statuses


def wanted(r: readiness.Readiness, files: dict, req: WeightsRequest) -> tuple[str, ...]:
    """What Download fetches: the set that enables the recommended (or chosen) mode, and the Upscale choice's file."""
    return readiness.download_for(r, req.mode) + readiness.upscaler_download(files, req.upscale)


def check_mode_ready(device: str, req: WeightsRequest, policy: Policy = Policy(), other_tab: bool = False) -> None:
    """Before Restore clears the page's result: a chosen mode (not auto) whose files are missing is refused with
    :class:`WeightsError`, naming the Download button as the page shows it (or the operator's command).
    ``other_tab``: asked from a tab without the panel (the Video tab), which then says where it is."""
    if req.mode is None:
        return
    r, files, _ = _assess(device, req, policy.any_model_path)
    names = readiness.download_for(r, req.mode)
    if not names:
        return
    label = ui.download_button_label(r, files, req.mode, readiness.upscaler_download(files, req.upscale))
    where = f"on the Restore tab choose {req.mode} and press" if other_tab else "press"  # the panel lives there
    fix = (f"{where} “{label}” in the weights panel (under the options)" if policy.downloads_allowed
           else f"ask the operator to run “python -m gpen_core download {' '.join(names)}”")
    raise WeightsError(f"{req.mode} needs {readiness.files_text(names, files)}, not in the models folder yet: {fix}, "
                       "or choose another mode (auto picks one that runs). Your last result is kept.")


def weights_view(device: str, req: WeightsRequest, policy: Policy = Policy(), message: str = "") -> WeightsView:
    """The weights panel for ``req`` on this machine now, under the server's ``policy``."""
    r, files, statuses = _assess(device, req, policy.any_model_path)
    folder = str(weights.models_dir())
    upscaler = readiness.upscaler_download(files, req.upscale)
    names = wanted(r, files, req)
    if names and not policy.downloads_allowed and not message:
        message = ui.markdown_text(DOWNLOADS_OFF.format(names=" ".join(names)))
    panel = ui.weights_markdown(r, files, statuses, folder, mode=req.mode, message=message, upscaler=upscaler)
    label = ui.download_button_label(r, files, req.mode, upscaler) if names and policy.downloads_allowed else None
    return WeightsView(panel, label, ui.all_weights_markdown(statuses, folder))


def download(device: str, req: WeightsRequest, progress: Callable[[float, str], None], policy: Policy = Policy(),
             cancel: threading.Event | None = None) -> WeightsView:
    """Download what the panel offers (stopping at the first failure), then the panel again with the outcome.
    InputError when ``policy`` does not allow downloads; ``cancel`` (the Stop button) stops the file being
    fetched at its next chunk, nothing installed."""
    r, files, _ = _assess(device, req, policy.any_model_path)
    names = wanted(r, files, req)
    if names and not policy.downloads_allowed:
        raise InputError(DOWNLOADS_OFF.format(names=" ".join(names)))
    message = f"Downloaded {', '.join(names)}." if names else ""
    for i, name in enumerate(names):
        def report(done: int, total: int | None, i: int = i, name: str = name) -> None:
            of = f" of {format_bytes(total)}" if total else ""
            progress((i + (done / total if total else 0.0)) / len(names), f"downloading {name}: {format_bytes(done)}{of}")

        try:
            weights.download(name, progress=report, cancel=cancel)
        except weights.DownloadCancelled:
            message = f"Download stopped; nothing was installed ({', '.join(names[i:])} still missing)."
            break
        except GPENError as exc:
            message = ui.download_failed_text(str(exc), names[i:], str(weights.models_dir()))
            break
    return weights_view(device, req, policy, message)
