"""One attempt of a request: decode → choose the mode → ensure models → detect → restore faces → encode.

:func:`start` decodes the input and picks the mode (``auto`` through :mod:`gpen_core.engine.budget`);
:func:`run_attempt` runs the request once in that mode with the models of a
:class:`~gpen_core.engine.model_cache.ModelCache` and returns a typed result. Stepping down
after an out-of-memory error, the lock and the meter are the facade's
(:mod:`gpen_core.restorer`). Nothing heavy at import.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpen_core.engine import budget
from gpen_core.engine import tasks as task_steps
from gpen_core.errors import InputError
from gpen_core.engine.model_cache import ModelCache
from gpen_core.engine.one_shot import LazyParser
from gpen_core.modes import AUTO, MemoryMode, get_mode, get_task
from gpen_core.options import ImageSource, Progress, RestoreOptions
from gpen_core.result import Peaks, RejectedFace, RestoreResult, Timings
from gpen_core.rgb import check_rgb


@dataclass
class Request:
    """A decoded request and the mode it runs in now (the OOM ladder lowers ``mode``)."""

    decoded: Any  # imageio.DecodedImage
    decode_s: float
    mode: MemoryMode
    reason: str
    notes: list[str] = field(default_factory=list)
    mask: np.ndarray | None = None  # inpainting's damage mask, RGB uint8 of the photo's size (white = damaged)


def import_engine() -> None:
    """Import the heavy modules (torch, OpenCV, facexlib) so the meter's baseline includes them."""
    from gpen_core.faces import detect  # noqa: F401
    from gpen_core.networks import fast
    from gpen_core.images import decode as imageio
    from gpen_core.faces import paste
    from gpen_core.faces import photo
    from gpen_core.platform.oom import reserve_blas_buffers

    detect.import_backends()
    reserve_blas_buffers()  # before the request's allocations: OpenBLAS exits the process when it cannot map them later


def decode(image: ImageSource, reduce_to: int | None = None):
    """An RGB uint8 array as it is, or encoded bytes / a path decoded (see :mod:`gpen_core.images.decode`)."""
    from gpen_core.images.decode import DecodedImage, decode_image

    if isinstance(image, np.ndarray):
        rgb = check_rgb(image, "the image array")
        h, w = rgb.shape[:2]
        return DecodedImage(rgb=rgb, alpha=None, format="array", original_size=(w, h), notes=())
    return decode_image(image, reduce_to=reduce_to)


def start(
    image: ImageSource, opts: RestoreOptions, models: ModelCache, device: str, boxes_given: bool, t0: float,
    mask: ImageSource | None = None,
) -> Request:
    """Decode ``image`` (and inpainting's ``mask``) and choose the mode to start in (auto's choice, or a
    lighter mode when the asked one does not fit)."""
    # An explicit mode that pre-shrinks lets big JPEGs decode at reduced size (never below its max side).
    reduce_to = None if (opts.mode == AUTO or opts.aligned or mask is not None) else get_mode(opts.mode).max_side
    decoded, forced = _decode_or_step_down(image, reduce_to, opts, device)
    rgb = decoded.rgb
    notes = list(decoded.notes)
    decode_s = time.perf_counter() - t0
    size = (rgb.shape[1], rgb.shape[0])
    if forced is not None:  # decoding ran out of memory: the photo was decoded for the lightest mode
        mode, reason = forced
        notes.append(reason)
    elif opts.mode == AUTO:
        choice = budget.choose(
            device=device,
            image_size=size,
            models_dir=models.models_dir,
            available=lambda m: models.weights_present(m, opts, boxes_given),
            upscale=opts.upscale,  # each mode's peak includes what upscaling adds in it
            tile=opts.tile,
            task=opts.task,
        )
        mode, reason = choice.mode, choice.reason
    else:
        mode, reason = get_mode(opts.mode), ""
        step = budget.check_fits(mode, device=device, image_size=size, models_dir=models.models_dir, upscale=opts.upscale,
                                 tile=opts.tile, task=opts.task)
        if step is not None:
            mode, reason = step.mode, step.reason
            notes.append(reason)
    if opts.upscale > 1 and mode.paste:  # refuse an oversized result before any work (after the mode's pre-shrink)
        from gpen_core.upscale.tiles import check_output_size

        from gpen_core.modes import preshrink_size

        check_output_size(*preshrink_size(*size, mode.max_side), opts.upscale)
    mask_rgb = None
    if mask is not None:
        if opts.task != "inpaint":
            raise InputError(f"a damage mask is for the inpaint task, not {opts.task}")
        if isinstance(mask, np.ndarray):  # grey H×W or RGB H×W×3, uint8
            if mask.dtype != np.uint8 or mask.ndim not in (2, 3):
                raise InputError(f"the damage mask must be a uint8 H×W or H×W×3 array, got {mask.dtype} with shape {mask.shape}")
            mask_rgb = mask
        else:
            mask_rgb = decode(mask).rgb
        if mask_rgb.shape[:2] != rgb.shape[:2]:
            raise InputError(
                f"the damage mask is {mask_rgb.shape[1]}×{mask_rgb.shape[0]} but the photo is {rgb.shape[1]}×{rgb.shape[0]}: "
                "draw or save the mask at the photo's size"
            )
    return Request(decoded, decode_s, mode, reason, notes, mask_rgb)


