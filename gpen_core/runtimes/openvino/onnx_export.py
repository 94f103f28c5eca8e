"""Export a GPEN generator for other tools (``python -m gpen_core export``) as ONNX or OpenVINO IR (contract:
docs/export.md). Every export is run by OpenVINO once written; one further than :data:`TOLERANCE` from torch fails.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from gpen_core.errors import GPENError, InputError, WeightsError
from gpen_core.platform import durable

ExportFormat = Literal["onnx", "openvino"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)
# ONNX opset 17: read by every current runtime (onnxruntime ≥ 1.11, OpenVINO, TensorRT 8.5+), has every op used.
OPSET = 17
# Largest |OpenVINO − torch| accepted on the check face, float32 both sides (GPEN-BFR-512 measured 1.4e-6).
TOLERANCE = 1e-3
_ONNX_MISSING = "exporting ONNX needs the onnx package: `pip install onnx==1.23.2` (requirements-dev.txt pins it), then run the export again"


@dataclass(frozen=True)
class ExportReport:
    """What was written and how close it runs to the torch model."""

    path: Path  # the file written (.onnx, or the IR's .xml with its .bin beside it)
    format: str  # "onnx" or "openvino"
    source: str  # the registry name or checkpoint path asked for
    size: int  # S of the fixed 1×3×S×S input and output
    opset: int | None  # the ONNX opset (None for OpenVINO IR)
    max_abs_diff: float  # OpenVINO running the written file vs torch, same float32 input
    seconds: float  # export + check

    def summary(self) -> str:
        what = f"ONNX opset {self.opset}" if self.format == "onnx" else "OpenVINO IR (float32 weights)"
        return (f"wrote {self.path} ({what}): input 'input' float32 1×3×{self.size}×{self.size} RGB in [-1, 1], "
                f"output 'output' the same shape; checked with OpenVINO against torch: max |difference| "
                f"{self.max_abs_diff:.2e} (in {self.seconds:.1f} s)")


def _checkpoint(model: str, models_dir: str | os.PathLike[str] | None) -> Path:
    """The checkpoint file of a registry generator name, or an existing checkpoint path."""
    from gpen_core.weights import lookup

    spec = lookup.REGISTRY.get(lookup.registry_name(model) or "")
    if spec is not None and spec.kind != "generator":
        gens = ", ".join(n for n, s in lookup.REGISTRY.items() if s.kind == "generator")
        raise InputError(f"{spec.name} is a {spec.kind}, not a GPEN generator; export one of: {gens}, or a checkpoint path")
    return lookup.resolve(model, models_dir=models_dir, allow_download=False)


def export_generator(model: str, output: str | os.PathLike[str], *, fmt: ExportFormat = "onnx",
                     models_dir: str | os.PathLike[str] | None = None, opset: int = OPSET,
                     progress: Callable[[str], None] | None = None, overwrite: bool = False) -> ExportReport:
    """Write ``model`` (a registry generator name or a checkpoint path) to ``output`` as ``fmt`` and check it.
    InputError for a bad format, name or output, WeightsError for a missing or broken checkpoint, GPENError for a
    missing package or a file that does not reproduce the torch output. An existing output (or the IR's .bin) is
    InputError unless ``overwrite``: it may be a file of the user's."""
    import warnings

    import numpy as np
    import torch

    from gpen_core.networks.checkpoint import for_own_file, load_generator
    from gpen_core.runtimes.openvino.export import exportable
    from gpen_core.weights.registry import registry_name

    say = progress or (lambda m: None)
    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    out = Path(output).expanduser()
    want = ".onnx" if fmt == "onnx" else ".xml"
    if out.suffix.lower() != want:
        raise InputError(f"the {fmt} export writes a {want} file; name the output like {out.with_suffix(want).name}")
    _check_output(out, fmt, overwrite)
    _check_packages(fmt)
    t0 = time.perf_counter()
    path = _checkpoint(model, models_dir)
    say(f"loading {path}")
    try:
        net = load_generator(path)
    except WeightsError as exc:  # a path the user named: what to check, never "delete it"
        if registry_name(model) is not None:
            raise
        raise for_own_file(exc) from None
    size = net.config.size
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        reference = net(x).numpy()
        net = exportable(net)
    clean_stale_partials(out.parent)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}{_PARTIAL}{want}")
    say(f"exporting the {size} px generator to {fmt}")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and legacy-exporter warnings: static shapes are intended
            if fmt == "onnx":
                torch.onnx.export(net, (x,), str(tmp), dynamo=False, opset_version=opset,
                                  input_names=["input"], output_names=["output"], do_constant_folding=True)
                import onnx

                onnx.checker.check_model(str(tmp))  # the ONNX spec's own validity check
            else:
                import openvino as ov

                from gpen_core.runtimes.openvino.generator import to_openvino

                ov_model = to_openvino(net, size)  # the engine's conversion: traced once, without torch's trace check
                ov_model.inputs[0].set_names({"input"})
                ov_model.outputs[0].set_names({"output"})
                ov.save_model(ov_model, str(tmp), compress_to_fp16=False)
        del net
        say("checking the written file with OpenVINO")
        diff = _max_diff(tmp, x.numpy(), reference)
        if not np.isfinite(diff) or diff > TOLERANCE:
            raise GPENError(
                f"the exported {fmt} file does not reproduce the model (max |difference| {diff:.2e} > {TOLERANCE:g}); "
                "nothing was written. Report this with the checkpoint's name."
            )
        # Not flushed: one command makes it again. Its temporary keeps the suffix OpenVINO names the .bin after.
        durable.install(tmp, out, sync=False)
        if fmt == "openvino":
            durable.install(tmp.with_suffix(".bin"), out.with_suffix(".bin"), sync=False)
    finally:
        for leftover in (tmp, tmp.with_suffix(".bin")):
            leftover.unlink(missing_ok=True)
    return ExportReport(out, fmt, model, size, opset if fmt == "onnx" else None, diff, time.perf_counter() - t0)


