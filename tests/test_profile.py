"""The hardware check: runs every mode through the real engine (tiny models, small images),
saves a profile that auto reads, and refuses a profile made on another machine or version."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gpen_core.platform import measurements
from gpen_core.progress import Progress

from gpen_core.engine import budget
from gpen_core.hwcheck import workloads
from gpen_core.engine import profile_records as records
from gpen_core.hwcheck import report
from gpen_core.hwcheck import runner
from gpen_core.engine import profile_store as store
from gpen_core.networks.arch import GPENConfig
from gpen_core.modes import MODES
from gpen_core.hwcheck.workloads import Workload

from .fixtures_profile import IsolatedRun

TINY = GPENConfig(64, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
CONFIGS = {"GPEN-BFR-256": TINY, "GPEN-BFR-512": TINY}
# The group has two faces, not three: a face more is one more 512 px ParseNet in quality and tells
# nothing the second face does not.
SMALL = (
    Workload("face", "aligned face", 64, 64, 1, aligned=True),
    Workload("photo", "photo, one face", 320, 240, 1, face_px=96),
    Workload("group", "group photo", 480, 320, 2, face_px=64),
)
BIGGEST = (480, 320)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, one_thread: None) -> tuple[records.Profile, Path]:
    """One tiny profile of all four modes, saved in its own models folder (run once for the module). Its
    synthetic parser is TINY_PARSENET: the released one's 512 px forward in quality was most of the time."""
    from gpen_core.networks import parsenet

    from .factories import TINY_PARSENET

    home = tmp_path_factory.mktemp("profile_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parsenet, "RELEASED_CONFIG", TINY_PARSENET)
        mp.setenv("GPEN_HOME", str(home))
        mp.setenv("GPEN_OFFLINE", "1")
        mp.setenv("MODELSCOPE_CACHE", str(home / "modelscope"))
        seen: list[tuple[float, str]] = []
        prof = runner.run_profile(
            models_dir=home,
            workloads=SMALL,
            model_configs=CONFIGS,
            progress=lambda f, d: seen.append((f, d)),
            isolate=False,  # a worker process per mode costs a torch import each; one test below isolates
        )
    assert seen and seen[-1][0] == 1.0
    assert all(0.0 <= f <= 1.0 for f, _ in seen)
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)
    return prof, home


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_mode_runs_every_workload_and_reports_peaks_and_times(measured: tuple[records.Profile, Path]) -> None:
    prof, home = measured
    assert set(prof.modes) == set(MODES)
    assert prof.device == "cpu" and prof.synthetic
    for name, m in prof.modes.items():
        assert m.stepped_down_to is None, m.notes
        assert [r.workload for r in m.runs] == [w.name for w in SMALL]
        for r, w in zip(m.runs, SMALL):
            assert r.faces == w.faces and r.ran_mode == name
            # no detector file: the engine ran the mode's network with random weights, boxes given
            assert r.detector == ("none" if w.aligned else f"{MODES[name].detector} (synthetic weights, boxes given)")
            # Every run carries a measured peak above the idle process, in bytes. Not bounded below by
            # the weights, nor above 0: this profile runs the modes in one process, and the 3 MB tiny
            # generator and a 320×240 photo can land in heap pages an earlier mode freed (measured 0).
            assert isinstance(r.peak_ram_bytes, int) and r.peak_ram_bytes >= 0, (name, r)
            assert r.peak_vram_bytes is None  # no CUDA here
            assert r.total_s >= r.restore_s > 0
            assert r.seconds_per_face == pytest.approx(r.restore_s / r.faces, abs=1e-3)
        # the mode starts cold: the generator loads with the first workload, the detector with the
        # first photo; the last workload reuses both
        assert m.runs[0].load_s > 0 and m.runs[1].load_s > 0
        assert m.runs[-1].load_s < max(m.runs[0].load_s, m.runs[1].load_s)
        assert m.peak_ram_bytes == max(r.peak_ram_bytes for r in m.runs) == m.peak_bytes
        assert m.covered_pixels == max(r.processed_pixels for r in m.runs)
        assert m.seconds_per_face == m.runs[-1].seconds_per_face  # the group photo: steady state
        assert records.SYNTHETIC_NOTE in m.notes and m.weights == "synthetic"
        assert m.idle_rss_bytes > 0
    assert records.DETECTOR_SYNTHETIC_NOTE in prof.notes and records.SYNTHETIC_NOTE in prof.notes
    assert not prof.isolated and all(m.failed is None for m in prof.modes.values())
    assert prof.fingerprint == store.fingerprint("cpu", home, synthetic=True)
    assert prof.machine["cores_logical"] >= 1 and prof.machine["ram_total_bytes"] > 0


