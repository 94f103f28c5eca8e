"""The Restore tab's Task choice and the inpainting brush, as plain values (no web framework here).

The app shows a Task radio (:func:`task_choices`); for ``inpaint`` an image editor over the
photo where the user paints the damage white on its own layer (:func:`editor_value` fills
it, :func:`damage_from_editor` reads the strokes back as a mask at the photo's size, white =
damaged, as ``Restorer.__call__(..., mask=...)`` takes it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpen_core.modes import TASKS

BRUSH_COLOUR = "#ffffff"  # GPEN's inpainting network was trained on white strokes (demo.py's brush_stroke_mask)
DAMAGE_LAYER = "damage"


def task_choices() -> list[tuple[str, str]]:
    """(label, value) pairs for the Task radio, restoration first."""
    hints = {
        "enhance": "GPEN-BFR-256 or -512, as the mode picks",
        "colorize": "GPEN-Colorization-1024: grey photo, coloured faces",
        "inpaint": "GPEN-Inpainting-1024: paint the damage white below",
        "seg2face": "GPEN-Seg2face-512: aligned colour label map → face",
    }
    return [(f"{t.label} — {hints[t.name]}", t.name) for t in TASKS.values()]


def generator_override(task: str | None, model: str | None) -> str | None:
    """The generator the weights panel should check: the user's override, else the task's own (None: the mode's)."""
    spec = TASKS.get(task or "enhance")
    return model or (spec.model if spec is not None else None)


def _task(task: str | None):
    return TASKS.get(task or "enhance") or TASKS["enhance"]


def generator_choices(task: str | None, default: str) -> list[tuple[str, str]]:
    """(label, value) pairs for the Generator dropdown: what fits ``task``. Restoration lists the
    registry's restoration generators after ``default`` (the mode's choice); another task lists its own
    generator only (the others were trained for something else). A typed checkpoint path is still taken."""
    from gpen_core.weights.user_paths import generator_names

    spec = _task(task)
    if spec.model is None:
        others = {t.model for t in TASKS.values() if t.model}
        return [("the mode's generator", default)] + [(n, n) for n in generator_names() if n not in others]
    return [(f"the task's generator ({spec.model})", default), (spec.model, spec.model)]


def mode_choices(task: str | None) -> list[tuple[str, str]]:
    """(label, value) pairs for the Memory mode radio under ``task``: the modes' hints name the task's
    generator instead of the restoration one, and a mode with no plan for the task says so (the engine
    refuses it, naming the modes that run it)."""
    from gpen_core.modes import AUTO, MODES
    from gpen_core.presentation.panels import mode_choices as restoration

    spec = _task(task)
    if spec.model is None:
        return restoration()
    out = []
    for label, value in restoration():
        m = MODES.get(value)
        if value == AUTO or m is None:
            out.append((label, value))
        elif value not in spec.modes:
            out.append((f"{value} — not for this task: {spec.model} is larger than {value} promises to fit; "
                        f"choose {', '.join(spec.modes)} or auto", value))
        else:
            out.append((f"{value} — {m.hint.replace(m.model, spec.model)}", value))
    return out


def task_controls(task: str | None, model: str | None, default: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the Generator dropdown and the Memory mode radio become when the Task changes, as update
    values (``choices``, ``value``): the generator choice is kept when it fits the task, else the default."""
    choices = generator_choices(task, default)
    value = model if model in {v for _, v in choices} else default
    return {"choices": choices, "value": value}, {"choices": mode_choices(task)}


def editor_visible(task: str | None) -> bool:
    return task == "inpaint"


def editor_value(task: str | None, image: str | None) -> dict[str, Any] | None:
    """The editor's value for ``task`` and the uploaded photo: the photo as its background, no strokes yet.
    None when the editor is hidden or there is no photo."""
    if not editor_visible(task) or not image:
        return None
    return {"background": image, "layers": [], "composite": None}


def damage_from_editor(value: Any, image: str) -> np.ndarray | None:
    """The strokes painted in the editor as a uint8 H×W mask (255 = damaged), or None when nothing is
    painted (the engine then looks for white strokes in the photo itself).

    ``value``: the editor's value as file paths (``{"background", "layers", "composite"}``, the app's
    editor never decodes them); only the layers are read, by our decoder with the upload limits
    (gpen_core.images.damage_layers). A layer that is not the photo's size is refused by the engine,
    naming both sizes, as the CLI's ``--mask`` is: never stretched.
    """
    from gpen_core.images.damage_layers import damage_from_layers

    if not isinstance(value, dict):
        return None
    return damage_from_layers([str(p) for p in value.get("layers") or [] if p])
