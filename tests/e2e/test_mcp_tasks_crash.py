"""MCP Tasks survive kill -9 (issue 37): an MCP client (the official SDK, 2026-07-28 with the tasks
extension, and 2025-11-25 task-augmented calls) starts long work as tasks on `treadle serve`, the
server is SIGKILLed mid-run and restarted on the same address, and the same client keeps polling
`tasks/get`: each task goes on from its run row to the right answer — a question asked before the
kill is still the task's input request after it, and answering it then completes the task."""

from __future__ import annotations

from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.e2e import check_paired, execute, query, slow_trigger
from tests.support.mcp import payload
from tests.support.mcptasks import (
    TaskHandle,
    TaskResultRequest,
    TasksExtension,
    UpdateParams,
    UpdateTask,
    get_task,
    poll,
)
from treadle.testing import until

pytestmark = pytest.mark.e2e

TOKEN = "e2e-mcp-tasks-token-0123456789"
MEMORY = {"op": "incr", "scope": "agent", "key": "calls"}
AGENTS: dict[str, Any] = {
    "slow": {"model": "script", "tools": ["Memory"], "mock": {"latency_ms": 120, "script": [
        *[{"tool": "Memory", "input": MEMORY} for _ in range(8)], {"text": "slow done"}]}},
    "asker": {"model": "script", "tools": ["Interruption"], "mock": {"script": [
        {"tool": "Interruption", "input": {"op": "ask", "question": "ship it?", "options": ["yes", "no"]}},
        {"text": "shipped"}]}},
}
ENV = {"TREADLE_AUTH_TOKEN": TOKEN, "TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"}
SLOW_MEMORY = slow_trigger("e2e_mcp_slow_memory", 0.1, "INSERT ON memory")


async def _results(url: str, run_id: str) -> int:
    rows = await query(url, "SELECT count(*) AS n FROM events WHERE run_id = %s AND type = 'tool_result'", (run_id,))
    return int(rows[0]["n"])


async def test_tasks_polled_across_a_sigkill_of_the_server(make_db: Any, start_server: Any) -> None:
    url = make_db("mcptasks", migrated=True)
    await execute(url, SLOW_MEMORY)
    srv = await start_server(url, AGENTS, name="mcptasks", **ENV)
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http,
                Client(streamable_http_client(f"{srv.url}/mcp", http_client=http), mode="2026-07-28",
                       extensions=[TasksExtension()]) as c,
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http_legacy,
                Client(streamable_http_client(f"{srv.url}/mcp", http_client=http_legacy), mode="legacy") as old):
        slow = await c.session.call_tool("spawn_run", {"agent": "slow", "prompt": "go", "timeout_ms": 0},
                                         allow_claimed=True)
        asker = await c.session.call_tool("spawn_run", {"agent": "asker", "prompt": "go", "timeout_ms": 0},
                                          allow_claimed=True)
        assert isinstance(slow, TaskHandle) and isinstance(asker, TaskHandle)
        raw = await old.session._dispatcher.send_raw_request(
            "tools/call", {"name": "spawn_run", "arguments": {"agent": "slow", "prompt": "legacy"},
                           "task": {"ttl": 60_000}}, {})
        legacy = types.CreateTaskResult.model_validate(raw, by_name=False).task
        asked = await poll(c.session, asker.task_id, {"input_required"})
        (key, _), = (asked.input_requests or {}).items()

        async def mid_run() -> bool:
            return 2 <= await _results(url, slow.task_id) < 8

        await until(mid_run, timeout=60, interval=0.02, what="the slow task mid-run")
        srv.kill9()
        before = await _results(url, slow.task_id)
        assert before < 8, "the kill landed after the slow task was done"
        await srv.restart(same_port=True)  # the same address: the same client objects poll on

        # the question asked before the kill is still the task's input request
        again = await get_task(c.session, asker.task_id)
        assert again.status == "input_required" and set(again.input_requests or {}) == {key}
        assert (await get_task(c.session, slow.task_id)).status in ("working", "completed")
        await c.session.send_request(UpdateTask(params=UpdateParams(
            task_id=asker.task_id, input_responses={key: {"action": "accept", "content": {"answer": "yes"}}})),
            types.EmptyResult)
        for handle, text in ((slow, "slow done"), (asker, "shipped")):
            done = await poll(c.session, handle.task_id, {"completed", "failed", "cancelled"}, timeout_s=90)
            assert done.status == "completed" and done.result is not None, done
            answer = types.CallToolResult.model_validate(done.result, by_name=False)
            assert not answer.is_error and payload(answer)["final_text"] == text
        old_result = await old.session.send_request(
            TaskResultRequest(params=types.GetTaskPayloadRequestParams(task_id=legacy.task_id)), types.CallToolResult)
        assert not old_result.is_error and payload(old_result)["final_text"] == "slow done"

    for run_id in (slow.task_id, asker.task_id, legacy.task_id):
        events = [{"seq": e["seq"], "type": e["type"], **e["payload"]} for e in await query(
            url, "SELECT seq, type, payload FROM events WHERE run_id = %s ORDER BY seq", (run_id,))]
        assert not check_paired(events), (run_id, check_paired(events))
    assert await _results(url, slow.task_id) == 8  # every Memory call answered once, across the kill
