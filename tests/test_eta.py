"""Time left of a measurement, from the steps measured so far (a fake clock: the arithmetic, not the machine)."""

from __future__ import annotations

from gpen_core.hwcheck.eta import Eta, left_text


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


def test_each_step_is_its_kind_s_mean_then_the_prior_then_the_mean_of_all() -> None:
    clock = Clock()
    plan = ["restore:balanced", "restore:balanced", "encode:png", "cache:walk"]
    eta = Eta(plan, prior={"encode:png": 1.0}, clock=clock)
    eta.start()
    clock.now += 10  # the first restore took 10 s
    assert eta.finish() == 10
    # restore 10 (its kind) + encode 1 (prior) + walk 10 (no kind, no prior: the mean of all measured)
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


def test_a_prior_estimates_before_anything_is_measured() -> None:
    clock = Clock()
    eta = Eta(["low", "balanced", "quality"], prior={"low": 20, "balanced": 30, "quality": 50}, clock=clock)
    eta.start()
    assert eta.left() == 100
    clock.now += 25  # low runs longer than last time
    assert eta.left() == 80
    eta.finish()
    assert eta.left() == 80


def test_the_text_rounds_to_what_a_person_reads() -> None:
    assert left_text(2) == "about 5 s left"
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
