"""One runtime decision for every network (engine.runtime_choice.decide_runtime), and its rules
that a conversion happens inside a request only when the work ahead repays it, and never takes the
request above its mode's memory plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpen_core.engine.lifetime import Lifetime
from gpen_core.runtimes.openvino.choice import BackendChoice
from gpen_core.engine.runtime_choice import RequestPlan, RuntimeFacts, decide_runtime
from gpen_core.runtimes.openvino import generator as ov_backend

MB = 2**20
# OpenVINO measured faster for a generator not converted yet, with room to convert it, in a resident cache.
FIRST_USE = RuntimeFacts(
    network="generator", what="the generator GPEN-BFR-256", requested="auto",
    measured=BackendChoice("openvino", "measured faster here: 0.10 s vs torch 0.20 s per face"), torch_dtype="bfloat16",
    openvino_dtype="float32", converted=False, convert_ram=757 * MB, free_ram=8000 * MB, converting="GPEN-BFR-256.pth",
)


def test_the_measured_choice_stands_while_nothing_needs_converting() -> None:
    torch_ = decide_runtime(replace(FIRST_USE, measured=BackendChoice("torch", "asked for")))
    assert (torch_.runtime, torch_.dtype, torch_.reason, torch_.note) == ("torch", "bfloat16", "asked for", None)
    done = decide_runtime(replace(FIRST_USE, converted=True, free_ram=0, conversion_pays=False))
    assert (done.runtime, done.dtype, done.note) == ("openvino", "float32", None)  # converted: no first-use concern
    resident = decide_runtime(FIRST_USE)  # a resident cache with room converts it once, in the request
    assert resident.runtime == "openvino" and resident.reason.startswith("measured faster here")


def test_auto_runs_torch_when_the_conversion_does_not_fit_does_not_pay_or_is_under_way() -> None:
    tight = decide_runtime(replace(FIRST_USE, free_ram=100 * MB))
    assert tight.runtime == "torch" and tight.dtype == "bfloat16"
    assert tight.note == tight.reason and "converting GPEN-BFR-256.pth" in tight.note and "is free" in tight.note
    one_shot = decide_runtime(replace(FIRST_USE, conversion_pays=False))
    assert one_shot.runtime == "torch" and one_shot.note
    assert "`python -m gpen_core download`" in one_shot.note and "the generator GPEN-BFR-256" in one_shot.note
    busy = decide_runtime(replace(FIRST_USE, busy="being converted in the background"))
    assert busy.runtime == "torch" and busy.note == "being converted in the background"
    # An explicit openvino converts as asked, whatever the memory, the lifetime or another thread.
    asked = decide_runtime(replace(FIRST_USE, requested="openvino", measured=BackendChoice("openvino", "asked for"), free_ram=0,
                                   conversion_pays=False, busy="busy"))
    assert (asked.runtime, asked.reason, asked.note) == ("openvino", "asked for", None)


def test_a_choice_measured_on_another_cpu_is_not_said_to_be_measured_here() -> None:
    # a fresh install's colorize note read "OpenVINO was measured faster here" with nothing measured on this machine
    elsewhere = BackendChoice("openvino", "measured faster on CPUs with AVX-512 BF16 but no AMX (AMD Zen 4): 0.82 s vs torch 1.23 s",
                              "not yet measured on this machine (the hardware check measures it here)")
    planned = replace(FIRST_USE, measured=elsewhere, plan=RequestPlan("balanced", planned=1100 * MB, start_rss=0), plan_used=344 * MB)
    for facts in (planned, replace(FIRST_USE, measured=elsewhere, conversion_pays=False)):
        note = decide_runtime(facts).note or ""
        assert note.startswith("OpenVINO was measured faster on another CPU of this kind (not yet on this machine) for the generator "
                               "GPEN-BFR-256, but it is not converted yet"), note
    assert decide_runtime(replace(planned, measured=FIRST_USE.measured)).note.startswith("OpenVINO was measured faster here for")  # type: ignore[union-attr]
    tight = decide_runtime(replace(FIRST_USE, measured=elsewhere, free_ram=100 * MB)).note or ""
    assert tight.startswith("OpenVINO was measured faster on another CPU of this kind (not yet on this machine), but converting"), tight


def test_a_conversion_inside_a_request_stays_within_the_modes_memory_plan() -> None:
    """The conversion adds 757 MiB; the plan gives the request 1100 MiB, of which 343 MiB are used: exactly enough."""
    planned = replace(FIRST_USE, plan=RequestPlan("balanced", planned=1100 * MB, start_rss=0))
    fits = decide_runtime(replace(planned, plan_used=343 * MB))
    assert (fits.runtime, fits.dtype, fits.note) == ("openvino", "float32", None)
    over = decide_runtime(replace(planned, plan_used=344 * MB))  # one MiB more in use: over the plan
    assert (over.runtime, over.dtype) == ("torch", "bfloat16") and over.note == over.reason
    assert ("converting it inside this request would add ~794 MB to a request that balanced's memory plan holds to "
            "~1.15 GB (793 MB of it left), so it ran on torch") in over.note, over.note
    assert "`python -m gpen_core download` converts it once ahead, outside any request" in over.note
    busy = decide_runtime(replace(planned, plan_used=344 * MB, busy="being converted in the background"))
    assert busy.note == "being converted in the background"  # the conversion under way is the news, not the plan
    spent = decide_runtime(replace(planned, plan_used=1200 * MB))  # the request is over its plan already
    assert spent.runtime == "torch" and "(0 MB of it left)" in (spent.note or "")
    estimated = decide_runtime(replace(planned, plan_used=344 * MB, convert_ram_estimated=True))
    assert "would add ~794 MB (estimated from the file size) to a request" in (estimated.note or "")
    # Converted already, asked for explicitly, or outside a request (no plan): the plan does not decide.
    assert decide_runtime(replace(planned, converted=True, plan_used=1200 * MB)).runtime == "openvino"
    asked = replace(planned, requested="openvino", measured=BackendChoice("openvino", "asked for"), plan_used=1200 * MB)
    assert decide_runtime(asked).runtime == "openvino"
    assert decide_runtime(replace(FIRST_USE, plan=None)).runtime == "openvino"


def test_no_room_in_ram_is_said_before_the_plan() -> None:
    """Both short: the free-RAM sentence is the one given (the machine's limit is the harder fact)."""
    both = decide_runtime(replace(FIRST_USE, free_ram=100 * MB, plan=RequestPlan("low", 400 * MB, 0)))
    assert both.runtime == "torch" and "is free" in (both.note or "") and "memory plan" not in (both.note or "")


needs_openvino = pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")


@pytest.fixture()
def home(tmp_path: Path, gen256: Path) -> Path:
    """A models folder with a GPEN-BFR-256 checkpoint put there by hand (never converted), where
    OpenVINO was measured faster for it in every dtype."""
    (tmp_path / "GPEN-BFR-256.pth").symlink_to(gen256)
    for dtype in ("float32", "bfloat16"):
        ov_backend.record_speed(256, dtype, torch_s=0.2, openvino_s=0.1, models_dir=tmp_path, source="test")
    return tmp_path


@needs_openvino
def test_a_one_photo_request_runs_torch_instead_of_converting_and_says_how_to_convert_ahead(home: Path, one_thread: None) -> None:
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    crop = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    opts = RestoreOptions(mode="balanced", model=str(home / "GPEN-BFR-256.pth"), aligned=True)
    res = Restorer(models_dir=home, device="cpu", lifetime=Lifetime.ONE_SHOT)(crop, opts)
    assert res.backend == "torch" and "python -m gpen_core download" in res.backend_reason
    assert any("python -m gpen_core download" in n for n in res.notes), res.notes
    generator = [r for r in res.runtimes if r.network == "generator"]
    assert len(generator) == 1 and generator[0].runtime == "torch" and generator[0].reason == res.backend_reason
    assert not any((home / "openvino").glob("GPEN-BFR-256-*"))  # nothing was converted
    assert res.image.shape == crop.shape


@needs_openvino
def test_a_resident_request_converts_only_within_its_modes_memory_plan(home: Path, one_thread: None, monkeypatch) -> None:
    """A resident restorer (the app, a folder of photos) in ``low`` (allowed OpenVINO here), whose built-in plan
    gives a request 440 MB: GPEN-BFR-256's conversion (757 MiB measured) would break it, so the request runs torch
    and says so, converting nothing; a generator whose conversion fits the plan is converted in the request."""
    from gpen_core.modes import MODES
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    from .factories import TINY, low_on_openvino, write_checkpoint

    monkeypatch.setitem(MODES, "low", low_on_openvino())
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64 * 10**9))  # free RAM alone would allow both conversions
    r = Restorer(models_dir=home, device="cpu")
    rng = np.random.default_rng(0)
    crop = rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)
    res = r(crop, RestoreOptions(mode="low", model=str(home / "GPEN-BFR-256.pth"), aligned=True))
    assert res.backend == "torch" and "low's memory plan holds to ~440 MB" in res.backend_reason, res.backend_reason
    assert any("`python -m gpen_core download` converts it once ahead" in n for n in res.notes), res.notes
    assert not any((home / "openvino").glob("GPEN-BFR-256-*"))  # nothing was converted

    tiny = write_checkpoint(home / "tiny64.pth", TINY)  # a few MB: its conversion (estimated) fits the plan
    ov_backend.record_speed(64, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test")
    small = r(crop[:64, :64].copy(), RestoreOptions(mode="low", model=str(tiny), aligned=True))
    assert small.backend == "openvino", small.backend_reason
    assert any("converted the generator to OpenVINO on first use" in n for n in small.notes), small.notes


@needs_openvino
def test_a_checkpoint_of_the_users_own_is_told_how_it_can_be_converted(home: Path, gen256: Path, tmp_path_factory,
                                                                       one_thread: None) -> None:
    """``--model my.pth`` (a file outside the registry's places): the note said ``python -m gpen_core download``
    converts it once ahead and the app converts it in the background; neither converts a file of the user's, so
    every later run stayed on torch. It now names what does: asking for OpenVINO once."""
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    mine = tmp_path_factory.mktemp("mine") / "my-gpen.pth"
    mine.symlink_to(gen256)
    crop = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    res = Restorer(models_dir=home, device="cpu", lifetime=Lifetime.ONE_SHOT)(
        crop, RestoreOptions(mode="balanced", model=str(mine), aligned=True))
    assert res.backend == "torch" and "--backend openvino" in res.backend_reason, res.backend_reason
    assert "download` converts it once ahead" not in res.backend_reason and "in the background" not in res.backend_reason


@needs_openvino
def test_a_restore_and_download_give_an_own_checkpoint_the_same_conversion_advice(
        home: Path, gen256: Path, tmp_path_factory, one_thread: None, capsys) -> None:
    """A restore's note and `download`'s answer for a checkpoint of the user's own say one sentence: `download`
    answered "unknown weights" with no word on how such a file gets converted."""
    from gpen_core.cli import main
    from gpen_core.engine.runtime_choice import convert_ahead_advice
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer

    mine = tmp_path_factory.mktemp("mine") / "my-gpen.pth"
    mine.symlink_to(gen256)
    crop = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    res = Restorer(models_dir=home, device="cpu", lifetime=Lifetime.ONE_SHOT)(
        crop, RestoreOptions(mode="balanced", model=str(mine), aligned=True))
    advice = "asking for OpenVINO once (`--backend openvino`) converts it"
    assert advice in res.backend_reason, res.backend_reason
    assert main(["download", "--models-dir", str(home), str(mine)]) != 0
    err = capsys.readouterr().err
    assert advice in err and str(mine) in err, err
    assert convert_ahead_advice(True) in res.backend_reason and convert_ahead_advice(True) in err
