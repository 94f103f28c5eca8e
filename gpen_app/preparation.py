"""The app's OpenVINO conversions after start (so a visitor's first restore waits for none) and the page's line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpen_core.engine.prepare import BackgroundPreparation
from gpen_core.platform import zerogpu
from gpen_app.user_paths import public_message

REFRESH_S = 2.0  # seconds between the page's status reads while conversions run


def start_background(restorer: Callable[[], Any], *, remote: bool = False) -> BackgroundPreparation | None:
    """Start converting for ``restorer()``'s models folder in the background, or None where this process runs no
    restore on the CPU (``remote``: a Ray deployment; ZeroGPU; CUDA)."""
    if remote or zerogpu.on_zerogpu():
        return None
    r = restorer()
    if r.device != "cpu":  # OpenVINO runs the CPU's networks only
        return None
    prep = BackgroundPreparation(r.models_dir)
    prep.start()
    return prep


def running(prep: BackgroundPreparation | None) -> bool:
    """Whether the page should keep asking for the status."""
    return prep is not None and not prep.done.is_set()


def status_markdown(prep: BackgroundPreparation | None, public: bool = False) -> str:
    """The page's line: what is being converted, what is ready or could not be; empty without a conversion here.
    ``public``: paths as error messages show them, ``<models folder>`` escaped (the page would hide a bare tag)."""
    line = _status_line(prep)
    return public_message(line).replace("<", "\\<").replace(">", "\\>") if public else line


def _status_line(prep: BackgroundPreparation | None) -> str:
    if prep is None:
        return ""
    if not prep.done.is_set():
        what = prep.status if prep.status != "not started" else "OpenVINO: finding the networks to convert"
        return f"*⏳ {what}. This happens once, after the app starts.*"
    report: Any = prep.report
    if report is None:  # the thread ended without a report: it raised (the server log has the traceback)
        return "*OpenVINO preparation stopped with an error (see the server log): restores run on torch.*"
    ready = report.converted + report.cached
    lines = [f"OpenVINO ready for {', '.join(ready)}."] if ready else []
    lines += [f"Could not convert {f}: that network runs on torch." for f in report.failed]
    return "  \n".join(f"*{line}*" for line in lines)
