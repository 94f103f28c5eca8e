"""The Hardware check tab, one call per button: measure every mode, the saved measurement, the tips; each
returns what the tab shows (Markdown, the chart's rows, the button's state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gpen_core.engine import profile_store as store
from gpen_core.errors import InputError
from gpen_core.hwcheck import advice, report, runner
from gpen_core.platform import zerogpu
from gpen_core.presentation import panels as ui
from gpen_core.presentation import readiness
from gpen_core.progress import Progress

CHECK_OFF = ("The Hardware check is off on this shared server: it keeps the CPU busy for minutes. "
             "Run it on your own machine (`python -m gpen_core profile`), or start this server with "
             "`--allow-hardware-check`.")
COMMAND = "the app's Hardware check tab"
TIPS_INTRO = ("The usual advice for fitting GPEN in memory, each tip measured on this machine as a before/after pair "
              "with this engine: helps, no effect, hurts, or not measurable here (and why).")
TIPS_NOT_MEASURED = ("*Not measured on this machine yet.* Press the button (about 10 minutes on 2 cores; each tip runs "
                     "twice in fresh processes), or run `python benchmarks/advice.py --save`.")


@dataclass(frozen=True)
class SavedCheck:
    """The tab on page load: the report (or why there is none), the chart rows, the button."""

    markdown: str
    chart: Any  # the chart's rows (ui.profile_chart), None without a measurement
    button_label: str
    button_enabled: bool


def refusal(allowed: bool) -> str | None:
    """Why the check cannot run here (ZeroGPU, or a shared server without the operator's flag), or None."""
    if zerogpu.on_zerogpu():
        return zerogpu.HARDWARE_CHECK_UNAVAILABLE
    return None if allowed else CHECK_OFF


def verdict(device: str) -> str:
    """The recommendation from the files present and the saved measurement (readiness reads both)."""
    r, files = readiness.current(device)
    return readiness.summary(r, files)


def run_check(device: str, allowed: bool, progress: Progress, restores_done: Callable[[], int]) -> tuple[str, Any]:
    """Measure every memory mode (saved for ``auto``): (report Markdown, chart rows). InputError when :func:`refusal`
    says no; ``restores_done`` counts this process's finished restores, to say when some ran beside the check."""
    why = refusal(allowed)
    if why:
        raise InputError(why)
    last = ui.last_check_seconds(store.load_profile(device, any_machine=False))
    last_text = f" (the last check took {last:.0f} s)" if last is not None else ""
    t0, done0 = time.monotonic(), restores_done()
    # The progress line: the step (with the time left), the time so far and the last check's time when known.
    prof = runner.run_profile(device=device, command=COMMAND,
                              progress=lambda f, d: progress(f, f"{d} · {time.monotonic() - t0:.0f} s so far{last_text}"))
    md = _report(prof, device)
    if device.startswith("cuda"):  # "does my GPU set-up work?": every network built and run on it
        from gpen_core.hwcheck.selfcheck import run_selfcheck

        md += "\n\n" + ui.markdown_text(run_selfcheck(device).summary())
    ran = restores_done() - done0
    if ran > 0:
        md += (f"\n- {ran} restore(s) ran during the check: its memory figures hold "
               "(each mode ran in its own process), its times may read high.")
    return md, ui.profile_chart(prof)


def saved_check(device: str, allowed: bool) -> SavedCheck:
    """The saved measurement for this machine when one is still valid, and the button's state."""
    prof = store.load_profile(device)
    why = refusal(allowed)
    if why is None:
        label, enabled = "Measure every mode on this machine", True
        when = ui.check_duration_text(ui.last_check_seconds(prof) if prof else None)
    else:
        label = ("Hardware check: not available on ZeroGPU" if zerogpu.on_zerogpu()
                 else "Hardware check: off on this shared server")
        enabled, when = False, why
    if prof is None:
        md = (f"{when}\n\n**Recommendation** (built-in estimates until the check has run here): {ui.no_strike(verdict(device))}."
              "\n\n*No measurement for this machine yet (or the machine, versions or weights changed since).*")
        return SavedCheck(md, None, label, enabled)
    return SavedCheck(f"{when}\n\n" + _report(prof, device), ui.profile_chart(prof), label, enabled)


def _report(prof: Any, device: str) -> str:
    """A measurement as Markdown, with its torch-vs-OpenVINO section when it has one (what auto runs)."""
    md = ui.profile_markdown(prof, verdict(device), files=report.files_here(prof))
    return md + ("\n\n" + report.backends_section(prof) if prof.backends else "")


def run_tips(allowed: bool, progress: Progress) -> str:
    """The article's memory tips measured on this machine, saved for the next visit; the table."""
    why = refusal(allowed)
    if why:
        raise InputError(why)
    report = replace(advice.measure_tips(progress=progress), command=COMMAND)
    advice.save_report(report)
    return advice.format_table(report)


def saved_tips() -> str:
    """The tips table measured on this machine before, or how to measure it."""
    report = advice.load_report()
    if report is None:
        return TIPS_NOT_MEASURED
    return f"Measured {report.created}.\n\n" + advice.format_table(report)
