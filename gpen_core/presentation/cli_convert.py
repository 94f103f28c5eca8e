"""The OpenVINO conversion a long ``restore`` run does first (one face a photo or frame: a floor), and the header
figures it reads (a clip's frames, a photo's size), which the app's tabs read too."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpen_core.engine.convert_first import ConvertFirst, Run, convert_before
from gpen_core.errors import GPENError


def clip_frames(path: Path, start_s: float | None = None, end_s: float | None = None) -> tuple[int, tuple[int, int]]:
    """(frames from ``start_s`` to ``end_s`` by the header or the packets, an estimate (0: unknown); frame size);
    (0, (0, 0)) when it cannot be opened (the restore says why)."""
    from gpen_core.video.probe import expected_frames, open_video  # here: the CLI's --help imports no numpy

    try:
        container, info = open_video(path, count=True)
    except GPENError:
        return 0, (0, 0)
    container.close()
    return expected_frames(info, start_s, end_s), info.size


def photo_size(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """A photo's (width, height) upright, from its header; None when unreadable (the restore says why)."""
    header = photo_header(path)
    return header[1] if header else None


def photo_header(path: str | os.PathLike[str]) -> tuple[str, tuple[int, int]] | None:
    """(format as our decoder names it, (width, height) upright) from one read of the header; None when unreadable."""
    from PIL import Image

    from gpen_core.images.decode import OUR_NAME, probe_image
    from gpen_core.images.metadata import read, upright

    try:
        with Image.open(path) as im:
            return OUR_NAME.get(str(im.format), str(im.format)), upright(im.size, read(im).orientation)
    except Exception:  # noqa: BLE001 - not Pillow's: a float RGB TIFF is read by our decoder's own header reader
        pass
    try:
        return probe_image(path)
    except Exception:  # noqa: BLE001 - unreadable: its restore says why
        return None


def convert_before_run(args: Any, faces: int, size: tuple[int, int], say: Callable[[str], None]) -> ConvertFirst:
    """The conversion a run of ``faces`` expected faces does first, for the CLI's ``args`` (nothing for another
    generator or task)."""
    if args.model or args.task != "enhance":
        return ConvertFirst("nothing to convert")
    from gpen_core.restorer import default_device

    device = args.device or default_device()
    return convert_before(Run(args.mode, faces, size, device, args.backend), models_dir=args.models_dir, say=say)


def convert_before_clips(args: Any, videos: Sequence[Path], say: Callable[[str], None]) -> ConvertFirst:
    """:func:`convert_before_run` for the clips of a run: one face a frame over the parts restored."""
    counted = [clip_frames(v, args.start, args.end) for v in videos]
    return convert_before_run(args, sum(n for n, _ in counted), counted[0][1] if counted else (0, 0), say)


def convert_before_photos(args: Any, photos: Sequence[Path], say: Callable[[str], None]) -> ConvertFirst:
    """:func:`convert_before_run` for a folder's photos; nothing for a single photo (it cannot repay a conversion)."""
    if len(photos) < 2:
        return ConvertFirst("nothing to convert")
    return convert_before_run(args, len(photos), photo_size(photos[0]) or (0, 0), say)


def with_run_notes(result: Any, first: ConvertFirst) -> Any:
    """A clip's result (a VideoResult) with what the run did before its first frame first among its notes."""
    return replace(result, notes=(*first.notes, *result.notes)) if first.notes else result
