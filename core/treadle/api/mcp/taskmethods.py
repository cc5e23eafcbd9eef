"""The SDK side of MCP Tasks and elicitation: the `tasks/*` request handlers of both revisions, the
2025-11-25 task-augmented `tools/call` (a middleware: the SDK would sieve a CreateTaskResult out of
a legacy tools/call result) and what a 2026-07-28 `tools/call` answers when a long tool's runs are
not done: a task handle (the client declared `io.modelcontextprotocol/tasks`), an
InputRequiredResult whose elicitations are the runs' questions (it declared elicitation), or the
tool's ordinary answer. The runs are the state (tasks.py); nothing here is kept between requests.

    2025-11-25   tools/call {task} → {task}; tasks/get → Task; tasks/result → the CallToolResult
                 (waits for the runs); tasks/cancel → Task; tasks/list → the tenant's runs as tasks
    2026-07-28   tools/call → {resultType: task, …Task}; tasks/get → the Task with its result or
                 inputRequests; tasks/update {inputResponses} answers them; tasks/cancel → {}
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from treadle.api.mcp import tasks
from treadle.api.mcp.join import settle
from treadle.api.mcp.tasks import ELICIT, TASK_MODE, TASKS_EXT, AnswerAsTask, TaskRef, TaskView
from treadle.api.mcp.tools import MAX_WAIT_S, call_tool, tool_error
from treadle.errors import TreadleError
from treadle.runtime import Runtime
from treadle.security.principal import Principal

#: how long a cancelled task's answer waits for its runs to reach `cancelled`
CANCEL_WAIT_S = 5.0


class UpdateTaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any] = Field(default_factory=dict)


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _declares(ctx: ServerRequestContext[Any, Any]) -> tuple[bool, bool]:
    """(tasks extension, elicitation) as this 2026-07-28 request's client capabilities say."""
    caps = ctx.session.client_capabilities if _modern(ctx) else None
    if caps is None:
        return False, False
    return TASKS_EXT in (caps.extensions or {}), caps.elicitation is not None


def _budget(rt: Runtime) -> float:
    return time.monotonic() + (rt.sse_budget_s if rt.sse_budget_s is not None else MAX_WAIT_S)


def _rpc_error(exc: TreadleError) -> MCPError:
    return MCPError(INVALID_PARAMS, exc.message, {"code": exc.code})


async def _view(rt: Runtime, who: Principal, task_id: str) -> TaskView:
    try:
        return await tasks.view(rt, who.tenant_id, TaskRef.parse(task_id))
    except TreadleError as exc:
        raise _rpc_error(exc) from None


def result_of(answer: dict[str, Any], v: TaskView) -> dict[str, Any]:
    """The task's CallToolResult (wire form): the tool's answer; isError unless its runs completed."""
    text = json.dumps(answer, default=str)
    ok = v.status == "completed" and not v.failed
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=json.loads(text),
                                is_error=not ok).model_dump(by_alias=True, mode="json", exclude_none=True)


# -- tools/call ------------------------------------------------------------------------------------


async def answer_call(rt: Runtime, who: Principal, ctx: ServerRequestContext[Any, Any],
                      params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult | dict[
                          str, Any]:
    """A tools/call of either revision that is not 2025-11-25 task-augmented."""
    tasks_ok, elicit = _declares(ctx)
    if params.request_state is not None:  # the retry of an InputRequiredResult: answer, then follow on
        return await _resume(rt, who, params, tasks_ok, elicit)
    modes = (TASK_MODE.set("late" if tasks_ok else None), ELICIT.set(elicit))
    try:
        return await call_tool(rt, who, params.name, params.arguments or {})
    except AnswerAsTask as sig:
        return await _unfinished(rt, who, sig.ref, sig.fallback, tasks_ok, elicit)
    finally:
        TASK_MODE.reset(modes[0])
        ELICIT.reset(modes[1])


async def _unfinished(rt: Runtime, who: Principal, ref: TaskRef, fallback: dict[str, Any] | None, tasks_ok: bool,
                      elicit: bool) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
    v = await tasks.view(rt, who.tenant_id, ref)
    if tasks_ok and not v.terminal:
        return {"resultType": "task", **tasks.modern_task(v)}
    if elicit and v.status == "input_required":
        return types.InputRequiredResult.model_validate(
            {"inputRequests": tasks.input_requests(v), "requestState": ref.id}, by_name=False)
    answer = fallback if fallback is not None and not v.terminal else await tasks.answer(rt, who.tenant_id, v)
    text = json.dumps(answer, default=str)
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=json.loads(text),
                                is_error=v.terminal and not (v.status == "completed" and not v.failed))


async def _resume(rt: Runtime, who: Principal, params: types.CallToolRequestParams, tasks_ok: bool,
                  elicit: bool) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
    try:
        ref = TaskRef.parse(params.request_state or "")
        v = await tasks.view(rt, who.tenant_id, ref)
        await tasks.apply_responses(rt, who.tenant_id, who.subject, v, dict(params.input_responses or {}))
    except TreadleError as exc:
        return tool_error(exc.code, exc.message)
    timeout_ms = (params.arguments or {}).get("timeout_ms", 60_000)
    wait_s = min(float(timeout_ms) / 1000 if isinstance(timeout_ms, int | float) else 60.0, MAX_WAIT_S)
    deadline = min(_budget(rt), time.monotonic() + wait_s)
    # the answer wakes the run: wait until it moved past the question and settles or asks again
    await _past_question(rt, who, ref, v, deadline)
    return await _unfinished(rt, who, ref, None, tasks_ok, elicit)


