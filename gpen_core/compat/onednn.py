"""oneDNN's primitive cache inside PyTorch's CPU library, emptied when a lighter mode takes over: nothing in PyTorch
empties it, and after ``balanced`` it held 10-15 MiB in every later peak (docs/performance.md, "A lighter mode after
a heavier one"). Its setter and getter are local symbols of ``libtorch_cpu.so`` (``.symtab`` only), placed here by an
exported symbol, the setter called only once the getter answered as oneDNN does; a stripped build is left alone."""

from __future__ import annotations

import ctypes
import functools
import struct
import sys
from pathlib import Path

from gpen_core.compat.versions import check_version

TORCH_VERSIONS = ((2, 13), (2, 15))
SEAM = "gpen_core.compat.onednn (oneDNN's primitive cache)"
_GET, _SET = b"dnnl_get_primitive_cache_capacity", b"dnnl_set_primitive_cache_capacity"
_SYM = [("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")]
_FUNC, _GLOBAL, _CHUNK = 2, 1, 8 << 20


def _sections(f) -> dict[int, tuple[int, int, int, int]]:
    """Section index -> (type, offset, size, link) of an ELF64 little-endian file."""
    head = f.read(64)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return {}
    f.seek(struct.unpack_from("<Q", head, 0x28)[0])
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)  # an ELF64 section header is 64 bytes, as unpacked
    headers = struct.iter_unpack("<IIQQQQIIQQ", f.read(shentsize * shnum))
    return {i: (kind, off, size, link) for i, (_, kind, _, _, off, size, link, _, _, _) in enumerate(headers)}


def _name_offsets(f, offset: int, size: int, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """Where each of ``names`` starts in the string table at ``offset`` (read in chunks: it is ~76 MB)."""
    found: dict[bytes, int] = {}
    longest = max(len(n) for n in names) + 2
    pos, tail = 0, b"\0"
    while pos < size and len(found) < len(names):
        f.seek(offset + pos)
        chunk = tail + f.read(min(_CHUNK, size - pos))
        base = pos - len(tail)
        for n in names:
            at = chunk.find(b"\0" + n + b"\0")
            if n not in found and at >= 0:
                found[n] = base + at + 1
        pos += _CHUNK
        tail = chunk[-longest:]
    return found


def _read_name(f, strtab: int, at: int) -> bytes:
    f.seek(strtab + at)
    return f.read(512).split(b"\0", 1)[0]


@functools.lru_cache(maxsize=1)
def _functions() -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr] | None:
    """oneDNN's (getter, setter) of the primitive cache capacity in the loaded libtorch_cpu, or None."""
    import numpy as np
    import torch

    path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    if not sys.platform.startswith("linux") or not path.is_file():
        return None
    with open(path, "rb") as f:
        sections = _sections(f)
        symtab = next((s for s in sections.values() if s[0] == 2), None)  # SHT_SYMTAB
        if symtab is None or symtab[3] not in sections:
            return None  # stripped
        strtab = sections[symtab[3]][1]
        offsets = _name_offsets(f, strtab, sections[symtab[3]][2], (_GET, _SET))
        if len(offsets) < 2:
            return None
        f.seek(symtab[1])
        syms = np.frombuffer(f.read(symtab[2]), dtype=np.dtype(_SYM))
        values = {n: syms["value"][syms["name"] == at] for n, at in offsets.items()}
        # An exported function of the same file places the local ones: its address in this
        # process minus its value in the table is where the file was loaded.
        exported = np.flatnonzero((syms["info"] == (_GLOBAL << 4 | _FUNC)) & (syms["other"] == 0) & (syms["shndx"] != 0))
        anchors = [(_read_name(f, strtab, int(syms["name"][i])), int(syms["value"][i])) for i in exported[:20]]
    if any(len(v) != 1 or int(v[0]) == 0 for v in values.values()):
        return None
    lib = ctypes.CDLL(str(path))
    for name, value in anchors:
        try:
            bias = ctypes.cast(lib[name.decode()], ctypes.c_void_p).value - value
        except (AttributeError, UnicodeDecodeError):
            continue
        get = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(bias + int(values[_GET][0]))
        set_ = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(bias + int(values[_SET][0]))
        return get, set_
    return None


def primitive_cache_capacity() -> int | None:
    """oneDNN's primitive cache capacity in this process (entries), or None where the seam cannot reach it."""
    funcs = _functions()
    if funcs is None:
        return None
    capacity = ctypes.c_int(-1)
    # dnnl_success is 0; oneDNN caps the capacity at 2^20 entries (the default is 1024).
    if funcs[0](ctypes.byref(capacity)) != 0 or not 0 <= capacity.value <= 1 << 20:
        return None
    return capacity.value


def clear_primitive_cache() -> bool:
    """Empty oneDNN's primitive cache, keeping its capacity; True when done (see the module docstring)."""
    if "torch" not in sys.modules:
        return False  # nothing built yet
    check_version("torch", TORCH_VERSIONS, SEAM)
    capacity = primitive_cache_capacity()
    if capacity is None:
        return False
    set_ = _functions()[1]  # type: ignore[index]
    return set_(0) == 0 and set_(capacity) == 0
