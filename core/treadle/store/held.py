"""The transcripts of runs this process handed back to the job queue, kept for its next claim.

A worker ends a lease chain after `chain_steps` steps (fairness): its commit enqueues the run's
next step, and whichever worker claims that job reads the run's transcript again — the whole of
it, aggregated by the server, sent and decoded, then replayed and scrubbed from its start. On the
sidecar the claimer is nearly always a worker of the same process, which held that transcript a
moment before. So the yielding commit marks its job with this process's key and the transcript's
last seq (`jobs.yielded_by`, `jobs.known_seq`, migration 0025), the process keeps the events and
the replay state here, and a claim of a job this process marked reads only the events after that
seq. Events are append-only: what is kept stays true whatever happened to the run since (another
replica's steps, steering input) — those come back as the events after the mark.

Bounded (runs, and events across them); an entry is taken by the claim that uses it. A claim
whose entry is gone (evicted) reads the whole transcript in a second statement.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

Event = tuple[int, str, dict[str, Any]]


@dataclass(slots=True)
class HeldTranscript:
    last_seq: int
    events: list[Event]
    #: the engine's replay state of `events` (opaque here, see `LeasedRun.replayed`)
    replayed: Any


class HeldTranscripts:
    def __init__(self, max_runs: int = 256, max_events: int = 50_000) -> None:
        self.max_runs = max_runs
        self.max_events = max_events
        self._held: OrderedDict[str, HeldTranscript] = OrderedDict()
        self._events = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._held)

    def put(self, run_id: str, held: HeldTranscript) -> None:
        self.drop(run_id)
        if len(held.events) > self.max_events:
            return
        self._held[run_id] = held
        self._events += len(held.events)
        while len(self._held) > self.max_runs or self._events > self.max_events:
            _, oldest = self._held.popitem(last=False)
            self._events -= len(oldest.events)

    def take(self, run_id: str, last_seq: int) -> HeldTranscript | None:
        """The run's transcript up to `last_seq`, if held (and forget it: the claimer owns it)."""
        held = self.drop(run_id)
        if held is None or held.last_seq != last_seq:
            self.misses += 1
            return None
        self.hits += 1
        return held

    def drop(self, run_id: str) -> HeldTranscript | None:
        held = self._held.pop(run_id, None)
        if held is not None:
            self._events -= len(held.events)
        return held
