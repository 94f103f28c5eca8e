"""The three torchvision pieces facexlib's RetinaFace needs, without torchvision's import (``torch._dynamo`` and
triton: 133-140 MB of RSS in every process that restores a photo). Within :func:`for_facexlib`, *this thread's*
``import torchvision...`` gets stand-ins through a wrapped ``builtins.__import__`` (never ``sys.modules``, which
every thread would see), computing what torchvision 0.29 does (same module tree and keys, same greedy NMS)."""

from __future__ import annotations

import builtins
import contextlib
import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Iterator

import torch
from torch import nn

from gpen_core.compat.versions import check_version

_LOCK = threading.RLock()
# The facexlib releases whose torchvision imports these stand-ins were written for.
FACEXLIB_VERSIONS = ((0, 3), (0, 4))
# Exactly what facexlib 0.3 imports from torchvision (module -> names it takes).
FACEXLIB_NEEDS = {"torchvision.models._utils": ("IntermediateLayerGetter",), "torchvision.models": ("resnet50",),
                  "torchvision.ops": ("nms",)}


class IntermediateLayerGetter(nn.ModuleDict):
    """torchvision's: the children up to the last in ``return_layers``; ``forward`` gives {new_name: activation}."""

    _version = 2

    def __init__(self, model: nn.Module, return_layers: dict[str, str]) -> None:
        if not set(return_layers).issubset([name for name, _ in model.named_children()]):
            raise ValueError("return_layers are not present in model")
        remaining = {str(k): str(v) for k, v in return_layers.items()}
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        for name, module in model.named_children():
            layers[name] = module
            remaining.pop(name, None)
            if not remaining:
                break
        super().__init__(layers)
        self.return_layers = return_layers

    def forward(self, x: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        out: OrderedDict[str, torch.Tensor] = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


class Bottleneck(nn.Module):
    """torchvision's ResNet V1.5 bottleneck (stride on the 3×3 conv)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn3(self.conv3(out))
        out += identity  # in place: no second activation-sized tensor per block (the detector runs per frame)
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision's ResNet with Bottleneck blocks, through ``layer4``: same children, order and keys. Its pooled
    classifier is left out, as facexlib's :class:`IntermediateLayerGetter` drops it (the stand-in never runs whole)."""

    def __init__(self, layers: list[int]) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
            setattr(self, f"layer{i + 1}", self._make_layer(planes, blocks, stride=1 if i == 0 else 2))
        # torchvision's initialisation (facexlib loads every weight), so the stand-in is the same model unloaded too
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)


def resnet50(*, pretrained: bool = False, weights: object = None, progress: bool = True, **kwargs: object) -> ResNet:
    """An untrained ResNet-50 backbone (facexlib loads the detector's weights); refuses ImageNet weights (a download)."""
    if pretrained or weights is not None:
        raise ValueError("the torchvision stand-in builds untrained networks only; import torchvision for pretrained weights")
    if kwargs:
        raise TypeError(f"unsupported resnet50 arguments in the torchvision stand-in: {sorted(kwargs)}")
    return ResNet([3, 4, 6, 3])


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision.ops.nms on the CPU: int64 indices of the kept boxes, highest score first, with its CPU kernel's
    arithmetic (IoU in the boxes' dtype, stable descending sort), so the same boxes survive."""
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    boxes = boxes.detach().cpu()
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = torch.sort(scores.detach().cpu(), stable=True, dim=0, descending=True).indices
    x1, y1, x2, y2, areas = x1[order], y1[order], x2[order], y2[order], areas[order]
    n = int(order.numel())
    suppressed = torch.zeros(n, dtype=torch.bool)
    keep: list[int] = []
    for i in range(n):
        if suppressed[i]:
            continue
        keep.append(i)
        xx1 = torch.maximum(x1[i], x1[i + 1 :])
        yy1 = torch.maximum(y1[i], y1[i + 1 :])
        xx2 = torch.minimum(x2[i], x2[i + 1 :])
        yy2 = torch.minimum(y2[i], y2[i + 1 :])
        inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
        iou = inter / (areas[i] + areas[i + 1 :] - inter)
        suppressed[i + 1 :] |= iou > iou_threshold
    return order[torch.tensor(keep, dtype=torch.int64)]


def _modules() -> dict[str, types.ModuleType]:
    """The stand-in modules by name: each holds its :data:`FACEXLIB_NEEDS` names and its submodules, as torchvision's."""
    mods = {name: types.ModuleType(name) for name in ("torchvision", *FACEXLIB_NEEDS)}
    for name, module in mods.items():
        module.__path__ = []  # type: ignore[attr-defined]  # a package: `import torchvision.models` resolves
        module.__gpen_tv_shim__ = True  # type: ignore[attr-defined]
        for attr in FACEXLIB_NEEDS.get(name, ()):
            setattr(module, attr, globals()[attr])
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, module)
    mods["torchvision"].__doc__ = "gpen_core.compat.torchvision stand-in (IntermediateLayerGetter, resnet50, ops.nms only)"
    return mods


def is_shim(module: object) -> bool:
    """True for the stand-in modules (tests and diagnostics)."""
    return bool(getattr(module, "__gpen_tv_shim__", False))


def _scoped_import(stubs: dict[str, types.ModuleType], owner: int, wrapped: object, open_: list[bool]) -> object:
    """A ``builtins.__import__`` that gives ``owner``'s absolute torchvision imports the stand-ins
    while ``open_[0]`` (cleared when the block ends, in case another wrapper keeps this one in its chain)."""

    def scoped(name: str, globals: object = None, locals: object = None, fromlist: object = (), level: int = 0) -> object:
        if open_[0] and level == 0 and (name == "torchvision" or name.startswith("torchvision.")) and threading.get_ident() == owner:
            if name not in stubs:
                raise ModuleNotFoundError(f"No module named {name!r} (the torchvision stand-in has "
                                          f"{', '.join(sorted(stubs))} only)", name=name)
            return stubs[name] if fromlist else stubs["torchvision"]
        return wrapped(name, globals, locals, fromlist, level)  # type: ignore[operator]

    scoped.__gpen_tv_shim__ = True  # type: ignore[attr-defined]
    return scoped


@contextlib.contextmanager
def for_facexlib() -> Iterator[bool]:
    """Within the block, this thread's ``import torchvision...`` finds the stand-ins; yields whether they were used
    (not when torchvision is already imported). Other threads get the real package; one block at a time."""
    with _LOCK:
        if "torchvision" in sys.modules:
            yield False
            return
        if getattr(builtins.__import__, "__gpen_tv_shim__", False):  # re-entered from the same thread
            yield True
            return
        check_version("facexlib", FACEXLIB_VERSIONS, "the torchvision stand-ins of gpen_core.compat.torchvision")
        wrapped, open_ = builtins.__import__, [True]
        scoped = _scoped_import(_modules(), threading.get_ident(), wrapped, open_)
        builtins.__import__ = scoped  # type: ignore[assignment]
        try:
            yield True
        finally:
            open_[0] = False
            if builtins.__import__ is scoped:  # another library may have wrapped it meanwhile: then leave theirs
                builtins.__import__ = wrapped  # type: ignore[assignment]
