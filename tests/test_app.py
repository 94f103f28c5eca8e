"""The app's handlers called as plain functions, and the pure formatting they use.

No server, no browser. End-to-end restores use the ``low`` mode with a random
GPEN-BFR-256 and the real mobilenet detector (tests/fixtures_models.py).
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from PIL import Image

import app
from gpen_app import check_wiring as app_check
from gpen_app.app_state import Policy
from gpen_app import face_views
from gpen_app import panels as ui
from gpen_core.errors import InputError
from gpen_core.images import outputs
from gpen_core.modes import MODES
from gpen_core.result import Face, Peaks, RestoreResult, Timings

from .conftest import ROOT, shared_path
from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401
from .panel_figures import shown_peak_ram

EXAMPLE = ROOT / "examples" / "astronaut_low_resolution.jpg"


@pytest.fixture(autouse=True)
def _server_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """app.main() sets STATE.policy, sweeps TEMP_ROOT and freezes the process's objects: keep the first two per
    test, and the freeze out of the test process (it would keep what earlier tests left; tests/test_collector.py
    runs it in a process of its own)."""
    monkeypatch.setattr(app.STATE, "policy", Policy())
    monkeypatch.setattr(app, "TEMP_ROOT", tmp_path / "app-temp")
    monkeypatch.setattr(app, "ready_server", lambda restores_here: 0)


class RecordingProgress:
    """Stands in for gr.Progress: records (fraction, desc)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, str | None]] = []

    def __call__(self, fraction: float, desc: str | None = None, **_: object) -> None:
        self.calls.append((fraction, desc))


def _restore(image: str | None, mode: str = "low", progress: RecordingProgress | None = None, **kw: object):
    args = dict(model="default", detector="default", alpha=1.0, threshold=0.9, max_faces=50, aligned=False) | kw
    return app.restore(image, mode, progress=progress or RecordingProgress(), **args)  # type: ignore[arg-type]


def _fake_result(**kw: object) -> RestoreResult:
    """A RestoreResult built by hand, for the formatting functions."""
    rng = np.random.default_rng(0)
    crop = rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)
    face = Face((10.0, 20.0, 110.0, 140.0), 0.987, np.zeros((5, 2), np.float32), crop, 255 - crop)
    base = dict(
        image=np.zeros((300, 400, 3), np.uint8),
        faces=(face,),
        timings=Timings(total_s=2.5, decode_s=0.1, detect_s=0.4, restore_s=1.5, encode_s=0.05, load_s=0.3),
        peaks=Peaks(1_234_000_000, 800_000_000, "vmhwm"),
        mode=MODES["low"],
        requested_mode="low",
        mode_reason="",
        checkpoint="GPEN-BFR-256",
        detector="mobilenet0.25",
        device="cpu",
        dtype="float32",
        output_format="jpeg",
        encoded=b"\xff\xd8" + b"x" * 40_000,
        notes=(),
        input_size=(400, 300),
        processed_size=(400, 300),
    )
    return RestoreResult(**(base | kw))  # type: ignore[arg-type]


# ------------------------------------------------------------- formatting


def test_mode_radio_lists_auto_first_then_every_mode_with_its_hint() -> None:
    from gpen_app import mode_labels

    choices = mode_labels.hints()
    assert [v for _, v in choices] == ["auto", *MODES]
    for label, value in choices[1:]:
        assert label.startswith(value) and MODES[value].hint in label


def test_panel_shows_the_results_own_figures() -> None:
    r = _fake_result()
    md = ui.metrics_markdown(r)
    # peaks=Peaks(1_234_000_000, 800_000_000): written out by hand, in the panel's decimal units
    assert "| Peak RAM | **1.23 GB** (baseline 800 MB before the call, +434 MB) |" in md
    assert "VmHWM" in md and "no GPU" in md
    for seconds in (r.timings.total_s, r.timings.restore_s, r.timings.detect_s, r.timings.load_s):
        assert f"{seconds:.2f}" in md
    assert "| Faces | 1 |" in md and "GPEN-BFR-256" in md and "cpu · float32" in md
    assert "39.1 KB" in md  # 40,002 bytes as Gradio's file widget prints them (1024-based), not "0 MB"
    assert "ran exactly as requested" in md


def test_panel_says_which_mode_ran_why_and_every_note() -> None:
    why = "auto chose balanced: needs ~600 MB RAM (built-in estimate), 3.00 GB free"
    r = _fake_result(mode=MODES["balanced"], requested_mode="auto", mode_reason=why,
                     notes=("low mode shrank the photo from 5000×4000 to 2048×1638 before restoring", "found 60 faces; restored the 50 largest"))
    md = ui.metrics_markdown(r)
    # "~" escaped: two estimates on one line would otherwise render struck through
    assert "**balanced** (asked for auto)" in md and why.replace("~", "\\~") in md
    for note in r.notes:
        assert f"- {note}" in md


def test_panel_says_which_runtime_ran_the_generator_and_why() -> None:
    assert "| Generator runtime | PyTorch |" in ui.metrics_markdown(_fake_result())
    why = "measured faster here: 0.26 s vs torch 0.38 s per face"
    md = ui.metrics_markdown(_fake_result(backend="openvino", backend_reason=why))
    assert f"| Generator runtime | OpenVINO ({why}) |" in md
    assert "| Generator runtime | PyTorch (asked for) |" in ui.metrics_markdown(_fake_result(backend_reason="asked for"))


def test_panel_shows_vram_when_measured() -> None:
    r = _fake_result(device="cuda:0", peaks=Peaks(2e9, 1e9, "sampling", 700_000_000, 900_000_000, 100_000_000))
    md = ui.metrics_markdown(r)
    assert "| Peak VRAM | **900 MB** reserved, 700 MB allocated (baseline 100 MB allocated) |" in md
    assert "psutil" in md


