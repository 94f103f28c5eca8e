"""Weights registry, resolution order, verification and downloads, all without the network.

Downloads go through ``file://`` URLs, or loopback HTTP servers and
sockets (a refused port, a server that never answers). conftest gives every test
an empty ``GPEN_HOME`` and ``MODELSCOPE_CACHE`` and sets ``GPEN_OFFLINE=1``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpen_core.weights import fetch
from gpen_core.weights import lookup as weights
from gpen_core.errors import WeightsError

from .conftest import ROOT, shared_path
from .factories import RELEASED, TINY, write_checkpoint

REFUSED = "http://127.0.0.1:9"
# The registry entry's architecture when a test serves the TINY checkpoint under a released name
# (a download is checked against it before it is installed).
TINY_ARCH = weights.Arch(TINY.size, TINY.channel_multiplier, TINY.narrow, TINY.style_dim, TINY.n_mlp)  # discard port: nothing listens, the kernel refuses at once


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def tiny_ckpt(tmp_path: Path) -> Path:
    """A real (tiny) GPEN checkpoint that load_generator accepts."""
    return write_checkpoint(tmp_path / "tiny.pth", TINY, seed=3)


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(v, raising=False)


@pytest.fixture
def silent_server():
    """A loopback port that accepts TCP connections (kernel backlog) and never answers."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    srv.close()


def patch_spec(monkeypatch: pytest.MonkeyPatch, name: str, **changes) -> weights.WeightSpec:
    spec = dataclasses.replace(weights.REGISTRY[name], **changes)
    monkeypatch.setitem(weights.REGISTRY, name, spec)
    return spec


