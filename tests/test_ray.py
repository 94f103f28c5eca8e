"""Ray: batch restores with Ray Data, a clip's segments on two Ray workers, online restores with Ray Serve
behind the app (marker ``ray``).

One local Ray for every test here (started once: about 6 s on 2 cores): 2 CPUs, no dashboard,
bound to 127.0.0.1, files under the test's temp folder (the CI box has 2 cores, so this is also
the deadlock check: actors at whole CPUs left nothing for reading and hung there with no error).
That a killed driver's Ray leaves nothing behind needs a driver of its own: tests/test_ray_reaper.py.
Models: the ``low`` mode's narrow folder of fixtures_models (a random 256 px GPEN an eighth of GPEN-BFR-256's
width, the real RetinaFace MobileNet from ../shared): detection and pasting are real, and what is checked here (the
records, the workers, the replies) holds for any 256 px generator, and its forward costs a sixth of the full
width's (0.05 s against 0.30 s a face on one core).
"""

from __future__ import annotations

import io
import json
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import psutil
import pytest
from PIL import Image

from gpen_core.errors import InputError

from .conftest import ROOT
from .fixtures_models import low_narrow_home, low_narrow_session_home  # noqa: F401
from .videoclips import frame_index, read_clip

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="needs Ray: bash scripts/setup.sh --ray (pip install -r requirements-ray.txt)")

EXAMPLES = ("astronaut_low_resolution.jpg", "hopper_heavy_jpeg.jpg", "pair_faded_print.jpg")
LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
BATCH_LIMIT_S = 420  # far above a healthy run (~1 min here): past it the pool is stuck, not slow


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from gpen_core.scaleout.runtime import ray_session

    # Not under pytest's basetemp: Ray's socket paths (session name with date and pid) must stay under 108
    # characters, and /tmp/pytest-of-<user>/pytest-<run>/popen-gw<n>/ray0 leaves too few.
    tmp = Path(tempfile.mkdtemp(prefix="gr-"))
    try:
        with ray_session(num_cpus=2, temp_dir=tmp) as session:
            yield session
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _photo_folder(root: Path) -> Path:
    """A folder with one bad file: three photos with faces and a text file named .jpg."""
    src = root / "in"
    src.mkdir()
    for name in EXAMPLES:
        shutil.copy(ROOT / "examples" / name, src / name)
    (src / "corrupt.jpg").write_text("this is text, not a picture")
    return src


