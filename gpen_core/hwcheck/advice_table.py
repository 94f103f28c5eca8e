"""The memory advice's tips (:data:`TIPS`), the verdict on their measured sides, the report, its table and file."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from gpen_core.platform import measurements
from gpen_core.platform.meter import format_bytes

Verdict = Literal["helps", "no effect", "hurts", "not measurable here"]

# A difference smaller than this share of the "before" value is called "no effect":
# single peaks vary by several per cent between fresh processes (allocator, page cache).
THRESHOLD = 0.10
# Time differences below this many seconds are timer and scheduler noise, whatever their share.
MIN_SECONDS = 0.05
# Time decides only when memory does not, and only beyond this share: one busy moment of
# a 2-core machine moves a 10 s request by 10-30 %.
TIME_THRESHOLD = 0.25
# Below these, a value is under what the measurement resolves (the table shows whole MB and
# hundredths of a second): no percentage is computed from it.
RESOLUTION_BYTES = 1_000_000
RESOLUTION_SECONDS = 0.01

# What a tip's claim is about: a memory claim is judged on memory alone (a tip that claims "60 % less memory"
# and saves only time does not "help" as claimed); "memory and time" lets time break a tie; "time": on time.
ClaimKind = Literal["memory", "time", "memory and time"]


@dataclass(frozen=True)
class Tip:
    """One piece of advice as the article states it, and what stands for it here."""

    number: int
    tip: str
    claim: str
    measured_as: str  # what is measured here: the before and after, in words
    never_existed: str = ""  # why it cannot be measured on any machine (the code never existed)
    claims: ClaimKind = "memory"  # what the claim promises, so the verdict judges that


TIPS: tuple[Tip, ...] = (
    Tip(1, "`OMP_NUM_THREADS=2` / `OPENBLAS_NUM_THREADS=2`", "prevents RAM blow-ups",
        "`balanced` on the 12 MP photo with the threads unset vs both set to 2"),
    Tip(2, "remove `cv2.imshow` / `waitKey`", "saves a GUI display buffer",
        "a request that also keeps a display copy of the output vs one that does not "
        "(GPEN's scripts never call `imshow`; a display copy is what the tip stands for)"),
    Tip(3, "`--size 256`", "RAM 4.8 → 2.3 GB, VRAM → 6.1 GB, details slightly soft",
        "GPEN-BFR-512 vs GPEN-BFR-256, both float32, same photo and detector "
        "(`--size` existed only 2021-10 to 2022-02; the 256 model is what it selected)"),
    Tip(4, "`torch.compile(mode=\"reduce-overhead\")`", "18–22 % faster, 0.7 GB less VRAM",
        "GPEN-BFR-512 float16 on CUDA, eager vs compiled (CUDA graphs)", claims="memory and time"),
    Tip(5, "FP16 (`model.half()`)", "1.1 GB less VRAM, PSNR only −0.3 dB",
        "GPEN-BFR-512 on CUDA, float32 vs float16"),
    Tip(6, "`--crop_face`: restore only the faces", "peak 5.3 → 3.1 GB on a 10 MB photo, 2.4× faster",
        "`balanced` (paste-back onto the photo) vs `faces-only` (the crops alone), 12 MP photo "
        "(`--crop_face` never existed in yangxy/GPEN; faces-only is what it stands for)", claims="memory and time"),
    Tip(7, "JPEG q95 output instead of PNG", "60 % less memory while writing",
        "encoding the 12 MP result as PNG vs JPEG q95 (the encode alone)"),
    Tip(8, "pre-shrink big photos", "otherwise the full photo stays in memory",
        "`balanced` on the 12 MP JPEG vs the same photo shrunk to 2048 px first"),
    Tip(9, "clean the ModelScope cache", "its `os.walk` costs hundreds of MB",
        "finding the weights with a ModelScope cache of many files vs an empty one; and a full "
        "`os.walk` of that cache"),
    Tip(10, "avoid Jupyter / IDEs", "+1.5–2 GB",
        "not measured: it needs a running Jupyter kernel or IDE"),
    Tip(11, "`vm.swappiness=10`", "avoids swap stalls",
        "not measured: it needs a swap device and changing a kernel setting", claims="time"),
)


@dataclass(frozen=True)
class Side:
    """One measured side (before or after) of a tip: medians over repeats, bytes and seconds."""

    label: str
    process_peak_bytes: int  # the child's VmHWM: imports + models + requests
    request_peak_bytes: int  # the engine's meter: peak above the idle process, worst request
    seconds: float  # median of the warm requests (or of the measured operation)
    vram_reserved_bytes: int | None = None
    runs: int = 1
    spread: float = 0.0  # (max - min) / median of the per-run process peaks


@dataclass(frozen=True)
class TipResult:
    tip: Tip
    verdict: Verdict
    why: str  # one line: the numbers behind the verdict, or why there are none
    before: Side | None = None
    after: Side | None = None


@dataclass(frozen=True)
class AdviceReport:
    machine: str
    created: str
    workload: str
    repeats: int
    results: tuple[TipResult, ...]
    command: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _change(before: float, after: float) -> float:
    return (after - before) / before if before else 0.0


def verdict(
    before: Side, after: Side, metric: Literal["process", "request", "vram"] = "process", claims: ClaimKind = "memory",
) -> tuple[Verdict, str]:
    """helps / no effect / hurts on what the tip ``claims`` (see :data:`ClaimKind`), from the memory ``metric`` and
    the time: a change counts beyond :data:`THRESHOLD` of "before" and the runs' spread; one under the resolution
    decides nothing."""
    pick = {"process": lambda s: s.process_peak_bytes, "request": lambda s: s.request_peak_bytes,
            "vram": lambda s: s.vram_reserved_bytes or 0}[metric]
    mb, ma = pick(before), pick(after)
    mem_resolved = max(mb, ma) >= RESOLUTION_BYTES
    dm = _change(mb, ma) if mem_resolved and claims != "time" else 0.0
    time_resolved = max(before.seconds, after.seconds) >= RESOLUTION_SECONDS
    dt_shown = _change(before.seconds, after.seconds) if time_resolved else 0.0
    # A memory claim is not made true by a change in time; one under MIN_SECONDS is shown but decides nothing.
    dt = 0.0 if claims == "memory" or abs(after.seconds - before.seconds) < MIN_SECONDS else dt_shown
    noise = max(THRESHOLD, before.spread, after.spread)
    if dm <= -noise or (abs(dm) < noise and dt <= -TIME_THRESHOLD):
        v: Verdict = "helps"
    elif dm >= noise or (abs(dm) < noise and dt >= TIME_THRESHOLD):
        v = "hurts"
    else:
        v = "no effect"
    what = {"process": "process peak RAM", "request": "peak above idle", "vram": "peak VRAM"}[metric]
    mem_txt = _fmt_pct(_change(mb, ma)) if mem_resolved else f"under {RESOLUTION_BYTES / 1e6:.0f} MB both times"
    time_txt = _fmt_pct(dt_shown) if time_resolved else f"under {RESOLUTION_SECONDS:.2f} s both times"
    judged = {"memory": " (the claim is about memory: judged on memory)", "time": " (the claim is about time: judged on time)",
              "memory and time": ""}[claims]
    return v, f"{what} {mem_txt}, time {time_txt}{judged}"


def _fmt_pct(x: float) -> str:
    return f"{x * 100:+.0f}\u00a0%"  # no-break space: a table cell never leaves the "%" alone on a line


def _mb(n: int | None) -> str:
    return "–" if n is None else format_bytes(n)  # peaks in the units of the panel's


def format_table(report: AdviceReport) -> str:
    """Markdown: one row per tip, the article's claim beside what was measured here."""
    lines = [
        "| # | tip | the article's claim | measured here as | before → after: process peak RAM | "
        "peak above idle | seconds | VRAM | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.results:
        t = r.tip
        if r.before is None or r.after is None:
            cells = ["–", "–", "–", "–"]
        else:
            b, a = r.before, r.after
            cells = [
                f"{b.label}: {_mb(b.process_peak_bytes)} → {a.label}: {_mb(a.process_peak_bytes)}",
                f"{_mb(b.request_peak_bytes)} → {_mb(a.request_peak_bytes)}",
                f"{b.seconds:.2f} → {a.seconds:.2f}",
                f"{_mb(b.vram_reserved_bytes)} → {_mb(a.vram_reserved_bytes)}" if b.vram_reserved_bytes is not None else "–",
            ]
        lines.append(f"| {t.number} | {t.tip} | {t.claim} | {t.measured_as} | " + " | ".join(cells)
                     + f" | **{r.verdict}**: {r.why} |")
    lines += [
        "",
        f"Measured on {report.machine}, {report.created}; workload: {report.workload}; "
        f"each side in a fresh process, {report.repeats} runs interleaved, medians. "
        f"Memory decides: a change under {THRESHOLD * 100:.0f} % (or under the run-to-run spread) is \"no effect\" "
        f"unless the time changed by {TIME_THRESHOLD * 100:.0f} % or more. "
        + " ".join(report.notes),
    ]
    if report.command:
        lines.append(f"Generated by `{report.command}`.")
    return "\n".join(lines)


def save_report(report: AdviceReport, models_dir: str | os.PathLike[str] | None = None) -> Path:
    """Keep ``report`` for the app in the models folder's measurements store; the store's path."""
    d = report.to_dict()
    return measurements.update(lambda store: replace(store, advice=d), models_dir)


def report_from_dict(d: Any) -> AdviceReport:
    """Inverse of :meth:`AdviceReport.to_dict`; ValueError when ``d`` is not a report."""
    try:
        results = []
        for r in d["results"]:
            sides = [None if r.get(k) is None else Side(**r[k]) for k in ("before", "after")]
            results.append(TipResult(Tip(**r["tip"]), r["verdict"], r["why"], sides[0], sides[1]))
        return AdviceReport(d["machine"], d["created"], d["workload"], d["repeats"], tuple(results),
                            d.get("command", ""), tuple(d.get("notes", ())))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not an advice report: {exc}") from None


def load_report(models_dir: str | os.PathLike[str] | None = None) -> AdviceReport | None:
    """The saved report (the store's, or an older ``advice.json`` until the next write), or None
    when none was measured or it is unreadable (then the app offers to measure)."""
    try:
        return report_from_dict(measurements.read(models_dir).advice)
    except ValueError:  # None (nothing measured) included
        return None
