"""The sidecar's in-process schedule sweeper: every tick, fire what is due, then run the
on_complete hooks of finished runs. One sweeper per database acts at a time (a transaction-level
advisory lock held for the tick); the fire rows' uniqueness makes even unlocked sweepers safe.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from treadle.engine.workers import PeriodicTask
from treadle.triggers.firing import TickResult
from treadle.triggers.hooks import HookRunner
from treadle.triggers.schedules import schedule_service

if TYPE_CHECKING:
    from treadle.runtime import Runtime

log = logging.getLogger("treadle.schedules")

#: pg advisory lock key of the schedule sweeper ("tr-sched")
SWEEPER_LOCK_KEY = 0x7472_2D73_6368_6564


class ScheduleSweeper(PeriodicTask):
    task_name = "treadle-schedule-sweeper"

    def __init__(self, rt: Runtime, *, interval_s: float | None = None, singleton: bool = True) -> None:
        self.rt = rt
        self.service = schedule_service(rt)
        self.hooks = HookRunner(rt)
        self.interval_s = interval_s if interval_s is not None else self.service.settings.scheduler_tick_seconds
        self.singleton = singleton
        self.ticks = 0

    async def run_once(self) -> object:
        return await self.tick_once()

    async def tick_once(self, now: datetime | None = None) -> TickResult | None:
        """One tick; None when another sweeper holds the lock."""
        if not self.singleton:
            return await self._tick(now)
        async with self.rt.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS got", (SWEEPER_LOCK_KEY,))
            row = await cur.fetchone()
            if not row or not row["got"]:
                return None
            return await self._tick(now)

    async def _tick(self, now: datetime | None) -> TickResult:
        result = await self.service.firing.tick(now)
        handled = await self.hooks.run_once()
        self.ticks += 1
        if result.fired or result.failed or result.skipped or handled:
            log.info("schedules: fired %d, failed %d, skipped %d missed; hooks run for %d",
                     result.fired, result.failed, result.skipped, handled)
        return result

