"""MCP Tasks and elicitation on treadle's MCP server, driven by the official `mcp` SDK client over
Streamable HTTP: 2026-07-28's `io.modelcontextprotocol/tasks` extension (a long tool answers a task
handle; tasks/get, tasks/update, tasks/cancel), 2025-11-25's task-augmented tools/call (tasks/get,
tasks/result, tasks/list, tasks/cancel), and an Interruption reaching the client as an elicitation
(the SDK's elicitation callback answers it). A task is a run: every answer is read from run rows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support.mcp import TOKEN, call, payload
from tests.support.mcptasks import (
    TASKS_EXT,
    CancelTask,
    ListTasks,
    TaskHandle,
    TaskResultRequest,
    TasksExtension,
    UpdateParams,
    UpdateTask,
    get_task,
    poll,
)


@asynccontextmanager
async def connect(base_url: str, mode: str, **kw: Any) -> AsyncIterator[Client]:
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
                Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode=mode, **kw) as c):
        yield c


def _seg(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "trusted-text", "text": text}]}]


# -- 2026-07-28: the io.modelcontextprotocol/tasks extension ----------------------------------------


async def test_2026_long_tools_answer_as_tasks_the_extension_resolves(base_url: str) -> None:
    async with connect(base_url, "2026-07-28", extensions=[TasksExtension()]) as c:
        discovered = await c.session.send_discover("2026-07-28")  # a pinned version skips the probe
        assert TASKS_EXT in discovered["capabilities"]["extensions"]
        # timeout_ms 0: not done when the tool answers, so a task; the client's extension polls it
        done = payload(await c.call_tool("spawn_run", {"agent": "echo", "prompt": "as a task", "timeout_ms": 0}))
        assert done["status"] == "completed" and "as a task" in done["final_text"]
        batch = payload(await c.call_tool("spawn_runs", {"spawns": [{"agent": "echo", "segments": _seg("one")},
                                                                    {"agent": "echo", "segments": _seg("two")}],
                                                         "timeout_ms": 0}))
        assert batch["spawned"] == 2 and [r["status"] for r in batch["results"]] == ["completed", "completed"]
        assert "one" in batch["results"][0]["final_text"] and "two" in batch["results"][1]["final_text"]
        # done within its timeout: the ordinary result, no task
        quick = payload(await c.call_tool("spawn_run", {"agent": "echo", "prompt": "quick", "timeout_ms": 60_000}))
        assert quick["settled"] is True


async def test_2026_task_handle_get_update_answers_the_question_and_cancel(base_url: str) -> None:
    async with connect(base_url, "2026-07-28", extensions=[TasksExtension()]) as c:
        handle = await c.session.call_tool("spawn_run", {"agent": "asker", "prompt": "go", "timeout_ms": 0},
                                           allow_claimed=True)
        assert isinstance(handle, TaskHandle) and handle.status == "working" and handle.poll_interval_ms
        asked = await poll(c.session, handle.task_id, {"input_required"})
        assert asked.status_message == "proceed?" and asked.input_requests
        (key, request), = asked.input_requests.items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["requestedSchema"]["properties"]["answer"]["enum"] == ["yes", "no"]
        # a key the task did not ask is refused by name
        with pytest.raises(MCPError) as bad:
            await c.session.send_request(UpdateTask(params=UpdateParams(
                task_id=handle.task_id, input_responses={"nope": {"action": "accept"}})), types.EmptyResult)
        assert "nope" in bad.value.message
        await c.session.send_request(UpdateTask(params=UpdateParams(
            task_id=handle.task_id, input_responses={key: {"action": "accept", "content": {"answer": "yes"}}})),
            types.EmptyResult)
        done = await poll(c.session, handle.task_id, {"completed", "failed", "cancelled"})
        assert done.status == "completed" and done.result is not None
        answer = types.CallToolResult.model_validate(done.result, by_name=False)
        assert not answer.is_error and payload(answer)["final_text"] == "answered"
        questions = await call(c, "list_interrupts", {"run_id": handle.task_id})
        assert [(q["status"], q["answer"]) for q in questions["interrupts"]] == [("resolved", "yes")]

        forever = await c.session.call_tool("spawn_run", {"agent": "forever", "prompt": "go", "timeout_ms": 0},
                                            allow_claimed=True)
        assert isinstance(forever, TaskHandle)
        await c.session.send_request(CancelTask(params=types.CancelTaskRequestParams(task_id=forever.task_id)),
                                     types.EmptyResult)
        assert (await poll(c.session, forever.task_id, {"cancelled"})).result is None
        # another tenant's or an unknown task: not found
        with pytest.raises(MCPError) as missing:
            await get_task(c.session, "r_" + "0" * 32)
        assert missing.value.error.data == {"code": "task_not_found"}


async def test_2026_without_the_extension_an_interruption_is_an_elicitation(base_url: str) -> None:
    seen: list[str] = []

    async def on_elicit(_ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        seen.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "no"})

    async with connect(base_url, "2026-07-28", elicitation_callback=on_elicit) as c:
        out = payload(await c.call_tool("spawn_run", {"agent": "asker", "prompt": "go", "timeout_ms": 60_000}))
        assert seen == ["proceed?"]
        assert out["status"] == "completed" and out["final_text"] == "answered"
        questions = await call(c, "list_interrupts", {"run_id": out["run_id"]})
        assert [(q["status"], q["answer"], q["resolved_by"]) for q in questions["interrupts"]] == [
            ("resolved", "no", "mcp:operator")]


async def test_2026_without_either_capability_the_tool_answers_as_before(base_url: str) -> None:
    async with connect(base_url, "2026-07-28") as c:
        out = payload(await c.call_tool("spawn_run", {"agent": "forever", "prompt": "go", "timeout_ms": 0}))
        assert out["settled"] is False and out["status"] in ("queued", "running")
        await call(c, "cancel_run", {"run_id": out["run_id"]})


# -- 2025-11-25: task-augmented tools/call and tasks/* ----------------------------------------------


async def _task_call(c: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A task-augmented tools/call. The SDK's session validates every tools/call result as a
    CallToolResult, so a CreateTaskResult cannot come back through `send_request`; this goes
    through the session's own JSON-RPC dispatcher instead (the same wire, framing and headers)."""
    raw: dict[str, Any] = await c.session._dispatcher.send_raw_request(
        "tools/call", {"name": name, "arguments": arguments, "task": {"ttl": 60_000}}, {})
    return raw


