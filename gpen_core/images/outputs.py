"""Where results are written: checked before any work (a bad path fails in milliseconds, not after the restore),
written whole or not at all (:func:`write_atomic`)."""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from gpen_core.errors import InputError
from gpen_core.images.limits import IMAGE_SUFFIXES, NEITHER, SUBFOLDER, neither_why, not_a_file, sniff_file, special_kind
from gpen_core.platform import durable

# The file name ending of each result format, and every ending a result file may be named with.
SUFFIX_BY_FORMAT = {"png": ".png", "jpeg": ".jpg"}
FORMAT_BY_SUFFIX = {**{suffix: fmt for fmt, suffix in SUFFIX_BY_FORMAT.items()}, ".jpeg": "jpeg"}


def format_for(out: Path) -> str:
    """The format a result file named ``out`` is written in; InputError for an ending no format takes."""
    fmt = FORMAT_BY_SUFFIX.get(out.suffix.lower())
    if fmt is None:
        *most, last = FORMAT_BY_SUFFIX
        raise InputError(f"cannot write {out.suffix} files; use {', '.join(most)} or {last} "
                         "(or a folder: one that exists, or a name without a suffix)")
    return fmt


def check_writable(outputs: Iterable[Path]) -> None:
    """Raise :class:`InputError` for the first output that cannot be written: the nearest existing ancestor
    of its folder must be a folder where a file can really be created (an anonymous temporary file, gone at
    once), as permissions say little for root or on read-only and kernel file systems (/proc, /sys)."""
    checked: set[Path] = set()
    for dst in outputs:
        folder = Path(dst).parent
        if folder in checked:
            continue
        checked.add(folder)
        nearest = folder
        while not nearest.exists() and nearest != nearest.parent:
            nearest = nearest.parent
        if not nearest.is_dir():
            raise InputError(f"cannot write {dst}: {nearest} is a file, not a folder. Choose another output path.")
        try:
            with tempfile.TemporaryFile(dir=nearest):
                pass
        except OSError as exc:
            raise InputError(f"cannot write {dst}: creating a file in {nearest} failed ({exc.strerror or exc}). "
                             "Choose an output in a folder you can write to.") from None


def check_output_file(dst: Path, inputs: Iterable[Path] = (), *, folder: bool = True) -> None:
    """Raise :class:`InputError` when ``dst`` may not be written (photos and videos alike): it exists and is not
    a regular file (a device, a FIFO, a folder), or it is one of ``inputs`` by any name or link (the input
    is read while the output is written). Then, with ``folder``, :func:`check_writable` for its folder."""
    dst = Path(dst)
    try:
        mode = dst.stat().st_mode
    except OSError:
        mode = None  # not there yet (or a broken link, which the rename replaces)
    if mode is not None and not stat.S_ISREG(mode):
        raise InputError(f"the output {dst} is {special_kind(mode)}, not a file: name a new file, or a folder to write into")
    for src in inputs:
        if same_file(Path(src), dst):
            raise InputError(f"the output {dst} is the input itself ({src}): choose another output name "
                             "(the input is read while the output is written, and would be lost)")
    if folder:
        check_writable([dst])


def result_paths(base: Path, fmt: str | None) -> list[Path]:
    """The files a photo planned as ``base`` may become: ``base`` when the output named its format (``-o x.png``:
    ``fmt``), else ``base`` plus each format's suffix (a folder's output takes the mode's, known once restored).
    Added, never swapped: a stem may hold dots (``scan.v2``)."""
    return [base] if fmt else [result_path(base, None, made) for made in SUFFIX_BY_FORMAT]


def result_path(base: Path, fmt: str | None, made: str) -> Path:
    """The one of :func:`result_paths` a photo encoded as ``made`` ("png", "jpeg") is written to."""
    return base if fmt else base.with_name(base.name + SUFFIX_BY_FORMAT[made])


