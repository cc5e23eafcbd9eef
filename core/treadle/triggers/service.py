"""The triggers of one runtime: schedules, webhooks and the on_complete hooks of their runs, plus
treadle.yaml's `scheduled_runs:` and `webhooks:` kept in the database.

yaml sync: at start, each yaml entry whose content differs from its name's active version becomes
a new version (a child of the old one) marked "from treadle.yaml"; a yaml-born active def whose
entry was removed is retired. Concurrent starts serialize on an advisory lock, so each change
makes one version. A version created over the API (a fork) is left alone until the yaml entry
changes.

A schedule that retired itself by reaching `max_fires` stays retired: when a schedule name has no
active version, the sync compares the yaml entry with the name's newest version, retired ones
included, and creates nothing if that version has the entry's content and its schedule retired
with reason `max_fires`. So a `max_fires: 1` entry fires once, not once per restart. Changing the
entry (any field, e.g. raising `max_fires`) makes a new version, which counts its fires afresh
(max_fires counts the fires of a version). Other retirements (removing the entry, retiring over
the API) do not hold: an unchanged entry brings the schedule back at the next start.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from treadle.config import TreadleConfig
from treadle.defs.args import STATIC_DESCRIPTION
from treadle.defs.lifecycle import DefLifecycle
from treadle.ports import AgentDirectory, RunStarter
from treadle.security.principal import DEFAULT_TENANT
from treadle.store.db import Pool
from treadle.store.locks import STATIC_TRIGGERS_LOCK_KEY, xact_lock
from treadle.store.memory import MemoryStore
from treadle.triggers.hooks import HookRunner, McpCaller, ScopedPublisher
from treadle.triggers.scheduler import Scheduler
from treadle.triggers.schedules import ScheduleService
from treadle.triggers.settings import TriggerSettings
from treadle.triggers.sweeper import ScheduleSweeper
from treadle.triggers.webhooks import WebhookService

log = logging.getLogger("treadle.triggers")


class Triggers:
    def __init__(
        self, pool: Pool, config: TreadleConfig, starter: RunStarter, agents: AgentDirectory, memory: MemoryStore,
        publisher: ScopedPublisher | None, settings: TriggerSettings | None = None, mcp: McpCaller | None = None,
        purge_volumes: Callable[[], Awaitable[int]] | None = None,
        retention: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        #: the sweeper's pass over ephemeral volumes whose top-level run ended (volumes/service.py)
        self.purge_volumes = purge_volumes
        self.retention = retention
        self.pool = pool
        self.config = config
        self.settings = settings or TriggerSettings()
        self.schedules = ScheduleService(pool, starter, agents, settings=self.settings)
        self.webhooks = WebhookService(pool, starter, agents, publisher, self.settings)
        self.hooks = HookRunner(pool, memory, publisher, mcp)

    def sweeper(self, *, interval_s: float | None = None, singleton: bool = True) -> ScheduleSweeper:
        return ScheduleSweeper(self.pool, self.schedules, self.hooks, interval_s=interval_s, singleton=singleton,
                               purge_volumes=self.purge_volumes, retention=self.retention)

    async def sync_static(self, tenant_id: str = DEFAULT_TENANT) -> dict[str, int]:
        """treadle.yaml's triggers into the database; returns how many defs were created and retired."""
        families: list[tuple[DefLifecycle, dict[str, Any]]] = [
            (self.schedules.family, dict(self.config.scheduled_runs)),
            (self.webhooks.family, dict(self.config.webhooks)),
        ]
        created = retired = 0
        async with self.pool.connection() as conn, conn.transaction():
            await xact_lock(conn, STATIC_TRIGGERS_LOCK_KEY)
            for family, specs in families:
                for name, spec in specs.items():
                    assert isinstance(spec, BaseModel)
                    body = await family.normalize(tenant_id, name, spec.model_dump(mode="json", exclude_none=True))
                    digest = family.content_hash(body)
                    active = await family.defs.get(tenant_id, family.kind, name=name)
                    if active is not None and active.content_sha256 == digest:
                        continue
                    if active is None and family is self.schedules.family and await self._spent(
                        tenant_id, name, digest
                    ):
                        continue
                    await family.store(
                        tenant_id, name, body, parent_def_id=active.def_id if active else None,
                        description=STATIC_DESCRIPTION, promote=True,
                    )
                    created += 1
                for record in await family.defs.list(tenant_id, family.kind):
                    if record.active and record.description == STATIC_DESCRIPTION and record.name not in specs:
                        await family.retire(tenant_id, record)
                        retired += 1
        if created or retired:
            log.info("treadle.yaml triggers: %d version(s) created, %d retired", created, retired)
        return {"created": created, "retired": retired}

    async def _spent(self, tenant_id: str, name: str, digest: str) -> bool:
        """Whether schedule `name` retired itself at max_fires in a version with content `digest`
        (its newest version): then an unchanged yaml entry must not bring it back."""
        newest = await self.schedules.family.defs.list(
            tenant_id, self.schedules.family.kind, name=name, include_retired=True, limit=1
        )
        if not newest or newest[0].status != "retired" or newest[0].content_sha256 != digest:
            return False
        state = await self.schedules.store.get(tenant_id, name=name)
        return (
            state is not None and state.def_id == newest[0].def_id and state.status == "retired"
            and state.retired_reason == "max_fires"
        )

    async def start(self) -> ScheduleSweeper | None:
        """The sidecar's part: yaml triggers into the database, then the schedule sweeper (unless
        TREADLE_SCHEDULER_ENABLED=0)."""
        await self.sync_static()
        if not self.settings.scheduler_enabled:
            return None
        sweeper = self.sweeper()
        sweeper.start()
        return sweeper

    async def prepare(self, scheduler: Scheduler | None = None) -> None:
        """The cloud shape's part, at a function's cold start: plug the external scheduler in (the
        API function has one), yaml triggers into the database, then bring the external scheduler
        in line (schedules that retired themselves meanwhile, versions synced nowhere yet)."""
        if scheduler is not None:
            self.schedules.scheduler = scheduler
        await self.sync_static()
        if scheduler is not None:
            synced = await self.schedules.reconcile()
            if synced:
                log.info("%s: %d schedule(s) synced", scheduler.name, synced)
