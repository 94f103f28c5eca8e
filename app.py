"""The browser app: layout and wiring only. The work is ``gpen_core``'s.

    python app.py                          # http://127.0.0.1:7860
    python app.py --host 0.0.0.0 --port 8080
    python app.py --share [--auth user:pass]   # a public link, always behind a password

Importing this module builds ``demo`` and loads no model; the first Restore does.
One restore runs at a time (the engine measures each call's peak memory alone) and
at most 8 wait in the queue.
"""

from __future__ import annotations

import argparse
import html
import logging
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Before Gradio is imported: no telemetry, and our own temp folder rather than the
# /tmp/gradio that every Gradio app on the machine shares.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault(
    "GRADIO_TEMP_DIR", str(Path(tempfile.gettempdir()) / f"gpen-gradio-{os.getuid() if hasattr(os, 'getuid') else 0}")
)

import gradio as gr  # noqa: E402

from gpen_core import ui_format as ui  # noqa: E402
from gpen_core.errors import GPENError, InputError, ResourceError, WeightsError  # noqa: E402
from gpen_core.imageio import DEFAULT_LIMITS  # noqa: E402
from gpen_core.modes import AUTO, MODES, get_mode  # noqa: E402
from gpen_core.restorer import RestoreOptions, get_restorer  # noqa: E402

try:  # Hugging Face ZeroGPU: the GPU exists only inside functions wrapped with spaces.GPU
    import spaces  # type: ignore[import-not-found]
except ImportError:
    spaces = None

log = logging.getLogger("gpen.app")

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
RESULTS_DIR = Path(os.environ["GRADIO_TEMP_DIR"]) / "results"
RESULT_MAX_AGE_S = 3600  # downloads older than this are swept at the next restore
DEFAULT = "default"  # the Advanced dropdowns' "use the mode's choice"
ERROR_TITLES = {InputError: "Cannot use this input", WeightsError: "Weights missing", ResourceError: "Not enough memory"}

CSS = """
#mode-radio .wrap { flex-direction: column; align-items: stretch; }
#mode-radio label { width: 100%; }
#metrics table { font-size: 0.92em; }
#metrics td:first-child { white-space: nowrap; }
"""


# ------------------------------------------------------------------ handlers


def restore(
    image: str | None,
    mode: str,
    model: str | None,
    detector: str | None,
    alpha: float,
    threshold: float,
    max_faces: float,
    aligned: bool,
    progress: gr.Progress = gr.Progress(),
) -> tuple[Any, str, str, list[tuple[Any, str]], dict[str, Any]]:
    """Restore the faces in one photo.

    Returns (before/after pair, path of the full-resolution download, the measured
    panel as Markdown, one (original | restored, caption) per face, the JSON record).
    """
    if not image:
        raise gr.Error("Upload a photo first (or paste one from the clipboard).", title="No photo")
    restorer = get_restorer()
    if restorer.busy:
        progress(0.0, desc="waiting for the restore that is already running")
    with ui_errors():
        options = RestoreOptions(mode=mode or AUTO, model=_override(model), detector=_override(detector),  # type: ignore[arg-type]
                                 alpha=float(alpha), threshold=float(threshold), max_faces=int(max_faces), aligned=bool(aligned))
        result = restorer(image, options, progress=lambda f, d: progress(f, desc=d))
        before = _decode(image)
    return ui.comparison_pair(before, result), _save_download(image, result), ui.metrics_markdown(result), ui.face_pairs(result), ui.as_record(result)


def weights_view(mode: str, model: str | None, detector: str | None, aligned: bool, message: str = "") -> tuple[str, Any, str]:
    """(this mode's weights panel, the Download button shown only when something is missing, every checkpoint)."""
    from gpen_core import weights

    statuses = weights.status()
    run_mode, heading = _mode_for_weights(mode)
    needed = ui.needed_weights(run_mode, _override(model), _override(detector), aligned=bool(aligned))
    folder = str(weights.models_dir())
    panel = ui.weights_markdown(statuses, needed, folder, heading=heading, message=message)
    missing = ui.missing_weights(needed, statuses)
    return panel, gr.update(visible=bool(missing)), ui.all_weights_markdown(statuses, folder)


def download_weights(mode: str, model: str | None, detector: str | None, aligned: bool, progress: gr.Progress = gr.Progress()) -> tuple[str, Any, str]:
    """Download what this mode is missing, with a progress bar; a failure (offline) is shown with its manual fix."""
    from gpen_core import weights

    run_mode, _ = _mode_for_weights(mode)
    missing = ui.missing_weights(ui.needed_weights(run_mode, _override(model), _override(detector), aligned=bool(aligned)), weights.status())
    message = ""
    for i, name in enumerate(missing):
        def report(done: int, total: int | None, i: int = i, name: str = name) -> None:
            progress((i + (done / total if total else 0.0)) / len(missing), desc=ui.download_progress_text(name, done, total))

        try:
            weights.download(name, progress=report)
        except GPENError as exc:
            message = "**Download failed.** " + ui.markdown_text(str(exc))
            break
    else:
        message = f"Downloaded {', '.join(missing)}." if missing else ""
    return weights_view(mode, model, detector, aligned, message)


