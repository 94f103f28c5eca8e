"""The error hierarchy; every message says what happened and how to fix it. Only the edges (the app, the CLI)
translate these into ``gr.Error`` or exit codes: the library raises and never prints."""

from __future__ import annotations


def megabytes(n: int) -> str:
    """A size as every refusal words it (a file's, a request's): '12.3 MB', '25 MB' when whole, '4.1 KB', '512 bytes'."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB" if n % 1_000_000 else f"{n // 1_000_000} MB"
    return f"{n / 1e3:.1f} KB" if n >= 1000 else f"{n} bytes"


class GPENError(Exception):
    """Base class: anything the user can act on. ``str(error)`` is one or two lines for people;
    ``details`` holds the long form (every path looked at, each download attempt) for logs and ``--verbose``."""

    exit_code = 1

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class Stopped(GPENError):
    """Work stopped at its user's request (the app's Stop) before it ended: nothing of it kept."""


class InputError(GPENError):
    """The input (image file, argument, option) cannot be used as given."""

    exit_code = 2


class PixelFormatError(InputError, ValueError):
    """An array handed in is not RGB uint8 H×W×3; also a ``ValueError``, as NumPy reports a wrong array, so a
    library caller's ``except ValueError`` still catches it."""


class WeightsError(GPENError):
    """A checkpoint is missing, corrupt, or not the network it should be."""

    exit_code = 3


class WeightsCorruptError(WeightsError):
    """A checkpoint file is there but its bytes are damaged (truncated, bad archive): download it again."""


class ResourceError(GPENError):
    """Not enough memory (RAM or VRAM) even in the lightest mode, or the server is busy."""

    exit_code = 4


class OutOfMemory(ResourceError):
    """An allocation failed in one step, saying which and how big; the Restorer then steps down a mode, so the user
    sees it only when even ``low`` cannot run."""
