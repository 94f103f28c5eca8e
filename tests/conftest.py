"""Shared fixtures: the read-only ../shared data (skipped cleanly when absent)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Imported first: the test command's workers each take their share of the CPUs before torch or OpenVINO loads.
pytest.register_assert_rewrite("tests.workers")  # imported before pytest_plugins would: rewritten as they are
import tests.workers  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPEN_SHARED", ROOT.parent / "shared"))
# auto's per-CPU-kind runtime defaults off for the whole session, child processes and Ray
# workers started before any test's own settings included: what runs must not depend on the
# CPU the suite runs on (tests of the defaults turn them back on).
os.environ["GPEN_OPENVINO_DEFAULTS"] = "0"
# Every Python child a test starts (subprocess, multiprocessing's spawn, Ray's workers) inherits
# this: a child that dies of a signal (SIGSEGV under a memory cap) leaves its Python stack on stderr,
# which the tests that read a child's stderr keep in their failure message.
os.environ["PYTHONFAULTHANDLER"] = "1"
# Session fixtures more than one module uses live in these modules, loaded once here: imported into
# each test module instead, a session fixture runs once per module.
pytest_plugins = ["tests.workers", "tests.fixtures_profile", "tests.fixtures_openvino", "tests.fixtures_app"]


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]


class _Chromium:
    """One Chromium for a run of consecutive browser tests (each test opens its own page, a context of its own).

    Closed as soon as the next test needs no browser: Playwright's sync API leaves its event loop marked
    as running in this thread between calls, so a later ``asyncio.run`` would refuse to start while it lives.
    """

    def __init__(self) -> None:
        self._manager: object | None = None
        self._browser: object | None = None

    def get(self) -> object:
        if self._browser is None:
            from playwright.sync_api import sync_playwright

            manager = sync_playwright()
            playwright = manager.__enter__()
            try:
                self._browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            except BaseException:
                manager.__exit__(None, None, None)
                raise
            self._manager = manager
        return self._browser

    def close(self) -> None:
        browser, manager, self._browser, self._manager = self._browser, self._manager, None, None
        try:
            if browser is not None:
                browser.close()  # type: ignore[attr-defined]
        finally:
            if manager is not None:
                manager.__exit__(None, None, None)  # type: ignore[attr-defined]


_CHROMIUM = _Chromium()


@pytest.fixture()
def browser() -> object:
    """Debian's Chromium driven by Playwright (never ``playwright install``), shared by consecutive browser tests."""
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium; scripts/setup.sh --dev)")
    pytest.importorskip("playwright.sync_api", reason="needs the playwright package (requirements-dev.txt)")
    return _CHROMIUM.get()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or "browser" not in getattr(nextitem, "fixturenames", ()):
        _CHROMIUM.close()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, Gradio, the app, every test module: about 400 000 objects) lives
    as long as the run: frozen, the cyclic collector no longer walks it. The engine runs a full
    ``gc.collect()`` on each model load and drop (``platform.oom.release``), and a test loads models
    often; each such collection walked all of it (measured on one core, as a test worker has: test_app.py's
    39 full collections took 5.8 s, 0.9 s once frozen, and the module 37 s -> 24 s; test_profile and
    test_one_shot's 108 took 10.2 s, 0.8 s frozen). What tests create is still collected."""
    import gc
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  (nearly every module loads it; its objects are the bulk)
    gc.collect()  # the imports' own garbage is freed, not frozen
    gc.freeze()


def shared_path(*parts: str) -> Path:
    """Path under ../shared, or skip the test naming what is missing."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs {p} (the project's ../shared test data), which is not present")
    return p


@pytest.fixture(autouse=True)
def _isolated_models_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets an empty models folder and no network downloads by default."""
    home = tmp_path_factory.mktemp("gpen_home")
    monkeypatch.setenv("GPEN_HOME", str(home))
    monkeypatch.setenv("GPEN_OFFLINE", "1")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(home / "modelscope"))
    # auto's per-CPU-kind defaults would make expectations depend on the CPU the suite runs on
    # (and convert networks in tests that never asked); tests of the defaults turn them back on.
    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "0")
    return home


@pytest.fixture(scope="session")
def gen256(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPEN-BFR-256-shaped checkpoint with random weights (the real file cannot be downloaded here)."""
    from .factories import RELEASED, write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-GPEN-BFR-256.pth", RELEASED["GPEN-BFR-256"], seed=1)


@pytest.fixture(scope="session")
def gen256_narrow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 256 px GPEN with random weights, an eighth of GPEN-BFR-256's width (its forward ~6x cheaper):
    for tests of what surrounds the network on a group photo (detect, align, paste, record), whose
    claims hold for any 256 px generator. Claims about the released network keep ``gen256``."""
    from gpen_core.networks.arch import GPENConfig

    from .factories import write_checkpoint

    cfg = GPENConfig(256, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-narrow-256.pth", cfg, seed=1)


@pytest.fixture(scope="session")
def gen512(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPEN-BFR-512-shaped checkpoint with random weights (~280 MB, written once per session)."""
    from .factories import RELEASED, write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-GPEN-BFR-512.pth", RELEASED["GPEN-BFR-512"], seed=2)


@pytest.fixture()
def models_with_detector(_isolated_models_home: Path) -> Path:
    """The test's models folder holding the real RetinaFace mobilenet0.25 weights from ../shared."""
    src = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    (_isolated_models_home / src.name).symlink_to(src)
    return _isolated_models_home


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch thread: with other processes on the 2 cores, OpenMP's spinning makes 2 threads 10x slower."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def segments_home(tmp_path_factory: pytest.TempPathFactory, gen256_narrow: Path) -> Path:
    """The segment tests' models folder: the ``low`` mode's two files under the registry's names, the generator
    ``gen256_narrow`` (what they check is the seams, the resume and the workers' output against one
    process's, for any generator; 24 frames a run, three runs), the real detector."""
    detector = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    home = tmp_path_factory.mktemp("segments_home")
    (home / "GPEN-BFR-256.pth").symlink_to(gen256_narrow)
    (home / detector.name).symlink_to(detector)
    return home


@pytest.fixture(scope="session")
def face_clip_and_reference(tmp_path_factory: pytest.TempPathFactory, segments_home: Path) -> tuple[Path, Path]:
    """(the segment tests' clip, its uninterrupted restore): ``tests.test_video_resume.face_clip`` (three 1 s
    segments, a face, AAC audio) restored by the plain command, ``restore --mode low --segments
    --segment-seconds 1``, in this process on one torch thread, once per session. The run killed and
    resumed (test_video_resume) and the Ray workers' run (test_ray) are both compared with it."""
    pytest.importorskip("av")
    import torch

    from gpen_core.cli import main

    from .test_video_resume import face_clip

    tmp = tmp_path_factory.mktemp("face_clip")
    home = segments_home
    src, ref = face_clip(tmp), tmp / "ref.mp4"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:  # set up before any test's own models folder: the same isolation
        mp.setenv("GPEN_HOME", str(home))
        mp.setenv("GPEN_OFFLINE", "1")
        mp.setenv("MODELSCOPE_CACHE", str(home / "modelscope"))
        try:
            code = main(["restore", str(src), "-o", str(ref), "--mode", "low", "--segments", "--segment-seconds", "1",
                         "--models-dir", str(home), "--json"])
        finally:
            torch.set_num_threads(threads)
    assert code == 0 and ref.is_file()
    return src, ref
