"""The browser app's Hardware check tab: layout and wiring only (``app.py`` builds it inside its Blocks
and keeps the handlers, which the tests call directly)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from gpen_core.modes import MODES
from gpen_app import checks


def build(demo: gr.Blocks, hardware_check: Callable, saved_hardware_check: Callable, measure_tips: Callable,
          saved_tips: Callable) -> None:
    """The tab's components and events, in the current Blocks."""
    gr.Markdown(checks.HARDWARE_INTRO)
    check_btn = gr.Button(checks.CHECK_BUTTON, variant="primary", elem_id="check-button")
    profile_md = gr.Markdown(elem_id="profile-report")
    # Hidden until something is measured (an empty box said nothing); the report says what will appear here.
    profile_chart = gr.BarPlot(x="mode", y="MB", color="memory", title="Peak memory per mode (above idle)",
                               y_title="MB", sort=list(MODES), height=300, visible=False)
    with gr.Accordion("Tips, measured here", open=False, elem_id="tips"):
        gr.Markdown(checks.TIPS_INTRO)
        tips_btn = gr.Button(checks.TIPS_BUTTON, elem_id="tips-button")
        tips_md = gr.Markdown(elem_id="tips-report")
    # Its own lane: restores never wait for the check (see app.hardware_check).
    # The chart comes into view as the check starts, its progress shown in it (over the report it was hard to read);
    # a check that fails leaves it as the saved measurement has it (hidden without one).
    check_btn.click(lambda: gr.update(visible=True), None, profile_chart, api_visibility="private", queue=False,
                    show_progress="hidden").then(
        hardware_check, None, [profile_md, profile_chart], api_visibility="private", concurrency_limit=1,
        concurrency_id="hardware-check", show_progress_on=[profile_chart]
    ).failure(lambda: _with_chart(saved_hardware_check())[1], None, profile_chart, api_visibility="private",
              show_progress="hidden")
    demo.load(lambda: _with_chart(saved_hardware_check()), None, [profile_md, profile_chart, check_btn],
              api_visibility="private", show_progress="hidden")
    tips_btn.click(measure_tips, None, tips_md, api_visibility="private", concurrency_limit=1,
                   concurrency_id="hardware-check", show_progress_on=[tips_md])
    demo.load(lambda: _shown(saved_tips()), None, [tips_md, tips_btn], api_visibility="private", show_progress="hidden")


def _with_chart(saved: checks.SavedCheck) -> tuple[str, Any, Any]:
    """The page load's outputs, the chart in view only with a measurement's rows."""
    markdown, button = _shown(saved)
    return markdown, gr.update(value=saved.chart, visible=saved.chart is not None), button


def _shown(saved: checks.SavedCheck) -> tuple[str, Any]:
    """The markdown and its button's state (off, saying why, on a shared server): the check's and the tips' alike."""
    return saved.markdown, gr.update(interactive=saved.button_enabled, value=saved.button_label)
