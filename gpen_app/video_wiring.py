"""The browser app's Video tab: layout and wiring only (``app.py`` builds it inside its Blocks).

Upload a clip, pick a memory mode, Restore video (Stop ends it and keeps nothing); a progress bar
counts frames and the time left; the result plays in the page, one chosen frame shows as a
before/after, and the measured panel gives the clip's peaks and what was kept. The work is
``gpen_core.video.stream.restore_video``'s; the words are ``gpen_app.video_tab``'s.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from dataclasses import replace
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from gpen_app import messages, mode_labels, page, panels, queue_seam, video_tab, video_view
from gpen_core.cli_words import with_run_notes
from gpen_core.errors import GPENError, InputError
from gpen_core.images import outputs as result_files
from gpen_core.modes import AUTO, IDENTITY_THRESHOLD
from gpen_core.options import RestoreOptions
from gpen_core.video.errors import VideoStopped

log = logging.getLogger("gpen.app")
# A server started with --backend ray sends photos to its replicas; a clip would need the engine here.
NO_VIDEO_ON_RAY = ("Videos are restored in the app's own process; this server sends photos to Ray (--backend ray). "
                   "Restore the clip on that machine with: python -m gpen_core restore CLIP.mp4")


def on_leave(state: Any) -> Callable[[gr.Request], None]:
    """The page's unload handler: a visitor who closed or reloaded the page stops their running clip (nobody
    will see it, others wait behind it), which removes what it wrote."""

    def visitor_left(request: gr.Request) -> None:
        state.stops.stop(getattr(request, "session_hash", None))

    return visitor_left


class _Handlers:
    """The tab's events: each reads the app's state and errors context given at build time."""

    def __init__(self, state: Any, errors: Callable[..., AbstractContextManager[None]], results_dir: Path,
                 max_age_s: float | None) -> None:
        self.state, self.errors, self.results_dir, self.max_age_s = state, errors, results_dir, max_age_s
        self.mode_in: Any = None  # the mode radio, once laid out: the upload note estimates each of its modes

    def note(self, video: str | None) -> tuple[Any, ...]:
        """On upload: what the clip is and, on a capped server, how much of it will be restored; the last clip's
        results and face choice go."""
        cleared = (None, None, gr.update(value=None, label=video_view.PAIR_LABEL), gr.update(choices=[], value=[]),
                   gr.update(**video_view.NO_FRAMES), [], "",
                   gr.update(choices=[], value=None))
        if not video:
            return (video_tab.PLACEHOLDER, *cleared)
        clip = video_tab.clip_note(video, self.state.policy.video_cap_s, self.state.policy.shared)
        if not clip.usable:
            return (clip.markdown, *cleared)
        rows = video_tab.estimates([v for _, v in self.mode_in.choices if v != AUTO], getattr(self.state.engine(), "device", "cpu"))
        return ("\n\n".join(filter(None, [clip.markdown, video_tab.estimate_markdown(clip.frames, rows)])), *cleared)

    def restore(self, video: str | None, mode: str, start: float | None, end: float | None, face_check: bool,
                tracks: list[int] | None, known: list[tuple[str, int]] | None, identity: bool = True, turned: bool = False,
                progress: gr.Progress = gr.Progress(), request: gr.Request | None = None) -> tuple[Any, ...]:
        """Restore the clip: (the result, the middle frame's before/after, the panel, the frame slider, JSON) as
        the public endpoint has them, then for the page only (states): the original over the same span, the
        frames' times and faces, the faces offered and those kept. Stop ends this session's clip only."""
        waited, count = queue_seam.still_waited_for(), [0, 0]
        with self.state.stops.own(getattr(request, "session_hash", None)) as stop, self.errors(request, "video"):
            if not video:
                raise InputError("Upload a video first.")
            try:
                if stop.is_set():  # its visitor's Stop came while it waited in the queue: none of it runs
                    raise VideoStopped("stopped while it waited in the queue")
                return self.run(video, mode or AUTO, (start, end, face_check, tracks, known, identity, turned), progress,
                                stop, waited, count)
            except VideoStopped:
                if not waited():
                    log.info("the visitor left during a clip: stopped after %d frames, its output removed", count[0])
                    raise
            text = messages.stopped_text(*count)  # the visitor's own Stop: an outcome, in a pop-up that closes
            gr.Info(text, duration=messages.toast_seconds(text), title="Stopped")
            return None, None, text, gr.update(**video_view.NO_FRAMES), {}, None, [], [], known or [], []

    def clip_part(self, video: str, start: float | None, end: float | None) -> tuple[video_tab.ClipNote, video_tab.Span]:
        """The clip and the part of it a run restores (this server's cap applied); refused on a Ray server, or for a
        file that is no usable video (worded once: plain in the pop-up, Markdown in the panel)."""
        if self.state.backend is not None:
            raise InputError(NO_VIDEO_ON_RAY)
        clip = video_tab.clip_note(video, self.state.policy.video_cap_s, self.state.policy.shared)
        if not clip.usable:
            raise messages.AlreadyShown(clip.shown)
        return clip, video_tab.span(clip, start, end, self.state.policy.video_cap_s)

    def run(self, video: str, mode: str, asked: tuple[Any, ...], progress: Any, stop: threading.Event,
            waited: Callable[[], bool], count: list[int]) -> tuple[Any, ...]:
        """One clip into a folder of its own, removed whole when the clip fails or stops (nothing kept for nobody)."""
        from gpen_core.video.rate import FrameRate
        from gpen_core.video.stream import VideoOptions, restore_video

        start, end, face_check, tracks, known, identity, turned = asked
        clip, part = self.clip_part(video, start, end)
        left_out = _left_out(tracks, known)
        # Before the first frame, as the CLI does: a clip whose work on torch outlasts converting its generator
        # converts it in a child (this visitor's Stop kills it), so the clip runs on OpenVINO.
        first = video_tab.convert_before_clip(clip, part, mode, self.state.engine(), stop, lambda text: progress(0.0, desc=text))
        if first.outcome == "stopped":
            raise VideoStopped(first.note)
        if self.max_age_s is not None:  # an API caller's original span is a file Gradio's clean-up never learns of
            result_files.sweep(self.results_dir, self.max_age_s)
        out = video_tab.results_path(self.results_dir, video, mode)
        rate = FrameRate()
        progress(0.0, desc=video_tab.progress_text(0, 0, None))  # this clip's words from the start

        def tick(done: int, expected: int) -> None:
            count[:] = done, expected
            if not waited():  # the visitor closed the page: nobody will see this clip, and others wait behind it
                stop.set()
            progress(video_tab.progress_fraction(done, expected), desc=video_tab.progress_text(done, expected, rate(done, expected)))

        records: list[Any] = []
        # The server's cap cuts by what decodes (clip.cap; a header can lie), and the notes say where.
        vopts = VideoOptions(start_s=part.start_s, end_s=(float(end) if end else None) if part.capped else part.end_s,
                             skip=left_out, cap=clip.cap)
        try:
            opts = RestoreOptions(mode=mode, face_check=bool(face_check), identity="auto" if identity else "off",  # type: ignore[arg-type]
                                  orientations=bool(turned))
            result = restore_video(video, out, self.state.engine(), opts, vopts, progress=tick, stop=stop,
                                   on_frame=lambda r: records.append(video_view.frame_faces(r)))
            result = video_tab.named_by_mode(with_run_notes(replace(result, notes=(*part.notes, *result.notes)), first), video)
            out = Path(result.output)
            before = video_view.original_span(video, out.with_name("original_" + out.name), part.start_s, part.end_s, vopts.crf)
        except BaseException as exc:
            shutil.rmtree(out.parent, ignore_errors=True)  # the folder results_path made for this clip, and only it
            if isinstance(exc, GPENError) and not isinstance(exc, VideoStopped):
                raise messages.AlreadyShown(messages.shown_error(exc, names={video: Path(video).name}, public=self.state.policy.shared)) from None
            raise
        times = video_view.frame_times(str(out))
        spec = video_view.slider_spec(times)
        pair = video_tab.frame_pair(before, str(out), video_view.frame_time(times, spec["value"]))
        choices = video_view.track_choices(records)
        kept = [k for _, k in choices if k not in left_out]
        return (str(out), pair, video_tab.video_markdown(result, bool(identity)), gr.update(**spec), result.to_json(),
                before, times, records, choices, kept)

    def mode_ready(self, mode: str | None) -> None:
        """Before the clip: a chosen mode missing its files is refused here, the previous result kept (no panel
        change: the pop-up says it all)."""
        from gpen_app import weights_view as wv
        from gpen_core.restorer import get_restorer

        with self.errors(None):
            wv.check_mode_ready(get_restorer().device, wv.WeightsRequest(None if mode in (None, "", AUTO) else mode, None, None),
                                self.state.policy, other_tab=True)

    def stop_own_clip(self, request: gr.Request) -> None:
        """Stop: this session's clip only, running or still waiting in the queue (another visitor's Stop never
        reaches it)."""
        self.state.stops.stop(getattr(request, "session_hash", None))

    def find(self, video: str | None, mode: str, start: float | None, end: float | None, face_check: bool, turned: bool = False,
             request: gr.Request | None = None) -> tuple[Any, list[Any], str, list[Any]]:
        """The faces of the part's first seconds, numbered as a restore will number them, offered before it runs: (the
        face boxes, every one ticked; no faces offered yet; the count; the faces offered, for :func:`_wire` to hand on)."""
        with self.errors(request):
            if not video:
                raise InputError("Upload a video first.")
            part = self.clip_part(video, start, end)[1]
            scratch = video_tab.results_path(self.results_dir, video, "faces")
            try:
                opts = RestoreOptions(mode=mode or AUTO, face_check=bool(face_check), orientations=bool(turned))  # type: ignore[arg-type]
                records = video_view.find_faces(video, scratch, self.state.engine(), opts, part.start_s, part.end_s)
            finally:
                with contextlib.suppress(OSError):  # the folder results_path made for this call, empty again
                    scratch.parent.rmdir()
        choices = video_view.track_choices(records)
        return gr.update(choices=choices, value=[k for _, k in choices]), [], video_view.found_text(records), choices

    def frame(self, before: str | None, restored: str | None, number: float, times: list[float] | None,
              faces: list[Any] | None, show: bool, tracks: list[int] | None, known: list[tuple[str, int]] | None = None,
              request: gr.Request | None = None) -> tuple[Any, Any]:
        """The before/after of the chosen frame (the slider's number) and, when asked, its faces drawn (those offered
        and unticked grey); a clip over the limits is refused with them."""
        if not before or not restored or not times:
            return None, gr.update(visible=bool(show), value=None)
        at = video_view.frame_time(times, number)
        with self.errors(request):
            pair = video_tab.frame_pair(before, restored, at)
        drawn: Any = gr.update(visible=False)
        i = video_view.frame_number(times, number)
        shown = faces[i - 1] if faces and i <= len(faces) else None
        if show and pair is not None:
            image, caption = video_view.draw_faces(pair[0], shown, _left_out(tracks, known, refuse=False))
            drawn = gr.update(visible=True, value=image, label=f"Faces on frame {i}: {caption}")
        # the frame's identity distances in the caption, as the photo tab shows them per face
        return gr.update(value=pair, label=video_view.pair_label(times, number, faces)), drawn

    def failed(self, shown: Any, request: gr.Request) -> tuple[Any, str]:
        """After a failed clip: the panel names what happened (the same words as the pop-up), and what became of the
        result: a failure leaves the last clip (``shown``) in its player, so it is said to be the previous one."""
        panel = self.state.take_error(getattr(request, "session_hash", None), "video") or "Restore failed: see the message that popped up."
        return None, panels.nothing_restored(panel, "the video shown is the previous result" if shown else None)


def build(state: Any, errors: Callable[..., AbstractContextManager[None]], results_dir: Path,
          mode_choices: list[tuple[str, str]], max_age_s: float | None = None) -> gr.Radio:
    """The tab's components and events, in the current Blocks; returns its mode radio (relabelled on load). Each clip
    first sweeps ``results_dir`` of files over ``max_age_s`` old, as a photo restore does."""
    on = _Handlers(state, errors, results_dir, max_age_s)
    c = _layout(mode_choices)
    on.mode_in = c.mode_in
    _wire(on, c)
    return c.mode_in


class _Page(NamedTuple):
    """The tab's components, by name (a name :func:`_layout` does not make fails as the page is built)."""

    video_in: Any
    mode_in: Any
    start_in: Any
    end_in: Any
    face_check_in: Any
    identity_in: Any
    turned_in: Any
    tracks_in: Any
    find_btn: Any
    found_md: Any
    restore_btn: Any
    stop_btn: Any
    before_out: Any
    video_out: Any
    at_in: Any
    flag_in: Any
    pair_out: Any
    show_faces_in: Any
    faces_out: Any
    panel_md: Any
    record_out: Any
    before_state: Any
    times_state: Any
    faces_state: Any
    known_state: Any
    kept_state: Any
    found_state: Any


