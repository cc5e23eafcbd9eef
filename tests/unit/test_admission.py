"""engine/admission.py: the in-flight limit grows while steps stay quick and shrinks when they slow."""

from __future__ import annotations

from treadle.engine.admission import Admission


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fill(a: Admission) -> int:
    n = 0
    while a.room():
        a.started()
        n += 1
    return n


def test_the_limit_grows_by_one_per_quick_step_while_it_binds() -> None:
    a = Admission(1000, initial=10, target_s=0.025)
    assert fill(a) == 10 and not a.room()
    for _ in range(5):  # the claimers fill the room again as soon as a step ends
        a.ended(0.001)
        assert fill(a) == 2  # the one that ended, and one more
    assert a.limit == 15 and a.in_flight == 15


def test_a_step_that_does_not_bind_the_limit_leaves_it() -> None:
    a = Admission(1000, initial=10)
    a.started()
    a.ended(0.001)
    assert a.limit == 10


def test_slow_steps_shrink_the_limit_at_most_once_per_cool_down() -> None:
    clock = Clock()
    a = Admission(1000, initial=100, floor=4, target_s=0.025, backoff=0.5, cool_s=0.05, smoothing=1.0, clock=clock)
    fill(a)
    a.ended(0.2)
    assert a.limit == 50
    a.ended(0.2)  # within the cool-down: no second cut
    assert a.limit == 50
    clock.now = 0.06
    a.ended(0.2)
    assert a.limit == 25
    for _ in range(10):
        clock.now += 1
        a.ended(0.2)
    assert a.limit == 4  # never under the floor


def test_the_limit_stays_within_the_ceiling_and_a_crash_says_nothing() -> None:
    a = Admission(12, initial=64)
    assert a.limit == 12
    fill(a)
    a.ended(0.0)
    assert a.limit == 12
    a.ended(None)
    assert a.in_flight == 10 and a.own_s == 0.0
