"""One attempt of a request: :func:`start` decodes the input and picks the mode, :func:`run_attempt` runs the
stages once in it. Stepping down, the lock and the meter are the facade's (:mod:`gpen_core.restorer`)."""

from __future__ import annotations

import gc
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpen_core.engine import budget, stages
from gpen_core.engine.threads import TorchThreads
from gpen_core.engine import tasks as task_steps
from gpen_core.errors import InputError, ResourceError
from gpen_core.engine.model_cache import ModelCache
from gpen_core.modes import AUTO, MODES, MemoryMode, get_mode, lighter_than, preshrink_size
from gpen_core.options import ImageSource, RestoreOptions
from gpen_core.progress import Progress
from gpen_core.platform.heap import map_blocks_from
from gpen_core.platform.meter import current_rss
from gpen_core.platform.oom import is_oom, out_of_memory_advice, release, reserve_blas_buffers
from gpen_core.result import Peaks, RestoreResult, Timings
from gpen_core.rgb import check_rgb

# What a lighter mode still pays for a heavier one before it, which releasing its networks cannot
# return (measured: docs/performance.md, "A lighter mode after a heavier one, in one process").
LEFT_BEHIND = {
    "torch": "what that request left still counts in this peak: library code it paged in and one-time state "
             "(measured: low after balanced peaks up to about 70 MB above a process that ran only low)",
    "openvino": "what that request left still counts in this peak: OpenVINO's libraries and kernel cache, which "
                "stay once loaded, library code it paged in and one-time state (measured: low after balanced on "
                "OpenVINO peaks about 120 MB above a process that ran only low)",
    # A Restorer of one's own keeps glibc's usual heap (see ready_for): the heavier request's holes count too.
    "heap": "what that request left still counts in this peak: the C heap its buffers spread, library code it "
            "paged in and one-time state (measured: low after balanced peaks up to about 150 MB above a process "
            "that ran only low; the app's shared Restorer keeps heavy buffers off the heap and avoids most of it)",
}


@dataclass(frozen=True)
class Request:
    """A decoded request and the mode it runs in; stepping down makes a new value (:func:`step_down`)."""

    decoded: Any  # imageio.DecodedImage
    decode_s: float
    mode: MemoryMode
    reason: str
    notes: tuple[str, ...] = ()
    mask: np.ndarray | None = None  # inpainting's damage mask, RGB uint8 of the photo's size (white = damaged)
    released: tuple[str, ...] = ()  # as RestoreResult.released
    # The caller's face boxes (detect.Detection, input pixels) in place of the detector, else None.
    given: list[Any] | None = None
    t0: float = 0.0  # time.perf_counter() as the call began (the result's total_s counts from it)
    # The process's resident set as the request began (the meter's baseline; None: when the attempt starts).
    start_rss: int | None = None

    def with_released(self, names: tuple[str, ...], left: str = "torch") -> "Request":
        """This request, saying which resident networks were released before it, and what the
        request that loaded them still leaves in the process (``left``: a key of :data:`LEFT_BEHIND`)."""
        if not names:
            return self
        note = (f"released {', '.join(names)} (kept from an earlier request) before this one: "
                f"{self.mode.name} does not use {'them' if len(names) > 1 else 'it'}; {LEFT_BEHIND[left]}")
        return replace(self, released=names, notes=(*self.notes, note))


def import_engine() -> None:
    """Import the heavy modules (torch, OpenCV, facexlib) so the meter's baseline includes them."""
    from gpen_core.faces import detect, paste, photo  # noqa: F401
    from gpen_core.images import decode  # noqa: F401
    from gpen_core.networks import prepared  # noqa: F401
    from gpen_core.platform.headroom import guard_layers

    detect.import_backends()
    reserve_blas_buffers()  # before the request's allocations: OpenBLAS exits the process when it cannot map them later
    guard_layers()  # under an address-space cap no PyTorch layer starts at its edge, where oneDNN can crash


def ready_server(restores_here: bool) -> int:
    """At a long-lived server's start: import the engine where this process restores (not on ZeroGPU nor under
    a memory cap), then freeze every object alive now out of the collections each model load runs (measured:
    docs/performance.md, "Garbage collection in the app"). Returns how many were frozen."""
    from gpen_core.platform import zerogpu
    from gpen_core.platform.oom import memory_limited  # per call: tests stand in for the cap

    if restores_here and not zerogpu.on_zerogpu() and not memory_limited():
        import_engine()
    gc.collect()  # the imports' garbage is freed, not frozen
    gc.freeze()
    return gc.get_freeze_count()


