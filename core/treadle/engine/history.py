"""A continuation's history (issue 34): the messages of its session's earlier runs, read in place
(nothing is copied) and kept per process so that a long conversation does not re-read and replay
every earlier turn at every turn.

Per run: its history, computed once (the earlier runs have ended, so it never changes while the
run lives). Per session: the history the session's next run would see, with a fingerprint of the
runs it was built from (how many, and the sum of their `last_seq`). The next turn then reads only
the runs since (engine/replay.py: replaying the earlier runs' events and then the new ones is
exactly replaying them all at once) — unless the fingerprint changed (an event appended to an
ended run: a manual compaction's marker; a run deleted), in which case it reads everything again.
Another process, or this one after a restart, reads everything once; the result is the same."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TypeVar

from treadle.domain.content import Message
from treadle.engine.replay import Replayer
from treadle.store.steps import LeasedRun, StepStore

K = TypeVar("K")
V = TypeVar("V")
#: how many runs' and sessions' histories a process keeps
HISTORY_CACHE = 256


@dataclass(frozen=True, slots=True)
class _Tail:
    next_seq: int  # the session_seq of the run this history is for
    fingerprint: tuple[int, int]  # (runs, sum of their last_seq) it was built from
    messages: list[Message]


class SessionHistories:
    def __init__(self, steps: StepStore) -> None:
        self.steps = steps
        self._runs: OrderedDict[str, list[Message]] = OrderedDict()
        self._sessions: OrderedDict[tuple[str, str], _Tail] = OrderedDict()

    async def of(self, leased: LeasedRun) -> list[Message]:
        """The messages of the session's runs before `leased` (a continuation's history)."""
        found = self._runs.get(leased.run_id)
        if found is not None:
            return found
        assert leased.session_id is not None
        key = (leased.tenant_id, leased.session_id)
        tail = self._sessions.get(key)
        since = tail.next_seq if tail is not None and tail.next_seq <= leased.session_seq else 0
        fingerprint, runs = await self.steps.session_history_since(leased, since)
        if since and tail is not None and fingerprint == tail.fingerprint:
            replayer, base = Replayer(tail.messages), tail.fingerprint
        else:  # no usable tail: everything from the session's first run
            if since:
                fingerprint, runs = await self.steps.session_history_since(leased, 0)
            replayer, base = Replayer(), (0, 0)
        for events in runs:
            replayer.feed(events)
        messages = replayer.closed_messages()
        grown = (base[0] + len(runs), base[1] + sum(events[-1][0] for events in runs if events))
        _keep(self._sessions, key, _Tail(leased.session_seq, grown, messages))
        _keep(self._runs, leased.run_id, messages)
        return messages


def _keep(cache: OrderedDict[K, V], key: K, value: V) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > HISTORY_CACHE:
        cache.popitem(last=False)
