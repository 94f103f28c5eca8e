"""How fast bad input and missing weights are refused: the timing claims the unit tests leave out.

Its table: printed only, a target per row (no docs table: README's benchmarks line names it).

    .venv/bin/python benchmarks/bench_refusals.py            # a table: target and measured (median of --runs)
    .venv/bin/python benchmarks/bench_refusals.py --runs 5 --json out.json

The unit tests check *why* each refusal is quick (decided on the header, frames counted up to a
cap, no network touched, one request with the read timeout); how quick it is depends on the
machine and its load, so it is measured here, on a quiet machine, with a target per row.
Wall-clock medians; each row runs in this process after one warm-up (imports are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _median_s(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm-up: imports and first-use caches are not what the row is about
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _refused(fn: Callable[[], object], *errors: type[BaseException]) -> Callable[[], None]:
    def call() -> None:
        try:
            fn()
        except errors:
            return
        raise AssertionError(f"{fn} was not refused")

    return call


def _silent_server() -> tuple[socket.socket, str]:
    """A loopback port that accepts connections (kernel backlog) and never answers."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    return srv, f"http://127.0.0.1:{srv.getsockname()[1]}"


def measure(runs: int) -> list[dict[str, object]]:
    import dataclasses

    import numpy as np

    from gpen_core.errors import InputError, WeightsError
    from gpen_core.images.decode import decode_image
    from gpen_core.options import RestoreOptions
    from gpen_core.restorer import Restorer
    from gpen_core.weights import fetch
    from gpen_core.weights import lookup as weights
    from tests.hostile import CASES_BY_NAME

    rows: list[dict[str, object]] = []

    def row(what: str, target_s: float, seconds: float) -> None:
        rows.append({"what": what, "target_s": target_s, "measured_s": round(seconds, 5), "ok": seconds <= target_s})

    with tempfile.TemporaryDirectory(prefix="gpen-bench-refusals-") as tmp:
        folder = Path(tmp)
        files = {n: CASES_BY_NAME[n].make(folder) for n in ("png_bomb_50000x50000", "gif_1M_frames", "tiff_20000_pages", "jpeg_8000x6000")}
        row("PNG header declaring 50000×50000: refused", 0.05, _median_s(_refused(lambda: decode_image(files["png_bomb_50000x50000"]), InputError), runs))
        row("GIF of 1M frames: first frame decoded", 2.0, _median_s(lambda: decode_image(files["gif_1M_frames"]), runs))
        row("TIFF of 20000 pages: first page decoded", 2.0, _median_s(lambda: decode_image(files["tiff_20000_pages"]), runs))
        row("8000×6000 JPEG: full decode", 15.0, _median_s(lambda: decode_image(files["jpeg_8000x6000"]), runs))
        row("8000×6000 JPEG: decode reduced to 1024 px", 5.0, _median_s(lambda: decode_image(files["jpeg_8000x6000"], reduce_to=1024), runs))

        home = folder / "models"
        home.mkdir()
        os.environ["GPEN_HOME"] = str(home)
        os.environ["GPEN_OFFLINE"] = "1"
        row("GPEN_OFFLINE=1, weights missing: WeightsError", 1.0, _median_s(_refused(lambda: weights.resolve("GPEN-BFR-512"), WeightsError), runs))
        restorer = Restorer(device="cpu")
        photo = np.zeros((64, 64, 3), np.uint8)
        row("restore with the generator missing: WeightsError", 10.0,
            _median_s(_refused(lambda: restorer(photo, RestoreOptions(mode="low")), WeightsError), runs))

        # Downloads: a refused host, and a host that accepts and never answers (read timeout 0.5 s).
        del os.environ["GPEN_OFFLINE"]
        os.environ["MODELSCOPE_ENDPOINT"] = "http://127.0.0.1:9"
        spec = weights.REGISTRY["GPEN-BFR-512"]
        weights.REGISTRY["GPEN-BFR-512"] = dataclasses.replace(spec, urls=("http://127.0.0.1:9/GPEN-BFR-512.pth",))
        srv, url = _silent_server()
        det = weights.REGISTRY["retinaface-mobilenet0.25"]
        weights.REGISTRY["retinaface-mobilenet0.25"] = dataclasses.replace(det, urls=(f"{url}/detection_mobilenet0.25_Final.pth",))
        old_timeout = fetch.READ_TIMEOUT_S
        fetch.READ_TIMEOUT_S = 0.5
        try:
            row("every source refused: WeightsError", 5.0,
                _median_s(_refused(lambda: weights.resolve("GPEN-BFR-512", allow_download=True), WeightsError), runs))
            row("a server that never answers (0.5 s read timeout)", 5.0,
                _median_s(_refused(lambda: weights.download("retinaface-mobilenet0.25"), WeightsError), runs))
        finally:
            fetch.READ_TIMEOUT_S = old_timeout
            weights.REGISTRY["GPEN-BFR-512"], weights.REGISTRY["retinaface-mobilenet0.25"] = spec, det
            srv.close()
    return rows


def format_table(rows: list[dict[str, object]]) -> str:
    lines = ["| refusal | target | measured (median) | |", "|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['what']} | ≤ {r['target_s']} s | {r['measured_s']:.4f} s | {'ok' if r['ok'] else 'MISSED'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per row after one warm-up (default 3)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = measure(args.runs)
    print(format_table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
