"""The transcripts of runs this process handed back to the job queue, kept for its next claim.

A worker ends a lease chain after `chain_steps` steps (fairness): its commit enqueues the run's
next step, and whichever worker claims that job reads the run's transcript again — the whole of
it, aggregated by the server, sent and decoded, then replayed and scrubbed from its start. On the
sidecar the claimer is nearly always a worker of the same process, which held that transcript a
moment before. So the yielding commit marks its job with the store's random key (`StepStore.mark`)
and the transcript's last seq (`jobs.yielded_by`, `jobs.known_seq`, migration 0025), the process
keeps the events and the replay state here, and a claim of a job this process marked reads only
the events after that seq. Events are append-only: what is kept stays true whatever happened to
the run since (another replica's steps, steering input) — those come back as the events after
the mark.

The committing worker and the claimer are different tasks (engine/workers.py): the claim can see
the marked job before the worker has taken in its commit's answer. So a commit that marks its job
first reserves the entry (`reserve`, before its statement is sent), the worker fills it in once
the commit returned (`fill`), or gives it up (`give_up`), and a claim that finds it reserved waits
for that — briefly: past `fill_wait_s` it reads the whole transcript, as on a miss.

Bounded (runs, and events across them) without evicting: a commit marks its job only while there
is room (`has_room`), so a backlog longer than the bound costs nothing more than before (its claims
read the whole transcript, as they did). An entry is taken by the claim that uses it; one nobody
claimed (another replica took the run, it ended elsewhere) leaves after `max_age_s`. A claim whose
entry left reads the whole transcript in a second statement.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

Event = tuple[int, str, dict[str, Any]]


@dataclass(slots=True)
class HeldTranscript:
    last_seq: int
    events: list[Event]
    #: the engine's replay state of `events` (opaque here; engine/lease.py `Lease.replayer`)
    replayed: Any
    kept_at: float = field(default_factory=time.monotonic)
    #: set once the committing worker filled the entry in (None: filled)
    pending: asyncio.Event | None = None


class HeldTranscripts:
    def __init__(self, max_runs: int = 1024, max_events: int = 100_000, max_age_s: float = 600.0,
                 fill_wait_s: float = 1.0) -> None:
        self.fill_wait_s = fill_wait_s
        self.max_runs = max_runs
        self.max_events = max_events
        self.max_age_s = max_age_s
        self._held: OrderedDict[str, HeldTranscript] = OrderedDict()
        self._events = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._held)

    def has_room(self, events: int) -> bool:
        """Whether a transcript of `events` events may be kept (what a commit asks before marking
        its job; workers committing at once may overshoot the bounds by one entry each)."""
        self._expire()
        return len(self._held) < self.max_runs and self._events + events <= self.max_events

    def put(self, run_id: str, held: HeldTranscript) -> None:
        self.drop(run_id)
        self._held[run_id] = held
        self._events += len(held.events)

    def reserve(self, run_id: str, last_seq: int) -> None:
        """A commit about to mark the run's job: its transcript up to `last_seq` follows (`fill`)."""
        self.put(run_id, HeldTranscript(last_seq, [], None, pending=asyncio.Event()))

    def fill(self, run_id: str, last_seq: int, events: list[Event], replayed: Any) -> None:
        held = self._held.get(run_id)
        if held is None or held.pending is None or held.last_seq != last_seq:
            return  # taken (given up on) meanwhile, or another commit's
        held.events, held.replayed = events, replayed
        self._events += len(events)
        pending, held.pending = held.pending, None
        pending.set()

    def give_up(self, run_id: str) -> None:
        """The reserving commit failed, or its transcript is not the one the mark promises."""
        held = self._held.get(run_id)
        if held is not None and held.pending is not None:
            self.drop(run_id)
            held.pending.set()

    async def take_when_filled(self, run_id: str, last_seq: int) -> HeldTranscript | None:
        """`take`, after waiting (at most `fill_wait_s`) for a reserved entry to be filled in."""
        held = self._held.get(run_id)
        if held is not None and held.pending is not None:
            try:
                async with asyncio.timeout(self.fill_wait_s):
                    await held.pending.wait()
            except TimeoutError:
                pass
        return self.take(run_id, last_seq)

    def take(self, run_id: str, last_seq: int) -> HeldTranscript | None:
        """The run's transcript up to `last_seq`, if held (and forget it: the claimer owns it)."""
        held = self.drop(run_id)
        if held is None or held.last_seq != last_seq or held.pending is not None:
            self.misses += 1
            return None
        self.hits += 1
        return held

    def drop(self, run_id: str) -> HeldTranscript | None:
        held = self._held.pop(run_id, None)
        if held is not None:
            self._events -= len(held.events)
        return held

    def _expire(self) -> None:
        horizon = time.monotonic() - self.max_age_s
        while self._held:
            run_id, oldest = next(iter(self._held.items()))
            if oldest.kept_at >= horizon:
                return
            self.drop(run_id)
