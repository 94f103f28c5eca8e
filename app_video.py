"""The browser app's Video tab: layout and wiring only (``app.py`` builds it inside its Blocks).

Upload a clip, pick a memory mode, Restore video (Stop ends it and keeps nothing); a progress bar
counts frames and the time left; the result plays in the page, one chosen frame shows as a
before/after, and the measured panel gives the clip's peaks and what was kept. The work is
``gpen_core.video.stream.restore_video``'s; the words are ``gpen_core.presentation.video_tab``'s.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import gradio as gr

from gpen_core.compat import gradio as seam
from gpen_core.errors import GPENError, InputError
from gpen_core.modes import AUTO
from gpen_core.options import RestoreOptions
from gpen_core.presentation import messages, page, video_tab
from gpen_core.video.errors import VideoStopped

log = logging.getLogger("gpen.app")


def on_leave(state: Any) -> Callable[[gr.Request], None]:
    """The page's unload handler: a visitor who closed or reloaded the page stops their running clip (nobody
    will see it, others wait behind it), which removes what it wrote."""

    def visitor_left(request: gr.Request) -> None:
        state.stops.stop(getattr(request, "session_hash", None))

    return visitor_left


def build(state: Any, errors: Callable[[Any], AbstractContextManager[None]], results_dir: Path,
          mode_choices: list[tuple[str, str]]) -> gr.Radio:
    """The tab's components and events, in the current Blocks; returns its mode radio (relabelled on load)."""

    def note(video: str | None) -> tuple[str, Any]:
        """On upload: what the clip is and, on a capped server, how much of it will be restored."""
        if not video:
            return video_tab.PLACEHOLDER, None
        return video_tab.clip_note(video, state.policy.video_cap_s).markdown, None

    def restore(video: str | None, mode: str, progress: gr.Progress = gr.Progress(),
                request: gr.Request | None = None) -> tuple[Any, Any, str, Any, dict[str, Any]]:
        """Restore the clip: (the result to play, the middle frame's before/after, the panel, the frame slider, JSON)."""
        session = getattr(request, "session_hash", None)
        stop, waited, count = state.stops.start(session), seam.still_waited_for(), [0, 0]
        try:
            with errors(request):
                if not video:
                    raise InputError("Upload a video first.")
                try:
                    return run(video, mode or AUTO, progress, stop, waited, count)
                except VideoStopped:
                    if not waited():
                        log.info("the visitor left during a clip: stopped after %d frames, its output removed", count[0])
                        raise
                text = messages.stopped_text(*count)  # the visitor's own Stop: an outcome, in a pop-up that closes
                gr.Info(text, duration=messages.toast_seconds(text), title="Stopped")
                return None, None, text, gr.update(value=0, interactive=False), {}
        finally:
            state.stops.finish(session, stop)

    def run(video: str, mode: str, progress: Any, stop: threading.Event, waited: Callable[[], bool],
            count: list[int]) -> tuple[Any, Any, str, Any, dict[str, Any]]:
        """One clip into a folder of its own, removed whole when the clip fails or stops (nothing kept for nobody)."""
        from gpen_core.video.stream import VideoOptions, restore_video

        if state.backend is not None:
            raise InputError("Videos are restored in the app's own process; this server sends photos to Ray "
                             "(--backend ray). Restore the clip on that machine with: python -m gpen_core restore CLIP.mp4")
        clip = video_tab.clip_note(video, state.policy.video_cap_s)
        if not clip.usable:
            raise messages.AlreadyShown(clip.shown)  # worded once: plain in the pop-up, Markdown in the panel
        out = video_tab.results_path(results_dir, video, mode)
        t0 = time.perf_counter()

        def tick(done: int, expected: int) -> None:
            count[:] = done, expected
            if not waited():  # the visitor closed the page: nobody will see this clip, and others wait behind it
                stop.set()
            progress(video_tab.progress_fraction(done, expected), desc=video_tab.progress_text(done, expected, time.perf_counter() - t0))

        try:
            result = restore_video(video, out, state.engine(), RestoreOptions(mode=mode),  # type: ignore[arg-type]
                                   VideoOptions(cap=clip.cap), progress=tick, stop=stop)
        except BaseException as exc:
            shutil.rmtree(out.parent, ignore_errors=True)  # the folder results_path made for this clip, and only it
            if isinstance(exc, GPENError) and not isinstance(exc, VideoStopped):
                raise messages.AlreadyShown(messages.shown_error(exc, names={video: Path(video).name})) from None
            raise
        at = video_tab.middle_time(result)
        pair = video_tab.frame_pair(video, str(out), at)
        return (str(out), pair, video_tab.video_markdown(result),
                gr.update(maximum=max(result.duration_s, 0.01), value=at, interactive=True), result.to_json())

    def mode_ready(mode: str | None) -> None:
        """Before the clip: a chosen mode missing its files is refused here, the previous result kept (no panel
        change: the pop-up says it all)."""
        from gpen_core.presentation import weights_view as wv
        from gpen_core.restorer import get_restorer

        with errors(None):
            wv.check_mode_ready(get_restorer().device, wv.WeightsRequest(None if mode in (None, "", AUTO) else mode, None, None),
                                state.policy, other_tab=True)

    def stop_own_clip(request: gr.Request) -> None:
        """Stop: this session's clip only (another visitor's Stop never reaches it)."""
        state.stops.stop(getattr(request, "session_hash", None))

    def frame(video: str | None, restored: str | None, at: float, request: gr.Request | None = None) -> Any:
        """The before/after at the chosen time (the slider's "Frame at"); a clip over the limits is refused with them."""
        if not video or not restored:
            return None
        with errors(request):
            return video_tab.frame_pair(video, restored, float(at or 0))

    def failed(request: gr.Request) -> tuple[Any, str]:
        """After a failed clip: the panel names what happened (the same words as the pop-up; a Stop is no failure)."""
        return None, state.take_error(getattr(request, "session_hash", None)) or "Restore failed: see the message that popped up."

    with gr.Row(equal_height=False, elem_id="video-row"):  # on a phone the result follows the buttons (page.CSS)
        with gr.Column(scale=4, min_width=320, elem_id="video-controls"):
            video_in = gr.Video(label="Video", sources=["upload"], height=300, elem_id="video-in")
            with gr.Row(elem_id="video-buttons"):
                restore_btn = gr.Button("Restore video", variant="primary", size="lg", elem_id="video-restore", scale=3)
                stop_btn = gr.Button("Stop", size="lg", elem_id="video-stop", scale=1)
            mode_in = gr.Radio(mode_choices, value=AUTO, label="Memory mode", elem_id="video-mode-radio")
        with gr.Column(scale=6, min_width=420, elem_id="video-results"):
            video_out = gr.Video(label="Restored video (plays here; download from its menu)", interactive=False,
                                 height=300, elem_id="video-out")
            at_in = gr.Slider(0, 1, value=0, step=0.01, label="Frame at (seconds)", interactive=False, elem_id="video-frame-at")
            pair_out = gr.ImageSlider(label="Before / after of that frame", type="numpy", format="png", interactive=False,
                                      max_height=360, elem_id="video-slider")
            panel_md = gr.Markdown(video_tab.PLACEHOLDER, elem_id="video-metrics")
            with gr.Accordion("Raw measurements (JSON)", open=False):
                record_out = gr.JSON(show_label=False)

    outputs = [video_out, pair_out, panel_md, at_in, record_out]
    video_in.upload(note, video_in, [panel_md, video_out], api_visibility="private", show_progress="hidden")
    ready = restore_btn.click(mode_ready, mode_in, None, api_visibility="private", show_progress="hidden")
    running = ready.success(restore, [video_in, mode_in], outputs, api_name="restore_video", concurrency_limit=1,
                            concurrency_id="engine", show_progress_on=[video_out])
    running.success(None, js=page.SHOW_VIDEO_RESULT, api_visibility="private")  # the result in view, wherever the page was
    # Stop asks this session's running clip to end (it removes its partial output); cancelling the event
    # instead would free the engine lane while the clip's threads still run.
    stop_btn.click(stop_own_clip, None, None, api_visibility="private", show_progress="hidden")
    running.failure(failed, None, [pair_out, panel_md], api_visibility="private", show_progress="hidden")
    at_in.release(frame, [video_in, video_out, at_in], pair_out, api_visibility="private", concurrency_limit=1,
                  concurrency_id="video-frame", show_progress="hidden")
    return mode_in
