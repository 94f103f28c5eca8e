"""The Hardware check tab, one call per button, each returning what the tab shows."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from gpen_core.engine import profile_store as store
from gpen_core.engine.fit import SAFETY_MARGIN
from gpen_core.errors import InputError
from gpen_core.hwcheck import advice, report, runner
from gpen_core.platform import zerogpu
from gpen_app import readiness
from gpen_app.panels import markdown_text, no_strike
from gpen_core.progress import Progress

CHECK_OFF = ("The Hardware check is off on this shared server: it keeps the CPU busy for minutes. "
             "Run it on your own machine (`python -m gpen_core profile`), or start this server with "
             "`--allow-hardware-check`.")
COMMAND = "the app's Hardware check tab"
CHECK_BUTTON, TIPS_BUTTON = "Measure every mode on this machine", "Measure the tips on this machine"
TIPS_INTRO = ("The usual advice for fitting GPEN in memory, each tip measured on this machine as a before/after pair "
              "with this engine: helps, no effect, hurts, or not measurable here (and why).")
TIPS_NOT_MEASURED = ("*Not measured on this machine yet.* Press the button (about 10 minutes on 2 cores; each tip runs "
                     "twice in fresh processes), or run `python benchmarks/advice.py --save`.")
# The check's wall time until it has run here (measured: docs/performance.md, "How long the hardware check takes").
CHECK_ESTIMATE = ("8 to 15 minutes on a busy 2-core CPU the first time (about half of it converting the networks to "
                  "OpenVINO and timing them against PyTorch), about 7 minutes once those conversions are cached, well "
                  "under a minute on a GPU; from its first step on it shows the time left here")

HARDWARE_INTRO = (
    "#### How much memory do I need?\n"
    "Measures every memory mode on **this** machine with the engine's own meter: one aligned "
    "512×512 face, a 12-megapixel photo with one face and a group photo, each mode in a fresh "
    "process; then GPEN's other tasks (colorize, inpaint, seg2face) in each mode that runs them, "
    "one photo or label map each. Without the weights it runs the exact networks with random weights (memory and "
    "time do not depend on the values), so you learn what fits before downloading anything. "
    "The result is saved in the models folder and `auto` uses it. Restores keep running while it measures."
)


def last_check_seconds(profile: Any) -> float | None:
    """The whole check's wall time, from the note the runner writes ("the whole check took N s")."""
    found = (re.search(r"the whole check took ([\d.]+) s", n) for n in getattr(profile, "notes", ()))
    return next((float(m.group(1)) for m in found if m), None)


def _report(profile: Any, device: str) -> str:
    """A measurement as Markdown: the verdict (files and memory together), memory alone, the table, the machine,
    notes, and the torch-vs-OpenVINO section when it has one."""
    files = report.files_here(profile)
    lines = [
        f"**Recommendation:** {no_strike(verdict(device))}.",
        "",
        f"Memory alone: {report.recommendation(profile, files=files)}.",
        "",
        report.format_table(profile, files=files),
        "",
        *([f"GPEN's other tasks (peak · s/face · dtype · fits now?):\n\n{report.tasks_table(profile, files=files)}", ""]
          if profile.tasks else []),
        f"Measured {profile.created} on {report.machine_line(profile)}.",
        "Peaks are above the idle process, the worst of the three workloads; *fits?* compares what `auto` "
        "needs for a 1 MP photo (the peak, plus on a GPU the float32 copy a float16 overflow loads) with "
        f"the memory free now, less a {(1 - SAFETY_MARGIN) * 100:.0f} % safety margin. *weights* says what the "
        "measurement ran with (random weights stand in for files not downloaded: same memory and time); *files here?* names "
        "the files a mode lacks in the models folder now and the command that fetches them (the weights "
        "panel on the Restore tab names the same files).",
        "",
    ]
    lines += [f"- {markdown_text(n)}" for n in profile.notes]
    if profile.backends:
        lines += ["", report.backends_section(profile)]
    return "\n".join(lines)


