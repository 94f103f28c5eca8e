"""The video path's own refusal: a clip stopped on request (the other refusals are :mod:`gpen_core.errors` types)."""

from __future__ import annotations

from gpen_core.errors import GPENError


class VideoStopped(GPENError):
    """The clip was stopped before its end (a ``threading.Event`` set, Ctrl-C): the partial output was removed."""

    exit_code = 130
