"""What will run, from the files present and verified, the memory free and the measured peaks: one answer,
:func:`assess`, for every panel: ``auto``'s rule (the best pasting mode whose files are usable and whose peak fits,
else the lightest with its files)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Literal

from gpen_core.engine import budget
from gpen_core.engine.fit import PANEL_PHOTO, fits, rank
from gpen_core.modes import MODES
from gpen_core.options import default_upscaler
from gpen_core.platform.meter import format_bytes
from gpen_core.weights.missing import download_command, download_size, mode_files, size_text
from gpen_core.weights import lookup as weights
from gpen_core.weights.registry import REGISTRY, WeightStatus


# What people call each file in a sentence (the others by their registry name).
LABELS: dict[str, str] = {
    "retinaface-resnet50": "ResNet-50 detector",
    "retinaface-mobilenet0.25": "MobileNet detector",
    "parsenet": "ParseNet",
    "ParseNet-latest": "GPEN ParseNet",
    "realesrnet_x2": "×2 upscaler",
    "realesrnet_x4": "×4 upscaler",
}

FileStateName = Literal["missing", "verified", "corrupt"]


@dataclass(frozen=True)
class FileState:
    """One registry file as it stands: missing, present and verified, or present but corrupt."""

    name: str  # registry name
    state: FileStateName
    download_bytes: int | None  # the registry's published size, else APPROX_BYTES
    download_bytes_estimated: bool
    on_disk_bytes: int | None = None  # the file's size when present

    @property
    def usable(self) -> bool:
        return self.state == "verified"


@dataclass(frozen=True)
class ModeReadiness:
    """One memory mode: which files it loads, which of them are not usable, whether it fits."""

    mode: str
    files: tuple[str, ...]  # registry names it loads, generator first
    missing: tuple[str, ...]  # of ``files``: missing or corrupt
    fits: bool  # its peak (estimated or measured) fits the free binding memory less SAFETY_MARGIN

    @property
    def ready(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class Offer:
    """One download and the modes it makes runnable (best first, ``faces-only`` included)."""

    files: tuple[str, ...]
    enables: tuple[str, ...]


@dataclass(frozen=True)
class Readiness:
    """What will run now, what would run with more files, and the smallest download to get there."""

    modes: dict[str, ModeReadiness]
    # What ``auto`` runs now (None: no pasting mode has its files); not ``runs_now_fits``: the lightest, may not fit.
    runs_now: str | None
    runs_now_fits: bool
    recommended: str  # the best pasting mode that fits the memory, files aside
    download: tuple[str, ...]  # the smallest set of files that makes ``recommended`` runnable (empty: already runnable)
    corrupt: tuple[str, ...]  # present files that failed verification (offered for download again)
    binding: str  # "RAM" or "VRAM"
    free_bytes: int
    # Every download worth offering, smallest first, each enabling a better mode than any cheaper one and than what
    # runs now; the last is ``download`` (none when ``download`` is empty).
    offers: tuple[Offer, ...]


def files_from_status(statuses: Iterable[WeightStatus]) -> dict[str, FileState]:
    """``weights.status()`` rows as FileStates (present and verified, present and corrupt, or missing)."""
    out: dict[str, FileState] = {}
    for s in statuses:
        state: FileStateName = "missing" if not s.present else "corrupt" if s.verified is False else "verified"
        out[s.name] = FileState(s.name, state, *download_size(s.name), s.size_bytes if s.present else None)
    return out


def current_files(models_dir: Path | None = None) -> dict[str, FileState]:
    """The models folder's files as they are now."""
    return files_from_status(weights.status(models_dir))


