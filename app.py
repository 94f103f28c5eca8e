"""The browser app: layout and wiring only. The work is ``gpen_core``'s.

    python app.py                          # http://127.0.0.1:7860
    python app.py --host 0.0.0.0 --port 8080
    python app.py --share [--auth user:pass]   # a public link, always behind a password

Importing this module builds ``demo`` and loads no model; the first Restore does. One restore runs at a time (the
engine measures each call's peak memory alone), at most 8 wait in the queue; what changes while it serves is in ``STATE``.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Before Gradio is imported: no telemetry, and our own temp folder rather than the /tmp/gradio every Gradio app shares.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("GRADIO_TEMP_DIR", str(Path(tempfile.gettempdir()) / f"gpen-gradio-{os.getuid() if hasattr(os, 'getuid') else 0}"))

import gradio as gr  # noqa: E402

from gpen_app import checks, face_views as fv, page, restore_tab, uploads, user_paths, weights_view as wv  # noqa: E402
from gpen_app import check_wiring as app_check, gradio_seam as seam, video_wiring as app_video  # noqa: E402
from gpen_app import mode_labels, overlay, preparation as prep_ui, readiness, tasks as task_ui  # noqa: E402
from gpen_app.app_state import AppState, parse_server_args, start_lines, stoppable  # noqa: E402
from gpen_app.messages import AlreadyShown, ShownError, shown_error, toast_seconds  # noqa: E402
from gpen_core.engine.pipeline import ready_server  # noqa: E402
from gpen_core.errors import GPENError, InputError  # noqa: E402
from gpen_core.images import outputs  # noqa: E402
from gpen_core.images.decode import DEFAULT_LIMITS  # noqa: E402
from gpen_core.modes import AUTO  # noqa: E402
from gpen_core.options import MAX_FACES_HELP, RestoreOptions  # noqa: E402
from gpen_core.platform import zerogpu  # noqa: E402
from gpen_core.restorer import get_restorer  # noqa: E402

try:  # Hugging Face ZeroGPU: the GPU exists only inside functions wrapped with spaces.GPU
    import spaces  # type: ignore[import-not-found]
except ImportError:
    spaces = None

log = logging.getLogger("gpen.app")

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
TEMP_ROOT = Path(os.environ["GRADIO_TEMP_DIR"])  # everything the app writes: uploads, results, pasted images
RESULTS_DIR = TEMP_ROOT / "results"
PASTED_DIR = TEMP_ROOT / "pasted"  # images that arrive as data: URLs (clipboard), written as sent
TEMP_MAX_AGE_S = 3600  # uploads and results older than this are deleted (at start-up, results at each restore, pastes at each paste)
# Gradio refuses bigger uploads itself, with its own toast and nothing in the panel; between our
# limit and this one the upload completes and our decoder says "The file is N MB; the limit is 25 MB".
UPLOAD_MAX_BYTES = 4 * DEFAULT_LIMITS.max_file_bytes
DEFAULT = "default"  # the Advanced dropdowns' "use the mode's choice"
STATE = AppState()  # the policy (set by main), each session's last error, restores done, the backend

# ------------------------------------------------------------------ handlers


def restore(image: str | None, mode: str, model: str | None, detector: str | None, alpha: float, threshold: float,
            max_faces: float, aligned: bool, output_format: str | None = DEFAULT, upscale: int | str = 1,
            task: str = "enhance", damage: Any = None, face_check: bool = True,
            identity: str = "auto", identity_limit: float | None = 0.0, identity_alpha: float = 0.0,
            progress: gr.Progress = gr.Progress(), request: gr.Request | None = None,
            ) -> tuple[Any, str, str, list[tuple[Any, str]], dict[str, Any]]:
    """Restore the faces in one photo: (before/after pair, download path, panel Markdown, (crop pair, caption) per face, record)."""
    with ui_errors(request, "photo"), STATE.restores.own(getattr(request, "session_hash", None)) as stop, restore_tab.StopOutcome(STATE.policy.shared) as stopped:
        report = stoppable(progress, stop)  # Stopped at once when its visitor's Stop came while it waited in the queue
        if not image:
            raise InputError("Upload a photo first (or paste one from the clipboard).")
        options = RestoreOptions(mode=mode or AUTO, model=checked_model(model), detector=_override(detector),  # type: ignore[arg-type]
                                 alpha=float(alpha), threshold=float(threshold), max_faces=restore_tab.max_faces_field(max_faces), aligned=bool(aligned),
                                 output_format=_override(output_format), upscale=int(upscale or 1), task=task or "enhance",
                                 face_check=bool(face_check), **fv.identity_options(identity, identity_limit, identity_alpha))
        mask = task_ui.editor_damage(damage, options.task)  # every editor file checked, whatever the task
        result = run_engine(image, options, progress if spaces else report, mask)  # ZeroGPU's own process: no Stop
        if isinstance(result, ShownError):
            raise AlreadyShown(result)
        view = restore_tab.restore_view(image, result, RESULTS_DIR, TEMP_MAX_AGE_S, STATE.policy.shared)
        zerogpu.CLOCK.record(view.record)
        STATE.count_restore()
    return stopped.outputs or tuple(view)  # its visitor's Stop: said as an outcome, not an error


def _run_engine(image: str, options: RestoreOptions, progress: Any, mask: Any = None) -> Any:
    """The engine call: a RestoreResult, or the error as shown (ZeroGPU runs this inside ``spaces.GPU``, the only
    place CUDA may be touched, maybe in another process: a returned value crosses back whole, an exception may not)."""
    try:
        engine = STATE.engine()
        if engine.busy:
            progress(0.0, desc="waiting for the restore that is already running")
        return engine(image, options, progress=lambda f, d: progress(f, desc=d), mask=mask)
    except Exception as exc:
        return shown_error(exc, public=STATE.policy.shared)


def _gpu_seconds(image: str, options: RestoreOptions, progress: Any, mask: Any = None) -> int:
    """ZeroGPU's ``duration`` for one restore, from measured seconds: see gpen_core.platform.zerogpu."""
    return zerogpu.CLOCK.duration(options.max_faces, options.aligned, upscale=options.upscale, image_size=zerogpu.header_size(image))


