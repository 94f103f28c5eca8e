"""Models folders for end-to-end tests of the app: import the fixtures into a test module.

    from .fixtures_models import low_mode_home, low_mode_session_home  # noqa: F401
    from .fixtures_models import low_narrow_home, low_narrow_session_home  # noqa: F401

``low_mode_home`` points ``GPEN_HOME`` at one folder per session holding what the
``low`` memory mode loads, under the registry's file names:

- ``GPEN-BFR-256.pth``: a checkpoint with random weights of the exact GPEN-BFR-256
  architecture (conftest's session-wide ``gen256``, ~75 MB, written once). The
  registry pins no sha256 for it, so the first resolve records its hash (trust on
  first use) and later ones check it: exactly what happens with the real file.
- ``detection_mobilenet0.25_Final.pth``: the real RetinaFace MobileNet-0.25 from
  ``../shared/weights`` (skips the test when ../shared is absent).

One folder for the session means one path, so the process-wide Restorer keeps the
generator loaded across tests instead of reloading it for each.

``low_narrow_home`` is the same with conftest's ``gen256_narrow`` (an eighth of the width, its
forward ~4x cheaper on a group photo) as ``GPEN-BFR-256.pth``: for the pages whose claims are
about what surrounds the generator (the panel, the layout, the overlay, a clip's flow) and
hold for any 256 px one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import shared_path

LOW_MODE_FILES = ("GPEN-BFR-256.pth", "detection_mobilenet0.25_Final.pth")


def _low_folder(tmp_path_factory: pytest.TempPathFactory, name: str, generator: Path) -> Path:
    """A models folder with the ``low`` mode's two files: ``generator`` as GPEN-BFR-256.pth, the real detector."""
    detector = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    home = tmp_path_factory.mktemp(name)
    (home / "GPEN-BFR-256.pth").symlink_to(generator)
    (home / detector.name).symlink_to(detector)
    return home


@pytest.fixture(scope="session")
def low_mode_session_home(tmp_path_factory: pytest.TempPathFactory, gen256: Path) -> Path:
    """A models folder with the ``low`` mode's two files (random generator, real detector)."""
    return _low_folder(tmp_path_factory, "gpen_home_low", gen256)


@pytest.fixture(scope="session")
def low_narrow_session_home(tmp_path_factory: pytest.TempPathFactory, gen256_narrow: Path) -> Path:
    """The same with the narrow 256 px generator."""
    return _low_folder(tmp_path_factory, "gpen_home_low_narrow", gen256_narrow)


@pytest.fixture()
def low_mode_home(low_mode_session_home: Path, _isolated_models_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``GPEN_HOME`` set (for this test) to the session's ``low``-mode models folder."""
    monkeypatch.setenv("GPEN_HOME", str(low_mode_session_home))
    return low_mode_session_home


@pytest.fixture()
def low_narrow_home(low_narrow_session_home: Path, _isolated_models_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``GPEN_HOME`` set (for this test) to the session's narrow ``low``-mode models folder."""
    monkeypatch.setenv("GPEN_HOME", str(low_narrow_session_home))
    return low_narrow_session_home