def assess(files: Mapping[str, FileState], needs: Mapping[str, int], free_bytes: int, *, binding: str = "RAM",
           model: str | None = None, detector: str | None = None, aligned: bool = False) -> Readiness:
    """What runs now and what to download. ``files``: registry name → FileState (a name not in it, a checkpoint
    path, counts as usable: the restore checks it); ``needs``: mode → peak bytes on the binding memory."""
    modes: dict[str, ModeReadiness] = {}
    for m in MODES.values():
        names = mode_files(m, model, detector, aligned=aligned)
        missing = tuple(n for n in names if n in files and not files[n].usable)
        modes[m.name] = ModeReadiness(m.name, names, missing, fits(int(needs[m.name]), free_bytes))

    ranking = rank(needs, free_bytes, binding=binding, candidates=MODES,
                   passed_over={n: "files missing" for n, r in modes.items() if not r.ready})
    runs_now_fits = ranking.best is not None
    # The lightest with its files when none fits; when one fits, ``best_fitting`` ranks at least as high.
    runs_now = modes[ranking.chosen.mode] if any(m.runnable for m in ranking.modes) else None
    recommended = modes[(ranking.best_fitting or ranking.modes[-1]).mode]
    return Readiness(modes=modes, runs_now=runs_now.mode if runs_now else None, runs_now_fits=runs_now_fits,
                     recommended=recommended.mode, download=recommended.missing,
                     corrupt=tuple(n for n, f in files.items() if f.state == "corrupt"),
                     binding=binding, free_bytes=int(free_bytes),
                     offers=_offers(modes, files, recommended, runs_now if runs_now_fits else None))


def _offers(modes: Mapping[str, ModeReadiness], files: Mapping[str, FileState], recommended: ModeReadiness,
            running: ModeReadiness | None) -> tuple[Offer, ...]:
    """The cheapest download for each step up the ladder to ``recommended``: of the pasting modes that fit, are not
    ready and beat what runs now, by download size, each kept only when it beats every cheaper one."""
    if recommended.ready:
        return ()
    floor = MODES[running.mode].rank if running is not None else 0
    top = MODES[recommended.mode].rank
    cands = [modes[m.name] for m in MODES.values() if m.paste and floor < m.rank <= top and not modes[m.name].ready
             and (modes[m.name].fits or m.name == recommended.mode)]

    def cost(r: ModeReadiness) -> tuple[int, int]:
        # (files of unpublished size, bytes of the others): two sets that share the one file of
        # unknown size (a task's generator) are still told apart by the files whose size is known.
        sizes = [files[n].download_bytes if n in files else None for n in r.missing]
        return sum(s is None for s in sizes), sum(s for s in sizes if s is not None)

    out: list[Offer] = []
    best_rank = floor
    for c in sorted(cands, key=lambda r: (cost(r), -MODES[r.mode].rank)):
        if MODES[c.mode].rank <= best_rank:
            continue
        best_rank = MODES[c.mode].rank
        fetched = set(c.missing)
        # The mode itself, and the crops-only mode when the same files enable it (it is not
        # on the pasting ladder, so it would otherwise go unmentioned).
        enables = (c.mode, *(m.name for m in MODES.values() if not m.paste and not modes[m.name].ready
                             and modes[m.name].fits and set(modes[m.name].missing) <= fetched))
        out.append(Offer(c.missing, enables))
    return tuple(out)


def download_for(readiness: Readiness, mode: str | None) -> tuple[str, ...]:
    """What Download fetches: for ``auto`` (None) the recommended set, else that mode's missing (or corrupt) files."""
    return readiness.download if mode is None else readiness.modes[mode].missing


def upscaler_download(files: Mapping[str, FileState], upscale: int | str | None) -> tuple[str, ...]:
    """The default upscaler ×``upscale`` loads, when it is missing or corrupt (what Download adds); else empty."""
    factor = int(upscale or 1)
    f = files.get(default_upscaler(factor)) if factor > 1 else None
    return (f.name,) if f is not None and not f.usable else ()


def label(name: str) -> str:
    return LABELS.get(name, name)


