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
import functools
import html
import logging
import os
import secrets
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before Gradio is imported: no telemetry, and our own temp folder rather than the
# /tmp/gradio that every Gradio app on the machine shares.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault(
    "GRADIO_TEMP_DIR", str(Path(tempfile.gettempdir()) / f"gpen-gradio-{os.getuid() if hasattr(os, 'getuid') else 0}")
)

import gradio as gr  # noqa: E402

from gpen_core.presentation import readiness  # noqa: E402
from gpen_core.presentation import panels as ui  # noqa: E402
from gpen_core.platform import zerogpu  # noqa: E402
from gpen_core.errors import GPENError, InputError, ResourceError, WeightsError  # noqa: E402
from gpen_core.images.decode import DEFAULT_LIMITS  # noqa: E402
from gpen_core.modes import AUTO, MODES  # noqa: E402
from gpen_core.options import RestoreOptions  # noqa: E402
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
TEMP_MAX_AGE_S = 3600  # uploads and results older than this are deleted (at start-up, and results at each restore)
RESULT_MAX_AGE_S = TEMP_MAX_AGE_S
PREVIEW_SIDE = 1024  # the before-view shown on upload, from our own decoder
DEFAULT = "default"  # the Advanced dropdowns' "use the mode's choice"
ERROR_TITLES = {InputError: "Cannot use this input", WeightsError: "Weights missing", ResourceError: "Not enough memory"}
PLACEHOLDER = "*The measured figures of each restore appear here.*"


@dataclass(frozen=True)
class Policy:
    """What this server lets anonymous visitors do; set by :func:`main` from its flags."""

    # The server is reachable by others: --share, a host other than 127.0.0.1, or a Space.
    shared: bool = False
    # The Generator field may name any checkpoint path on the server (a local user's choice).
    any_model_path: bool = False
    # The Hardware check may be started on a shared server (it occupies the CPU for minutes).
    hardware_check_on_shared: bool = False

    @property
    def hardware_check_allowed(self) -> bool:
        return not self.shared or self.hardware_check_on_shared


POLICY = Policy()
# The last error of each browser session, for the result panel (Gradio's failure event
# gets no exception). Bounded: old sessions fall out.
_LAST_ERRORS: OrderedDict[str, str] = OrderedDict()
_RESTORES_DONE = [0]  # restores finished in this process (the check says when some ran beside it)

CSS = """
#mode-radio .wrap { flex-direction: column; align-items: stretch; }
#mode-radio label { width: 100%; }
#metrics table { font-size: 0.92em; }
#metrics td:first-child { white-space: nowrap; }
#weights-box { padding: 12px 14px; }
#weights-box .prose, #weights-box .md { overflow-wrap: anywhere; }
#weights-box button { margin-top: 6px; }
#profile-report { min-height: 3em; }
"""


def raw_upload(component: gr.Image) -> gr.Image:
    """Make an image input hand its upload to the handler as the file's path, untouched.

    Gradio's own preprocess opens every upload with Pillow and converts it (to RGB by
    default), before our hardened decoder sees it: a greyscale bomb is decoded in full,
    16-bit is clipped, transparency dropped, and an unreadable file gets Gradio's generic
    error. Here nothing is opened: ``gpen_core.images.decode`` reads the bytes as sent, with
    its limits and messages, and the page keeps Gradio's image upload box. Set on the
    instance: a gr.Image subclass would make Gradio write an ``app.pyi`` stub at import.
    """
    component.preprocess = _raw_preprocess  # type: ignore[method-assign]
    return component


