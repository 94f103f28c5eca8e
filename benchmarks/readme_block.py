"""Rewrite one generated block of the docs: the text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``.

Not a measurement: the writer every table script here uses for its block.

Each block lives in one file; ``BLOCKS`` says which, so a generator names the block and
never a path. The README keeps what a user needs first (the modes table); the measured
detail lives under ``docs/``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

BLOCKS: dict[str, Path] = {
    "modes-table": README,  # benchmarks/profile_table.py
    "tasks-table": README,  # benchmarks/profile_table.py (GPEN's other tasks, under the modes table)
    "perf-table": DOCS / "performance.md",  # benchmarks/bench.py (and its GPU row: benchmarks/gpu_check.py)
    "advice-table": DOCS / "advice.md",  # benchmarks/advice.py
    "upscale-table": DOCS / "upscaling.md",  # benchmarks/bench_upscale.py
}


def block_path(name: str) -> Path:
    """The file that holds block ``name``."""
    return BLOCKS[name]


def require_blocks(names: list[str]) -> None:
    """SystemExit naming every block of ``names`` whose markers its file lacks (check before writing any)."""
    missing = [f"<!-- {n}:start --> … <!-- {n}:end --> in {block_path(n)}" for n in names
               if not all(f"<!-- {n}:{e} -->" in block_path(n).read_text(encoding="utf-8") for e in ("start", "end"))]
    if missing:
        raise SystemExit("add these markers first: " + "; ".join(missing))


def replace_block(name: str, body: str, path: Path | None = None) -> Path:
    """Put ``body`` between the ``name`` markers of ``path`` (default: the block's file); return that file.

    SystemExit when the markers are missing.
    """
    path = path or block_path(name)
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise SystemExit(f"{path} has no {start} … {end} block to replace")
    path.write_text(re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: f"{start}\n{body}\n{end}", text, flags=re.S),
                    encoding="utf-8")
    return path
