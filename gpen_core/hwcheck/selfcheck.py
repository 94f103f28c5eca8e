"""Does every network of every mode live, and run, on the device you ask for (``selfcheck --device cuda``; CI
runs it on ``meta``)? Each network is built as a request builds it, with synthetic weights; every parameter,
buffer and plain tensor attribute is checked to be on the device (``F.conv2d`` accepts a CPU weight with a
``meta`` input), then one forward runs under a watch naming the first operation that mixes two devices.
"""

from __future__ import annotations

import functools
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from gpen_core.errors import InputError
from gpen_core.modes import MODES
from gpen_core.networks import parsenet, upscaler
from gpen_core.networks.arch import GPEN, make_kernel
from gpen_core.networks.checkpoint import build_from_state_dict
from gpen_core.networks.plan import ForwardPlan, choose_plan, cuda_native_bf16
from gpen_core.networks.prepared import prepare
from gpen_core.networks.synthetic import random_generator
from gpen_core.upscale import tiles
from gpen_core.weights.lookup import REGISTRY


@dataclass(frozen=True)
class Check:
    """One network on one device: ``ok`` or the first problem, naming the tensor."""

    network: str  # "generator GPEN-BFR-512", "detector retinaface-resnet50", ...
    path: str  # the code that built and ran it, e.g. "gpen_core.networks.fast.FastGPEN"
    dtype: str  # compute dtype checked
    ok: bool
    problem: str | None = None


@dataclass(frozen=True)
class SelfCheckReport:
    device: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def first_problem(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "ok": self.ok, "checks": [asdict(c) for c in self.checks]}

    def summary(self) -> str:
        """One sentence for the app's Hardware check."""
        bad = self.first_problem
        if bad is None:
            return f"Set-up check: all {len(self.checks)} networks of every mode are placed on {self.device} and run there."
        failed = sum(not c.ok for c in self.checks)
        return (f"Set-up check FAILED on {self.device}: {failed} of {len(self.checks)} networks; the first: "
                f"{bad.network} ({bad.dtype}): {bad.problem}. Details: `python -m gpen_core selfcheck --device {self.device}`.")

    def table(self) -> str:
        rows = [("network", "dtype", "ok", "problem")]
        rows += [(c.network, c.dtype, "ok" if c.ok else "FAIL", c.problem or "") for c in self.checks]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"selfcheck on {self.device}"]
        lines += ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + ("  " + r[3] if r[3] else "") for r in rows]
        bad = self.first_problem
        lines.append("all ok" if bad is None else f"FAILED: {bad.network} ({bad.dtype}): {bad.problem}")
        return "\n".join(lines)


def resolve_device(device: str | torch.device) -> torch.device:
    """``torch.device`` with a CUDA index filled in; InputError with the fix when it cannot run here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"unknown device {device!r} ({exc}); use cpu, cuda, cuda:N or meta") from None
    if dev.type not in ("cpu", "cuda", "meta"):
        raise InputError(f"device {device!r} is not supported; use cpu, cuda, cuda:N or meta")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                f"no CUDA device is available here (device {device!r} was asked for): check `nvidia-smi` and that "
                "this PyTorch is a CUDA build (`python -m gpen_core info`), or use --device cpu / meta"
            )
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise InputError(f"{device!r}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0")
        dev = torch.device("cuda", index)
    return dev


def named_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, str, torch.Tensor]]:
    """(path, kind, tensor) for every parameter, buffer and plain tensor attribute of a module tree (plain
    attributes matter: ``.to(device)`` does not move them, as facexlib's ``RetinaFace.mean_tensor``)."""
    if not isinstance(obj, nn.Module):
        for attr, v in vars(obj).items():
            if isinstance(v, nn.Module):
                yield from named_tensors(v, f"{prefix}{attr}.")
            elif isinstance(v, torch.Tensor):
                yield f"{prefix}{attr}", "tensor attribute", v
        return
    prefix = prefix.rstrip(".")
    yield from ((name, "parameter", p) for name, p in obj.named_parameters(prefix))
    yield from ((name, "buffer", b) for name, b in obj.named_buffers(prefix))
    for mname, m in obj.named_modules(prefix=prefix):
        for attr, v in vars(m).items():
            if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter):
                yield (f"{mname}.{attr}" if mname else attr), "tensor attribute", v


def misplaced(obj: Any, device: torch.device) -> list[str]:
    """One sentence per tensor of ``obj`` that is not on ``device`` (empty when all are); ``device`` as
    :func:`resolve_device` gives it (a CUDA tensor's device always has its index)."""
    return [
        f"{kind} {path} {tuple(t.shape)} is on {t.device}, expected {device}"
        for path, kind, t in named_tensors(obj)
        if t.device != device
    ]


