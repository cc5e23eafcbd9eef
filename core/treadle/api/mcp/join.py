"""Waiting for runs to settle, for spawn_run / spawn_runs (join).

The wait reads the database — run status lives there, whichever worker (or Lambda) steps the run —
and is bounded by a deadline: at the deadline the caller gets what has settled so far and the ids
of the rest. Nothing here holds a worker or a lease. In the sidecar the runtime's event hub wakes
the wait as soon as a run it steps commits; elsewhere the store is re-read every `poll_s`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from treadle.domain.events import EventType
from treadle.runtime import Runtime
from treadle.store.runs import RunRecord

POLL_S = 0.25


async def settle(
    rt: Runtime, tenant_id: str, run_ids: list[str], deadline: float, *, poll_s: float = POLL_S,
    stop_on_wait: bool = False,
) -> dict[str, RunRecord]:
    """The latest record of each run, once every run is terminal (or, with `stop_on_wait`, any is
    parked: it may wait on a question the caller can answer) or `deadline` (monotonic) passes."""
    latest: dict[str, RunRecord] = {}
    pending = list(dict.fromkeys(run_ids))
    while True:
        for run_id in list(pending):
            run = await rt.runs.get(tenant_id, run_id)
            if run is None:
                pending.remove(run_id)
                continue
            latest[run_id] = run
            if run.terminal:
                pending.remove(run_id)
            elif stop_on_wait and run.status == "waiting":
                return {**latest, **{r: x for r in pending if (x := await rt.runs.get(tenant_id, r)) is not None}}
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            return latest
        # the first unsettled run's commit wakes the wait early (in-process); else re-read the store
        waits = [asyncio.ensure_future(rt.hub.wait(r, min(poll_s, left))) for r in pending[:32]]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


async def outcome(rt: Runtime, tenant_id: str, run: RunRecord) -> dict[str, Any]:
    """What a caller of spawn_run wants to see of a run: its state, and its answer once it has one."""
    out: dict[str, Any] = {"run_id": run.id, "agent": run.agent, "agent_id": run.agent_id or run.id,
                           "session_id": run.session, "status": run.status, "settled": run.terminal}
    if run.terminal:
        out["stop_reason"] = run.stop_reason
        if run.error:
            out["error"] = run.error
        out["final_text"] = await final_text(rt, tenant_id, run)
        out["usage"] = run.usage()
    return out


async def final_text(rt: Runtime, tenant_id: str, run: RunRecord) -> str:
    """The run's last assistant text ("" if it said nothing)."""
    start = max(0, run.last_seq - 50)
    events = await rt.runs.events(tenant_id, run.id, start, limit=100)
    for ev in reversed(events):
        if ev.type == EventType.TEXT:
            return str(ev.payload.get("text") or "")
    if start > 0:  # a long tail of non-text events: scan the whole transcript
        texts = [ev for ev in await rt.runs.events(tenant_id, run.id, 0, limit=100_000) if ev.type == EventType.TEXT]
        return str(texts[-1].payload.get("text") or "") if texts else ""
    return ""
