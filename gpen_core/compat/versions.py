"""The installed version of a library we patch, checked against the range a seam was written for."""

from __future__ import annotations

import importlib.metadata
import re
import warnings

# Each (library, seam) is checked once per process: a warning per request would bury the log.
_WARNED: set[tuple[str, str]] = set()


class UnsupportedVersionWarning(UserWarning):
    """A library we patch is a release the patch was not written for; it may misbehave."""


def parse(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: "6.31.0" -> (6, 31, 0), "2.60.0rc1" -> (2, 60, 0)."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0].split("rc")[0])[:3])


def installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(dist: str, versions: tuple[tuple[int, ...], tuple[int, ...]], seam: str) -> str | None:
    """The installed version of ``dist`` (None: not installed); warns once per process when it is outside
    ``versions`` = (lowest, first unsupported): the seam's own checks fail loudly if the internals moved."""
    version = installed(dist)
    if version is None:
        return None
    lo, hi = versions
    if not lo <= parse(version) < hi and (dist, seam) not in _WARNED:
        _WARNED.add((dist, seam))
        span = f">= {'.'.join(map(str, lo))}, < {'.'.join(map(str, hi))}"  # as people write it
        warnings.warn(f"{seam} was written for {dist} {span}; {dist} {version} is installed. "
                      f"If it misbehaves, install a {dist} release in that range.", UnsupportedVersionWarning, stacklevel=3)
    return version
