"""The JSON record of one restore: the CLI's ``--json`` lines, the app's raw measurements, Ray's manifest.

Its own module so every front end (cli, ui_format, ray_batch, ray_serve) can build
it without importing another front end.
"""

from __future__ import annotations

from typing import Any


def result_record(result: Any) -> dict[str, Any]:
    """The JSON-able summary of a RestoreResult (CLI --json, benchmarks, the API)."""
    p = result.peaks
    return {
        "task": getattr(result, "task", "enhance"),
        "faces": len(result.faces),
        "mode": result.mode.name,
        "requested_mode": result.requested_mode,
        "mode_reason": result.mode_reason,
        "checkpoint": result.checkpoint,
        "detector": result.detector,
        "device": result.device,
        "dtype": result.dtype,
        "backend": getattr(result, "backend", "torch"),
        "backend_reason": getattr(result, "backend_reason", ""),
        # Every network the request ran: its runtime ("torch" / "openvino") and why.
        "runtimes": [
            {"network": r.network, "name": r.name, "runtime": r.runtime, "reason": r.reason}
            for r in getattr(result, "runtimes", ())
        ],
        # Resident networks released before the request because its mode does not use them.
        "released": list(getattr(result, "released", ())),
        "format": result.output_format,
        "input_size": list(result.input_size),
        "processed_size": list(result.processed_size),
        "peaks": {
            "rss_bytes": p.rss_bytes,
            "baseline_rss_bytes": p.baseline_rss_bytes,
            "vram_bytes": p.vram_allocated_bytes,
            "vram_reserved_bytes": p.vram_reserved_bytes,
            "vram_device": p.vram_device,
            "method": p.method,
            "shared": p.shared,  # None, or why the peak includes concurrent work
        },
        "timings": {"total_s": round(result.timings.total_s, 4), **{f"{k}_s": round(v, 4) for k, v in result.timings.stages().items()}},
        "notes": list(result.notes),
        # Each try of the request with its own peak (more than one when it ran out of memory and stepped down).
        "attempts": [
            {"mode": a.mode, "outcome": a.outcome, "rss_bytes": a.peaks.rss_bytes, "vram_reserved_bytes": a.peaks.vram_reserved_bytes}
            for a in getattr(result, "attempts", ())
        ],
        # Background upscaling: factor, upscaler, tiles and the stage's seconds; None when not asked.
        "upscale": _upscale_record(getattr(result, "upscale", None)),
    }


def _upscale_record(up: Any) -> dict[str, Any] | None:
    if up is None:
        return None
    return {
        "factor": up.factor,
        "upscaler": up.upscaler,
        "tile": up.tile,
        "pad": up.pad,
        "tiles": up.tiles,
        "seconds": round(up.seconds, 4),
        "dtype": up.dtype,
    }
