"""The README and docs/video.md as a video user reads them: every `restore` option named, no mode video refuses offered."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _restore_options() -> set[str]:
    import argparse

    from gpen_core.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {tuple(a.option_strings) for a in sub.choices["restore"]._actions if a.option_strings and "--help" not in a.option_strings}


def test_the_readme_names_every_restore_option() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = lambda o: re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", readme)  # noqa: E731 - `-o` or `--output`
    missing = sorted(opts[-1] for opts in _restore_options() if not any(named(o) for o in opts))
    assert not missing, f"README.md does not name {missing}"


def test_the_video_client_example_offers_only_modes_that_make_a_video() -> None:
    doc = (ROOT / "docs" / "video.md").read_text(encoding="utf-8")
    example = doc[doc.index("## From another program"):]
    example = example[example.index("```python"):example.index("```", example.index("```python") + 3)]
    modes_line = next(line for line in example.splitlines() if '"low",' in line)
    assert "auto, low, balanced or quality" in modes_line and "faces-only returns crops" in modes_line