def ready_for(models: ModelCache, mode: MemoryMode, opts: RestoreOptions, device: str,
              mode_heaps: bool) -> tuple[str, ...]:
    """Ready the process for ``mode``: its heap policy where the process serves many modes (``mode_heaps``), then
    the resident networks it does not use released (returned, by name)."""
    from gpen_core.faces import identity, identity_model

    if mode_heaps:
        map_blocks_from(mode.heap_blocks)
    if not identity.runs(mode.name, opts):
        identity_model.release()  # the identity check's models (~45 MB), outside the model cache
    return models.release_unused(mode, opts, device)


def decode(image: ImageSource, reduce_to: int | None = None, max_pixels: int | None = None):
    """An RGB uint8 array as it is, or encoded bytes / a path decoded (see :mod:`gpen_core.images.decode`) within
    ``max_pixels`` (RestoreOptions')."""
    from gpen_core.images.decode import DecodedImage, decode_image
    from gpen_core.images.limits import input_limits

    if isinstance(image, np.ndarray):
        rgb = check_rgb(image, "the image array")
        return DecodedImage(rgb=rgb, alpha=None, format="array", original_size=(rgb.shape[1], rgb.shape[0]), notes=())
    return decode_image(image, input_limits(max_pixels), reduce_to=reduce_to)


def start(image: ImageSource, opts: RestoreOptions, models: ModelCache, device: str, boxes_given: bool, t0: float,
          mask: ImageSource | None = None) -> Request:
    """Decode ``image`` (and inpainting's ``mask``) and choose the mode to start in."""
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
    else:
        start = budget.mode_to_start(opts, device, size, models.models_dir,
                                     lambda m: models.weights_present(m, opts, boxes_given))
        mode, reason = start.mode, start.reason
        if reason and not start.chosen:  # a lighter mode than asked: a note; auto's reason is the request's own
            notes.append(reason)
    shrunk_for = forced[0] if forced is not None else get_mode(opts.mode) if reduce_to else None
    if shrunk_for is not None:  # a shrink at decode says whose limit it is, as the mode's own shrink does
        notes = [f"{n}: {shrunk_for.name} mode restores photos of at most {shrunk_for.max_side} px"
                 if n in decoded.shrinks else n for n in notes]
    if opts.upscale > 1 and mode.paste:  # refuse an oversized result before any work (after the mode's pre-shrink)
        from gpen_core.upscale.tiles import check_output_size

        check_output_size(*preshrink_size(*size, mode.max_side), opts.upscale)
    mask_rgb = None
    if mask is not None:
        if opts.task != "inpaint":
            raise InputError(f"a damage mask is for the inpaint task, not {opts.task}")
        mask_rgb = mask if isinstance(mask, np.ndarray) else decode(mask, None, opts.max_pixels).rgb
        if mask_rgb.dtype != np.uint8 or mask_rgb.ndim not in (2, 3):  # an array's: grey H×W or RGB H×W×3, uint8
            raise InputError(f"the damage mask must be a uint8 H×W or H×W×3 array, got {mask_rgb.dtype} with shape {mask_rgb.shape}")
        if mask_rgb.shape[:2] != rgb.shape[:2]:
            raise InputError(
                f"the damage mask is {mask_rgb.shape[1]}×{mask_rgb.shape[0]} but the photo is {rgb.shape[1]}×{rgb.shape[0]}: "
                "draw or save the mask at the photo's size"
            )
    return Request(decoded, decode_s, mode, reason, tuple(notes), mask_rgb, t0=t0)


def _decode_or_step_down(image: ImageSource, reduce_to: int | None, opts: RestoreOptions,
                         device: str) -> tuple[Any, tuple[MemoryMode, str] | None]:
    """Decode; when that runs out of memory, decode again for the lightest mode (a big JPEG
    then decodes at reduced size) and return that mode with the note saying so."""
    try:
        return decode(image, reduce_to, opts.max_pixels), None
    except Exception as exc:
        lightest = min((m for m in MODES.values() if m.paste), key=lambda m: m.rank)
        smaller = lightest.max_side and (reduce_to is None or lightest.max_side < reduce_to)
        if opts.aligned or isinstance(image, np.ndarray) or not smaller or not is_oom(exc):
            raise
        del exc  # its traceback holds the partial decode
    release(device)
    decoded = decode(image, lightest.max_side, opts.max_pixels)
    note = f"ran out of memory decoding the photo for {opts.mode}; decoded it for {lightest.name} instead"
    return decoded, (lightest, note)


