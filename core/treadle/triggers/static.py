"""`scheduled_runs:` and `webhooks:` from treadle.yaml → defs of the default tenant.

At start, each yaml entry whose content differs from its name's active version becomes a new
version (a child of the old one) marked "from treadle.yaml"; a yaml-born active def whose entry
was removed is retired. Concurrent starts serialize on an advisory lock, so each change makes one
version. A version created over the API (a fork) is left alone until the yaml entry changes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from treadle.domain.defs import content_sha256
from treadle.security.principal import DEFAULT_TENANT
from treadle.triggers.defs import STATIC_DESCRIPTION, DefFamily
from treadle.triggers.scheduler import Scheduler
from treadle.triggers.schedules import schedule_service
from treadle.triggers.webhooks import webhook_service

if TYPE_CHECKING:
    from treadle.runtime import Runtime
    from treadle.triggers.sweeper import ScheduleSweeper

log = logging.getLogger("treadle.triggers")
STATIC_LOCK_KEY = 0x7472_2D79_616D_6C00  # "tr-yaml"


async def sync_static_triggers(rt: Runtime, tenant_id: str = DEFAULT_TENANT) -> dict[str, int]:
    """Returns how many defs were created and retired."""
    families: list[tuple[DefFamily, dict[str, Any]]] = [
        (schedule_service(rt).family, dict(rt.config.scheduled_runs)),
        (webhook_service(rt).family, dict(rt.config.webhooks)),
    ]
    created = retired = 0
    async with rt.pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (STATIC_LOCK_KEY,))
        for family, specs in families:
            for name, spec in specs.items():
                assert isinstance(spec, BaseModel)
                body = await family.normalize(tenant_id, spec.model_dump(mode="json", exclude_none=True))
                active = await family.defs.get(tenant_id, family.kind, name=name)
                if active is not None and active.content_sha256 == content_sha256(body):
                    continue
                await family.store(
                    tenant_id, name, body, parent_def_id=active.def_id if active else None,
                    description=STATIC_DESCRIPTION, promote=True,
                )
                created += 1
            for record in await family.defs.list(tenant_id, family.kind):
                if record.active and record.description == STATIC_DESCRIPTION and record.name not in specs:
                    record = await family.defs.retire(tenant_id, family.kind, record.def_id)
                    await family.retired(tenant_id, record)
                    retired += 1
    if created or retired:
        log.info("treadle.yaml triggers: %d version(s) created, %d retired", created, retired)
    return {"created": created, "retired": retired}


async def start_triggers(rt: Runtime) -> ScheduleSweeper | None:
    """The sidecar's part: yaml triggers into the database, then the schedule sweeper (unless
    TREADLE_SCHEDULER_ENABLED=0)."""
    from treadle.triggers.sweeper import ScheduleSweeper

    await sync_static_triggers(rt)
    svc = schedule_service(rt)
    if not svc.settings.scheduler_enabled:
        return None
    sweeper = ScheduleSweeper(rt)
    sweeper.start()
    return sweeper


async def prepare_triggers(rt: Runtime, scheduler: Scheduler | None = None) -> None:
    """The cloud shape's part, at a function's cold start: plug the external scheduler in (the
    API function has one), yaml triggers into the database, then bring the external scheduler in
    line (schedules that retired themselves meanwhile, versions synced nowhere yet)."""
    if scheduler is not None:
        rt.extras["scheduler"] = scheduler
    await sync_static_triggers(rt)
    if scheduler is not None:
        synced = await schedule_service(rt).reconcile()
        if synced:
            log.info("%s: %d schedule(s) synced", scheduler.name, synced)
