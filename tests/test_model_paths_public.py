"""Models-folder links are confined; a non-checkpoint never shows its bytes; web users never see server folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpen_core.errors import InputError, WeightsError
from gpen_app.user_paths import checked_model, public_message

from .factories import TINY, write_checkpoint


def test_a_link_out_of_the_models_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "evil.pth").symlink_to("/etc/passwd")
    with pytest.raises(InputError) as e:
        checked_model("evil.pth", folder=folder)
    msg = str(e.value)
    assert "evil.pth in the models folder is a link to a file outside it" in msg
    assert "/etc" not in msg and "passwd" not in msg and "root" not in msg


def test_a_link_inside_the_models_folder_and_a_plain_file_are_accepted(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    (folder / "mine").mkdir(parents=True)
    real = write_checkpoint(folder / "mine" / "tuned.pth", TINY, seed=1)
    (folder / "alias.pth").symlink_to(real)
    assert checked_model("alias.pth", folder=folder) == str(folder / "alias.pth")
    assert checked_model("mine/tuned.pth", folder=folder) == str(real)


def test_a_file_that_is_not_a_checkpoint_is_named_but_its_bytes_are_never_shown(tmp_path: Path) -> None:
    from gpen_core.networks.checkpoint import load_generator

    passwd = tmp_path / "passwd.pth"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(WeightsError) as e:
        load_generator(passwd)
    msg = str(e.value)
    assert "is not a PyTorch checkpoint" in msg
    assert "root:x" not in msg and "72 6f 6f 74" not in msg and "726f6f74" not in msg


def test_public_messages_name_folders_by_their_role(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.weights import lookup as weights

    models = tmp_path / "srv" / "models"
    models.mkdir(parents=True)
    monkeypatch.setenv("GPEN_HOME", str(models))
    cache = weights.modelscope_cache_root()
    with pytest.raises(WeightsError) as e:
        weights.resolve("GPEN-BFR-512", allow_download=False)
    raw = str(e.value)
    assert str(models) in raw and str(cache) in raw  # the operator's CLI keeps the full paths
    shown = public_message(raw)
    assert str(tmp_path) not in shown and str(cache) not in shown
    assert "GPEN-BFR-512 (GPEN-BFR-512.pth, ~284 MB) is not in <models folder> or the ModelScope cache <ModelScope cache>" in shown
    assert "save it as <models folder>/GPEN-BFR-512.pth" in shown
    # the fix's URL and the file name are kept whole
    url = weights.REGISTRY["GPEN-BFR-512"].urls[0]
    assert url in shown and "GPEN-BFR-512.pth" in shown
    assert public_message(f"cannot read {tmp_path}/elsewhere/x.pth: denied") == "cannot read …/x.pth: denied"
    assert public_message(f"see {os.path.expanduser('~')}/notes.txt") == "see ~/notes.txt"


def test_a_registry_name_in_any_case_is_the_name_in_the_app_as_in_the_cli(tmp_path: Path) -> None:
    """The CLI's --model takes gpen-bfr-512 (weights lookup ignores case); the app's Generator field took
    only the exact spelling and refused the lower-case one as a path outside the models folder."""
    from gpen_core.engine.network_loads import registry_size

    assert checked_model(" gpen-bfr-512 ", folder=tmp_path) == "GPEN-BFR-512"
    assert registry_size("gpen-bfr-512") == registry_size("GPEN-BFR-512") == 512
