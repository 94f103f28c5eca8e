"""Labels that do not overstate, and figures that agree with each other for the same photo."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from gpen_app import panels as ui
from gpen_app import readiness, weights_view

from .test_app import EXAMPLE, _fake_result
from .test_readiness import files_with, needs_cpu, PLENTY


# ------------------------------------------------------------------ labels


def test_a_generator_with_no_published_checksum_is_not_called_verified() -> None:
    files = files_with(("GPEN-BFR-512", "retinaface-mobilenet0.25"))
    r = readiness.assess(files, needs_cpu(), PLENTY)
    panel = weights_view.weights_markdown(r, files, "/models", mode="balanced")
    gen = next(line for line in panel.splitlines() if "GPEN-BFR-512" in line)
    det = next(line for line in panel.splitlines() if "MobileNet" in line)
    assert "verified" in det and "not verified" not in det  # its sha256 is published and matched
    assert "present, verified" not in gen and "no published checksum" in gen
    listing = weights_view.all_weights_markdown(files, "/models")
    assert "present, verified" not in next(line for line in listing.splitlines() if "GPEN-BFR-512" in line)


def test_an_unpinned_generator_reads_the_same_in_the_panel_the_hardware_check_and_info() -> None:
    """One wording for a file with no published checksum: the check's weights column said "release not
    verified" where the panel and `info` said "not verified as the release"."""
    from gpen_core.hwcheck import report

    words = "(no published checksum: not verified as the release)"
    assert weights_view.state_text("GPEN-BFR-512", "verified") == f"present {words}"
    cell = report.weights_cell(SimpleNamespace(weights="real", model="GPEN-BFR-512", detector="mobilenet0.25"))
    assert cell == f"GPEN-BFR-512 file {words}"
    assert weights_view.state_text("retinaface-mobilenet0.25", "verified") == "present, verified"


@pytest.mark.parametrize(
    ("weights", "detector", "must", "must_not"),
    [
        ("real", "mobilenet0.25", "no published checksum", "| real |"),
        ("real", "mobilenet0.25 (synthetic weights, boxes given)", "detector: random weights", "| real |"),
        ("synthetic", "given boxes", "no detector: fixed boxes", "| real |"),
    ],
)
def test_the_hardware_checks_weights_column_says_what_ran(weights: str, detector: str, must: str, must_not: str) -> None:
    from gpen_core.hwcheck import report

    m = SimpleNamespace(weights=weights, model="GPEN-BFR-512", detector=detector)
    cell = report.weights_cell(m)  # type: ignore[arg-type]
    assert must in cell and cell != must_not.strip("| ")


def test_the_table_does_not_say_real_for_a_random_detector() -> None:
    from gpen_core.engine import profile_records as records
    from gpen_core.hwcheck import report

    fields = {f: None for f in records.ModeProfile.__dataclass_fields__}
    m = records.ModeProfile(**(fields | dict(
        mode="balanced", model="GPEN-BFR-512", weights="real", dtype="bfloat16",
        detector="mobilenet0.25 (synthetic weights, boxes given)", peak_ram_bytes=10**9, peak_vram_bytes=None,
        peak_vram_reserved_bytes=None, peak_bytes=10**9, seconds_per_face=1.0, total_s=3.0, stepped_down_to=None,
        failed=False)))
    prof = SimpleNamespace(modes={"balanced": m}, binding="RAM", device="cpu")
    table = report.format_table(prof, fits=False)  # type: ignore[arg-type]
    row = next(line for line in table.splitlines() if line.startswith("| `balanced`"))
    assert not row.rstrip().endswith("| real |") and "detector: random weights" in row


# ------------------------------------------------------------------ figures


def test_the_upscale_line_and_autos_reason_give_one_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    import app
    from gpen_core.engine import budget

    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64 * 10**9))
    line = app.upscale_view(str(EXAMPLE), 2, "auto")
    with Image.open(EXAMPLE) as im:
        size = im.size
    r = app.get_restorer()
    from gpen_core.options import RestoreOptions

    opts = RestoreOptions(upscale=2)
    reason = budget.choose("cpu", size, r.models.models_dir, available=lambda m: r.models.weights_present(m, opts, False),
                           work=budget.Work(upscale=2)).reason
    said = re.search(r"extra memory about ([\d.]+ [MG]B)", line)
    meant = re.search(r"~([\d.]+ [MG]B) of it estimated for upscaling", reason)
    assert said and meant, (line, reason)
    assert said.group(1) == meant.group(1), (line, reason)