def _run_with_deadline(fn, *args, **kwargs):
    """Run fn in a thread; a stuck Ray job fails the test instead of hanging CI."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised below, in the test's thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(BATCH_LIMIT_S)
    assert not t.is_alive(), f"the Ray job did not finish in {BATCH_LIMIT_S} s: the actor pool is starved (deadlock)"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


def _ray_listening() -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
    """(every listening socket of Ray's processes (our children), those not on loopback)."""
    procs = {p.pid: p for p in psutil.Process().children(recursive=True)}
    listening = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in procs:
            try:
                name = procs[c.pid].name()
            except psutil.Error:
                name = "?"
            listening.append((c.laddr.ip, c.laddr.port, name))
    return listening, [x for x in listening if x[0] not in LOOPBACK]


def test_local_ray_listens_on_loopback_only(ray_local) -> None:
    assert ray_local.started_here and ray_local.address.startswith("127.0.0.1:")
    assert ray_local.cpus == 2
    listening, exposed = _ray_listening()
    assert listening, "found no Ray listening sockets to check"
    assert not exposed, f"Ray listens beyond loopback: {exposed}"


def test_workers_take_fractional_cpus_and_leave_some_for_reading() -> None:
    from gpen_core.scaleout.batch import READ_CPUS, RESERVED_CPUS, plan_resources
    from gpen_core.scaleout.runtime import WorkerPool

    assert plan_resources(2, 0, None, 0, None) == (1, 1.5)
    workers, cpus = plan_resources(2, 0, 2, 0, None)
    assert workers == 2 and cpus < 1 and workers * cpus + READ_CPUS <= 2 - RESERVED_CPUS + READ_CPUS
    assert [WorkerPool(workers, c, 0, 0, "cpu").threads for c in (cpus, 1.5, 2.0)] == [1, 1, 2]
    assert plan_resources(16, 0, None, 0, None) == (8, 1.75)
    assert plan_resources(8, 2, None, 0.5, None)[0] == 4  # one per half GPU
    with pytest.raises(InputError, match="--workers"):
        plan_resources(2, 0, 2, 0, 1.0)  # two whole-CPU actors on 2 CPUs: the measured 14-minute hang
    with pytest.raises(InputError, match="GPU"):
        plan_resources(2, 0, 1, 1.0, None)
    # Memory: Ray would also wait for ever for an actor whose reservation does not fit.
    assert plan_resources(16, 0, None, 0, None, memory_per_worker=2e9, cluster_memory=9e9) == (4, 3.75)
    with pytest.raises(InputError, match="--workers 1 or fewer"):
        plan_resources(2, 0, 2, 0, None, memory_per_worker=2e9, cluster_memory=3e9)


@pytest.mark.parametrize("gpus, per_gpu, memory_gb, workers, segments, expected", [
    (0, 0.0, 5, None, 10, 2),  # 2 × 2 GB fit, not the 8 of a 16-CPU default: 2, as photos (it said "use --workers 2")
    (2, 0.5, 1000, None, 10, 4),  # one per half GPU (it took one per 2 CPUs: 8)
    (0, 0.0, 1000, 6, 3, 3),  # never more workers than segments, as photos
])
def test_a_ray_video_sizes_its_pool_as_the_photo_batch_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpus: int, per_gpu: float, memory_gb: int, workers: int | None,
    segments: int, expected: int
) -> None:
    from contextlib import contextmanager
    from types import SimpleNamespace

    from gpen_core import RestoreOptions
    from gpen_core.scaleout import runtime, video_ray
    from gpen_core.video import resumable

    @contextmanager
    def session(address: str | None = None) -> Iterator[runtime.RaySession]:
        yield runtime.RaySession(address="127.0.0.1:1", started_here=True, cpus=16, gpus=gpus, memory=memory_gb * 1e9)

    monkeypatch.setattr(runtime, "ray_session", session)
    monkeypatch.setattr(runtime, "import_ray", lambda: SimpleNamespace(remote=lambda fn: SimpleNamespace(options=lambda **kw: fn)))
    monkeypatch.setattr(runtime, "worker_memory_bytes", lambda mode, device="cpu": int(2e9))
    monkeypatch.setattr(resumable, "upright_geometry", lambda path: ((64, 48), 0))
    in_flight: list[int] = []
    monkeypatch.setattr(video_ray, "_drain", lambda ray, submit, pending, folder, limit, on_frame: iter(in_flight.append(limit) or []))
    settings = runtime.RaySettings(workers=workers, gpus_per_worker=per_gpu)
    runner = video_ray.RayRunner(RestoreOptions(mode="low"), 18, settings)
    list(runner(SimpleNamespace(input=tmp_path / "clip.mp4"), list(range(segments)), tmp_path, lambda: None))
    assert runner.used_workers == expected and in_flight == [expected + video_ray.EXTRA_IN_FLIGHT]


