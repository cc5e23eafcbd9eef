"""In-process wake-ups and live frames for stream readers.

- `notify(run_id)`: the engine pokes a run after writing its events; readers re-read the store.
  Readers also poll (another process may be driving the run), so a missed poke only delays them.
- `publish(run_id, event, data)`: a live, non-persisted frame (`text_delta`, `thinking_delta`)
  for whoever is streaming the run in this process right now. Nobody listening → dropped; a
  reader that falls behind loses its oldest frames (the persisted `text` event carries the
  whole text anyway). Frames never reach another process: the cloud shape streams only
  persisted events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

LIVE_BUFFER = 2048  # frames kept per reader before the oldest are dropped


@dataclass(frozen=True, slots=True)
class LiveFrame:
    event: str
    data: dict[str, Any]


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait until `event` is set or `timeout` passes. Not `asyncio.wait_for`: on Python 3.11 it
    swallows a cancel that lands as the event fires (the caller goes on as if never cancelled —
    a worker then never stops); `asyncio.timeout` does not."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


class LiveSubscription:
    """One reader's queue of live frames, and its wake-up (set by frames and by `notify`)."""

    def __init__(self, maxlen: int = LIVE_BUFFER) -> None:
        self._frames: deque[LiveFrame] = deque(maxlen=maxlen)
        self._wake = asyncio.Event()
        self.dropped = 0

    def push(self, frame: LiveFrame) -> None:
        if len(self._frames) == self._frames.maxlen:
            self.dropped += 1
        self._frames.append(frame)
        self._wake.set()

    def poke(self) -> None:
        self._wake.set()

    def drain(self) -> list[LiveFrame]:
        frames = list(self._frames)
        self._frames.clear()
        return frames

    async def wait(self, timeout: float) -> bool:
        """Wait for a frame or a poke (or `timeout`); True if woken."""
        if not self._wake.is_set():
            await wait_event(self._wake, timeout)
        woken = self._wake.is_set()
        self._wake.clear()
        return woken


class RunEventHub:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._live: dict[str, set[LiveSubscription]] = {}

    def notify(self, run_id: str) -> None:
        waiters = self._waiters.get(run_id)
        if waiters:
            for ev in waiters:
                ev.set()
        subs = self._live.get(run_id)
        if subs:
            for sub in subs:
                sub.poke()

    async def wait(self, run_id: str, timeout: float) -> bool:
        """Wait until the run is poked or `timeout` passes; True if poked."""
        ev = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(ev)
        try:
            await wait_event(ev, timeout)
            return ev.is_set()
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(ev)
                if not waiters:
                    del self._waiters[run_id]

    # -- live frames --------------------------------------------------------------------------------

    def has_live(self, run_id: str) -> bool:
        return run_id in self._live

    def publish(self, run_id: str, event: str, data: dict[str, Any]) -> None:
        subs = self._live.get(run_id)
        if subs:
            frame = LiveFrame(event, data)
            for sub in subs:
                sub.push(frame)

    @contextlib.contextmanager
    def subscribe(self, run_id: str) -> Iterator[LiveSubscription]:
        sub = LiveSubscription()
        self._live.setdefault(run_id, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._live.get(run_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._live[run_id]