def _layout(mode_choices: list[tuple[str, str]]) -> _Page:
    """The tab's components, by name."""
    with gr.Row(equal_height=False, elem_id="video-row"):  # on a phone the result follows the buttons (page.CSS)
        with gr.Column(scale=4, min_width=320, elem_id="video-controls"):
            video_in = gr.Video(label="Video", sources=["upload"], height=300, elem_id="video-in")
            # The mode before the button: on a phone nothing the restore depends on sits below the result.
            mode_in = gr.Radio(mode_choices, value=AUTO, label="Memory mode", info=mode_labels.VIDEO_OUTPUT,
                               elem_id="video-mode-radio")
            with gr.Accordion("Part of the clip, face check, which faces", open=False, elem_id="video-options"):
                with gr.Row():
                    start_in = gr.Number(0, label="Start (s)", info="0: the clip's start", elem_id="video-start")  # no minimum: video_tab.span refuses in our words
                    end_in = gr.Number(0, label="End (s)", info="0: the clip's end", elem_id="video-end")
                face_check_in = gr.Checkbox(True, label="Face check", elem_id="video-face-check",
                                            info="skip detections whose landmarks do not form a face (the panel counts "
                                            "them; the frame viewer draws them dashed red); off restores every detection")
                identity_in = gr.Checkbox(True, label="Identity check", elem_id="video-identity",
                                          info="each face's identity distance per frame and where it jumped (every "
                                          "mode but low; its CPU per frame: docs/identity.md); off: not checked")
                turned_in = gr.Checkbox(False, label="Search turned faces", elem_id="video-turned",
                                        info="each frame also turned 90°, 180° and 270°, for a clip filmed on its side or "
                                        "upside down without a rotation tag; up to 4× the detection time a frame")
                tracks_in = gr.CheckboxGroup([], value=[], type="value", label="Faces to restore", elem_id="video-tracks",
                                             info="Find faces (or a restore) lists the faces followed, numbered as on the "
                                             "frame viewer; untick one to leave it as it was, every other face (one "
                                             "first seen later too) is restored. Same clip, start and face check: same "
                                             "numbers; a face that leaves and returns is numbered anew")
                with gr.Row():
                    find_btn = gr.Button(f"Find faces (first {video_view.PREVIEW_S:g} s of the part)", size="sm",
                                         elem_id="video-find-faces")
                    found_md = gr.Markdown(elem_id="video-found")
            with gr.Row(elem_id="video-buttons"):
                restore_btn = gr.Button("Restore video", variant="primary", size="lg", elem_id="video-restore", scale=3)
                stop_btn = gr.Button("Stop", size="lg", elem_id="video-stop", scale=1)
        with gr.Column(scale=6, min_width=420, elem_id="video-results"):
            with gr.Row(equal_height=True, elem_id="video-pair"):
                before_out = gr.Video(label="Original (the same part)", interactive=False, height=300, elem_id="video-before")
                video_out = gr.Video(label="Restored video (plays here; download from its menu)", interactive=False,
                                     height=300, elem_id="video-out")
            with gr.Row(equal_height=True):
                at_in = gr.Slider(step=1, elem_id="video-frame-at", scale=3, **video_view.NO_FRAMES)
                flag_in = gr.Dropdown([], value=None, label="Identity: frames to look at", elem_id="video-identity-frames",
                                      scale=2, info="frames where a restored face's identity jumped more than the input's "
                                      f"own, or went over {IDENTITY_THRESHOLD:g}, dlib's same-person threshold (docs/identity.md)")
            pair_out = gr.ImageSlider(label=video_view.PAIR_LABEL, type="numpy", format="png", interactive=False,
                                      max_height=360, elem_id="video-slider")
            show_faces_in = gr.Checkbox(False, label="Show detected faces", elem_id="video-show-faces",
                                        info="the frame as the detector saw it: restored faces solid green and numbered, "
                                        "faces you left out grey, detections the face check rejected dashed red")
            faces_out = gr.Image(label="Detected faces", type="numpy", format="png", interactive=False, visible=False,
                                 height=360, elem_id="video-faces")
            panel_md = gr.Markdown(video_tab.PLACEHOLDER, elem_id="video-metrics")
            with gr.Accordion("Raw measurements (JSON)", open=False):
                record_out = gr.JSON(show_label=False)
    before_state, times_state, faces_state, known_state, kept_state, found_state = (
        gr.State(None), gr.State([]), gr.State([]), gr.State([]), gr.State([]), gr.State([]))
    return _Page(**{k: v for k, v in locals().items() if k in _Page._fields})