@pytest.mark.parametrize("gpus, device, expected", [(0.0, None, "cpu"), (0.5, None, "cuda"), (0.0, "cuda:1", "cuda:1")])
def test_photos_clips_and_replicas_restore_where_their_ray_reservation_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpus: float, device: str | None, expected: str
) -> None:
    """A worker that reserves no GPU restores on the CPU unless --device names one: Ray hides no GPU from it, so the
    Restorer's own default (cuda when available) took one Ray never gave photo actors and Serve replicas (a clip's
    tasks got "cpu"). Each path reserves memory for that device and runs threads from its CPU share."""
    import sys
    from contextlib import contextmanager
    from dataclasses import replace
    from types import SimpleNamespace

    from gpen_core import RestoreOptions
    from gpen_core.scaleout import runtime, serve, video_ray
    from gpen_core.scaleout.batch import BatchConfig, run_batch
    from gpen_core.video import resumable

    @contextmanager
    def session(address: str | None = None) -> Iterator[runtime.RaySession]:
        yield runtime.RaySession(address="127.0.0.1:1", started_here=True, cpus=8, gpus=2, memory=1e12)

    built: dict[str, tuple] = {}  # path: what its worker reserves (Ray's options) and the pool it is handed
    data = SimpleNamespace(DataContext=SimpleNamespace(get_current=SimpleNamespace), ActorPoolStrategy=lambda size: size)
    data.read_binary_files = lambda *a, **k: data
    data.map_batches = lambda fn, fn_constructor_kwargs, **kw: built.update(photos=(kw, fn_constructor_kwargs["pool"])) or data
    data.iter_rows = lambda: iter(())
    fake_ray = SimpleNamespace(data=data, remote=lambda fn: SimpleNamespace(
        options=lambda **kw: SimpleNamespace(remote=lambda src, seg, job: built.update(clips=(kw, job.pool)))),
        serve=SimpleNamespace(deployment=lambda cls: SimpleNamespace(options=lambda ray_actor_options, **kw: (
            SimpleNamespace(bind=lambda **kw: built.update(replicas=(ray_actor_options, kw["pool"])))))))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    monkeypatch.setattr(runtime, "ray_session", session)
    monkeypatch.setattr(runtime, "import_ray", lambda: fake_ray)
    monkeypatch.setattr(runtime, "worker_memory_bytes", lambda mode, device="cpu": 10**9 if device == "cpu" else 3 * 10**9)
    monkeypatch.setattr(resumable, "upright_geometry", lambda path: ((64, 48), 0))
    monkeypatch.setattr(video_ray, "_drain", lambda ray, submit, pending, *a: iter([submit(pending[0])][:0]))

    settings = runtime.RaySettings(gpus_per_worker=gpus, device=device)
    run_batch(BatchConfig(source=str(_photo_folder(tmp_path)), output=tmp_path / "out", ray=settings))
    runner = video_ray.RayRunner(RestoreOptions(mode="low"), 18, settings)
    list(runner(SimpleNamespace(input=tmp_path / "clip.mp4"), [0, 1], tmp_path, lambda: None))
    serve.build_app(serve.ServeConfig(ray=replace(settings, workers=1), num_cpus=2.5))
    for path, (reserved, pool) in built.items():
        assert pool.device == expected, path
        assert reserved["memory"] == (10**9 if expected == "cpu" else 3 * 10**9), path
        assert (reserved.get("num_gpus") or 0) == gpus, path
        assert pool.threads == int(reserved["num_cpus"]) >= 1, path
    assert sorted(built) == ["clips", "photos", "replicas"]


def test_worker_memory_reserves_idle_size_plus_the_modes_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle size: a Ray worker's own 130 MB plus the installed build's engine imports (oom.ENGINE_IMPORT)."""
    from gpen_core.engine.budget import estimate_peak
    from gpen_core.modes import MODES
    from gpen_core.platform import oom
    from gpen_core.scaleout.runtime import LARGE_PHOTO, worker_memory_bytes

    monkeypatch.setattr(oom, "engine_import_figures", lambda: {"rss": 250 * 10**6})
    low, any_mode = worker_memory_bytes("low"), worker_memory_bytes("auto")
    assert low == 380 * 10**6 + estimate_peak(MODES["low"], "cpu", LARGE_PHOTO)[0]
    assert any_mode == max(worker_memory_bytes(m) for m in MODES) > low


def test_a_batch_written_over_its_inputs_is_refused_before_ray_starts_and_the_originals_stay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plain CLI's rule: -o the input folder (by any name or link) with or without --overwrite, or a folder in
    the way of an output, is refused at once (exit 2), not recorded as skipped nor written over."""
    from gpen_core.cli import main

    src = _photo_folder(tmp_path)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    (tmp_path / "link").symlink_to(src)
    for out, extra in ((src, []), (tmp_path / "link", ["--overwrite"])):
        assert main(["restore", str(src), "-o", str(out), "--ray", "--mode", "low", *extra]) == 2
        err = capsys.readouterr().err
        assert "is the input itself" in err and "choose another output name" in err and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before  # no output, no manifest
    (tmp_path / "out" / "pair_faded_print.png").mkdir(parents=True)
    assert main(["restore", str(src), "-o", str(tmp_path / "out"), "--ray", "--mode", "low"]) == 2
    assert "pair_faded_print.png is a folder, not a file" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["pair_faded_print.png"]