def test_slider_pair_lines_up_when_the_photo_was_shrunk() -> None:
    before = np.full((600, 800, 3), 50, np.uint8)
    b, a = ui.comparison_pair(before, _fake_result())
    assert b.shape == a.shape == (300, 400, 3) and b.dtype == np.uint8


def test_faces_only_compares_input_crops_with_restored_crops() -> None:
    r = _fake_result(mode=MODES["faces-only"], output_format="png")
    b, a = ui.comparison_pair(np.zeros((300, 400, 3), np.uint8), r)
    assert b.shape == a.shape
    assert np.array_equal(b[:256, :256], r.faces[0].crop) and np.array_equal(a[:256, :256], r.faces[0].restored)
    assert ui.download_name("/up/x.png", r) == "x_gpen_faces-only_faces.png"


def test_gallery_puts_each_original_crop_beside_its_restored_crop() -> None:
    r = _fake_result()
    [(img, caption)] = face_views.face_pairs(r)
    assert img.shape == (256, 256 * 2 + 6, 3)
    assert np.array_equal(img[:, :256], r.faces[0].crop) and np.array_equal(img[:, 262:], r.faces[0].restored)
    assert "face 1" in caption and "0.99" in caption


def test_download_names_are_safe() -> None:
    r = _fake_result()
    assert ui.download_name("/tmp/gradio/abc/My photo (1).JPG", r) == "My_photo_1_gpen_low.jpg"
    assert ui.download_name(None, r) == "photo_gpen_low.jpg"
    assert ui.download_name("/x/../..", r).endswith("_gpen_low.jpg")


def test_error_text_keeps_file_names_literal_in_markdown() -> None:
    md = ui.markdown_text("missing detection_mobilenet0.25_Final.pth\n  - /a/b_c/")
    assert r"detection\_mobilenet0.25\_Final.pth" in md and "  \n" in md


# --------------------------------------------------------------- handlers


def test_restore_handler_end_to_end(low_mode_home: Path) -> None:
    progress = RecordingProgress()
    (before, after), download, md, gallery, record = _restore(str(EXAMPLE), progress=progress)

    src = np.asarray(Image.open(EXAMPLE).convert("RGB"))
    assert before.shape == after.shape == src.shape and after.dtype == np.uint8
    assert not np.array_equal(before, after)  # random weights: the pasted face differs
    # the download is the engine's full-resolution JPEG, in our own results folder
    path = Path(download)
    assert path.parent.parent == app.RESULTS_DIR and path.name == "astronaut_low_resolution_gpen_low.jpg"
    with Image.open(io.BytesIO(path.read_bytes())) as im:
        assert im.format == "JPEG" and im.size == (src.shape[1], src.shape[0])
    # the panel shows the result's own figures
    assert record["mode"] == "low" and record["faces"] >= 1
    assert record["peaks"]["rss_bytes"] > record["peaks"]["baseline_rss_bytes"] > 0
    assert shown_peak_ram(md) == pytest.approx(record["peaks"]["rss_bytes"], abs=5e6)  # "1.23 GB" is ±5 MB
    assert f"| Faces | {record['faces']} |" in md
    assert len(gallery) == record["faces"]
    descs = [d for _, d in progress.calls]
    assert "loading model" in descs and "detecting faces" in descs
    faces = [d for d in descs if re.fullmatch(r"restoring face \d+ of \d+|(the face|all \d+ faces) restored", d or "")]
    n = record["faces"]
    assert faces == [f"restoring face {k} of {n}" for k in range(1, n + 1)] + [
        "the face restored" if n == 1 else f"all {n} faces restored"]  # each face named as it starts, once
    assert [f for f, _ in progress.calls] == sorted(f for f, _ in progress.calls)


def test_every_download_gets_its_own_file(tmp_path: Path) -> None:
    from gpen_core.images.outputs import save_result

    r = _fake_result()
    a, b = (save_result(tmp_path, ui.download_name(str(EXAMPLE), r), r.encoded) for _ in range(2))
    assert a != b and a.name == b.name == "astronaut_low_resolution_gpen_low.jpg"
    assert a.read_bytes() == r.encoded


def test_missing_weights_give_the_fix_not_a_trace() -> None:
    with pytest.raises(gr.Error) as e:
        _restore(str(EXAMPLE), mode="low")
    assert e.value.title == "Weights missing"
    assert "GPEN-BFR-256" in e.value.message and "python -m gpen_core download" in e.value.message
    assert "Traceback" not in e.value.message


def test_bad_file_is_a_readable_error(tmp_path: Path) -> None:
    bad = tmp_path / "holiday.jpg"
    bad.write_text("this is not a photo")
    with pytest.raises(gr.Error) as e:
        _restore(str(bad), mode="low")
    assert e.value.title == "Cannot use this input" and "Traceback" not in e.value.message


def test_no_photo_and_bad_options_are_readable_errors() -> None:
    with pytest.raises(gr.Error, match="Upload a photo"):
        _restore(None)
    with pytest.raises(gr.Error) as e:
        _restore(str(EXAMPLE), alpha=1.5)
    assert e.value.title == "Cannot use this input" and "alpha" in e.value.message