def _raw_preprocess(payload: Any) -> str | None:
    if payload is None:
        return None
    if payload.url and payload.url.startswith("data:"):  # pasted from the clipboard
        return _save_data_url(payload.url)
    if payload.path is None:
        raise gr.Error("The upload arrived without a file; upload it again.", title="Cannot use this input")
    return str(payload.path)


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
    output_format: str | None = DEFAULT,
    upscale: int | str = 1,
    progress: gr.Progress = gr.Progress(),
    request: gr.Request | None = None,
) -> tuple[Any, str, str, list[tuple[Any, str]], dict[str, Any]]:
    """Restore the faces in one photo.

    Returns (before/after pair, path of the full-resolution download, the measured
    panel as Markdown, one (original | restored, caption) per face, the JSON record).
    """
    with ui_errors(request):
        if not image:
            raise InputError("Upload a photo first (or paste one from the clipboard).")
        restorer = engine()
        if restorer.busy:
            progress(0.0, desc="waiting for the restore that is already running")
        options = RestoreOptions(mode=mode or AUTO, model=checked_model(model), detector=_override(detector),  # type: ignore[arg-type]
                                 alpha=float(alpha), threshold=float(threshold), max_faces=int(max_faces), aligned=bool(aligned),
                                 output_format=_override(output_format), upscale=int(upscale or 1))
        result = restorer(image, options, progress=lambda f, d: progress(f, desc=d))
        # The engine's own decoded input: decoding the file again here, outside the meter,
        # made the server's peak exceed the reported one (issue 18/8).
        before = result.before if getattr(result, "before", None) is not None else _decode(image)
    _RESTORES_DONE[0] += 1
    return ui.comparison_pair(before, result), _save_download(image, result), ui.metrics_markdown(result), ui.face_pairs(result), ui.as_record(result)


def faces_view(slider: Any, record: dict[str, Any] | None, show: bool) -> Any:
    """"Show detected faces": the slider's "before" with the kept boxes solid and the rejected
    ones dashed (from the record's ``boxes``), or hidden. The slider itself stays clean."""
    if not show:
        return gr.update(value=None, visible=False)
    from gpen_core.presentation.overlay import faces_overlay

    image, caption = faces_overlay(slider[0] if slider else None, record)
    return gr.update(value=image, label=caption, visible=True)


def upscale_view(image: str | None, upscale: int | str, mode: str | None) -> str:
    """Before Restore: the result size and extra RAM (or why it is refused), and whether the upscaler file is missing."""
    from gpen_core.weights import lookup as weights

    if int(upscale or 1) <= 1:
        return ""
    note = readiness.upscaler_note(upscale, readiness.files_from_status(weights.status()), str(weights.models_dir()))
    return "\n\n".join(t for t in (_upscale_size(image, upscale, mode), note) if t)


def _upscale_size(image: str | None, upscale: int | str, mode: str | None) -> str:
    """The result size and the extra RAM upscaling will take (an estimate), or why it is refused."""
    factor = int(upscale or 1)
    if factor <= 1:
        return ""
    if not image:
        return f"×{factor}: upload a photo to see the result size."
    from PIL import Image

    from gpen_core.platform.meter import format_bytes
    from gpen_core.upscale.tiles import preview as upscale_preview

    try:
        with Image.open(image) as im:  # the header only: size and EXIF orientation
            w, h = im.size
            if im.getexif().get(0x0112, 1) in (5, 6, 7, 8):  # rotated a quarter turn: the result is upright
                w, h = h, w
    except Exception:  # an unreadable file is reported by the preview and by Restore
        return ""
    p = upscale_preview(w, h, factor, mode)
    if p.problem:
        return f"**Upscale ×{factor}:** {p.problem}"
    tiles = "the tile size follows the mode auto picks" if (mode or AUTO) == AUTO else f"{p.tiles} tiles of {p.tile} px"
    return (f"**Upscale ×{factor}:** result {p.out_size[0]}×{p.out_size[1]}; extra memory about "
            f"{format_bytes(p.extra_bytes)} (estimate, not yet measured; {tiles}).")


def preview(image: str | None) -> tuple[Any, Any, str, Any, Any]:
    """On upload: our decoder's view of the file as the "before" (or why it cannot be used);
    the previous result is cleared. Returns the restore outputs."""
    if not image:
        return None, None, PLACEHOLDER, None, None
    from gpen_core.images.decode import decode_image, shrink_to_max_side

    try:
        decoded = decode_image(image, reduce_to=PREVIEW_SIDE)
    except GPENError as exc:
        return None, None, ui.error_markdown(_title_for(exc), str(exc)), None, None
    except Exception as exc:  # a bug: log it, show one line
        log.exception("preview failed")
        return None, None, ui.error_markdown("Internal error", f"Could not read the file ({type(exc).__name__})."), None, None
    rgb = shrink_to_max_side(decoded.rgb, PREVIEW_SIDE)[0] if max(decoded.rgb.shape[:2]) > PREVIEW_SIDE else decoded.rgb
    return (rgb, rgb), None, ui.preview_markdown(decoded), None, None


def show_failure(request: gr.Request | None = None) -> tuple[Any, str]:
    """After a failed restore (the UI's failure event): clear the slider and name the problem in the panel."""
    key = _session(request)
    text = _LAST_ERRORS.pop(key, None) if key else None
    return None, text or ui.error_markdown("Restore failed", "See the message that popped up.")


