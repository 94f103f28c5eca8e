"""What the app's pop-ups say and for how long (gpen_app.messages): a Stop is an outcome, a
refusal closes by itself, and a server path is shown as the name its visitor knows."""

from __future__ import annotations

from gpen_core.errors import InputError
from gpen_app import messages


def test_a_refusal_closes_after_the_time_to_read_it() -> None:
    short, long = messages.toast_seconds("Upload a video first."), messages.toast_seconds("word " * 400)
    assert 8 <= short < 12 and short < long <= 45


def test_a_stop_says_what_was_restored_and_that_nothing_is_kept() -> None:
    assert messages.stopped_text(12, 48).startswith("Stopped: 12 of 48 frames restored; nothing kept")
    assert messages.stopped_text(1, 0).startswith("Stopped: 1 frame restored;")  # no declared count (a trimmed clip)


def test_a_server_path_is_shown_by_its_upload_name() -> None:
    path = "/tmp/gpen-gradio-0/5f1e/notes.mp4"
    shown = messages.shown_error(InputError(f"{path} is not a video"), names={path: "notes.mp4", "/tmp": "x"})
    assert shown.text == "Cannot use this input. notes.mp4 is not a video" and "/tmp" not in shown.panel


def test_the_command_line_names_the_file_once(capsys) -> None:
    from gpen_core.cli_words import print_error

    print_error(InputError("clips/a.mp4: its frames are 16000×16000"), False, prefix="clips/a.mp4: ")
    print_error(InputError("the disk is full"), False, prefix="clips/b.mp4: ")
    assert capsys.readouterr().err.splitlines() == ["error: clips/a.mp4: its frames are 16000×16000",
                                                    "error: clips/b.mp4: the disk is full"]


def test_leaving_the_page_stops_only_that_sessions_clip() -> None:
    from types import SimpleNamespace

    from gpen_app import video_wiring as app_video
    from gpen_app.app_state import AppState

    state = AppState()
    a, b = state.stops.start("A"), state.stops.start("B")
    app_video.on_leave(state)(SimpleNamespace(session_hash="A"))  # what Gradio's unload hands it
    assert a.is_set() and not b.is_set()
    state.stops.finish("A", a)
    assert not state.stops.stop("A") and state.stops.running() == 1  # a session with no clip: nothing to stop
    later = state.stops.start("B")  # B's next clip: its own event, not the earlier one
    state.stops.finish("B", b)  # the earlier clip ending late forgets nothing of the newer one
    assert state.stops.stop("B") and later.is_set() and not b.is_set()


def test_a_public_message_names_the_servers_folders_by_role(tmp_path, monkeypatch) -> None:
    from gpen_core.errors import WeightsError

    monkeypatch.setenv("GPEN_HOME", str(tmp_path / "models"))
    exc = WeightsError(f"GPEN-BFR-512.pth is not in {tmp_path / 'models'}; see {tmp_path / 'logs' / 'app.log'}")
    public, local = messages.shown_error(exc, public=True), messages.shown_error(exc)
    assert public.text == "Weights missing. GPEN-BFR-512.pth is not in ‹models folder›; see …/app.log", public.text
    assert "is not in \\<models folder\\>; see" in public.panel  # Markdown: shown as <models folder>
    assert str(tmp_path) in local.text and str(tmp_path) not in public.panel
    bug = messages.shown_error(RuntimeError(f"open {tmp_path}/x.bin failed"), public=True)  # our bug's one line too
    assert str(tmp_path) not in bug.text and "…/x.bin" in bug.text


def test_a_public_message_keeps_a_slash_between_words(tmp_path, monkeypatch) -> None:
    """A lone " / " ("x2.pth / x4.pth": either) is no path: a shared server's visitor read the fix as "x2.pth …
    x4.pth"."""
    from gpen_core.errors import WeightsError
    from gpen_core.networks.upscaler import missing_upscaler_text

    monkeypatch.setenv("GPEN_HOME", str(tmp_path / "models"))
    exc = WeightsError(missing_upscaler_text(str(tmp_path / "models" / "realesrnet_x2.pth")))
    shown = messages.shown_error(exc, public=True)
    assert "upscaler file ‹models folder›/realesrnet_x2.pth does not exist" in shown.text, shown.text
    assert "an existing realesrnet_x2.pth / realesrnet_x4.pth." in shown.text, shown.text
    assert str(tmp_path) not in shown.panel


