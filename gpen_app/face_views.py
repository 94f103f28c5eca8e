"""The per-face views of a RestoreResult: the gallery's crop pairs (RGB uint8 H×W×3), the identity table."""

from __future__ import annotations

import numpy as np

from gpen_core.faces import identity_model
from gpen_core.modes import IDENTITY_THRESHOLD, IDENTITY_THRESHOLD_TEXT
from gpen_core.result import Face, RestoreResult



def face_pairs(result: RestoreResult) -> list[tuple[np.ndarray, str]]:
    """One gallery item per face: the aligned input crop beside the restored crop (6 px apart), with a caption."""
    return [(side_by_side(f.crop, f.restored), face_caption(i, f)) for i, f in enumerate(result.faces, 1)]


def side_by_side(left: np.ndarray, right: np.ndarray, gap: int = 6) -> np.ndarray:
    """``left`` and ``right`` (same height) in one RGB image, separated by a white gap."""
    h = max(left.shape[0], right.shape[0])
    out = np.full((h, left.shape[1] + gap + right.shape[1], 3), 255, np.uint8)
    out[: left.shape[0], : left.shape[1]] = left
    out[: right.shape[0], left.shape[1] + gap :] = right
    return out


def face_caption(index: int, face: Face) -> str:
    x0, y0, x1, y1 = face.box
    caption = f"face {index} · score {face.score:.2f} · {x1 - x0:.0f}×{y1 - y0:.0f} px"
    if face.identity is not None:
        caption += f" · identity distance {face.identity.distance:.2f}" + (f" (over {IDENTITY_THRESHOLD:g})" if face.identity.over_threshold else "")
        caption += "" if face.identity.action == "restored" else f" · {face.identity.action}"
    return caption


def _cell(face: Face) -> tuple[str, str]:
    check = face.identity
    if check is None:
        return "n/a", "restored"
    mark = f"**{check.distance:.2f}** (over {IDENTITY_THRESHOLD:g})" if check.over_threshold else f"{check.distance:.2f}"
    return mark, check.action


def identity_lines(result: RestoreResult) -> list[str]:
    """The panel's identity section (Markdown lines): per face its distance and what was pasted, or why none. A row
    per face: three columns fit a phone's panel; a column per face clipped the panel's 5th face at 1400 px."""
    if not result.faces:
        return []
    if all(f.identity is None for f in result.faces):
        return ["", f"**Identity**: not measured ({_why_not(result)})."]
    checked = [f.identity for f in result.faces if f.identity is not None]
    lines = ["", "**Identity**: dlib's face-descriptor distance between each aligned input face and its "
             f"restoration (0 = unchanged; {IDENTITY_THRESHOLD_TEXT}). Check cost: {sum(c.seconds for c in checked):.2f} s "
             f"for {len(checked)} face{'s' if len(checked) > 1 else ''}."]
    limit = next((c.limit for c in checked if c.limit is not None), None)
    if limit is not None:
        lines[-1] += f" Your limit: {limit:g}."
    lines += ["", "| Face | identity distance | pasted |", "|---:|---:|---|"]
    lines += [f"| {i} | " + " | ".join(_cell(f)) + " |" for i, f in enumerate(result.faces, 1)]
    return lines


def _why_not(result: RestoreResult) -> str:
    if not identity_model.available():
        return f"the identity check needs dlib: `{identity_model.PIP_COMMAND.split('  ')[0]}`"
    if result.task == "seg2face":
        return "a label map is not a face"
    if result.mode.name == "low":
        return "off in low unless asked: turn Identity check on"
    return "the identity check is off"


# The Advanced section's identity controls, as keyword arguments of gr.Radio / gr.Number / gr.Slider.
IDENTITY_RADIO = dict(
    choices=[("auto: every mode but low", "auto"), ("on", "on"), ("off", "off")], value="auto", label="Identity check",
    elem_id="identity-check", info="how far each restored face moved from yours (dlib's face descriptor; docs/identity.md)")
# No minimum or maximum (nor on the app's other number fields): Gradio's own refusal names no field ("Value 2.5 is
# greater than maximum value 1.99.") and never reaches the result panel; RestoreOptions' names the field, in both.
IDENTITY_LIMIT = dict(
    value=0, step=0.05, label="Identity limit", elem_id="identity-limit",
    info=f"over this distance keep your original face (0: measure only; {IDENTITY_THRESHOLD_TEXT})")
# Off until a limit is set: the blend acts only over a limit, and a blend without one is refused (RestoreOptions),
# so a slider moved first would make Restore fail.
IDENTITY_ALPHA = dict(
    minimum=0.0, maximum=0.95, value=0.0, step=0.05, label="Over the limit: blend toward the original",
    elem_id="identity-alpha", info="with an Identity limit: 0 = your original face, pixel for pixel", interactive=False)


def blend_control(limit: float | None) -> dict[str, object]:
    """The blend slider's update for an Identity limit: it acts only over one, so with none (0) it is back at 0 and
    greyed, never a value left over that has Restore refuse a blend without a limit."""
    return {"interactive": True} if limit else {"value": 0.0, "interactive": False}


def identity_options(identity: str | None, limit: float | None, alpha: float | None) -> dict[str, object]:
    """The controls' values as RestoreOptions fields (a limit of 0 or empty: measure only)."""
    return {"identity": identity or "auto", "identity_limit": float(limit) if limit else None,
            "identity_alpha": float(alpha or 0.0)}