def leftovers(folder: Path) -> list[str]:
    """Temporary download files (never trusted) still in the models folder."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".part", ".msdl", ".tmp", ".partial")))


# ------------------------------------------------------------------ registry


def test_registry_entries_are_consistent():
    assert set(weights.REGISTRY) == {
        "GPEN-BFR-256", "GPEN-BFR-512", "GPEN-BFR-1024", "GPEN-BFR-2048",
        "GPEN-Colorization-1024", "GPEN-Inpainting-1024", "GPEN-Seg2face-512",
        "retinaface-resnet50", "retinaface-mobilenet0.25", "parsenet", "ParseNet-latest",
        "realesrnet_x2", "realesrnet_x4",
    }  # fmt: skip
    filenames = [s.filename for s in weights.REGISTRY.values()]
    assert len(set(filenames)) == len(filenames)
    for name, s in weights.REGISTRY.items():
        assert s.name == name
        assert s.urls or s.modelscope, name
        assert all(u.startswith("https://") for u in s.urls), name
        assert s.sha256 is None or (len(s.sha256) == 64 and int(s.sha256, 16) >= 0), name
        assert s.licence
        if s.kind == "generator":
            # The documented architecture is what the released files are (the factories mirror ../shared keys).
            assert s.arch == RELEASED[name], name
            assert s.filename == f"{name}.pth"
        elif s.kind == "upscaler":  # GPEN's RealESRNet files: no published hash (sidecar), see weights.py
            assert s.arch is None and s.filename == f"{name}.pth" and s.urls[0].endswith(s.filename)
        else:
            assert s.arch is None and s.arch_params is None
            if any("/facexlib/" in u for u in s.urls):
                assert s.sha256 and s.size_bytes, f"{name}: facexlib files have published hashes"
            else:  # GPEN's own files (ParseNet-latest): no published hash, sidecar on first use
                assert s.urls[0].endswith(s.filename), name
    assert weights.REGISTRY["GPEN-BFR-512"].modelscope == ("iic/cv_gpen_image-portrait-enhancement", "pytorch_model.pt")
    assert weights.REGISTRY["GPEN-BFR-2048"].modelscope == (
        "iic/cv_gpen_image-portrait-enhancement-hires",
        "pytorch_model-2048.pt",
    )


def test_pinned_mobilenet_hash_matches_the_real_file():
    real = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    spec = weights.REGISTRY["retinaface-mobilenet0.25"]
    assert real.stat().st_size == spec.size_bytes
    assert weights.verify(real, spec, record=False) == spec.sha256


def test_import_is_light():
    code = "import sys, gpen_core.weights.lookup; bad = [m for m in ('torch', 'modelscope') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_weights_is_the_public_face_of_its_rooms():
    """Names callers import from gpen_core.weights.lookup are the rooms' own objects (one REGISTRY, one verify);
    the download seams live only in gpen_core.weights.fetch, so a test patching them on weights fails loudly."""
    from gpen_core.weights import checksums
    from gpen_core.weights import registry

    assert weights.REGISTRY is registry.REGISTRY and weights.models_folder is registry.models_folder
    assert weights.verify is checksums.verify and weights.file_sha256 is checksums.file_sha256
    assert weights.modelscope_file_url is fetch.modelscope_file_url
    assert all(hasattr(weights, n) for n in weights.__all__)
    for seam in ("_open_url", "_probe", "READ_TIMEOUT_S", "CONNECT_PROBE_S"):
        assert not hasattr(weights, seam), f"weights.{seam} would be patched without effect; patch fetch.{seam}"


def test_models_dir_honours_gpen_home_and_defaults_to_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPEN_HOME", str(tmp_path / "a" / "b"))
    assert weights.models_dir() == tmp_path / "a" / "b" and not (tmp_path / "a").exists()  # made by a write only
    monkeypatch.delenv("GPEN_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert weights.models_dir() == tmp_path / "home" / ".cache" / "gpen"
    expected = {row.name: row.expected_path for row in weights.status()}
    assert expected["GPEN-BFR-512"] == tmp_path / "home" / ".cache" / "gpen" / "GPEN-BFR-512.pth"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(WeightsError) as e:
        weights.resolve("GPEN-BFR-999")
    assert "GPEN-BFR-512" in str(e.value) and "retinaface-mobilenet0.25" in str(e.value)


# ------------------------------------------------------------- resolution order


def ms_new_layout(root: Path, model_id: str, relpath: str, rev: str = "master") -> Path:
    """modelscope >= 1.38: {cache}/models/{owner}--{name}/snapshots/{revision}/{file}."""
    return root / "models" / model_id.replace("/", "--") / "snapshots" / rev / relpath


def ms_legacy_layout(root: Path, model_id: str, relpath: str) -> Path:
    """modelscope <= 1.37 with MODELSCOPE_CACHE set: {cache}/models/{owner}/{name___}/{file}."""
    owner, name = model_id.split("/")
    return root / "models" / owner / name.replace(".", "___") / relpath


def place(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def test_explicit_path_beats_models_folder_beats_modelscope_cache(tiny_ckpt, tmp_path):
    folder = weights.models_dir()
    ms = place(tiny_ckpt, ms_new_layout(weights.modelscope_cache_root(), "iic/cv_gpen_image-portrait-enhancement", "pytorch_model.pt"))
    assert weights.resolve("GPEN-BFR-512") == ms
    own = place(tiny_ckpt, folder / "GPEN-BFR-512.pth")
    assert weights.resolve("GPEN-BFR-512") == own
    explicit = place(tiny_ckpt, tmp_path / "elsewhere" / "mine.pth")
    assert weights.resolve(explicit) == explicit
    assert weights.locate(str(explicit)) == explicit
    own.unlink()
    assert weights.locate("GPEN-BFR-512") == ms


@pytest.mark.parametrize(
    "layout",
    [
        lambda r, m, f: ms_new_layout(r, m, f),
        lambda r, m, f: ms_new_layout(r, m, f, rev="v1.0.2"),  # a single non-default revision
        lambda r, m, f: ms_legacy_layout(r, m, f),
        lambda r, m, f: r / "hub" / "models" / Path(ms_legacy_layout(r, m, f)).relative_to(r / "models"),
        lambda r, m, f: r / "hub" / m.replace("iic/", "damo/") / f,  # old SDK, pre-rename "damo" owner
    ],
    ids=["snapshots-master", "snapshots-tag", "legacy-env", "legacy-default", "flat-damo"],
)
def test_every_modelscope_cache_layout_is_found(layout, tiny_ckpt):
    model_id, rel = weights.REGISTRY["GPEN-BFR-2048"].modelscope
    p = place(tiny_ckpt, layout(weights.modelscope_cache_root(), model_id, rel))
    assert weights.locate("GPEN-BFR-2048") == p
    assert weights.locate("GPEN-BFR-1024") is None  # same repo, other file


@pytest.mark.parametrize("builder", [ms_new_layout, ms_legacy_layout], ids=["new", "legacy"])
def test_our_modelscope_lookup_agrees_with_modelscope_itself(builder, tiny_ckpt, tmp_path, monkeypatch):
    """modelscope 1.40's own offline lookup resolves the same snapshot folder we find."""
    ms_snapshot = pytest.importorskip("modelscope.hub.snapshot_download")
    import modelscope_hub.config

    # modelscope writes a session id under $MODELSCOPE_HOME (~/.modelscope) even offline:
    # keep it in tmp, with a fresh process-wide config that reads the variable.
    monkeypatch.setenv("MODELSCOPE_HOME", str(tmp_path / "ms_home"))
    monkeypatch.setattr(modelscope_hub.config, "_default_config", None)
    model_id, rel = weights.REGISTRY["GPEN-BFR-512"].modelscope
    p = place(tiny_ckpt, builder(weights.modelscope_cache_root(), model_id, rel))
    # cache_dir explicit: modelscope_hub caches its config (and MODELSCOPE_CACHE) per process.
    theirs = ms_snapshot.snapshot_download(model_id, cache_dir=weights.modelscope_cache_root(), local_files_only=True)
    assert Path(theirs).resolve() == p.parent.resolve()
    assert weights.locate("GPEN-BFR-512") == p