def weights_view(mode: str, model: str | None, detector: str | None, aligned: bool, upscale: int | str = 1,
                 message: str = "") -> tuple[str, Any, str]:
    """(the weights panel, the Download button with what it fetches, every checkpoint), all from gpen_core.presentation.readiness."""
    from gpen_core.weights import lookup as weights

    r, files, statuses = _readiness(model, detector, aligned)
    folder = str(weights.models_dir())
    explicit = mode if mode and mode != AUTO else None
    upscaler = readiness.upscaler_download(files, upscale)  # the Upscale choice's missing file, offered too
    panel = ui.weights_markdown(r, files, statuses, folder, mode=explicit, message=message, upscaler=upscaler)
    wanted = readiness.download_for(r, explicit) + upscaler
    button = gr.update(visible=bool(wanted), value=ui.download_button_label(r, files, explicit, upscaler) if wanted else "Download weights")
    return panel, button, ui.all_weights_markdown(statuses, folder)


def download_weights(mode: str, model: str | None, detector: str | None, aligned: bool, upscale: int | str = 1,
                     progress: gr.Progress = gr.Progress()) -> tuple[str, Any, str]:
    """Download what the panel offers (the smallest set that enables the recommended mode, or
    the explicit mode's files; corrupt ones again), with a progress bar; a failure (offline)
    is shown with its manual fix."""
    from gpen_core.weights import lookup as weights

    r, files, _ = _readiness(model, detector, aligned)
    wanted = readiness.download_for(r, mode if mode and mode != AUTO else None) + readiness.upscaler_download(files, upscale)
    message = ""
    for i, name in enumerate(wanted):
        def report(done: int, total: int | None, i: int = i, name: str = name) -> None:
            progress((i + (done / total if total else 0.0)) / len(wanted), desc=ui.download_progress_text(name, done, total))

        try:
            weights.download(name, progress=report)
        except GPENError as exc:
            message = "**Download failed.** " + ui.markdown_text(str(exc))
            break
    else:
        message = f"Downloaded {', '.join(wanted)}." if wanted else ""
    return weights_view(mode, model, detector, aligned, upscale, message)


def hardware_check(progress: gr.Progress = gr.Progress(), request: gr.Request | None = None) -> tuple[str, Any]:
    """Measure every memory mode on this machine (saved for ``auto``): (report, bar chart data).

    Runs in its own lane: restores go on beside it (each mode is measured in a worker
    process, so a restore here does not change its memory figures, only its times).
    Refused on a shared server unless the operator allowed it (--allow-hardware-check).
    """
    from gpen_core.hwcheck import report
    from gpen_core.hwcheck import runner
    from gpen_core.engine import profile_store as store

    with ui_errors(request):
        if zerogpu.on_zerogpu():
            raise InputError(zerogpu.HARDWARE_CHECK_UNAVAILABLE)
        if not POLICY.hardware_check_allowed:
            raise InputError(HARDWARE_CHECK_OFF)
        device = get_restorer().device
        last = ui.last_check_seconds(store.load_profile(device, any_machine=False))
        t0, done0 = time.monotonic(), _RESTORES_DONE[0]
        prof = runner.run_profile(device=device, command="the app's Hardware check tab",
                                  progress=lambda f, d: progress(f, desc=ui.check_progress_text(d, time.monotonic() - t0, last)))
        md = ui.profile_markdown(prof, _verdict(prof))
        md += ("\n\n" + report.backends_section(prof)) if prof.backends else ""  # torch vs OpenVINO, what auto runs
        if device.startswith("cuda"):  # "does my GPU set-up work?": every network built and run on it
            from gpen_core.hwcheck.selfcheck import run_selfcheck

            md += "\n\n" + ui.markdown_text(run_selfcheck(device).summary())
    if _RESTORES_DONE[0] > done0:
        md += (f"\n- {_RESTORES_DONE[0] - done0} restore(s) ran during the check: its memory figures hold "
               "(each mode ran in its own process), its times may read high.")
    return md, ui.profile_chart(prof)


