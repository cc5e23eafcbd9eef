"""How many steps a process runs at once: an adaptive limit (AIMD, as TCP's congestion window and
adaptive concurrency limiters work).

A step's *own time* is its wall time minus what it waited on its model and its external tools:
the claim, the replay, the commit, waiting for a database connection and for the event loop.
While it stays under `target_s` the process has room: each step that ends while the limit was
binding raises the limit by one (it grows as fast as steps complete). When it goes over, the
process is saturated — its CPU or its database — and the limit shrinks by `backoff`, at most once
per `cool_s`. Work the process has no room for stays queued, where the oldest runs' steps go first
(store/steps.py `_next_job`): under a backlog the runs already started keep the process and finish
near their own latency, and steps stay quick, instead of thousands of runs advancing in lockstep.
Pure bookkeeping (no I/O): tests/unit/test_admission.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Admission:
    def __init__(self, ceiling: int, *, initial: int = 64, floor: int = 4, target_s: float = 0.025,
                 backoff: float = 0.9, cool_s: float = 0.05, smoothing: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ceiling = ceiling
        self.floor = min(floor, ceiling)
        self.limit = float(max(self.floor, min(initial, ceiling)))
        self.target_s = target_s
        self.backoff = backoff
        self.cool_s = cool_s
        self.smoothing = smoothing
        self.clock = clock
        self.in_flight = 0
        #: a moving average of the steps' own time, seconds
        self.own_s = 0.0
        self._last_decrease = float("-inf")

    def room(self) -> bool:
        return self.in_flight < int(self.limit)

    def started(self) -> None:
        self.in_flight += 1

    def ended(self, own_s: float | None) -> None:
        """A step (or a lease chain, `own_s` per step) ended; None: it did not say (a crash)."""
        binding = self.in_flight >= int(self.limit)
        self.in_flight -= 1
        if own_s is None:
            return
        self.own_s += self.smoothing * (own_s - self.own_s)
        if self.own_s > self.target_s:
            now = self.clock()
            if now - self._last_decrease >= self.cool_s:
                self.limit = max(float(self.floor), self.limit * self.backoff)
                self._last_decrease = now
        elif binding:
            self.limit = min(float(self.ceiling), self.limit + 1.0)