def files_text(names: Sequence[str], files: Mapping[str, FileState]) -> str:
    """'ResNet-50 detector (109 MB)' / 'GPEN-BFR-512 (~284 MB) and ResNet-50 detector (109 MB)'."""
    parts = []
    for n in names:
        f = files.get(n)
        size = size_text(f.download_bytes, f.download_bytes_estimated) if f else "size not published"
        parts.append(f"{label(n)} ({'corrupt, ' if f and f.state == 'corrupt' else ''}{size})")
    return "".join(parts) if len(parts) <= 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def unavailable(names: Iterable[str | None], files: Mapping[str, FileState] | None) -> str:
    """A choice's label ending: " — unavailable: download GPEN-BFR-512 (~284 MB)" for the files of ``names`` in
    ``files`` that are not usable; "" when none is (or ``files`` is None: not checked)."""
    need = [n for n in names if files and n in files and not files[n].usable]
    return f" — unavailable: download {files_text(need, files or {})}" if need else ""


def summary(r: Readiness, files: Mapping[str, FileState]) -> str:
    """One sentence: what auto runs now and what a download would add: "auto will use balanced; download
    ResNet-50 detector (109 MB) to enable quality"."""
    if r.runs_now is None:
        head = "nothing can run yet"
    elif r.runs_now_fits:
        head = f"auto will use {r.runs_now}"
    else:
        head = f"auto will use {r.runs_now}, the lightest mode with its files (it may not fit the {format_bytes(r.free_bytes)} {r.binding} free)"
    if not r.download:
        if r.runs_now == r.recommended:
            return f"{head}, the best mode that fits this machine; all its files are here"
        return head
    # each: 'MobileNet detector (1.8 MB) to enable balanced and faces-only'; the last offer is ``r.download``
    return f"{head}; download " + ", or ".join(f"{files_text(o.files, files)} to enable {' and '.join(o.enables)}"
                                               for o in r.offers)


def upscaler_note(upscale: int | str | None, files: Mapping[str, FileState], folder: str,
                  downloads: bool = True) -> str:
    """Before Restore: the factor's upscaler file is missing or corrupt, and how to get it into ``folder``; '' when
    it is usable, and at 1×. ``downloads`` False (no Download button): the operator's command instead."""
    names = upscaler_download(files, upscale)
    if not names:
        return ""
    name = names[0]
    filename = REGISTRY[name].filename
    factor = int(upscale or 1)
    corrupt = files[name].state == "corrupt"
    if corrupt:
        head = f"⚠ **`{filename}` is corrupt** (the ×{factor} upscaler failed verification): Restore would stop."
    else:
        where = "the models folder or the ModelScope cache" if REGISTRY[name].modelscope else "the models folder"
        head = (f"⚠ **`{filename}` is missing** (the ×{factor} upscaler): it is not in {where}, so Restore would "
                "stop with \"Weights missing\".")
    if not downloads:
        return (f"{head} Downloads are off on this shared server: ask the operator to run "
                f"`{download_command([name])}`, or choose 1× (keep size).")
    return (f"{head} {'Download it again' if corrupt else 'Get it'} with the Weights panel's **Download** button, or "
            f"with `{download_command([name])}`; or save the file as `{PurePath(folder) / filename}`. "
            "Or choose 1× (keep size).")


def current(device: str, models_dir: Path | None = None, *, model: str | None = None, detector: str | None = None,
            aligned: bool = False) -> tuple[Readiness, dict[str, FileState]]:
    """:func:`assess` on this machine now (``budget.estimate_peak``: the saved hardware profile when valid)."""
    files = current_files(models_dir)
    free = budget.free_memory(device)
    bound = free.binding(device)
    needs = {name: budget.estimate_peak(m, device, PANEL_PHOTO, models_dir)[0] for name, m in MODES.items()}
    r = assess(files, needs, bound.free_bytes, binding=bound.name, model=model, detector=detector, aligned=aligned)
    return r, files