def saved_hardware_check() -> tuple[str, Any, Any]:
    """The saved measurement for this machine, when one is still valid (page load), and the
    button's state (off on a shared server) with how long a check takes."""
    from gpen_core.engine import profile_store as store

    prof = store.load_profile(get_restorer().device)
    if zerogpu.on_zerogpu():
        button = gr.update(interactive=False, value="Hardware check: not available on ZeroGPU")
        when = zerogpu.HARDWARE_CHECK_UNAVAILABLE
    elif POLICY.hardware_check_allowed:
        button = gr.update(interactive=True, value="Measure every mode on this machine")
        when = ui.check_duration_text(ui.last_check_seconds(prof) if prof else None)
    else:
        button = gr.update(interactive=False, value="Hardware check: off on this shared server")
        when = HARDWARE_CHECK_OFF
    if prof is None:
        verdict = f"**Recommendation** (built-in estimates until the check has run here): {_verdict(None)}."
        return (f"{when}\n\n{verdict}\n\n*No measurement for this machine yet (or the machine, versions or weights "
                "changed since).*"), None, button
    from gpen_core.hwcheck import report

    backends = ("\n\n" + report.backends_section(prof)) if prof.backends else ""
    return f"{when}\n\n" + ui.profile_markdown(prof, _verdict(prof)) + backends, ui.profile_chart(prof), button


HARDWARE_CHECK_OFF = ("The Hardware check is off on this shared server: it keeps the CPU busy for minutes. "
                      "Run it on your own machine (`python -m gpen_core profile`), or start this server with "
                      "`--allow-hardware-check`.")


def measure_tips(progress: gr.Progress = gr.Progress(), request: gr.Request | None = None) -> str:
    """The article's memory tips measured on this machine (gpen_core.hwcheck.advice), saved for the next visit."""
    from gpen_core.hwcheck import advice

    with ui_errors(request):
        if zerogpu.on_zerogpu():
            raise InputError(zerogpu.HARDWARE_CHECK_UNAVAILABLE)
        if not POLICY.hardware_check_allowed:
            raise InputError(HARDWARE_CHECK_OFF)
        t0 = time.monotonic()
        report = advice.measure_tips(progress=lambda f, d: progress(f, desc=f"{d} ({time.monotonic() - t0:.0f} s so far)"))
        report = advice.AdviceReport(**{**report.__dict__, "command": "the app's Hardware check tab"})
        path = advice.report_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        advice.save_report(report, path)
    return advice.format_table(report)


def saved_tips() -> str:
    """The tips table measured on this machine before (page load), or how to measure it."""
    from gpen_core.hwcheck import advice

    report = advice.load_report(advice.report_path())
    if report is None:
        return ("*Not measured on this machine yet.* Press the button (about 10 minutes on 2 cores; each tip runs "
                "twice in fresh processes), or run `python benchmarks/advice.py --save`.")
    return f"Measured {report.created}.\n\n" + advice.format_table(report)


# ------------------------------------------------------------------- helpers


@contextmanager
def ui_errors(request: gr.Request | None = None) -> Iterator[None]:
    """Engine errors become a readable gr.Error (never a stack trace in the page).

    The pop-up names the problem in its first line: Gradio 6.31's page shows every error
    pop-up under the heading "Error" whatever ``title`` says (its front end reads a field
    the server never sends), so the title is also written into the message. The same
    text is kept for this session's result panel (:func:`show_failure`).
    """
    try:
        yield
    except GPENError as exc:
        title = _title_for(exc)
        _remember(request, ui.error_markdown(title, str(exc)))
        raise gr.Error(f"<strong>{html.escape(title)}.</strong><br>{ui.message_html(str(exc))}", title=title,
                       duration=None, print_exception=False) from None
    except gr.Error as exc:
        _remember(request, ui.error_markdown(exc.title, str(exc.message)))
        raise
    except Exception as exc:  # a bug: log the trace for us, show the user one line
        log.exception("restore failed")
        line = f"Restore failed unexpectedly ({type(exc).__name__}: {str(exc)[:300]}). The server is still running; the server log has the details."
        _remember(request, ui.error_markdown("Internal error", line))
        raise gr.Error(f"<strong>Internal error.</strong><br>{html.escape(line)}", title="Internal error") from None


def _title_for(exc: BaseException) -> str:
    if isinstance(exc, WeightsError) and "corrupt" in str(exc):
        return "Weights corrupt"
    return next((t for cls, t in ERROR_TITLES.items() if isinstance(exc, cls)), "Error")


def _session(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None) if request is not None else None