_TRANSFERS = ("aten.to.", "aten._to_copy.", "aten.copy_.", "aten._copy_from.", "aten._copy_from_and_resize.")


class DeviceMixWatch(TorchDispatchMode):
    """Records the first aten op (not a transfer) whose non-scalar tensor arguments sit on two devices;
    ``names`` (``id(tensor)`` → module path) lets it name the offending weight."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        super().__init__()
        self.names = names or {}
        self.problem: str | None = None
        self.last_op = ""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.last_op = str(func)
        if self.problem is None and not self.last_op.startswith(_TRANSFERS):
            tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor) and a.dim() > 0]
            devices = {str(t.device) for t in tensors}
            if len(devices) > 1:
                odd = _odd_one_out(tensors)
                what = self.names.get(id(odd), f"a {tuple(odd.shape)} {str(odd.dtype).replace('torch.', '')} tensor")
                self.problem = f"{func} mixes devices {sorted(devices)}: {what} is on {odd.device}"
        return func(*args, **kwargs)


def _odd_one_out(tensors: list[torch.Tensor]) -> torch.Tensor:
    counts = Counter(str(t.device) for t in tensors)
    # The input decides the device; a lone weight elsewhere is the culprit. Prefer a named CPU one.
    rare = min(counts, key=lambda d: (counts[d], d != "cpu"))
    return next(t for t in tensors if str(t.device) == rare)


@dataclass(frozen=True)
class _Target:
    network: str
    path: str
    dtype: str
    build: Callable[[torch.device], Any]  # -> the object as a request holds it
    forward: Callable[[Any, torch.device], Any]  # runs one forward; returns what to check (or None)
    expect: Callable[[Any, torch.device], str | None] = lambda out, dev: None  # output check


def _generator_targets(device: torch.device) -> list[_Target]:
    # Which (size model, dtype) pairs the modes run on this kind of device. meta stands for
    # both: every dtype is built, so one CI run covers the CPU and the CUDA paths.
    pairs = {(m.model, dt) for m in MODES.values() for dt in (m.cuda_dtype, m.cpu_dtype)
             if device.type == "meta" or dt == (m.cuda_dtype if device.type == "cuda" else m.cpu_dtype)}
    # The 512 generator in all three dtypes wherever they can run (a user may force any).
    dtypes = ("float32", "bfloat16", "float16")
    pairs |= {("GPEN-BFR-512", dt) for dt in dtypes
              if device.type == "meta" or (device.type == "cuda" and (dt != "bfloat16" or cuda_native_bf16(device)))}
    return [_Target(f"generator {model}", "gpen_core.networks.fast.FastGPEN", dt,
                    lambda dev, model=model, dt=dt: _build_generator(model, dt, dev), _generator_forward,
                    _float32_output)
            for model, dt in sorted(pairs, key=lambda p: (p[0], dtypes.index(p[1])))]


@functools.cache
def _cpu_generator(model: str, random_values: bool) -> Any:
    """The CPU model a request loads before :func:`gpen_core.networks.prepared.prepare` (cached for one run).
    On meta the values never matter: zeros stand in for random weights (much quicker to make), in the real shapes."""
    cfg = REGISTRY[model].arch
    if random_values:
        return random_generator(cfg)
    with torch.device("meta"):
        shapes = GPEN(cfg).state_dict()
    base = make_kernel([1, 3, 3, 1])
    kernel = {k: base * 4 if k.startswith("generator.") else base.clone() for k in shapes if k.endswith(".kernel")}
    return build_from_state_dict({k: kernel[k] if k in kernel else torch.zeros(v.shape) for k, v in shapes.items()})


def _build_generator(model: str, dtype: str, device: torch.device) -> Any:
    meta = device.type == "meta"
    plan = ForwardPlan(device="meta", dtype=dtype) if meta else choose_plan(str(device), dtype)[0]  # type: ignore
    return prepare(_cpu_generator(model, random_values=not meta), plan)


def _generator_forward(forward: Any, device: torch.device) -> Any:
    s = forward.size
    x = torch.empty(1, 3, s, s, device=device) if device.type == "meta" else torch.rand(1, 3, s, s, device=device) * 2 - 1
    return forward(x)


def _float32_output(y: Any, device: torch.device) -> str | None:
    """What is wrong with a network's output (a float32 tensor on ``device``, finite off meta), or None."""
    if not isinstance(y, torch.Tensor):
        return f"the forward returned {type(y).__name__}, not a tensor"
    if y.device != device:
        return f"the output is on {y.device}, expected {device}"
    if y.dtype != torch.float32:
        return f"the output is {y.dtype}, expected {torch.float32}"
    if device.type != "meta" and not bool(torch.isfinite(y).all()):
        return "the output has inf or NaN values"
    return None


