"""The checkpoint registry and where each file comes from.

One literal table (:data:`REGISTRY`): registry name → file name, sources, pinned
size and sha256 where there is published evidence, and, for generators, the
architecture. :func:`resolve` turns a name (or a path) into a verified file:

1. an explicit existing file, or a folder holding exactly one known file (a
   ModelScope snapshot folder works too);
2. our models folder (``$GPEN_HOME``, default ``~/.cache/gpen``);
3. the ModelScope cache (``$MODELSCOPE_CACHE``, default ``~/.cache/modelscope``),
   in every layout modelscope has used (1.38+ ``models/owner--name/snapshots/rev``
   and the older ones);
4. a download, only when allowed (``allow_download=None``: allowed unless
   ``GPEN_OFFLINE=1``).

Downloads stream to a temporary file inside the models folder, are fsynced and
verified (size, sha256) and only then renamed into place with ``os.replace``,
so the final name never holds a partial file. Where no sha256 is published the
first verification records the hash in a ``<file>.sha256`` sidecar (trust on
first use), and every later resolve checks the file against it.

Verification happens here, before anything calls ``torch.load``. Importing this
module imports neither torch nor modelscope.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from .errors import WeightsError

if TYPE_CHECKING:
    from .arch import GPENConfig

Kind = Literal["generator", "detector", "parser", "upscaler"]
Progress = Callable[[int, int | None], None]  # (bytes done, bytes total or None)

# A TCP connect to the source host before any download: an offline machine or a
# blocked host fails here in seconds instead of in ModelScope's retry loop (20+ s).
CONNECT_PROBE_S = 3.0
# Per-read socket timeout of an HTTP download: a stalled server fails the download
# (cleanly, nothing left under the final name) instead of hanging the app.
READ_TIMEOUT_S = 20.0
_CHUNK = 1 << 20
# Partial downloads older than this are someone's crashed attempt, not a live one.
_STALE_PART_S = 6 * 3600
_MODELSCOPE_DEFAULT_ENDPOINT = "https://modelscope.cn"  # modelscope_hub.constants.DEFAULT_ENDPOINT
# ModelScope renamed the "damo" organisation to "iic"; caches made before hold damo/...
_MODELSCOPE_OWNER_ALIASES = {"iic": ("iic", "damo"), "damo": ("damo", "iic")}


class Arch(NamedTuple):
    """GPENConfig's fields, kept torch-free so the registry is importable cheaply."""

    size: int
    channel_multiplier: int = 2
    narrow: float = 1.0
    style_dim: int = 512
    n_mlp: int = 8


@dataclass(frozen=True)
class WeightSpec:
    """One downloadable checkpoint. Sizes in bytes; sha256 as lowercase hex."""

    name: str  # registry name, what users type: `python -m gpen_core download NAME`
    filename: str  # the name it has in our models folder (and in facexlib's model_rootpath)
    kind: Kind
    # Release URLs, tried in order. A URL that serves different bytes is rejected
    # by the size/sha256 check, so a pinned hash makes extra mirrors safe.
    urls: tuple[str, ...]
    # (model_id, path inside the snapshot) on ModelScope, or None.
    modelscope: tuple[str, str] | None
    # Exact file size where published evidence exists; None: unknown.
    size_bytes: int | None
    # sha256 where published evidence exists; None: verify size only, and record
    # the hash in a sidecar on first verification (trust on first use).
    sha256: str | None
    # Generator architecture (the checkpoint still decides at load time; this is
    # what the release is documented to be, used for synthetic models and sizing).
    arch_params: Arch | None
    licence: str
    notes: str = ""
    # Try ModelScope before the URLs (the release URLs of 1024/2048 are reported dead).
    modelscope_first: bool = False

    @property
    def arch(self) -> GPENConfig | None:
        """The documented architecture as a :class:`GPENConfig` (imports torch on first use)."""
        if self.arch_params is None:
            return None
        from .arch import GPENConfig

        return GPENConfig(**self.arch_params._asdict())