def check_result_paths(plan: Iterable[tuple[Path | None, Path, str | None]]) -> None:
    """:func:`check_output_file` for every file of each (input, base, format) in ``plan``; input None: not on
    this machine (an object-store URI), so it cannot be the output."""
    for src, base, fmt in plan:
        for dst in result_paths(base, fmt):
            check_output_file(dst, [src] if src is not None else [], folder=False)


def existing_result(base: Path, fmt: str | None) -> Path | None:
    """The file already at one of :func:`result_paths`, which restoring would replace (skipped without --overwrite)."""
    return next((p for p in result_paths(base, fmt) if p.exists()), None)


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file: the same device and inode once links are followed (a symbolic or a
    hard link); when either is not there yet, the same path once resolved."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def write_atomic(dst: Path, data: bytes) -> None:
    """Write ``data`` to ``dst`` through a temporary file renamed into place; :class:`InputError` naming the path
    when it cannot be (the temporary is removed). Not flushed: a photo is re-made in seconds, a folder run
    writes thousands."""
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        durable.write_bytes(dst, data, sync=False)
    except OSError as exc:
        raise InputError(f"cannot write {dst}: {exc.strerror or exc}. Choose another output path.") from None


def one_file_for_several(videos: int, photos: int, out: Path) -> InputError:
    """The refusal of the file ``out`` as the output of several inputs (each needs a file of its own)."""
    counted = " and ".join(f"{n} {kind}{'s' if n > 1 else ''}" for n, kind in ((videos, "video"), (photos, "photo")) if n)
    return InputError(f"{counted} need an output folder, not the file {out}: give a folder for -o (made if missing), "
                      f"e.g. {out.with_suffix('')}")


def output_stems(names: Sequence[str]) -> list[str]:
    """The output file name (without its extension) for each input file name, unique per input: its stem, or for
    stems that meet case-blind (``same.jpg``, ``same.png``) ``same_jpg``, ``same_png``, then numbered in input
    order (``x_jpg-2``). Only this run's names decide, so a rerun finds the first run's outputs."""
    paths = [PurePosixPath(str(n).replace("\\", "/")) for n in names]
    counts = collections.Counter(p.stem.casefold() for p in paths)
    # Stems kept as they are come first: a file really named ``same_jpg.png`` keeps ``same_jpg``.
    kept = {p.stem.casefold() for p in paths if counts[p.stem.casefold()] == 1}
    used: set[str] = set()
    out: list[str] = []
    for p in paths:
        if counts[p.stem.casefold()] == 1:
            out.append(p.stem)
            continue
        base = f"{p.stem}_{p.suffix.lstrip('.')}" if p.suffix else p.stem
        unique, n = base, 1
        while unique.casefold() in used or unique.casefold() in kept:
            n += 1
            unique = f"{base}-{n}"
        used.add(unique.casefold())
        out.append(unique)
    return out


def save_result(folder: Path, name: str, data: bytes, *, prefix: str = "r-", max_age_s: float | None = None) -> Path:
    """Write ``data`` as ``name`` in a new subfolder ``<prefix>XXXX`` of ``folder`` (made if missing; ``r-``: a
    result, never a shared fixed path): concurrent requests never share a path. Its path. With ``max_age_s``, older
    files are swept from ``folder`` first (they pile up on a server)."""
    if max_age_s is not None:
        sweep(folder, max_age_s)
    path = private_folder(folder, prefix) / name
    path.write_bytes(data)
    return path


