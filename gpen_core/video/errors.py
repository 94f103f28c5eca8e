"""A clip stopped on request, and the one wording of a clip with no frame that decodes (one pass and segments)."""

from __future__ import annotations

from gpen_core.errors import GPENError, InputError


class VideoStopped(GPENError):
    """The clip was stopped before its end (a ``threading.Event`` set, Ctrl-C): the partial output was removed."""

    exit_code = 130


def no_frames(span: str = "", decoder: str | None = None) -> InputError:
    """A clip with no frame that decodes (in ``span``, e.g. " between 2 s and 5 s"), with what the decoder said."""
    said = f" (the decoder said: {decoder})" if decoder else ""
    return InputError(f"the video has no frame that decodes{span}{said}: it is empty or damaged from its start. "
                      "Re-export or re-download it, or choose another part of it.")
