"""The Upscale line before Restore: the result size and the extra memory, from the same figure auto uses.

In ``auto`` the tile budget (and so the extra memory) depends on the mode auto picks; the
line resolves ``auto`` with :func:`gpen_core.engine.budget.choose` on the same inputs a
restore would (free memory now, which modes have their files), then reads
:func:`gpen_core.engine.budget.upscale_extra_bytes` for that mode: the figure in auto's
reason ("~N of it estimated for upscaling") and on this line are one number.
"""

from __future__ import annotations

import os
from typing import Any

from gpen_core.modes import AUTO, MODES


def photo_size(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(width, height) of the photo as it will be restored (EXIF quarter turns applied), from the
    header only; None when it cannot be read (the preview and Restore say why)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            w, h = im.size
            if im.getexif().get(0x0112, 1) in (5, 6, 7, 8):  # rotated a quarter turn: the result is upright
                w, h = h, w
    except Exception:  # unreadable: reported by the preview and by Restore, not here
        return None
    return w, h


def upscale_line(image: str | None, factor: int, mode: str | None, device: str, models: Any = None) -> str:
    """'**Upscale ×2:** result W×H; extra memory about N (estimate, …)', or why it is refused.

    ``models``: the app's ModelCache (auto passes over modes whose files are missing, as
    a restore does); None: every mode counts as available.
    """
    from gpen_core.engine import budget
    from gpen_core.options import RestoreOptions
    from gpen_core.platform.meter import format_bytes
    from gpen_core.upscale.tiles import preview

    if factor <= 1:
        return ""
    if not image:
        return f"×{factor}: upload a photo to see the result size."
    size = photo_size(image)
    if size is None:
        return ""
    w, h = size
    name = mode or AUTO
    if name == AUTO:
        opts = RestoreOptions(upscale=factor)
        available = (lambda m: models.weights_present(m, opts, False)) if models is not None else None
        models_dir = getattr(models, "models_dir", None)
        name = budget.choose(device, size, models_dir, available=available, work=budget.Work(upscale=factor)).mode.name
    p = preview(w, h, factor, name)
    if p.problem:
        return f"**Upscale ×{factor}:** {p.problem}"
    extra = budget.upscale_extra_bytes(MODES[name], size, factor)
    if not MODES[name].paste:
        return f"**Upscale ×{factor}:** {name} returns the restored faces only: the background is not upscaled."
    picked = f"; {name}, the mode auto picks now" if (mode or AUTO) == AUTO else ""
    return (f"**Upscale ×{factor}:** result {p.out_size[0]}×{p.out_size[1]}; extra memory about "
            f"{format_bytes(extra)} (estimate, not yet measured; {p.tiles} tiles of {p.tile} px{picked}).")