def test_explicit_folders(tiny_ckpt, tmp_path):
    one = tmp_path / "one"
    p = place(tiny_ckpt, one / "GPEN-BFR-256.pth")
    (one / "notes.txt").write_text("not a checkpoint")
    assert weights.resolve(one) == p
    # A ModelScope repo folder (as copied from a cache): its single revision is used.
    repo = tmp_path / "iic--cv_gpen_image-portrait-enhancement"
    q = place(tiny_ckpt, repo / "snapshots" / "master" / "pytorch_model.pt")
    assert weights.resolve(repo) == q
    hires = tmp_path / "hires"
    place(tiny_ckpt, hires / "pytorch_model.pt")
    place(tiny_ckpt, hires / "pytorch_model-2048.pt")
    with pytest.raises(WeightsError, match="several checkpoints"):
        weights.resolve(hires)
    with pytest.raises(WeightsError, match="no known checkpoint"):
        weights.resolve(tmp_path)  # holds only sub-folders


def test_explicit_file_with_a_registry_name_is_checked_against_its_pin(tmp_path):
    fake = tmp_path / "detection_mobilenet0.25_Final.pth"
    fake.write_bytes(b"\0" * 1000)
    with pytest.raises(WeightsError, match="1000 bytes, expected 1789735"):
        weights.resolve(fake)


def test_located_generator_loads(tiny_ckpt):
    from gpen_core.networks.checkpoint import load_generator

    place(tiny_ckpt, weights.models_dir() / "GPEN-BFR-256.pth")
    model = load_generator(weights.resolve("GPEN-BFR-256"))
    assert model.config == TINY


# ------------------------------------------------------------- verification


@pytest.fixture
def forbid_torch_load(monkeypatch: pytest.MonkeyPatch):
    import torch

    def boom(*a, **k):
        raise AssertionError("torch.load was called on an unverified file")

    monkeypatch.setattr(torch, "load", boom)


def test_wrong_size_is_refused_before_torch_load(forbid_torch_load):
    bad = weights.models_dir() / "parsing_parsenet.pth"
    bad.write_bytes(b"truncated")
    with pytest.raises(WeightsError) as e:
        weights.resolve("parsenet")
    msg = str(e.value)
    assert str(bad) in msg and "9 bytes, expected 85331193" in msg
    assert "Delete" in msg and "python -m gpen_core download parsenet" in msg


