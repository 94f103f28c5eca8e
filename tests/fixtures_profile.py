"""Hardware-check runs that more than one test module checks (loaded by conftest's ``pytest_plugins``:
a session fixture imported into two modules would run once per module).

``isolated_low_profile``: the check of ``low`` as the app and the CLI run it, each part in a worker
process of its own: the backend comparison (torch against OpenVINO, where installed) first, then
the mode on one small photo, with a tiny GPEN-BFR-256 override. Starting a worker costs a Python,
torch and engine import each; test_profile.py (the mode's worker) and test_profile_backends.py
(the comparison's worker) read the one run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpen_core.engine import profile_records as records
from gpen_core.hwcheck.workloads import Workload

from .factories import TINY

# One face on a small photo: the mode's worker loads the detector and pastes, as on a real photo.
ONE_FACE_PHOTO = Workload("photo", "photo, one face", 320, 240, 1, face_px=96)


@dataclass(frozen=True)
class IsolatedRun:
    profile: records.Profile
    home: Path  # the models folder it ran for (the speed records the comparison wrote)
    progress: tuple[str, ...]  # every progress description the parent received, in order


@pytest.fixture(scope="session")
def isolated_low_profile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IsolatedRun]:
    import torch

    from gpen_core.hwcheck import runner

    home = tmp_path_factory.mktemp("isolated_low_home")
    seen: list[str] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers take this process's count: one, as the 2 cores are shared
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("GPEN_HOME", str(home))
            mp.setenv("GPEN_OFFLINE", "1")
            mp.setenv("MODELSCOPE_CACHE", str(home / "modelscope"))
            prof = runner.run_profile(modes=["low"], models_dir=home, workloads=(ONE_FACE_PHOTO,),
                                      model_configs={"GPEN-BFR-256": TINY}, save=False, backends=True,
                                      progress=lambda f, d: seen.append(d))
    finally:
        torch.set_num_threads(threads)
    yield IsolatedRun(prof, home, tuple(seen))
