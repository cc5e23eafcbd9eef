"""The sidecar's in-process schedule sweeper: every tick, fire what is due, then run the
on_complete hooks of finished runs, then purge the ephemeral volumes of ended runs and the finished
runs past their retention. One sweeper
per database acts at a time (a transaction-level advisory lock held for the tick); the fire rows'
uniqueness makes even unlocked sweepers safe.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from treadle.engine.workers import PeriodicTask
from treadle.store.db import Pool
from treadle.store.locks import SWEEPER_LOCK_KEY, try_xact_lock
from treadle.store.pause import runtime_paused
from treadle.triggers.firing import TickResult
from treadle.triggers.hooks import HookRunner
from treadle.triggers.schedules import ScheduleService

log = logging.getLogger("treadle.schedules")



class ScheduleSweeper(PeriodicTask):
    task_name = "treadle-schedule-sweeper"

    def __init__(
        self, pool: Pool, service: ScheduleService, hooks: HookRunner, *, interval_s: float | None = None,
        singleton: bool = True, purge_volumes: Callable[[], Awaitable[int]] | None = None,
        retention: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.purge_volumes = purge_volumes
        self.retention = retention
        self.pool = pool
        self.service = service
        self.hooks = hooks
        self.interval_s = interval_s if interval_s is not None else self.service.settings.scheduler_tick_seconds
        self.singleton = singleton
        self.ticks = 0

    async def run_once(self) -> object:
        return await self.tick_once()

    async def tick_once(self, now: datetime | None = None) -> TickResult | None:
        """One tick; None when another sweeper holds the lock."""
        if not self.singleton:
            return await self._tick(now)
        async with self.pool.connection() as conn, conn.transaction():
            if not await try_xact_lock(conn, SWEEPER_LOCK_KEY):
                return None
            return await self._tick(now)

    async def _tick(self, now: datetime | None) -> TickResult:
        # while the runtime is paused nothing fires: a due schedule stays due and fires after the
        # resume (as loomcycle's sweeper skips its ticks while paused)
        result = TickResult() if await runtime_paused(self.pool) else await self.service.firing.tick(now)
        handled = await self.hooks.run_once()
        if self.purge_volumes is not None:  # ephemeral volumes a crash kept from their run-end purge
            purged = await self.purge_volumes()
            if purged:
                log.info("volumes: purged %d file(s) of ended runs' ephemeral volumes", purged)
        if self.retention is not None:  # finished runs past their tenant's retention (runtime.py)
            deleted = await self.retention()
            if deleted:
                log.info("retention: deleted %d finished run(s)", deleted)
        self.ticks += 1
        if result.fired or result.failed or result.skipped or handled:
            log.info("schedules: fired %d, failed %d, skipped %d missed; hooks run for %d",
                     result.fired, result.failed, result.skipped, handled)
        return result

