"""The checkpoint registry, one literal table: name → file name, sources, the size and sha256 where published,
and a generator's architecture. Torch-free and network-free."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeVar

from gpen_core.errors import WeightsError
from gpen_core.platform.paths import folder as models_folder, models_dir  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from gpen_core.networks.arch import GPENConfig

Kind = Literal["generator", "detector", "parser", "upscaler"]
_T = TypeVar("_T")


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
    # Release URLs, tried in order; a pinned hash makes extra mirrors safe.
    urls: tuple[str, ...]
    licence: str
    notes: str = ""
    modelscope: tuple[str, str] | None = None  # (model_id, path inside the snapshot) on ModelScope
    size_bytes: int | None = None  # exact file size where published evidence exists; None: unknown
    # sha256 where published evidence exists; None: the hash is recorded in a sidecar on first verification.
    sha256: str | None = None
    # A generator's documented architecture, for synthetic models and sizing (the checkpoint decides at load time).
    arch_params: Arch | None = None
    # Try ModelScope before the URLs (the release URLs of 1024/2048 are reported dead).
    modelscope_first: bool = False

    @property
    def arch(self) -> GPENConfig | None:
        """The documented architecture as a :class:`GPENConfig` (imports torch on first use)."""
        if self.arch_params is None:
            return None
        from gpen_core.networks.arch import GPENConfig

        return GPENConfig(**self.arch_params._asdict())

    def in_download_order(self, url: Callable[[str], _T], modelscope: Callable[[str, str], _T]) -> list[_T]:
        """``url(u)`` for each URL and ``modelscope(model_id, path)``, in the order downloads try them."""
        out = [url(u) for u in self.urls]
        if self.modelscope is not None:
            ms = modelscope(*self.modelscope)
            out = [ms, *out] if self.modelscope_first else [*out, ms]
        return out

    @property
    def pages(self) -> list[str]:
        """Where to download it by hand, in download order."""
        return self.in_download_order(str, lambda mid, rel: f"https://www.modelscope.cn/models/{mid}/files (file {rel})")


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
_RETINAFACE_LICENCE = "MIT (biubug6/Pytorch_Retinaface), distributed by facexlib"


def _gpen(name: str, kind: Kind, *, notes: str, arch: Arch | None = None, modelscope: tuple[str, str] | None = None,
          modelscope_first: bool = False) -> WeightSpec:
    """One of GPEN's own files: ``<name>.pth`` in its OSS folder, under its licence; no published size or sha256."""
    return WeightSpec(name=name, filename=f"{name}.pth", kind=kind, urls=(f"{_OSS}/{name}.pth",), licence=_GPEN_LICENCE,
                      notes=notes, modelscope=modelscope, arch_params=arch, modelscope_first=modelscope_first)