def test_a_public_pop_up_keeps_the_words_after_a_folders_role(tmp_path, monkeypatch) -> None:
    """The pop-up renders its text as HTML (Gradio's toast, checked in Chromium): "<models folder>" opened an
    unknown tag, and the toast showed "… is not in" with the rest of the message, its fix, dropped."""
    from gpen_core.errors import WeightsError

    monkeypatch.setenv("GPEN_HOME", str(tmp_path / "models"))
    exc = WeightsError(f"GPEN-BFR-512.pth is not in {tmp_path / 'models'}; run `python -m gpen_core download`")
    text = messages.shown_error(exc, public=True).text
    assert text == "Weights missing. GPEN-BFR-512.pth is not in ‹models folder›; run “python -m gpen_core download”"


def test_an_empty_or_out_of_range_number_field_is_named_in_our_words() -> None:
    """Gradio's own range check answered "Value 2.5 is greater than maximum value 1.99." (no field named, and the
    panel only "see the message that popped up"), and an empty Max faces an internal error (int(None))."""
    import gradio as gr
    import pytest

    import app

    fields = {b.elem_id or b.label: b for b in app.demo.blocks.values() if isinstance(b, gr.Number)}
    for name, value in (("Max faces", 0), ("identity-limit", 2.5), ("identity-limit", -1), ("video-start", -1), ("video-end", -2)):
        assert fields[name].preprocess(value) == value  # Gradio lets it through, to the refusal below
    photo = str(next(app.EXAMPLES_DIR.glob("*.jpg")))
    args = dict(mode="auto", model="default", detector="default", alpha=1.0, threshold=0.9, max_faces=50, aligned=False)
    for change, words in (({"max_faces": None}, "Max faces is empty"), ({"max_faces": 0}, "max faces must be at least 1"),
                          ({"identity_limit": 2.5}, "must be above 0 and below 2, got 2.5")):
        with pytest.raises(gr.Error) as refused:
            app.restore(photo, **{**args, **change})
        assert words in str(refused.value) and "Internal error" not in str(refused.value), str(refused.value)


def test_a_failed_restore_says_the_previous_result_was_cleared_only_where_there_was_one(tmp_path) -> None:
    """"Nothing was restored: the previous result was cleared." showed after a refusal on a fresh page too, and on a
    refused upload (nothing was asked to be restored), and on the Video tab, whose failure keeps the last clip."""
    from types import SimpleNamespace

    from gpen_app import restore_tab, video_wiring as app_video
    from gpen_app.app_state import AppState

    panel = messages.shown_error(InputError("Upload a photo first.")).panel
    assert restore_tab.failure_panel(panel, had_result=True).endswith("*Nothing was restored: the previous result was cleared.*")
    fresh = restore_tab.failure_panel(panel, had_result=False)
    assert fresh.endswith("*Nothing was restored.*") and "previous" not in fresh, fresh
    bad = tmp_path / "notes.jpg"
    bad.write_bytes(b"hello, this is text")
    refused = restore_tab.preview(str(bad)).markdown  # a refused upload: its problem, nothing said of a restore
    assert refused.startswith("### ⚠ Cannot use this input") and "Nothing was restored" not in refused and "previous" not in refused, refused
    state, request = AppState(), SimpleNamespace(session_hash="s")
    failed = app_video._Handlers(state, None, tmp_path, None).failed  # type: ignore[arg-type]
    state.remember_error("s", "video", panel)
    assert failed("/tmp/earlier_clip.mp4", request)[1] == panel + "\n\n*Nothing was restored: the video shown is the previous result.*"
    state.remember_error("s", "video", panel)
    assert failed(None, request)[1] == panel + "\n\n*Nothing was restored.*"  # a new clip's upload emptied the player