def profile_chart(profile: Any) -> Any:
    """Peak memory per mode as a long table for a bar chart: columns mode, memory ("RAM"/"VRAM"), MB."""
    import pandas as pd

    rows = [{"mode": r["mode"], "memory": kind, "MB": r[f"peak {kind} MB"]} for r in report.chart_rows(profile)
            for kind in ("RAM", "VRAM") if kind == "RAM" or r["peak VRAM MB"] is not None]
    return pd.DataFrame(rows, columns=["mode", "memory", "MB"])


class SavedCheck(NamedTuple):
    """The tab on page load: the report (or why there is none), the chart rows, the button."""

    markdown: str
    chart: Any  # the chart's rows (:func:`profile_chart`), None without a measurement
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
    """Measure every memory mode (saved for ``auto``): (report, chart rows); InputError when :func:`refusal` says no.
    ``restores_done``: this process's finished restores, to say when some ran beside the check."""
    why = refusal(allowed)
    if why:
        raise InputError(why)
    last = last_check_seconds(store.load_profile(device, any_machine=False))
    last_text = f" (the last check took {last:.0f} s)" if last is not None else ""
    t0, done0 = time.monotonic(), restores_done()

    def step(f: float, desc: str) -> None:  # the step (with the time left), the time so far, the last check's time
        progress(f, f"{desc} · {time.monotonic() - t0:.0f} s so far{last_text}")

    prof = runner.run_profile(device=device, command=COMMAND, progress=step)
    md = _report(prof, device)
    if device.startswith("cuda"):  # "does my GPU set-up work?": every network built and run on it
        from gpen_core.hwcheck.selfcheck import run_selfcheck

        md += "\n\n" + markdown_text(run_selfcheck(device).summary())
    ran = restores_done() - done0
    if ran > 0:
        md += (f"\n- {ran} restore(s) ran during the check: its memory figures hold "
               "(each mode ran in its own process), its times may read high.")
    return md, profile_chart(prof)


def saved_check(device: str, allowed: bool) -> SavedCheck:
    """The saved measurement for this machine when one is still valid, and the button's state."""
    prof = store.load_profile(device)
    why = refusal(allowed)
    last = last_check_seconds(prof) if prof else None
    if why is None:  # how long the check takes, beside the button: the last run's own time when known
        label, enabled = CHECK_BUTTON, True
        when = (f"It takes about {last:.0f} s here (the last check on this machine, measured)." if last is not None
                else f"It takes {CHECK_ESTIMATE} (an estimate until it has run here).")
    else:
        label = ("Hardware check: not available on ZeroGPU" if zerogpu.on_zerogpu()
                 else "Hardware check: off on this shared server")
        enabled, when = False, why
    if prof is None:  # the chart stays hidden: the report says what will appear, and which button measures it
        press = f" Press **{label}**: the report and a chart of each mode's peak memory appear here." if enabled else ""
        md = (f"{when}\n\n**Recommendation** (built-in estimates until the check has run here): "
              f"{no_strike(verdict(device))}.\n\n*No measurement for this machine yet (or the machine, versions or "
              "weights changed since).*" + press)
        return SavedCheck(md, None, label, enabled)
    return SavedCheck(f"{when}\n\n" + _report(prof, device), profile_chart(prof), label, enabled)


def run_tips(allowed: bool, progress: Progress) -> str:
    """The article's memory tips measured on this machine, saved for the next visit; the table."""
    why = refusal(allowed)
    if why:
        raise InputError(why)
    tips = replace(advice.measure_tips(progress=progress), command=COMMAND)
    advice.save_report(tips)
    return advice.format_table(tips)


def saved_tips(allowed: bool = True) -> SavedCheck:
    """The tips table measured on this machine before, or how to measure it; the button off where :func:`refusal`
    says no (it offered a press that was then refused), with the reason in place of "press the button"."""
    tips, why = advice.load_report(), refusal(allowed)
    label = TIPS_BUTTON if why is None else "Measuring the tips: off on this server"
    if tips is not None:
        markdown = f"Measured {tips.created}.\n\n" + advice.format_table(tips)
    else:
        markdown = TIPS_NOT_MEASURED if why is None else f"*Not measured on this machine yet.* {why}"
    return SavedCheck(markdown, None, label, why is None)
