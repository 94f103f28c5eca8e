"""The Memory mode radio's labels, from what each mode really runs here (the dtype the engine's plan gives it on
this device, the format it writes) and the download that enables a mode missing a file."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpen_core.modes import AUTO, MODES, TASKS, MemoryMode, Task
from gpen_app import readiness

AUTO_HINT = "picks the best mode that fits the memory free now, per photo"
# A clip is planned once, from its frame size, and always written as H.264: no photo format applies.
VIDEO_AUTO_HINT = "picks the best mode that fits the memory free now, once for the whole clip"
# What every mode does to a clip: said once, as the radio's info, not at the end of every label.
VIDEO_OUTPUT = "Every mode writes an H.264 MP4 and keeps the sound and each frame's timestamp."
FORMAT_TEXT = {"jpeg": "writes JPEG", "png": "writes PNG (lossless)"}
# What each mode is for, where that is true whatever the device; balanced's "half the memory"
# is added only when its plan is 16-bit (:func:`mode_label`).
PURPOSE = {"low": "fits almost anywhere", "faces-only": "quickest for big group photos", "quality": "the official pipeline"}


def mode_label(mode: MemoryMode, device: str, model: str | None = None,
               files: Mapping[str, readiness.FileState] | None = None, *, video: bool = False) -> str:
    """"balanced — GPEN-BFR-512 in bfloat16 (native on this CPU): half the memory, …, writes JPEG". ``model``: the
    task's generator; ``files``: the models folder (None: not checked)."""
    from gpen_core.networks.plan import choose_plan

    requested = mode.cuda_dtype if device.startswith("cuda") else mode.cpu_dtype
    dtype = choose_plan(device, requested)[0].dtype
    where = "GPU" if device.startswith("cuda") else "CPU"
    net = f"{model or mode.model} {'on each face' if not mode.paste else ''}".strip() + f" in {dtype}"
    if dtype != requested:
        net += f" (this {where} has no native {requested})"
    elif dtype == "bfloat16" and where == "CPU":
        net += " (native on this CPU)"
    if mode.name == "balanced" and dtype in ("float16", "bfloat16"):
        net += ": half the memory of float32, same look"
    parts = [net, _detector(mode)]
    if mode.max_side:
        parts.append(f"frames over {mode.max_side} px shrunk to it" if video else f"photo shrunk to {mode.max_side} px")
    if not mode.paste:
        parts.append("no paste-back: returns the restored crops")
    elif mode.parsing:
        parts.append("GPEN's parsing mask (if present)")
    if not video:  # a clip's output is the same in every mode: the radio says it once (VIDEO_OUTPUT)
        parts.append(FORMAT_TEXT[mode.output_format])
    text = f"{mode.name} — {', '.join(parts)}"
    if mode.name in PURPOSE:
        text += f": {PURPOSE[mode.name]}"
    return text + readiness.unavailable(readiness.mode_files(mode, model), files)


def task_spec(task: str | None) -> Task:
    """The Task called ``task``; None or a name the page does not know: restoration."""
    return TASKS.get(task or "enhance") or TASKS["enhance"]


def _detector(mode: MemoryMode) -> str:
    return "small detector" if mode.detector == "mobilenet0.25" else "ResNet-50 detector"


def _radio(video: bool, label: Callable[[MemoryMode], str]) -> list[tuple[str, str]]:
    """(label, value) pairs: ``auto`` first, then each mode; on the Video tab only those that paste the faces back
    (a clip of restored crops is no video)."""
    auto = f"{AUTO} — {VIDEO_AUTO_HINT if video else AUTO_HINT}"
    return [(auto, AUTO)] + [(label(m), m.name) for m in MODES.values() if m.paste or not video]


def mode_choices(device: str, task: str | None = None,
                 files: Mapping[str, readiness.FileState] | None = None, *, video: bool = False) -> list[tuple[str, str]]:
    """The radio under ``task`` (a mode with no plan for the task says so)."""
    spec = task_spec(task)

    def label(m: MemoryMode) -> str:
        if m.name in spec.modes:
            return mode_label(m, device, spec.model, files, video=video)
        return (f"{m.name} — not for this task: {spec.model} is larger than {m.name} promises to fit; "
                f"choose {', '.join(spec.modes)} or auto")

    return _radio(video, label)


def hints(*, video: bool = False) -> list[tuple[str, str]]:
    """The radio until :func:`mode_choices` replaces it on load (no device read yet)."""

    def label(m: MemoryMode) -> str:
        parts = [m.model, _detector(m)] + ([f"frames over {m.max_side} px shrunk to it"] if m.max_side else [])
        return f"{m.name} — {', '.join(parts) if video else m.hint}"

    return _radio(video, label)


def current_choices(device: str, task: str | None = None, *, video: bool = False) -> list[tuple[str, str]]:
    """:func:`mode_choices` with the models folder's files as they are now."""
    return mode_choices(device, task, readiness.current_files(), video=video)