def _detector_targets() -> list[_Target]:
    def build(dev: torch.device, network: str) -> Any:
        from gpen_core.faces.detect import FaceDetector

        return FaceDetector(None, network, device=dev)  # type: ignore[arg-type]

    def forward(det: Any, dev: torch.device) -> Any:
        rgb = np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)
        return det.detect(rgb, threshold=0.5, max_side=320)

    def expect(out: Any, dev: torch.device) -> str | None:
        return None if isinstance(out, list) else f"detect returned {type(out).__name__}"

    return [_Target(f"detector retinaface-{network}", "gpen_core.faces.detect.FaceDetector", "float32",
                    lambda dev, network=network: build(dev, network), forward, expect)
            for network in ("mobilenet0.25", "resnet50")]


def _parser_targets() -> list[_Target]:
    def build_masker(dev: torch.device) -> Any:
        from facexlib.parsing.parsenet import ParseNet

        from gpen_core.faces.parse import ParsingMasker

        # The real loading path: a weights file read on the CPU, then moved.
        net = ParseNet(in_size=512, out_size=512, parsing_ch=19)
        with tempfile.TemporaryDirectory(prefix="gpen-selfcheck-") as tmp:
            path = Path(tmp) / "parsing_parsenet.pth"
            torch.save(net.state_dict(), path)
            del net
            return ParsingMasker(path, device=dev)

    def masker_expect(out: Any, dev: torch.device) -> str | None:
        ok = isinstance(out, np.ndarray) and out.shape == (512, 512)
        return None if ok else f"the mask is {getattr(out, 'shape', type(out).__name__)}, expected 512×512"

    grey = np.full((512, 512, 3), 128, np.uint8)
    return [
        _Target("parser parsenet (facexlib)", "gpen_core.faces.parse.ParsingMasker", "float32", build_masker,
                lambda masker, dev: masker(grey), masker_expect),
        _Target("parser ParseNet (GPEN)", "gpen_core.networks.parsenet.FaceParser", "float32",
                lambda dev: parsenet.FaceParser(parsenet.ParseNet().eval(), device=dev),
                lambda parser, dev: parser.logits(grey), _float32_output),
    ]


def _upscaler_targets() -> list[_Target]:
    def expect(out: Any, dev: torch.device) -> str | None:
        img = getattr(out, "image", None)
        return None if isinstance(img, np.ndarray) and img.shape == (64, 64, 3) else "the upscaled image has the wrong shape"

    # Built as load_upscaler builds it: on the CPU, then moved.
    return [_Target("upscaler RealESRNet x2", "gpen_core.upscale.tiles.run_tiles", "float32",
                    lambda dev: upscaler.random_upscaler(upscaler.UpscalerConfig()).to(dev),
                    lambda net, dev: tiles.run_tiles(np.full((32, 32, 3), 128, np.uint8), net, tile=0), expect)]


def check_one(target: _Target, device: torch.device) -> Check:
    """Build, static check, one watched forward, output check; the first problem wins."""
    problem = _first_problem(target, device)
    return Check(target.network, target.path, target.dtype, problem is None, problem)


def _first_problem(target: _Target, device: torch.device) -> str | None:
    try:
        obj = target.build(device)
    except Exception as exc:
        return f"building it failed: {type(exc).__name__}: {str(exc)[:300]}"
    net = getattr(obj, "net", None)
    where = net if isinstance(net, nn.Module) else obj  # the module tree a request holds (a PreparedForward's net)
    bad = misplaced(where, device)
    if bad:
        return bad[0] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
    watch = DeviceMixWatch({id(t): f"{kind} {path}" for path, kind, t in named_tensors(where)})
    try:
        with torch.inference_mode(), watch:
            out = target.forward(obj, device)
    except Exception as exc:
        # On meta a forward stops where it is meant to: at its first copy of data to the host.
        if watch.problem or (device.type == "meta" and "copy out of meta tensor" in str(exc)
                             and watch.last_op.startswith(_TRANSFERS)):
            return watch.problem
        return f"the forward failed: {type(exc).__name__}: {str(exc)[:300]}"
    return watch.problem or target.expect(out, device) or None


def run_selfcheck(device: str | torch.device = "cpu", progress: Callable[[str], None] | None = None) -> SelfCheckReport:
    """Check every network on ``device``; see the module docstring. Raises InputError for a device not here."""
    dev = resolve_device(device)
    checks = []
    try:
        for t in [*_generator_targets(dev), *_detector_targets(), *_parser_targets(), *_upscaler_targets()]:
            if progress is not None:
                progress(f"{t.network} ({t.dtype})")
            checks.append(check_one(t, dev))
    finally:
        _cpu_generator.cache_clear()
    return SelfCheckReport(str(dev), tuple(checks))