def test_weights_panel_offers_download_only_when_something_is_missing(low_mode_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    panel, button, _ = app.weights_view("low", "default", "default", False)
    assert button["visible"] is False and "missing" not in panel.lower()

    monkeypatch.setenv("GPEN_HOME", str(tmp_path))
    panel, button, overview = app.weights_view("low", "default", "default", False)
    assert button["visible"] is True
    assert "`GPEN-BFR-256.pth`" in panel and "`detection_mobilenet0.25_Final.pth`" in panel and str(tmp_path) in panel
    assert "GPEN-BFR-2048" in overview  # the overview lists the whole registry
    # an aligned face needs no detector; an explicit checkpoint path cannot be downloaded
    panel, _, _ = app.weights_view("low", "default", "default", True)
    assert "detection_mobilenet" not in panel


def test_download_offline_shows_the_manual_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.weights import lookup as weights
    from gpen_core.errors import WeightsError

    asked: list[str] = []

    def offline(name: str, **_: object) -> Path:
        asked.append(name)
        raise WeightsError(f"{name} is not available: no network.\nFix: save it as /models/{weights.REGISTRY[name].filename}")

    monkeypatch.setattr(weights, "download", offline)
    panel, button, _ = app.download_weights("low", "default", "default", False, progress=RecordingProgress())
    assert asked == ["GPEN-BFR-256"]  # stops at the first failure
    assert "Download failed" in panel and r"GPEN-BFR-256.pth" in panel and "no network" in panel
    assert button["visible"] is True


def test_serving_settings() -> None:
    q = app.demo._queue
    assert app.demo.api_open is False and q.max_size == 8
    [dep] = [d for d in app.demo.fns.values() if d.api_name == "restore"]
    assert dep.concurrency_limit == 1 and dep.queue
    opts = app.launch_options()
    # Gradio's own refusal (a toast, nothing in the panel) only above our limit: up to it, our decoder's message
    assert opts["max_file_size"] > 25_000_000 and opts["run_history"] is False and "allowed_paths" not in opts
    assert app.demo.analytics_enabled is False


def test_cli_binds_localhost_and_share_always_has_auth(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[dict] = []

    def fake_launch(**kw: object):
        calls.append(kw)
        return None, "http://127.0.0.1:7860/", None  # no share link: offline

    monkeypatch.setattr(app.demo, "launch", fake_launch)
    monkeypatch.setattr(app.demo, "block_thread", lambda: None)
    monkeypatch.delenv("GRADIO_SHARE", raising=False)
    app.main([])
    assert calls[-1]["server_name"] == "127.0.0.1" and calls[-1]["server_port"] == 7860
    assert calls[-1]["share"] is False and calls[-1]["auth"] is None

    app.main(["--share"])
    user, password = calls[-1]["auth"]
    assert calls[-1]["share"] is True and len(password) >= 12
    out = capsys.readouterr().out
    assert password in out
    assert "public link could not be created" in out and out.count("\n") >= 2

    app.main(["--share", "--auth", "ann:secret", "--port", "8080", "--host", "0.0.0.0"])
    assert calls[-1]["auth"] == ("ann", "secret") and calls[-1]["server_port"] == 8080 and calls[-1]["server_name"] == "0.0.0.0"


def test_main_readies_the_engine_before_the_page_and_only_for_local_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[object] = []
    monkeypatch.setattr(app, "ready_server", lambda restores_here: events.append(("ready", restores_here)) or 0)
    monkeypatch.setattr(app.demo, "launch", lambda **kw: events.append("launch") or (None, "http://127.0.0.1:7860/", None))
    monkeypatch.setattr(app.demo, "block_thread", lambda: None)
    monkeypatch.setattr(app.prep_ui, "start_background", lambda *a, **kw: events.append("prepare"))
    app.main([])
    assert events == [("ready", True), "launch", "prepare"]  # frozen before the background preparation loads anything


def test_importing_the_app_loads_no_model() -> None:
    code = "import sys, app; assert 'torch' not in sys.modules, 'torch imported'; assert app.demo is not None"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
    assert not (ROOT / "app.pyi").exists()  # a gr.Image subclass would make Gradio write this stub at import


# ---------------------------------------------------------- hardware check


def test_hardware_check_tab_measures_saves_and_shows_it_on_the_next_page_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    from gpen_core.engine import budget
    from gpen_core.hwcheck import runner
    from gpen_core.engine import profile_store as store
    from gpen_core.hwcheck.workloads import Workload

    from gpen_core.networks import parsenet

    from .factories import TINY, TINY_PARSENET

    md, chart = app.saved_hardware_check()[:2]
    assert "No measurement for this machine yet" in md and chart is None
    assert "built-in estimate" in budget.choose("cpu", (320, 240)).reason

    # The real check, made small: tiny generators and parser, in this process, an aligned face and a photo with
    # one face (every mode runs; the profile's other workloads are tests/test_profile.py's).
    small = (Workload("face", "aligned face", 64, 64, 1, aligned=True), Workload("photo", "photo, one face", 320, 240, 1, face_px=96))
    configs = {"GPEN-BFR-256": TINY, "GPEN-BFR-512": TINY}
    monkeypatch.setattr(runner, "run_profile", functools.partial(runner.run_profile, workloads=small, model_configs=configs, isolate=False))
    monkeypatch.setattr(parsenet, "RELEASED_CONFIG", TINY_PARSENET)
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64 * 10**9))  # plenty free: memory alone allows the best mode
    progress = RecordingProgress()
    md, chart = app.hardware_check(progress=progress)  # type: ignore[arg-type]
    assert progress.calls and progress.calls[-1][0] == 1.0
    assert md.startswith("**Recommendation:** nothing can run yet; download")  # no weights here: files first
    assert "Memory alone: use `quality`" in md and "every mode fits" in md
    for name in MODES:
        assert f"| `{name}` |" in md
    saved = store.load_profile("cpu")
    assert saved is not None
    assert list(chart["mode"]) == list(MODES) and set(chart["memory"]) == {"RAM"}  # no GPU: no VRAM bars
    assert list(chart["MB"]) == [round(saved.modes[m].peak_ram_bytes / 1e6, 1) for m in MODES]

    # the next page load shows the saved measurement; auto reads the same file
    md2, chart2 = app.saved_hardware_check()[:2]
    assert "| `quality` |" in md2 and list(chart2["MB"]) == list(chart["MB"])
    assert "measured on this machine" in budget.choose("cpu", (320, 240)).reason  # auto now picks from the measurement


