"""Peak RAM of decoding one large photo, as ``low`` decodes it, in a fresh process per case.

    .venv/bin/python benchmarks/decode_peak.py                  # the 7000×7000 16-bit greyscale PNG
    .venv/bin/python benchmarks/decode_peak.py --kinds grey16 grey8 rgb8 --side 7000

Each case: the file is written first (in this process), then a child process imports the
decoder, takes the engine's meter (:class:`gpen_core.platform.meter.PeakMeter`, VmHWM) and
decodes it with ``reduce_to=2048`` (low's pre-shrink side, what the pipeline passes for an
explicit ``low``). Prints the peak above the child's baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys
from gpen_core.images.decode import decode_image
from gpen_core.platform.meter import PeakMeter
path, reduce_to = sys.argv[1], int(sys.argv[2])
with PeakMeter(None) as m:
    out = decode_image(path, reduce_to=reduce_to or None)
p = m.peaks
print("RESULT " + json.dumps({"above_baseline": p.rss_bytes - p.baseline_rss_bytes, "method": p.method,
                              "shape": list(out.rgb.shape), "notes": list(out.notes)}))
"""


def write_case(kind: str, side: int, folder: Path) -> Path:
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:side, 0:side]
    path = folder / f"{kind}-{side}.png"
    if kind == "grey16":
        Image.fromarray(((x * 7 + y * 3) % 65536).astype(np.uint16)).save(path)
    elif kind == "grey8":
        Image.fromarray(((x + y) % 256).astype(np.uint8)).save(path)
    else:
        a = ((x + y) % 256).astype(np.uint8)
        Image.fromarray(np.stack([a, a[::-1], a.T], -1)).save(path)
    return path


def measure(path: Path, reduce_to: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), str(reduce_to)], capture_output=True, text=True, env=env,
                       timeout=600)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"child failed: {p.stderr[-2000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", default=["grey16"], choices=("grey16", "grey8", "rgb8"))
    ap.add_argument("--side", type=int, default=7000)
    ap.add_argument("--reduce-to", type=int, default=2048, help="0: full size (what auto and aligned decode)")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            path = write_case(kind, args.side, Path(tmp))
            r = measure(path, args.reduce_to)
            rows.append({"kind": kind, "side": args.side, "file_bytes": path.stat().st_size, **r})
            print(f"{kind:7s} {args.side}×{args.side} ({path.stat().st_size / 1e3:.0f} KB): "
                  f"{r['above_baseline'] / 1e6:6.0f} MB above baseline ({r['method']}), decoded to {r['shape']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
