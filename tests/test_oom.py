"""Out of memory under a real, artificially small memory budget (RLIMIT_AS) on CPU.

The budget is applied in a child process: quality mode (GPEN-BFR-512) cannot
fit, so the engine must free what it allocated, step down openly, succeed, and
serve the next request normally.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpen_core.errors import InputError, OutOfMemory, ResourceError
from gpen_core.platform.oom import is_oom

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import json, re, resource, sys
    import numpy as np
    from gpen_core.errors import ResourceError
    from gpen_core.restorer import Restorer, RestoreOptions

    def vmsize():
        return int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024

    r = Restorer(device="cpu", synthetic_weights=True)
    face = np.zeros((512, 512, 3), np.uint8)
    r(face, RestoreOptions(mode="low", aligned=True))   # imports and threads exist before the cap
    r.unload()
    budget = int(float(sys.argv[1]))
    limit = vmsize() + budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    out = {}
    try:
        res = r(face, RestoreOptions(mode=sys.argv[2], aligned=True))
        out["first"] = {"mode": res.mode.name, "notes": list(res.notes), "checkpoint": res.checkpoint}
    except ResourceError as e:
        out["first"] = {"error": str(e)}
    if sys.argv[3] == "lift":  # the machine got memory back (another program closed)
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    res = r(face, RestoreOptions(mode="low", aligned=True))
    out["next"] = {"mode": res.mode.name, "faces": len(res.faces), "notes": list(res.notes)}
    print("RESULT " + json.dumps(out))
    """
)


