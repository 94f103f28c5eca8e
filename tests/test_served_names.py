"""The app's files are named beyond guessing: Gradio 6 serves every file under its temp folder (the uploads' and
our results/, pasted/) to whoever asks for its path at /gradio_api/file=, so a visitor must not be able to work
out the name of another visitor's result, clip, pasted photo or painted layer.

tempfile's names are 8 characters drawn from one Mersenne Twister per process, and a visitor reads such names in
the paths of their own results: enough of them give the generator's state, and with it every name before and
after. Here tempfile's generator is one whose names are known, as they would be to that visitor.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gpen_core.images import outputs
from gpen_app import uploads
from gpen_app import video_tab

PNG_DATA_URL = "data:image/png;base64,iVBORw0KGgo="

MAKERS: dict[str, Callable[[Path], Path]] = {
    "result": lambda d: outputs.save_result(d, "photo_restored.jpg", b"jpeg"),
    "pasted photo": lambda d: uploads.save_data_url(PNG_DATA_URL, d),
    "painted layer": lambda d: uploads.save_bytes(b"png", "layer_0.png", d),
    "clip": lambda d: video_tab.results_path(d, "clip.mp4", "low"),
}


@pytest.fixture()
def known_names(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The names tempfile will hand out next, known in advance (its generator's state recovered)."""
    sequence = tempfile._RandomNameSequence()
    sequence.rng.seed(20261207)
    monkeypatch.setattr(tempfile, "_name_sequence", sequence)
    twin = copy.deepcopy(sequence)
    return {next(twin) for _ in range(100)}


@pytest.mark.parametrize("kind", MAKERS)
def test_a_served_file_is_in_a_folder_nobody_can_predict(kind: str, known_names: set[str], tmp_path: Path) -> None:
    path = MAKERS[kind](tmp_path)
    folder = path.parent
    assert folder.parent == tmp_path and folder.is_dir()
    assert not any(name in folder.name for name in known_names), folder.name
    random_part = folder.name.rsplit("-", 1)[-1]
    assert len(random_part) >= 32 and int(random_part, 16) >= 0  # 128 bits from the OS's generator (hex)
    assert (folder.stat().st_mode & 0o777) == 0o700  # as tempfile makes them: this user's only

