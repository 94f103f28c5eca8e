"""Every file a request lacks, in one message: names, download sizes (published, or estimated and marked "~") and
one command that fetches them all."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from gpen_core.errors import WeightsError
from gpen_core.modes import MemoryMode
from gpen_core.options import DETECTOR_WEIGHTS
from gpen_core.weights.registry import REGISTRY, WeightStatus, modelscope_cache_root

# Why a file was not fetched when the caller turned downloads off; the app swaps it for where its button is.
DOWNLOADS_OFF_FOR_CALL = "downloads are off for this call"

# Estimated download sizes where none is published: the documented architecture's float32 state dict.
APPROX_BYTES: dict[str, int] = {
    "GPEN-BFR-256": 75_517_192,
    "GPEN-BFR-512": 284_022_236,
    "GPEN-BFR-1024": 284_843_696,
    "GPEN-BFR-2048": 285_180_804,
    "ParseNet-latest": 85_279_864,  # facexlib's file of the same network is 85_331_193
}


def mode_files(mode: MemoryMode, model: str | None = None, detector: str | None = None, *, aligned: bool = False) -> tuple[str, ...]:
    """Registry names (or a checkpoint name) a request in ``mode`` loads, generator first: the one list the weights
    panel, the mode labels and the hardware check read. ``model``/``detector``: the Advanced overrides or a task's
    generator; an aligned face skips detection. ParseNet is optional (the rectangle mask otherwise): not listed."""
    names = [model or mode.model]
    if not aligned:
        names.append(DETECTOR_WEIGHTS[detector or mode.detector])
    return tuple(names)


def unusable(statuses: Iterable[WeightStatus]) -> frozenset[str]:
    """The registry names of ``weights.status()`` rows a load would fail on: missing or failing verification."""
    return frozenset(s.name for s in statuses if not s.present or s.verified is False)


def download_size(name: str) -> tuple[int | None, bool]:
    """(bytes a download of ``name`` fetches or None when unknown, whether that is an estimate)."""
    spec = REGISTRY.get(name)
    if spec is not None and spec.size_bytes is not None:
        return spec.size_bytes, False
    return APPROX_BYTES.get(name), name in APPROX_BYTES


def size_text(n: int | None, estimated: bool) -> str:
    """'109 MB', '1.8 MB', '~284 MB', 'size not published' (decimal megabytes)."""
    if n is None:
        return "size not published"
    # One decimal below 10 MB: the 1.8 MB detector is not "2 MB" next to a 109 MB one.
    if n >= 1e9:
        text = f"{n / 1e9:.2f} GB"
    else:
        text = f"{n / 1e6:.1f} MB" if 1e5 <= n < 1e7 else f"{n / 1e6:.0f} MB"
    return ("~" if estimated else "") + text


def total_text(names: Sequence[str]) -> str:
    """The sum of :func:`download_size` over ``names`` ('~286 MB'), or '' when a size is unknown."""
    sizes = [download_size(n) for n in names]
    if any(b is None for b, _ in sizes):
        return ""
    return size_text(sum(b or 0 for b, _ in sizes), any(e for _, e in sizes))


def download_command(names: Sequence[str]) -> str:
    return "python -m gpen_core download " + " ".join(names)


def manual_fix(names: Sequence[str], folder: Path | str) -> str:
    """One 'Fix:' sentence for all ``names``: the one command, or each file's sources and where to save it."""
    specs = [REGISTRY[n] for n in names]
    sources = [f"from {' or '.join(s.pages or ['its publisher'])}" for s in specs]
    if len(specs) == 1:
        by_hand = (f"download it yourself {sources[0]} and save it as {Path(folder) / specs[0].filename} "
                   f"(folder {folder}, file name {specs[0].filename})")
    else:
        by_hand = f"download them yourself and save them in {folder}: " + "; ".join(
            f"{s.filename} {src}" for s, src in zip(specs, sources))
    return f"Fix: run `{download_command(names)}` on a machine with internet access, or {by_hand}."


def files_text(names: Sequence[str]) -> str:
    """'GPEN-BFR-512 (GPEN-BFR-512.pth, ~284 MB) and retinaface-mobilenet0.25 (…, 1.8 MB)'."""
    parts = [f"{n} ({REGISTRY[n].filename}, {size_text(*download_size(n))})" for n in names]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def missing_error(names: Sequence[str], folder: Path | str, why: str, looked: Sequence[str] = (),
                  attempts: Sequence[str] = ()) -> WeightsError:
    """The one WeightsError for registry files that are not here: every file in ``names`` at once (sizes, their
    total), where it was looked for, ``why`` it was not fetched (each download attempt) and the fix, in two lines;
    every place ``looked`` in and each attempt again in ``details``."""
    where = f"{folder} or the ModelScope cache {modelscope_cache_root()}"
    total = total_text(names) if len(names) > 1 else ""
    what = (f"This request needs {len(names)} files that are not in {where}: {files_text(names)}"
            f"{f', {total} in all' if total else ''};" if len(names) > 1 else f"{files_text(names)} is not in {where}:")
    tried = f" ({'; '.join(attempts)})" if attempts else ""
    details = ["Looked in:", *[f"  - {p}" for p in looked]] if looked else []
    if attempts:
        details += ["Download attempts:", *[f"  - {a}" for a in attempts]]
    return WeightsError(f"{what} {why}{tried}.\n{manual_fix(names, folder)}", details="\n".join(details))