def test_saved_json_has_every_field_and_round_trips(measured: tuple[records.Profile, Path]) -> None:
    prof, home = measured
    saved = json.loads((home / "measurements.json").read_text())
    assert saved["version"] == measurements.VERSION
    d = saved["profiles"]["cpu"]
    assert set(d) == _field_names(records.Profile)
    for m in d["modes"].values():
        assert set(m) == _field_names(records.ModeProfile)
        for r in m["runs"]:
            assert set(r) == _field_names(records.WorkloadRun)
    fp = d["fingerprint"]
    for key in ("cpu_model", "cores", "ram_total_mib", "gpu_name", "torch", "gpen_core", "weights", "synthetic"):
        assert key in fp
    assert records.Profile.from_dict(d) == prof
    assert store.load_json(home / "measurements.json") == prof


def test_table_chart_and_recommendation(measured: tuple[records.Profile, Path]) -> None:
    prof, _ = measured
    table = report.format_table(prof, budget.Free(ram_bytes=64 * 10**9, vram_bytes=None))
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == 4
    assert all(records.SYNTHETIC_NOTE in r and r.rstrip(" |").endswith("yes") for r in rows)
    assert "fits?" not in report.format_table(prof, fits=False)
    chart = report.chart_rows(prof)
    assert [c["mode"] for c in chart] == list(MODES)
    assert all(c["peak RAM MB"] == round(prof.modes[c["mode"]].peak_ram_bytes / 1e6, 1) and c["peak VRAM MB"] is None for c in chart)

    assert report.recommendation(prof, budget.Free(64 * 10**9, None)).startswith("use `quality`")
    q = prof.modes["quality"].peak_bytes
    tight = budget.Free(int(q / budget.SAFETY_MARGIN) - 1, None)  # quality misses by a byte
    rec = report.recommendation(prof, tight)
    if not rec.startswith("even"):
        assert "`quality` needs" in rec and "more RAM than you have free" in rec
        assert not rec.startswith("use `quality`")
    none_fit = report.recommendation(prof, budget.Free(0, None))
    assert none_fit.startswith("even `low` needs")


def test_auto_reads_the_profile_and_picks_a_lower_mode_with_less_free(measured: tuple[records.Profile, Path]) -> None:
    prof, home = measured
    got = store.measured("quality", "cpu", home)
    assert got is not None and got.peak_bytes == prof.modes["quality"].peak_bytes
    assert "measured on this machine" in got.source
    big = budget.choose("cpu", BIGGEST, models_dir=home, free=budget.Free(64 * 10**9, None))
    assert big.mode.name == "quality" and "measured on this machine" in big.reason
    need_q, src = budget.estimate_peak(MODES["quality"], "cpu", BIGGEST, home)
    assert need_q == prof.modes["quality"].peak_bytes and src == "measured on this machine"
    small = budget.choose("cpu", BIGGEST, models_dir=home, free=budget.Free(int(need_q / budget.SAFETY_MARGIN) - 1, None))
    assert small.mode.rank < MODES["quality"].rank
    need_small, _ = budget.estimate_peak(small.mode, "cpu", BIGGEST, home)
    assert need_small <= need_q - 1 or "lightest" in small.reason
    # less free memory never buys a better mode
    ranks = [
        budget.choose("cpu", BIGGEST, models_dir=home, free=budget.Free(int(f), None)).mode.rank
        for f in np.linspace(2 * need_q / budget.SAFETY_MARGIN, 0, 9)
    ]
    assert ranks == sorted(ranks, reverse=True)
    # a photo bigger than the workloads adds a per-pixel term on top of the measured peak
    bigger, _ = budget.estimate_peak(MODES["quality"], "cpu", (4000, 3000), home)
    assert bigger > need_q


