"""The client side of MCP Tasks for the tests: the official SDK's client knows the task types but
sends none of their requests, so these are its `Request` subclasses for `tasks/*`, and a client
extension (SEP-2133: a result claim on resultType "task") that resolves a 2026-07-28 task handle
by polling `tasks/get` — what an extension-aware client does."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict

TASKS_EXT = "io.modelcontextprotocol/tasks"


class GetTask(types.Request[types.GetTaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: types.GetTaskRequestParams


class TaskResultRequest(types.Request[types.GetTaskPayloadRequestParams, Literal["tasks/result"]]):
    method: Literal["tasks/result"] = "tasks/result"
    params: types.GetTaskPayloadRequestParams


class CancelTask(types.Request[types.CancelTaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: types.CancelTaskRequestParams


class ListTasks(types.Request[types.PaginatedRequestParams, Literal["tasks/list"]]):
    method: Literal["tasks/list"] = "tasks/list"
    params: types.PaginatedRequestParams


class UpdateParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class UpdateTask(types.Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams


class TaskHandle(types.Result):
    """2026-07-28 CreateTaskResult."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class DetailedTask(types.Result):
    """2026-07-28 GetTaskResult: the task, with its result, error or inputRequests."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    return await session.send_request(GetTask(params=types.GetTaskRequestParams(task_id=task_id)), DetailedTask)


async def poll(session: ClientSession, task_id: str, until: set[str], *, timeout_s: float = 60) -> DetailedTask:
    """tasks/get every pollIntervalMs until the task's status is one of `until`."""
    with anyio.fail_after(timeout_s):
        while True:
            task = await get_task(session, task_id)
            if task.status in until:
                return task
            await anyio.sleep((task.poll_interval_ms or 1000) / 1000)


class TasksExtension(ClientExtension):
    identifier = TASKS_EXT

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self._resolve)]

    async def _resolve(self, handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
        task = await poll(ctx.session, handle.task_id, {"completed", "failed", "cancelled"})
        assert task.result is not None, task
        return types.CallToolResult.model_validate(task.result, by_name=False)
