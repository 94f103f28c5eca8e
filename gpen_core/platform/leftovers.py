"""What a killed run left on disk (``kill -9`` skips every clean-up), told by the pid in its name
(``.out.mp4.4242.partial``, ``gpen-seg-4242-…``), and swept: only our names, this user's, whose process is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path


_PARTIAL = re.compile(r"\.(.+)\.(\d+)\.partial")


def partial_name(name: str, pid: int) -> str:
    """The name under which process ``pid`` writes the file ``name`` until it is whole (``.NAME.PID.partial``)."""
    return f".{name}.{pid}.partial"


def partial_of(name: str) -> tuple[str, int] | None:
    """(the file's name, the writer's pid) for a name :func:`partial_name` gives; None for any other name."""
    m = _PARTIAL.fullmatch(name)
    return (m.group(1), int(m.group(2))) if m else None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (this one included); a pid owned by another user counts as alive."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _ours_and_dead(path: Path, pid_text: str) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    owner = getattr(os, "getuid", lambda: st.st_uid)()
    return pid_text.isdigit() and st.st_uid == owner and not pid_alive(int(pid_text))


def sweep_partials(dst: Path) -> list[Path]:
    """Remove ``.NAME.PID.partial`` files of ``dst`` (only its name) whose process is gone; return them."""
    removed = []
    with contextlib.suppress(OSError):
        for p in dst.parent.iterdir():
            of = partial_of(p.name)
            if of and of[0] == dst.name and not p.is_dir() and _ours_and_dead(p, str(of[1])):
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed.append(p)
    return removed


def sweep_folders(root: Path, prefix: str) -> list[Path]:
    """Remove folders ``<prefix><PID>-…`` in ``root`` whose process is gone (this user's, never a link); return them."""
    removed = []
    with contextlib.suppress(OSError):
        for d in root.glob(f"{prefix}*"):
            pid_text = d.name[len(prefix):].split("-", 1)[0]
            if d.is_dir() and not d.is_symlink() and _ours_and_dead(d, pid_text):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    return removed