def test_profile_from_another_machine_version_or_weights_is_not_reused(measured: tuple[records.Profile, Path], tmp_path: Path) -> None:
    prof, home = measured
    saved = json.loads((home / "measurements.json").read_text())
    folder = tmp_path / "models"
    folder.mkdir()

    def reused(fp_change: dict) -> bool:
        data = json.loads(json.dumps(saved))
        data["profiles"]["cpu"]["fingerprint"].update(fp_change)
        (folder / "measurements.json").write_text(json.dumps(data))
        return store.measured("balanced", "cpu", folder) is not None

    assert reused({})  # the same file, unchanged, is reused from another folder with the same weights
    assert reused({"synthetic": False})  # random weights cost what real ones cost
    assert not reused({"cpu_model": "Some Other CPU"})
    assert not reused({"cores": prof.fingerprint["cores"] + 2})
    assert not reused({"ram_total_mib": prof.fingerprint["ram_total_mib"] * 2})
    assert not reused({"torch": "1.0.0"})
    assert not reused({"gpen_core": "0.0.1"})
    assert not reused({"gpu_name": "NVIDIA H100"})
    # weights appearing changes the fingerprint: a real GPEN-BFR-256 was downloaded since
    (folder / "GPEN-BFR-256.pth").write_bytes(b"\0" * 1024)
    assert not reused({})
    need, src = budget.estimate_peak(MODES["balanced"], "cpu", BIGGEST, folder)
    assert src.startswith("built-in estimate")
    # a CPU profile says nothing about a GPU, and an old format is ignored
    assert store.measured("balanced", "cuda", home) is None
    data = json.loads(json.dumps(saved))
    data["version"] = measurements.VERSION + 1
    (folder / "measurements.json").write_text(json.dumps(data))
    assert store.measured("balanced", "cpu", folder) is None


def test_no_profile_means_none(tmp_path: Path) -> None:
    assert store.measured("low", "cpu", tmp_path) is None
    (tmp_path / "measurements.json").write_text("{not json")
    assert store.measured("low", "cpu", tmp_path) is None


def test_recommended_mode_runs_within_its_measured_peak(measured: tuple[records.Profile, Path], tmp_path: Path) -> None:
    """The done-criterion in small: run the recommended mode again on the biggest workload."""
    from gpen_core.platform.meter import current_rss
    from gpen_core.restorer import Restorer, RestoreOptions

    prof, home = measured
    choice = budget.choose("cpu", BIGGEST, models_dir=home, free=budget.Free(64 * 10**9, None))
    m = prof.modes[choice.mode.name]
    ckpt = workloads.synthetic_checkpoint("t", tmp_path, TINY)
    group = workloads.build(SMALL[-1])
    r = Restorer(models_dir=home, device="cpu")
    r(group.image, RestoreOptions(mode=m.mode, model=ckpt), detections=list(group.detections))  # warm
    r.unload()
    idle = current_rss()
    res = r(group.image, RestoreOptions(mode=m.mode, model=ckpt), detections=list(group.detections))
    assert res.mode.name == m.mode
    # measured above idle, with slack for allocator noise at this tiny scale
    assert res.peaks.rss_bytes - idle <= m.peak_ram_bytes * 1.5 + 16 * 2**20