def test_the_memory_chart_is_shown_only_with_a_measurement() -> None:
    """Before any measurement the tab showed an empty chart box and no word about it: it is hidden until a check
    has measured something, and the report says what will appear and which button measures it."""
    chart = next(b for b in app.demo.blocks.values() if isinstance(b, gr.BarPlot))
    assert chart.visible is False
    fills = [d for d in app.demo.fns.values() if chart in d.outputs]
    load = next(d for d in fills if d.targets and d.targets[0][1] == "load")
    md, shown, _ = load.fn()
    assert shown["visible"] is False  # no profile saved in this test's models folder
    assert "**Measure every mode on this machine**" in md and "chart of each mode's peak memory" in md, md
    start = next(d for d in fills if d.targets and d.targets[0][1] == "click")
    assert start.fn()["visible"] is True  # a check starting: the chart comes into view, its progress shown in it
    check = next(d for d in fills if d.fn is app.hardware_check)
    assert check.trigger_after == start._id and list(check.show_progress_on or ()) == [chart]
    failed = next(d for d in fills if d.trigger_after == check._id and d.trigger_only_on_failure)
    assert failed.fn()["visible"] is False  # a check that failed, nothing saved: hidden again


def test_hardware_check_never_holds_up_restores() -> None:
    """The hardware check runs in its own lane: in the restore's lane a 72 s check held a restore for 73.6 s."""
    deps = {d.fn.__name__: d for d in app.demo.fns.values() if d.fn is not None}
    check = deps["hardware_check"]
    restore = next(d for d in app.demo.fns.values() if d.api_name == "restore")
    assert check.concurrency_id != restore.concurrency_id and check.concurrency_limit == 1
    assert restore.concurrency_limit == 1


def test_hardware_check_is_off_on_a_shared_server_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.hwcheck import runner

    ran: list[bool] = []
    monkeypatch.setattr(runner, "run_profile", lambda **kw: ran.append(True))
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))
    with pytest.raises(gr.Error) as e:
        app.hardware_check(progress=RecordingProgress())  # type: ignore[arg-type]
    assert "off on this shared server" in e.value.message and "--allow-hardware-check" in e.value.message and not ran
    _, _, button = app_check._with_chart(app.saved_hardware_check())  # the page load's outputs
    assert button["interactive"] is False