# Where each source, pin and architecture comes from: docs/files-and-limits.md, "Where the registry's entries
# come from".
REGISTRY: dict[str, WeightSpec] = {
    s.name: s
    for s in (
        _gpen("GPEN-BFR-256", "generator", arch=Arch(256, channel_multiplier=1, narrow=0.5),
              notes="256 px faces; the small, fast one (channel_multiplier 1, narrow 0.5)."),
        _gpen("GPEN-BFR-512", "generator", arch=Arch(512),
              modelscope=("iic/cv_gpen_image-portrait-enhancement", "pytorch_model.pt"),
              notes="512 px faces. ModelScope's pytorch_model.pt has the same keys and shapes "
                    "(it may be a different training run from the GitHub release)."),
        _gpen("GPEN-BFR-1024", "generator", arch=Arch(1024), modelscope_first=True,
              modelscope=("iic/cv_gpen_image-portrait-enhancement-hires", "pytorch_model.pt"),
              notes="1024 px faces; published on ModelScope (the OSS link is reported dead)."),
        _gpen("GPEN-BFR-2048", "generator", arch=Arch(2048), modelscope_first=True,
              modelscope=("iic/cv_gpen_image-portrait-enhancement-hires", "pytorch_model-2048.pt"),
              notes="2048 px faces (selfies); published on ModelScope (the OSS file was taken down)."),
        _gpen("GPEN-Colorization-1024", "generator", arch=Arch(1024),
              notes="colorizes grey faces (task colorize; 1024 px; the input's luminance is kept)."),
        _gpen("GPEN-Inpainting-1024", "generator", arch=Arch(1024),
              notes="fills white brush strokes on faces (task inpaint; 1024 px)."),
        _gpen("GPEN-Seg2face-512", "generator", arch=Arch(512),
              notes="a face from a colour label map (task seg2face; aligned 512 px maps; input in [0, 1])."),
        # The second URL is GPEN's copy: accepted only if it hashes to the pinned sha256.
        WeightSpec(name="retinaface-resnet50", filename="detection_Resnet50_Final.pth", kind="detector",
                   urls=(f"{_FACEXLIB}/v0.1.0/detection_Resnet50_Final.pth", f"{_OSS}/RetinaFace-R50.pth"),
                   size_bytes=109497761, sha256="6d1de9c2944f2ccddca5f5e010ea5ae64a39845a86311af6fdf30841b0a5a16d",
                   licence=_RETINAFACE_LICENCE,
                   notes="RetinaFace ResNet-50 face detector, ~105 MB; more accurate, ~10x the cost of mobilenet0.25."),
        WeightSpec(name="retinaface-mobilenet0.25", filename="detection_mobilenet0.25_Final.pth", kind="detector",
                   urls=(f"{_FACEXLIB}/v0.1.0/detection_mobilenet0.25_Final.pth",),
                   size_bytes=1789735, sha256="ed6fa7d45a5179f03cb5ce82c73b0c6711372968e53782e88395acee88d319e1",
                   licence=_RETINAFACE_LICENCE, notes="RetinaFace MobileNet-0.25 face detector, 1.7 MB; fast on CPU."),
        WeightSpec(name="parsenet", filename="parsing_parsenet.pth", kind="parser",
                   urls=(f"{_FACEXLIB}/v0.2.2/parsing_parsenet.pth",),
                   size_bytes=85331193, sha256="3d558d8d0e42c20224f13cf5a29c79eba2d59913419f945545d8cf7b72920de2",
                   licence="distributed by facexlib (ParseNet from PSFR-GAN); check the upstream licence",
                   notes="facexlib's copy of the face-parsing network: the same ParseNet class and key table as "
                         "GPEN's ParseNet-latest.pth (used when that one is absent)."),
        _gpen("ParseNet-latest", "parser",
              notes="GPEN's face-parsing network (official paste mask); optional (GPEN's rectangle mask otherwise)."),
        _gpen("realesrnet_x2", "upscaler",
              modelscope=("iic/cv_gpen_image-portrait-enhancement", "super_resolution/realesrnet_x2.pth"),
              notes="Background upscaler ×2 (RealESRNet, RRDBNet 23 blocks); GPEN's --use_sr default and "
                    "ModelScope's portrait-enhancement background."),
        _gpen("realesrnet_x4", "upscaler",
              notes="Background upscaler ×4 (RealESRNet, RRDBNet 23 blocks); GPEN's --sr_scale 4."),
    )
}


def unpinned_note(name: str) -> str:
    """What every listing (the weights panel, the hardware check, ``info``) says of a present file of ``name`` when
    it has no published sha256; "" when it has one (or is not a registry name). Such a file passes on its size and
    the hash recorded at its first use: any checkpoint of that name (random weights included) would, so
    "verified" would overstate."""
    spec = REGISTRY.get(name)
    return "no published checksum: not verified as the release" if spec is not None and spec.sha256 is None else ""


def modelscope_cache_root() -> Path:
    """ModelScope's cache root as modelscope 1.40 computes it (``$MODELSCOPE_CACHE`` or ``~/.cache/modelscope``)."""
    return Path(os.environ.get("MODELSCOPE_CACHE") or "~/.cache/modelscope").expanduser()


def get_spec(name: str) -> WeightSpec:
    """The registry entry for a name (case-insensitive) or a registry file name."""
    spec = find_spec(name)
    if spec is None:
        raise WeightsError(f"unknown weights {name!r}; known names: {', '.join(REGISTRY)}.")
    return spec


def registry_name(text: str) -> str | None:
    """The registry's spelling of a weights name given in any case ("gpen-bfr-512" → "GPEN-BFR-512"); None for
    anything else, which callers take as a file name or path. Every "name or path?" question asks this."""
    low = text.strip().lower()
    return next((name for name in REGISTRY if name.lower() == low), None)


def find_spec(name: str) -> WeightSpec | None:
    low = name.strip().lower()
    return next((s for s in REGISTRY.values() if low in (s.name.lower(), s.filename.lower())), None)