def test_cli_profile_subcommand_prints_table_and_writes_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], one_thread: None
) -> None:
    from gpen_core.cli import main

    monkeypatch.setattr(runner, "run_profile", functools.partial(runner.run_profile, workloads=SMALL[:2], model_configs=CONFIGS))
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64 * 10**9))  # plenty free: the best measured mode is recommended
    out_json = tmp_path / "out" / "p.json"
    argv = ["profile", "--modes", "low", "balanced", "--synthetic", "--models-dir", str(tmp_path), "--in-process"]
    rc = main([*argv, "--json", str(out_json)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| `low` |" in text and "| `balanced` |" in text and "| `quality` |" not in text
    assert "Recommendation: use `balanced`" in text and "every mode fits" in text
    d = json.loads(out_json.read_text())
    assert set(d) == _field_names(records.Profile) and set(d["modes"]) == {"low", "balanced"}
    assert d["command"] == f"python -m gpen_core profile --modes low balanced --synthetic --in-process --models-dir {tmp_path}"
    assert (tmp_path / "measurements.json").is_file()
    # --saved prints the saved profile without measuring
    monkeypatch.setattr(runner, "run_profile", lambda *a, **k: pytest.fail("--saved must not measure"))
    assert main(["profile", "--saved", "--models-dir", str(tmp_path)]) == 0
    assert "| `balanced` |" in capsys.readouterr().out
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", "1000")  # nothing fits in 1 kB free
    assert main(["profile", "--saved", "--models-dir", str(tmp_path)]) == 0
    assert "Recommendation: even `low` needs " in capsys.readouterr().out
    assert main(["profile", "--saved", "--models-dir", str(tmp_path / "empty")]) == 1


def test_identity_models_an_earlier_request_left_are_not_in_a_modes_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_thread: None
) -> None:
    """An in-process check after a mode that checked identity: the models that request left are the
    process's, and ``low``'s request lets them go before its meter. Counted in the zero, they made
    ``low`` read 0 MB (the CLI test above, after the module's profile); here 128 MB stand in for them."""
    from gpen_core.faces import identity_model

    def low() -> records.ModeProfile:
        return runner.run_profile(modes=["low"], models_dir=tmp_path, workloads=SMALL[:1], model_configs=CONFIGS,
                                  isolate=False).modes["low"]

    # The first check also imports what it needs and leaves its one-time state (~30 MB here): the
    # zeros differ by that, and by all the held models where they count.
    without = low()
    held = 128 << 20
    monkeypatch.setattr(identity_model, "_model", (np.ones(held, np.uint8),))  # touched: resident
    m = low()
    assert identity_model._model is None
    assert m.idle_rss_bytes < without.idle_rss_bytes + held // 2  # the zero is the process without them
    # what the request costs, not its size minus the models it let go (clamped to 0)
    assert m.failed is None and m.runs[0].peak_ram_bytes > 0


def test_workloads_are_deterministic_and_faces_sit_where_said() -> None:
    from gpen_core.faces.align import align_transform

    w = Workload("g", "g", 600, 400, 5, face_px=100)
    a, b = workloads.build(w), workloads.build(w)
    assert np.array_equal(a.image, b.image) and a.image.shape == (400, 600, 3) and a.image.dtype == np.uint8
    assert a.image.std() > 10  # textured, not flat
    boxes = [d.box for d in a.detections]
    assert len(boxes) == 5
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        assert 0 <= x0 < x1 <= 600 and 0 <= y0 < y1 <= 400 and x1 - x0 == 100
        for (u0, v0, u1, v1) in boxes[i + 1 :]:
            assert x1 <= u0 or u1 <= x0 or y1 <= v0 or v1 <= y0  # no overlap
    # the template landmarks align the box exactly onto the crop
    d = a.detections[0]
    fwd, _ = align_transform(d.landmarks, 512)
    corners = np.array([[d.box[0], d.box[1], 1], [d.box[2], d.box[3], 1]], np.float64)
    assert np.allclose(corners @ fwd.T, [[0, 0], [512, 512]], atol=1.0)
    with pytest.raises(ValueError, match="do not fit"):
        workloads.face_boxes(Workload("x", "x", 200, 200, 9, face_px=100))
    assert [x.pixels for x in workloads.STANDARD if x.name == "photo"] == [12_000_000]


def test_portraits_are_composited_into_the_boxes(tmp_path: Path) -> None:
    from PIL import Image

    face = np.zeros((50, 40, 3), np.uint8)
    face[..., 0] = 200
    Image.fromarray(face).save(tmp_path / "p.png")
    w = Workload("p", "p", 300, 200, 2, face_px=60)
    built = workloads.build(w, portraits=workloads.example_faces(tmp_path))
    x0, y0, x1, y1 = (int(v) for v in built.detections[0].box)
    assert (built.image[y0:y1, x0:x1, 0] == 200).all() and (built.image[y0:y1, x0:x1, 1] == 0).all()


def test_benchmark_prints_the_readme_table_from_a_saved_profile(measured: tuple[records.Profile, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench as mod  # the README's tables: benchmarks/bench.py --modes-table

    prof, home = measured
    assert mod.main(["--modes-table", "--from", str(home / "measurements.json")]) == 0
    out = capsys.readouterr().out
    for name, mode in MODES.items():
        assert f"| `{name}` | {mode.hint} |" in out
    assert f"Generated by `python benchmarks/bench.py --modes-table --from {home / 'measurements.json'}`" in out
    assert records.SYNTHETIC_NOTE in out


def test_with_a_real_detector_the_workloads_carry_real_faces_it_finds(models_with_detector: Path, one_thread: None) -> None:
    if not workloads.example_faces():
        pytest.skip("needs a portrait in examples/ (made by examples/make_examples.py), which is not present")
    prof = runner.run_profile(
        modes=["low"], models_dir=models_with_detector, workloads=SMALL, model_configs=CONFIGS, save=False, isolate=False
    )
    m = prof.modes["low"]
    for r, w in zip(m.runs, SMALL):
        assert r.detector == ("none" if w.aligned else "mobilenet0.25")
        assert r.faces == w.faces, r.notes
    assert records.DETECTOR_SYNTHETIC_NOTE not in m.notes and records.GIVEN_BOXES_NOTE not in m.notes
    assert prof.fingerprint["weights"] == {"retinaface-mobilenet0.25": 1789735}


def test_isolated_mode_runs_in_a_worker_process_and_reports_back(isolated_low_profile: IsolatedRun) -> None:
    # The session's isolated check of low (tests/fixtures_profile.py), which test_profile_backends.py reads too.
    prof, seen = isolated_low_profile.profile, isolated_low_profile.progress
    assert prof.isolated
    m = prof.modes["low"]
    assert m.failed is None and m.runs[0].faces == 1 and m.runs[0].ran_mode == "low"
    assert m.idle_rss_bytes > 0 and m.peak_ram_bytes > 0
    assert any("restoring face" in d for d in seen)  # the worker's progress reached the parent


def test_a_mode_that_runs_out_of_memory_is_recorded_not_fatal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_thread: None) -> None:
    real = runner.measure_mode

    def flaky(spec: dict, report: Progress) -> records.ModeProfile:
        if spec["mode"] == "quality":
            raise MemoryError("cannot allocate 3 GB")
        return real(spec, report)

    monkeypatch.setattr(runner, "measure_mode", flaky)
    prof = runner.run_profile(modes=["low", "quality"], models_dir=tmp_path, workloads=SMALL[1:2], model_configs=CONFIGS, isolate=False)
    q = prof.modes["quality"]
    assert q.failed and "out of memory" in q.failed and q.runs == ()
    assert q.peak_bytes == prof.free_at_start["ram_bytes"]  # a lower bound: it needs more than was free
    assert "more than" in report.format_table(prof) and "(out of memory)" in report.format_table(prof)
    # auto does not pick it while no more than that is free; the measured low still runs
    c = budget.choose("cpu", (320, 240), models_dir=tmp_path, free=budget.Free(q.peak_bytes, None))
    assert c.mode.name != "quality"
    assert report.recommendation(prof, budget.Free(q.peak_bytes, None)).startswith("use `low`")


def test_in_process_a_mode_out_of_memory_is_a_failed_mode_and_any_other_error_is_raised() -> None:
    from gpen_core.errors import ResourceError

    def measure(spec: dict, report: Progress) -> None:
        raise spec["error"]

    with pytest.raises(runner.ModeFailed, match="out of memory: no lighter mode"):
        runner.run_measure(measure, {"error": ResourceError("no lighter mode")}, lambda f, d: None, isolate=False)
    with pytest.raises(ValueError, match="not memory"):
        runner.run_measure(measure, {"error": ValueError("not memory")}, lambda f, d: None, isolate=False)
    from gpen_core.runtimes.openvino.base import CacheUnwritable

    # a kind of ResourceError that is no memory (a cache it cannot write) is raised, not a mode "out of memory"
    with pytest.raises(CacheUnwritable, match="read-only"):
        runner.run_measure(measure, {"error": CacheUnwritable("models folder read-only")}, lambda f, d: None, isolate=False)


def test_a_cuda_slope_is_read_on_one_memory_only() -> None:
    def run(side: int, ram: int, vram: int | None) -> records.WorkloadRun:
        return records.WorkloadRun("w", 1, (side, side), ram, vram, vram, "vmhwm", 1.0, 1.0, 0.0, 1.0, "balanced",
                                   "mobilenet0.25")

    # 2 MP more pixels: 500 MB more VRAM reads 250 bytes a pixel
    assert records.slope([run(1000, 10**9, 10**8), run(1732, 10**9, 6 * 10**8)], "cuda:0") == pytest.approx(250, rel=0.01)
    # the small photo's VRAM not read: its RAM peak is no base for the large one's VRAM
    assert records.slope([run(1000, 10**8, None), run(1732, 10**8, 6 * 10**8)], "cuda:0") is None