@pytest.mark.parametrize(
    ("argv", "shared"),
    [([], False), (["--host", "0.0.0.0"], True), (["--share"], True), (["--host", "0.0.0.0", "--allow-hardware-check"], True)],
)
def test_main_sets_the_server_policy(argv: list[str], shared: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.demo, "launch", lambda **kw: (None, "http://127.0.0.1:7860/", None))
    monkeypatch.setattr(app.demo, "block_thread", lambda: None)
    monkeypatch.delenv("GRADIO_SHARE", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setattr(app.STATE, "policy", Policy())
    app.main(argv)
    assert app.STATE.policy.shared is shared
    assert app.STATE.policy.hardware_check_allowed is (not shared or "--allow-hardware-check" in argv)
    assert app.STATE.policy.any_model_path is False


# ------------------------------------------------------- shared-server safety


@pytest.mark.parametrize("value", ["/etc/shadow", "/nonexistent", "/dev/zero", "/etc", "../../etc/passwd", "/tmp/x.pth"])
def test_generator_field_refuses_paths_outside_the_models_folder_with_one_message(value: str) -> None:
    """One message for every path outside the models folder: different errors for /etc/shadow and
    /nonexistent, or a folder's listing, would reveal the server's files."""
    with pytest.raises(InputError) as e:
        app.checked_model(value)
    assert str(e.value).startswith("The Generator field takes a registry name") and value not in str(e.value)


def test_generator_field_accepts_registry_names_and_files_in_the_models_folder(_isolated_models_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert app.checked_model("GPEN-BFR-512") == "GPEN-BFR-512" and app.checked_model("default") is None
    (_isolated_models_home / "mine.pth").write_bytes(b"x")
    assert app.checked_model("mine.pth") == str(_isolated_models_home / "mine.pth")
    assert app.checked_model(str(_isolated_models_home / "mine.pth")) == str(_isolated_models_home / "mine.pth")
    with pytest.raises(InputError, match="no checkpoint other.pth in the models folder"):
        app.checked_model("other.pth")
    monkeypatch.setattr(app.STATE, "policy", Policy(any_model_path=True))  # --allow-any-model-path, a local user
    assert app.checked_model("/somewhere/else.pth") == "/somewhere/else.pth"


def test_restore_refuses_a_server_path_as_generator_before_loading_anything() -> None:
    with pytest.raises(gr.Error) as e:
        _restore(str(EXAMPLE), model="/etc/passwd")
    assert e.value.title == "Cannot use this input" and "registry name" in e.value.message


def test_startup_sweeps_old_uploads_and_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start-up sweeps old uploads as well as results, so a server stopped by SIGTERM or kill -9 leaves nothing behind."""
    import os
    import time
    from types import SimpleNamespace

    tmp_path = tmp_path / "gpen-gradio-1000"  # the app's own temp folder: every file in it is ours
    old, fresh = tmp_path / "0123abcd" / "photo.jpg", tmp_path / "89ef" / "new.jpg"
    result = tmp_path / "results" / "r-x" / "a_gpen_low.jpg"
    for f in (old, fresh, result):
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")
    # An hour and more later (a file's ctime cannot be set back, so the sweep's clock moves on instead):
    later = time.time() + 3700
    monkeypatch.setattr(outputs, "time", SimpleNamespace(time=lambda: later))
    os.utime(fresh, (later, later))  # written just now on that clock
    assert outputs.sweep_temp(tmp_path, 3600) == 2
    assert not old.exists() and not old.parent.exists() and not result.exists() and fresh.exists()

    monkeypatch.setattr(app, "TEMP_ROOT", tmp_path)
    os.utime(fresh, None)  # back to the real now: over an hour ago on the moved clock
    monkeypatch.setattr(app.demo, "launch", lambda **kw: (None, "http://127.0.0.1:7860/", None))
    monkeypatch.setattr(app.demo, "block_thread", lambda: None)
    app.main([])
    assert not fresh.exists()  # main() sweeps before serving


# --------------------------------------------------------------- errors


def test_error_popup_names_the_problem_first_and_the_panel_keeps_it() -> None:
    """Gradio 6.31's page titles every error pop-up "Error": our title leads the message instead."""

    class Request:
        session_hash = "s1"

    with pytest.raises(gr.Error) as e:
        app.restore(str(EXAMPLE), "low", "default", "default", 1.0, 0.9, 50, False,
                    progress=RecordingProgress(), request=Request())  # type: ignore[arg-type]
    # Plain text that starts with the problem (API clients read it as is; the page keeps its line breaks).
    assert e.value.message.startswith("Weights missing. ") and e.value.title == "Weights missing"
    assert "python -m gpen_core download" in e.value.message and "<" not in e.value.message
    slider, panel = app.show_failure(True, Request())  # type: ignore[arg-type]  # the press cleared a result
    assert slider is None and panel.startswith("### ⚠ Weights missing") and "GPEN-BFR-256" in panel
    assert panel.endswith("*Nothing was restored: the previous result was cleared.*"), panel


def test_a_restores_failure_panel_shows_its_own_error_never_a_downloads_or_the_video_tabs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The panel a failed restore shows is read back per session and per panel: an error of another event of the
    same visitor (a refused download, the Video tab's restore) never stands in for the restore's own."""
    from gpen_app import video_wiring as app_video

    class Request:
        session_hash = "s-download-then-restore"

    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))  # a visitor may not download here
    with pytest.raises(gr.Error) as e:
        app.download_weights("balanced", "default", "default", False, request=Request())  # type: ignore[arg-type]
    assert "Downloads are off" in e.value.message
    video_restore = next(d.fn for d in app.demo.fns.values() if d.api_name == "restore_video")
    with pytest.raises(gr.Error):
        video_restore(None, "low", 0, 0, True, None, None, request=Request())  # "Upload a video first."
    # The photo restore then fails before its handler runs (as when Gradio refuses its input): nothing of its own.
    assert "Restore failed" in app.show_failure(False, Request())[1]  # type: ignore[arg-type]
    with pytest.raises(gr.Error):
        app.restore(None, "low", "default", "default", 1.0, 0.9, 50, False, progress=RecordingProgress(),
                    request=Request())  # type: ignore[arg-type]
    assert "Upload a photo first" in app.show_failure(False, Request())[1]  # type: ignore[arg-type]
    failed_clip = next(d.fn for d in app.demo.fns.values() if getattr(d.fn, "__name__", "") == "failed")
    assert "Upload a video first" in failed_clip(None, Request())[1]


def test_markdown_keeps_urls_and_commands_intact() -> None:
    msg = "get it from https://modelscope.cn/models/iic/cv_gpen_image-portrait-enhancement or run `python -m gpen_core download GPEN-BFR-512`."
    md = ui.markdown_text(msg)
    assert "<https://modelscope.cn/models/iic/cv_gpen_image-portrait-enhancement>" in md
    assert "`python -m gpen_core download GPEN-BFR-512`" in md and "\\`" not in md


def test_api_outputs_are_named_and_max_faces_is_an_integer() -> None:
    info = app.demo.get_api_info()["named_endpoints"]["/restore"]
    assert [p["label"] for p in info["returns"]] == ["Before / after (drag the handle)", "Full-resolution result",
                                                     "Measured panel (Markdown)", "Faces: original crop | restored crop",
                                                     "Record (JSON)"]
    max_faces = next(p for p in info["parameters"] if p["label"] == "Max faces")
    assert max_faces["python_type"]["type"] == "int"


def test_max_faces_is_explained_as_the_engine_keeps_them() -> None:
    """The app's field says what the engine does (highest detection scores first, as the CLI's help), and takes
    any count the engine takes (no upper bound the CLI lacks)."""
    from gpen_core.cli import _parser

    field = next(c for c in app.demo.blocks.values() if getattr(c, "label", None) == "Max faces")
    restore = _parser()._subparsers._group_actions[0].choices["restore"]  # type: ignore[union-attr]
    cli_help = next(a.help for a in restore._actions if "--max-faces" in a.option_strings)
    assert "highest detection score" in field.info and field.info == cli_help
    assert field.maximum is None and field.value == 50


def test_faces_only_slider_is_a_grid_not_a_strip() -> None:
    r = _fake_result(mode=MODES["faces-only"], faces=_fake_result().faces * 4, output_format="png")
    before, after = ui.comparison_pair(np.zeros((300, 400, 3), np.uint8), r)
    assert before.shape == after.shape == (512, 512, 3)  # 2×2 crops of 256, not 256×1024


def test_start_log_names_our_flags_not_gradios_share_hint(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Gradio's own start lines end with "set `share=True` in `launch()`"; our users pass --share."""
    calls: list[dict] = []
    monkeypatch.setattr(app.demo, "launch", lambda **kw: calls.append(kw) or (None, "http://127.0.0.1:7860/", None))
    monkeypatch.setattr(app.demo, "block_thread", lambda: None)
    monkeypatch.delenv("GRADIO_SHARE", raising=False)
    app.main([])
    out = capsys.readouterr().out
    assert calls[-1]["quiet"] is True and "share=True" not in out
    assert "Running on http://127.0.0.1:7860/" in out and "--share" in out


# ------------------------------------------------------- downloads on a shared server


def test_a_shared_server_downloads_nothing_without_the_operators_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpen_core.weights import lookup as weights

    monkeypatch.setenv("GPEN_HOME", str(tmp_path))  # nothing present
    started: list[str] = []
    monkeypatch.setattr(weights, "download", lambda n, **_: started.append(n))
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))
    panel, button, _ = app.weights_view("low", "default", "default", False)
    assert button["visible"] is False  # no button for visitors
    assert "Downloads are off on this shared server" in panel and "--allow-downloads" in panel
    assert "`python -m gpen_core download GPEN-BFR-256 retinaface-mobilenet0.25`" in panel  # what the operator runs
    with pytest.raises(gr.Error) as e:  # a call made anyway (an old page, a script) is refused
        app.download_weights("low", "default", "default", False, progress=RecordingProgress())
    assert e.value.message.startswith("Cannot use this input. Downloads are off") and started == []

    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True, downloads_on_shared=True))  # --allow-downloads
    _, button, _ = app.weights_view("low", "default", "default", False)
    assert button["visible"] is True
    app.download_weights("low", "default", "default", False, progress=RecordingProgress())
    assert started == ["GPEN-BFR-256", "retinaface-mobilenet0.25"]