run_engine = spaces.GPU(duration=_gpu_seconds)(_run_engine) if spaces is not None else _run_engine


def mode_radio(task: str | None) -> Any:
    """The Memory mode labels as this machine runs them (plan dtype, format, missing files)."""
    return gr.update(choices=mode_labels.current_choices(get_restorer().device, task))


def faces_view(slider: Any, record: dict[str, Any] | None, show: bool, image: str | None = None) -> Any:
    """"Show detected faces": kept boxes solid, rejected ones dashed, on the photo (faces-only's slider holds crops)."""
    shown, caption = overlay.faces_overlay(slider[0] if slider else None, record, photo=restore_tab.crop_mode_photo(image, record)) if show else (None, "Detected faces")
    return gr.update(value=shown, label=caption, visible=bool(show))


def upscale_view(image: str | None, upscale: int | str, mode: str | None) -> str:
    """Before Restore: the result size and extra RAM (or why it is refused), and whether the upscaler file is missing."""
    return restore_tab.upscale_text(image, int(upscale or 1), mode, (r := get_restorer()).device, r.models, STATE.policy)


def preview(image: str | None) -> tuple[Any, Any, str, Any, Any]:
    """When the Photo box changes: our decoder's view of the file as the "before" (or why it cannot be used), as the
    restore outputs; the placeholder once the box is empty."""
    if not image:
        return None, None, page.PLACEHOLDER, None, None
    p = restore_tab.preview(image, STATE.policy.shared)
    return (None if p.before is None else (p.before, p.before)), None, p.markdown, None, None


def mode_ready(*choices: Any) -> None:
    """Before Restore clears the result: a chosen mode missing its files is refused here, the result kept."""
    with ui_errors():
        wv.check_mode_ready(get_restorer().device, _weights_request(*choices), STATE.policy)