def _remember(request: gr.Request | None, text: str) -> None:
    key = _session(request)
    if key:
        _LAST_ERRORS[key] = text
        while len(_LAST_ERRORS) > 256:
            _LAST_ERRORS.popitem(last=False)


_BACKEND: Any = None  # None: this process's Restorer; else a gpen_core.scaleout.serve.RayRestorer (--backend ray)


def engine() -> Any:
    """What the Restore button calls: the local Restorer, or the Ray Serve deployment by handle."""
    return _BACKEND if _BACKEND is not None else get_restorer()


def use_ray_backend(address: str | None) -> None:
    """Send restores to the RestoreDeployment of ``python -m gpen_core serve`` (connects now: fails fast)."""
    global _BACKEND
    from gpen_core.scaleout.serve import RayRestorer

    backend = RayRestorer(address)
    backend.handle()
    _BACKEND = backend


def _override(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if value in ("", DEFAULT) else value


def checked_model(value: str | None) -> str | None:
    """The Generator field: a registry name, or a checkpoint file inside the models folder.

    Anything else (a path elsewhere on the server, a folder, a device) is refused with one
    message that reveals nothing about the path, unless the server was started with
    --allow-any-model-path (a local user's choice).
    """
    from gpen_core.weights import lookup as weights

    name = _override(value)
    if name is None or name in weights.REGISTRY or POLICY.any_model_path:
        return name
    folder = Path(os.path.abspath(weights.models_dir()))
    given = Path(name)
    candidate = Path(os.path.normpath(given if given.is_absolute() else folder / given))
    if folder not in candidate.parents or candidate.suffix.lower() not in (".pth", ".pt"):
        raise InputError(
            f"The Generator field takes a registry name ({', '.join(n for n, s in weights.REGISTRY.items() if s.kind == 'generator')}) "
            "or the file name of a .pth/.pt checkpoint in the models folder; other paths on the server are not accepted "
            "(on your own machine, start the app with --allow-any-model-path)."
        )
    if not candidate.is_file():
        raise InputError(f"There is no checkpoint {candidate.relative_to(folder)} in the models folder; "
                         "put the file there or pick a registry name.")
    return str(candidate)


def _readiness(model: str | None, detector: str | None, aligned: bool):
    """(Readiness, files, weights.status()) for the panel; an unusable Generator value is left to Restore."""
    from gpen_core.weights import lookup as weights

    try:
        model_name = checked_model(model)
    except InputError:
        model_name = _override(model)
    statuses = weights.status()
    r, files = readiness.current(get_restorer().device, model=model_name, detector=_override(detector), aligned=bool(aligned))
    return r, files, statuses


def _verdict(prof: Any) -> str:
    """The Hardware check's recommendation: gpen_core.presentation.readiness with the measured peaks (files and memory)."""
    r, files = readiness.current(get_restorer().device)
    return readiness.summary(r, files)


def _decode(image: str):
    from gpen_core.images.decode import decode_image

    return decode_image(image).rgb


def _save_data_url(url: str) -> str:
    """A data: URL's bytes, as sent, in a fresh file of our own (the decoder reads it like any upload)."""
    import base64
    import binascii

    head, _, data = url.partition(",")
    if ";base64" not in head:
        raise gr.Error("The pasted image could not be read; save it as a file and upload that.", title="Cannot use this input")
    if len(data) * 3 // 4 > DEFAULT_LIMITS.max_file_bytes:
        raise gr.Error(f"The pasted image is over the {DEFAULT_LIMITS.max_file_bytes // 1_000_000} MB limit.", title="Cannot use this input")
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        raise gr.Error("The pasted image could not be read; save it as a file and upload that.", title="Cannot use this input") from None
    PASTED_DIR.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="p-", dir=PASTED_DIR)) / "pasted"
    path.write_bytes(raw)
    return str(path)


