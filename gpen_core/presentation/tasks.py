"""The Restore tab's Task choice and the inpainting brush, as plain values (no web framework here).

For ``inpaint`` the app shows an image editor over the photo where the user paints the damage white on its
own layer, read back as the mask ``Restorer.__call__(..., mask=...)`` takes (:func:`damage_from_editor`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpen_core.modes import TASKS, Task

BRUSH_COLOUR = "#ffffff"  # GPEN's inpainting network was trained on white strokes (demo.py's brush_stroke_mask)
DAMAGE_LAYER = "damage"


def task_choices(files: Any = None) -> list[tuple[str, str]]:
    """(label, value) pairs for the Task radio, restoration first. ``files``: the models folder's state
    (``readiness.files_from_status``; None: not checked): a task whose generator is not there says so,
    with the download that enables it (the weights panel names the same file)."""
    from gpen_core.presentation import readiness

    hints = {
        "enhance": "GPEN-BFR-256 or -512, as the mode picks",
        "colorize": "GPEN-Colorization-1024: grey photo, coloured faces",
        "inpaint": "GPEN-Inpainting-1024: paint the damage white below",
        "seg2face": "GPEN-Seg2face-512: aligned colour label map → face",
    }
    out = []
    for t in TASKS.values():
        label = f"{t.label} — {hints[t.name]}"
        f = files.get(t.model) if files is not None and t.model else None
        if f is not None and f.state != "verified":
            label += f" — unavailable: download {readiness.files_text([t.model], files)}"
        out.append((label, t.name))
    return out


def generator_override(task: str | None, model: str | None) -> str | None:
    """The generator the weights panel should check: the user's override, else the task's own (None: the mode's)."""
    return model or _task(task).model


def _task(task: str | None) -> Task:
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


def task_controls(task: str | None, model: str | None, default: str, device: str, files: Any = None,
                  ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What the Generator dropdown, the Memory mode radio and the "aligned" checkbox become when the
    Task changes, as update values: the generator choice is kept when it fits the task, else the
    default; a task that runs on aligned crops only (seg2face) turns "aligned" on, and its label says so."""
    from gpen_core.presentation.mode_labels import mode_choices

    choices = generator_choices(task, default)
    value = model if model in {v for _, v in choices} else default
    return {"choices": choices, "value": value}, {"choices": mode_choices(device, task, files)}, aligned_control(task)


ALIGNED_LABEL = "Already an aligned face crop (skip detection)"


def aligned_control(task: str | None) -> dict[str, Any]:
    """The "aligned" checkbox under ``task``: on, with why, for a task that takes aligned crops only;
    back to the user's to choose otherwise."""
    spec = _task(task)
    if spec.aligned_only:
        return {"value": True, "label": f"{ALIGNED_LABEL}: turned on for {spec.label.lower()}, "
                                         "which runs on aligned crops only"}
    return {"label": ALIGNED_LABEL}


def editor_visible(task: str | None) -> bool:
    return task == "inpaint"


def editor_value(task: str | None, image: str | None) -> dict[str, Any] | None:
    """The editor's value for ``task`` and the uploaded photo: the photo as its background, no strokes yet.
    None when the editor is hidden or there is no photo."""
    if not editor_visible(task) or not image:
        return None
    return {"background": image, "layers": [], "composite": None}


def editor_damage(value: Any, task: str) -> np.ndarray | None:
    """What the editor's ``value`` gives a request for ``task``: the painted damage mask for ``inpaint``, else
    None. Whatever the task, every file it hands over must be an image within the upload limits (its header
    checked, nothing decoded), else the decoder's message naming the part."""
    from gpen_core.images.damage_layers import check_editor_files

    check_editor_files(value if isinstance(value, dict) else None)
    return damage_from_editor(value, "") if task == "inpaint" else None


def damage_from_editor(value: Any, image: str) -> np.ndarray | None:
    """The strokes painted in the editor as a uint8 H×W mask (255 = damaged), or None when nothing is painted
    (the engine then looks for white strokes in the photo itself).

    ``value``: the editor's value as file paths (``{"background", "layers", "composite"}``); only the layers
    are read, by our decoder with the upload limits. A layer not at the photo's size is refused by the engine,
    as the CLI's ``--mask`` is: never stretched.
    """
    from gpen_core.images.damage_layers import damage_from_layers

    if not isinstance(value, dict):
        return None
    return damage_from_layers([str(p) for p in value.get("layers") or [] if p])
