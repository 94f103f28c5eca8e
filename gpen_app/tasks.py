"""The Restore tab's Task choice and the inpainting brush (the damage painted white on its own layer, read back as
the mask ``Restorer.__call__`` takes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpen_app.damage_layers import check_editor_files, damage_from_layers
from gpen_core.modes import TASKS
from gpen_app import readiness
from gpen_app.mode_labels import mode_choices, task_spec
from gpen_app.user_paths import generator_names

BRUSH_COLOUR = "#ffffff"  # GPEN's inpainting network was trained on white strokes (demo.py's brush_stroke_mask)
DAMAGE_LAYER = "damage"


def task_choices(files: Any = None) -> list[tuple[str, str]]:
    """(label, value) pairs for the Task radio; with ``files``, a task whose generator is not there says so."""
    hints = {"enhance": "GPEN-BFR-256 or -512, as the mode picks", "colorize": "grey photo, coloured faces",
             "inpaint": "paint the damage white below", "seg2face": "aligned colour label map → face"}
    out = []
    for t in TASKS.values():
        label = f"{t.label} — {f'{t.model}: ' if t.model else ''}{hints[t.name]}"
        out.append((label + readiness.unavailable([t.model], files), t.name))
    return out


def generator_override(task: str | None, model: str | None) -> str | None:
    """The generator the weights panel should check: the user's override, else the task's own (None: the mode's)."""
    return model or task_spec(task).model


def generator_choices(task: str | None, default: str) -> list[tuple[str, str]]:
    """(label, value) pairs for the Generator dropdown: ``default`` (the mode's), then the registry's restoration
    generators, or for another task its own generator only (the others were trained for something else)."""
    spec = task_spec(task)
    if spec.model is None:
        others = {t.model for t in TASKS.values() if t.model}
        return [("the mode's generator", default)] + [(n, n) for n in generator_names() if n not in others]
    return [(f"the task's generator ({spec.model})", default), (spec.model, spec.model)]


def task_controls(task: str | None, model: str | None, default: str, device: str, files: Any = None, turned_on: bool = False,
                  ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The Generator dropdown's, Memory mode radio's and "aligned" checkbox's updates when the Task changes (the
    generator kept when it fits the task); ``turned_on``: the last task turned "aligned" on (see :func:`aligned_control`)."""
    choices = generator_choices(task, default)
    value = model if model in {v for _, v in choices} else default
    return {"choices": choices, "value": value}, {"choices": mode_choices(device, task, files)}, aligned_control(task, turned_on)


ALIGNED_LABEL = "Already an aligned face crop (skip detection)"


def aligned_control(task: str | None, turned_on: bool = False) -> dict[str, Any]:
    """The "aligned" checkbox: on, saying why, for a task on aligned crops only; off again, saying so, when the last
    task had turned it on (left on, a group photo restored next was taken as one aligned face); else the user's."""
    spec = task_spec(task)
    if spec.aligned_only:
        return {"value": True, "label": f"{ALIGNED_LABEL}: turned on for {spec.label.lower()}, "
                                         "which runs on aligned crops only"}
    if turned_on:
        return {"value": False, "label": f"{ALIGNED_LABEL}: turned off again (the last task turned it on for itself)"}
    return {"label": ALIGNED_LABEL}


def editor_visible(task: str | None) -> bool:
    return task == "inpaint"


def editor_value(task: str | None, image: str | None) -> dict[str, Any] | None:
    """The editor's value: the uploaded photo as its background, no strokes; None when hidden or no photo."""
    if not editor_visible(task) or not image:
        return None
    return {"background": image, "layers": [], "composite": None}


def editor_damage(value: Any, task: str) -> np.ndarray | None:
    """For ``inpaint``, the editor's painted layers as a uint8 H×W mask (255 = damaged); None for another task or
    nothing painted. Whatever the task, InputError for a file it hands over that is no image within the upload
    limits (headers checked, nothing decoded)."""
    value = value if isinstance(value, dict) else None
    check_editor_files(value)
    if task != "inpaint" or value is None:
        return None
    return damage_from_layers([str(p) for p in value.get("layers") or [] if p])