_PARTIAL = ".partial"


def _check_packages(fmt: str) -> None:
    """Raise :class:`GPENError` when OpenVINO (the check runs the file with it) or, for ONNX, ``onnx`` is missing."""
    from gpen_core.runtimes.openvino.base import unavailable_reason

    if why := unavailable_reason():
        raise GPENError(f"cannot check the export: {why}")
    if fmt == "onnx":
        try:
            import onnx  # noqa: F401  (torch.onnx.export writes through it)
        except ImportError:
            raise GPENError(_ONNX_MISSING) from None


def _check_output(out: Path, fmt: str, overwrite: bool = False) -> None:
    """InputError, before any work, for an output the export could not write (or must not replace); creates the
    output's folder."""
    import tempfile

    targets = [out] + ([out.with_suffix(".bin")] if fmt == "openvino" else [])
    for t in targets:
        if t.is_dir():
            raise InputError(f"the output {t} is a folder; name a file to write, like {t / out.name}")
        if not overwrite and (t.exists() or t.is_symlink()):
            raise InputError(f"{t} exists; add --overwrite to replace it, or name another output")
    parent = out.parent
    blocker = next((p for p in (parent, *parent.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise InputError(f"cannot write {out}: {blocker} is a file, not a folder; choose another output path")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{out.stem}.{os.getpid()}.probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"cannot write in {parent} ({exc.strerror or exc.__class__.__name__}); "
                         "choose a writable folder for the output") from None


def clean_stale_partials(folder: Path) -> list[Path]:
    """Remove the ``.<name>.<pid>.partial.*`` files that killed exports left in ``folder``; what went."""
    from gpen_core.runtimes.openvino.base import abandoned

    removed = []
    for p in folder.glob(f".*{_PARTIAL}.*"):
        stem, _, suffix = p.name.rpartition(_PARTIAL)
        pid_text = stem.rsplit(".", 1)[-1]
        if suffix not in (".onnx", ".xml", ".bin") or not pid_text.isdigit() or p.is_symlink() or not p.is_file():
            continue
        if abandoned(p, pid_text):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _max_diff(path: Path, x, reference) -> float:
    """max |OpenVINO(path)(x) − reference|, compiled in float32 (bfloat16 would measure the CPU, not the file)."""
    import numpy as np

    from gpen_core.runtimes.openvino.base import get_core

    compiled = get_core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    y = compiled(x)[compiled.outputs[0]]
    return float(np.abs(np.asarray(y, dtype=np.float64) - reference).max())
