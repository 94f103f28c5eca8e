"""A session of frames (a video): the photo path's detect and restore-and-paste stages, per frame.

:meth:`gpen_core.restorer.Restorer.frames` opens one: the mode is resolved once, the networks stay
resident for the session whatever the cache's lifetime policy, and nothing is encoded (the video room
owns the container, the audio and the meter of the whole clip).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from gpen_core.engine import budget, stages
from gpen_core.engine.lifetime import Lifetime
from gpen_core.engine.model_cache import ModelCache
from gpen_core.engine.threads import TorchThreads
from gpen_core.errors import InputError
from gpen_core.modes import MemoryMode
from gpen_core.options import RestoreOptions
from gpen_core.result import FrameOutput, NetworkRuntime, RejectedFace, Timings
from gpen_core.rgb import check_rgb


class FrameSession:
    """Restores the faces of one frame after another with the networks kept loaded; use it only inside
    :meth:`~gpen_core.restorer.Restorer.frames`' ``with`` block, from one thread. ``mode``: every frame's;
    ``notes``: what the session changed from the request, said once. ``plan``: the mode's memory plan for one
    frame (:func:`gpen_core.engine.budget.request_plan`; None on a GPU)."""

    def __init__(self, ctx: stages.RequestContext, notes: list[str], numerics: ExitStack,
                 threads: TorchThreads | None = None, plan: budget.RequestPlan | None = None) -> None:
        models, device, opts, mode = ctx.models, ctx.device, ctx.opts, ctx.mode
        self._models, self._device, self._opts = models, device, opts
        self._threads = threads  # follows the machine's load as the clip goes on
        self.mode = mode
        self.plan = plan
        self._ctx = ctx  # silent: the caller counts frames
        loaded = stages.load_networks(self._ctx, numerics, boxes_given=False)
        generator = loaded.generator
        if generator is None:  # a resident policy never defers it; kept honest should that change
            generator, gen_notes = stages.load_generator(self._ctx, numerics)
            notes.extend(gen_notes)
        self._generator = generator
        self._parsing_fn = loaded.parsing_fn
        name = opts.detector or mode.detector
        self._detector = models.detector(name, device, opts, notes, mode=mode)
        self.detector = name
        self.notes: tuple[str, ...] = tuple(dict.fromkeys([*notes, *loaded.notes]))
        # The last frame's detections the face check refused (frame pixels): a clip says how many it left as they were.
        self.rejected: tuple[RejectedFace, ...] = ()

    @property
    def runtimes(self) -> tuple[NetworkRuntime, ...]:
        """What runs each network of the session (generator, parser, detector) and why."""
        return tuple(self._models.runtimes.values())

    @property
    def checkpoint(self) -> str:
        return self._generator.name

    def detect(self, rgb: np.ndarray) -> list[Any]:
        """The faces of one frame (RGB uint8 H×W×3) as the photo path finds them, at most ``max_faces``,
        highest score first: :class:`gpen_core.faces.detect.Detection`\ s in the frame's pixels."""
        rgb = check_rgb(rgb, "the frame")
        found, _ = stages.find_faces(self._detector, rgb, self.mode, self._opts)
        self.rejected = tuple(RejectedFace(tuple(float(v) for v in d.box), float(d.score), why)  # type: ignore[arg-type]
                              for d, why in found.rejected)
        return list(found.faces)[: self._opts.max_faces]

    def restore(self, rgb: np.ndarray, detections: list[Any], check_identity: bool = True) -> FrameOutput:
        """Restore the faces at ``detections`` (``rgb``'s pixels, landmarks as given, e.g. smoothed) and paste
        them into a copy of ``rgb`` (RGB uint8 H×W×3), identity checked as asked unless ``check_identity`` is
        False. Out-of-memory errors propagate: a video cannot step down mid-clip without changing its look."""
        rgb = check_rgb(rgb, "the frame")
        if self._threads is not None:
            self._threads.refresh()
        t = time.perf_counter()
        canvas = stages.Canvas(rgb, None, list(detections), (), None, 0.0, ())
        generator = stages.Generator(self._generator.forward, self._generator.size, self._generator.dtype,
                                     self._generator.name)
        restored = stages.restore_and_paste(self._ctx, canvas, generator, self._parsing_fn, check_identity=check_identity)
        out = restored.photo
        timings = Timings(total_s=time.perf_counter() - t, **stages.face_seconds(out))
        notes = [*restored.notes, *out.notes]
        notes.extend(dict.fromkeys(restored.overflows))
        if self._threads is not None:
            notes.extend(self._threads.notes)
        return FrameOutput(out.image, tuple(out.faces), tuple(dict.fromkeys(notes)), timings)


def frame_mode(models: ModelCache, opts: RestoreOptions, device: str, frame_size: tuple[int, int]) -> tuple[MemoryMode, list[str]]:
    """The mode for ``frame_size`` (width, height) frames, and a note when it is not the one asked."""
    start = budget.mode_to_start(opts, device, frame_size, models.models_dir, lambda m: models.weights_present(m, opts, False))
    if start.chosen:
        return start.mode, [f"auto chose {start.mode.name} for {frame_size[0]}×{frame_size[1]} frames: {start.reason}"]
    return start.mode, [start.reason] if start.reason else []


def check_frame_options(opts: RestoreOptions, frame_size: tuple[int, int]) -> None:
    """InputError for what a frame session does not do: it pastes faces back into whole frames at their size."""
    if opts.aligned or opts.upscale > 1 or opts.task != "enhance":
        raise InputError("video frames are restored as whole photos with the enhance task: turn off 'aligned', "
                         "use upscale 1 and the enhance task")
    w, h = frame_size
    if w < 1 or h < 1:
        raise InputError(f"the frame size must be positive, got {w}×{h}")


@contextmanager
def open_session(models: ModelCache, device: str, opts: RestoreOptions, frame_size: tuple[int, int]) -> Iterator[FrameSession]:
    """A :class:`FrameSession` with every network resident until the block ends; the cache's lifetime
    policy is restored afterwards (a one-shot cache then lets them go)."""
    from gpen_core.platform.meter import current_rss

    check_frame_options(opts, frame_size)
    mode, notes = frame_mode(models, opts, device, frame_size)
    if not mode.paste:
        raise InputError(f"{mode.name} mode returns face crops only; a video needs a mode that pastes faces back")
    policy, models.lifetime = models.lifetime, Lifetime.RESIDENT
    try:
        with TorchThreads(mode, device) as threads:
            models.runtimes.clear()
            # A network converted for OpenVINO as it loads must fit the mode's plan, as inside a photo's request.
            plan = budget.request_plan(mode, device, frame_size, models.models_dir, current_rss(),
                                       work=budget.Work(task=opts.task, identity=opts.identity))
            with ExitStack() as numerics, models.planned(plan):
                yield FrameSession(stages.RequestContext(models, device, mode, opts), notes, numerics, threads, plan)
    finally:
        models.lifetime = policy
        if policy is Lifetime.ONE_SHOT:
            models.free(device)