def hardware_check(progress: gr.Progress = gr.Progress()) -> tuple[str, Any]:
    """Measure every memory mode on this machine (saved for ``auto``): (report, bar chart data)."""
    from gpen_core import profile

    with ui_errors():
        prof = profile.run_profile(device=get_restorer().device, progress=lambda f, d: progress(f, desc=d),
                                   command="the app's Hardware check tab")
    return ui.profile_markdown(prof), ui.profile_chart(prof)


def saved_hardware_check() -> tuple[str, Any]:
    """The saved measurement for this machine, when one is still valid (page load)."""
    from gpen_core import profile

    prof = profile.load_profile(get_restorer().device)
    if prof is None:
        return "*No measurement for this machine yet (or the machine, versions or weights changed since).*", None
    return ui.profile_markdown(prof), ui.profile_chart(prof)


# ------------------------------------------------------------------- helpers


@contextmanager
def ui_errors() -> Iterator[None]:
    """Engine errors become a readable gr.Error (never a stack trace in the page)."""
    try:
        yield
    except GPENError as exc:
        title = next((t for cls, t in ERROR_TITLES.items() if isinstance(exc, cls)), "Error")
        raise gr.Error(_error_html(str(exc)), title=title, duration=None, print_exception=False) from None
    except gr.Error:
        raise
    except Exception as exc:  # a bug: log the trace for us, show the user one line
        log.exception("restore failed")
        raise gr.Error(f"Restore failed unexpectedly ({type(exc).__name__}: {html.escape(str(exc)[:300])}). "
                       "The server is still running; the server log has the details.", title="Internal error") from None


def _error_html(message: str) -> str:
    return html.escape(message).replace("\n", "<br>")


