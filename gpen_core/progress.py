"""What a long piece of work reports as it goes: the two progress callbacks, named for what they count
(defined once, so one function serves a request, a conversion, a hardware check or a download)."""

from __future__ import annotations

from collections.abc import Callable

# (fraction done in [0, 1], what is being done now, in words): requests, conversions, checks.
Progress = Callable[[float, str], None]

# (units done, units in all; None, or 0 for a clip whose frame count is unknown, when not known):
# bytes downloaded, tiles upscaled, video frames restored.
CountProgress = Callable[[int, int | None], None]
