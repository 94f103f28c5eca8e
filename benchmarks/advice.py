"""The article's memory advice, measured on this machine; writes docs/advice.md's table with --readme.

    .venv/bin/python benchmarks/advice.py                 # every tip, 12 MP photo, 3 runs a side (~10 min on 2 cores)
    .venv/bin/python benchmarks/advice.py --tips 3 6 8    # some tips
    .venv/bin/python benchmarks/advice.py --readme        # and write docs/advice.md's "advice-table" block
    .venv/bin/python benchmarks/advice.py --save          # and keep it for the app (the models folder's measurements.json)

Each side of each tip runs in a fresh process (see gpen_core/hwcheck/advice.py for what is
measured and how the verdict is made).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from gpen_core.hwcheck import advice  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tips", type=int, nargs="+", choices=[t.number for t in advice.TIPS], help="tip numbers (default: all)")
    ap.add_argument("--workload", default="photo", choices=("photo", "group", "tiny"), help="input (default: the 12 MP photo)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per side (default 3)")
    ap.add_argument("--readme", action="store_true", help="write the table into docs/advice.md between the advice-table markers")
    ap.add_argument("--save", action="store_true", help="save for the app (the models folder's measurements.json)")
    ap.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    args = ap.parse_args(argv)

    def progress(f: float, d: str) -> None:
        print(f"[{f * 100:3.0f} %] {d}", file=sys.stderr, flush=True)

    report = advice.measure_tips(workload=args.workload, repeats=args.repeats, tips=args.tips, progress=progress)
    command = "python benchmarks/advice.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    report = advice.AdviceReport(**{**report.__dict__, "command": command.strip()})
    table = advice.format_table(report)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=1))
    if args.save:
        path = advice.save_report(report)
        print(f"saved for the app: {path}", file=sys.stderr)
    if args.readme:
        from bench import replace_block  # the docs' block writer (benchmarks/ is this script's folder, on sys.path)

        written = replace_block("advice-table", table)
        print(f"{written} updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
