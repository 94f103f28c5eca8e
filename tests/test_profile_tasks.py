"""The hardware check measures GPEN's other tasks per mode (tiny networks, small images), the modes
without a plan get the engine's own refusal, the table shows both, and ``auto`` uses the measured
task peaks instead of its built-in estimates, saying so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpen_core.engine import budget
from gpen_core.engine import profile_records as records
from gpen_core.engine import profile_store as store
from gpen_core.errors import InputError
from gpen_core.hwcheck import report, runner
from gpen_core.hwcheck.workloads import TASK_WORKLOADS, Workload, damage_strokes, face_boxes
from gpen_core.modes import MODES
from gpen_core.networks.arch import GPENConfig
from gpen_core.options import RestoreOptions
from gpen_core.platform.meter import format_bytes

TINY = GPENConfig(64, style_dim=64, n_mlp=2, channel_multiplier=1, narrow=0.125)
CONFIGS = {n: TINY for n in ("GPEN-BFR-256", "GPEN-BFR-512", "GPEN-Colorization-1024", "GPEN-Inpainting-1024", "GPEN-Seg2face-512")}
FACE = (Workload("face", "aligned face", 64, 64, 1, aligned=True),)
PHOTO = Workload("task-photo", "small photo, one face", 320, 240, 1, face_px=96)
TASK_SMALL = {"colorize": PHOTO, "inpaint": PHOTO, "seg2face": Workload("label-map", "label map", 64, 64, 1, aligned=True)}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, one_thread: None) -> tuple[records.Profile, Path]:
    home = tmp_path_factory.mktemp("profile_tasks_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPEN_HOME", str(home))
        mp.setenv("GPEN_OFFLINE", "1")
        mp.setenv("MODELSCOPE_CACHE", str(home / "modelscope"))
        seen: list[float] = []
        prof = runner.run_profile(modes=["low", "balanced"], models_dir=home, workloads=FACE, model_configs=CONFIGS,
                                  isolate=False, backends=False, tasks=True, task_workloads=TASK_SMALL,
                                  progress=lambda f, d: seen.append(f))
    assert seen == sorted(seen) and seen[-1] == 1.0
    return prof, home


def test_every_task_gets_a_row_per_mode_measured_where_the_engine_runs_it(measured: tuple[records.Profile, Path]) -> None:
    prof, _ = measured
    rows = {(t.task, t.mode): t for t in prof.tasks}
    assert set(rows) == {(t, m) for t in ("colorize", "inpaint", "seg2face") for m in ("low", "balanced")}
    for task in ("colorize", "inpaint", "seg2face"):
        low = rows[(task, "low")]
        with pytest.raises(InputError) as err:  # what the engine answers such a request, word for word
            RestoreOptions(mode="low", task=task, aligned=task == "seg2face").validated()
        assert low.refused == str(err.value) and not low.usable and low.peak_bytes == 0
        run = rows[(task, "balanced")]
        assert run.usable and run.refused is None and run.failed is None
        assert run.peak_ram_bytes > 0 and run.peak_bytes == run.peak_ram_bytes  # RAM binds on the CPU
        assert run.seconds_per_face is not None and run.seconds_per_face > 0 and run.total_s >= run.seconds_per_face
        assert run.dtype in ("bfloat16", "float32") and run.weights == "synthetic"
        assert run.covered_pixels == TASK_SMALL[task].pixels
        assert run.workload == TASK_SMALL[task].label


def test_the_rows_round_trip_through_the_saved_profile(measured: tuple[records.Profile, Path]) -> None:
    prof, home = measured
    again = store.load_profile("cpu", home)
    assert again is not None and again.tasks == prof.tasks
    assert records.Profile.from_dict({k: v for k, v in prof.to_dict().items() if k != "tasks"}).tasks == ()  # older files


def test_auto_uses_the_measured_task_peak_and_says_so(measured: tuple[records.Profile, Path], tmp_path: Path) -> None:
    prof, home = measured
    row = next(t for t in prof.tasks if t.task == "colorize" and t.mode == "balanced")
    need, src = budget.estimate_peak(MODES["balanced"], "cpu", (320, 240), home, work=budget.Work(task="colorize"))
    assert need == row.peak_bytes and src.startswith("measured on this machine for the colorize task")
    # photos beyond the workload add the built-in growth, and the source says that part is estimated
    big, src = budget.estimate_peak(MODES["balanced"], "cpu", (640, 480), home, work=budget.Work(task="colorize"))
    assert big == row.peak_bytes + (640 * 480 - 320 * 240) * 40 and "estimated for the photo's size" in src
    seg = next(t for t in prof.tasks if t.task == "seg2face" and t.mode == "balanced")
    assert budget.estimate_peak(MODES["balanced"], "cpu", (64, 64), home, work=budget.Work(task="seg2face"))[0] == seg.peak_bytes
    free = budget.Free(ram_bytes=64 * 10**9, vram_bytes=None)
    choice = budget.choose("cpu", (320, 240), home, free, work=budget.Work(task="inpaint"))
    assert choice.mode.name == "quality"  # not measured: its built-in estimate, labelled so
    assert "built-in estimate" in choice.reason
    # a mode the check measured is chosen on its measured figure
    only_balanced = budget.choose("cpu", (320, 240), home, free, available=lambda m: m.name == "balanced", work=budget.Work(task="inpaint"))
    assert only_balanced.mode.name == "balanced" and "measured on this machine for the inpaint task" in only_balanced.reason
    # without a profile: the built-in estimate, as before the check
    assert "built-in estimate" in budget.estimate_peak(MODES["balanced"], "cpu", (320, 240), tmp_path, work=budget.Work(task="colorize"))[1]


def test_the_report_and_the_readme_show_the_tasks_table(measured: tuple[records.Profile, Path]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench

    prof, _ = measured
    table = report.tasks_table(prof, fits=False)
    lines = table.splitlines()
    assert lines[0] == "| task (generator, workload) | `low` | `balanced` |"
    colorize = next(line for line in lines if line.startswith("| `colorize`"))
    assert "GPEN-Colorization-1024; small photo, one face" in colorize
    assert "refused: use faces-only, balanced, quality or auto" in colorize
    row = next(t for t in prof.tasks if t.task == "colorize" and t.mode == "balanced")
    assert f"{format_bytes(row.peak_ram_bytes)} · {row.seconds_per_face:.2f} s/face · {row.dtype}" in colorize
    fits = report.tasks_table(prof, budget.Free(ram_bytes=64 * 10**9, vram_bytes=None))
    assert " · fits" in fits and "does not fit" not in fits
    assert "does not fit now" in report.tasks_table(prof, budget.Free(ram_bytes=1000, vram_bytes=None))
    assert "GPEN's other tasks" in report.format_report(prof, budget.Free(ram_bytes=64 * 10**9, vram_bytes=None))
    readme = bench.tasks_readme_table(prof)
    assert readme.startswith(table) and "`auto` reads these peaks" in readme


def test_the_readme_writer_names_missing_markers_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench as readme_block  # the docs' block writer lives in bench.py

    readme = tmp_path / "README.md"
    readme.write_text("<!-- modes-table:start -->\nold\n<!-- modes-table:end -->\n", encoding="utf-8")
    monkeypatch.setitem(readme_block.BLOCKS, "modes-table", readme)
    monkeypatch.setitem(readme_block.BLOCKS, "tasks-table", readme)
    with pytest.raises(SystemExit) as err:
        readme_block.require_blocks(["modes-table", "tasks-table"])
    assert "<!-- tasks-table:start --> … <!-- tasks-table:end -->" in str(err.value)
    readme.write_text(readme.read_text() + "<!-- tasks-table:start -->\n<!-- tasks-table:end -->\n", encoding="utf-8")
    readme_block.require_blocks(["modes-table", "tasks-table"])
    readme_block.replace_block("tasks-table", "| t |")
    assert "<!-- tasks-table:start -->\n| t |\n<!-- tasks-table:end -->" in readme.read_text()


def test_a_later_check_of_some_modes_keeps_the_other_task_rows(measured: tuple[records.Profile, Path], tmp_path: Path) -> None:
    prof, _ = measured
    store.save_profile(prof, tmp_path)
    quality = records.TaskRow(task="colorize", mode="quality", model="GPEN-Colorization-1024", workload="w", weights="synthetic",
                              dtype="float32", peak_ram_bytes=5, peak_bytes=5, covered_pixels=1, ran_mode="quality")
    later = records.Profile.from_dict({**prof.to_dict(), "tasks": [records.jsonable(quality.__dict__)]})
    store.save_profile(later, tmp_path)
    saved = store.load_profile("cpu", tmp_path, any_machine=True)
    assert {(t.task, t.mode) for t in saved.tasks} == {(t.task, t.mode) for t in prof.tasks} | {("colorize", "quality")}


def test_standard_task_workloads_and_the_damage_strokes() -> None:
    assert TASK_WORKLOADS["seg2face"].aligned and TASK_WORKLOADS["seg2face"].width == 512  # aligned label maps only
    for task in ("colorize", "inpaint"):
        w = TASK_WORKLOADS[task]
        assert not w.aligned and w.faces == 1 and w.pixels == 3000 * 2000
    mask = damage_strokes(PHOTO)
    (x0, y0, x1, y1), = face_boxes(PHOTO)
    assert mask.shape == (240, 320) and mask.dtype.name == "uint8"
    assert mask[y0:y1, x0:x1].any() and not mask[:y0].any() and not mask[y1:].any()  # the stroke is on the face only
    assert runner.refusal("colorize", "balanced") is None and "no plan" in (runner.refusal("inpaint", "low") or "")


def test_the_standard_check_measures_tasks_and_overrides_do_not_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    planned: list[bool] = []

    def fake_plan(*a: object, **k: object) -> tuple[list, list]:
        planned.append(True)
        return [], []

    monkeypatch.setattr(runner, "plan_tasks", fake_plan)
    monkeypatch.setattr(runner, "measure_mode", lambda spec, report: pytest.skip("only the planning is checked"))
    with pytest.raises(pytest.skip.Exception):
        runner.run_profile(modes=["low"], models_dir=tmp_path, model_configs=CONFIGS, isolate=False, backends=False, save=False)
    assert planned == []
    with pytest.raises(pytest.skip.Exception):
        runner.run_profile(modes=["low"], models_dir=tmp_path, isolate=False, backends=False, save=False)
    assert planned == [True]


@pytest.mark.parametrize("native", [True, False])
def test_the_reports_native_bf16_is_the_one_the_plan_decided(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, native: bool) -> None:
    """The machine line says what the plan decided on the machine measured, not a guess from flag names (an
    ARM CPU's BF16 feature has none of the x86 names)."""
    from gpen_core.networks import plan

    feats = dict(plan.cpu_features(), native_bf16=native)
    monkeypatch.setattr(plan, "cpu_features", lambda: feats)
    monkeypatch.setattr(runner, "_measure_everything", lambda *a: ([], {}, None, []))
    prof = runner.run_profile(modes=["low"], models_dir=tmp_path, isolate=False, backends=False, save=False)
    assert f"native bf16: {'yes' if native else 'no'}" in report.machine_line(prof)
    assert plan.choose_plan("cpu", "auto")[0].dtype == ("bfloat16" if native else "float32")


@pytest.mark.parametrize("flags", [("bf16",), ("avx512_bf16",)])
def test_a_torch_without_onednn_still_plans_by_the_flags(monkeypatch: pytest.MonkeyPatch, flags: tuple[str]) -> None:
    """Some ARM builds of torch have no oneDNN, hence no mkldnn op to ask: every request used to fail there."""
    import types

    import torch

    from gpen_core.networks import plan

    monkeypatch.setattr(torch.ops, "mkldnn", types.SimpleNamespace())
    monkeypatch.setattr(plan, "cpu_flags", lambda: set(flags))
    assert plan.cpu_features()["native_bf16"] is (flags == ("avx512_bf16",))  # ARM's bf16 needs oneDNN to be fast
    assert plan.choose_plan("cpu", "auto")[0].dtype == ("float32" if flags == ("bf16",) else "bfloat16")


def test_a_mode_or_task_row_out_of_memory_is_recorded_as_needing_more_than_was_free(monkeypatch: pytest.MonkeyPatch,
                                                                                      tmp_path: Path) -> None:
    def out_of_memory(spec: dict, report: object) -> None:
        raise MemoryError("no room")

    monkeypatch.setattr(runner, "measure_mode", out_of_memory)
    monkeypatch.setattr(runner, "measure_task", out_of_memory)
    prof = runner.run_profile(modes=["low", "balanced"], models_dir=tmp_path, workloads=FACE, model_configs=CONFIGS,
                              isolate=False, backends=False, tasks=True, task_workloads=TASK_SMALL, save=False)
    assert set(prof.modes) == {"low", "balanced"}
    assert all(m.failed == "out of memory: no room" for m in prof.modes.values())
    rows = {(t.task, t.mode): t for t in prof.tasks}
    for task in ("colorize", "inpaint", "seg2face"):
        row = rows[(task, "balanced")]
        assert row.failed == "out of memory: no room" and row.peak_bytes == prof.free_at_start["ram_bytes"]
        assert row.workload == TASK_SMALL[task].label and rows[(task, "low")].refused is not None


def test_a_task_row_and_a_mode_row_record_one_request_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same request, measured as a mode's workload and as a task row, keeps the same notes (the engine's own,
    the runtime, a step down) and the same peak on the binding memory; the report shows the task row's notes."""
    from dataclasses import asdict, replace
    from types import SimpleNamespace

    ran_f32 = "OpenVINO ran float32 instead of bfloat16 (test)"
    res = SimpleNamespace(
        mode=MODES["low"], dtype="bfloat16", backend="openvino", backend_reason="measured faster here",
        notes=(ran_f32,), faces=[object()], processed_size=(64, 64), detector="none",
        peaks=SimpleNamespace(rss_bytes=900, vram_allocated_bytes=300, vram_reserved_bytes=500, method="vmhwm"),
        timings=SimpleNamespace(total_s=1.0, load_s=0.5, restore_s=0.25))

    class Fake:
        device = "cuda:0"

        def __call__(self, *args: object, **kwargs: object) -> SimpleNamespace:
            return res

        def unload(self) -> None:
            pass

    monkeypatch.setattr(runner, "fresh_restorer", lambda spec: (Fake(), (100, 0, 0)))
    w = TASK_SMALL["seg2face"]
    common = {"mode": "balanced", "model_opt": "GPEN-Seg2face-512", "kind": "synthetic", "notes": []}
    task = runner.measure_task({**common, "label": "seg2face in balanced", "gpen_task": "seg2face",
                                "model": "GPEN-Seg2face-512", "workload": asdict(w)}, lambda f, d: None)
    mode = runner.measure_mode({**common, "label": "balanced", "use_detector": False, "portraits": [],
                                "workloads": [asdict(w)]}, lambda f, d: None)
    said = ("the engine ran low instead of balanced (it did not fit): balanced was not measured",
            ran_f32, "the generator ran on OpenVINO (measured faster here)")
    mode_notes = {*mode.notes, *(n for r in mode.runs for n in r.notes)}
    assert all(n in mode_notes for n in said), mode_notes
    assert all(n in task.notes for n in said), task.notes
    assert task.peak_bytes == mode.peak_bytes == 500  # reserved VRAM binds on CUDA
    prof = records.Profile("", "cuda:0", True, {}, {}, {}, False, (), {"balanced": mode}, tasks=(task,))
    text = report.format_report(prof, budget.Free(ram_bytes=10**12, vram_bytes=None))
    assert f"note (balanced, seg2face in balanced): {ran_f32}" in text
    # a GPU check whose free VRAM is unknown (ZeroGPU outside a GPU call) weighs RAM, as auto does
    prof = replace(prof, tasks=(replace(task, ran_mode="balanced"),))
    assert "does not fit now" in report.tasks_table(prof, budget.Free(ram_bytes=100, vram_bytes=None))
    assert " · fits" in report.tasks_table(prof, budget.Free(ram_bytes=100, vram_bytes=10**12))
    assert "more RAM than you have free" in report.recommendation(prof, budget.Free(ram_bytes=100, vram_bytes=None))
