"""`GET /readyz`: whether this process can serve — the runtime open, the database answering within
READY_TIMEOUT_S, and every migration this version ships applied. `/healthz` stays liveness only."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from treadle import __version__
from treadle.runtime import Runtime
from treadle.store.migrate import applied_versions, available_migrations

READY_TIMEOUT_S = 2.0
log = logging.getLogger("treadle.api")


async def readiness(rt: Runtime | None) -> dict[str, Any]:
    if rt is None:
        return {"ok": False, "version": __version__, "database": "not_open", "pending_migrations": []}
    try:
        async with asyncio.timeout(READY_TIMEOUT_S), rt.pool.connection() as conn:
            applied = await applied_versions(conn)
    except Exception as exc:  # whatever keeps it from answering: not ready (the log says what)
        log.warning("readiness: the database did not answer: %s: %s", type(exc).__name__, exc)
        return {"ok": False, "version": __version__, "database": "unreachable", "pending_migrations": []}
    pending = [m.version for m in available_migrations() if m.version not in applied]
    return {"ok": not pending, "version": __version__, "database": "ok", "pending_migrations": pending}
