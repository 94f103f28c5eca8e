"""The JSON record of one restore: the CLI's ``--json`` lines, the app's raw measurements, Ray's manifest."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from gpen_core.modes import IDENTITY_THRESHOLD, IDENTITY_THRESHOLD_MEANING


def result_record(result: Any) -> dict[str, Any]:
    """The JSON-able summary of a RestoreResult (CLI --json, benchmarks, the API)."""
    up = result.upscale
    return {
        "task": result.task,
        "faces": len(result.faces),
        "mode": result.mode.name,
        **{k: getattr(result, k) for k in ("requested_mode", "mode_reason", "checkpoint", "detector", "device", "dtype",
                                           "backend", "backend_reason")},
        "runtimes": [asdict(r) for r in result.runtimes],
        "released": list(result.released),
        "format": result.output_format,
        "input_size": list(result.input_size),
        "processed_size": list(result.processed_size),
        "peaks": peaks_record(result.peaks),
        "timings": {"total_s": round(result.timings.total_s, 4), **{f"{k}_s": round(v, 4) for k, v in result.timings.stages().items()}},
        "notes": list(result.notes),
        "attempts": [{"mode": a.mode, "outcome": a.outcome, "rss_bytes": a.peaks.rss_bytes,
                      "vram_reserved_bytes": a.peaks.vram_reserved_bytes} for a in result.attempts],
        "upscale": None if up is None else {**asdict(up), "seconds": round(up.seconds, 4)},
        # Per face, in the order of ``faces``: dlib's descriptor distance between the aligned input
        # face and its restoration, and what was pasted; None where the check did not run.
        "identity": identity_record(result.faces),
    }


# Why an output already there stops a photo's restore, and what to do: said once a run on the command line.
NOT_REPLACED = ("(an earlier result of this file or of another named like it, or a file of yours) and is never replaced "
                "unasked: give another -o, or add --overwrite to replace it")


def skipped_record(shown: str, existing: Any) -> dict[str, Any]:
    """The record of the input ``shown`` not restored because a file is at its output ``existing`` (no --overwrite).
    An output is named after its input alone (a rerun finds its results), so it may be another input's of that name."""
    note = f"{existing} is already there {NOT_REPLACED}"
    return {"input": shown, "status": "skipped", "output": str(existing), "note": note, "peaks": None, "timings": None}


def passed_over_record(shown: str, why: str) -> dict[str, Any]:
    """The record of a folder's entry that is no photo or video to restore (a subfolder, a text file), and why."""
    return {"input": shown, "status": "skipped", "note": why, "peaks": None, "timings": None}


def peaks_record(p: Any) -> dict[str, Any]:
    """A call's Peaks as JSON. ``vram_bytes`` is torch's max allocated (its old key); "peak VRAM" as shown is
    ``vram_reserved_bytes``."""
    return {
        "rss_bytes": p.rss_bytes,
        "baseline_rss_bytes": p.baseline_rss_bytes,
        "vram_bytes": p.vram_allocated_bytes,
        "vram_reserved_bytes": p.vram_reserved_bytes,
        "vram_device": p.vram_device,
        "method": p.method,
        "shared": p.shared,  # None, or why the peak includes concurrent work
    }


def identity_record(faces: Any) -> dict[str, Any]:
    """The identity check of each face as JSON (CLI --json, the app's record, folder manifests)."""
    rows: list[dict[str, Any] | None] = []
    for face in faces:
        c = getattr(face, "identity", None)
        rows.append(None if c is None else {"distance": round(c.distance, 4), "over_threshold": c.over_threshold,
                                            "action": c.action, "limit": c.limit, "seconds": round(c.seconds, 4)})
    # Its meaning beside the figure, so a reader of the JSON alone does not take it for a guarantee.
    return {"threshold": IDENTITY_THRESHOLD, "threshold_meaning": IDENTITY_THRESHOLD_MEANING, "faces": rows}