@pytest.mark.parametrize(("argv", "env", "allowed"), [([], {}, True), (["--host", "0.0.0.0"], {}, False),
                                                      (["--share", "--allow-downloads"], {}, True),
                                                      (["--host", "0.0.0.0"], {"GPEN_ALLOW_DOWNLOADS": "1"}, True),
                                                      ([], {"SPACE_ID": "me/gpen"}, False)])
def test_main_allows_downloads_on_loopback_or_with_the_flag(argv: list[str], env: dict[str, str], allowed: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.demo, "launch", lambda **kw: (None, "http://127.0.0.1:7860/", None))
    monkeypatch.setattr(app.demo, "block_thread", lambda: None)
    for k in ("GRADIO_SHARE", "SPACE_ID", "GPEN_ALLOW_DOWNLOADS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    app.main(argv)
    assert app.STATE.policy.downloads_allowed is allowed


def test_error_titles_come_from_the_exception_type_not_its_words() -> None:
    from gpen_core.errors import GPENError, ResourceError, WeightsCorruptError, WeightsError
    from gpen_app.messages import shown_error

    assert shown_error(WeightsCorruptError("GPEN-BFR-512.pth is truncated")).title == "Weights corrupt"
    assert shown_error(WeightsError("a checkpoint described as corrupt by its user")).title == "Weights missing"
    assert shown_error(ResourceError("x")).title == "Not enough memory" and shown_error(GPENError("x")).title == "Error"
    bug = shown_error(KeyError("boxes"))
    assert bug.title == "Internal error" and bug.text.startswith("Internal error. Restore failed unexpectedly (KeyError")


@pytest.mark.parametrize("checked", [True, False])
def test_the_check_detections_box_reaches_the_engine(checked: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's "Check detections" checkbox is the request's face_check, both ways."""
    seen: list[object] = []

    class Stop(Exception):
        pass

    def fake_engine(image: str, options: object, progress: object, mask: object = None) -> object:
        seen.append(options)
        raise Stop

    monkeypatch.setattr(app, "run_engine", fake_engine)
    with pytest.raises((Stop, gr.Error)):
        _restore(str(EXAMPLE), face_check=checked)
    assert len(seen) == 1 and seen[0].face_check is checked  # type: ignore[attr-defined]


def test_the_panel_and_the_json_name_every_networks_runtime_and_why() -> None:
    from gpen_core.result import NetworkRuntime
    from gpen_core.result_json import result_record

    runtimes = (NetworkRuntime("generator", "GPEN-BFR-256", "openvino", "measured faster here: 0.10 s vs torch 0.20 s per face"),
                NetworkRuntime("detector", "mobilenet0.25", "torch", "asked for"))
    r = _fake_result(runtimes=runtimes, released=("GPEN-BFR-512",))
    md = ui.metrics_markdown(r)
    assert ("| Runtime per network | generator GPEN-BFR-256: OpenVINO (measured faster here: 0.10 s vs torch 0.20 s per face); "
            "detector mobilenet0.25: PyTorch (asked for) |") in md
    rec = result_record(r)
    assert rec["runtimes"][1] == {"network": "detector", "name": "mobilenet0.25", "runtime": "torch", "reason": "asked for"}
    assert rec["released"] == ["GPEN-BFR-512"]
    assert "Runtime per network" not in ui.metrics_markdown(_fake_result())  # nothing to say: no row


def test_a_shared_servers_errors_name_its_folders_by_role_and_a_local_ones_in_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.weights import lookup

    models = tmp_path / "srv" / "models"
    models.mkdir(parents=True)
    monkeypatch.setenv("GPEN_HOME", str(models))
    for shared in (True, False):
        monkeypatch.setattr(app.STATE, "policy", Policy(shared=shared))
        with pytest.raises(gr.Error) as e, app.ui_errors():
            lookup.resolve("GPEN-BFR-512", allow_download=False)
        assert (str(models) in e.value.message) is not shared, e.value.message
        assert ("‹models folder›" in e.value.message) is shared  # "<…>" would open an HTML tag in the pop-up
    upload = tmp_path / "srv" / "uploads" / "holiday.jpg"  # a folder: its panel names it as its visitor does
    upload.mkdir(parents=True)
    panel = app.preview(str(upload))[2]
    assert "holiday.jpg" in panel and str(tmp_path) not in panel, panel


def test_a_shared_servers_weights_panel_and_failed_download_name_its_folders_by_role(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Download button's failure lands in the weights panel, not a pop-up: on a shared server (with
    --allow-downloads) it, and the panel around it, name the models folder by role; a local app in full."""
    from gpen_core.errors import WeightsError
    from gpen_core.weights import lookup as weights

    models = tmp_path / "srv" / "models"
    models.mkdir(parents=True)
    monkeypatch.setenv("GPEN_HOME", str(models))

    def fails(name: str, **_: object) -> Path:
        raise WeightsError(f"{name}: the connection closed; {models}/.{name}.1.part was removed")

    monkeypatch.setattr(weights, "download", fails)
    for shared in (True, False):
        monkeypatch.setattr(app.STATE, "policy", Policy(shared=shared, downloads_on_shared=True))
        panel, _, overview = app.download_weights("low", "default", "default", False, progress=RecordingProgress())
        assert "Download failed" in panel and "the connection closed" in panel, panel
        assert (r"\<models folder\>/.GPEN-BFR-256.1.part" in panel) is shared, panel  # the error itself, escaped
        for shown in (panel, overview):
            assert (str(models) in shown) is not shared, shown
            assert ("<models folder>" in shown) is shared, shown


def test_every_paste_sweeps_the_pasted_files_older_than_the_apps_age(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pasted photos and the damage editor's layers are files of the app's own (Gradio's clean-up does not know
    them): each one written sweeps those over TEMP_MAX_AGE_S first, as each restore sweeps results, so a server that
    runs for days keeps no visitor's photo past the hour docs/serving.md promises (start-up alone left them)."""
    import base64
    from types import SimpleNamespace

    png = io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    swept: list[tuple[Path, float]] = []
    real = outputs.sweep
    monkeypatch.setattr(outputs, "sweep", lambda folder, age: swept.append((Path(folder), age)) or real(folder, age))
    blocks = {getattr(b, "elem_id", None): b for b in app.demo.blocks.values()}
    pasted = [blocks["photo"].preprocess(SimpleNamespace(url=url, path=None))]  # a photo pasted from the clipboard
    editor = blocks["damage-editor"]
    layers = editor.preprocess(SimpleNamespace(id=None, background=SimpleNamespace(url=url, path=None), layers=[], composite=None))
    pasted.append(layers["background"])  # an API client's data: URL
    editor.blob_storage["page"] = SimpleNamespace(background=png.getvalue(), layers=[], composite=None)
    pasted.append(editor.preprocess(SimpleNamespace(id="page"))["background"])  # the page's blob
    for p in pasted:
        assert Path(p).read_bytes() == png.getvalue() and Path(p).is_relative_to(app.PASTED_DIR), p
        Path(p).unlink()
        Path(p).parent.rmdir()
    assert swept == [(app.PASTED_DIR, app.TEMP_MAX_AGE_S)] * 3


def test_a_sweep_leaves_a_folder_another_request_has_just_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pastes arrive on several lanes at once: a sweep must not take the empty folder another paste has just made
    for its file (its write would fail); old folders emptied by the sweep go."""
    import os
    import time
    from types import SimpleNamespace

    old = tmp_path / "p-old" / "pasted"
    old.parent.mkdir()
    old.write_bytes(b"x")
    later = time.time() + 3700  # an hour and more later (ctime cannot be set back: the sweep's clock moves on)
    monkeypatch.setattr(outputs, "time", SimpleNamespace(time=lambda: later))
    new = tmp_path / "p-new"
    new.mkdir()
    os.utime(new, (later, later))  # made just now on that clock, its file not yet written
    assert outputs.sweep(tmp_path, 3600) == 1
    assert not old.parent.exists() and new.is_dir()


def test_a_shared_servers_upscaler_warning_names_the_models_folder_by_role(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Upscale line's "missing upscaler: save it as …" is the panel's too: by role on a shared server."""
    models = tmp_path / "srv" / "models"
    models.mkdir(parents=True)
    monkeypatch.setenv("GPEN_HOME", str(models))  # no upscaler in it
    for shared in (True, False):
        monkeypatch.setattr(app.STATE, "policy", Policy(shared=shared, downloads_on_shared=True))
        text = app.upscale_view(None, 2, "low")
        assert "realesrnet_x2.pth" in text and "is missing" in text and "**Download** button" in text, text
        assert (str(models) in text) is not shared and ("<models folder>" in text) is shared, text
    # Without --allow-downloads its visitors have no Download button: the line names the operator's command.
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))
    text = app.upscale_view(None, 2, "low")
    assert "Download** button" not in text and "ask the operator to run `python -m gpen_core download" in text, text


def test_a_shared_servers_result_names_a_models_folder_checkpoint_by_role(
        gen256_narrow: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A visitor who names a checkpoint of the models folder in the Generator field reads it back, in the panel and
    the record, as ``<models folder>/NAME`` on a shared server (files-and-limits.md); a local app keeps the path."""
    import json
    import os

    from .conftest import shared_path

    models = tmp_path / "srv" / "models"
    models.mkdir(parents=True)
    os.link(gen256_narrow, models / "custom.pth")  # a file of the folder's own: a link out of it is refused
    detector = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    (models / detector.name).symlink_to(detector)
    monkeypatch.setenv("GPEN_HOME", str(models))
    for shared in (True, False):
        monkeypatch.setattr(app.STATE, "policy", Policy(shared=shared))
        _, _, md, _, record = _restore(str(EXAMPLE), model="custom.pth")
        shown = md + json.dumps(record)
        assert (str(models) in shown) is not shared, shown
        assert record["checkpoint"] == ("<models folder>/custom.pth" if shared else str(models / "custom.pth"))
        # In the panel's Markdown the role's brackets are escaped: Gradio renders HTML, and would hide a bare tag
        assert r"| Checkpoint · detector | \<models folder\>/custom.pth" in md if shared else str(models) in md


def test_a_shared_servers_notes_name_a_models_folder_checkpoint_by_role(
        gen256_narrow: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notes and reasons of a result name the generator as the engine got it: the Generator field's file by its
    full path. On a shared server the panel and the record showed the server's models folder in them ("OpenVINO was
    measured faster here for the generator /srv/models/custom.pth, but … would add …"), where the checkpoint line
    beside them says ``<models folder>/custom.pth``."""
    import json
    import os

    from gpen_core.runtimes.openvino import generator as ov

    from .conftest import shared_path

    if ov.openvino_version() is None:
        pytest.skip("needs OpenVINO: the sentence that names the generator is the OpenVINO choice's")
    models = tmp_path / "srv" / "models"
    models.mkdir(parents=True)
    os.link(gen256_narrow, models / "custom.pth")
    detector = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    (models / detector.name).symlink_to(detector)
    monkeypatch.setenv("GPEN_HOME", str(models))
    for dtype in ("float32", "bfloat16"):  # OpenVINO measured faster for it, not converted yet
        ov.record_speed(256, dtype, torch_s=0.2, openvino_s=0.1, models_dir=models, source="test")
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64 * 10**9))  # room in RAM, none in the mode's memory plan:
    monkeypatch.setattr(ov, "conversion_ram", lambda size, path: (20 * 10**9, True))
    monkeypatch.setattr(app.STATE, "policy", Policy(shared=True))
    _, _, md, _, record = _restore(str(EXAMPLE), mode="balanced", model="custom.pth")
    assert "for the generator" in record["backend_reason"] or "the generator <" in record["backend_reason"], record
    shown = md + json.dumps(record)
    assert str(models) not in shown and str(tmp_path) not in shown, shown
    assert "<models folder>/custom.pth" in record["backend_reason"]