def show_failure(had_result: bool = False, request: gr.Request | None = None) -> tuple[Any, str]:
    """After a failed restore (the UI's failure event): clear the slider; the panel names the problem, and whether the press cleared a result."""
    return None, restore_tab.failure_panel(STATE.take_error(getattr(request, "session_hash", None), "photo"), bool(had_result))


def weights_view(mode: str, model: str | None, detector: str | None, aligned: bool, upscale: int | str = 1, task: str = "enhance") -> tuple[str, Any, str]:
    """(the weights panel, the Download button with what it fetches, every checkpoint)."""
    return _weights_outputs(wv.weights_view(get_restorer().device, _weights_request(mode, model, detector, aligned, upscale, task), STATE.policy))


def download_weights(mode: str, model: str | None, detector: str | None, aligned: bool, upscale: int | str = 1, task: str = "enhance",
                     progress: gr.Progress = gr.Progress(), request: gr.Request | None = None) -> tuple[str, Any, str]:
    """Download what the panel offers (a failure shows its manual fix); on a shared server only with --allow-downloads."""
    with ui_errors(request), STATE.downloads.own(getattr(request, "session_hash", None)) as stop:
        view = wv.download(get_restorer().device, _weights_request(mode, model, detector, aligned, upscale, task),
                           lambda f, d: progress(f, desc=d), STATE.policy, stop)
    return _weights_outputs(view)


def stop_own(which: str, request: gr.Request) -> Any:
    """Stop download / Stop (a restore at its next face, or one still queued): ``which`` of STATE's stops, this visitor's only."""
    getattr(STATE, which).stop(getattr(request, "session_hash", None))
    return gr.update(visible=False)


def hardware_check(progress: gr.Progress = gr.Progress(), request: gr.Request | None = None) -> tuple[str, Any]:
    """Measure every memory mode here (saved for ``auto``): (report, chart data). Its own lane: restores go on
    beside it. Refused on a shared server unless the operator allowed it (--allow-hardware-check)."""
    with ui_errors(request):
        return checks.run_check(get_restorer().device, STATE.policy.hardware_check_allowed,
                                lambda f, d: progress(f, desc=d), lambda: STATE.restores_done)


def saved_hardware_check() -> checks.SavedCheck:
    """Page load: the saved measurement for this machine, and the button's state (off on a shared server)."""
    return checks.saved_check(get_restorer().device, STATE.policy.hardware_check_allowed)


def measure_tips(progress: gr.Progress = gr.Progress(), request: gr.Request | None = None) -> str:
    """The article's memory tips measured on this machine (gpen_core.hwcheck.advice), saved for the next visit."""
    with ui_errors(request):
        return checks.run_tips(STATE.policy.hardware_check_allowed, lambda f, d: progress(f, desc=d))


def preparation_status() -> tuple[str, Any]:
    """The background OpenVINO conversions' line under the weights panel, and its timer (stopped once they end)."""
    return prep_ui.status_markdown(STATE.preparation, STATE.policy.shared), gr.Timer(active=prep_ui.running(STATE.preparation))


saved_tips = lambda: checks.saved_tips(STATE.policy.hardware_check_allowed)  # noqa: E731  page load: the tips measured here, and the button


# ------------------------------------------------------------------- helpers


@contextmanager
def ui_errors(request: gr.Request | None = None, panel: str | None = None) -> Iterator[None]:
    """Errors become a gr.Error in plain text that starts with the problem (Gradio 6.31's pop-up is headed "Error" whatever
    ``title`` says; API clients read it as is), never a stack trace, in a pop-up that closes once read (one that never
    closed stayed over the next result). ``panel``'s failure event shows the same words (:func:`show_failure`)."""
    try:
        yield
    except Exception as exc:
        shown = shown_error(exc, public=STATE.policy.shared)
        STATE.remember_error(getattr(request, "session_hash", None), panel, shown.panel)
        raise gr.Error(shown.text, title=shown.title, duration=toast_seconds(shown.text), print_exception=False) from None


