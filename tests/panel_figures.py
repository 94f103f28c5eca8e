"""Reading figures back out of the result panel's Markdown, independently of the code that wrote them."""

from __future__ import annotations

import re

_UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


def shown_peak_ram(md: str) -> float:
    """The bold "Peak RAM" figure of a result panel, in bytes ("**1.23 GB**" -> 1.23e9).

    The panel rounds (GB to 2 decimals: ±5 MB; MB to whole MB: ±0.5 MB), so compare with
    ``pytest.approx(..., abs=5e6)``.
    """
    m = re.search(r"Peak RAM \| \*\*([\d.]+) (kB|MB|GB)\*\*", md)
    assert m, f"no bold Peak RAM figure in the panel:\n{md}"
    return float(m.group(1)) * _UNITS[m.group(2)]


def bold_bytes(text: str) -> list[float]:
    """Every bold byte figure ("**456 MB**", "**1.23 GB**") in ``text``, in bytes, in order."""
    return [float(v) * _UNITS[u] for v, u in re.findall(r"\*\*([\d.]+) (kB|MB|GB)\*\*", text)]
