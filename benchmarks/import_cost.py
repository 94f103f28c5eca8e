"""What importing the engine costs in RSS, in this venv: torch alone, and everything a restore imports.

    .venv/bin/python benchmarks/import_cost.py            # a table
    .venv/bin/python benchmarks/import_cost.py --json out.json

Each line is a fresh process that imports the named modules and reports its peak RSS
(``ru_maxrss``). Run it in a venv with PyTorch's CUDA build and in one with the CPU
build (``scripts/setup.sh`` picks the CPU build on a Linux x86_64 machine without an
NVIDIA GPU) to see what the build choice is worth on this machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETS = {
    "python alone": [],
    "torch": ["torch"],
    "the engine's imports for a restore": ["torch", "cv2", "gpen_core.restorer", "gpen_core.engine.pipeline", "gpen_core.faces.detect", "gpen_core.networks.fast"],
    "openvino": ["openvino"],
}

_CHILD = r"""
import importlib, json, resource, sys
for m in sys.argv[1:]:
    importlib.import_module(m)
out = {"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if "torch" in sys.modules:
    import torch
    out["torch"] = torch.__version__
    out["cuda_build"] = torch.version.cuda is not None
print(json.dumps(out))
"""


def measure(modules: list[str]) -> dict:
    """Peak RSS of a fresh interpreter after importing ``modules`` (MiB), with torch's version."""
    r = subprocess.run([sys.executable, "-c", _CHILD, *modules], cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"importing {modules} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    rows = {name: measure(mods) for name, mods in SETS.items()}
    t = rows["torch"]
    build = f"torch {t['torch']} ({'CUDA' if t['cuda_build'] else 'CPU'} build)"
    print(f"{platform.processor() or platform.machine()}; Python {platform.python_version()}; {build}")
    print("| imports | peak RSS |")
    print("|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['rss_mib']:.0f} MiB |")
    if args.json:
        args.json.write_text(json.dumps({"build": build, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