def _wire(on: _Handlers, c: _Page) -> None:
    """The tab's events, on the components :func:`_layout` made."""
    # /restore_video's outputs stay the five a client unpacks (docs/video.md); states are not in the API
    outputs = [c.video_out, c.pair_out, c.panel_md, c.at_in, c.record_out,
               c.before_state, c.times_state, c.faces_state, c.known_state, c.kept_state]
    c.video_in.upload(on.note, c.video_in, [c.panel_md, c.video_out, c.before_out, c.pair_out, c.tracks_in, c.at_in,
                                            c.known_state, c.found_md, c.flag_in],
                      api_visibility="private", show_progress="hidden")
    ready = c.restore_btn.click(on.mode_ready, c.mode_in, None, api_visibility="private", show_progress="hidden")
    running = ready.success(on.restore, [c.video_in, c.mode_in, c.start_in, c.end_in, c.face_check_in, c.tracks_in,
                                         c.known_state, c.identity_in, c.turned_in], outputs,
                            api_name="restore_video", concurrency_limit=1, concurrency_id="engine", show_progress_on=[c.video_out])
    running.success(None, js=page.SHOW_VIDEO_RESULT, api_visibility="private")  # the result in view, wherever the page was
    running.success(lambda before, offered, kept, times, faces: (before, gr.update(choices=offered, value=kept), gr.update(
                    label=video_view.pair_label(times, video_view.slider_spec(times)["value"], faces)),
                    gr.update(choices=video_view.flagged_choices(faces or []), value=None)),
                    [c.before_state, c.known_state, c.kept_state, c.times_state, c.faces_state],
                    [c.before_out, c.tracks_in, c.pair_out, c.flag_in], api_visibility="private", show_progress="hidden")
    # Find faces ticks every face it lists; the list of faces offered follows in a step of its own, emptied meanwhile.
    # The page sets a State before a checkbox group's value: a Restore pressed while Find ran read the new list with the
    # boxes as they were (none ticked) and was refused "no face is ticked". With no list, a restore takes every face.
    found = c.find_btn.click(on.find, [c.video_in, c.mode_in, c.start_in, c.end_in, c.face_check_in, c.turned_in],
                             [c.tracks_in, c.known_state, c.found_md, c.found_state],
                             api_visibility="private", concurrency_limit=1, concurrency_id="engine", show_progress_on=[c.found_md])
    found.success(lambda offered: offered, c.found_state, c.known_state, api_visibility="private", queue=False, show_progress="hidden")
    running.then(queue_seam.forget_run_time(running), api_visibility="private", show_progress="hidden")  # no last clip's time on the next bar
    # Stop asks this session's running clip to end (it removes its partial output); cancelling the event
    # instead would free the engine lane while the clip's threads still run. A clip still waiting in the queue
    # leaves the line and ends at once, Stopped as a running one. Outside the queue: a queue others have filled
    # refuses every new event, and this visitor's Stop must still reach their clip.
    c.stop_btn.click(on.stop_own_clip, None, None, api_visibility="private", show_progress="hidden", queue=False)
    running.failure(on.failed, c.video_out, [c.pair_out, c.panel_md], api_visibility="private", show_progress="hidden")
    viewer = [c.before_out, c.video_out, c.at_in, c.times_state, c.faces_state, c.show_faces_in, c.tracks_in,
              c.known_state]
    for trigger in (c.at_in.release, c.show_faces_in.change):
        trigger(on.frame, viewer, [c.pair_out, c.faces_out], api_visibility="private", concurrency_limit=1,
                concurrency_id="video-frame", show_progress="hidden")
    # A flagged frame chosen: the slider moves to it and its before/after (with its distances) shows.
    c.flag_in.input(lambda n: gr.update(value=n) if n else gr.update(), c.flag_in, c.at_in, api_visibility="private",
                    show_progress="hidden").then(on.frame, viewer, [c.pair_out, c.faces_out], api_visibility="private",
                                                 concurrency_limit=1, concurrency_id="video-frame", show_progress="hidden")


def _left_out(tracks: list[int] | None, known: list[tuple[str, int]] | None, refuse: bool = True) -> frozenset[int]:
    """The faces to leave as they were: those offered (by Find faces or the last restore) and unticked. Every other
    face is restored, one the list never offered too (first seen after Find's seconds, or back after leaving the
    frame: the tracker numbers it anew). ``refuse``: a list offered with none ticked is refused (a Restore pressed
    while Find still ran reads the new list with no box ticked yet)."""
    offered = {int(k) for _, k in (known or [])}
    picked = {int(k) for k in (tracks or [])}
    if refuse and offered and not picked:
        raise InputError("No face is ticked under \"Faces to restore\": tick at least one, or tick them all for every face.")
    return frozenset(offered - picked)