def _save_download(source: str, result: Any) -> str:
    """Write the result's encoded bytes to a fresh folder of our own (never a shared fixed path)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    sweep_temp(RESULTS_DIR, RESULT_MAX_AGE_S)
    path = Path(tempfile.mkdtemp(prefix="r-", dir=RESULTS_DIR)) / ui.download_name(source, result)
    path.write_bytes(result.encoded)
    return str(path)


def sweep_temp(folder: Path = TEMP_ROOT, max_age_s: float = TEMP_MAX_AGE_S) -> int:
    """Delete every file under ``folder`` last modified more than ``max_age_s`` ago, then the
    folders left empty; returns how many files went. Symlinks are removed, never followed.

    At start-up over the whole temp folder: uploads, results and pasted images left by an
    instance that was killed (Gradio's own clean-up only knows this instance's files).
    """
    cutoff = time.time() - max_age_s
    removed = 0
    if not folder.is_dir():
        return 0
    for root, dirs, names in os.walk(folder, topdown=False):
        for n in names:
            p = Path(root, n)
            try:
                if p.lstat().st_mtime < cutoff:
                    p.unlink()
                    removed += 1
            except OSError:
                pass
        for d in dirs:
            p = Path(root, d)
            try:
                if p.is_symlink():
                    if p.lstat().st_mtime < cutoff:
                        p.unlink()
                elif not any(p.iterdir()):
                    p.rmdir()
            except OSError:
                pass
    return removed


def _generator_choices() -> list[tuple[str, str]]:
    from gpen_core.weights.lookup import REGISTRY

    return [("the mode's generator", DEFAULT)] + [(n, n) for n, s in REGISTRY.items() if s.kind == "generator"]


def _examples() -> list[list[str]]:
    return [[str(p)] for p in sorted(EXAMPLES_DIR.glob("*.jpg"))]


# -------------------------------------------------------------------- layout

def _gpu_seconds(image: Any, mode: Any, model: Any, detector: Any, alpha: Any, threshold: Any, max_faces: Any, aligned: Any,
                 *rest: Any, **kw: Any) -> int:
    """ZeroGPU's ``duration`` for one restore (it gets restore's own arguments): see gpen_core.platform.zerogpu."""
    return zerogpu.CLOCK.duration(max_faces, bool(aligned))


def _on_gpu(fn: Any) -> Any:
    """``fn`` inside ``spaces.GPU`` (the only place CUDA may be touched on ZeroGPU), asking for
    seconds from measured work; each finished restore's seconds per face is recorded outside
    the GPU call (ZeroGPU may run the call in another process)."""
    gpu_fn = spaces.GPU(duration=_gpu_seconds)(fn)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        out = gpu_fn(*args, **kwargs)
        zerogpu.CLOCK.record(out[4])
        return out

    return run


restore_fn = _on_gpu(restore) if spaces is not None else restore

with gr.Blocks(title="GPEN face restoration", analytics_enabled=False, delete_cache=(600, TEMP_MAX_AGE_S)) as demo:
    gr.Markdown(
        "# GPEN face restoration\n"
        "Restores the faces in old, blurry or compressed photos with GPEN (Yang et al., CVPR 2021). "
        "Every result comes with what it cost: peak RAM, VRAM and time, measured for that request."
    )
    with gr.Tab("Restore"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=320):
                image_in = raw_upload(gr.Image(label="Photo", type="filepath", image_mode=None, sources=["upload", "clipboard"], height=320))
                mode_in = gr.Radio(ui.mode_choices(), value=AUTO, label="Memory mode", elem_id="mode-radio")
                upscale_in = gr.Radio([("1× (keep size)", 1), ("2×", 2), ("4×", 4)], value=1, label="Upscale",
                                      info="enlarge the whole photo with RealESRNet (GPEN's background upscaler); "
                                      "faces are restored at that size", elem_id="upscale-radio")
                upscale_md = gr.Markdown(elem_id="upscale-info")
                with gr.Accordion("Advanced", open=False):
                    model_in = gr.Dropdown(_generator_choices(), value=DEFAULT, allow_custom_value=True, label="Generator",
                                           info="a registry name, or the file name of a GPEN checkpoint in the models folder")
                    detector_in = gr.Radio([("the mode's detector", DEFAULT), ("RetinaFace MobileNet-0.25", "mobilenet0.25"),
                                            ("RetinaFace ResNet-50", "resnet50")], value=DEFAULT, label="Face detector")
                    alpha_in = gr.Slider(0.0, 1.0, value=1.0, step=0.05, label="Blend strength (alpha)",
                                         info="1 = restored face only, 0 = the original face")
                    threshold_in = gr.Slider(0.05, 0.99, value=0.9, step=0.01, label="Detection threshold",
                                             info="lower finds more (and more false) faces")
                    max_faces_in = gr.Number(value=50, minimum=1, maximum=200, step=1, precision=0, label="Max faces",
                                             info="the largest faces first (1–200)")
                    aligned_in = gr.Checkbox(False, label="Already an aligned face crop (skip detection)")
                    format_in = gr.Radio([("the mode's format", DEFAULT), ("PNG: lossless, keeps transparency", "png"),
                                          ("JPEG", "jpeg")], value=DEFAULT, label="Output format")
                restore_btn = gr.Button("Restore", variant="primary", size="lg")
                with gr.Group(elem_id="weights-box"):
                    weights_md = gr.Markdown(elem_id="weights")
                    download_weights_btn = gr.Button("Download weights", visible=False, variant="primary", size="md",
                                                     elem_id="download-weights")
                with gr.Accordion("All checkpoints", open=False):
                    all_weights_md = gr.Markdown(elem_id="all-weights")
                gr.Examples(_examples(), inputs=[image_in], cache_examples=False,
                            label="Examples: degraded public-domain portraits (examples/README.md)")
            with gr.Column(scale=6, min_width=420):
                slider_out = gr.ImageSlider(label="Before / after (drag the handle)", type="numpy", format="png",
                                            interactive=False, max_height=640, elem_id="slider")
                show_faces_in = gr.Checkbox(False, label="Show detected faces", elem_id="show-faces",
                                            info="the photo as the detector saw it: restored faces solid green, "
                                            "candidates rejected as not a face dashed red")
                faces_out = gr.Image(label="Detected faces", type="numpy", format="png", interactive=False, visible=False,
                                     height=480, elem_id="detected-faces")
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3, min_width=280):
                        metrics_md = gr.Markdown(PLACEHOLDER, label="Measured panel (Markdown)", elem_id="metrics")
                    with gr.Column(scale=2, min_width=200):
                        file_out = gr.File(label="Full-resolution result", interactive=False, elem_id="download")
                        with gr.Accordion("Raw measurements (JSON)", open=False):
                            record_out = gr.JSON(label="Record (JSON)", show_label=False)
                gallery_out = gr.Gallery(label="Faces: original crop | restored crop", format="png", columns=2,
                                         fit_columns=False, height=None, object_fit="contain", preview=False,
                                         elem_id="faces")

    with gr.Tab("Hardware check"):
        gr.Markdown(ui.HARDWARE_INTRO)
        check_btn = gr.Button("Measure every mode on this machine", variant="primary", elem_id="check-button")
        profile_md = gr.Markdown(elem_id="profile-report")
        profile_chart = gr.BarPlot(x="mode", y="MB", color="memory", title="Peak memory per mode (above idle)",
                                   y_title="MB", sort=list(MODES), height=300)
        with gr.Accordion("Tips, measured here", open=False, elem_id="tips"):
            gr.Markdown("The usual advice for fitting GPEN in memory, each tip measured on this machine as a "
                        "before/after pair with this engine: helps, no effect, hurts, or not measurable here (and why).")
            tips_btn = gr.Button("Measure the tips on this machine", elem_id="tips-button")
            tips_md = gr.Markdown(elem_id="tips-report")

    weight_inputs = [mode_in, model_in, detector_in, aligned_in, upscale_in]
    weight_outputs = [weights_md, download_weights_btn, all_weights_md]
    result_outputs = [slider_out, file_out, metrics_md, gallery_out, record_out]
    # A press first clears the last result in the page (no server trip), so a failure
    # never leaves it on screen; a failure then names the problem in the panel.
    restore_btn.click(
        None, None, result_outputs, js="() => [null, null, '*Restoring… the measured figures of this request will appear here.*', [], null]",
        api_visibility="private",
    ).then(
        restore_fn,
        inputs=[image_in, mode_in, model_in, detector_in, alpha_in, threshold_in, max_faces_in, aligned_in, format_in, upscale_in],
        outputs=result_outputs,
        api_name="restore",
        concurrency_limit=1,
        concurrency_id="engine",
        show_progress_on=[slider_out],
    ).failure(show_failure, None, [slider_out, metrics_md], api_visibility="private", show_progress="hidden"
              ).then(weights_view, weight_inputs, weight_outputs, api_visibility="private", show_progress="hidden")
    # The boxes follow the result (a new record, or none after a new upload) and the checkbox.
    for trigger in (show_faces_in.change, record_out.change):
        trigger(faces_view, [slider_out, record_out, show_faces_in], faces_out, api_visibility="private",
                concurrency_limit=1, concurrency_id="faces-view", show_progress="hidden")
    # On upload: our decoder's before-view (or why the file cannot be used), in its own lane.
    image_in.upload(preview, image_in, result_outputs, api_visibility="private", concurrency_limit=1,
                    concurrency_id="preview", show_progress_on=[slider_out])
    image_in.clear(lambda: (None, None, PLACEHOLDER, None, None), None, result_outputs, api_visibility="private",
                   show_progress="hidden")
    # Its own lane: restores never wait for the check (see hardware_check).
    check_btn.click(hardware_check, None, [profile_md, profile_chart], api_visibility="private",
                    concurrency_limit=1, concurrency_id="hardware-check", show_progress_on=[profile_chart])
    demo.load(saved_hardware_check, None, [profile_md, profile_chart, check_btn], api_visibility="private", show_progress="hidden")
    tips_btn.click(measure_tips, None, tips_md, api_visibility="private", concurrency_limit=1,
                   concurrency_id="hardware-check", show_progress_on=[tips_md])
    demo.load(saved_tips, None, tips_md, api_visibility="private", show_progress="hidden")
    download_weights_btn.click(download_weights, weight_inputs, weight_outputs, api_visibility="private", concurrency_limit=1
                               ).then(upscale_view, [image_in, upscale_in, mode_in], upscale_md, api_visibility="private",
                                      show_progress="hidden")  # a downloaded upscaler clears the Upscale line's warning
    # One queue lane for the panel, so answers arrive in the order asked: the page-load
    # check (slow the first time: it finds the device for auto) never overwrites a newer one.
    panel = dict(api_visibility="private", concurrency_limit=1, concurrency_id="weights-panel", show_progress="hidden")
    for trigger in (demo.load, mode_in.change, model_in.change, detector_in.change, aligned_in.change, upscale_in.change):
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
    global POLICY
    p = argparse.ArgumentParser(description="GPEN face restoration in the browser.")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for the local network)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), help="port (default 7860)")
    p.add_argument("--share", action="store_true", default=os.environ.get("GRADIO_SHARE", "").lower() in ("1", "true", "yes"),
                   help="also create a public gradio.live link (always password-protected; env GRADIO_SHARE=1)")
    p.add_argument("--auth", help="user:password for the page (required for --share; generated when not given)")
    p.add_argument("--allow-any-model-path", action="store_true",
                   help="let the Generator field name any checkpoint path on this machine (default: registry names "
                        "and files in the models folder only)")
    p.add_argument("--allow-hardware-check", action="store_true",
                   default=os.environ.get("GPEN_ALLOW_HARDWARE_CHECK", "").lower() in ("1", "true", "yes"),
                   help="allow the Hardware check on a shared server (--share, a host other than 127.0.0.1, or a Space); "
                        "it is always allowed on 127.0.0.1")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local: restore in this process (default); ray: call `python -m gpen_core serve`'s deployment")
    p.add_argument("--address", default="auto", help="with --backend ray: the Ray address `serve` printed (default auto)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    if args.backend == "ray":
        try:
            use_ray_backend(args.address)
        except GPENError as exc:
            raise SystemExit(f"error: {exc}") from None

    shared = args.share or args.host not in ("127.0.0.1", "localhost", "::1") or bool(os.environ.get("SPACE_ID"))
    POLICY = Policy(shared=shared, any_model_path=args.allow_any_model_path, hardware_check_on_shared=args.allow_hardware_check)
    swept = sweep_temp(TEMP_ROOT, TEMP_MAX_AGE_S)
    if swept:
        log.info("deleted %d temporary file(s) older than %d s from %s (left by an earlier run)", swept, TEMP_MAX_AGE_S, TEMP_ROOT)

    auth = parse_auth(args.auth) if args.auth else None
    if args.share and auth is None:
        auth = ("gpen", secrets.token_urlsafe(12))
        print(f"* Public link requested: log in as user {auth[0]!r} with password {auth[1]!r}")
    # quiet: Gradio's own start lines end with "set `share=True` in `launch()`"; ours name our flags.
    _, local_url, share_url = demo.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth,
                                          prevent_thread_lock=True, quiet=True, **launch_options())
    print(f"* Running on {local_url}")
    if share_url:
        print(f"* Public link: {share_url}")
    elif args.share:
        print(f"* The public link could not be created (offline, or gradio.live unreachable); the app runs at {local_url} only.")
    else:
        print("* Only this machine can open it; add --share for a password-protected public link, or --host 0.0.0.0 for your network.")
    demo.block_thread()

if __name__ == "__main__":
    main()
