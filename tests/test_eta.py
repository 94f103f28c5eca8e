"""Time left of a measurement, from the steps measured so far (a fake clock: the arithmetic, not the machine)."""

from __future__ import annotations

from gpen_core.hwcheck.eta import Eta
from gpen_core.progress import left_text


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_measured_and_no_prior_means_no_estimate() -> None:
    clock = Clock()
    eta = Eta(["restore:balanced", "encode:png"], clock=clock)
    eta.start()
    clock.now += 3
    assert eta.left() is None and left_text(eta.left()) == ""


def test_an_unmeasured_kind_takes_its_family_s_mean_before_the_mean_of_all() -> None:
    clock = Clock()
    eta = Eta(["warm-up restore:balanced", "restore:balanced", "restore:faces-only", "encode:png"], clock=clock)
    eta.start()
    clock.now += 100  # the first load converts: slow, and unlike the steps after it
    eta.finish()
    clock.now += 20
    eta.finish()
    # faces-only: a restore like the measured one (20), not the warm-up; the encode: the mean of all (60)
    assert eta.left() == 20 + 60


def test_each_step_is_its_kind_s_mean_then_its_reference_then_the_mean_of_all() -> None:
    clock = Clock()
    plan = ["restore:balanced", "restore:balanced", "encode:png", "cache:walk"]
    eta = Eta(plan, reference={"restore:balanced": 20.0, "encode:png": 2.0}, clock=clock)
    eta.start()
    clock.now += 10  # the first restore took 10 s: half its reference
    assert eta.finish() == 10
    # restore 10 (its kind) + encode 1 (its reference, scaled) + walk 10 (no kind, no reference: the mean of all)
    assert eta.left() == 21
    clock.now += 4  # 4 s into the second restore
    assert eta.left() == 17
    clock.now += 10  # it runs long: the running step's share never goes below zero
    assert eta.left() == 11
    eta.finish()  # took 14 s: restores now average 12
    assert eta.per_step("restore:balanced") == 12 and eta.per_step("cache:walk") == 12
    eta.finish()
    eta.finish()
    assert eta.left() == 0


def test_the_text_rounds_to_what_a_person_reads() -> None:
    assert left_text(2) == "about 5 s left"
    assert left_text(0) == "finishing"  # a clip's last frame said "about 5 s left"
    assert left_text(42) == "about 40 s left"
    assert left_text(89) == "about 90 s left"
    assert left_text(200) == "about 3 min left"


def test_without_a_guess_from_unlike_steps_an_unmeasured_family_is_left_out_and_counted() -> None:
    clock = Clock()
    eta = Eta(["restore:balanced", "restore:balanced", "encode:png", "encode:jpeg"], clock=clock, guess_from_all=False)
    eta.start()
    assert eta.left() is None
    clock.now += 20
    eta.finish()
    assert (eta.left(), eta.untimed()) == (20, 2)
    assert left_text(eta.left(), eta.untimed()) == "about 20 s left, and 2 steps not timed yet"
    clock.now += 20
    eta.finish()
    clock.now += 1
    eta.finish()
    assert (eta.left(), eta.untimed()) == (1, 0)  # the jpeg encode: an encode, like the png one


def test_a_reference_time_is_scaled_by_what_the_finished_steps_took_against_theirs() -> None:
    clock = Clock()
    eta = Eta(["a", "b", "c"], reference={"a": 10, "b": 30, "c": 60}, clock=clock)
    eta.start()
    assert eta.left() is None and eta.scale() is None  # nothing measured here yet: no guess
    clock.now += 20  # twice the reference: this machine (or its load) is half as fast
    eta.finish()
    assert eta.scale() == 2 and eta.left() == 2 * (30 + 60)
    clock.now += 30  # b as fast as its reference: the speed is now (20 + 30) / (10 + 30)
    eta.finish()
    assert eta.left() == 60 * 50 / 40


def test_the_checks_steps_finish_as_the_progress_passes_them_and_say_the_time_left() -> None:
    clock, seen = Clock(), []
    steps = Eta(["a", "b", "c"], reference={"a": 10, "b": 15, "c": 20}, clock=clock, report=lambda f, d: seen.append((f, d)))
    steps.start()
    steps.say(0.0, "a: starting")
    clock.now += 5
    steps.say(0.5, "a: halfway")
    assert seen == [(0.0, "a: starting"), (0.5 / 3, "a: halfway")]  # no step measured yet: no time left
    clock.now += 5
    steps.say(1.0, "b: starting")  # a took its reference: b and c as theirs
    assert seen[-1] == (1 / 3, "about 35 s left · b: starting")
    clock.now += 30
    part = steps.part(2, 1)
    part(0.0, "c: starting")  # b took twice its reference: the speed is (10 + 30) / (10 + 15) of it
    assert steps.scale() == 40 / 25 and seen[-1] == (2 / 3, "about 30 s left · c: starting")
    part(1.0, "c: done")
    assert seen[-1] == (1.0, "c: done") and len(steps.finished) == 3


def test_the_checks_backend_steps_are_cached_when_an_earlier_check_recorded_their_speed_here() -> None:
    from gpen_core.hwcheck.eta import REFERENCE, backend_kinds, task_kinds

    spec = {"pairs": [{"size": 256, "dtype": "float32"}, {"size": 512, "dtype": "bfloat16"}],
            "parse": [{"size": 512, "dtype": "float32"}], "detect": ["mobilenet0.25", "resnet50"]}
    recorded = ("256-float32", "parsenet-512-float32", "retinaface-resnet50-1000-float32")  # the speed file's keys
    assert backend_kinds(spec, recorded) == ["generator:256:float32:cached", "generator:512:bfloat16", "parser:512:float32:cached",
                                             "detector:mobilenet0.25", "detector:resnet50:cached"]
    assert backend_kinds(None, recorded) == []
    assert all(k in REFERENCE for k in backend_kinds(spec, recorded) + backend_kinds(spec))
    # a cached step takes its reference less the conversion the earlier check made
    assert REFERENCE["parser:512:float32:cached"] < REFERENCE["parser:512:float32"]
    tasks = [{"gpen_task": "colorize", "mode": "quality"}, {"gpen_task": "seg2face", "mode": "faces-only", "warm": True}]
    assert task_kinds(tasks) == ["colorize:quality", "seg2face:faces-only:warm"]
