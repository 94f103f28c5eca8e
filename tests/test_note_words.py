"""Every note a person reads is a plain sentence: its brackets close, and no thread names or page-fault figures
(the meter's own account stays in the JSON's peaks.shared). The builders run over representative inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpen_core.engine import convert_first as cf
from gpen_core.engine.pipeline import LEFT_BEHIND
from gpen_core.engine.runtime_choice import RequestPlan, RuntimeFacts, decide_runtime
from gpen_core.modes import MODES
from gpen_core.platform.meter import SHARED_NOTE
from gpen_app import mode_labels, video_tab
from gpen_core.result import Peaks
from gpen_core.runtimes.openvino.choice import BackendChoice

PAIRS = {"(": ")", "[": "]"}
JARGON = re.compile(r"Thread-\d|thread '|page faults?|\bpid\b|\btid\b")
MEASURED = BackendChoice("openvino", "measured faster here: 1.66 s vs torch 2.41 s per face",
                         "not yet measured on this machine (the hardware check measures it here)")


def unbalanced(text: str) -> str | None:
    """Where ``text``'s brackets fail to pair (a closing one without its opening one, or one left open), else None."""
    stack: list[str] = []
    for i, ch in enumerate(text):
        if ch in PAIRS:
            stack.append(PAIRS[ch])
        elif ch in PAIRS.values() and (not stack or stack.pop() != ch):
            return f"{ch!r} at {i}"
    return f"{len(stack)} left open" if stack else None


def test_the_checker_itself_catches_an_open_bracket() -> None:
    assert unbalanced("thread 'Thread-1 (run' of this process (81 ms CPU)") == "1 left open"
    assert unbalanced("a) b (c") == "')' at 1" and unbalanced("a (b [c] d)") is None


def _runtime_notes() -> list[str]:
    out = []
    for pays in (True, False):
        for plan in (None, RequestPlan("balanced", 900_000_000, 0)):
            for free in (400_000_000, 8_000_000_000):
                for estimated in (True, False):
                    facts = RuntimeFacts("generator", "the generator GPEN-BFR-512", "auto", MEASURED, "bfloat16", "float32",
                                         False, 1_736_000_000, free, estimated, conversion_pays=pays, plan=plan,
                                         plan_used=950_000_000)
                    out.append(decide_runtime(facts).note or "")
    return out


def _auto_notes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from gpen_core.engine import budget

    out = []
    for free in (200_000_000, 1_200_000_000, 16_000_000_000):
        monkeypatch.setenv("GPEN_FREE_RAM_BYTES", str(free))
        for size in ((640, 360), (3840, 2160)):
            out += [budget.choose("cpu", size, work=budget.Work(upscale=up)).reason for up in (1, 4)]
            out += [s.reason for s in (budget.check_fits(m, "cpu", size) for m in MODES.values()) if s is not None]
    return out


def _convert_first_notes() -> list[str]:
    pending = cf.Pending("GPEN-BFR-512", 512, "float32", 2_300_000_000, False)
    torch = cf.Figure(4.47, "measured on this machine (2026-12-05)")
    return [why.note for faces, free in ((2, 8 * 10**9), (900, 10**9))
            if (why := cf.decide(pending, faces, torch, cf.Figure(9.3, cf.BUILT_IN_SOURCE), free)) is not None]


def _clip_panel(notes: list[str]) -> str:
    from gpen_core.video.result import Damage, VideoResult

    shared = "thread 'Thread-1 (run)' of this process worked alongside it (81 ms CPU, 1659 MB of page faults)"
    r = VideoResult(output="o.mp4", frames=4, fps=4.0, duration_s=1.0, size=(64, 64), mode="low", mode_reason=notes[0],
                    audio="re-encoded", crf=18, seconds_per_frame=0.5, total_s=2.0, faces_per_frame_max=1,
                    peaks=Peaks(900_000_000, 400_000_000, "vmhwm", shared=shared), rotation=90, lookahead_frames=3,
                    notes=tuple(notes), damage=Damage(3, 0.75, "the file declares 8 frames but ends after 3 (truncated?)"))
    return video_tab.video_markdown(r)


def test_every_note_closes_its_brackets_and_names_no_thread(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    notes = [*_runtime_notes(), *_auto_notes(monkeypatch), *LEFT_BEHIND.values(), SHARED_NOTE, *_convert_first_notes()]
    notes = [n for n in notes if n]
    assert len(notes) > 20  # the builders really ran
    rows = video_tab.estimates(["low", "balanced", "quality"], "cpu", lambda m, d: None)
    texts = [*notes, _clip_panel(notes), video_tab.estimate_markdown(600, rows),
             *(video_tab.converting_text("GPEN-BFR-512", cf.Figure(13.0, s)) for s in (cf.BUILT_IN_SOURCE, "measured here")),
             *(label for label, _ in mode_labels.mode_choices("cpu", video=True)), mode_labels.VIDEO_OUTPUT]
    for text in texts:
        assert unbalanced(text) is None, (unbalanced(text), text)
        assert not JARGON.search(text), text


def test_an_unexpected_errors_long_message_is_cut_without_leaving_a_bracket_open() -> None:
    from gpen_app import messages

    long = "worker thread failed (" + "x" * 400 + ") after the frame"
    shown = messages.shown_error(RuntimeError(long), doing="Restoring the video")
    assert unbalanced(shown.text) is None, shown.text
    assert "worker thread failed…" in shown.text and len(shown.text) < 500
    assert messages.shortened("short (kept whole)", 300) == "short (kept whole)"
    assert messages.shortened("a (b) c (d e f", 12) == "a (b) c…"
