"""The Restore tab under a Task: the Generator dropdown lists what fits the task, and the mode hints
name the task's generator (pure functions of gpen_app.tasks; no Gradio)."""

from __future__ import annotations

import re

from gpen_app import mode_labels
from gpen_app import tasks as task_ui

DEFAULT = "default"


def _values(choices: list[tuple[str, str]]) -> list[str]:
    return [v for _, v in choices]


def test_restoration_lists_restoration_generators_only() -> None:
    values = _values(task_ui.generator_choices("enhance", DEFAULT))
    assert values[0] == DEFAULT
    assert {"GPEN-BFR-256", "GPEN-BFR-512"} <= set(values)
    for other in ("GPEN-Colorization-1024", "GPEN-Inpainting-1024", "GPEN-Seg2face-512"):
        assert other not in values


def test_a_task_lists_its_own_generator_only() -> None:
    for task, model in (("colorize", "GPEN-Colorization-1024"), ("inpaint", "GPEN-Inpainting-1024"),
                        ("seg2face", "GPEN-Seg2face-512")):
        choices = task_ui.generator_choices(task, DEFAULT)
        assert _values(choices) == [DEFAULT, model]
        assert model in choices[0][0]  # the default says which generator it is


def test_mode_hints_name_the_task_generator_and_low_says_it_has_no_plan() -> None:
    labels = dict((v, label) for label, v in mode_labels.mode_choices("cpu", "colorize"))
    assert "GPEN-BFR-512" not in " ".join(labels.values()) and "GPEN-BFR-256" not in " ".join(labels.values())
    assert re.match(r"balanced — GPEN-Colorization-1024 in (bfloat16|float32)", labels["balanced"])
    assert labels["quality"].startswith("quality — GPEN-Colorization-1024 in float32")
    assert labels["faces-only"].startswith("faces-only — GPEN-Colorization-1024 on each face")
    assert "not for this task" in labels["low"] and "faces-only, balanced, quality or auto" in labels["low"]
    enhance = dict((v, label) for label, v in mode_labels.mode_choices("cpu", "enhance"))
    assert "GPEN-BFR-512" in enhance["balanced"] and "GPEN-BFR-256" in enhance["low"]


def test_changing_the_task_keeps_a_fitting_generator_and_resets_one_that_does_not() -> None:
    gen, modes = task_ui.task_controls("colorize", "GPEN-BFR-512", DEFAULT, "cpu")[:2]
    assert gen["value"] == DEFAULT and _values(gen["choices"]) == [DEFAULT, "GPEN-Colorization-1024"]
    assert "GPEN-Colorization-1024" in dict((v, label) for label, v in modes["choices"])["balanced"]
    gen, *_ = task_ui.task_controls("colorize", "GPEN-Colorization-1024", DEFAULT, "cpu")
    assert gen["value"] == "GPEN-Colorization-1024"
    gen, *_ = task_ui.task_controls("enhance", "GPEN-Colorization-1024", DEFAULT, "cpu")
    assert gen["value"] == DEFAULT
    gen, *_ = task_ui.task_controls("enhance", "GPEN-BFR-256", DEFAULT, "cpu")
    assert gen["value"] == "GPEN-BFR-256"


def test_seg2face_turns_aligned_on_and_says_so() -> None:
    *_, aligned = task_ui.task_controls("seg2face", None, DEFAULT, "cpu")
    assert aligned["value"] is True and "turned on" in aligned["label"]
    *_, aligned = task_ui.task_controls("enhance", None, DEFAULT, "cpu")
    assert "value" not in aligned and "turned on" not in aligned["label"]  # the user's choice stays


def test_leaving_seg2face_turns_aligned_off_again_and_says_so() -> None:
    # left on, the next group photo was restored as one aligned face, with nothing on screen to say why
    *_, aligned = task_ui.task_controls("enhance", None, DEFAULT, "cpu", turned_on=True)
    assert aligned["value"] is False and "turned off again" in aligned["label"]
    *_, aligned = task_ui.task_controls("inpaint", None, DEFAULT, "cpu", turned_on=True)
    assert aligned["value"] is False


def test_a_task_whose_generator_is_missing_says_which_download_enables_it() -> None:
    from gpen_app import readiness

    from .test_readiness import files_with

    files = files_with(("GPEN-BFR-512", "GPEN-Colorization-1024", "retinaface-mobilenet0.25"))
    labels = dict((v, label) for label, v in task_ui.task_choices(files))
    assert "unavailable" not in labels["colorize"] and "unavailable" not in labels["enhance"]
    assert labels["inpaint"].endswith("— unavailable: download " + readiness.files_text(["GPEN-Inpainting-1024"], files))