def _decode_or_step_down(
    image: ImageSource, reduce_to: int | None, opts: RestoreOptions, device: str
) -> tuple[Any, tuple[MemoryMode, str] | None]:
    """Decode; when that runs out of memory, decode again for the lightest mode (a big JPEG
    then decodes at reduced size) and return that mode with the note saying so."""
    from gpen_core.modes import MODES
    from gpen_core.platform.oom import is_oom, release

    try:
        return decode(image, reduce_to), None
    except Exception as exc:
        lightest = min((m for m in MODES.values() if m.paste), key=lambda m: m.rank)
        smaller = lightest.max_side and (reduce_to is None or lightest.max_side < reduce_to)
        if opts.aligned or isinstance(image, np.ndarray) or not smaller or not is_oom(exc):
            raise
        del exc  # its traceback holds the partial decode
    release(device)
    decoded = decode(image, lightest.max_side)
    asked = opts.mode if opts.mode != AUTO else "auto"
    return decoded, (lightest, f"ran out of memory decoding the photo for {asked}; decoded it for {lightest.name} instead")


def run_attempt(
    models: ModelCache,
    device: str,
    req: Request,
    opts: RestoreOptions,
    report: Progress,
    t0: float,
    given: list[Any] | None,
) -> RestoreResult:
    """Run ``req`` once in ``req.mode``. Out-of-memory errors propagate (the facade steps down)."""
    import torch

    from gpen_core.images.decode import encode_image, shrink_to_max_side
    from gpen_core.faces.paste import face_sheet
    from gpen_core.faces.photo import restore_photo
    from gpen_core.networks.tensors import to_image, to_tensor
    from gpen_core.faces.tasks import keep_luminance

    decoded, mode, reason, decode_s = req.decoded, req.mode, req.reason, req.decode_s
    rgb, alpha, original_size = decoded.rgb, decoded.alpha, decoded.upright_size

    notes = list(req.notes)
    in_h, in_w = rgb.shape[:2]
    if mode.max_side and not opts.aligned and max(in_h, in_w) > mode.max_side:
        rgb, _ = shrink_to_max_side(rgb, mode.max_side)
        if alpha is not None:
            alpha, _ = shrink_to_max_side(alpha[..., None].repeat(3, 2), mode.max_side)
            alpha = alpha[..., 0]
        notes.append(f"{mode.name} mode shrank the photo from {in_w}×{in_h} to {rgb.shape[1]}×{rgb.shape[0]} before restoring")
    task = get_task(opts.task)
    rgb, damage, grey = task_steps.task_input(task, rgb, req.mask, opts.aligned, notes)

    from gpen_core.networks.fast import forward_checked
    from gpen_core.platform.oom import malloc_trim
    from gpen_core.networks.plan import cuda_numerics

    old_threads = torch.get_num_threads()
    numerics = ExitStack()
    if mode.threads and device == "cpu" and old_threads > mode.threads:
        torch.set_num_threads(mode.threads)
    # One-shot (a process serving one request): the detector is dropped once it has run, the
    # generator after the last face, and the parser is loaded at the first mask; the peak is then
    # the largest stage's, not the sum of the networks. A torch generator still loads first, onto
    # the smallest heap (loading it after detection measured 20-130 MiB more at its load); an
    # OpenVINO one (its own allocations) loads after detection, so the two are never resident
    # together (`quality` on a 12 MP photo: the detect stage 1021 MiB with both, an AVX2 EPYC).
    one_shot = models.one_shot
    try:
        t = time.perf_counter()
        models.require(mode, opts, given is not None)  # every missing file named at once

        def load_generator() -> tuple[Any, int, Any, str]:
            report(0.02, "loading model")
            forward, size, dtype, ckpt_name, dtype_note = models.generator(mode, opts, device, progress=lambda f, m: report(0.02, m))
            if dtype_note:
                notes.append(dtype_note)
            # A float32 request is exact float32 on CUDA too (TF32 off for the whole attempt).
            numerics.enter_context(cuda_numerics(device, exact_float32=dtype == torch.float32, fixed_input=False))
            if dtype == torch.float32 and device.startswith("cuda"):
                notes.append("float32 here is exact IEEE float32: TF32 was off for this request")
            return forward, size, dtype, ckpt_name

        after_detection = one_shot and not opts.aligned and models.generator_runtime(mode, opts, device) == "openvino"
        if not after_detection:
            forward, size, dtype, ckpt_name = load_generator()
        parsing_fn: Any = None
        if mode.paste and not opts.aligned:
            load_parser = lambda: models.parser(mode, device, notes, opts)  # noqa: E731
            parsing_fn = LazyParser(load_parser) if one_shot else load_parser()
        detector_name = "none"
        detections = None
        det_scale = 1  # detections already at the upscaled size: the upscaling factor
        rejected: list[RejectedFace] = []  # in rgb's pixels, scaled with it below when upscaled
        load_s = time.perf_counter() - t
        detect_s = 0.0
        if given is not None and not opts.aligned:
            detector_name = "given boxes"
            if models.synthetic_weights:
                # The hardware check: run the mode's detector network for its true cost,
                # then use the given boxes (a synthetic detector finds no faces).
                net = opts.detector or mode.detector
                t = time.perf_counter()
                detector = models.detector(net, device, opts, notes, mode=mode)
                load_s += time.perf_counter() - t
                t = time.perf_counter()
                detector.detect(rgb, threshold=opts.threshold, max_side=mode.detect_side)
                detect_s = time.perf_counter() - t
                detector_name = f"{net} ({'synthetic weights, ' if detector.weights_path is None else ''}boxes given)"
            detections = sorted(given, key=lambda d: -(d.box[2] - d.box[0]) * (d.box[3] - d.box[1]))
            if rgb.shape[:2] != (in_h, in_w):  # boxes are in input pixels; follow the pre-shrink
                detections = [_scale_detection(d, rgb.shape[1] / in_w) for d in detections]
            if len(detections) > opts.max_faces:
                notes.append(f"{len(detections)} boxes given; restored the {opts.max_faces} largest (max faces = {opts.max_faces})")
                detections = detections[: opts.max_faces]
        elif not opts.aligned:
            detector_name = opts.detector or mode.detector
            t = time.perf_counter()
            detector = models.detector(detector_name, device, opts, notes, mode=mode)
            load_s += time.perf_counter() - t
            report(0.1, "detecting faces")
            t = time.perf_counter()
            found, det_scale = _find_faces(detector, rgb, mode, opts)
            detections = list(found.faces)
            rejected = [RejectedFace(d.box, d.score, why) for d, why in found.rejected]
            notes.extend(found.notes)
            detect_s = time.perf_counter() - t
            if len(detections) > opts.max_faces:
                notes.append(
                    f"found {len(detections)} faces; restored the {opts.max_faces} with the highest detection scores "
                    f"(max faces = {opts.max_faces})"
                )
                detections = detections[: opts.max_faces]
        if one_shot:
            detector = None
            models.drop("detector", device)

        # glibc keeps what the detector freed (~170 MiB on a 4000×3000 photo with ResNet-50) unless asked.
        malloc_trim()
        if after_detection:
            t = time.perf_counter()
            forward, size, dtype, ckpt_name = load_generator()
            load_s += time.perf_counter() - t
        exact = dtype == torch.float32
        upscaled, face_start = None, 0.15
        if opts.upscale > 1 and not mode.paste:
            notes.append(f"{mode.name} mode returns the restored faces only: the background was not upscaled (×{opts.upscale} asked)")
        elif opts.upscale > 1:
            rgb, alpha, detections, upscaled, up_load_s = _upscale_background(
                rgb, alpha, detections, models, mode, opts, device, report, det_scale
            )
            load_s += up_load_s
            face_start = 0.45
            if one_shot:  # the background is upscaled: the faces need no upscaler
                models.drop("upscaler", device)
            s = upscaled.scale
            rejected = [replace(r, box=tuple(v * s / det_scale for v in r.box)) for r in rejected]
            notes.append(
                f"background upscaled ×{s} by {upscaled.name}: {rgb.shape[1] // s}×{rgb.shape[0] // s} → "
                f"{rgb.shape[1]}×{rgb.shape[0]}, {upscaled.grid.count} tile{'s' if upscaled.grid.count > 1 else ''} of "
                f"{upscaled.grid.tile} px with {upscaled.grid.pad} px context, in {upscaled.dtype_reason}; faces restored "
                "and pasted at that size"
            )
        else:
            models.upscaler(opts, device)  # no upscaling asked: drop a resident upscaler (loads nothing)

        overflows: list[str] = []
        restores_left = len(detections) if detections is not None else 1

        def restore_fn(crop: np.ndarray) -> np.ndarray:
            nonlocal forward, restores_left
            if forward is None:  # more faces than counted (a caller restoring one twice): load it again, never fail
                forward = models.generator(mode, opts, device)[0]
            # The generator's input size never changes: cuDNN autotuning pays off (CUDA only).
            with torch.inference_mode(), cuda_numerics(device, exact_float32=exact, fixed_input=True):
                y, problem = forward_checked(forward, to_tensor(crop, device=device, dtype=dtype, norm=task.is_norm))
            if problem:
                overflows.append(problem)
            out = to_image(y, norm=task.is_norm)
            if grey is not None and not opts.aligned:  # each coloured face keeps its own detail (the gallery, faces-only)
                out = keep_luminance(crop, out)
            del y
            restores_left -= 1
            if one_shot and restores_left == 0:  # the last face: masks and paste-back need no generator
                forward = None
                models.drop("generator", device)
            malloc_trim()  # the generator's freed activations back to the OS before the parser allocates (quality: -160 MiB peak)
            return out

        def face_progress(k: int, n: int) -> None:
            report(face_start + (0.9 - face_start) * (k / max(n, 1)), f"restoring face {min(k + 1, n)} of {n}")

        photo = restore_photo(
            rgb,
            detections=detections,
            restore_fn=restore_fn,
            size=size,
            alpha=opts.alpha,
            paste=mode.paste,
            parsing_fn=parsing_fn,
            aligned=opts.aligned,
            progress=face_progress,
            background=upscaled.image if upscaled is not None else None,
            aligned_at_input_size=task.aligned_output_at_input_size,
            damage=damage,
        )
        if grey is not None:
            photo = task_steps.colorized(photo, grey, mode.paste or opts.aligned, opts.aligned, notes)
        up_info = _upscale_info(upscaled)
        upscaled = None  # the composed photo holds the result now: drop the background buffer
        if one_shot:
            models.drop("generator", device)  # still resident when a face was skipped (inpainting)
            models.drop("parser", device)
        notes.extend(photo.notes)
        from gpen_core.modes import official_departures

        departures = official_departures(
            mode, detector=detector_name if given is None and not opts.aligned else None, detection=given is None and not opts.aligned,
            dtype=str(dtype).replace("torch.", ""), upscale=opts.upscale,
            parsing=parsing_fn.parsed if isinstance(parsing_fn, LazyParser) else parsing_fn is not None,
            pasted=not opts.aligned,
        )
        if departures:
            notes.append(departures)
        notes.extend(f"{problem} ({n} face{'s' if n > 1 else ''})" for problem, n in Counter(overflows).items())
    finally:
        numerics.close()
        if torch.get_num_threads() != old_threads:
            torch.set_num_threads(old_threads)

    report(0.92, "encoding result")
    icc = getattr(decoded, "icc_profile", None)
    t = time.perf_counter()
    fmt = opts.output_format or mode.output_format
    if mode.paste or opts.aligned:
        out_alpha = alpha if (alpha is not None and photo.image.shape[:2] == alpha.shape) else None
        if out_alpha is not None and fmt == "jpeg":
            notes.append("JPEG has no transparency: the alpha channel is not in the downloadable result")
            out_alpha = None
        meta = _metadata(decoded, photo.image, photo=True)  # EXIF (upright) and DPI, print size kept
        encoded = encode_image(photo.image, fmt, alpha=out_alpha, icc_profile=icc, exif=meta.exif, dpi=meta.dpi)
    else:
        sheet = face_sheet(photo.faces) if photo.faces else photo.image
        encoded = encode_image(sheet, fmt, exif=_metadata(decoded, sheet, photo=not photo.faces).exif)
    encode_s = time.perf_counter() - t
    t_ = photo.timings
    timings = Timings(
        total_s=time.perf_counter() - t0,
        decode_s=decode_s,
        detect_s=detect_s,
        align_s=t_.get("align_s", 0.0),
        restore_s=t_.get("restore_s", 0.0),
        paste_s=t_.get("paste_s", 0.0),
        encode_s=encode_s,
        load_s=load_s,
        upscale_s=up_info.seconds if up_info is not None else 0.0,
    )
    report(1.0, "done")
    return RestoreResult(
        image=photo.image,
        faces=tuple(photo.faces),
        timings=timings,
        peaks=Peaks(0, 0, "vmhwm"),  # replaced by the meter's figures in __call__
        mode=mode,
        requested_mode=opts.mode,
        mode_reason=reason,
        checkpoint=ckpt_name,
        detector=detector_name,
        device=device,
        dtype=str(dtype).replace("torch.", ""),
        backend=models.backend,
        backend_reason=models.backend_reason,
        output_format=fmt,
        encoded=encoded,
        notes=tuple(dict.fromkeys(notes)),
        input_size=original_size,
        processed_size=(rgb.shape[1] // (up_info.factor if up_info else 1), rgb.shape[0] // (up_info.factor if up_info else 1)),
        before=rgb,
        upscale=up_info,
        rejected=tuple(rejected),
        task=task.name,
    )


@dataclass
class _Upscaled:
    image: np.ndarray  # the upscaled background, RGB uint8
    scale: int
    grid: Any  # tiles.TileGrid
    seconds: float
    dtype: str
    name: str  # the upscaler's registry name or file name
    dtype_reason: str = ""  # why that dtype (tiles.choose_bf16)


def _upscale_background(
    rgb, alpha, detections, models: ModelCache, mode: MemoryMode, opts: RestoreOptions, device: str, report: Progress,
    det_scale: int = 1,
):
    """GPEN's --use_sr flow: upscale the photo in tiles; resize the original (and its alpha) to that size with
    bilinear, as official, for alignment; move the detections to it (they are ``det_scale`` × ``rgb``'s pixels
    already when found on the upscaled photo). Faces are then restored and pasted at the upscaled size.
    Returns (resized original, alpha, detections, _Upscaled, load seconds)."""
    import cv2

    from gpen_core.upscale.tiles import MODE_TILE_BUDGET, choose_bf16, run_tiles, tile_for_budget

    t = time.perf_counter()
    loaded = models.upscaler(opts, device)
    assert loaded is not None
    net, name = loaded
    load_s = time.perf_counter() - t
    cfg = net.config
    budget_bytes = MODE_TILE_BUDGET.get(mode.name, min(MODE_TILE_BUDGET.values()))
    tile = opts.tile or tile_for_budget(budget_bytes, cfg.scale, num_feat=cfg.num_feat, num_grow_ch=cfg.num_grow_ch)

    def tile_progress(k: int, n: int) -> None:
        report(0.12 + 0.33 * k / n, f"upscaling the background: tile {k} of {n}")

    bf16, why = choose_bf16(device, mode)
    up = run_tiles(rgb, net, tile, progress=tile_progress, bf16=bf16)
    s = up.scale
    h, w = rgb.shape[:2]
    big = cv2.resize(rgb, (w * s, h * s), interpolation=cv2.INTER_LINEAR)
    if alpha is not None:
        alpha = cv2.resize(alpha, (w * s, h * s), interpolation=cv2.INTER_LINEAR)
    if detections and s != det_scale:
        detections = [_scale_detection(d, s / det_scale) for d in detections]
    return big, alpha, detections, _Upscaled(up.image, s, up.grid, up.seconds, up.dtype, name, why), load_s


def _metadata(decoded: Any, image: np.ndarray, *, photo: bool) -> Any:
    """The upload's EXIF and DPI for a result ``image`` (gpen_core.images.metadata.for_output)."""
    from gpen_core.images.metadata import Metadata, for_output

    meta = Metadata(getattr(decoded, "exif", None), getattr(decoded, "dpi", None))
    return for_output(meta, decoded.upright_size, (image.shape[1], image.shape[0]), photo=photo)


def _find_faces(detector: Any, rgb: np.ndarray, mode: MemoryMode, opts: RestoreOptions) -> tuple[Any, int]:
    """(:class:`gpen_core.faces.find.FoundFaces`, the scale its boxes are at). With upscaling in a mode that
    follows the official rule, detection runs on the photo resized (bilinear) to the upscaled size, where the
    official code finds tiny faces; else on the photo itself, the boxes scaled later."""
    import cv2

    from gpen_core.faces.find import find_faces

    scale = opts.upscale if (opts.upscale > 1 and mode.paste and mode.detect_upscaled) else 1
    image = rgb if scale == 1 else cv2.resize(rgb, (rgb.shape[1] * scale, rgb.shape[0] * scale), interpolation=cv2.INTER_LINEAR)
    found = find_faces(
        detector, image, threshold=opts.threshold, max_side=mode.detect_side, shrink_above=mode.detect_shrink_above,
        interpolation=mode.detect_resize, face_check=opts.face_check, orientations=opts.orientations,
    )
    return found, scale


def _upscale_info(up: _Upscaled | None):
    from gpen_core.result import UpscaleInfo

    if up is None:
        return None
    return UpscaleInfo(up.scale, up.name, up.grid.tile, up.grid.pad, up.grid.count, up.seconds, up.dtype)


def _scale_detection(d: Any, s: float) -> Any:
    d = replace(d, box=tuple(v * s for v in d.box), landmarks=(d.landmarks * s).astype(d.landmarks.dtype))
    if getattr(d, "unclipped", None) is not None:  # the small-face smoothing reads it
        d = replace(d, unclipped=tuple(v * s for v in d.unclipped))
    return d
