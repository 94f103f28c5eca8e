"""A session of frames (a video): the photo path's detect and restore stages per frame, one mode and resident
networks for the session; nothing is encoded (the video room owns the container)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from gpen_core.engine import budget, stages
from gpen_core.engine.lifetime import Lifetime
from gpen_core.engine.model_cache import ModelCache
from gpen_core.engine.threads import TorchThreads
from gpen_core.errors import InputError
from gpen_core.options import RestoreOptions
from gpen_core.result import FrameOutput, NetworkRuntime, Timings
from gpen_core.rgb import check_rgb


class FrameSession:
    """Restores one frame after another, from one thread, inside :meth:`Restorer.frames`' block. ``notes``: what the
    session changed from the request; ``plan``: the mode's memory plan for one frame (None on a GPU)."""

    def __init__(self, ctx: stages.RequestContext, notes: list[str], numerics: ExitStack, threads: TorchThreads,
                 plan: budget.RequestPlan | None) -> None:
        self._ctx, self._opts = ctx, ctx.opts  # a silent context: the caller counts frames
        self._threads = threads  # follows the machine's load as the clip goes on
        self.mode = ctx.mode
        self.plan = plan
        loaded = stages.load_networks(ctx, numerics, boxes_given=False)
        assert loaded.generator is not None  # a resident policy never defers it
        self._generator = loaded.generator
        self._parsing_fn = loaded.parsing_fn
        self._detector = ctx.models.detector(ctx.opts.detector or ctx.mode.detector, ctx.device, ctx.opts, notes,
                                             mode=ctx.mode)
        self.notes: tuple[str, ...] = tuple(dict.fromkeys([*notes, *loaded.notes]))
        # The last frame's FoundFaces (before max faces, with what the face check refused): a clip counts them
        # to say once what the cap, the check and the finder did.
        self.finds: Any = None

    @property
    def runtimes(self) -> tuple[NetworkRuntime, ...]:
        """What runs each network of the session (generator, parser, detector) and why."""
        return tuple(self._ctx.models.runtimes.values())

    def detect(self, rgb: np.ndarray) -> list[Any]:
        """The faces of one frame (RGB uint8 H×W×3) as the photo path finds them, at most ``max_faces``,
        highest score first: detections (:class:`gpen_core.faces.detect.Detection`) in the frame's pixels."""
        rgb = check_rgb(rgb, "the frame")
        # The frame is upright (decoded by its display matrix): turned copies only when asked (--orientations).
        found, _ = stages.find_faces(self._detector, rgb, self.mode, self._opts, upright=True)
        self.finds = found
        return list(found.faces)[: self._opts.max_faces]

    def restore(self, rgb: np.ndarray, detections: list[Any], check_identity: bool = True) -> FrameOutput:
        """Restore the faces at ``detections`` (``rgb``'s pixels, landmarks as given) into a copy of ``rgb`` (RGB uint8
        H×W×3). Out-of-memory errors propagate: a video cannot step down mid-clip without changing its look."""
        rgb = check_rgb(rgb, "the frame")
        self._threads.refresh()
        t = time.perf_counter()
        canvas = stages.Canvas(rgb, None, list(detections), (), None, 0.0, ())
        generator = replace(self._generator)  # the restore stage takes its forward: this frame's own copy
        restored = stages.restore_and_paste(self._ctx, canvas, generator, self._parsing_fn, check_identity=check_identity)
        out = restored.photo
        timings = Timings(total_s=time.perf_counter() - t, **stages.face_seconds(out))
        notes = [*restored.notes, *out.notes, *dict.fromkeys(restored.overflows), *self._threads.notes]
        return FrameOutput(out.image, tuple(out.faces), tuple(dict.fromkeys(notes)), timings)


@contextmanager
def open_session(models: ModelCache, device: str, opts: RestoreOptions,
                 frame_size: tuple[int, int]) -> Iterator[FrameSession]:
    """A :class:`FrameSession` with every network resident until the block ends (a one-shot cache then lets them
    go). InputError for what a session does not do: it pastes faces back into whole frames at their size."""
    from gpen_core.platform.meter import current_rss

    opts.for_clip()
    w, h = frame_size
    if w < 1 or h < 1:
        raise InputError(f"the frame size must be positive, got {w}×{h}")
    start = budget.mode_to_start(opts, device, frame_size, models.models_dir,
                                 lambda m: models.weights_present(m, opts, False))
    mode, notes = start.mode, [start.reason] if start.reason else []
    if start.chosen:  # the frame size it chose for goes in, auto's choice said once
        notes = [f"auto chose {mode.name} for {w}×{h} frames{start.detail or ': ' + start.reason}"]
    policy, models.lifetime = models.lifetime, Lifetime.RESIDENT
    try:
        with TorchThreads(mode, device) as threads:
            models.runtimes.clear()
            # A network converted for OpenVINO as it loads must fit the mode's plan, as inside a photo's request.
            plan = budget.request_plan(mode, device, frame_size, models.models_dir, current_rss(),
                                       work=budget.Work.of(opts))
            with ExitStack() as numerics, models.planned(plan):
                ctx = stages.RequestContext(models, device, mode, opts)
                yield FrameSession(ctx, notes, numerics, threads, plan)
    finally:
        models.lifetime = policy
        if policy is Lifetime.ONE_SHOT:
            models.free(device)