def test_the_identity_blend_follows_the_identity_limit_and_names_the_apps_controls() -> None:
    """The 'Over the limit' blend acts only over an Identity limit, and a blend without one is refused: a slider left
    at 0.3 when the limit went back to 0 (measure only) made every later Restore fail, and the refusal named
    ``--identity-limit``, a flag, for the page's own Identity limit field. The slider now takes part only with a limit
    (0 puts it back at 0, greyed), and a request that still sends a blend alone (an API caller) is told both controls."""
    [follow] = [d.fn for d in app.demo.fns.values() if d.fn is not None and [c.elem_id for c in d.inputs][:1] == ["identity-limit"]
                and [c.elem_id for c in d.outputs] == ["identity-alpha"]]
    assert follow(0) == {"__type__": "update", "value": 0.0, "interactive": False}
    assert follow(0.5) == {"__type__": "update", "interactive": True}  # the blend asked is kept
    assert face_views.IDENTITY_ALPHA["interactive"] is False  # the page opens with the limit at 0
    with pytest.raises(gr.Error) as e:
        _restore(str(EXAMPLE), identity_limit=0, identity_alpha=0.3)
    assert e.value.title == "Cannot use this input", e.value.message
    assert "'Over the limit" in e.value.message and "'Identity limit'" in e.value.message, e.value.message