def run_attempt(models: ModelCache, device: str, req: Request, opts: RestoreOptions, report: Progress) -> RestoreResult:
    """Run ``req``'s stages once in ``req.mode``; out-of-memory errors propagate. The mode's memory plan counts
    from ``req.start_rss`` (default: now)."""
    mode, given, rgb = req.mode, req.given, req.decoded.rgb
    ctx = stages.RequestContext(models, device, mode, opts, report)
    photo = stages.prepare_input(req.decoded, mode, ctx.task, req.mask, opts)
    plan = budget.request_plan(mode, device, (rgb.shape[1], rgb.shape[0]), models.models_dir,
                               current_rss() if req.start_rss is None else req.start_rss, work=budget.Work.of(opts))
    # The thread count and the CUDA numerics (entered on the stack as the generator loads), undone after.
    with TorchThreads(mode, device) as threads, ExitStack() as numerics, models.planned(plan):
        loaded = stages.load_networks(ctx, numerics, given is not None)
        found = stages.detect(ctx, photo, given)
        generator, gen_notes, gen_load_s = loaded.generator, (), 0.0
        if generator is None:  # the lifetime policy deferred it until detection was over
            t = time.perf_counter()
            generator, gen_notes = stages.load_generator(ctx, numerics)
            gen_load_s = time.perf_counter() - t
        canvas = stages.upscale(ctx, photo, found)
        restored = stages.restore_and_paste(ctx, canvas, generator, loaded.parsing_fn)
        out = restored.photo
        # The composed photo holds the result now: let the upscaled background buffer go before encoding.
        up_info, canvas = canvas.upscale, replace(canvas, background=None)
        colour_notes: list[str] = []
        if photo.grey is not None:
            out = task_steps.colorized(out, photo.grey, mode.paste or opts.aligned, opts.aligned, colour_notes)
        done_notes = stages.finish_notes(replace(restored, photo=out), found, generator, mode, opts, given is not None)
        del restored
    report(0.92, "encoding result")
    encoded = stages.encode(req.decoded, out, canvas.alpha, mode, opts)
    notes = [*req.notes, *photo.notes, *loaded.notes, *found.notes, *gen_notes, *canvas.notes, *colour_notes,
             *done_notes, *encoded.notes, *threads.notes]
    timings = Timings(
        total_s=time.perf_counter() - req.t0, decode_s=req.decode_s, detect_s=found.seconds, encode_s=encoded.seconds,
        load_s=loaded.seconds + found.load_s + gen_load_s + canvas.load_s,
        upscale_s=up_info.seconds if up_info is not None else 0.0, **stages.face_seconds(out),
    )
    report(1.0, "done")
    factor, before = up_info.factor if up_info else 1, canvas.rgb
    return RestoreResult(
        image=out.image, faces=tuple(out.faces), timings=timings,
        peaks=Peaks(0, 0, "vmhwm"),  # replaced by the meter's figures in __call__
        mode=mode, requested_mode=opts.mode, mode_reason=req.reason, checkpoint=generator.name,
        detector=found.detector, device=device, dtype=generator.dtype_name, backend=generator.runtime,
        backend_reason=generator.reason, output_format=encoded.format, encoded=encoded.data,
        notes=tuple(dict.fromkeys(notes)), input_size=req.decoded.upright_size,
        processed_size=(before.shape[1] // factor, before.shape[0] // factor), before=before, upscale=up_info,
        rejected=canvas.rejected, task=ctx.task.name, runtimes=tuple(models.runtimes.values()), released=req.released,
    )


def attempt_or_none(models: ModelCache, device: str, req: Request, opts: RestoreOptions, report: Progress) -> RestoreResult | None:
    """:func:`run_attempt`'s result, or None when it ran out of memory. Under an address-space cap on the CPU, a
    mode estimated not to fit is not started when a lighter one exists: at the cap's edge oneDNN can kill the
    process (docs/files-and-limits.md, "Out of memory under a memory cap")."""
    from gpen_core.platform.oom import address_space_left  # per call: tests stand in for the cap

    left = address_space_left()
    if left is not None and device.startswith("cpu") and lighter_than(req.mode, opts.task) is not None:
        size = (req.decoded.rgb.shape[1], req.decoded.rgb.shape[0])
        if budget.estimate_peak(req.mode, device, size, models.models_dir, work=budget.Work.of(opts))[0] > left:
            return None  # stepped down as out of memory, before any network ran at the cap's edge
    try:
        return run_attempt(models, device, req, opts, report)
    except Exception as exc:
        if not is_oom(exc):
            raise
        del exc  # drop the traceback's frames: they hold the big tensors
    return None


def step_down(req: Request, tried: list[str], task: str = "enhance") -> Request:
    """``req`` in the next lighter mode for ``task``, saying why; ResourceError when ``tried`` ended at the lightest."""
    lighter = lighter_than(req.mode, task)
    if lighter is None:
        raise ResourceError(
            f"out of memory in {' and then '.join(tried)} mode, and there is no lighter mode. {out_of_memory_advice()}"
        )
    reason = f"ran out of memory in {req.mode.name}; freed it and retried in {lighter.name}"
    return replace(req, mode=lighter, reason=reason, notes=(*req.notes, reason))