# name → (address-space budget above the warmed-up process, mode asked, whether the cap is lifted after)
CAPPED = {"steps_down": (450e6, "quality", False), "lightest": (20e6, "low", True)}


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each CAPPED child's RESULT, the two run side by side (RLIMIT_AS is each process's own)."""
    folder = tmp_path_factory.mktemp("oom")
    # A models folder of its own: a module fixture is set up before the per-test isolation
    # (conftest._isolated_models_home), and the user's folder may hold OpenVINO conversions or
    # speed records that change which runtime the capped request runs on.
    env = dict(os.environ, GPEN_FREE_RAM_BYTES=str(64e9), PYTHONPATH=str(ROOT), GPEN_HOME=str(folder / "models"))
    running = {}
    for name, (budget, mode, lift) in CAPPED.items():  # output to files: a full pipe would stall one child
        with open(folder / f"{name}.out", "w") as out, open(folder / f"{name}.err", "w") as err:
            running[name] = subprocess.Popen([sys.executable, "-c", CHILD, str(budget), mode, "lift" if lift else "keep"],
                                             stdout=out, stderr=err, text=True, env=env)
    results = {}
    for name, p in running.items():
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        stdout, stderr = (folder / f"{name}.out").read_text(), (folder / f"{name}.err").read_text()
        line = next((l for l in stdout.splitlines() if l.startswith("RESULT ")), None)
        results[name] = json.loads(line[len("RESULT ") :]) if line else {
            "failed": f"child failed (rc {p.returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}"}
    return results


def _run(capped: dict[str, dict], name: str) -> dict:
    out = capped[name]
    assert "failed" not in out, out.get("failed")
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS memory budgets need Linux")
def test_oom_steps_down_to_a_mode_that_fits_and_the_next_request_runs(capped: dict[str, dict]) -> None:
    out = _run(capped, "steps_down")
    first = out["first"]
    assert "error" not in first, first
    assert first["mode"] == "low"
    assert any("ran out of memory in quality" in n for n in first["notes"])
    assert out["next"] == {"mode": "low", "faces": 1, "notes": out["next"]["notes"]}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS memory budgets need Linux")
def test_oom_in_the_lightest_mode_is_a_clear_error_and_the_server_survives(capped: dict[str, dict]) -> None:
    out = _run(capped, "lightest")
    err = out["first"]["error"]
    # Under a cap the cap ran out, whatever the photo: the advice says so and names the limit,
    # and says nothing about a server (the library does not know it runs in one).
    assert "out of memory" in err and "runs under a memory cap" in err and "of address space (ulimit -v" in err
    assert "Raise the limit" in err and "smaller photo will not help" in err and "server" not in err
    assert out["next"]["mode"] == "low"


def test_without_a_cap_the_advice_is_to_free_memory_or_shrink_the_photo(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpen_core.platform import oom

    monkeypatch.setattr(oom, "_limits_text", lambda: "")
    text = oom.out_of_memory_advice()
    assert text.startswith("Close other programs or use a smaller photo") and "cap" not in text and "server" not in text


# ------------------------------------------------- out of memory is never "corrupt"


def _cv2_error(text: str) -> Exception:
    import cv2

    return cv2.error(text)


def _torch_oom() -> Exception:
    import torch

    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize(
    "make, oom",
    [
        (lambda: MemoryError(), True),
        (lambda: _numpy_oom(), True),
        (_torch_oom, True),
        (lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 4194304000 bytes. Error code 12 (Cannot allocate memory)"), True),
        (lambda: RuntimeError("could not create a primitive"), True),  # oneDNN under prlimit --as
        (lambda: RuntimeError("unable to mmap 285131776 bytes from file <x.pth>: Cannot allocate memory (12)"), True),
        (lambda: RuntimeError("std::bad_alloc"), True),
        (lambda: _cv2_error("OpenCV(5.1.0) alloc.cpp:73: error: (-4:Insufficient memory) Failed to allocate 576000000 bytes in function 'OutOfMemoryError'"), True),
        (lambda: OSError(errno.ENOMEM, "Cannot allocate memory"), True),
        # OpenVINO's CPU plugin under a 100 MB address-space cap (the capped child with backend="openvino")
        (lambda: RuntimeError('Exception from src/inference/src/cpp/core.cpp:268:\nCannot load library "/x/openvino/libs/'
                              'libopenvino_intel_cpu_plugin.so": /x/openvino/libs/libopenvino_intel_cpu_plugin.so: failed to map '
                              'segment from shared object'), True),
        # ... and its plugin's threads that cannot start under a 105 MB cap (pthread_create: EAGAIN)
        (lambda: RuntimeError('Exception from src/inference/src/dev/core_impl.cpp:847:\nFailed to create plugin "/x/libopenvino_intel_cpu_plugin.so" '
                              'for device CPU\nPlease, check your environment\nException from src/plugins/intel_cpu/src/plugin.cpp:921:\n'
                              'Resource temporarily unavailable\n'), True),
        (lambda: BlockingIOError(11, 'Resource temporarily unavailable'), False),
        (lambda: OutOfMemory("not enough memory to load the GPEN generator"), True),
        (lambda: RuntimeError("could not create a primitive descriptor for a convolution forward propagation primitive"), False),
        (lambda: RuntimeError("Given groups=1, weight of size [64, 3, 3, 3], expected input to have 3 channels"), False),
        (lambda: ValueError("bad value"), False),
        (lambda: ResourceError("out of memory in low mode, and there is no lighter mode"), False),  # the ladder's own verdict
        (lambda: InputError("The image is 13000×13000"), False),
    ],
)
def test_is_oom_recognises_every_librarys_allocation_failure(make, oom: bool) -> None:
    assert is_oom(make()) is oom


def _numpy_oom() -> Exception:
    import numpy as np

    try:
        np.empty(1 << 62, np.uint8)  # refused at once: no memory is touched
    except MemoryError as e:
        return e
    raise AssertionError("numpy allocated 4 EiB")


@pytest.mark.parametrize(
    "exc",
    [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 285000000 bytes")],
    ids=["MemoryError", "torch-cpu"],
)
def test_an_allocation_failure_inside_torch_load_is_out_of_memory_not_corrupt(
    exc: Exception, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prlimit --data=1200M … --mode balanced` exited 3 and told the user to delete a valid checkpoint."""
    import torch

    from gpen_core.networks.checkpoint import load_generator
    from tests.factories import TINY, write_checkpoint

    ckpt = write_checkpoint(tmp_path / "GPEN-BFR-512.pth", TINY, seed=1)

    def load(*a: object, **k: object) -> None:
        raise exc

    monkeypatch.setattr(torch, "load", load)
    with pytest.raises(OutOfMemory) as e:
        load_generator(ckpt)
    msg = str(e.value)
    assert "not enough memory to load" in msg and "file is fine" in msg
    assert "corrupt" not in msg and "delete" not in msg.lower()
    assert e.value.exit_code == 4


