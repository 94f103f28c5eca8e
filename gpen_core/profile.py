"""Hardware profile: measured peaks per mode on this machine (stub; see the hardware-check issue)."""

from __future__ import annotations

from pathlib import Path


def measured_peak(mode: str, device: str, models_dir: Path | None = None) -> tuple[int, str] | None:
    """(peak bytes above idle for one face, source) from the saved profile, or None."""
    return None