def test_a_batch_folder_holding_a_video_is_refused_before_ray_starts_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch lists a folder's images only: its clips were neither restored nor in the manifest, with no word (the
    plain CLI restores them)."""
    pytest.importorskip("av")
    from gpen_core.cli import main
    from gpen_core.scaleout import runtime

    from .videoclips import gradient_frames, make_clip

    def no_ray(*a: object, **k: object) -> None:
        pytest.fail("Ray started although the folder's video was not said")

    monkeypatch.setattr(runtime, "ray_session", no_ray)
    src = _photo_folder(tmp_path)
    make_clip(src / "holiday.mp4", gradient_frames(3))
    assert main(["restore", str(src), "-o", str(tmp_path / "out"), "--ray", "--mode", "low"]) == 2
    err = capsys.readouterr().err
    assert "holiday.mp4" in err and "restores its photos only" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
    (src / "holiday.mp4").unlink()
    assert main(["restore", str(src), "-o", str(tmp_path / "out"), "--ray", "--start", "2"]) == 2  # a clip's flag
    assert "--start is for videos" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_batch_records_every_file_and_a_corrupt_one_does_not_stop_or_vanish(
    ray_local, low_narrow_session_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from gpen_core import RestoreOptions
    from gpen_core.platform import durable
    from gpen_core.scaleout.batch import BatchConfig, run_batch
    from gpen_core.scaleout.runtime import RaySettings

    src = _photo_folder(tmp_path)
    out = tmp_path / "out"
    seen: list[tuple[str, int, int]] = []
    # two actors on 2 CPUs: the layout that deadlocked at num_cpus=1
    cfg = BatchConfig(source=str(src), output=out, options=RestoreOptions(mode="low"),
                      ray=RaySettings(workers=2, models_dir=str(low_narrow_session_home)))
    write = durable.write_bytes

    def disk_full_for_hopper(dst: Path, data: bytes, **kw: object) -> None:
        if dst.name.startswith("hopper"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        write(dst, data, **kw)

    monkeypatch.setattr(durable, "write_bytes", disk_full_for_hopper)  # the driver writes: that photo's error, not the run's
    summary = _run_with_deadline(run_batch, cfg, on_record=lambda r, done, total: seen.append((r["status"], done, total)))
    monkeypatch.setattr(durable, "write_bytes", write)

    assert summary.workers == 2 and 0 < summary.cpus_per_worker < 1
    assert [(d, t) for _, d, t in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert manifest == summary.records
    by_name = {Path(r["input"]).name: r for r in manifest}
    assert sorted(by_name) == sorted([*EXAMPLES, "corrupt.jpg"])

    bad = by_name["corrupt.jpg"]
    assert bad["status"] == "error" and bad["error_type"] == "InputError" and bad["exit_code"] == 2
    assert "not an image" in bad["error"] and "text" in bad["error"]
    assert not list(out.glob("corrupt.*"))
    full = by_name["hopper_heavy_jpeg.jpg"]
    assert full["status"] == "error" and full["exit_code"] == 2 and "No space left on device" in full["error"], full
    assert full["error"].startswith(f"cannot write {out / 'hopper_heavy_jpeg.jpg'}") and "output" not in full
    assert not list(out.glob("hopper*"))
    for name in EXAMPLES[::2]:
        rec = by_name[name]
        assert rec["status"] == "ok" and rec["mode"] == "low" and rec["faces"] >= 1, rec
        assert rec["peaks"]["rss_bytes"] > rec["peaks"]["baseline_rss_bytes"] > 0
        assert rec["timings"]["total_s"] > 0 and rec["timings"]["restore_s"] > 0
        assert rec["worker"] and rec["worker_warmup_s"] > 0
        with Image.open(rec["output"]) as im, Image.open(src / name) as orig:
            assert im.format == "JPEG" and im.size == orig.size
    assert bad["peaks"]["rss_bytes"] > 0 and bad["timings"]["total_s"] >= 0  # measured even when it failed
    assert len({r["worker"] for r in manifest}) <= 2
    assert summary.exit_code == 2

    # Again, through the command line: the two done are skipped (untouched), the unwritten one restored, the bad one
    # tried again and still recorded; JSON lines on stdout, exit 2 (a bad input).
    from gpen_core.cli import main

    mtimes = {n: (out / n).stat().st_mtime_ns for n in EXAMPLES[::2]}
    capsys.readouterr()
    argv = ["restore", str(src), "-o", str(out), "--ray", "--json", "--mode", "low", "--models-dir", str(low_narrow_session_home)]
    assert _run_with_deadline(main, argv) == 2
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert {Path(r["input"]).name: r["status"] for r in lines} == {
        **{n: "skipped" for n in EXAMPLES[::2]}, "hopper_heavy_jpeg.jpg": "ok", "corrupt.jpg": "error"}
    assert (out / "hopper_heavy_jpeg.jpg").is_file()
    # appended: the first run's records (peaks, timings) are still there, then this run's, under a new run id
    assert [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()] == manifest + lines
    assert len({r["run"] for r in lines}) == 1 and lines[0]["run"] != manifest[0]["run"]
    assert {n: (out / n).stat().st_mtime_ns for n in EXAMPLES[::2]} == mtimes


@pytest.mark.slow
def test_two_ray_workers_restore_the_segments_as_one_process_does(
    ray_local, tmp_path: Path, segments_home: Path, face_clip_and_reference: tuple[Path, Path], one_thread: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A clip's segments restored by two Ray workers: the same output as one process, one manifest line per
    segment. The one-process run is the plain command's, made once for the session (conftest)."""
    import numpy as np

    from gpen_core.cli import main

    from .test_video_resume import FPS, FRAMES  # after the fixture: it skips without PyAV

    src, one = face_clip_and_reference
    out = tmp_path / "out"
    out.mkdir()
    code = main(["restore", str(src), "-o", str(out / "ray.mp4"), "--ray", "--workers", "2", "--mode", "low",
                 "--segment-seconds", "1", "--models-dir", str(segments_home), "--json"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 0
    summary = lines[-1]["video"]
    assert summary["segments"] == 3 and summary["frames"] == FRAMES and summary["audio"] == "copied"
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted(m["segment"] for m in manifest) == [0, 1, 2] and len({m["run"] for m in manifest}) == 1
    assert all(m["status"] == "ok" and m["seconds"] > 0 and m["peaks"]["rss_bytes"] > 0 for m in manifest)
    workers = {m["worker"] for m in manifest}
    assert len(workers) == 2, workers  # two worker processes shared the three segments

    got, ref, want = read_clip(out / "ray.mp4"), read_clip(one), read_clip(src)
    assert got["times"] == want["times"] == [Fraction(i, FPS) for i in range(FRAMES)]
    assert [frame_index(f) for f in got["frames"]] == list(range(FRAMES))
    assert [a for a, _, _ in got["audio"]] == [a for a, _, _ in want["audio"]]
    diffs = [float(np.abs(a.astype(int) - b.astype(int)).mean()) for a, b in zip(got["frames"], ref["frames"])]
    assert max(diffs) <= 2, diffs


def test_serve_request_start_to_shutdown_and_the_app_through_gradio_client(
    ray_local, low_narrow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray import serve

    from gpen_core import RestoreOptions
    from gpen_core.scaleout.runtime import RaySettings
    from gpen_core.scaleout.serve import RAY_BASELINE_NOTE, ServeConfig, deploy, replica_statuses

    example = ROOT / "examples" / EXAMPLES[0]
    cfg = ServeConfig(ray=RaySettings(workers=1, models_dir=str(low_narrow_home)), num_cpus=0.5, warm_mode="low",
                      port=random.randint(7900, 7949))
    try:
        handle = deploy(cfg)
        [status] = replica_statuses(handle, 1)
        assert status["warm_error"] == "" and status["loaded"]["generator"] == "GPEN-BFR-256" and status["warmup_s"] > 0
        assert status["frozen_objects"] > 100_000  # the engine's imports kept out of each model load's collection
        # Serve 2.60 binds each replica's gRPC server to [::]; on a loopback node ours is moved to 127.0.0.1.
        listening, exposed = _ray_listening()
        assert any("Serve" in name for _, _, name in listening) and not exposed, exposed

        served = handle.restore.remote(example.read_bytes(), RestoreOptions(mode="low")).result(timeout_s=300)
        result = served.unwrap()
        assert served.replica == status["replica"] and served.pid == status["pid"]
        assert result.mode.name == "low" and len(result.faces) >= 1
        assert result.peaks.rss_bytes > result.peaks.baseline_rss_bytes > 0 and result.timings.total_s > 0
        with Image.open(io.BytesIO(result.encoded)) as im:
            assert im.size == Image.open(example).size

        bad = handle.restore.remote(b"this is text, not a picture", RestoreOptions(mode="low")).result(timeout_s=120)
        with pytest.raises(InputError, match="not an image"):
            bad.unwrap()

        # HTTP on loopback: POST the bytes, get the record (and the image) back; a bad file is a 400 with the reason.
        import base64

        import httpx

        url = f"http://127.0.0.1:{cfg.port}/restore"
        r = httpx.post(url, params={"mode": "low"}, content=example.read_bytes(), timeout=300)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "ok" and body["replica"] == status["replica"] and body["faces"] >= 1
        assert body["peaks"]["rss_bytes"] > 0
        with Image.open(io.BytesIO(base64.b64decode(body["encoded_base64"]))) as im:
            assert im.format == "JPEG"
        r = httpx.post(url, params={"mode": "low"}, content=b"this is text, not a picture", timeout=120)
        assert r.status_code == 400 and "not an image" in r.json()["error"]

        # app.py --backend ray: one Gradio process, the handler calls the deployment by handle.
        import app
        from gradio_client import Client, handle_file

        # The undo puts back the backend the module had before (the in-process engine), so a later
        # test of the app never sends its requests to this test's shut-down deployment.
        monkeypatch.setattr(app.STATE, "backend", app.STATE.backend)
        from gpen_core.scaleout.serve import RayRestorer

        app.STATE.use_backend(RayRestorer(None))  # this process is already connected to the Ray serving the deployment
        try:
            _, url, _ = app.demo.launch(server_port=random.randint(7950, 7999), prevent_thread_lock=True, quiet=True,
                                        **app.launch_options())
            client = Client(url, verbose=False)
            args = ("low", "default", "default", 1.0, 0.9, 50, False)
            _, download, md, gallery, record = client.predict(handle_file(str(example)), *args, api_name="/restore")
        finally:
            app.demo.close()
            app.STATE.backend = None
        assert record["mode"] == "low" and record["faces"] == len(gallery) >= 1
        assert record["peaks"]["rss_bytes"] > record["peaks"]["baseline_rss_bytes"] > 0
        note = next(n for n in record["notes"] if "replica" in n)
        assert status["replica"] in note and RAY_BASELINE_NOTE in note and status["replica"] in md
        with Image.open(download) as d:
            assert d.format == "JPEG"
    finally:
        serve.shutdown()
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if "SERVE" in str(a).upper()]


def _segment_0_finished(tmp_path: Path) -> tuple[Path, Path, object]:
    """(clip, output, options): a 2 s clip of two 1 s segments whose first run stopped in segment 1 (a stand-in
    engine, no networks), segment 0 finished in the work folder the next run resumes."""
    import numpy as np

    from gpen_core.options import RestoreOptions
    from gpen_core.video.engine_seam import FrameOut
    from gpen_core.video.resumable import LocalRunner, restore_in_segments, settings_text

    from .videoclips import keyed_clip, keyed_frames

    src = keyed_clip(tmp_path / "in.mp4", keyed_frames(50, np.full((48, 64, 3), 100, np.uint8)), audio=False)
    dst = tmp_path / "out.mp4"
    options = RestoreOptions(mode="low")

    class StopsInSegment1:
        device = "cpu"

        def detect(self, rgb):
            if frame_index(rgb) == 30:
                raise KeyboardInterrupt  # a first run stopped after segment 0
            return []

        def restore(self, rgb, detections):
            return FrameOut(rgb, ())

        def close(self) -> None:
            pass

    with pytest.raises(KeyboardInterrupt):
        restore_in_segments(src, dst, LocalRunner(None, options, 18, engine=StopsInSegment1()), settings_text(options, 18),
                            segment_seconds=1.0)
    return src, dst, options


def test_a_segment_whose_worker_dies_twice_is_named_and_the_same_command_resumes(
    ray_local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed on both tries of segment 1 (as the kernel's out-of-memory killer would): exit 4 naming the
    segment, the finished segment 0 kept, and how to go on; never Ray's WorkerCrashedError traceback."""
    import argparse

    from gpen_core.scaleout import video_ray
    from gpen_core.scaleout.cli import restore_segmented
    from gpen_core.video.resumable import LocalRunner
    from gpen_core.video.segments import work_folder

    src, dst, options = _segment_0_finished(tmp_path)

    def killed(*args, **kwargs):  # pickled by value: the worker runs this, not the module's segment_task
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(video_ray, "segment_task", killed)
    args = argparse.Namespace(segment_seconds=1.0, ray=True, address=None, workers=1, gpus_per_worker=0.0, models_dir=None,
                              device="cpu", crf=18, segments=True, fresh=False, json=False, start=None, end=None)
    t0 = time.monotonic()
    with pytest.raises(video_ray.WorkerDied) as caught:
        restore_segmented(args, src, dst, LocalRunner(None, options, 18), lambda done, total: None)
    msg = str(caught.value)
    print(f"worker killed twice: refused after {time.monotonic() - t0:.1f} s: {msg}")
    assert caught.value.exit_code == 4
    assert msg.startswith("segment 1 (from 1.0 s): its Ray worker died on each of its 2 tries (WorkerCrashedError")
    assert f"The 1 finished segment is kept in {work_folder(dst)}; run the same command again to resume" in msg
    assert (work_folder(dst) / "seg-00000.mp4").exists() and not dst.exists()


def test_a_restore_error_on_a_worker_names_the_segment_and_its_fix_and_the_finished_segment_stays(
    ray_local, tmp_path: Path, segments_home: Path
) -> None:
    """Segment 0 finished by an earlier run; the Ray run's worker lacks a weight for segment 1: exit 3 with the
    worker's message (what is missing, how to fetch it) naming the segment, segment 0 kept for the fixed rerun, no
    output; never Ray's RayTaskError traceback. A worker that served another models folder before (the earlier
    tests' segments_home) is reused by Ray for this task: it must restore with this run's folder."""
    import argparse

    from gpen_core.scaleout.video_ray import SegmentFailed
    from gpen_core.scaleout.cli import restore_segmented
    from gpen_core.video.resumable import LocalRunner
    from gpen_core.video.segments import work_folder

    src, dst, options = _segment_0_finished(tmp_path)
    empty = tmp_path / "models"
    empty.mkdir()
    args = argparse.Namespace(segment_seconds=1.0, ray=True, address=None, workers=1, gpus_per_worker=0.0,
                              models_dir=str(empty), device="cpu", crf=18, segments=True, fresh=False, json=False,
                              start=None, end=None)
    with pytest.raises(SegmentFailed) as caught:
        restore_segmented(args, src, dst, LocalRunner(None, options, 18), lambda done, total: None)
    msg = str(caught.value)
    assert caught.value.exit_code == 3, msg
    assert msg.startswith(f"segment 1 (from 1.0 s): This request needs 2 files that are not in {empty} or the ModelScope cache"), msg
    assert "python -m gpen_core download GPEN-BFR-256 retinaface-mobilenet0.25" in msg and f"save them in {empty}" in msg
    assert ".." not in msg
    assert msg.endswith(f"The 1 finished segment is kept in {work_folder(dst)}; once that is fixed, the same "
                        "command resumes"), msg
    assert (work_folder(dst) / "seg-00000.mp4").exists() and not dst.exists()


@pytest.mark.parametrize("listener", ["nothing", "a web server"])
def test_an_unreachable_ray_address_fails_fast_naming_it_and_leaves_nothing(tmp_path: Path, listener: str) -> None:
    """Ray's own ray.init retries either for minutes (measured: over 5 min for port 1, over 2 min for a web server)."""
    import os
    import socket
    import subprocess
    import sys

    import numpy as np

    from .videoclips import keyed_clip, keyed_frames

    src = keyed_clip(tmp_path / "in.mp4", keyed_frames(10, np.full((48, 64, 3), 100, np.uint8)), audio=False)
    server = socket.create_server(("127.0.0.1", 0))

    def answer_as_a_web_server() -> None:
        with server, server.accept()[0] as conn:
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    if listener == "nothing":
        address = "127.0.0.1:1"
        server.close()
    else:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        threading.Thread(target=answer_as_a_web_server, daemon=True).start()
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gpen_core", "restore", str(src), "-o", str(tmp_path / "out.mp4"), "--ray",
                        "--address", address], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"at '{address}'" in p.stderr and "Traceback" not in p.stderr
    assert ("cannot reach the Ray cluster" if listener == "nothing" else "is not a Ray cluster") in p.stderr
    assert took < 30, took
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.mp4"]  # no work folder, no manifest


def test_rays_session_folder_stays_short_under_a_long_temp_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unix socket path must stay under 108 characters, and Ray adds ~64 below its folder (macOS's temp
    folder is /var/folders/<2>/<30>/T: 49 characters)."""
    from gpen_core.scaleout import runtime

    monkeypatch.setattr(runtime.tempfile, "gettempdir", lambda: "/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T")
    session = "/session_2026-12-07_00-48-01_693165_4194304/sockets/plasma_store"  # the longest pid Linux gives
    assert len(str(runtime.default_temp_dir()) + session) < 108
    monkeypatch.setattr(runtime.tempfile, "gettempdir", lambda: "/tmp")
    assert runtime.default_temp_dir().parent == Path("/tmp")


def test_a_clip_on_ray_says_max_faces_once_for_all_its_segments(ray_local, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each segment on a Ray worker caps faces (a stand-in frame session, no networks): the driver says it once
    for the clip, its frames summed over the workers' segments, as one process does (test_video_segments)."""
    pytest.importorskip("av")
    from gpen_core.options import RestoreOptions
    from gpen_core.scaleout import video_ray
    from gpen_core.scaleout.runtime import RaySettings
    from gpen_core.video.resumable import restore_in_segments, settings_text

    from .test_video_segments import CAPPED, _clip

    def crowd_task(src, seg, job):  # on the worker: its Restorer is the stand-in crowd for this task only
        from gpen_core.scaleout import runtime as here
        from gpen_core.scaleout import video_ray

        from tests.test_video_segments import Crowd

        real, here._worker_restorer = here._worker_restorer, lambda models_dir, device: Crowd()
        try:
            return video_ray.segment_task(src, seg, job)
        finally:
            here._worker_restorer = real

    monkeypatch.setattr(video_ray, "segment_task", crowd_task)
    opts = RestoreOptions(mode="low", max_faces=1, identity="off")
    runner = video_ray.RayRunner(opts, 18, RaySettings(workers=2, device="cpu"))
    result = restore_in_segments(_clip(tmp_path), tmp_path / "out.mp4", runner, settings_text(opts, 18),
                                 segment_seconds=1.0)
    assert result.segments == 3 and all(r.worker for r in result.records), result.records  # each ran on a worker
    assert [n for n in result.notes if "max faces" in n] == [CAPPED]


def test_a_buckets_clips_are_told_by_name_and_its_other_files_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object store answers each read after a round trip: a clip's name says it without a read, and only the
    files whose name cannot tell have their first bytes read, in parallel rather than one after another."""
    from types import SimpleNamespace

    from pyarrow import fs as pafs

    from gpen_core.scaleout.batch import list_inputs

    bucket = tmp_path / "bucket"
    bucket.mkdir()
    head = b"\x00\x00\x00\x18ftypisom" + bytes(500)  # an MP4's first bytes
    for name in ("a.mp4", "b.MOV", "c.bin"):
        (bucket / name).write_bytes(head)
    for i in range(5):
        (bucket / f"p{i}.jpg").write_bytes(b"\xff\xd8\xff")
        (bucket / f"p{i}.json").write_text("{}")
    real = pafs.FileSystem
    reads: list[str] = []
    lock = threading.Lock()
    at_once = [0, 0]  # now, most

    class RoundTrips:
        def __init__(self, fs: object) -> None:
            self.fs = fs

        def __getattr__(self, name: str) -> object:
            return getattr(self.fs, name)

        def open_input_stream(self, path: str) -> object:
            with lock:
                reads.append(Path(path).name)
                at_once[0] += 1
                at_once[1] = max(at_once)
            time.sleep(0.1)  # the round trip
            with lock:
                at_once[0] -= 1
            return self.fs.open_input_stream(path)

    def from_uri(uri: str) -> tuple[object, str]:
        fs, path = real.from_uri(uri)
        return RoundTrips(fs), path

    monkeypatch.setattr(pafs, "FileSystem", SimpleNamespace(from_uri=from_uri))
    with pytest.raises(InputError, match=r"holds 3 videos \(a\.mp4, b\.MOV, c\.bin\)"):
        list_inputs(f"file://{bucket}")
    assert sorted(reads) == ["c.bin", *(f"p{i}.json" for i in range(5))]
    assert at_once[1] > 1


def test_a_buckets_hidden_files_are_left_out_without_a_word_as_a_local_folders_are(tmp_path: Path) -> None:
    from gpen_core.images.limits import NEITHER
    from gpen_core.scaleout.batch import list_inputs

    folder = tmp_path / "in"
    (folder / ".thumbnails").mkdir(parents=True)
    (folder / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")  # what macOS leaves in every folder it opens
    (folder / "._clip.mov").write_bytes(b"\x00\x05\x16\x07")  # its AppleDouble leftover of a copied clip
    (folder / "notes.txt").write_text("said: not a photo")
    for source in (str(folder), f"file://{folder}"):
        inputs, _, skipped = list_inputs(source)
        assert [Path(i.read_path).name for i in inputs] == ["a.png"]
        assert [(Path(shown).name, why) for shown, why in skipped] == [("notes.txt", NEITHER)], source