@dataclass(frozen=True)
class WeightStatus:
    """What the models panel and ``python -m gpen_core info`` show for one registry entry."""

    name: str
    filename: str
    kind: Kind
    present: bool
    path: Path | None  # where it was found (None: nowhere)
    # True: size and hash check out; False: present but corrupt (see problem); None: not present.
    verified: bool | None
    size_bytes: int | None  # on disk when present, else the registry's expected size (may be None)
    location: str  # "models folder", "ModelScope cache", or "" when missing
    expected_path: Path  # where `download` puts it / where to place it by hand
    problem: str | None = None  # the verification error, when verified is False


_OSS = "https://public-vigen-video.oss-cn-shanghai.aliyuncs.com/robin/models"
_FACEXLIB = "https://github.com/xinntao/facexlib/releases/download"
_GPEN_LICENCE = "© Alibaba 2021, for academic and non-commercial use only (yangxy/GPEN README)"

# Evidence for the entries below (checked with the project's search tool):
# - yangxy/GPEN README lists GPEN-BFR-256.pth and GPEN-BFR-512.pth under the OSS
#   URLs; its 2022-03-09 news says GPEN-BFR-2048 was taken down, and its
#   2023-02-15 news points 1024/2048 to ModelScope "cv_gpen_image-portrait-
#   enhancement-hires", noting "pytorch_model.pt, pytorch_model-2048.pt are
#   respectively the 1024 and 2048 versions". Third-party scripts report the OSS
#   GPEN-BFR-1024.pth link as not working, so those two try ModelScope first.
# - modelscope's ImagePortraitEnhancementPipeline loads f"{model}/pytorch_model.pt"
#   (ModelFile.TORCH_MODEL_FILE) strictly into FullGenerator(512, cm 2) for the
#   base model and FullGenerator(1024) for "hires".
# - No published size or sha256 was found for any GPEN file: left None (sidecar).
# - detection_Resnet50_Final.pth and parsing_parsenet.pth: several independent
#   public manifests agree on size and sha256 (109497761 / 6d1de9c2…,
#   85331193 / 3d558d8d…); one maps GPEN's RetinaFace-R50.pth to the same hash.
# - detection_mobilenet0.25_Final.pth: ../shared/README.md (and the file there).
# - ParseNet-latest.pth: yangxy/GPEN README, beside GPEN-BFR-512.pth; loaded by
#   face_parse/face_parsing.py as ParseNet(512, 512, 32, 64, 19, bn, LeakyReLU, [32, 256]).
#   facexlib's parsing_parsenet.pth is built with the same class and arguments (same keys);
#   whether the numbers are the same is not published, so each keeps its own entry.
REGISTRY: dict[str, WeightSpec] = {
    s.name: s
    for s in (
        WeightSpec(
            name="GPEN-BFR-256",
            filename="GPEN-BFR-256.pth",
            kind="generator",
            urls=(f"{_OSS}/GPEN-BFR-256.pth",),
            modelscope=None,
            size_bytes=None,
            sha256=None,
            arch_params=Arch(256, channel_multiplier=1, narrow=0.5),
            licence=_GPEN_LICENCE,
            notes="256 px faces; the small, fast one (channel_multiplier 1, narrow 0.5).",
        ),
        WeightSpec(
            name="GPEN-BFR-512",
            filename="GPEN-BFR-512.pth",
            kind="generator",
            urls=(f"{_OSS}/GPEN-BFR-512.pth",),
            modelscope=("iic/cv_gpen_image-portrait-enhancement", "pytorch_model.pt"),
            size_bytes=None,
            sha256=None,
            arch_params=Arch(512),
            licence=_GPEN_LICENCE,
            notes="512 px faces. ModelScope's pytorch_model.pt has the same keys and shapes "
            "(it may be a different training run from the GitHub release).",
        ),
        WeightSpec(
            name="GPEN-BFR-1024",
            filename="GPEN-BFR-1024.pth",
            kind="generator",
            urls=(f"{_OSS}/GPEN-BFR-1024.pth",),
            modelscope=("iic/cv_gpen_image-portrait-enhancement-hires", "pytorch_model.pt"),
            size_bytes=None,
            sha256=None,
            arch_params=Arch(1024),
            licence=_GPEN_LICENCE,
            notes="1024 px faces; published on ModelScope (the OSS link is reported dead).",
            modelscope_first=True,
        ),
        WeightSpec(
            name="GPEN-BFR-2048",
            filename="GPEN-BFR-2048.pth",
            kind="generator",
            urls=(f"{_OSS}/GPEN-BFR-2048.pth",),
            modelscope=("iic/cv_gpen_image-portrait-enhancement-hires", "pytorch_model-2048.pt"),
            size_bytes=None,
            sha256=None,
            arch_params=Arch(2048),
            licence=_GPEN_LICENCE,
            notes="2048 px faces (selfies); published on ModelScope (the OSS file was taken down).",
            modelscope_first=True,
        ),
        WeightSpec(
            name="retinaface-resnet50",
            filename="detection_Resnet50_Final.pth",
            kind="detector",
            urls=(
                f"{_FACEXLIB}/v0.1.0/detection_Resnet50_Final.pth",
                # GPEN's copy; accepted only if it hashes to the pinned sha256.
                f"{_OSS}/RetinaFace-R50.pth",
            ),
            modelscope=None,
            size_bytes=109497761,
            sha256="6d1de9c2944f2ccddca5f5e010ea5ae64a39845a86311af6fdf30841b0a5a16d",
            arch_params=None,
            licence="MIT (biubug6/Pytorch_Retinaface), distributed by facexlib",
            notes="RetinaFace ResNet-50 face detector, ~105 MB; more accurate, ~10x the cost of mobilenet0.25.",
        ),
        WeightSpec(
            name="retinaface-mobilenet0.25",
            filename="detection_mobilenet0.25_Final.pth",
            kind="detector",
            urls=(f"{_FACEXLIB}/v0.1.0/detection_mobilenet0.25_Final.pth",),
            modelscope=None,
            size_bytes=1789735,
            sha256="ed6fa7d45a5179f03cb5ce82c73b0c6711372968e53782e88395acee88d319e1",
            arch_params=None,
            licence="MIT (biubug6/Pytorch_Retinaface), distributed by facexlib",
            notes="RetinaFace MobileNet-0.25 face detector, 1.7 MB; fast on CPU.",
        ),
        WeightSpec(
            name="parsenet",
            filename="parsing_parsenet.pth",
            kind="parser",
            urls=(f"{_FACEXLIB}/v0.2.2/parsing_parsenet.pth",),
            modelscope=None,
            size_bytes=85331193,
            sha256="3d558d8d0e42c20224f13cf5a29c79eba2d59913419f945545d8cf7b72920de2",
            arch_params=None,
            licence="distributed by facexlib (ParseNet from PSFR-GAN); check the upstream licence",
            notes="facexlib's copy of the face-parsing network: the same ParseNet class and key table as "
            "GPEN's ParseNet-latest.pth (used when that one is absent).",
        ),
        WeightSpec(
            name="ParseNet-latest",
            filename="ParseNet-latest.pth",
            kind="parser",
            urls=(f"{_OSS}/ParseNet-latest.pth",),
            modelscope=None,
            # No published size or sha256 (yangxy/GPEN README links the file only): sidecar.
            size_bytes=None,
            sha256=None,
            arch_params=None,
            licence=_GPEN_LICENCE,
            notes="GPEN's face-parsing network (official paste mask); optional (GPEN's rectangle mask otherwise).",
        ),
        # Background upscalers (gpen_core.upscaler): yangxy/GPEN README links realesrnet_x1/x2/x4.pth
        # under the same OSS folder; sr_model/real_esrnet.py loads their 'params_ema' into
        # RRDBNet(num_feat 32, num_block 23, num_grow_ch 32). ModelScope's portrait-enhancement
        # pipeline strictly loads f"{model}/super_resolution/realesrnet_x2.pth" ['params_ema'] into
        # the same RRDBNet at scale 2 (modelscope image_portrait_enhancement_pipeline.py). No
        # published size or sha256: sidecar (trust on first use).
        WeightSpec(
            name="realesrnet_x2",
            filename="realesrnet_x2.pth",
            kind="upscaler",
            urls=(f"{_OSS}/realesrnet_x2.pth",),
            modelscope=("iic/cv_gpen_image-portrait-enhancement", "super_resolution/realesrnet_x2.pth"),
            size_bytes=None,
            sha256=None,
            arch_params=None,
            licence=_GPEN_LICENCE,
            notes="Background upscaler ×2 (RealESRNet, RRDBNet 23 blocks); GPEN's --use_sr default and "
            "ModelScope's portrait-enhancement background.",
        ),
        WeightSpec(
            name="realesrnet_x4",
            filename="realesrnet_x4.pth",
            kind="upscaler",
            urls=(f"{_OSS}/realesrnet_x4.pth",),
            modelscope=None,
            size_bytes=None,
            sha256=None,
            arch_params=None,
            licence=_GPEN_LICENCE,
            notes="Background upscaler ×4 (RealESRNet, RRDBNet 23 blocks); GPEN's --sr_scale 4.",
        ),
    )
}