async def _past_question(rt: Runtime, who: Principal, ref: TaskRef, before: TaskView, deadline: float) -> None:
    """Wait (to `deadline`) until the runs moved on from the questions just answered and then
    settle or park on a new question."""
    asked = {q.id for q in before.pending}
    while time.monotonic() < deadline:
        v = await tasks.view(rt, who.tenant_id, ref)
        moved = any(now.last_seq > was.last_seq for now, was in zip(v.runs, before.runs, strict=True))
        if v.terminal or (v.status == "input_required" and moved and not asked & {q.id for q in v.pending}):
            return
        waits = [asyncio.ensure_future(rt.hub.wait(r, 0.25)) for r in ref.run_ids[:32]]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


async def legacy_task_call(rt: Runtime, who: Principal, ctx: ServerRequestContext[Any, Any],
                           call_next: CallNext) -> HandlerResult:
    """Middleware: a 2025-11-25 tools/call with `task` answers `{task}` once its runs started."""
    params = ctx.params
    if (ctx.method != "tools/call" or _modern(ctx) or not isinstance(params, Mapping)
            or params.get("task") is None):
        return await call_next(ctx)
    name = params.get("name")
    if name not in tasks.TASK_TOOLS:
        raise MCPError(INVALID_PARAMS, f"tool {name!r} does not run as a task (execution.taskSupport)")
    arguments = params.get("arguments") or {}
    token = TASK_MODE.set("now")
    try:
        result = await call_tool(rt, who, str(name), dict(arguments) if isinstance(arguments, Mapping) else {})
    except AnswerAsTask as sig:
        v = await tasks.view(rt, who.tenant_id, sig.ref)
        return {"task": tasks.legacy_task(v)}
    finally:
        TASK_MODE.reset(token)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


# -- tasks/* ---------------------------------------------------------------------------------------

CallerFn = Callable[[], tuple[Runtime, Principal]]


def handlers(caller: CallerFn) -> dict[str, tuple[type[types.RequestParams], Any]]:
    """method → (params model, handler) for `Server.add_request_handler`."""

    async def get(ctx: ServerRequestContext[Any, Any], p: types.GetTaskRequestParams) -> dict[str, Any]:
        rt, who = caller()
        v = await _view(rt, who, p.task_id)
        if not _modern(ctx):
            return tasks.legacy_task(v)
        out = tasks.modern_task(v)
        if v.status == "input_required":
            out["inputRequests"] = tasks.input_requests(v)
        elif v.terminal and v.status != "cancelled":
            out["result"] = result_of(await tasks.answer(rt, who.tenant_id, v), v)
        return out

    async def result(ctx: ServerRequestContext[Any, Any], p: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        rt, who = caller()
        if _modern(ctx):
            raise MCPError(METHOD_NOT_FOUND, "tasks/result is 2025-11-25's; tasks/get carries the result")
        v = await _view(rt, who, p.task_id)
        deadline = _budget(rt)
        while not v.terminal and time.monotonic() < deadline:
            await settle(rt, who.tenant_id, list(v.ref.run_ids), min(deadline, time.monotonic() + 5.0),
                         stop_on_wait=v.ref.kind == "send")
            v = await _view(rt, who, p.task_id)
        if not v.terminal:
            raise MCPError(REQUEST_TIMEOUT, f"task {p.task_id} is still {v.status}; poll tasks/get",
                           {"code": "task_not_done"})
        out = result_of(await tasks.answer(rt, who.tenant_id, v), v)
        out["_meta"] = {tasks.RELATED_TASK: {"taskId": v.ref.id}}
        return out

    async def cancel(ctx: ServerRequestContext[Any, Any], p: types.CancelTaskRequestParams) -> dict[str, Any]:
        rt, who = caller()
        v = await _view(rt, who, p.task_id)
        await tasks.cancel(rt, who.tenant_id, v.ref)
        if _modern(ctx):
            return {}
        if v.ref.kind != "send":
            await settle(rt, who.tenant_id, list(v.ref.run_ids), time.monotonic() + CANCEL_WAIT_S)
        return tasks.legacy_task(await _view(rt, who, p.task_id))

    async def list_(ctx: ServerRequestContext[Any, Any], p: types.PaginatedRequestParams) -> dict[str, Any]:
        rt, who = caller()
        if _modern(ctx):
            raise MCPError(METHOD_NOT_FOUND, "tasks/list is 2025-11-25's (the extension has none)")
        from treadle.api.steering import decode_cursor, encode_cursor

        try:
            page = await rt.runs.list_runs(who.tenant_id, None, 50, decode_cursor(p.cursor))
        except TreadleError as exc:
            raise _rpc_error(exc) from None
        listed = [tasks.legacy_task(await tasks.view(rt, who.tenant_id, TaskRef("run", (r.id,)))) for r in page]
        out: dict[str, Any] = {"tasks": listed}
        if len(page) == 50:
            out["nextCursor"] = encode_cursor(page[-1].created_at, page[-1].id)
        return out

    async def update(ctx: ServerRequestContext[Any, Any], p: UpdateTaskParams) -> dict[str, Any]:
        rt, who = caller()
        if not _modern(ctx):
            raise MCPError(METHOD_NOT_FOUND, "tasks/update is the 2026-07-28 extension's")
        v = await _view(rt, who, p.task_id)
        try:
            await tasks.apply_responses(rt, who.tenant_id, who.subject, v, p.input_responses)
        except TreadleError as exc:
            raise _rpc_error(exc) from None
        return {}

    return {"tasks/get": (types.GetTaskRequestParams, get),
            "tasks/result": (types.GetTaskPayloadRequestParams, result),
            "tasks/cancel": (types.CancelTaskRequestParams, cancel),
            "tasks/list": (types.PaginatedRequestParams, list_),
            "tasks/update": (UpdateTaskParams, update)}


__all__ = ["answer_call", "handlers", "legacy_task_call"]