async def test_2025_task_augmented_calls_get_result_list_cancel(base_url: str) -> None:
    async with connect(base_url, "legacy") as c:
        assert c.protocol_version == "2025-11-25"
        caps = c.server_capabilities.tasks
        assert caps is not None and caps.list is not None and caps.cancel is not None
        assert caps.requests is not None and caps.requests.tools is not None
        listed = {t.name: t for t in (await c.list_tools()).tools}
        assert listed["spawn_run"].execution is not None and listed["spawn_run"].execution.task_support == "optional"
        assert listed["whoami"].execution is None

        created = types.CreateTaskResult.model_validate(
            await _task_call(c, "spawn_run", {"agent": "echo", "prompt": "legacy task"}), by_name=False)
        assert created.task.status == "working" and created.task.ttl is None
        result = await c.session.send_request(
            TaskResultRequest(params=types.GetTaskPayloadRequestParams(task_id=created.task.task_id)),
            types.CallToolResult)
        assert not result.is_error and "legacy task" in payload(result)["final_text"]
        got = await c.session.send_request(
            ListTasks(params=types.PaginatedRequestParams()), types.ListTasksResult)
        assert created.task.task_id in {t.task_id for t in got.tasks}

        batch = types.CreateTaskResult.model_validate(await _task_call(c, "spawn_runs", {
            "runs": [{"agent": "echo", "prompt": "a"}, {"agent": "echo", "prompt": "b"}]}), by_name=False)
        joined = payload(await c.session.send_request(
            TaskResultRequest(params=types.GetTaskPayloadRequestParams(task_id=batch.task.task_id)),
            types.CallToolResult))
        assert joined["total"] == 2 and all(r["ok"] and r["settled"] for r in joined["results"])

        forever = types.CreateTaskResult.model_validate(
            await _task_call(c, "spawn_run", {"agent": "forever", "prompt": "go"}), by_name=False)
        cancelled = await c.session.send_request(
            CancelTask(params=types.CancelTaskRequestParams(task_id=forever.task.task_id)), types.CancelTaskResult)
        assert cancelled.status == "cancelled"
        after = await c.session.send_request(
            TaskResultRequest(params=types.GetTaskPayloadRequestParams(task_id=forever.task.task_id)),
            types.CallToolResult)
        assert after.is_error and payload(after)["status"] == "cancelled"

        with pytest.raises(MCPError) as refused:
            await _task_call(c, "whoami", {})
        assert refused.value.code == -32602 and "taskSupport" in refused.value.message


async def test_2026_a_send_to_a_resident_is_a_task_done_when_the_turn_is(base_url: str) -> None:
    async with connect(base_url, "2026-07-28", extensions=[TasksExtension()]) as c:
        opened = await c.session.call_tool("spawn_run", {"agent": "echo", "prompt": "first turn",
                                                         "interactive": True, "timeout_ms": 0}, allow_claimed=True)
        assert isinstance(opened, TaskHandle)
        parked = await poll(c.session, opened.task_id, {"input_required"})  # its first turn is answered
        assert parked.input_requests and f"input:{opened.task_id}" in parked.input_requests
        sent = await c.session.call_tool("steer_run", {"run_id": opened.task_id, "text": "second turn"},
                                         allow_claimed=True)
        assert isinstance(sent, TaskHandle) and sent.task_id.startswith(f"send:{opened.task_id}:")
        done = await poll(c.session, sent.task_id, {"completed", "failed", "cancelled"})
        assert done.status == "completed" and done.result is not None
        turn = payload(types.CallToolResult.model_validate(done.result, by_name=False))
        assert turn["run_id"] == opened.task_id and "second turn" in turn["final_text"]
        await c.session.send_request(CancelTask(params=types.CancelTaskRequestParams(task_id=opened.task_id)),
                                     types.EmptyResult)
        assert (await poll(c.session, opened.task_id, {"cancelled"})).status == "cancelled"
