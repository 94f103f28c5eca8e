"""sha256 of checkpoint files (cached per process) and :func:`verify`; where the registry pins none, the first
verification records it in a ``<file>.sha256`` sidecar (trust on first use)."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from gpen_core.errors import WeightsCorruptError
from gpen_core.platform import durable
from gpen_core.weights.registry import WeightSpec, models_folder


def file_sha256(path: Path) -> str:
    """sha256 of a file, hashed once per process while its size, mtime and inode are unchanged (status() and
    repeated loads stay cheap)."""
    st = path.stat()
    return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int, inode: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sidecar_path(path: Path, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the trust-on-first-use hash of ``path`` is recorded: ``<file>.sha256`` beside a file in our models
    folder, else (the ModelScope cache) under ``<models folder>/.hashes/``: we never write outside it."""
    folder = models_folder(models_dir)
    try:
        if path.resolve().parent == folder.resolve():
            return path.with_name(path.name + ".sha256")
    except OSError:
        pass
    tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return folder / ".hashes" / f"{path.name}.{tag}.sha256"


def _read_sidecar(p: Path) -> str | None:
    try:
        text = p.read_text(encoding="utf-8").split()
    except OSError:
        return None
    return text[0].lower() if text and len(text[0]) == 64 else None


def record_hash(path: Path, digest: str, models_dir: str | os.PathLike[str] | None = None) -> None:
    """Record ``digest`` in ``path``'s sidecar (:func:`sidecar_path`), flushed to disk: later loads trust the
    weights by it."""
    side = sidecar_path(path, models_dir)
    side.parent.mkdir(parents=True, exist_ok=True)
    durable.write_text(side, f"{digest}  {path.name}\n", sync=True, sweep=True)


def _delete_fix(spec: WeightSpec, path: Path, extra: str = "") -> str:
    source = f" (or from {spec.urls[0]})." if spec.urls else "."
    return f"Delete {path}{extra} and download it again: `python -m gpen_core download {spec.name}`{source}"


def verify(path: Path, spec: WeightSpec, models_dir: str | os.PathLike[str] | None = None, *, record: bool = True) -> str:
    """``path``'s sha256 once its size and sha256 (or its sidecar, which ``record`` writes when absent) match
    ``spec``; else WeightsCorruptError naming the file and the fix."""
    size = path.stat().st_size
    if spec.size_bytes is not None and size != spec.size_bytes:
        raise WeightsCorruptError(f"{path} is corrupt or incomplete: {size} bytes, expected {spec.size_bytes} for "
                                  f"{spec.name}. {_delete_fix(spec, path)}")
    digest = file_sha256(path)
    if spec.sha256 is not None:
        if digest != spec.sha256:
            raise WeightsCorruptError(f"{path} is corrupt or not the released {spec.name}: sha256 {digest}, expected "
                                      f"{spec.sha256}. {_delete_fix(spec, path)}")
        return digest
    side = sidecar_path(path, models_dir)
    recorded = _read_sidecar(side)
    if recorded is None:
        if record:
            record_hash(path, digest, models_dir)
    elif recorded != digest:
        raise WeightsCorruptError(
            f"{path} changed since it was first verified: sha256 {digest}, recorded {recorded} in {side}. "
            "The file is corrupt or was replaced. "
            + _delete_fix(spec, path, f" (and {side})")
            + f" If you replaced it on purpose, delete {side} and it will be recorded again."
        )
    return digest
