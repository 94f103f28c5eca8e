"""A long run converts first: a folder or a clip whose expected work on torch outlasts converting its generator
converts it in a child process before the first face, says so, and restores on OpenVINO."""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from gpen_core.engine import convert_first as cf
from gpen_core.engine import prepare
from gpen_core.modes import MODES
from gpen_core.platform import oom
from gpen_core import cli_words
from gpen_core.runtimes.openvino import generator as ov_backend

from .factories import low_on_openvino
from .hostile import _tiff_float_rgb

LOW_OV = low_on_openvino()
GB = 10**9
needs_openvino = pytest.mark.skipif(ov_backend.openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")
PENDING = cf.Pending("GPEN-BFR-512", 512, "float32", ram=2 * GB, ram_measured=True)
TORCH = cf.Figure(4.47, "measured on this machine (2026-12-05)")
CONVERT = cf.Figure(13.0, "measured on this machine (2026-12-05)")


@pytest.fixture()
def home(tmp_path: Path, gen256: Path) -> Path:
    (tmp_path / "GPEN-BFR-256.pth").symlink_to(gen256)
    return tmp_path


def test_a_run_whose_work_outlasts_the_conversion_converts_when_the_child_fits() -> None:
    assert cf.decide(PENDING, 3, TORCH, CONVERT, free_ram=8 * GB) is None  # 3 × 4.47 s = 13.4 s > 13 s


def test_a_short_run_is_not_converted_first_and_says_both_figures() -> None:
    why = cf.decide(PENDING, 2, TORCH, CONVERT, free_ram=8 * GB)  # 8.9 s of work against a 13 s conversion
    assert why is not None and why.outcome == "short run"
    assert "2 faces × 4.47 s on torch" in why.note and "~13 s" in why.note


def test_a_child_that_does_not_fit_the_free_ram_is_not_started_and_says_why() -> None:
    why = cf.decide(PENDING, 1000, TORCH, CONVERT, free_ram=1 * GB)
    assert why is not None and why.outcome == "no memory"
    assert "2.00 GB" in why.note and "1.00 GB is free" in why.note and "stays on torch" in why.note


def test_nothing_is_pending_where_auto_keeps_the_generator_on_torch(home: Path) -> None:
    assert cf.pending_generator(LOW_OV, home) is None  # no speed record, the per-kind defaults off (conftest)


@needs_openvino
def test_the_pending_generator_and_its_figures_are_labelled(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oom, "engine_import_figures", lambda: {"rss": 250 * 10**6})  # the installed build's imports
    ov_backend.record_speed(256, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test")
    p = cf.pending_generator(LOW_OV, home)
    assert p is not None and (p.model, p.size, p.dtype) == ("GPEN-BFR-256", 256, "float32")
    assert p.ram == 757 * 2**20 + 250 * 10**6 and p.ram_measured  # the measured peak plus the engine's imports
    per_face = cf.torch_seconds(p, home)
    assert per_face is not None and per_face.value == 0.2 and "measured on this machine" in per_face.source
    convert = cf.conversion_seconds(p, home)  # no hardware check here: the documented figure, called an estimate
    assert convert.value == 3.4 and convert.source.startswith("an estimate")


@needs_openvino
def test_a_run_short_of_memory_starts_no_child(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ov_backend.record_speed(256, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test")
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(500 * 10**6))
    monkeypatch.setattr(cf, "_in_child", lambda *a: pytest.fail("no child where it cannot fit"))
    out = cf.convert_first(LOW_OV, 1000, models_dir=home)
    assert out.outcome == "no memory" and out.notes == [out.note]


@needs_openvino
def test_a_long_run_converts_in_a_child_and_says_so(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lines and the note of a conversion that went ahead; the child itself (a real conversion, then the
    restore loading its files on OpenVINO) runs in tests/test_app_video_convert.py, through the Video tab."""
    ov_backend.record_speed(256, "float32", torch_s=0.2, openvino_s=0.1, models_dir=home, source="test")
    # low itself loads no OpenVINO runtime under auto: nothing is prepared for it
    plain = prepare.convert_ahead([MODES["low"]], models_dir=home)
    assert plain.converted == [] and plain.cached == [] and not list((home / "openvino").glob("GPEN-BFR-256-*"))
    children: list[str] = []
    monkeypatch.setattr(cf, "_in_child", lambda mode, models_dir, stop=None: children.append(mode.model) or "")
    said: list[str] = []
    out = cf.convert_first(LOW_OV, 100, models_dir=home, say=said.append)  # 100 × 0.2 s outlasts ~3.4 s
    assert out.outcome == "converted", out.note
    assert children == ["GPEN-BFR-256"]
    assert said[0].startswith("converting GPEN-BFR-256 for OpenVINO before the first face")
    assert said[-1] == f"converting GPEN-BFR-256 for OpenVINO: {out.seconds:.0f} s, once"
    assert "loads it on OpenVINO" in out.note


def _args(**kw: object) -> argparse.Namespace:
    base = dict(backend="auto", model=None, task="enhance", mode="low", models_dir=None, start=None, end=None, device="cpu")
    return argparse.Namespace(**{**base, **kw})


def test_only_auto_on_the_cpu_with_the_modes_own_generator_converts_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cf, "convert_first", lambda *a, **k: pytest.fail("not for this run"))
    for args in (_args(backend="torch"), _args(device="cuda"), _args(model="x.pth"), _args(task="colorize")):
        assert cli_words.convert_before_run(args, 100, (64, 64), print).outcome == "nothing to convert"
    assert cli_words.convert_before_photos(_args(), [Path("one.png")], print).outcome == "nothing to convert"


def test_a_photos_size_is_read_upright_from_its_header(tmp_path: Path) -> None:
    from PIL import Image

    turned = tmp_path / "turned.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 64x48, shown a quarter turn: 48x64, as the decoder turns it
    Image.new("RGB", (64, 48)).save(turned, exif=exif)
    (tmp_path / "not.jpg").write_bytes(b"not a photo")
    assert cli_words.photo_header(turned) == ("JPEG", (48, 64))
    assert cli_words.photo_header(tmp_path / "not.jpg") is None
    float_rgb = tmp_path / "float_rgb.tif"  # Pillow cannot open it; the decoder restores it
    _tiff_float_rgb(float_rgb)
    assert cli_words.photo_header(float_rgb) == ("TIFF", (48, 32))


def test_a_clips_expected_frames_are_its_restored_part(tmp_path: Path) -> None:
    import av

    path = tmp_path / "c.mp4"
    with av.open(str(path), "w") as out:  # 12 frames at 4 fps: 3 s
        s = out.add_stream("libx264", rate=Fraction(4, 1))
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        for i in range(12):
            out.mux(s.encode(av.VideoFrame.from_ndarray(np.full((48, 64, 3), 20 * i, np.uint8), format="rgb24")))
        out.mux(s.encode())
    assert cli_words.clip_frames(path) == (12, (64, 48))
    assert cli_words.clip_frames(path, 1.0, 2.5)[0] == 6
    assert cli_words.clip_frames(tmp_path / "missing.mp4") == (0, (0, 0))


class _Plain:
    """Stands in for the engine: no faces, each frame written as it came (only the count matters here)."""

    device = "cpu"

    def detect(self, rgb: np.ndarray) -> list:
        return []

    def restore(self, rgb: np.ndarray, detections: list) -> object:
        from gpen_core.video.engine_seam import FrameOut

        return FrameOut(rgb, ())


@pytest.mark.parametrize(("start", "end", "frames"), [(None, 2.01, 51), (0.01, 2.04, 50), (0.5, 2.01, 38), (0.99, None, 50)])
def test_a_parts_expected_frames_count_the_frames_between_its_ends_not_its_length_rounded(
        tmp_path: Path, start: float | None, end: float | None, frames: int) -> None:
    """25 fps, frames at k / 25 s: up to 2.01 s holds frames 0 … 50 (51; 2.01 × 25 rounded said 50); from 0.01 s to
    2.04 s frames 1 … 50 (50; rounded: 51). The restore writes what the count says."""
    from gpen_core.video.probe import expected_frames, open_video
    from gpen_core.video.stream import VideoOptions, restore_video

    from .videoclips import gradient_frames, make_clip

    path = make_clip(tmp_path / "c.mp4", gradient_frames(75), time_base=Fraction(1, 25))  # 3 s
    container, info = open_video(path, count=True)
    container.close()
    assert info.packets is None and info.frames == 75  # a declared count: the part is told by the rate
    assert expected_frames(info, start, end) == frames
    written = restore_video(path, tmp_path / "out.mp4", engine=_Plain(), video=VideoOptions(start_s=start, end_s=end))
    assert written.frames == frames


def test_a_part_to_the_clips_end_counts_from_the_declared_frames_not_a_duration_past_the_last() -> None:
    """75 frames at 25 fps whose container says 3.03 s (audio a little longer): from 0.99 s on, frames 25 … 74 (50);
    the duration × rate said 51."""
    from gpen_core.video.probe import ClipInfo, expected_frames

    info = ClipInfo(size=(64, 48), frames=75, duration_s=3.03, rate=Fraction(25), time_base=Fraction(1, 25), codec="h264")
    assert expected_frames(info, 0.99, None) == 50
    assert expected_frames(info) == 75


# Gaps of 33 and 200 ms (1/1000 s time base): 12 frames in 0.73 s that a 25 fps header calls 18
VFR_MS = [0, 33, 66, 266, 299, 332, 365, 565, 598, 631, 664, 697]


def _vp8_webm(path: Path, pts_ms: list[int]) -> Path:
    import av

    with av.open(str(path), "w") as out:
        s = out.add_stream("libvpx", rate=25, options={"deadline": "realtime", "cpu-used": "8"})
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        s.codec_context.time_base = Fraction(1, 1000)
        for i, t in enumerate(pts_ms):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 20 * i, np.uint8), format="rgb24")
            frame.pts, frame.time_base = t, Fraction(1, 1000)
            out.mux(s.encode(frame))
        out.mux(s.encode())
    return path


@pytest.mark.parametrize("container", ["mkv", "webm"])
def test_a_variable_rate_clips_frames_are_its_packets_not_its_length_at_its_rate(tmp_path: Path, container: str) -> None:
    from gpen_core.video.limits import ClipCap
    from gpen_core.video.probe import expected_frames, open_video

    from .videoclips import gradient_frames, make_clip

    if container == "mkv":
        path = make_clip(tmp_path / "v.mkv", gradient_frames(12), pts=VFR_MS, time_base=Fraction(1, 1000))
    else:
        path = _vp8_webm(tmp_path / "v.webm", VFR_MS)
    assert cli_words.clip_frames(path)[0] == 12
    assert cli_words.clip_frames(path, 0.2, 0.6)[0] == len([t for t in VFR_MS if 200 <= t < 600])  # 6
    assert cli_words.clip_frames(path, 0.6)[0] == len([t for t in VFR_MS if t >= 600])  # 3
    container_, info = open_video(path, count=True)
    container_.close()
    cap = ClipCap(0.3, 60, "a test's limit")  # from the part's start: its seconds, then its frames
    assert expected_frames(info, cap=cap) == len([t for t in VFR_MS if t < 300])  # 5
    assert expected_frames(info, 0.3, cap=ClipCap(10.0, 4, "a test's limit")) == 4


def test_a_long_clips_count_stops_at_its_bound_and_estimates_the_rest_at_the_counted_rate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.video import probe

    from .videoclips import gradient_frames, make_clip

    path = make_clip(tmp_path / "c.mkv", gradient_frames(12), time_base=Fraction(1, 4))  # 12 frames at 4 fps: 3 s
    monkeypatch.setattr(probe, "COUNT_PACKETS", 5)  # 0 to 1 s read, 1.25 to 2.75 s estimated
    container, info = probe.open_video(path, count=True)
    container.close()
    assert info.packets is not None and len(info.packets.times) == 5 and not info.packets.complete
    assert probe.expected_frames(info) == 12
    assert probe.expected_frames(info, 0.5, 2.0) == 6  # 0.5 to 1.75 s: 3 read, 3 estimated
    assert probe.expected_frames(info, 2.0, 10.0) == 4  # past the read part, up to the clip's end


def test_a_clips_packets_are_read_once_while_the_file_is_unchanged(tmp_path: Path) -> None:
    from gpen_core.video import probe

    from .videoclips import gradient_frames, make_clip

    path = make_clip(tmp_path / "c.mkv", gradient_frames(12), time_base=Fraction(1, 4))
    first = probe.count_packets(str(path))
    assert first is not None and len(first.times) == 12
    assert probe.count_packets(str(path)) is first  # upload, Restore and the restore ask: one read
    make_clip(path, gradient_frames(8), time_base=Fraction(1, 4))  # the same name, another clip
    assert len(probe.count_packets(str(path)).times) == 8


def test_a_clips_result_carries_what_was_done_before_its_first_frame_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.result import Peaks
    from gpen_core.video.result import VideoResult

    r = VideoResult(output="o.mp4", frames=4, fps=4.0, duration_s=1.0, size=(64, 64), mode="balanced", mode_reason="",
                    audio="none", crf=18, seconds_per_frame=0.5, total_s=2.0, faces_per_frame_max=1,
                    peaks=Peaks(900_000_000, 400_000_000, "vmhwm"), rotation=0, lookahead_frames=3, notes=("later",))
    done = cf.ConvertFirst("converted", "GPEN-BFR-512 was converted for OpenVINO before the first face", 13.0)
    assert cli_words.with_run_notes(r, done).notes == (done.note, "later")
    assert cli_words.with_run_notes(r, cf.ConvertFirst("nothing to convert")) is r
    # the clips' expected faces: one a frame over every clip of the run, planned for the first clip's frame size
    counted: list[tuple[int, tuple[int, int]]] = []
    monkeypatch.setattr(cli_words, "clip_frames", lambda path, start, end: (10, (640, 360)))
    monkeypatch.setattr(cli_words, "convert_before_run",
                        lambda args, faces, size, say: counted.append((faces, size)) or done)
    assert cli_words.convert_before_clips(_args(), [Path("a.mp4"), Path("b.mp4")], print) is done
    assert counted == [(20, (640, 360))]


def test_two_runs_at_once_convert_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two visitors' clips asking at the same moment: one child converts, the other waits for it and finds it done."""
    import threading
    import time

    converted, inside, overlapped = [], [0], []

    def child(mode, models_dir, stop=None) -> str:
        inside[0] += 1
        overlapped.append(inside[0] > 1)
        time.sleep(0.3)
        converted.append(mode.model)
        inside[0] -= 1
        return ""

    monkeypatch.setattr(cf, "pending_generator", lambda mode, models_dir: None if converted else PENDING)
    monkeypatch.setattr(cf, "torch_seconds", lambda p, models_dir: TORCH)
    monkeypatch.setattr(cf, "conversion_seconds", lambda p, models_dir: CONVERT)
    monkeypatch.setattr(cf, "_in_child", child)
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(8 * GB))
    outcomes: list[str] = []
    runs = [threading.Thread(target=lambda: outcomes.append(cf.convert_first(LOW_OV, 100).outcome)) for _ in range(2)]
    for t in runs:
        t.start()
    for t in runs:
        t.join(10)
    assert sorted(outcomes) == ["converted", "nothing to convert"] and converted == ["GPEN-BFR-256"] and overlapped == [False]


def test_a_run_waits_for_the_background_preparation_converting_its_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's background preparation is converting the generator: the clip waits for it, then finds it done
    (no second child); the visitor's Stop still ends the wait."""
    import threading
    import time

    done = threading.Event()
    monkeypatch.setattr(prepare, "converting", lambda tok: tok == "generator:GPEN-BFR-256" and not done.is_set())
    monkeypatch.setattr(cf, "torch_seconds", lambda p, models_dir: TORCH)
    monkeypatch.setattr(cf, "conversion_seconds", lambda p, models_dir: CONVERT)
    monkeypatch.setattr(cf, "_in_child", lambda *a, **k: pytest.fail("the background preparation converts it"))
    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(8 * GB))
    pending = cf.Pending("GPEN-BFR-256", 256, "float32", ram=GB, ram_measured=True)
    monkeypatch.setattr(cf, "pending_generator", lambda mode, models_dir: None if done.is_set() else pending)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert cf.convert_first(LOW_OV, 100, stop=stop).outcome == "stopped"  # waited, then stopped by its visitor
    threading.Timer(0.3, done.set).start()
    t0 = time.monotonic()
    assert cf.convert_first(LOW_OV, 100).outcome == "nothing to convert" and time.monotonic() - t0 >= 0.25


def test_a_torch_figure_from_a_cpu_of_this_kind_names_that_cpu_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.runtimes.openvino import defaults

    monkeypatch.setenv("GPEN_OPENVINO_DEFAULTS", "1")
    monkeypatch.setattr(defaults, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})  # a Zen 4, no record here
    per_face = cf.torch_seconds(PENDING, tmp_path)
    assert per_face is not None and per_face.value == 2.414
    assert per_face.source == "measured on an AMD EPYC Zen 4 (AVX-512 BF16, no AMX), a CPU of this kind"
