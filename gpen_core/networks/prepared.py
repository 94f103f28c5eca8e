""":func:`prepare` turns a GPEN into a :class:`PreparedForward` (eager or compiled); :func:`forward_checked` redoes
an overflowed face in float32."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import torch

from gpen_core.networks.arch import GPEN
from gpen_core.networks.fast import FastGPEN
from gpen_core.networks.plan import ForwardPlan


class PreparedForward:
    """``forward(x) -> y`` under inference mode, one face at a time: ``x`` N×3×S×S float in [-1, 1] RGB (any dtype,
    any device), ``y`` float32 on ``plan.device``. A call while another thread compiles runs eagerly."""

    def __init__(self, net: FastGPEN, plan: ForwardPlan) -> None:
        self.net, self.plan, self.size = net, plan, net.size
        self._compiled: Callable[[torch.Tensor], torch.Tensor] | None = _compile(net) if plan.compile else None
        self.compiled = False  # True once the compiled version has run (never without ``plan.compile``)
        self._lock = threading.Lock()
        self._twin: PreparedForward | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        s = self.net.size
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] != s or x.shape[3] != s:
            raise ValueError(f"expected an N×3×{s}×{s} tensor for this {s} px GPEN, got {tuple(x.shape)}")
        with torch.inference_mode():
            if x.shape[0] == 1:
                return self._one(x)
            return torch.cat([self._one(x[i : i + 1]) for i in range(x.shape[0])])

    def _one(self, x: torch.Tensor) -> torch.Tensor:
        if self._compiled is not None:
            # Always a fresh inference tensor in the plan's layout: the compiled graph is
            # guarded on such properties and would recompile for a caller's plain tensor.
            x = x.to(device=self.plan.device, dtype=self.plan.dtype_torch, copy=True)
            x = x.contiguous(memory_format=self.net.memory_format)
            if self.compiled:
                return self._compiled(x)
            # Compile on this call unless another call is compiling right now (then stay eager).
            if self._lock.acquire(blocking=False):
                try:
                    out = self._compiled(x)
                    self.compiled = True
                    return out
                finally:
                    self._lock.release()
        return self.net(x)

    def float32_twin(self) -> "PreparedForward":
        """This network with every weight cast up to float32 (exact casts), eager, for :func:`forward_checked`;
        built on the first overflow and kept, so faces that overflow one after another share one copy."""
        if self._twin is not None:
            return self._twin
        import copy
        from dataclasses import replace

        with self._lock:
            if self._twin is None:
                # Packed (oneDNN-layout) weights cannot be deep-copied: the copy gets their dense values.
                memo = {id(t): t.to_dense() for t in self.net.buffers() if t.layout == torch._mkldnn}
                net = copy.deepcopy(self.net, memo).float()
                plan = replace(self.plan, dtype="float32", compile=False)
                self._twin = PreparedForward(net, plan)
        return self._twin

    @property
    def twin_bytes(self) -> int:
        """Bytes the float32 twin holds (parameters and buffers); 0 while none was built."""
        if self._twin is None:
            return 0
        net = self._twin.net
        return sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))


def forward_checked(forward: PreparedForward, x: torch.Tensor) -> tuple[torch.Tensor, str | None]:
    """``forward(x)`` checked for inf/NaN: (output, None) or (output, what happened). An overflowed float16 face is
    redone in float32 (exact casts); a float32 output with inf/NaN comes with its note, never silently."""
    y = forward(x)
    if bool(torch.isfinite(y).all()):
        return y, None
    if isinstance(forward, PreparedForward) and forward.plan.dtype != "float32":
        y = forward.float32_twin()(x.float())
        if bool(torch.isfinite(y).all()):
            return y, f"{forward.plan.dtype} overflowed on the face (inf/NaN in its output): redone in float32"
    return y, "the restored face has inf or NaN values even in float32: the checkpoint may be corrupt; re-download it"


def _compile(net: FastGPEN) -> Callable[[torch.Tensor], torch.Tensor]:
    """torch.compile of the one-face forward (batch sizes never recompile), inductor's caches in ``<models
    folder>/torch_compile`` unless the user set ``TORCHINDUCTOR_CACHE_DIR`` (torch sets its /tmp default on import,
    but reads it on every cache access)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from gpen_core.platform.paths import models_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not current or os.path.abspath(current) == os.path.abspath(default_cache_dir()):
        target = models_dir() / "torch_compile"
        target.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(target)
    return torch.compile(net.forward, dynamic=False)


def prepare(model: GPEN, plan: ForwardPlan) -> PreparedForward:
    """The optimized forward of ``model`` under ``plan`` (a :class:`PreparedForward`); ``model`` is left as it is."""
    if not isinstance(model, GPEN):
        raise TypeError(f"prepare() needs a gpen_core.networks.arch.GPEN, got {type(model).__name__}")
    with torch.no_grad():
        net = FastGPEN(model, plan).eval().requires_grad_(False)
    return PreparedForward(net, plan)

