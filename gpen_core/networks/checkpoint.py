"""Turn a checkpoint (path or state_dict) into a ready GPEN model; the checkpoint decides the architecture
(size, channel_multiplier, narrow, style_dim and n_mlp are read from shapes and key counts)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from gpen_core.networks.arch import GPEN, GPENConfig
from gpen_core.errors import OutOfMemory, WeightsCorruptError, WeightsError
from gpen_core.platform.meter import format_bytes

# Keys under which training scripts and converters nest the generator's weights.
_WRAPPER_KEYS = ("g_ema", "params_ema", "params", "state_dict", "model", "generator", "netG", "g")
_ECD = re.compile(r"^ecd(\d+)\.")
_STYLE = re.compile(r"^generator\.style\.(\d+)\.weight$")
_MODULE = "module."  # torch.nn.DataParallel's prefix on every key of a model saved through it
_V = TypeVar("_V")


def strip_module_prefix(sd: Mapping[str, _V], where: str = "the checkpoint") -> dict[str, _V]:
    """``sd`` with DataParallel's ``module.`` prefix dropped from every key (the same values); ``module.x`` beside
    ``x``: WeightsError."""
    out = {(k.removeprefix(_MODULE) if isinstance(k, str) else k): v for k, v in sd.items()}
    if len(out) != len(sd):
        both = next(k for k in sd if isinstance(k, str) and k.startswith(_MODULE) and k.removeprefix(_MODULE) in sd)
        raise WeightsError(
            f"{where} holds both {both!r} and {both.removeprefix(_MODULE)!r}, so it is not clear which weights to use. "
            "Re-save the model's own state_dict (model.module.state_dict() for a DataParallel model)."
        )
    return out


def read_network_weights(path: str | os.PathLike[str], network: str, *, missing: str,
                         wrappers: Sequence[str] = ("state_dict",), not_a_dict: str = "") -> dict[str, torch.Tensor]:
    """The float32 state_dict of a helper network's file (read by :func:`read_checkpoint`, raising as it does;
    unwrapped by :func:`unwrap_state_dict` under ``wrappers``); a missing file raises WeightsError ``missing``, one
    holding no state_dict ``not_a_dict`` (default: it does not hold a ``network`` state_dict)."""
    p = Path(path)
    if not p.is_file():
        raise WeightsError(missing)
    obj = read_checkpoint(p, f"{network} weights", mmap=False)
    sd = unwrap_state_dict(obj, str(p), wrappers, not_a_dict or f"{{where}} does not hold a {network} state_dict "
                           "(found {found})")
    return {k: (v.float() if v.is_floating_point() else v) for k, v in sd.items()}


_NOT_GPEN = ("expected a GPEN generator state_dict (a dict of tensors), found {found}. "
             "Use a GPEN-BFR-*.pth file or ModelScope's pytorch_model.pt.")


def unwrap_state_dict(obj: Any, where: str = "the checkpoint", wrappers: Sequence[str] = _WRAPPER_KEYS,
                      not_a_dict: str = _NOT_GPEN) -> dict[str, torch.Tensor]:
    """The flat state_dict inside ``obj``: plain, nested under the first of ``wrappers`` holding a dict (up to four
    deep), with ``module.`` prefixes dropped and what is not a tensor left out; none (no tensor): WeightsError
    ``not_a_dict`` with ``{where}`` and ``{found}`` filled in."""
    for _ in range(4):  # wrappers inside wrappers, up to four deep
        if not isinstance(obj, Mapping) or (obj and all(isinstance(v, torch.Tensor) for v in obj.values())):
            break
        inner = next((obj[k] for k in wrappers if isinstance(obj.get(k), Mapping)), None)
        if inner is None:
            break
        obj = inner
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)} if isinstance(obj, Mapping) else {}
    if not tensors:
        raise WeightsError(not_a_dict.format(where=where, found=type(obj).__name__))
    return strip_module_prefix(tensors, where)


def shape_problems(sd: Mapping[str, torch.Tensor], ndims: Mapping[str, int]) -> str:
    """What is wrong with the tensors an architecture is read from: each of ``ndims`` present in ``sd`` needs that
    many dimensions, none of them empty (a damaged file would raise IndexError or divide by zero); "" if nothing."""
    return "; ".join(f"{k} has shape {tuple(sd[k].shape)}, not {n} non-empty dimensions" for k, n in ndims.items()
                     if k in sd and (sd[k].ndim != n or 0 in sd[k].shape))


# The tensors infer_config reads the architecture from, and their dimensions.
_READ_SHAPES = {"generator.input.input": 4, "generator.style.1.weight": 2, "generator.convs.6.conv.weight": 5}


def infer_config(sd: Mapping[str, torch.Tensor]) -> GPENConfig:
    """Read the architecture off the state_dict; raise WeightsError if it is not GPEN."""
    required = ("generator.input.input", "generator.style.1.weight", "ecd0.0.0.weight", "final_linear.0.weight")
    missing = [k for k in required if k not in sd]
    if missing:
        sample = ", ".join(list(sd)[:4])
        raise WeightsError("this checkpoint is not a GPEN generator (FullGenerator): expected keys such as "
                           f"{', '.join(missing)}; found {len(sd)} keys like {sample or 'nothing'}. "
                           "Use one of GPEN-BFR-256/512/1024/2048.pth or ModelScope's "
                           "iic/cv_gpen_image-portrait-enhancement pytorch_model.pt.")
    if bad := shape_problems(sd, _READ_SHAPES):
        raise WeightsError(f"this checkpoint is not a GPEN generator: {bad}. The file may be damaged or from another "
                           "network; use one of GPEN-BFR-256/512/1024/2048.pth.")
    n_ecd = len({int(m.group(1)) for k in sd if (m := _ECD.match(k))})
    size = 2 ** (n_ecd + 1)
    n_mlp = len([k for k in sd if _STYLE.match(k)])
    style_dim = int(sd["generator.style.1.weight"].shape[0])
    ch4 = int(sd["generator.input.input"].shape[1])
    narrow = ch4 / 512
    # convs.6 is the first conv at 64 px (none below); its width is 256 * channel_multiplier * narrow.
    conv64 = sd.get("generator.convs.6.conv.weight")
    cm = 2 if conv64 is None else max(1, round(int(conv64.shape[1]) / (256 * narrow)))
    return GPENConfig(size=size, style_dim=style_dim, n_mlp=n_mlp, channel_multiplier=cm, narrow=narrow)


def state_dict_problems(model: torch.nn.Module, sd: Mapping[str, torch.Tensor]) -> str:
    """How ``sd``'s keys and shapes differ from ``model``'s (the first five, and how many more); "" when they match,
    so a strict load cannot fail."""
    expected = model.state_dict()
    problems: list[str] = []
    for k, v in expected.items():
        if k not in sd:
            problems.append(f"missing {k} {tuple(v.shape)}")
        elif tuple(sd[k].shape) != tuple(v.shape):
            problems.append(f"{k}: expected {tuple(v.shape)}, found {tuple(sd[k].shape)}")
    problems += [f"unexpected {k}" for k in sd if k not in expected]
    more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
    return "; ".join(problems[:5]) + more


def build_from_state_dict(obj: Any) -> GPEN:
    """The float32 model that ``obj`` describes, loaded strictly, in eval mode."""
    sd = unwrap_state_dict(obj)
    cfg = infer_config(sd)
    with torch.device("meta"):
        model = GPEN(cfg)
    if problems := state_dict_problems(model, sd):
        raise WeightsError(f"checkpoint looks like GPEN {cfg.size} px (channel_multiplier {cfg.channel_multiplier}, "
                           f"narrow {cfg.narrow:g}) but does not match that architecture: {problems}. The file may "
                           "be truncated or from another network.")
    # assign=True keeps the loaded tensors (mmap-backed when loaded with mmap) instead of copying.
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd.items()}, strict=True, assign=True)
    return model.eval().requires_grad_(False)


_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default format since PyTorch 1.6
_DOWNLOAD_FIX = "Delete it and download it again (`python -m gpen_core download`), or copy it again."
# For a file the user named: we did not make it, so never "delete it"; what to check instead.
_OWN_FIX = ("Check that the path names a GPEN generator checkpoint (a GPEN-BFR-*.pth file, or a state_dict saved from "
            "one) and that its download or copy finished.")


def for_own_file(exc: WeightsError) -> WeightsError:
    """``exc`` as said of a checkpoint the user named by path (``--model``, the app's Generator field): what the
    file is not and what to check, without the download advice meant for the models folder's own files."""
    if _DOWNLOAD_FIX not in str(exc):
        return exc
    return type(exc)(str(exc).replace(_DOWNLOAD_FIX, _OWN_FIX), details=exc.details)


def read_checkpoint(path: str | os.PathLike[str], what: str = "checkpoint", *, mmap: bool = True) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True)`` (``mmap``: a ZIP checkpoint mapped), its failures
    told apart: WeightsCorruptError only when the bytes are wrong, OutOfMemory (the file is fine: never tell the user
    to delete it), else WeightsError. ``what`` names the file in messages."""
    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"{what} file {p} does not exist. Check the path, or run `python -m gpen_core download`.")
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise WeightsError(
            f"cannot read {what} file {p}: {exc.strerror or exc}. Check its permissions "
            "(the user running this needs read access), or point to another copy."
        ) from None
    if size == 0:
        raise WeightsError(f"{what} file {p} is empty (0 bytes): an interrupted download or copy. {_DOWNLOAD_FIX}")
    from gpen_core.platform.oom import is_oom

    try:
        try:
            return torch.load(p, map_location="cpu", weights_only=True, mmap=mmap and head.startswith(_ZIP_MAGIC))
        except Exception as exc:  # noqa: BLE001 - classified below
            if is_oom(exc) or not (mmap and head.startswith(_ZIP_MAGIC)):
                raise
            # mmap refused (some file systems): read it instead.
            return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for bad files
        if is_oom(exc):
            raise OutOfMemory(
                f"not enough memory to load the {what} {p.name} ({format_bytes(size)}): {_first_line(exc)}. "
                "The file is fine; close other programs or use a lighter mode (low)."
            ) from None
        raise _unreadable(p, what, head, exc) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0][:200]}" if text else exc.__class__.__name__


def _unreadable(p: Path, what: str, head: bytes, exc: BaseException) -> WeightsError:
    """The error for a file torch.load refused, after looking at its bytes."""
    import pickle

    detail = _first_line(exc)
    is_zip, is_pickle = head.startswith(_ZIP_MAGIC), head.startswith(b"\x80")  # legacy torch.save: a pickle
    if not (is_zip or is_pickle):
        return WeightsError(
            # Never quote its bytes: through a link the "checkpoint" can be any file on the server.
            f"the {what} file {p} is not a PyTorch checkpoint (neither torch.save's ZIP format nor a legacy "
            f"pickle). {_DOWNLOAD_FIX}"
        )
    if isinstance(exc, pickle.UnpicklingError) and "weights only" in str(exc).lower():
        return WeightsError(
            f"refused to load the {what} {p}: it holds Python objects besides tensors, which could run code "
            "when loaded. Use the released file, or re-save only its state_dict."
        )
    if is_zip:
        bad = _zip_problem(p)
        if bad is None:  # the bytes check out: not corruption, so do not say it is
            return WeightsError(
                f"cannot load the {what} {p} ({detail}); its bytes are intact, so it is not a checkpoint this "
                "PyTorch can read. Use a GPEN-BFR-*.pth file, or update PyTorch."
            )
        return WeightsCorruptError(f"the {what} file {p} is corrupt or incomplete ({bad}). {_DOWNLOAD_FIX}")
    # A legacy pickle cannot be checked further than "it did not load".
    return WeightsCorruptError(f"the {what} file {p} is corrupt or incomplete ({detail}). {_DOWNLOAD_FIX}")


def _zip_problem(p: Path) -> str | None:
    """Why a ZIP checkpoint's bytes are wrong (truncated, bad directory, CRC mismatch), or None."""
    import zipfile

    try:
        with zipfile.ZipFile(p) as zf:
            name = zf.testzip()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        return f"not a complete ZIP archive: {exc}"
    except MemoryError:
        return "its bytes could not be checked (out of memory)"
    return f"{name} fails its CRC check" if name else None


def load_generator(source: str | os.PathLike[str] | Mapping[str, Any]) -> GPEN:
    """The float32 GPEN generator ``source`` (a checkpoint path, memory-mapped, or a possibly wrapped state_dict)
    describes, on the CPU in eval mode without gradients; WeightsError for a missing, unreadable or non-GPEN file."""
    sd = source if isinstance(source, Mapping) else read_checkpoint(source, "GPEN generator")
    return build_from_state_dict(sd)