LOAD_CHILD = textwrap.dedent(
    """
    import json, re, resource, sys
    import torch
    from gpen_core.networks.checkpoint import read_checkpoint
    from gpen_core.errors import GPENError

    path = sys.argv[1]
    torch.save({"w": torch.ones(50_000_000)}, path)  # 200 MB of float32
    vm = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + 100_000_000, resource.RLIM_INFINITY))
    try:
        read_checkpoint(path, "GPEN generator")
        out = {"loaded": True}
    except GPENError as e:
        out = {"type": type(e).__name__, "exit_code": e.exit_code, "message": str(e)}
    print("RESULT " + json.dumps(out))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS memory budgets need Linux")
def test_a_checkpoint_that_does_not_fit_under_a_real_cap_is_out_of_memory(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", LOAD_CHILD, str(tmp_path / "big.pth")], capture_output=True, text=True, env=env, timeout=300)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, f"child failed (rc {p.returncode}):\n{p.stderr[-3000:]}"
    out = json.loads(line[len("RESULT "):])
    assert out.get("type") == "OutOfMemory" and out["exit_code"] == 4, out
    assert "corrupt" not in out["message"] and "200 MB" in out["message"]


def _fail_heavier_than_low(monkeypatch: pytest.MonkeyPatch, exc: Exception, fail_low: bool = False) -> list[str]:
    """pipeline.run_attempt raises ``exc`` in every mode above low (and in low too when asked)."""
    from gpen_core.engine import pipeline

    real = pipeline.run_attempt
    tried: list[str] = []

    def run_attempt(models, device, req, *a, **k):
        tried.append(req.mode.name)
        if req.mode.name != "low" or fail_low:
            raise exc
        return real(models, device, req, *a, **k)

    monkeypatch.setattr(pipeline, "run_attempt", run_attempt)
    return tried


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("could not create a primitive"),
        OutOfMemory("not enough memory to load the GPEN generator GPEN-BFR-512.pth (285 MB)"),
        _cv2_error("OpenCV(5.1.0) alloc.cpp:73: error: (-4:Insufficient memory) Failed to allocate 576000000 bytes"),
    ],
    ids=["oneDNN", "load", "OpenCV"],
)
def test_every_kind_of_oom_steps_down_to_the_next_mode_with_a_note(exc: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from gpen_core.restorer import Restorer, RestoreOptions

    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64e9))
    tried = _fail_heavier_than_low(monkeypatch, exc)
    res = Restorer(device="cpu", synthetic_weights=True)(np.zeros((256, 256, 3), np.uint8), RestoreOptions(mode="balanced", aligned=True))
    assert res.mode.name == "low" and tried[0] == "balanced" and tried[-1] == "low"
    assert any("ran out of memory in balanced" in n for n in res.notes)


def test_oom_even_in_low_exits_4_with_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--as=4300M --mode low` gave `RuntimeError: could not create a primitive` as a traceback, exit 1."""
    from PIL import Image

    from gpen_core.cli import main
    from tests.factories import RELEASED, write_checkpoint

    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64e9))
    ckpt = write_checkpoint(tmp_path / "GPEN-BFR-256.pth", RELEASED["GPEN-BFR-256"], seed=1)
    Image.new("RGB", (256, 256), (120, 90, 80)).save(tmp_path / "p.png")
    _fail_heavier_than_low(monkeypatch, RuntimeError("could not create a primitive"), fail_low=True)
    rc = main(["restore", str(tmp_path / "p.png"), "-o", str(tmp_path / "o.png"), "--mode", "low", "--aligned", "--model", str(ckpt)])
    err = capsys.readouterr().err
    assert rc == 4, err
    assert "out of memory in low mode" in err and "Traceback" not in err and "could not create" not in err
    assert not (tmp_path / "o.png").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_engine_import_figures_in_the_message_are_measured(whole_machine: None) -> None:
    """oom.ENGINE_IMPORT (quoted when an import fails under a cap) still match what importing costs."""
    from gpen_core.platform import oom

    code = textwrap.dedent(
        """
        import json, re
        def st():
            s = open("/proc/self/status").read()
            return {k: int(re.search(k + r":\\s+(\\d+)", s).group(1)) * 1024 for k in ("VmRSS", "VmSize", "VmData")}
        a = st()
        from gpen_core.engine import pipeline
        pipeline.import_engine()
        b = st()
        print("RESULT " + json.dumps({k: b[k] - a[k] for k in a}))
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, p.stderr[-3000:]
    got = json.loads(line[len("RESULT "):])
    fig = oom.engine_import_figures()  # the installed build's (CUDA or CPU)
    for key, quoted in (("VmRSS", fig["rss"]), ("VmSize", fig["address_space"]), ("VmData", fig["data"])):
        assert 0.7 * quoted <= got[key] <= 1.3 * quoted, f"{key}: measured {got[key] / 1e6:.0f} MB, the message says {quoted / 1e6:.0f} MB"


@pytest.mark.parametrize("mode", ["balanced", "auto"])
def test_oom_while_decoding_decodes_again_for_low_with_a_note(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big JPEG that cannot be decoded at full size is decoded at reduced size for low (libjpeg scaling)."""
    from PIL import Image

    from gpen_core.images import decode as imageio
    from gpen_core.restorer import Restorer, RestoreOptions

    monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(64e9))
    photo = tmp_path / "big.jpg"
    Image.new("RGB", (5000, 4000), (120, 90, 80)).save(photo, quality=80)
    real = imageio.decode_image
    asked: list[int | None] = []

    def decode_image(source, limits=imageio.DEFAULT_LIMITS, *, reduce_to=None):
        asked.append(reduce_to)
        if reduce_to is None or reduce_to > 2048:  # the full-size decode does not fit
            raise MemoryError()
        return real(source, limits, reduce_to=reduce_to)

    monkeypatch.setattr(imageio, "decode_image", decode_image)
    res = Restorer(device="cpu", synthetic_weights=True)(photo, RestoreOptions(mode=mode))
    assert res.mode.name == "low" and asked[-1] == 2048
    assert any(f"ran out of memory decoding the photo for {mode}; decoded it for low" in n for n in res.notes)
    assert any("JPEG 1/2 scale" in n for n in res.notes) and res.processed_size == (2048, 1638)


