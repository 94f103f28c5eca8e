"""The stages of one request, in order, each taking and returning typed values. No stage decides what stays
loaded: each tells the model cache when it has ended (:mod:`gpen_core.engine.lifetime`)."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpen_core.engine import tasks as task_steps
from gpen_core.engine.model_cache import Generator, ModelCache
from gpen_core.modes import MemoryMode, Task, get_task, official_departures
from gpen_core.options import RestoreOptions
from gpen_core.progress import Progress
from gpen_core.result import RejectedFace, UpscaleInfo


@dataclass(frozen=True)
class RequestContext:
    """What every stage of one attempt reads; a step-down to a lighter mode is a new context."""

    models: ModelCache  # the restorer's networks and their lifetime policy
    device: str  # "cpu", "cuda", "cuda:1"
    mode: MemoryMode
    opts: RestoreOptions  # validated
    report: Progress = lambda fraction, message: None  # a video's frames: the caller counts them

    @property
    def task(self) -> Task:
        return get_task(self.opts.task)


@dataclass(frozen=True)
class Prepared:
    """The photo as the stages see it: after the mode's pre-shrink and the task's own input step."""

    rgb: np.ndarray  # RGB uint8 H×W×3
    alpha: np.ndarray | None  # the photo's transparency, H×W uint8, at ``rgb``'s size
    damage: Any  # inpainting's faces.tasks.Damage, else None
    grey: np.ndarray | None  # colourisation's grey input, else None
    input_size: tuple[int, int]  # width, height before the pre-shrink (given boxes are in these pixels)
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Loaded:
    """What loads before detection: the generator (None: deferred) and the paste mask (None: GPEN's rectangle)."""

    generator: Generator | None
    parsing_fn: Any
    seconds: float
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Found:
    """Detection's outcome. ``detections``: None for an aligned input (nothing to find)."""

    detections: list[Any] | None  # faces.detect.Detection, in ``scale`` × the prepared photo's pixels
    rejected: tuple[RejectedFace, ...]
    detector: str  # what found them: a network name, "given boxes", or "none"
    scale: int  # the detections' scale over the prepared photo (detection on the upscaled size)
    seconds: float
    load_s: float
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Canvas:
    """What the faces are aligned on (``rgb``) and pasted onto (``background`` when upscaled)."""

    rgb: np.ndarray
    alpha: np.ndarray | None
    detections: list[Any] | None  # at ``rgb``'s pixels
    rejected: tuple[RejectedFace, ...]  # at ``rgb``'s pixels
    background: np.ndarray | None  # the photo upscaled in tiles (GPEN's --use_sr), RGB uint8; None: not upscaled
    load_s: float
    notes: tuple[str, ...]
    grey: np.ndarray | None = None  # colourisation's grey input (Prepared.grey), else None
    damage: Any = None  # inpainting's faces.tasks.Damage (Prepared.damage), else None
    upscale: UpscaleInfo | None = None  # how ``background`` was made


@dataclass(frozen=True)
class Restored:
    """The faces restored and pasted back (faces.photo.PhotoOutput), with what the stage saw."""

    photo: Any  # faces.photo.PhotoOutput
    overflows: tuple[str, ...]  # a generator output that overflowed, once per face
    parsed: bool | None  # whether the parsing mask ran (None: no face needed a mask)
    notes: tuple[str, ...] = ()  # what a parser loaded during the stage said


@dataclass(frozen=True)
class Encoded:
    data: bytes
    format: str  # "png" / "jpeg"
    seconds: float
    notes: tuple[str, ...]


def prepare_input(decoded: Any, mode: MemoryMode, task: Task, mask: np.ndarray | None, opts: RestoreOptions) -> Prepared:
    """The mode's pre-shrink (photo and alpha), then the task's input step (grey, damage)."""
    from gpen_core.images.decode import shrink_to_max_side

    rgb, alpha = decoded.rgb, decoded.alpha
    notes: list[str] = []
    in_h, in_w = rgb.shape[:2]
    if mode.max_side and not opts.aligned and max(in_h, in_w) > mode.max_side:
        rgb, _ = shrink_to_max_side(rgb, mode.max_side)
        if alpha is not None:
            alpha, _ = shrink_to_max_side(alpha[..., None].repeat(3, 2), mode.max_side)
            alpha = alpha[..., 0]
        notes.append(f"{mode.name} mode shrank the photo from {in_w}×{in_h} to {rgb.shape[1]}×{rgb.shape[0]} before restoring")
    rgb, damage, grey = task_steps.task_input(task, rgb, mask, opts.aligned, notes)
    return Prepared(rgb, alpha, damage, grey, (in_w, in_h), tuple(notes))


def load_generator(ctx: RequestContext, numerics: ExitStack) -> tuple[Generator, tuple[str, ...]]:
    """The mode's generator and its notes; float32 is exact float32 on CUDA too (TF32 off in ``numerics``)."""
    import torch

    from gpen_core.networks.plan import cuda_numerics

    device, report = ctx.device, ctx.report
    report(0.02, "loading model")
    generator = ctx.models.generator(ctx.mode, ctx.opts, device, progress=lambda f, m: report(0.02, m))
    notes = [generator.note] if generator.note else []
    exact = generator.dtype == torch.float32
    numerics.enter_context(cuda_numerics(device, exact_float32=exact, fixed_input=False))
    if exact and device.startswith("cuda"):
        notes.append("float32 here is exact IEEE float32: TF32 was off for this request")
    return generator, tuple(notes)


def load_networks(ctx: RequestContext, numerics: ExitStack, boxes_given: bool) -> Loaded:
    """Load what the request needs before detection (the lifetime policy may defer the generator and the parser)."""
    models, mode, opts, device = ctx.models, ctx.mode, ctx.opts, ctx.device
    t = time.perf_counter()
    models.require(mode, opts, boxes_given)
    notes: list[str] = []
    generator = None
    if opts.aligned or not models.lifetime.generator_after_detection(models.generator_decision(mode, opts, device).runtime):
        generator, gen_notes = load_generator(ctx, numerics)
        notes.extend(gen_notes)
    parsing_fn = models.parsing_fn(mode, device, notes, opts) if mode.paste and not opts.aligned else None
    return Loaded(generator, parsing_fn, time.perf_counter() - t, tuple(notes))


def detect(ctx: RequestContext, photo: Prepared, given: list[Any] | None) -> Found:
    """Find the faces (or take the given boxes, following the pre-shrink), at most ``max_faces``; the stage ends."""
    from gpen_core.platform.oom import malloc_trim

    models, device, mode, opts = ctx.models, ctx.device, ctx.mode, ctx.opts
    if opts.aligned:
        found = Found(None, (), "none", 1, 0.0, 0.0, ())
    elif given is not None:
        found = _given_boxes(ctx, photo, given)
    else:
        notes: list[str] = []
        name = opts.detector or mode.detector
        t = time.perf_counter()
        detector = models.detector(name, device, opts, notes, mode=mode)
        load_s = time.perf_counter() - t
        ctx.report(0.1, "detecting faces")
        t = time.perf_counter()
        faces, scale = find_faces(detector, photo.rgb, mode, opts)
        del detector
        detections = list(faces.faces)
        notes.extend(faces.notes)
        if len(detections) > opts.max_faces:
            notes.append(capped_note(opts.max_faces, len(detections)))
            detections = detections[: opts.max_faces]
        rejected = tuple(RejectedFace(d.box, d.score, why) for d, why in faces.rejected)
        found = Found(detections, rejected, name, scale, time.perf_counter() - t, load_s, tuple(notes))
    models.stage_ended("detect", device)
    # glibc keeps what the detector freed (~170 MiB on a 4000×3000 photo with ResNet-50) unless asked.
    malloc_trim()
    return found


def capped_note(max_faces: int, found: int, frames: int = 0) -> str:
    """What max faces left out of a photo's ``found`` faces (highest scores kept), or with ``frames`` > 0 a clip's."""
    kept = f"the {max_faces} with the highest detection scores"
    if not frames:
        return f"found {found} faces; restored {kept} (max faces = {max_faces})"
    return (f"found more than {max_faces} face{'s' if max_faces != 1 else ''} in {frames} frame{'s' if frames != 1 else ''} "
            f"(up to {found} in one); restored {kept} in each (max faces = {max_faces})")


def _given_boxes(ctx: RequestContext, photo: Prepared, given: list[Any]) -> Found:
    """The caller's boxes, largest first, moved to the prepared photo's pixels."""
    models, device, mode, opts = ctx.models, ctx.device, ctx.mode, ctx.opts
    name, load_s, detect_s = "given boxes", 0.0, 0.0
    notes: list[str] = []
    if models.synthetic_weights:
        # The hardware check: the detector runs for its cost; a synthetic one finds no faces, the boxes stand in.
        net = opts.detector or mode.detector
        t = time.perf_counter()
        detector = models.detector(net, device, opts, notes, mode=mode)
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        detector.detect(photo.rgb, threshold=opts.threshold, max_side=mode.detect_side)
        detect_s = time.perf_counter() - t
        name = f"{net} ({'synthetic weights, ' if detector.weights_path is None else ''}boxes given)"
    detections = sorted(given, key=lambda d: -(d.box[2] - d.box[0]) * (d.box[3] - d.box[1]))
    in_w, in_h = photo.input_size
    if photo.rgb.shape[:2] != (in_h, in_w):  # boxes are in input pixels; follow the pre-shrink
        detections = [scale_detection(d, photo.rgb.shape[1] / in_w) for d in detections]
    if len(detections) > opts.max_faces:
        notes.append(f"{len(detections)} boxes given; restored the {opts.max_faces} largest (max faces = {opts.max_faces})")
        detections = detections[: opts.max_faces]
    return Found(detections, (), name, 1, detect_s, load_s, tuple(notes))


def find_faces(detector: Any, rgb: np.ndarray, mode: MemoryMode, opts: RestoreOptions,
               upright: bool = False) -> tuple[Any, int]:
    """(:class:`gpen_core.faces.find.FoundFaces`, the scale its boxes are at). With upscaling in a mode that follows
    the official rule, detection runs on the photo resized to the upscaled size (where tiny faces are found).
    ``upright``: a clip's frame, searched turned only under ``opts.orientations``."""
    import cv2

    from gpen_core.faces.find import DetectSizing, find_faces as find

    scale = opts.upscale if (opts.upscale > 1 and mode.paste and mode.detect_upscaled) else 1
    image = rgb if scale == 1 else cv2.resize(rgb, (rgb.shape[1] * scale, rgb.shape[0] * scale), interpolation=cv2.INTER_LINEAR)
    found = find(
        detector, image, threshold=opts.threshold,
        sizing=DetectSizing(mode.detect_side, mode.detect_shrink_above, mode.detect_resize),
        face_check=opts.face_check, orientations=opts.orientations, upright=upright,
    )
    return found, scale


def upscale(ctx: RequestContext, photo: Prepared, found: Found) -> Canvas:
    """GPEN's --use_sr flow when asked: the photo upscaled in tiles, the original resized bilinearly to that size
    for alignment, as official, and the detections moved to it; else the prepared photo."""
    models, device, mode, opts, report = ctx.models, ctx.device, ctx.mode, ctx.opts, ctx.report
    base = Canvas(photo.rgb, photo.alpha, found.detections, found.rejected, None, 0.0, (), photo.grey, photo.damage)
    if opts.upscale > 1 and not mode.paste:
        note = f"{mode.name} mode returns the restored faces only: the background was not upscaled (×{opts.upscale} asked)"
        return replace(base, notes=(note,))
    if opts.upscale <= 1:
        models.upscaler(opts, device)  # no upscaling asked: drop a resident upscaler (loads nothing)
        return base
    import cv2

    from gpen_core.upscale.tiles import MODE_TILE_BUDGET, choose_bf16, run_tiles, tile_for_budget

    t = time.perf_counter()
    net, name = models.upscaler(opts, device)  # upscale > 1 here: never None
    load_s = time.perf_counter() - t
    cfg = net.config
    budget_bytes = MODE_TILE_BUDGET.get(mode.name, min(MODE_TILE_BUDGET.values()))
    tile = opts.tile or tile_for_budget(budget_bytes, cfg.scale, num_feat=cfg.num_feat, num_grow_ch=cfg.num_grow_ch)

    def tile_progress(k: int, n: int) -> None:
        report(0.12 + 0.33 * k / n, f"upscaling the background: tile {k} of {n}")

    bf16, why = choose_bf16(device, mode)
    up = run_tiles(photo.rgb, net, tile, progress=tile_progress, bf16=bf16)
    del net
    s = up.scale
    h, w = photo.rgb.shape[:2]
    big = cv2.resize(photo.rgb, (w * s, h * s), interpolation=cv2.INTER_LINEAR)
    alpha = cv2.resize(photo.alpha, (w * s, h * s), interpolation=cv2.INTER_LINEAR) if photo.alpha is not None else None
    detections = found.detections
    if detections and s != found.scale:
        detections = [scale_detection(d, s / found.scale) for d in detections]
    rejected = tuple(replace(r, box=tuple(v * s / found.scale for v in r.box)) for r in found.rejected)
    info = UpscaleInfo(s, name, up.grid.tile, up.grid.pad, up.grid.count, up.seconds, up.dtype)
    note = (f"background upscaled ×{s} by {name}: {w}×{h} → {w * s}×{h * s}, {up.grid.count} "
            f"tile{'s' if up.grid.count > 1 else ''} of {up.grid.tile} px with {up.grid.pad} px context, in {why}; "
            "faces restored and pasted at that size")
    models.stage_ended("upscale", device)  # the background is upscaled: the faces need no upscaler
    return Canvas(big, alpha, detections, rejected, up.image, load_s, (note,), photo.grey, photo.damage, info)


def restore_and_paste(ctx: RequestContext, canvas: Canvas, generator: Generator, parsing_fn: Any,
                      check_identity: bool = True) -> Restored:
    """Align, restore and paste back each detection, identity checked unless ``check_identity`` is False. The
    restore stage ends after the last face (one beyond the count loads the generator again), then the paste stage."""
    import torch

    from gpen_core.faces import photo as faces_photo
    from gpen_core.faces.identity import policy_for
    from gpen_core.faces.tasks import keep_luminance
    from gpen_core.networks.plan import cuda_numerics
    from gpen_core.networks.prepared import forward_checked
    from gpen_core.networks.tensors import to_image, to_tensor
    from gpen_core.platform.oom import malloc_trim

    models, device, mode, opts, report = ctx.models, ctx.device, ctx.mode, ctx.opts, ctx.report
    detections, norm = canvas.detections, ctx.task.is_norm
    forward, exact = generator.take(), generator.dtype_name == "float32"
    left = len(detections) if detections is not None else 1
    overflows: list[str] = []

    def restore(crop: np.ndarray) -> np.ndarray:
        nonlocal forward, left
        if forward is None:  # more faces than counted (a caller restoring one twice): load it again
            forward = models.generator(mode, opts, device).forward
        # The generator's input size never changes: cuDNN autotuning pays off (CUDA only).
        with torch.inference_mode(), cuda_numerics(device, exact_float32=exact, fixed_input=True):
            y, problem = forward_checked(forward, to_tensor(crop, device=device, dtype=generator.dtype, norm=norm))
        if problem:
            overflows.append(problem)
        out = to_image(y, norm=norm)
        if canvas.grey is not None and not opts.aligned:  # each coloured face keeps its own detail
            out = keep_luminance(crop, out)
        del y
        left -= 1
        if left == 0:  # the last face: masks and paste-back need no generator
            models.stage_ended("restore", device)
            if models.loaded()["generator"] is None:
                forward = None
        malloc_trim()  # the generator's freed activations back to the OS before the parser allocates (quality: -160 MiB peak)
        return out

    face_start = 0.45 if canvas.background is not None else 0.15  # after the upscaling's share of the progress

    def face_progress(k: int, n: int) -> None:  # k faces done: name the next one, or that all are
        done = "the face restored" if n == 1 else f"all {n} faces restored"
        report(face_start + (0.9 - face_start) * (k / max(n, 1)), f"restoring face {k + 1} of {n}" if k < n else done)

    job = faces_photo.FaceJob(
        alpha=opts.alpha, paste=mode.paste, parsing_fn=parsing_fn, aligned=opts.aligned,
        background=canvas.background, aligned_at_input_size=ctx.task.aligned_output_at_input_size,
        damage=canvas.damage, identity=policy_for(mode.name, opts) if check_identity else None,
    )
    if detections or opts.aligned:
        face_progress(0, len(detections) if detections else 1)
    out = faces_photo.restore_photo(canvas.rgb, detections=detections, restore_fn=restore, size=generator.size, job=job,
                                    progress=face_progress)
    models.stage_ended("paste", device)
    parsed = getattr(parsing_fn, "parsed", parsing_fn is not None)
    return Restored(out, tuple(overflows), parsed, tuple(getattr(parsing_fn, "notes", ())))


def face_seconds(photo: Any) -> dict[str, float]:
    """The face loop's seconds (faces.photo.PhotoOutput.timings) as :class:`~gpen_core.result.Timings` fields."""
    return {k: photo.timings.get(k, 0.0) for k in ("align_s", "restore_s", "paste_s", "identity_s")}


def finish_notes(restored: Restored, found: Found, generator: Generator, mode: MemoryMode, opts: RestoreOptions,
                 given: bool) -> list[str]:
    """The restore stage's notes: the photo's, the departures from the official code, each overflow counted."""
    notes = [*restored.notes, *restored.photo.notes]
    detected = not given and not opts.aligned
    departures = official_departures(mode, detector=found.detector if detected else None, detection=detected,
                                     dtype=generator.dtype_name, upscale=opts.upscale, parsing=restored.parsed,
                                     pasted=not opts.aligned)
    if departures:
        notes.append(departures)
    notes.extend(f"{problem} ({n} face{'s' if n > 1 else ''})" for problem, n in Counter(restored.overflows).items())
    return notes


def encode(decoded: Any, photo: Any, alpha: np.ndarray | None, mode: MemoryMode, opts: RestoreOptions) -> Encoded:
    """The photo in the output format (alpha, ICC, EXIF and DPI kept where it holds them), or the faces' sheet."""
    from gpen_core.faces.paste import face_sheet
    from gpen_core.images.decode import encode_image

    t = time.perf_counter()
    notes: list[str] = []
    fmt = opts.output_format or mode.output_format
    if mode.paste or opts.aligned:
        out_alpha = alpha if (alpha is not None and photo.image.shape[:2] == alpha.shape) else None
        if out_alpha is not None and fmt == "jpeg":
            notes.append("the output is JPEG, which has no transparency: the alpha channel is left out (ask for PNG to keep it)")
            out_alpha = None
        meta = _metadata(decoded, photo.image, photo=True)  # EXIF (upright) and DPI, print size kept
        data = encode_image(photo.image, fmt, alpha=out_alpha, icc_profile=getattr(decoded, "icc_profile", None),
                            exif=meta.exif, dpi=meta.dpi)
    else:
        sheet = face_sheet(photo.faces) if photo.faces else photo.image
        data = encode_image(sheet, fmt, exif=_metadata(decoded, sheet, photo=not photo.faces).exif)
    return Encoded(data, fmt, time.perf_counter() - t, tuple(notes))


def _metadata(decoded: Any, image: np.ndarray, *, photo: bool) -> Any:
    """The upload's EXIF and DPI for a result ``image`` (gpen_core.images.metadata.for_output)."""
    from gpen_core.images.metadata import for_output

    return for_output(decoded.meta, decoded.upright_size, (image.shape[1], image.shape[0]), photo=photo)


def scale_detection(d: Any, s: float) -> Any:
    """A detection with its box, landmarks (and unclipped box) scaled by ``s``."""
    d = replace(d, box=tuple(v * s for v in d.box), landmarks=(d.landmarks * s).astype(d.landmarks.dtype))
    if getattr(d, "unclipped", None) is not None:  # the small-face smoothing reads it
        d = replace(d, unclipped=tuple(v * s for v in d.unclipped))
    return d
