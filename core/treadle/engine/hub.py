"""In-process wake-ups for stream readers: the engine pokes a run after writing its events.

Readers also poll (another process may be driving the run), so a missed poke only delays them.
"""

from __future__ import annotations

import asyncio
import contextlib


class RunEventHub:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def notify(self, run_id: str) -> None:
        waiters = self._waiters.get(run_id)
        if waiters:
            for ev in waiters:
                ev.set()

    async def wait(self, run_id: str, timeout: float) -> bool:
        """Wait until the run is poked or `timeout` passes; True if poked."""
        ev = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(ev)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), timeout)
            return ev.is_set()
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(ev)
                if not waiters:
                    del self._waiters[run_id]