def test_wrong_hash_with_right_size_is_refused(monkeypatch, forbid_torch_load):
    spec = weights.REGISTRY["retinaface-mobilenet0.25"]
    bad = weights.models_dir() / spec.filename
    bad.write_bytes(b"x" * spec.size_bytes)
    with pytest.raises(WeightsError, match="sha256") as e:
        weights.resolve("retinaface-mobilenet0.25")
    assert str(bad) in str(e.value) and "download it again" in str(e.value)


def test_unpinned_file_is_recorded_then_tampering_is_detected(tiny_ckpt, forbid_torch_load):
    own = place(tiny_ckpt, weights.models_dir() / "GPEN-BFR-512.pth")
    weights.resolve("GPEN-BFR-512")
    side = own.with_name("GPEN-BFR-512.pth.sha256")
    assert side.read_text().split()[0] == sha(own)
    with open(own, "r+b") as f:  # same size, one byte flipped
        f.seek(own.stat().st_size // 2)
        b = f.read(1)
        f.seek(-1, io.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(WeightsError, match="changed since it was first verified") as e:
        weights.resolve("GPEN-BFR-512")
    assert str(side) in str(e.value)
    side.unlink()  # the documented way to accept a deliberate replacement
    assert weights.resolve("GPEN-BFR-512") == own


def test_sidecar_for_a_modelscope_cache_file_stays_in_the_models_folder(tiny_ckpt):
    model_id, rel = weights.REGISTRY["GPEN-BFR-512"].modelscope
    root = weights.modelscope_cache_root()
    p = place(tiny_ckpt, ms_new_layout(root, model_id, rel))
    before = sorted(q for q in root.rglob("*"))
    weights.resolve("GPEN-BFR-512")
    assert sorted(q for q in root.rglob("*")) == before  # nothing written into ModelScope's cache
    side = weights.sidecar_path(p)
    assert side.parent == weights.models_dir() / ".hashes" and side.read_text().split()[0] == sha(p)


# ---------------------------------------------------------------- downloads


def test_download_from_a_file_url_with_progress(monkeypatch, tiny_ckpt):
    from gpen_core.networks.checkpoint import load_generator

    patch_spec(monkeypatch, "GPEN-BFR-256", urls=(tiny_ckpt.as_uri(),), arch_params=TINY_ARCH)
    calls: list[tuple[int, int | None]] = []
    path = weights.resolve("GPEN-BFR-256", allow_download=True, progress=lambda d, t: calls.append((d, t)))
    folder = weights.models_dir()
    assert path == folder / "GPEN-BFR-256.pth" and sha(path) == sha(tiny_ckpt)
    size = tiny_ckpt.stat().st_size
    assert calls[0] == (0, size) and calls[-1] == (size, size)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert (folder / "GPEN-BFR-256.pth.sha256").read_text().split()[0] == sha(tiny_ckpt)
    assert leftovers(folder) == []
    assert load_generator(path).config == TINY
    # Present now: offline resolution finds it, download() returns it without fetching.
    monkeypatch.setattr(weights, "download_into", lambda *a: pytest.fail("fetched although present"))
    assert weights.resolve("GPEN-BFR-256") == path
    assert weights.download("GPEN-BFR-256") == path


def test_download_checks_a_pinned_hash(monkeypatch, tiny_ckpt):
    folder = weights.models_dir()
    patch_spec(monkeypatch, "GPEN-BFR-256", urls=(tiny_ckpt.as_uri(),), arch_params=TINY_ARCH, sha256="0" * 64)
    with pytest.raises(WeightsError) as e:
        weights.download("GPEN-BFR-256")
    assert "rejected, wrong sha256" in str(e.value)
    assert not (folder / "GPEN-BFR-256.pth").exists() and leftovers(folder) == []
    patch_spec(monkeypatch, "GPEN-BFR-256", urls=(tiny_ckpt.as_uri(),), arch_params=TINY_ARCH, sha256=sha(tiny_ckpt))
    assert sha(weights.download("GPEN-BFR-256")) == sha(tiny_ckpt)
    assert not (folder / "GPEN-BFR-256.pth.sha256").exists()  # pinned: no sidecar needed


def test_download_replaces_a_corrupt_copy(monkeypatch, tiny_ckpt):
    folder = weights.models_dir()
    (folder / "GPEN-BFR-256.pth").write_bytes(b"garbage")
    (folder / "GPEN-BFR-256.pth.sha256").write_text("a" * 64 + "  GPEN-BFR-256.pth\n")
    patch_spec(monkeypatch, "GPEN-BFR-256", urls=(tiny_ckpt.as_uri(),), arch_params=TINY_ARCH)
    with pytest.raises(WeightsError, match="changed since"):
        weights.resolve("GPEN-BFR-256")  # resolve never silently replaces
    assert sha(weights.download("GPEN-BFR-256")) == sha(tiny_ckpt)
    assert weights.resolve("GPEN-BFR-256") == folder / "GPEN-BFR-256.pth"


class _BrokenStream:
    """An HTTP response that dies (or ends early) halfway through the body."""

    def __init__(self, data: bytes, *, error: bool):
        self.headers = {"Content-Length": str(len(data))}
        self._buf = io.BytesIO(data[: len(data) // 2])
        self._error = error

    def read(self, n: int) -> bytes:
        chunk = self._buf.read(min(n, 4096))
        if not chunk and self._error:
            raise ConnectionResetError(104, "Connection reset by peer")
        return chunk

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("error", [True, False], ids=["reset", "early-eof"])
def test_interrupted_download_leaves_nothing_trusted(monkeypatch, tiny_ckpt, error):
    data = tiny_ckpt.read_bytes()
    patch_spec(monkeypatch, "GPEN-BFR-256", urls=("https://example.invalid/GPEN-BFR-256.pth",))
    monkeypatch.setattr(fetch, "_probe", lambda url, timeout=None: None)
    monkeypatch.setattr(fetch, "_open_url", lambda url, timeout: _BrokenStream(data, error=error))
    with pytest.raises(WeightsError) as e:
        weights.resolve("GPEN-BFR-256", allow_download=True)
    assert ("Connection reset" in str(e.value)) if error else ("incomplete" in str(e.value))
    folder = weights.models_dir()
    assert not (folder / "GPEN-BFR-256.pth").exists()
    assert leftovers(folder) == [] and not list(folder.glob("*.sha256"))
    assert weights.locate("GPEN-BFR-256") is None


def test_leftover_temp_file_is_never_trusted(tiny_ckpt):
    folder = weights.models_dir()
    place(tiny_ckpt, folder / ".GPEN-BFR-512.pth.0123456789ab.part")
    assert weights.locate("GPEN-BFR-512") is None
    assert not next(s for s in weights.status() if s.name == "GPEN-BFR-512").present
    with pytest.raises(WeightsError, match="is not in"):
        weights.resolve("GPEN-BFR-512")


def test_download_sweeps_stale_temp_files_but_not_live_ones(monkeypatch, tiny_ckpt):
    folder = weights.models_dir()
    stale = folder / ".GPEN-BFR-256.pth.aaaaaaaaaaaa.part"
    live = folder / ".GPEN-BFR-256.pth.bbbbbbbbbbbb.part"  # another process, downloading now
    stale_ms = folder / ".GPEN-BFR-256.pth.cccccccccccc.msdl"
    for p in (stale, live):
        p.write_bytes(b"partial")
    (stale_ms / "sub").mkdir(parents=True)
    old = time.time() - 2 * fetch._STALE_PART_S
    os.utime(stale, (old, old))
    os.utime(stale_ms, (old, old))
    patch_spec(monkeypatch, "GPEN-BFR-256", urls=(tiny_ckpt.as_uri(),), arch_params=TINY_ARCH)
    weights.download("GPEN-BFR-256")
    assert not stale.exists() and not stale_ms.exists() and live.exists()


def test_modelscope_source_downloads_into_the_models_folder(monkeypatch, tiny_ckpt, no_proxy):
    """The ModelScope branch: ModelScope's file URL, streamed to a temp file, verified, moved into place."""
    data = tiny_ckpt.read_bytes()
    patch_spec(monkeypatch, "GPEN-BFR-1024", urls=(f"{REFUSED}/GPEN-BFR-1024.pth",), arch_params=TINY_ARCH)
    calls = []
    with _Mirror(data, declared=len(data), stall_s=0) as mirror:
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", mirror.url)
        path = weights.resolve("GPEN-BFR-1024", allow_download=True, progress=lambda d, t: calls.append((d, t)))
    folder = weights.models_dir()
    assert path == folder / "GPEN-BFR-1024.pth" and sha(path) == sha(tiny_ckpt)
    assert mirror.paths == [
        "/api/v1/models/iic/cv_gpen_image-portrait-enhancement-hires/repo?Revision=master&FilePath=pytorch_model.pt"
    ]
    assert calls[-1] == (len(data),) * 2
    assert leftovers(folder) == []

class _Mirror:
    """A loopback HTTP server that answers 200 with ``declared`` as Content-Length, sends ``body``,
    then (a stalling mirror, by default) stops sending mid-file.

    Bounded: every connection is closed after ``stall_s`` and the server stops on exit.
    Records the request paths so the test can check what was asked for.
    """

    def __init__(self, body: bytes = b"\0" * 65536, declared: int = 25_000_000, stall_s: float = 8.0) -> None:
        import http.server
        import threading

        mirror = self
        self.paths: list[str] = []
        self.stalls_served = 0
        self._stop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                mirror.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(declared))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                if not mirror._stop.wait(stall_s):  # a mirror that stops sending mid-file
                    mirror.stalls_served += 1  # the client waited the whole stall out

            def log_message(self, *a: object) -> None:
                pass

        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)

    def __enter__(self) -> "_Mirror":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._srv.shutdown()
        self._srv.server_close()


def test_a_stalling_modelscope_mirror_fails_within_the_read_timeout_and_leaves_nothing(monkeypatch, no_proxy):
    """ModelScope downloads keep the direct path's read timeout and clean-up."""
    monkeypatch.setattr(fetch, "READ_TIMEOUT_S", 0.5)
    patch_spec(monkeypatch, "GPEN-BFR-1024", urls=(f"{REFUSED}/GPEN-BFR-1024.pth",))
    # The mirror stalls for 5 minutes (ended early when the test leaves the block): the download
    # must give up on its own read timeout, not when the mirror lets go.
    with _Mirror(stall_s=300.0) as mirror:
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", mirror.url)
        with pytest.raises(WeightsError) as e:
            weights.download("GPEN-BFR-1024")
        assert mirror.stalls_served == 0, "the download waited out the mirror's whole stall"
    assert "timed out" in str(e.value) and "ModelScope" in str(e.value)
    assert mirror.paths and "cv_gpen_image-portrait-enhancement-hires" in mirror.paths[0]
    folder = weights.models_dir()
    left = [str(p.relative_to(folder)) for p in folder.rglob("*")]
    assert left == [], f"the failed download left {left}"


# ------------------------------------------------------------------ offline


def _assert_helpful(err: WeightsError, spec: weights.WeightSpec) -> None:
    msg, details = str(err), err.details
    folder = weights.models_dir()
    assert spec.filename in msg
    assert len(msg.splitlines()) == 2  # what is missing, and the fix; the long form is in details
    assert f"models folder: {folder / spec.filename}" in details
    if spec.modelscope:
        assert f"ModelScope cache: {weights.modelscope_cache_root()}" in details
    assert f"python -m gpen_core download {spec.name}" in msg
    assert f"save it as {folder / spec.filename}" in msg
    assert spec.urls[0] in msg


def _no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record every connection attempt (a probe or a download) instead of making it."""
    tried: list[object] = []
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: tried.append(address) or _refuse())
    monkeypatch.setattr(fetch, "_open_url", lambda url, timeout: tried.append(url) or _refuse())
    return tried


def _refuse() -> None:
    raise ConnectionRefusedError(111, "Connection refused")


def test_offline_env_fails_at_once_with_the_fix(monkeypatch):
    """At once: without touching the network (how long that takes: benchmarks/bench.py --refusals)."""
    spec = weights.REGISTRY["GPEN-BFR-512"]
    tried = _no_network(monkeypatch)
    with pytest.raises(WeightsError) as e:
        weights.resolve("GPEN-BFR-512")
    assert tried == []
    assert "GPEN_OFFLINE=1" in str(e.value)
    _assert_helpful(e.value, spec)


def test_unreachable_sources_fail_fast(monkeypatch, no_proxy):
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", REFUSED)
    spec = patch_spec(monkeypatch, "GPEN-BFR-512", urls=(f"{REFUSED}/GPEN-BFR-512.pth",))
    probes: list[str] = []
    real_probe = fetch._probe
    monkeypatch.setattr(fetch, "_probe", lambda url, *a, **k: probes.append(url) or real_probe(url, *a, **k))
    monkeypatch.setattr(fetch, "_open_url", lambda url, timeout: pytest.fail(f"downloaded from an unreachable host: {url}"))
    with pytest.raises(WeightsError) as e:
        weights.resolve("GPEN-BFR-512", allow_download=True)
    # Fast: both sources live on the one refused host, which is probed once (a refused TCP
    # connect), and nothing waits on a download or a retry loop.
    assert len(probes) == 1, probes
    msg = str(e.value)
    assert "cannot connect to 127.0.0.1:9" in msg and "ModelScope iic/cv_gpen_image-portrait-enhancement" in msg
    _assert_helpful(e.value, spec)
    assert leftovers(weights.models_dir()) == []


def test_a_server_that_never_answers_fails_within_the_read_timeout(monkeypatch, silent_server, no_proxy):
    monkeypatch.setattr(fetch, "READ_TIMEOUT_S", 0.5)
    patch_spec(monkeypatch, "retinaface-mobilenet0.25", urls=(f"{silent_server}/detection_mobilenet0.25_Final.pth",))
    opened: list[tuple[str, float]] = []
    real_open = fetch._open_url
    monkeypatch.setattr(fetch, "_open_url", lambda url, timeout: opened.append((url, timeout)) or real_open(url, timeout))
    with pytest.raises(WeightsError, match="timed out"):
        weights.download("retinaface-mobilenet0.25")
    # Within the read timeout: one request, made with the 0.5 s timeout, which is what fired.
    assert opened == [(f"{silent_server}/detection_mobilenet0.25_Final.pth", 0.5)]
    assert os.listdir(weights.models_dir()) == []


# -------------------------------------------------------------------- status


def test_status_reflects_present_missing_and_corrupt(tiny_ckpt):
    folder = weights.models_dir()
    rows = {s.name: s for s in weights.status()}
    assert set(rows) == set(weights.REGISTRY)
    assert all(not s.present and s.path is None and s.verified is None for s in rows.values())
    assert rows["parsenet"].size_bytes == 85331193 and rows["parsenet"].expected_path == folder / "parsing_parsenet.pth"

    place(tiny_ckpt, folder / "GPEN-BFR-256.pth")
    (folder / "parsing_parsenet.pth").write_bytes(b"short")
    rows = {s.name: s for s in weights.status()}
    ok = rows["GPEN-BFR-256"]
    assert ok.present and ok.verified is True and ok.location == "models folder"
    assert ok.size_bytes == tiny_ckpt.stat().st_size and ok.problem is None
    bad = rows["parsenet"]
    assert bad.present and bad.verified is False and "expected 85331193" in bad.problem
    assert not rows["GPEN-BFR-512"].present


def test_status_verifies_the_real_detector_when_present():
    real = shared_path("weights", "detection_mobilenet0.25_Final.pth")
    place(real, weights.models_dir() / real.name)
    row = next(s for s in weights.status() if s.name == "retinaface-mobilenet0.25")
    assert row.present and row.verified is True