def test_stop_ends_this_visitors_restore_at_the_next_face_and_the_next_restore_runs(low_mode_home: Path,  # noqa: F811
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The photo tab's Stop: a group photo's restore ends before its next face (it ran to its end, minutes on a
    CPU in quality, with no way out); another visitor's Stop leaves it alone; the engine serves the next one. The
    Stop is an outcome, as a clip's is: an Info headed "Stopped" (it was a red error), the panel saying so."""
    from types import SimpleNamespace

    solvay = str(shared_path("faces", "Solvay_conference_1927.png"))
    mine = SimpleNamespace(session_hash="restoring-visitor")

    class PressesStop(RecordingProgress):
        def __call__(self, fraction: float, desc: str | None = None, **_: object) -> None:
            super().__call__(fraction, desc)
            if desc == "restoring face 2 of 3":
                app.stop_own("restores", SimpleNamespace(session_hash="another-visitor"))  # not theirs to stop
            if desc == "restoring face 3 of 3":
                app.stop_own("restores", mine)  # what this visitor's Stop button does

    progress, infos = PressesStop(), []
    monkeypatch.setattr(gr, "Info", lambda message, **kw: infos.append((message, kw)))
    stopped = _restore(solvay, max_faces=3, progress=progress, request=mine)  # no gr.Error: an outcome
    [(text, kw)] = infos
    assert kw["title"] == "Stopped" and text.startswith("Stopped. The restore ended at your Stop (at: "), text
    assert "Press Restore to start again" in text and 5 <= kw["duration"] <= 60, kw  # a pop-up that closes by itself
    slider, path, panel, gallery, record = stopped
    assert slider is None and path is None and gallery == [] and record is None  # nothing of it kept, as a clip's Stop
    assert panel.startswith("Stopped. The restore ended at your Stop") and "Press Restore to start again" in panel, panel
    assert app.STATE.take_error(mine.session_hash, "photo") is None  # no failure event's words: the panel says it
    descs = [d for _, d in progress.calls]
    assert "restoring face 3 of 3" in descs and "all 3 faces restored" not in descs  # ended there, not at its end
    out = _restore(solvay, max_faces=3, request=mine)  # a fresh Stop token: the next restore runs to its end
    assert out[4]["faces"] == 3