def test_the_engine_import_probe_says_how_its_child_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe runs the engine's import through the one child-process helper (platform.worker), with
    its 300 s limit and the child's own output silenced, and turns each typed ending into the message
    the CLI shows: a crash or a mapping failure is the memory cap, a missing module a broken install."""
    from gpen_core.errors import GPENError
    from gpen_core.platform import engine_probe, oom, worker

    asked: list[tuple[object, dict]] = []
    endings: list[object] = []

    def run(fn: object, *args: object, **kw: object) -> object:
        asked.append((fn, kw))
        return endings.pop(0)

    monkeypatch.setattr(worker, "run", run)
    monkeypatch.setattr(oom, "memory_limited", lambda: True)  # the probe runs under a cap only
    endings[:] = [
        worker.Done(None),
        worker.Failed("killed", "was killed by signal 11", oom=True, exitcode=-11),
        worker.Failed("raised", "libgomp.so.1: failed to map segment from shared object", error_type="OSError"),
        worker.Failed("raised", "No module named 'cv2'", error_type="ModuleNotFoundError"),
        worker.Failed("timed out", "ran past its 300 s limit and was stopped"),
        worker.Failed("raised", "error return without exception set", error_type="SystemError"),
        worker.Failed("exited", "exited with code 1 before it finished", exitcode=1),
    ]
    assert engine_probe.probe_engine_import() is None
    crashed, unmapped, missing, slow, no_exception, early = (engine_probe.probe_engine_import() for _ in range(6))
    assert asked[0] == ("gpen_core.engine.pipeline:import_engine", {"timeout": 300.0, "quiet": True})
    assert isinstance(crashed, OutOfMemory) and "not enough memory to start: importing the engine failed" in str(crashed)
    assert "died with SIGSEGV" in str(crashed)
    assert isinstance(unmapped, OutOfMemory) and "failed to map segment" in str(unmapped)
    assert type(missing) is GPENError and "cannot import" in str(missing) and "scripts/setup.sh" in str(missing)
    assert isinstance(slow, OutOfMemory) and "cannot start a child process to load the engine" in str(slow)
    # A C extension that failed to allocate under the cap and set no exception: the cap, not the install.
    assert isinstance(no_exception, OutOfMemory) and "error return without exception set" in str(no_exception)
    # An exit before the import could report (OpenBLAS's exit(1) when it cannot map its buffers): the cap too.
    assert isinstance(early, OutOfMemory) and "importing the engine failed" in str(early)
    assert "exited with code 1 before it finished" in str(early)
    # Without a cap the same SystemError is a broken install.
    monkeypatch.setattr(oom, "memory_limited", lambda: False)
    broken = oom.import_failure(SystemError("error return without exception set"))
    assert type(broken) is GPENError and "scripts/setup.sh" in str(broken)
