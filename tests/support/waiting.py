"""Helpers shared by the waiting tests (scripted mock agents on a real Postgres)."""

from __future__ import annotations

import json
from typing import Any

from tests.support.e2e import query
from treadle.store.interrupts import InterruptStore, interrupt_key
from treadle.store.runs import NewRun
from treadle.testing import user_text

ECHO: dict[str, Any] = {"model": "echo"}
FAILING: dict[str, Any] = {"model": "echo", "mock": {"error_rate": 1.0}}  # with provider_retries=0: fails at once


def scripted(turns: list[dict[str, Any]], tools: list[str], **extra: Any) -> dict[str, Any]:
    return {"model": "script", "tools": tools, "mock": {"script": turns}, **extra}


def asker(question: str = "proceed?", **ask: Any) -> dict[str, Any]:
    """An agent that asks one question, then says 'asked'."""
    turn = {"tool": "Interruption", "input": {"op": "ask", "question": question, "options": ["yes", "no"], **ask}}
    return scripted([turn, {"text": "asked"}], ["Interruption"])


def spawner(spawns: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    turn = {"tool": "Agent", "input": {"op": "parallel_spawn", "spawns": spawns}}
    return scripted([turn, {"text": "all done"}], ["Agent"], **extra)


async def start(rt: Any, agent: str, text: str = "hi", *, tenant: str = "default", **kw: Any) -> str:
    run, created = await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=user_text(text), **kw))
    assert created
    return str(run.id)


async def events(rt: Any, run_id: str, tenant: str = "default") -> list[Any]:
    return list(await rt.runs.events(tenant, run_id))


def types(evs: list[Any]) -> list[str]:
    return [e.type for e in evs]


def tool_results(evs: list[Any]) -> list[dict[str, Any]]:
    return [e.payload for e in evs if e.type == "tool_result"]


def result_json(evs: list[Any], index: int = -1) -> Any:
    return json.loads(tool_results(evs)[index]["text"])


async def status(rt: Any, run_id: str, tenant: str = "default") -> str:
    run = await rt.runs.get(tenant, run_id)
    assert run is not None
    return str(run.status)


async def children(rt: Any, parent_id: str) -> list[dict[str, Any]]:
    return await query(
        rt.database_url,
        "SELECT id, agent, status, depth, root_run_id, parent_run_id, cancel_reason, idempotency_key"
        " FROM runs WHERE parent_run_id = %s ORDER BY idempotency_key",
        (parent_id,),
    )


async def answer(rt: Any, run_id: str, text: str = "yes", *, tenant: str = "default",
                 disposition: str = "answer") -> str:
    """Answer the run's pending question the way the HTTP route does: settle it, poke its key."""
    store = InterruptStore(rt.pool)
    [pending] = await store.list_for_run(tenant, run_id, "pending")
    status_ = "resolved" if disposition == "answer" else "declined"
    row = await store.resolve(tenant, run_id, pending.id, answer=text, status=status_, resolved_by="api")
    assert row is not None
    await rt.poke(tenant, [interrupt_key(row.id)])
    return row.id