def _override(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if value in ("", DEFAULT) else value


def _mode_for_weights(mode: str):
    """The mode whose weights the panel lists; for auto, the one it would pick now for a 1 MP photo."""
    if mode and mode != AUTO:
        return get_mode(mode), f"#### Weights\n**{mode}** needs:"
    from gpen_core import auto

    choice = auto.choose(device=get_restorer().device, image_size=(1280, 800))
    return choice.mode, f"#### Weights\n**auto** picks per photo; for a 1 MP photo now it would pick **{choice.mode.name}**, which needs:"


def _decode(image: str):
    from gpen_core.imageio import decode_image

    return decode_image(image).rgb


def _save_download(source: str, result: Any) -> str:
    """Write the result's encoded bytes to a fresh folder of our own (never a shared fixed path)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    _sweep(RESULTS_DIR, RESULT_MAX_AGE_S)
    path = Path(tempfile.mkdtemp(prefix="r-", dir=RESULTS_DIR)) / ui.download_name(source, result)
    path.write_bytes(result.encoded)
    return str(path)


def _sweep(folder: Path, max_age_s: float) -> None:
    cutoff = time.time() - max_age_s
    for child in folder.iterdir():
        try:
            if child.stat().st_mtime < cutoff:
                shutil.rmtree(child, ignore_errors=True)
        except OSError:
            pass


def _generator_choices() -> list[tuple[str, str]]:
    from gpen_core.weights import REGISTRY

    return [("the mode's generator", DEFAULT)] + [(n, n) for n, s in REGISTRY.items() if s.kind == "generator"]


def _examples() -> list[list[str]]:
    return [[str(p)] for p in sorted(EXAMPLES_DIR.glob("*.jpg"))]


# -------------------------------------------------------------------- layout

restore_fn = spaces.GPU(restore) if spaces is not None else restore

with gr.Blocks(title="GPEN face restoration", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
    gr.Markdown(
        "# GPEN face restoration\n"
        "Restores the faces in old, blurry or compressed photos with GPEN (Yang et al., CVPR 2021). "
        "Every result comes with what it cost: peak RAM, VRAM and time, measured for that request."
    )
    with gr.Tab("Restore"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=320):
                image_in = gr.Image(label="Photo", type="filepath", sources=["upload", "clipboard"], height=320)
                mode_in = gr.Radio(ui.mode_choices(), value=AUTO, label="Memory mode", elem_id="mode-radio")
                with gr.Accordion("Advanced", open=False):
                    model_in = gr.Dropdown(_generator_choices(), value=DEFAULT, allow_custom_value=True, label="Generator",
                                           info="a registry name, or the path of any GPEN checkpoint on the server")
                    detector_in = gr.Radio([("the mode's detector", DEFAULT), ("RetinaFace MobileNet-0.25", "mobilenet0.25"),
                                            ("RetinaFace ResNet-50", "resnet50")], value=DEFAULT, label="Face detector")
                    alpha_in = gr.Slider(0.0, 1.0, value=1.0, step=0.05, label="Blend strength (alpha)",
                                         info="1 = restored face only, 0 = the original face")
                    threshold_in = gr.Slider(0.05, 0.99, value=0.9, step=0.01, label="Detection threshold",
                                             info="lower finds more (and more false) faces")
                    max_faces_in = gr.Slider(1, 200, value=50, step=1, label="Max faces", info="the largest faces first")
                    aligned_in = gr.Checkbox(False, label="Already an aligned face crop (skip detection)")
                restore_btn = gr.Button("Restore", variant="primary", size="lg")
                with gr.Group():
                    weights_md = gr.Markdown(elem_id="weights")
                    download_weights_btn = gr.Button("Download weights", visible=False, variant="secondary")
                with gr.Accordion("All checkpoints", open=False):
                    all_weights_md = gr.Markdown()
                gr.Examples(_examples(), inputs=[image_in], cache_examples=False,
                            label="Examples: degraded public-domain portraits (examples/README.md)")
            with gr.Column(scale=6, min_width=420):
                slider_out = gr.ImageSlider(label="Before / after (drag the handle)", type="numpy", format="png",
                                            interactive=False, max_height=640)
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3, min_width=280):
                        metrics_md = gr.Markdown("*The measured figures of each restore appear here.*", elem_id="metrics")
                    with gr.Column(scale=2, min_width=200):
                        file_out = gr.File(label="Full-resolution result", interactive=False)
                        with gr.Accordion("Raw measurements (JSON)", open=False):
                            record_out = gr.JSON(show_label=False)
                gallery_out = gr.Gallery(label="Faces: original crop | restored crop", format="png", columns=2,
                                         fit_columns=False, height="auto", object_fit="contain", preview=False)

    with gr.Tab("Hardware check"):
        gr.Markdown(ui.HARDWARE_INTRO)
        check_btn = gr.Button("Measure every mode on this machine", variant="primary")
        profile_md = gr.Markdown(elem_id="profile-report")
        profile_chart = gr.BarPlot(x="mode", y="MB", color="memory", title="Peak memory per mode (above idle)",
                                   y_title="MB", sort=list(MODES), height=300)

    weight_inputs = [mode_in, model_in, detector_in, aligned_in]
    weight_outputs = [weights_md, download_weights_btn, all_weights_md]
    restore_btn.click(
        restore_fn,
        inputs=[image_in, mode_in, model_in, detector_in, alpha_in, threshold_in, max_faces_in, aligned_in],
        outputs=[slider_out, file_out, metrics_md, gallery_out, record_out],
        api_name="restore",
        concurrency_limit=1,
        concurrency_id="engine",
    )
    check_btn.click(hardware_check, None, [profile_md, profile_chart], api_visibility="private",
                    concurrency_limit=1, concurrency_id="engine")
    demo.load(saved_hardware_check, None, [profile_md, profile_chart], api_visibility="private", show_progress="hidden")
    download_weights_btn.click(download_weights, weight_inputs, weight_outputs, api_visibility="private", concurrency_limit=1)
    # One queue lane for the panel, so answers arrive in the order asked: the page-load
    # check (slow the first time: it finds the device for auto) never overwrites a newer one.
    panel = dict(api_visibility="private", concurrency_limit=1, concurrency_id="weights-panel", show_progress="hidden")
    for trigger in (demo.load, mode_in.change, model_in.change, detector_in.change, aligned_in.change):
        trigger(weights_view, weight_inputs, weight_outputs, **panel)

# Every event goes through the queue; api_open=False refuses direct /gradio_api/run/ posts,
# which would otherwise skip it (and the one-at-a-time limit) off Spaces.
demo.queue(api_open=False, default_concurrency_limit=1, max_size=8)


# --------------------------------------------------------------------- serve


def launch_options() -> dict[str, Any]:
    """launch() settings shared by ``python app.py`` and the tests."""
    return dict(
        max_file_size=DEFAULT_LIMITS.max_file_bytes,  # the decoder's own limit, refused before upload completes
        footer_links=["api", "gradio"],
        run_history=False,
        enable_monitoring=False,
        mcp_server=False,
        ssr_mode=False,
        show_error=False,
        css=CSS,
    )


def parse_auth(text: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise SystemExit(f"--auth must be user:password, got {text!r}")
    return user, password


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="GPEN face restoration in the browser.")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for the local network)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), help="port (default 7860)")
    p.add_argument("--share", action="store_true", default=os.environ.get("GRADIO_SHARE", "").lower() in ("1", "true", "yes"),
                   help="also create a public gradio.live link (always password-protected; env GRADIO_SHARE=1)")
    p.add_argument("--auth", help="user:password for the page (required for --share; generated when not given)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    auth = parse_auth(args.auth) if args.auth else None
    if args.share and auth is None:
        auth = ("gpen", secrets.token_urlsafe(12))
        print(f"* Public link requested: log in as user {auth[0]!r} with password {auth[1]!r}")
    _, local_url, share_url = demo.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth,
                                          prevent_thread_lock=True, **launch_options())
    if args.share and not share_url:
        print(f"* The public link could not be created (offline, or gradio.live unreachable); the app runs at {local_url} only.")
    demo.block_thread()


if __name__ == "__main__":
    main()
