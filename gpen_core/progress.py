"""What a long piece of work reports as it goes: the two progress callbacks and the time left in words."""

from __future__ import annotations

from collections.abc import Callable

# (fraction done in [0, 1], what is being done now, in words): requests, conversions, checks.
Progress = Callable[[float, str], None]

# (units done, units in all; None, or 0 for a clip whose frame count is unknown, when not known):
# bytes downloaded, tiles upscaled, video frames restored.
CountProgress = Callable[[int, int | None], None]


def duration_text(seconds: float) -> str:
    """'40 s' (to 5 s, at least 5) under 90 s, else '3 min': every time estimate shown, after "about"."""
    return f"{max(5, round(seconds / 5) * 5):.0f} s" if seconds < 90 else f"{round(seconds / 60):.0f} min"


def left_text(seconds: float | None, untimed: int = 0) -> str:
    """'about 40 s left', 'about 3 min left', 'about 40 s left, and 4 steps not timed yet'; '' when unknown;
    'finishing' when every timed step is done (the last frame: only the encoder's flush is left, never 'about 5 s')."""
    if seconds is None:
        return ""
    if seconds < 0.5 and not untimed:
        return "finishing"
    steps = f", and {untimed} step{'s' if untimed > 1 else ''} not timed yet" if untimed else ""
    return f"about {duration_text(seconds)} left{steps}"