def private_folder(folder: Path, prefix: str) -> Path:
    """A new subfolder ``<prefix><32 hex digits>`` of ``folder`` (made if missing), this user's only. Gradio serves
    any file under its temp folder to whoever names its path: the name carries 128 bits from the OS's generator, where
    tempfile's come from a Mersenne Twister whose names a visitor reads in their own results' paths."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{prefix}{secrets.token_hex(16)}"
    path.mkdir(mode=0o700)
    return path


def sweep(folder: Path, max_age_s: float) -> int:
    """Delete every file under ``folder`` last written there over ``max_age_s`` ago, then the folders left empty
    (symlinks removed, never followed); how many files went. Age is from the newer of mtime and ctime: Gradio's
    ``shutil.copy2`` keeps a source's old mtime, and a visitor's fresh copy must not look old."""
    cutoff = time.time() - max_age_s
    # Only folders already old before the sweep: one another request has just made is empty until it writes there.
    old = {Path(root) for root, _, _ in os.walk(folder) if _aged(Path(root), cutoff)}
    removed = 0
    for root, dirs, names in os.walk(folder, topdown=False):  # nothing when it is not a folder
        for n in names:
            p = Path(root, n)
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to delete: leave it
                if _written(p) < cutoff:
                    p.unlink()
                    removed += 1
        for d in dirs:
            p = Path(root, d)
            with contextlib.suppress(OSError):
                if p.is_symlink():
                    if _written(p) < cutoff:
                        p.unlink()
                elif p in old and not any(p.iterdir()):
                    p.rmdir()
    return removed


def _aged(path: Path, cutoff: float) -> bool:
    try:
        return _written(path) < cutoff
    except OSError:  # gone meanwhile
        return False


def _written(path: Path) -> float:
    """When ``path`` itself (never what it links to) was last written or put here, in epoch seconds."""
    st = path.lstat()
    return max(st.st_mtime, st.st_ctime)


# The app's own temp folder (``<tmp>/gpen-gradio-<uid>``); any other GRADIO_TEMP_DIR may be shared.
TEMP_ROOT_PREFIX = "gpen-gradio-"
# Subfolders we create in any temp folder: downloadable results, pasted images.
OWN_TEMP_SUBFOLDERS = ("results", "pasted")


def sweep_temp(root: Path, max_age_s: float) -> int:
    """:func:`sweep` of our files under ``root`` at the app's start (Gradio's clean-up knows only its instance's):
    all of the app's own folder (``TEMP_ROOT_PREFIX``), only our subfolders of any other, never others' files."""
    root = Path(root)
    if not root.is_dir():
        return 0
    targets = [root] if root.name.startswith(TEMP_ROOT_PREFIX) else [root / s for s in OWN_TEMP_SUBFOLDERS]
    # A symlinked subfolder is never followed (it may point anywhere on the machine).
    return sum(sweep(t, max_age_s) for t in targets if not t.is_symlink() and t.is_dir())


def once_each(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(each file once, in order; the later names of a file already there): one file by device and inode, so a link
    or a second path to it is restored once. Each path exists (found an instant ago)."""
    seen: dict[tuple[int, int], Path] = {}
    repeats = []
    for p in paths:
        st = p.stat()
        if (key := (st.st_dev, st.st_ino)) in seen:
            repeats.append(p)
        seen.setdefault(key, p)
    return list(seen.values()), repeats


def folder_inputs(folder: Path, output: Path | None = None) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The one rule for a local folder's entries, the plain run's and --ray's: (its photos by name and videos by their
    first bytes, sorted; (entry, why) for each skipped: an image-named entry that is not a file, a file neither a photo
    nor a video and a subfolder, but hidden ones and ``output``). InputError when nothing is left, naming what was skipped."""
    every = sorted(folder.iterdir())
    whys = {q: not_a_file(q) for q in every if q.suffix.lower() in IMAGE_SUFFIXES or (q.is_file() and sniff_file(q))}
    # Not searched, and said: a folder of an archive is never dropped without a word.
    whys |= {q: SUBFOLDER for q in every if q not in whys and not q.name.startswith(".") and q.is_dir()
             and not (output is not None and same_file(q, output))}
    # A hidden file (.DS_Store, Thumbs.db's kin) is the system's, as a hidden folder is: left out without a word.
    whys |= {q: neither_why(q) for q in every if q not in whys and q.is_file() and not q.name.startswith(".")}
    found = [q for q, why in whys.items() if why is None]
    skipped = sorted((q, why) for q, why in whys.items() if why is not None)
    if not found:
        listed = "".join(f"; skipped {q}: {why.rstrip('.')}" for q, why in skipped if why != NEITHER)
        raise InputError(f"folder {folder} has no images ({', '.join(sorted(IMAGE_SUFFIXES))}) and no videos{listed}")
    return found, skipped