def _override(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if value in ("", DEFAULT) else value


def checked_model(value: str | None) -> str | None:
    """The Generator field: a registry name or a checkpoint in the models folder (gpen_app.user_paths)."""
    return user_paths.checked_model(_override(value), any_path=STATE.policy.any_model_path)


def _weights_request(mode: str | None, model: str | None, detector: str | None, aligned: bool, upscale: Any, task: str = "enhance") -> wv.WeightsRequest:
    return wv.WeightsRequest(None if mode in (None, "", AUTO) else mode, task_ui.generator_override(task, _override(model)), _override(detector),
                             bool(aligned), int(upscale or 1))


def _weights_outputs(view: wv.WeightsView) -> tuple[str, Any, str]:
    return view.panel, gr.update(visible=view.download_label is not None, value=view.download_label or "Download weights"), view.overview


# -------------------------------------------------------------------- layout

with gr.Blocks(title=page.TITLE, analytics_enabled=False, delete_cache=(600, TEMP_MAX_AGE_S)) as demo:
    gr.Markdown(page.INTRO)
    with gr.Tab("Restore"):
        # Restore under the photo (no scrolling at 1366x768); on a phone page.CSS puts the result right after it.
        with gr.Row(equal_height=False, elem_id="restore-row"):
            with gr.Column(scale=4, min_width=320, elem_id="controls"):
                image_in = seam.raw_upload(gr.Image(label="Photo", type="filepath", image_mode=None, sources=["upload", "clipboard"], height=300,
                                                    elem_id="photo"), functools.partial(uploads.save_data_url, folder=PASTED_DIR, max_age_s=TEMP_MAX_AGE_S))  # a paste: as sent
                restore_btn = gr.Button("Restore", variant="primary", size="lg", elem_id="restore-button")
                stop_btn = gr.Button("Stop (at the next face)", size="sm", elem_id="restore-stop", visible=False)  # shown while a restore runs
                task_in = gr.Radio(task_ui.task_choices(), value="enhance", label="Task", elem_id="task-radio")
                with gr.Column(visible=False, min_width=0) as damage_box:  # shown by its box: a gr.update of a component gives the session Gradio's own
                    damage_in = seam.raw_editor(gr.ImageEditor(label="Paint the damage (white brush)", type="filepath", image_mode="RGBA", sources=(), transforms=(),
                        format="png", height=420, elem_id="damage-editor", layers=gr.LayerOptions(False, [task_ui.DAMAGE_LAYER]),
                        brush=gr.Brush(12, [task_ui.BRUSH_COLOUR], task_ui.BRUSH_COLOUR, "fixed")),
                        *(functools.partial(save, folder=PASTED_DIR, max_age_s=TEMP_MAX_AGE_S) for save in (uploads.save_bytes, uploads.save_data_url)),
                        shared=lambda: STATE.policy.shared)  # paths, unopened; each visitor's share of the store where shared
                mode_in = gr.Radio(mode_labels.hints(), value=AUTO, label="Memory mode", elem_id="mode-radio")
                upscale_in = gr.Radio([("1× (keep size)", 1), ("2×", 2), ("4×", 4)], value=1, label="Upscale",
                                      info="enlarge the whole photo with RealESRNet (GPEN's background upscaler); "
                                      "faces are restored at that size", elem_id="upscale-radio")
                upscale_md = gr.Markdown(elem_id="upscale-info")
                with gr.Accordion("Advanced", open=False):
                    model_in = gr.Dropdown(task_ui.generator_choices("enhance", DEFAULT), value=DEFAULT, allow_custom_value=True, label="Generator",
                                           info="a registry name, or the file name of a GPEN checkpoint in the models folder")
                    detector_in = gr.Radio([("the mode's detector", DEFAULT), ("RetinaFace MobileNet-0.25", "mobilenet0.25"),
                                            ("RetinaFace ResNet-50", "resnet50")], value=DEFAULT, label="Face detector")
                    alpha_in = gr.Slider(0.0, 1.0, value=1.0, step=0.05, label="Blend strength (alpha)",
                                         info="1 = restored face only, 0 = the original face")
                    threshold_in = gr.Slider(0.05, 0.99, value=0.9, step=0.01, label="Detection threshold",
                                             info="lower finds more (and more false) faces")
                    max_faces_in = gr.Number(value=RestoreOptions.max_faces, step=1, precision=0, label="Max faces",
                                             info=MAX_FACES_HELP)  # no minimum: refused in our words (fv.IDENTITY_LIMIT)
                    aligned_in, aligned_by_task = gr.Checkbox(False, label=task_ui.ALIGNED_LABEL), gr.State(False)  # True: a task turned it on
                    face_check_in = gr.Checkbox(True, label="Check detections", elem_id="face-check",
                                                info="skip detections that are not faces (docs/face-check.md); off keeps all")
                    identity_in, identity_limit_in, identity_alpha_in = gr.Radio(**fv.IDENTITY_RADIO), gr.Number(**fv.IDENTITY_LIMIT), gr.Slider(**fv.IDENTITY_ALPHA)
                    format_in = gr.Radio([("the mode's format", DEFAULT), ("PNG: lossless, keeps transparency", "png"),
                                          ("JPEG", "jpeg")], value=DEFAULT, label="Output format")
                with gr.Column(elem_id="weights-box", variant="panel"):  # a gr.Group repeats its elem_id on an inner div
                    weights_md = gr.Markdown(elem_id="weights")
                    prepare_md, prepare_timer = gr.Markdown(elem_id="openvino-status"), gr.Timer(prep_ui.REFRESH_S, active=False)
                    download_weights_btn = gr.Button("Download weights", visible=False, variant="primary", size="md",
                                                     elem_id="download-weights")
                    stop_download_btn = gr.Button("Stop download", size="sm", elem_id="stop-download", visible=False)
                with gr.Accordion("All checkpoints", open=False):
                    all_weights_md = gr.Markdown(elem_id="all-weights")
                examples = gr.Dataset(components=[image_in], samples=[[str(p)] for p in sorted(EXAMPLES_DIR.glob("*.jpg"))], label="Examples: degraded public-domain portraits (examples/README.md)")
            with gr.Column(scale=6, min_width=420, elem_id="results"):
                slider_out = gr.ImageSlider(label="Before / after (drag the handle)", type="numpy", format="png",
                                            interactive=False, max_height=page.SLIDER_MAX_HEIGHT, elem_id="slider")
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3, min_width=280):
                        metrics_md = gr.Markdown(page.PLACEHOLDER, label="Measured panel (Markdown)", elem_id="metrics")
                    with gr.Column(scale=2, min_width=200, elem_id="download-col"):  # on a phone: above the panel (page.CSS)
                        file_out = gr.File(label="Full-resolution result", interactive=False, elem_id="download")
                        with gr.Accordion("Raw measurements (JSON)", open=False):
                            record_out = gr.JSON(label="Record (JSON)", show_label=False)
                show_faces_in = gr.Checkbox(False, label="Show detected faces", elem_id="show-faces",
                                            info="the photo as the detector saw it: restored faces solid (coloured by identity "
                                            "distance when measured), candidates rejected as not a face dashed red")
                had_result = gr.Checkbox(False, visible="hidden")  # a result was on screen at the last press (the failure panel says so)
                faces_out = gr.Image(label="Detected faces", type="numpy", format="png", interactive=False, visible=False,
                                     height=480, elem_id="detected-faces")
                gallery_out = gr.Gallery(label="Faces: original crop | restored crop", format="png", columns=2,
                                         fit_columns=False, height=None, object_fit="contain", preview=False,
                                         elem_id="faces")

    with gr.Tab("Video"):
        video_mode_in = app_video.build(STATE, ui_errors, RESULTS_DIR, mode_labels.hints(video=True), TEMP_MAX_AGE_S)
    demo.unload(app_video.on_leave(STATE))  # Gradio runs it when the page's heartbeat ends (the tab closed or reloaded)

    with gr.Tab("Hardware check"):
        app_check.build(demo, hardware_check, saved_hardware_check, measure_tips, saved_tips)

    weight_inputs = [mode_in, model_in, detector_in, aligned_in, upscale_in, task_in]
    weight_outputs, result_outputs = [weights_md, download_weights_btn, all_weights_md], [slider_out, file_out, metrics_md, gallery_out, record_out]
    # A press checks the chosen mode's files (missing: refused, the result kept), then clears the last result in
    # the page, so a failure never leaves it on screen; a failure then names the problem in the panel.
    ready = restore_btn.click(mode_ready, weight_inputs, None, api_visibility="private", show_progress="hidden")
    stop_btn.click(stop_own, gr.State("restores"), stop_btn, api_visibility="private", queue=False)
    ready.success(lambda: gr.update(visible=True), None, stop_btn, api_visibility="private", queue=False, show_progress="hidden")  # Stop: while it runs
    ready.failure(weights_view, weight_inputs, weight_outputs, api_visibility="private", show_progress="hidden")  # the button it names
    restoring = ready.success(None, record_out, [*result_outputs, had_result], js=page.CLEAR_AND_SHOW_RESULT, api_visibility="private").then(
        restore, inputs=[image_in, mode_in, model_in, detector_in, alpha_in, threshold_in, max_faces_in, aligned_in, format_in, upscale_in,
                            task_in, damage_in, face_check_in, identity_in, identity_limit_in, identity_alpha_in],
        outputs=result_outputs, api_name="restore", concurrency_limit=1, concurrency_id="engine", show_progress_on=[slider_out],
    )
    restoring.success(None, js=page.SHOW_RESULT, api_visibility="private")  # the result in view, wherever the page was scrolled
    for after in (restoring.success, restoring.failure):  # Gradio 6.31's page runs a .then after a success only: Stop goes either way
        after(lambda: gr.update(visible=False), None, stop_btn, api_visibility="private", queue=False, show_progress="hidden")
    restoring.failure(show_failure, had_result, [slider_out, metrics_md], api_visibility="private", show_progress="hidden"
              ).then(weights_view, weight_inputs, weight_outputs, api_visibility="private", show_progress="hidden")
    # The boxes follow the result (a new record, or none after a new upload) and the checkbox.
    for trigger in (show_faces_in.change, record_out.change):
        trigger(faces_view, [slider_out, record_out, show_faces_in, image_in], faces_out, api_visibility="private",
                concurrency_limit=1, concurrency_id="faces-view", show_progress="hidden")
    # The panel follows the Photo box, in its own lane: our decoder's before-view of what it holds (or why the file cannot
    # be used), and the placeholder once it is empty: cleared, or a refused upload (which fires no clear).
    image_in.change(preview, image_in, result_outputs, api_visibility="private", concurrency_limit=1,
                    concurrency_id="preview", show_progress_on=[slider_out])
    examples.click(lambda sample: sample[0], examples, image_in, api_visibility="private", show_progress="hidden")  # a plain value, as for the editor
    gr.on([task_in.change, image_in.change], lambda t, i: (gr.update(visible=task_ui.editor_visible(t)), task_ui.editor_value(t, i)), [task_in, image_in], [damage_box, damage_in], api_visibility="private")
    identity_limit_in.change(lambda v: gr.update(**fv.blend_control(v)), identity_limit_in, identity_alpha_in, api_visibility="private", queue=False, show_progress="hidden")
    task_in.change(lambda t, m, on: (*(gr.update(**u) for u in task_ui.task_controls(t, m, DEFAULT, get_restorer().device, readiness.current_files(), on)),
                   task_ui.task_spec(t).aligned_only), [task_in, model_in, aligned_by_task], [model_in, mode_in, aligned_in, aligned_by_task],
                   api_visibility="private")  # seg2face turns "aligned" on, and off again when left, said so
    demo.load(lambda t: (mode_radio(t), gr.update(choices=mode_labels.current_choices(get_restorer().device, None, video=True)), gr.update(choices=task_ui.task_choices(readiness.current_files()))), task_in,
              [mode_in, video_mode_in, task_in], api_visibility="private", show_progress="hidden")  # labels as this machine runs them
    for trigger in (demo.load, prepare_timer.tick):
        trigger(preparation_status, None, [prepare_md, prepare_timer], api_visibility="private", show_progress="hidden")
    shown = download_weights_btn.click(lambda: gr.update(visible=True), None, stop_download_btn, api_visibility="private")  # Stop: while one runs
    downloading = shown.then(download_weights, weight_inputs, weight_outputs, api_visibility="private", concurrency_limit=1)
    stop_download_btn.click(stop_own, gr.State("downloads"), stop_download_btn, cancels=[downloading], api_visibility="private", queue=False)
    downloading.then(lambda *a: (upscale_view(*a[:3]), gr.update(visible=False), mode_radio(a[3])), [image_in, upscale_in, mode_in, task_in],
                     [upscale_md, stop_download_btn, mode_in], api_visibility="private", show_progress="hidden")  # a download clears the warnings
    # One queue lane for the panel, so answers arrive in the order asked: the page-load
    # check (slow the first time: it finds the device for auto) never overwrites a newer one.
    panel = dict(api_visibility="private", concurrency_limit=1, concurrency_id="weights-panel", show_progress="hidden")
    for trigger in (demo.load, mode_in.change, model_in.change, detector_in.change, aligned_in.change, upscale_in.change, task_in.change):
        trigger(weights_view, weight_inputs, weight_outputs, **panel)
    for trigger in (image_in.change, upscale_in.change, mode_in.change):
        trigger(upscale_view, [image_in, upscale_in, mode_in], upscale_md, api_visibility="private",
                concurrency_limit=1, concurrency_id="upscale-panel", show_progress="hidden")

