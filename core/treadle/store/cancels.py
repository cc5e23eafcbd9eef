"""How a worker learns, while it waits on a model or a tool, that its run was cancelled.

A cancel request (`SubRunStore.request_cancel_tree`) and a turn cancel (`InputStore.add` with kind
`turn_cancel`) both `NOTIFY treadle_cancel, '<run_id>'` in the statement that records them. Two
ways to hear it, one per shape:

- `NotifyCancels` (the sidecar): one LISTEN connection per process; a notification sets the
  watchers of that run at once (milliseconds).
- `PollingCancels` (the cloud shape, where a LISTEN session would pin an RDS Proxy connection and
  a Lambda holds no long-lived connection): each watched run is checked every `interval_s`.

Either only wakes the engine; what happened is read back with `cancel_state`. A notification
that lands before a watch starts is not lost either: the step's commit refuses to complete a run
whose cancel is pending, and the next step's lease reads the flag.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import psycopg

from treadle.domain.signals import CancelSignal
from treadle.domain.tasks import cancel_and_wait
from treadle.store.db import Pool

log = logging.getLogger("treadle.store")

CANCEL_CHANNEL = "treadle_cancel"


@dataclass(frozen=True, slots=True)
class CancelState:
    cancel_requested: bool
    cancel_reason: str | None
    turn_cancel_pending: bool

    @property
    def any(self) -> bool:
        return self.cancel_requested or self.turn_cancel_pending


async def cancel_state(pool: Pool, run_id: str) -> CancelState:
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT r.cancel_requested, r.cancel_reason,
                      EXISTS (SELECT 1 FROM run_inputs i WHERE i.run_id = r.id AND i.kind = 'turn_cancel'
                              AND i.consumed_at IS NULL) AS turn_cancel
               FROM runs r WHERE r.id = %s""",
            (run_id,),
        )
        row = await cur.fetchone()
    if row is None:
        return CancelState(False, None, False)
    return CancelState(bool(row["cancel_requested"]), row["cancel_reason"], bool(row["turn_cancel"]))


class PollingCancels:
    def __init__(self, pool: Pool, interval_s: float = 1.0) -> None:
        self.pool = pool
        self.interval_s = interval_s

    @asynccontextmanager
    async def watch(self, run_id: str) -> AsyncIterator[CancelSignal]:
        signal = CancelSignal()

        async def poll() -> None:
            while not signal.is_set():
                await asyncio.sleep(self.interval_s)
                try:
                    if (await cancel_state(self.pool, run_id)).any:
                        signal.set()
                except Exception as exc:  # a failed check is retried; the commit is the backstop
                    log.warning("cancel check of %s failed: %s", run_id, exc)

        task = asyncio.create_task(poll())
        try:
            yield signal
        finally:
            await cancel_and_wait(task)


class NotifyCancels:
    """One LISTEN connection for the process (`start` opens it; a watch opens it if needed).

    A notification heard while nobody watches its run yet (it raced the step's lease) is
    remembered for `RECENT_S`: a watch that starts then fires at once, and the engine reads the
    run's state to see whether the cancel is still to be handled."""

    RECENT_S = 30.0
    RECENT_MAX = 10_000

    def __init__(self, url: str) -> None:
        self.url = url
        self._watchers: dict[str, set[CancelSignal]] = {}
        self._recent: dict[str, float] = {}
        self._reader: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None

    async def _listen(self, ready: asyncio.Future[None]) -> None:
        try:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                ready.set_result(None)
                async for note in conn.notifies():
                    self._heard(note.payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            log.warning("cancel listener stopped (%s); cancels still land at the next commit", exc)
        finally:
            self._reader = None
            self._ready = None

    def _heard(self, run_id: str) -> None:
        for signal in self._watchers.get(run_id, ()):
            signal.set()
        now = time.monotonic()
        self._recent[run_id] = now
        if len(self._recent) > self.RECENT_MAX:  # forget the oldest half
            for key, _ in sorted(self._recent.items(), key=lambda kv: kv[1])[: self.RECENT_MAX // 2]:
                del self._recent[key]

    async def start(self) -> None:
        await self._ensure_listening()

    async def _ensure_listening(self) -> None:
        if self._reader is None:
            loop = asyncio.get_running_loop()
            self._ready = loop.create_future()
            self._reader = asyncio.create_task(self._listen(self._ready), name="treadle-cancel-listener")
        assert self._ready is not None
        try:
            await asyncio.shield(self._ready)
        except Exception as exc:
            log.warning("cannot listen for cancels: %s", exc)

    @asynccontextmanager
    async def watch(self, run_id: str) -> AsyncIterator[CancelSignal]:
        await self._ensure_listening()
        signal = CancelSignal()
        self._watchers.setdefault(run_id, set()).add(signal)
        heard = self._recent.get(run_id)
        if heard is not None and time.monotonic() - heard < self.RECENT_S:
            signal.set()
        try:
            yield signal
        finally:
            watchers = self._watchers.get(run_id)
            if watchers is not None:
                watchers.discard(signal)
                if not watchers:
                    del self._watchers[run_id]

    async def close(self) -> None:
        reader = self._reader
        if reader is not None:
            await cancel_and_wait(reader)