# --------------------------------------------------------------------- folders


def models_dir() -> Path:
    """Our models folder: ``$GPEN_HOME`` or ``~/.cache/gpen``; created if missing."""
    return _folder(None)


def _folder(arg: str | os.PathLike[str] | None) -> Path:
    p = Path(arg) if arg is not None else Path(os.environ.get("GPEN_HOME") or "~/.cache/gpen")
    p = p.expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WeightsError(
            f"cannot create the models folder {p}: {exc.strerror or exc}. "
            "Set GPEN_HOME to a writable folder."
        ) from exc
    return p


def expected_location(name: str, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where ``download`` puts ``name`` and where to place it by hand."""
    return _folder(models_dir) / get_spec(name).filename


def modelscope_cache_root() -> Path:
    """ModelScope's cache root as modelscope 1.40 computes it (``$MODELSCOPE_CACHE`` or ``~/.cache/modelscope``)."""
    return Path(os.environ.get("MODELSCOPE_CACHE") or "~/.cache/modelscope").expanduser()


def get_spec(name: str) -> WeightSpec:
    """The registry entry for a name (case-insensitive) or a registry file name."""
    spec = _lookup(name)
    if spec is None:
        raise WeightsError(f"unknown weights {name!r}; known names: {', '.join(REGISTRY)}.")
    return spec


def _lookup(name: str) -> WeightSpec | None:
    low = name.strip().lower()
    for s in REGISTRY.values():
        if low in (s.name.lower(), s.filename.lower()):
            return s
    return None


# --------------------------------------------------------------------- lookup


@dataclass(frozen=True)
class _Found:
    path: Path
    location: str  # "explicit path", "models folder", "ModelScope cache"
    spec: WeightSpec | None  # None for an explicit file that is not a registry file


def _modelscope_candidates(model_id: str, relpath: str, root: Path) -> list[tuple[str, list[Path]]]:
    """Every place modelscope (1.40 and older) may have put ``relpath`` of ``model_id``.

    Returns (description, concrete candidate paths) pairs, newest layout first:
    1.38+ ``models/owner--name/snapshots/<rev>/`` (master, main, then any other
    revision); ≤1.37 ``models/owner/name___`` (``$MODELSCOPE_CACHE`` set) and
    ``hub/models/owner/name___`` (default cache); older SDKs ``owner/name`` and
    ``hub/owner/name``. Both owners are tried: "damo" was renamed "iic".
    """
    owner, name = model_id.split("/", 1)
    safe = name.replace(".", "___")
    out: list[tuple[str, list[Path]]] = []
    for o in _MODELSCOPE_OWNER_ALIASES.get(owner, (owner,)):
        snaps = root / "models" / f"{o}--{name}" / "snapshots"
        paths = [snaps / rev / relpath for rev in ("master", "main")]
        if snaps.is_dir():
            paths += [d / relpath for d in sorted(snaps.iterdir()) if d.name not in ("master", "main")]
        out.append((str(snaps / "<revision>" / relpath), paths))
        for folder in (
            root / "models" / o / safe,
            root / "hub" / "models" / o / safe,
            root / o / name,
            root / "hub" / o / name,
        ):
            out.append((str(folder / relpath), [folder / relpath]))
    return out


def _search(spec: WeightSpec, folder: Path) -> tuple[_Found | None, list[str]]:
    """First existing file for ``spec`` (models folder, then ModelScope cache) and every place looked."""
    looked: list[str] = []
    own = folder / spec.filename
    looked.append(f"models folder: {own}")
    if own.is_file():
        return _Found(own, "models folder", spec), looked
    if spec.modelscope is not None:
        model_id, relpath = spec.modelscope
        for desc, paths in _modelscope_candidates(model_id, relpath, modelscope_cache_root()):
            looked.append(f"ModelScope cache: {desc}")
            for p in paths:
                if p.is_file():
                    return _Found(p, "ModelScope cache", spec), looked
    return None, looked


def _known_in_folder(folder: Path) -> list[Path]:
    """Registry files directly inside ``folder`` (for 'resolve this folder')."""
    names = {s.filename for s in REGISTRY.values()}
    names |= {s.modelscope[1] for s in REGISTRY.values() if s.modelscope}
    return sorted(p for p in folder.iterdir() if p.name in names and p.is_file())


def _explicit(target: Path) -> _Found:
    """An explicit file, or the one known checkpoint inside an explicit folder."""
    if target.is_file():
        return _Found(target, "explicit path", _unique_spec_for_file(target.name))
    folders = [target]
    snaps = target / "snapshots"  # a ModelScope repo folder: look into its revisions
    if snaps.is_dir():
        folders += sorted(d for d in snaps.iterdir() if d.is_dir())
    for f in folders:
        known = _known_in_folder(f)
        if len(known) == 1:
            return _Found(known[0], "explicit path", _unique_spec_for_file(known[0].name))
        if len(known) > 1:
            raise WeightsError(
                f"{f} holds several checkpoints ({', '.join(p.name for p in known)}); "
                "pass the one you want as a file path, e.g. " + str(known[0])
            )
    known_names = ", ".join(sorted({s.filename for s in REGISTRY.values()}))
    raise WeightsError(
        f"{target} is a folder with no known checkpoint in it (looked for {known_names} and "
        "ModelScope's pytorch_model.pt / pytorch_model-2048.pt). Pass the checkpoint file itself."
    )


def _unique_spec_for_file(filename: str) -> WeightSpec | None:
    """The registry entry a file name identifies, if exactly one does."""
    hits = [s for s in REGISTRY.values() if filename in (s.filename, s.modelscope[1] if s.modelscope else None)]
    return hits[0] if len(hits) == 1 else None


def _parse(name_or_path: str | os.PathLike[str]) -> tuple[WeightSpec | None, Path | None]:
    """(spec, None) for a registry name; (None, path) for an existing explicit path."""
    text = os.fspath(name_or_path)
    spec = next((s for s in REGISTRY.values() if s.name.lower() == text.strip().lower()), None)
    if spec is not None:
        return spec, None
    path = Path(text).expanduser()
    if path.exists():
        return None, path
    spec = _lookup(text)  # a bare registry file name, e.g. "GPEN-BFR-512.pth"
    if spec is not None and os.sep not in text and "/" not in text:
        return spec, None
    raise WeightsError(
        f"{text!r} is neither an existing file nor a known weights name. "
        f"Known names: {', '.join(REGISTRY)}; or pass the path of a checkpoint file."
    )


def locate(name_or_path: str | os.PathLike[str], models_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Where the file is now, without network and without verifying it (``resolve`` verifies).

    Same order as :func:`resolve`: explicit path, models folder, ModelScope cache.
    Leftover temporary files of an interrupted download are never returned.
    """
    spec, explicit = _parse(name_or_path)
    if explicit is not None:
        return _explicit(explicit).path
    assert spec is not None
    found, _ = _search(spec, _folder(models_dir))
    return found.path if found else None


# --------------------------------------------------------------- verification

_hash_lock = threading.Lock()
# (real path, size, mtime_ns, inode) → sha256: a file is hashed once per process
# until it changes on disk, so status() and repeated loads stay cheap.
_hash_cache: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file (cached per process while its size, mtime and inode are unchanged)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    with _hash_lock:
        hit = _hash_cache.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    with _hash_lock:
        _hash_cache[key] = digest
    return digest


def sidecar_path(path: Path, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the trust-on-first-use hash of ``path`` is recorded.

    ``<file>.sha256`` beside files in our models folder; for files elsewhere (the
    ModelScope cache) under ``<models folder>/.hashes/`` so we never write outside it.
    """
    folder = _folder(models_dir)
    try:
        if path.resolve().parent == folder.resolve():
            return path.with_name(path.name + ".sha256")
    except OSError:
        pass
    tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return folder / ".hashes" / f"{path.name}.{tag}.sha256"


def _read_sidecar(p: Path) -> str | None:
    try:
        text = p.read_text(encoding="utf-8").split()
    except OSError:
        return None
    return text[0].lower() if text and len(text[0]) == 64 else None


def _write_atomic(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)


def _delete_fix(spec: WeightSpec, path: Path, extra: str = "") -> str:
    return (
        f"Delete {path}{extra} and download it again: `python -m gpen_core download {spec.name}`"
        + (f" (or from {spec.urls[0]})." if spec.urls else ".")
    )


def verify(path: Path, spec: WeightSpec, models_dir: str | os.PathLike[str] | None = None, *, record: bool = True) -> str:
    """Check ``path`` against ``spec`` (size, then sha256 or its sidecar); return the sha256.

    Raises WeightsError naming the file and the fix when the size or hash is wrong.
    With no pinned sha256 and no sidecar yet, the hash is recorded (``record``).
    """
    size = path.stat().st_size
    if spec.size_bytes is not None and size != spec.size_bytes:
        raise WeightsError(
            f"{path} is corrupt or incomplete: {size} bytes, expected {spec.size_bytes} for {spec.name}. "
            + _delete_fix(spec, path)
        )
    digest = file_sha256(path)
    if spec.sha256 is not None:
        if digest != spec.sha256:
            raise WeightsError(
                f"{path} is corrupt or not the released {spec.name}: sha256 {digest}, expected {spec.sha256}. "
                + _delete_fix(spec, path)
            )
        return digest
    side = sidecar_path(path, models_dir)
    recorded = _read_sidecar(side)
    if recorded is None:
        if record:
            _write_atomic(side, f"{digest}  {path.name}\n")
    elif recorded != digest:
        raise WeightsError(
            f"{path} changed since it was first verified: sha256 {digest}, recorded {recorded} in {side}. "
            "The file is corrupt or was replaced. "
            + _delete_fix(spec, path, f" (and {side})")
            + f" If you replaced it on purpose, delete {side} and it will be recorded again."
        )
    return digest


# ------------------------------------------------------------------- resolve


def _offline_env() -> bool:
    return os.environ.get("GPEN_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _fix_text(spec: WeightSpec, folder: Path) -> str:
    final = folder / spec.filename
    manual = [spec.urls[0]] if spec.urls else []
    if spec.modelscope:
        mid, rel = spec.modelscope
        page = f"https://www.modelscope.cn/models/{mid}/files (file {rel})"
        manual.insert(0 if spec.modelscope_first else len(manual), page)
    return (
        f"Fix: run `python -m gpen_core download {spec.name}` on a machine with internet access, "
        f"or download it yourself from {' or '.join(manual)} and save it as {final} "
        f"(folder {folder}, file name {spec.filename})."
    )


def _missing_error(spec: WeightSpec, folder: Path, looked: list[str], why: str, attempts: list[str]) -> WeightsError:
    """Two lines for people (what, and the fix); every place looked and each attempt in ``details``."""
    cache = modelscope_cache_root()
    tried = f" ({'; '.join(attempts)})" if attempts else ""
    head = f"{spec.name} ({spec.filename}) is not in {folder} or the ModelScope cache {cache}: {why}{tried}."
    details = ["Looked in:", *[f"  - {p}" for p in looked]]
    if attempts:
        details += ["Download attempts:", *[f"  - {a}" for a in attempts]]
    return WeightsError(f"{head}\n{_fix_text(spec, folder)}", details="\n".join(details))


def resolve(
    name_or_path: str | os.PathLike[str],
    *,
    models_dir: str | os.PathLike[str] | None = None,
    allow_download: bool | None = None,
    progress: Progress | None = None,
) -> Path:
    """A verified checkpoint file for a registry name or an explicit path.

    Order: explicit existing file (or folder with exactly one known file) → models
    folder → ModelScope cache → download (when ``allow_download``; ``None`` means
    allowed unless ``GPEN_OFFLINE=1``). Raises :class:`WeightsError` within seconds
    when it is missing and cannot be fetched, naming the file, every place looked
    and the fix; and when a found file fails its size or hash check.
    """
    spec, explicit = _parse(name_or_path)
    folder = _folder(models_dir)
    if explicit is not None:
        found = _explicit(explicit)
        # An explicit file is the caller's choice; verify it only against a pinned
        # size/hash (never write a sidecar for a file we do not manage).
        if found.spec is not None and (found.spec.sha256 or found.spec.size_bytes):
            verify(found.path, found.spec, folder, record=False)
        return found.path
    assert spec is not None
    found, looked = _search(spec, folder)
    if found is not None:
        verify(found.path, spec, folder)
        return found.path
    allowed = (not _offline_env()) if allow_download is None else allow_download
    if not allowed:
        why = "downloads are off (GPEN_OFFLINE=1)" if allow_download is None else "downloads are off for this call"
        raise _missing_error(spec, folder, looked, why, [])
    return _fetch(spec, folder, progress, looked)


def download(
    name: str,
    *,
    models_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Fetch ``name`` into the models folder (ignores GPEN_OFFLINE: this is the explicit request).

    Returns at once if a verified copy is already present (models folder or
    ModelScope cache). A corrupt copy in the models folder is replaced.
    """
    spec = get_spec(name)
    folder = _folder(models_dir)
    found, looked = _search(spec, folder)
    if found is not None:
        try:
            verify(found.path, spec, folder)
            return found.path
        except WeightsError:
            if found.location == "models folder":
                found.path.unlink(missing_ok=True)
                sidecar_path(found.path, folder).unlink(missing_ok=True)
    return _fetch(spec, folder, progress, looked)


# ------------------------------------------------------------------ fetching


def _probe(url: str, timeout: float | None = None) -> str | None:
    """None if a TCP connection to the URL's host (or its proxy) opens; else why not."""
    import socket
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return None
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or host, p.port or 8080
    try:
        with socket.create_connection((host, port), timeout=CONNECT_PROBE_S if timeout is None else timeout):
            return None
    except OSError as exc:
        return f"cannot connect to {host}:{port} ({exc.strerror or exc.__class__.__name__ or exc})"


def _open_url(url: str, timeout: float):
    """urllib's opener (a seam for tests that simulate broken streams)."""
    import urllib.request

    req = urllib.request.Request(url, headers={"User-Agent": "gpen_core (python urllib)"})
    return urllib.request.urlopen(req, timeout=timeout)


def _clean_stale_parts(folder: Path, filename: str) -> None:
    """Remove temp files/folders of crashed downloads of ``filename`` (never live ones)."""
    now = time.time()
    for p in [*folder.glob(f".{filename}.*.part"), *folder.glob(f".{filename}.*.msdl")]:
        try:
            if now - p.stat().st_mtime <= _STALE_PART_S:
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()
        except OSError:
            pass


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _install(tmp: Path, spec: WeightSpec, folder: Path, total: int | None) -> Path:
    """Check a fully written temp file and move it into place atomically."""
    size = tmp.stat().st_size
    if total is not None and size != total:
        raise _Rejected(f"incomplete: got {size} of {total} bytes")
    if spec.size_bytes is not None and size != spec.size_bytes:
        raise _Rejected(f"wrong size: {size} bytes, expected {spec.size_bytes}")
    digest = file_sha256(tmp)
    if spec.sha256 is not None and digest != spec.sha256:
        raise _Rejected(f"wrong sha256 {digest}, expected {spec.sha256}")
    final = folder / spec.filename
    os.replace(tmp, final)
    _fsync_dir(folder)
    if spec.sha256 is None:
        # The download is the trust event: record what we fetched.
        _write_atomic(sidecar_path(final, folder), f"{digest}  {final.name}\n")
    return final


class _Rejected(Exception):
    """A source delivered bytes that fail verification."""


def _fetch_url(url: str, spec: WeightSpec, folder: Path, progress: Progress | None) -> Path:
    tmp = folder / f".{spec.filename}.{uuid.uuid4().hex[:12]}.part"
    try:
        with _open_url(url, READ_TIMEOUT_S) as resp:
            length = resp.headers.get("Content-Length") if resp.headers else None
            total = int(length) if length and length.isdigit() else spec.size_bytes
            if total is not None:
                free = shutil.disk_usage(folder).free
                if free < total + (64 << 20):
                    raise _Rejected(
                        f"not enough disk space in {folder}: {free >> 20} MiB free, {total >> 20} MiB needed"
                    )
            done = 0
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                if progress:
                    progress(0, total)
                while chunk := resp.read(_CHUNK):
                    f.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
                f.flush()
                os.fsync(f.fileno())
        return _install(tmp, spec, folder, total)
    finally:
        tmp.unlink(missing_ok=True)


def modelscope_file_url(model_id: str, relpath: str, revision: str = "master") -> str:
    """ModelScope's direct file URL (the one its own SDK builds: ``/api/v1/models/{id}/repo``)."""
    q = urllib.parse.quote_plus
    return f"{_modelscope_endpoint().rstrip('/')}/api/v1/models/{model_id}/repo?Revision={q(revision)}&FilePath={q(relpath)}"


def _fetch_modelscope(spec: WeightSpec, folder: Path, progress: Progress | None) -> Path:
    """One file from ModelScope, through the same code as a direct download.

    Not through modelscope's SDK: its client waits 60 s per read with 5 retries
    (a stalled mirror held a download for over 300 s) and resumes from its own
    ``.incomplete`` files. Here the file streams to our temp file with our read
    timeout, is verified, and the temp file is removed on any failure.
    """
    assert spec.modelscope is not None
    model_id, relpath = spec.modelscope
    return _fetch_url(modelscope_file_url(model_id, relpath), spec, folder, progress)


def _modelscope_endpoint() -> str:
    return os.environ.get("MODELSCOPE_ENDPOINT") or _MODELSCOPE_DEFAULT_ENDPOINT


def _fetch(spec: WeightSpec, folder: Path, progress: Progress | None, looked: list[str]) -> Path:
    """Try every source in order; the first verified one wins. Fails fast when none is reachable."""
    import urllib.error

    _clean_stale_parts(folder, spec.filename)
    sources: list[tuple[str, str]] = [("url", u) for u in spec.urls]
    if spec.modelscope is not None:
        ms = ("modelscope", spec.modelscope[0])
        sources = [ms, *sources] if spec.modelscope_first else [*sources, ms]
    attempts: list[str] = []
    unreachable: dict[str, str] = {}  # probe once per host
    for kind, where in sources:
        probe_url = _modelscope_endpoint() if kind == "modelscope" else where
        host = urllib.parse.urlsplit(probe_url).netloc
        label = f"ModelScope {where} ({spec.modelscope[1]})" if kind == "modelscope" and spec.modelscope else where
        if host not in unreachable:
            reason = _probe(probe_url)
            if reason:
                unreachable[host] = reason
        if host in unreachable:
            attempts.append(f"{label}: {unreachable[host]}")
            continue
        try:
            if kind == "modelscope":
                return _fetch_modelscope(spec, folder, progress)
            return _fetch_url(where, spec, folder, progress)
        except _Rejected as exc:
            attempts.append(f"{label}: rejected, {exc}")
        except urllib.error.HTTPError as exc:
            attempts.append(f"{label}: HTTP {exc.code} {exc.reason}")
        except urllib.error.URLError as exc:
            attempts.append(f"{label}: {exc.reason}")
        except ImportError as exc:
            attempts.append(f"{label}: modelscope is not installed ({exc})")
        except Exception as exc:  # network stacks raise many types; report, try the next source
            attempts.append(f"{label}: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    raise _missing_error(spec, folder, looked, "no source could be downloaded", attempts)


# -------------------------------------------------------------------- status


def status(models_dir: str | os.PathLike[str] | None = None) -> list[WeightStatus]:
    """One row per registry entry: present where, verified or why not. No network.

    Hashes each present file once per process (cached while unchanged on disk).
    """
    folder = _folder(models_dir)
    rows: list[WeightStatus] = []
    for spec in REGISTRY.values():
        found, _ = _search(spec, folder)
        expected = folder / spec.filename
        if found is None:
            rows.append(
                WeightStatus(spec.name, spec.filename, spec.kind, False, None, None, spec.size_bytes, "", expected)
            )
            continue
        problem = None
        try:
            verify(found.path, spec, folder)
        except WeightsError as exc:
            problem = str(exc)
        rows.append(
            WeightStatus(
                spec.name,
                spec.filename,
                spec.kind,
                True,
                found.path,
                problem is None,
                found.path.stat().st_size,
                found.location,
                expected,
                problem,
            )
        )
    return rows