# Every event goes through the queue; api_open=False refuses direct /gradio_api/run/ posts,
# which would otherwise skip it (and the one-at-a-time limit) off Spaces.
demo.queue(api_open=False, default_concurrency_limit=1, max_size=8)


# --------------------------------------------------------------------- serve


def launch_options() -> dict[str, Any]:
    """launch() settings shared by ``python app.py`` and the tests."""
    return dict(max_file_size=UPLOAD_MAX_BYTES,  # above our limit: the decoder's own message names it, in the panel
                # unknown /run/ routes 404; private events answer the page only; on a shared server, each visitor's share
                app_kwargs=seam.app_kwargs(demo, uploads.max_event_body_bytes(), lambda: seam.VisitorShares(
                    STATE.policy.visitor_places, ("engine",), STATE.policy.visitor_upload_bytes, TEMP_MAX_AGE_S, STATE.refused) if STATE.policy.shared else None),
                footer_links=["api", "gradio"], run_history=False, enable_monitoring=False, mcp_server=False,
                ssr_mode=False, show_error=False, css=page.CSS, js=page.PAGE_JS)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_server_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.backend == "ray":
        from gpen_core.scaleout.serve import RayRestorer

        try:
            STATE.use_backend(RayRestorer(args.address))
        except GPENError as exc:
            raise SystemExit(f"error: {exc}") from None
    STATE.policy = args.policy
    ready_server(restores_here=STATE.backend is None)  # before the page, and before any model loads
    if swept := outputs.sweep_temp(TEMP_ROOT, TEMP_MAX_AGE_S):
        log.info("deleted %d temporary file(s) older than %d s from %s (left by an earlier run)", swept, TEMP_MAX_AGE_S, TEMP_ROOT)
    auth = args.auth
    if args.share and auth is None:
        auth = ("gpen", secrets.token_urlsafe(12))
        print(f"* Public link requested: log in as user {auth[0]!r} with password {auth[1]!r}")
    # quiet: Gradio's own start lines end with "set `share=True` in `launch()`"; ours name our flags.
    _, local_url, share_url = demo.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth,
                                          prevent_thread_lock=True, quiet=True, **launch_options())
    print("\n".join(start_lines(local_url, share_url, args.share)))
    STATE.preparation = prep_ui.start_background(get_restorer, remote=STATE.backend is not None)  # after launch: the page is up first
    demo.block_thread()


if __name__ == "__main__":
    main()
