"""An exception as the user sees it: a title by its type, plain text for the pop-up and API clients, Markdown for
the panel. Errors that are not :class:`GPENError` are our bugs: logged with their trace, shown as one line."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpen_core.errors import GPENError, InputError, ResourceError, Stopped, WeightsCorruptError, WeightsError
from gpen_app.panels import error_markdown
from gpen_core.weights.missing import DOWNLOADS_OFF_FOR_CALL
from gpen_app.user_paths import public_message

log = logging.getLogger("gpen.app")

# Most specific first: the first class the exception is an instance of names it.
TITLES: tuple[tuple[type[BaseException], str], ...] = (
    (InputError, "Cannot use this input"),
    (WeightsCorruptError, "Weights corrupt"),
    (WeightsError, "Weights missing"),
    (ResourceError, "Not enough memory"),
    (Stopped, "Stopped"),
    (GPENError, "Error"),
)
INTERNAL = "Internal error"


@dataclass(frozen=True)
class ShownError:
    title: str
    text: str  # plain text for the pop-up and API clients: "<title>. <message>"
    panel: str  # Markdown for the result panel


class AlreadyShown(Exception):
    """A :class:`ShownError` raised again unchanged where ZeroGPU's GPU call (maybe another process) returned it."""

    def __init__(self, shown: ShownError) -> None:
        super().__init__(shown.text)
        self.shown = shown


# A refusal's pop-up closes by itself after the time to read it (the result panel keeps the same words):
# one that never closes stayed over the next result. Seconds = base + one per this many words, capped.
TOAST_BASE_S, TOAST_WORDS_PER_S, TOAST_MAX_S = 8.0, 4.0, 45.0


def toast_seconds(text: str) -> float:
    """How long a pop-up with ``text`` stays (longer messages longer, never for ever)."""
    return min(TOAST_MAX_S, TOAST_BASE_S + len(text.split()) / TOAST_WORDS_PER_S)


def stopped_text(done: int, total: int) -> str:
    """A clip stopped on its visitor's request, said as an outcome: what was restored, and that nothing was kept."""
    frames = f"{done} of {total} frames" if total > 0 else f"{done} frame{'s' if done != 1 else ''}"
    return f"Stopped: {frames} restored; nothing kept (a stopped clip is removed). Press Restore video to start again."


def shown_error(exc: BaseException, doing: str = "Restore", names: Mapping[str, str] | None = None,
                public: bool = False) -> ShownError:
    """How ``exc`` is shown. ``names``: server paths in the message → what the visitor knows them as (an upload's
    own file name). ``public`` (a shared server): the server's other folders by their role, other paths cut to
    their last part (:func:`~gpen_app.user_paths.public_message`)."""
    if isinstance(exc, AlreadyShown):
        return exc.shown
    if isinstance(exc, GPENError):
        title = next(t for cls, t in TITLES if isinstance(exc, cls))
        message = str(exc).replace(DOWNLOADS_OFF_FOR_CALL, APP_WORDS)
        names = names or {}
        for path in sorted(filter(None, names), key=len, reverse=True):
            message = message.replace(path, names[path])
    else:
        log.error("%s failed", doing, exc_info=exc)
        title = INTERNAL
        message = (f"{doing} failed unexpectedly ({type(exc).__name__}: {shortened(str(exc), 300)}). "
                   "The server is still running; the server log has the details.")
    if public:
        message = public_message(message)
    # The plain text starts with the title; inline code in quotes, not backticks; a tag's brackets (a shared server's
    # <models folder>) as ‹ ›: the pop-up renders HTML, and drops an unknown tag with the rest of the message.
    plain = _CODE.sub(lambda m: f"“{m.group(1)}”", message)
    plain = f"{title}. {_TAG.sub(lambda m: f'‹{m.group(1)}' + ('›' if m.group(2) else ''), plain)}"
    return ShownError(title, plain, error_markdown(title, message))


def shortened(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (then "…"), before the first bracket the cut would leave open."""
    if len(text) <= limit:
        return text
    cut, opened = text[:limit], []
    for i, ch in enumerate(cut):
        if ch in "([{":
            opened.append(i)
        elif ch in ")]}" and opened:
            opened.pop()
    return (cut[:opened[0]] if opened else cut).rstrip(" ,;:") + "…"


# The library's words for a caller that turned downloads off, as the app's user reads them: the
# app never downloads inside a restore, and its weights panel has the button that does.
APP_WORDS = ("this app downloads only when asked: press the Download button in the weights panel "
             "(Restore tab, under the options; its label names the files)")
_CODE = re.compile(r"`([^`\n]+)`")
_TAG = re.compile(r"<(?=[A-Za-z/!?])([^<>\n]*)(>?)")
