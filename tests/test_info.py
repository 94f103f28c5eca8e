"""`python -m gpen_core info`'s data: versions, device, CPU, memory, weights."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from importlib import metadata

from gpen_core.weights import lookup as weights
from gpen_core.hwcheck.info import CPU_FLAGS_OF_INTEREST, collect_info, format_info

from .factories import TINY, write_checkpoint


def test_collect_info_reports_this_environment():
    import torch

    info = collect_info()
    assert info.torch == metadata.version("torch") and info.torch.split("+")[0] in torch.__version__
    assert info.numpy == metadata.version("numpy")
    assert info.python == sys.version.split()[0]
    assert info.models_dir == weights.models_dir()
    assert info.device == "cpu" if not torch.cuda.is_available() else info.device.startswith("cuda:0")
    assert info.cuda_vram_bytes is None or info.cuda_vram_bytes > 0
    assert set(info.cpu_flags) <= set(CPU_FLAGS_OF_INTEREST)
    assert info.ram_total_bytes and 0 < info.ram_available_bytes <= info.ram_total_bytes
    assert info.cores_logical and info.cores_logical >= 1
    assert [w.name for w in info.weights] == list(weights.REGISTRY)
    json.dumps(asdict(info), default=str)  # the CLI's --json path


def test_info_does_not_import_gradio(monkeypatch):
    monkeypatch.setitem(sys.modules, "gradio", None)  # any `import gradio` now raises ImportError
    assert collect_info().gradio == metadata.version("gradio")


def test_format_info_mentions_versions_and_every_weight():
    """A GPEN file (no published sha256: a TINY checkpoint of that name passes) is "present, not verified as the
    release", as the weights panel and the hardware check say; it read "ok". A pinned file matched is "ok"."""
    from .conftest import shared_path

    write_checkpoint(weights.models_dir() / "GPEN-BFR-256.pth", TINY)
    detector = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    (weights.models_dir() / detector.name).symlink_to(detector)
    info = collect_info()
    text = format_info(info)
    assert info.torch in text and str(info.models_dir) in text
    for name in weights.REGISTRY:
        assert name in text
    line_256 = next(line for line in text.splitlines() if "GPEN-BFR-256" in line)
    assert line_256.split()[1] == "present" and line_256.endswith("(no published checksum: not verified as the release)")
    line_det = next(line for line in text.splitlines() if "retinaface-mobilenet0.25" in line)
    assert line_det.split()[1] == "ok" and "not verified" not in line_det
    line_512 = next(line for line in text.splitlines() if "GPEN-BFR-512" in line)
    assert "missing" in line_512 and "python -m gpen_core download GPEN-BFR-512" in line_512


def test_info_gives_sizes_as_the_weights_panel_and_the_report_do(capsys):
    """A missing file's size is the one the weights panel and errors give (GPEN-BFR-512's checksum-less download:
    "~284 MB", an estimate), and memory is in decimal GB, as the hardware check's report gives it."""
    from gpen_core.cli import main

    assert main(["info"]) == 0
    text = capsys.readouterr().out
    line_512 = next(line for line in text.splitlines() if line.strip().startswith("GPEN-BFR-512"))
    assert "(~284 MB)" in line_512 and "unknown" not in line_512
    ram = next(line for line in text.splitlines() if line.startswith("ram"))
    assert "GiB" not in ram and ram.count(" GB") == 2, ram