def test_faces_only_photo_row_gives_the_sheets_size_not_the_photos() -> None:
    from gpen_core.modes import MODES

    sheet = Image.new("RGB", (2048, 512))
    buf = io.BytesIO()
    sheet.save(buf, "PNG")
    r = _fake_result(mode=MODES["faces-only"], requested_mode="faces-only", output_format="png", encoded=buf.getvalue(),
                     input_size=(1204, 645), processed_size=(1204, 645))
    row = next(line for line in ui.metrics_markdown(r).splitlines() if line.startswith("| Photo |"))
    assert "2048×512" in row and "1204×645 → PNG" not in row, row


def test_the_panel_gives_the_result_size_in_the_file_widgets_units() -> None:
    # Gradio's FilePreview: 1024-based, one decimal, "KB" / "MB" (read from its bundle, see file_size_text)
    assert ui.file_size_text(40_002) == "39.1 KB"
    assert ui.file_size_text(1_789_735) == "1.7 MB"
    assert ui.file_size_text(900) == "900.0 B"
    r = _fake_result(encoded=np.zeros(2_500_000, np.uint8).tobytes())
    assert "2.4 MB" in ui.metrics_markdown(r)


# ------------------------------------------------------------ mode labels


@pytest.mark.parametrize("native_bf16", [True, False])
def test_balanced_label_states_the_dtype_this_cpu_runs_and_the_format(monkeypatch: pytest.MonkeyPatch, native_bf16: bool) -> None:
    from gpen_core.networks import plan
    from gpen_app import mode_labels

    feats = {k: False for k in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "arm_bf16", "torch_avx512")}
    monkeypatch.setattr(plan, "cpu_features", lambda: feats | {"native_bf16": native_bf16})
    labels = dict((v, label) for label, v in mode_labels.mode_choices("cpu"))
    balanced = labels["balanced"]
    if native_bf16:
        assert "in bfloat16" in balanced and "half the memory" in balanced
    else:  # the engine's plan runs float32 here: no promise of half the memory
        assert "in float32 (this CPU has no native bfloat16)" in balanced and "half" not in balanced
    assert "writes JPEG" in balanced  # even from a PNG: said before the user finds out
    assert "writes PNG" in labels["quality"] and "writes JPEG" in labels["low"]
    assert "in float32" in labels["quality"] and "in float32" in labels["low"]


def test_a_mode_with_a_missing_file_is_unavailable_and_names_the_download() -> None:
    from gpen_app import mode_labels

    files = files_with(("GPEN-BFR-256", "retinaface-mobilenet0.25"))
    labels = dict((v, label) for label, v in mode_labels.mode_choices("cpu", files=files))
    assert "unavailable" not in labels["low"]
    assert labels["balanced"].endswith("— unavailable: download " + readiness.files_text(["GPEN-BFR-512"], files))
    assert "ResNet-50 detector (" in labels["quality"].split("unavailable: download ")[1]


def test_the_upload_note_agrees_with_the_restored_size(tmp_path) -> None:
    """A 1297×1920 JPEG is previewed at 1024 px; the note must not say the photo was shrunk (the result is 1297×1920)."""
    from gpen_app import restore_tab

    path = tmp_path / "tall.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (1920, 1297, 3), dtype=np.uint8)).save(path, quality=90)
    md = restore_tab.preview(str(path)).markdown
    assert "shrunk at decode" not in md, md
    assert "Restore reads all 1297×1920 pixels" in md, md
    assert "low" not in md  # no mode shrinks a photo under 2048 px


def test_the_missing_weights_toast_is_plain_words_with_the_apps_fix() -> None:
    from gpen_app.messages import shown_error
    from gpen_core.weights.missing import DOWNLOADS_OFF_FOR_CALL, missing_error

    shown = shown_error(missing_error(["GPEN-BFR-512", "retinaface-mobilenet0.25"], "/models", DOWNLOADS_OFF_FOR_CALL))
    assert "`" not in shown.text, shown.text
    assert "“python -m gpen_core download GPEN-BFR-512 retinaface-mobilenet0.25”" in shown.text
    assert "for this call" not in shown.text and "press the Download button in the weights panel" in shown.text
    assert "`python -m gpen_core download" in shown.panel  # the panel renders it as code
