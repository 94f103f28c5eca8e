"""OpenVINO conversions made once for the session (loaded by conftest's ``pytest_plugins``).

A conversion traces the network and writes its IR: 2-3 s for the smallest generator on 2 busy
cores, more for real architectures, whatever the test then does with it. Tests whose subject is
what comes after (a precision, the IR's content, a damaged entry, the CLI's record) take it from
here: ``converted_ir.seed(name, models_dir)`` copies into ``<models_dir>/openvino`` what a first
use of ``name`` leaves there (the IR, its meta.json, and for a synthetic network its weights file),
as the test's own copy to read, extend or damage. A test that checks a conversion happens (its
note, its time, the memory guard before it) converts for itself.

``name``: a reference under ../shared/reference (``gpen_tiny64``, ``gpen_bfr256_random``), whose
checkpoint a test writes as ``<name>.pth`` with float32 values (the same bytes, so the same cache
key); ``synthetic-mobilenet0.25`` (the hardware check's random-weight detector); or
``tiny-override-256`` (the checkpoint the hardware check writes for a ``{"GPEN-BFR-256": TINY}``
model-config override: the same file name and bytes in whichever temporary folder it writes it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import shared_path

REFERENCES = ("gpen_tiny64", "gpen_bfr256_random")
SYNTHETIC_DETECTOR = "synthetic-mobilenet0.25"
TINY_OVERRIDE = "tiny-override-256"


def reference_checkpoint(name: str, folder: Path) -> Path:
    """``<folder>/<name>.pth``: the reference's weights as float32, as the OpenVINO tests write them."""
    import torch

    ref = torch.load(shared_path("reference", f"{name}.pt"), weights_only=True)
    ckpt = folder / f"{name}.pth"
    torch.save({k: v.float() for k, v in ref["state_dict"].items()}, ckpt)
    return ckpt


class ConvertedIRs:
    """Each name converted the first time it is asked for, in its own models folder under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _made(self, name: str) -> Path:
        """The session's models folder holding ``name`` converted."""
        from gpen_core.runtimes.openvino import generator as ov_generator

        home = self.root / name
        if (home / "openvino").is_dir():
            return home
        home.mkdir(parents=True)
        if name in REFERENCES:
            ov_generator.convert(reference_checkpoint(name, home), models_dir=home)
        elif name == TINY_OVERRIDE:
            from gpen_core.hwcheck.workloads import synthetic_checkpoint

            from .factories import TINY

            ov_generator.convert(synthetic_checkpoint("GPEN-BFR-256", home, TINY), models_dir=home)
        elif name == SYNTHETIC_DETECTOR:
            from gpen_core.engine.network_loads import openvino_detector

            openvino_detector(None, "mobilenet0.25", models_dir=home)
        else:
            raise ValueError(f"no conversion named {name!r}; known: {', '.join((*REFERENCES, SYNTHETIC_DETECTOR, TINY_OVERRIDE))}")
        return home

    def seed(self, name: str, models_dir: Path | None = None) -> Path:
        """Copy the session's conversion of ``name`` into ``models_dir`` (default: the test's ``GPEN_HOME``);
        returns that models folder's OpenVINO cache."""
        from gpen_core.runtimes.openvino.base import cache_root

        dest = cache_root(models_dir)
        shutil.copytree(self._made(name) / "openvino", dest, dirs_exist_ok=True)
        return dest


@pytest.fixture(scope="session")
def converted_ir(tmp_path_factory: pytest.TempPathFactory) -> ConvertedIRs:
    from gpen_core.runtimes.openvino import base

    if base.unavailable_reason() is not None:
        pytest.skip(f"needs OpenVINO: {base.unavailable_reason()}")
    return ConvertedIRs(tmp_path_factory.mktemp("converted_ir"))
