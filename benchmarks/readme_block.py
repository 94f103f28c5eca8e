"""Rewrite one generated block of README.md: the text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def replace_block(name: str, body: str, path: Path = README) -> None:
    """Put ``body`` between the ``name`` markers of ``path``; SystemExit when the markers are missing."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path} has no {start} … {end} block to replace")
    path.write_text(re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: f"{start}\n{body}\n{end}", text, flags=re.S))
