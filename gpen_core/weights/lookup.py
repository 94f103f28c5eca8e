"""Where each checkpoint is and whether it is the right file: the weights' public face. :func:`resolve` looks at an
explicit file (or a folder holding one known file), our models folder (``$GPEN_HOME``, default ``~/.cache/gpen``),
the ModelScope cache (every layout it has used), then downloads unless ``GPEN_OFFLINE=1``; it verifies first."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from gpen_core.errors import WeightsError
from gpen_core.progress import CountProgress
from gpen_core.weights.checksums import file_sha256, sidecar_path, verify
from gpen_core.weights.fetch import DownloadCancelled, download_into, modelscope_file_url
from gpen_core.weights.missing import DOWNLOADS_OFF_FOR_CALL, missing_error
from gpen_core.weights.registry import (REGISTRY, Arch, Kind, WeightSpec, WeightStatus, find_spec, get_spec, models_dir,
                                        models_folder, modelscope_cache_root, registry_name)

__all__ = [
    "REGISTRY", "Arch", "Kind", "WeightSpec", "DownloadCancelled", "WeightStatus", "WeightsError", "download",
    "file_sha256", "get_spec", "locate", "modelscope_cache_root", "modelscope_file_url",
    "models_dir", "registry_name", "resolve", "sidecar_path", "status", "verify",
]

# ModelScope renamed the "damo" organisation to "iic"; caches made before hold damo/...
_MODELSCOPE_OWNER_ALIASES = {"iic": ("iic", "damo"), "damo": ("damo", "iic")}


@dataclass(frozen=True)
class _Found:
    path: Path
    location: str  # "explicit path", "models folder", "ModelScope cache"
    spec: WeightSpec | None  # None for an explicit file that is not a registry file


def _modelscope_candidates(model_id: str, relpath: str, root: Path) -> list[tuple[str, list[Path]]]:
    """(description, candidate paths) of every place modelscope (≤ 1.40) may have put ``relpath`` of ``model_id``,
    newest layout first: 1.38+ ``models/owner--name/snapshots/<rev>/``, ≤1.37 ``[hub/]models/owner/name___``, older
    ``[hub/]owner/name``."""
    owner, name = model_id.split("/", 1)
    safe = name.replace(".", "___")
    out: list[tuple[str, list[Path]]] = []
    for o in _MODELSCOPE_OWNER_ALIASES.get(owner, (owner,)):
        snaps = root / "models" / f"{o}--{name}" / "snapshots"
        paths = [snaps / rev / relpath for rev in ("master", "main")]
        if snaps.is_dir():
            paths += [d / relpath for d in sorted(snaps.iterdir()) if d.name not in ("master", "main")]
        out.append((str(snaps / "<revision>" / relpath), paths))
        for folder in (root / "models" / o / safe, root / "hub" / "models" / o / safe, root / o / name,
                       root / "hub" / o / name):
            out.append((str(folder / relpath), [folder / relpath]))
    return out


def _search(spec: WeightSpec, folder: Path) -> tuple[_Found | None, list[str]]:
    """First existing file for ``spec`` (models folder, then ModelScope cache) and every place looked."""
    looked: list[str] = []
    own = folder / spec.filename
    looked.append(f"models folder: {own}")
    if own.is_file():
        return _Found(own, "models folder", spec), looked
    if spec.modelscope is not None:
        model_id, relpath = spec.modelscope
        for desc, paths in _modelscope_candidates(model_id, relpath, modelscope_cache_root()):
            looked.append(f"ModelScope cache: {desc}")
            for p in paths:
                if p.is_file():
                    return _Found(p, "ModelScope cache", spec), looked
    return None, looked


def _explicit(target: Path) -> _Found:
    """An explicit file, or the one known checkpoint inside an explicit folder."""
    if target.is_file():
        hits = _specs_for_file(target.name)
        return _Found(target, "explicit path", hits[0] if len(hits) == 1 else None)
    folders = [target]
    snaps = target / "snapshots"  # a ModelScope repo folder: look into its revisions
    if snaps.is_dir():
        folders += sorted(d for d in snaps.iterdir() if d.is_dir())
    for f in folders:
        known = sorted(p for p in f.iterdir() if _specs_for_file(p.name) and p.is_file())
        if len(known) == 1:
            return _explicit(known[0])
        if len(known) > 1:
            raise WeightsError(f"{f} holds several checkpoints ({', '.join(p.name for p in known)}); "
                               f"pass the one you want as a file path, e.g. {known[0]}")
    known_names = ", ".join(sorted({s.filename for s in REGISTRY.values()}))
    raise WeightsError(f"{target} is a folder with no known checkpoint in it (looked for {known_names} and "
                       "ModelScope's pytorch_model.pt / pytorch_model-2048.pt). Pass the checkpoint file itself.")


def _specs_for_file(filename: str) -> list[WeightSpec]:
    """The registry entries whose file (ours, or ModelScope's) has this name."""
    return [s for s in REGISTRY.values() if filename in (s.filename, s.modelscope[1] if s.modelscope else None)]


def _parse(name_or_path: str | os.PathLike[str]) -> tuple[WeightSpec | None, Path | None]:
    """(spec, None) for a registry name; (None, path) for an existing explicit path."""
    text = os.fspath(name_or_path)
    name = registry_name(text)
    if name is not None:
        return REGISTRY[name], None
    path = Path(text).expanduser()
    if path.exists():
        return None, path
    spec = find_spec(text)  # a bare registry file name, e.g. "GPEN-BFR-512.pth"
    if spec is not None and os.sep not in text and "/" not in text:
        return spec, None
    raise WeightsError(f"{text!r} is neither an existing file nor a known weights name. "
                       f"Known names: {', '.join(REGISTRY)}; or pass the path of a checkpoint file.")


def locate(name_or_path: str | os.PathLike[str], models_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Where the file is now, without network or verifying it; never an interrupted download's temporary."""
    spec, explicit = _parse(name_or_path)
    if explicit is not None:
        return _explicit(explicit).path
    assert spec is not None
    found, _ = _search(spec, models_folder(models_dir))
    return found.path if found else None


def resolve(name_or_path: str | os.PathLike[str], *, models_dir: str | os.PathLike[str] | None = None,
            allow_download: bool | None = None, progress: CountProgress | None = None) -> Path:
    """A verified checkpoint for a registry name or a path; WeightsError (the file, every place looked, the fix)
    within seconds when missing, unfetchable or bad. ``allow_download=None``: unless GPEN_OFFLINE=1."""
    spec, explicit = _parse(name_or_path)
    folder = models_folder(models_dir)
    if explicit is not None:
        found = _explicit(explicit)
        # An explicit file is the caller's choice; verify it only against a pinned
        # size/hash (never write a sidecar for a file we do not manage).
        if found.spec is not None and (found.spec.sha256 or found.spec.size_bytes):
            verify(found.path, found.spec, folder, record=False)
        return found.path
    assert spec is not None
    found, looked = _search(spec, folder)
    if found is not None:
        verify(found.path, spec, folder)
        return found.path
    offline = os.environ.get("GPEN_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    allowed = not offline if allow_download is None else allow_download
    if not allowed:
        why = "downloads are off (GPEN_OFFLINE=1)" if allow_download is None else DOWNLOADS_OFF_FOR_CALL
        raise missing_error([spec.name], folder, why, looked)
    return download_into(spec, folder, progress, looked)


def download(name: str, *, models_dir: str | os.PathLike[str] | None = None, progress: CountProgress | None = None,
             cancel: threading.Event | None = None) -> Path:
    """Fetch ``name`` into the models folder (whatever GPEN_OFFLINE says) unless a verified copy is there (a corrupt
    one is replaced). ``cancel`` set ends it at the next chunk: ``DownloadCancelled``."""
    spec = get_spec(name)
    folder = models_folder(models_dir)
    found, looked = _search(spec, folder)
    if found is not None:
        try:
            verify(found.path, spec, folder)
            return found.path
        except WeightsError:
            if found.location == "models folder":
                found.path.unlink(missing_ok=True)
                sidecar_path(found.path, folder).unlink(missing_ok=True)
    return download_into(spec, folder, progress, looked, cancel)


def status(models_dir: str | os.PathLike[str] | None = None) -> list[WeightStatus]:
    """One row per registry entry: present where, verified or why not. No network; hashes are cached."""
    folder = models_folder(models_dir)
    rows: list[WeightStatus] = []
    for spec in REGISTRY.values():
        found, _ = _search(spec, folder)
        expected = folder / spec.filename
        if found is None:
            rows.append(WeightStatus(spec.name, spec.filename, spec.kind, False, None, None, spec.size_bytes, "", expected))
            continue
        problem = None
        try:
            verify(found.path, spec, folder)
        except WeightsError as exc:
            problem = str(exc)
        rows.append(WeightStatus(spec.name, spec.filename, spec.kind, True, found.path, problem is None,
                                 found.path.stat().st_size, found.location, expected, problem))
    return rows
