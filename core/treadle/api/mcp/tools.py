"""The meta-tools of treadle's MCP server, with loomcycle's names where it has them.

Each tool validates its arguments with a pydantic model (the same models as the HTTP API where
one exists) and then does what the matching HTTP route does — most call the route function
itself, so MCP and HTTP cannot drift apart. Every tool acts for the caller's tenant. A failure
comes back as an MCP tool error (`isError: true`) whose text and structured content are treadle's
error shape `{"code", "error"}` with the same stable codes as the HTTP API."""

from __future__ import annotations

import json
import logging
import time
from functools import cache
from typing import Any, Literal

import mcp_types as types
import psycopg
from pydantic import BaseModel, Field, ValidationError, model_validator

from treadle.api import channels, interrupts, loomcycle, memory, runs, steering, tokens
from treadle.api.auth import may_call_tool, principal_view, tool_scope
from treadle.api.mcp import (
    govtools,  # noqa: F401  (registers erasure, credentialdef, resolve_probe)
    loomtools,  # noqa: F401  (registers loomcycle's channel, hook and run-state tools)
    sessiontools,  # noqa: F401  (registers history, compact_run, replay_session)
    snapshottools,  # noqa: F401  (registers loomcycle's six snapshot tools)
)
from treadle.api.mcp.join import outcome, settle
from treadle.api.mcp.registry import TOOLS, Handler, MetaTool, _Args, tool
from treadle.api.mcp.tasks import TASK_MODE, TASK_TOOLS, AnswerAsTask, TaskRef, follow_mode
from treadle.api.runs import CancelRequest, RunRequest
from treadle.domain.runs import RunStatus
from treadle.errors import NotFound, TreadleError, ValidationFailed
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.channels import parse_deliver_at
from treadle.wire import AgentCancelRequest, BatchRequest

log = logging.getLogger("treadle.mcp")

#: spawn_runs fans out at most this many runs per call (loomcycle's MaxParallelSpawns)
MAX_SPAWNS = 32
#: the longest a spawn call waits when the shape sets no budget (the cloud shape bounds it by the
#: invocation's remaining time through `Runtime.sse_budget_s`)
MAX_WAIT_S = 900.0
DEFAULT_TIMEOUT_MS = 60_000

# -- runs ------------------------------------------------------------------------------------------


class SpawnRunArgs(RunRequest):
    #: how long to wait for the run to settle; 0 returns at once with the run id
    timeout_ms: int = Field(default=DEFAULT_TIMEOUT_MS, ge=0, le=int(MAX_WAIT_S * 1000))
    idempotency_key: str | None = Field(default=None, max_length=256)


class SpawnRunsArgs(_Args):
    #: loomcycle's: each a POST /v1/runs body, answered in loomcycle's envelope (as POST /v1/runs:batch)
    spawns: list[dict[str, Any]] | None = Field(default=None, min_length=1, max_length=MAX_SPAWNS)
    #: treadle's (the same runs; its own envelope: {index, ok, run_id, status, settled, final_text?})
    runs: list[RunRequest] | None = Field(default=None, min_length=1, max_length=MAX_SPAWNS)
    #: join: return when every run settled, or at the timeout with what settled so far
    mode: Literal["join"] = "join"
    timeout_ms: int = Field(default=DEFAULT_TIMEOUT_MS, ge=0, le=int(MAX_WAIT_S * 1000))

    @model_validator(mode="after")
    def _one_list(self) -> SpawnRunsArgs:
        if (self.spawns is None) == (self.runs is None):
            raise ValueError("give spawns (loomcycle's) or runs (treadle's), not both")
        return self


def _deadline(rt: Runtime, timeout_ms: int) -> float:
    budget = rt.sse_budget_s if rt.sse_budget_s is not None else MAX_WAIT_S
    return time.monotonic() + min(timeout_ms / 1000, budget)


@tool("spawn_run", "Start a run of an agent and wait (up to timeout_ms) for its answer. Returns "
      "{run_id, agent_id, session_id, status, settled, final_text?}; a run still going at the timeout keeps "
      "going. The body is POST /v1/runs' (session_id continues a session).", SpawnRunArgs)
async def spawn_run(rt: Runtime, who: Principal, a: SpawnRunArgs) -> dict[str, Any]:
    body = RunRequest.model_validate(a.model_dump(exclude={"timeout_ms", "idempotency_key"}, exclude_unset=True))
    run, created = await runs._start(rt, who, body, a.idempotency_key)
    ref = TaskRef("run", (run.id,))
    if TASK_MODE.get() == "now":
        raise AnswerAsTask(ref)
    if follow_mode():
        return await _follow(rt, who, ref, _deadline(rt, a.timeout_ms), a.timeout_ms, created=created)
    done = await settle(rt, who.tenant_id, [run.id], _deadline(rt, a.timeout_ms)) if a.timeout_ms else {}
    return {**await outcome(rt, who.tenant_id, done.get(run.id, run)), "created": created}


@tool("spawn_runs", f"Start up to {MAX_SPAWNS} runs at once (mode join) and wait until all settle or "
      "timeout_ms passes. loomcycle's `spawns` (each a POST /v1/runs body) answer as POST /v1/runs:batch: "
      "{results: [{agent_id, run_id, session_id, status, stop_reason, final_text, usage, error}], spawned}; "
      "treadle's `runs` answer results[i] = {index, ok, run_id, status, settled, final_text?} "
      "or {index, ok: false, error: {code, error}} when that run could not start.", SpawnRunsArgs)
async def spawn_runs(rt: Runtime, who: Principal, a: SpawnRunsArgs) -> dict[str, Any]:
    deadline = _deadline(rt, a.timeout_ms)
    if a.spawns is not None and follow_mode():  # started here, followed as a task
        batch = await runs.create_runs(BatchRequest(spawns=a.spawns, mode=a.mode, timeout_ms=0), rt, who)
        ids = [str(r.get("run_id")) for r in batch["results"] if r.get("run_id")]
        if len(ids) < len(a.spawns):  # a spawn was refused: only the whole list makes a task
            return batch
        return await _follow(rt, who, TaskRef("spawns", tuple(ids)), deadline, a.timeout_ms)
    if a.spawns is not None:  # loomcycle's call: POST /v1/runs:batch's answer
        wait_ms = max(1, int((deadline - time.monotonic()) * 1000)) if a.timeout_ms else 0
        return await runs.create_runs(BatchRequest(spawns=a.spawns, mode=a.mode, timeout_ms=min(wait_ms, 600_000)),
                                      rt, who)
    assert a.runs is not None
    await rt.refuse_if_paused()
    started: list[str | dict[str, Any]] = []
    for body in a.runs:
        try:
            run, _ = await runs._start(rt, who, body, None)
            started.append(run.id)
        except TreadleError as exc:
            started.append({"code": exc.code, "error": exc.message})
    ids = [s for s in started if isinstance(s, str)]
    if follow_mode() and len(ids) == len(started):
        return await _follow(rt, who, TaskRef("runs", tuple(ids)), deadline, a.timeout_ms)
    latest = await settle(rt, who.tenant_id, ids, deadline)
    results: list[dict[str, Any]] = []
    for index, item in enumerate(started):
        if isinstance(item, dict):
            results.append({"index": index, "ok": False, "error": item})
            continue
        out = await outcome(rt, who.tenant_id, latest[item])
        results.append({"index": index, "ok": out["status"] == RunStatus.COMPLETED.value or not out["settled"],
                        **out})
    settled = sum(1 for r in results if r.get("settled"))
    return {"mode": a.mode, "results": results, "settled": settled, "total": len(results),
            "timed_out": settled < len(ids)}


async def _follow(rt: Runtime, who: Principal, ref: TaskRef, deadline: float, timeout_ms: int, *,
                  created: bool = True) -> dict[str, Any]:
    """The runs of a task-capable call are started: answer as a task at once (2025-11-25's `task`),
    or wait until they settle or ask a question and answer as a task if they did not settle."""
    from treadle.api.mcp.tasks import answer, follow, view

    if TASK_MODE.get() == "now":
        raise AnswerAsTask(ref)
    v = await follow(rt, who.tenant_id, ref, deadline) if timeout_ms else await view(rt, who.tenant_id, ref)
    out = await answer(rt, who.tenant_id, v)
    if ref.kind == "run":
        out["created"] = created
    if not v.terminal:
        raise AnswerAsTask(ref, out)
    return out


class _RunOrAgent(_Args):
    """A run named by treadle's `run_id` or by loomcycle's `agent_id` (its newest run), one of them."""

    run_id: str | None = Field(default=None, min_length=1, max_length=128)
    agent_id: str | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _one_id(self) -> _RunOrAgent:
        if (self.run_id is None) == (self.agent_id is None):
            raise ValueError("give agent_id (loomcycle's) or run_id, not both")
        return self

    async def resolve(self, rt: Runtime, who: Principal) -> str:
        if self.run_id is not None:
            return self.run_id
        assert self.agent_id is not None
        run = await loomcycle.latest_by_agent_id(rt, who.tenant_id, self.agent_id)
        if run is None:
            raise NotFound(f"agent {self.agent_id!r} not found", code="agent_not_found")
        return run.id


class GetRunArgs(_RunOrAgent):
    #: wait up to this long for the run to settle first (0: answer at once)
    wait_ms: int = Field(default=0, ge=0, le=int(MAX_WAIT_S * 1000))


@tool("get_run", "A run's state: status, stop_reason, usage, parent/root ids; wait_ms waits for it to "
      "settle first. By loomcycle's agent_id: its newest run's snapshot (GET /v1/agents/{agent_id}).", GetRunArgs)
async def get_run(rt: Runtime, who: Principal, a: GetRunArgs) -> dict[str, Any]:
    run_id = await a.resolve(rt, who)
    if a.wait_ms:
        await settle(rt, who.tenant_id, [run_id], _deadline(rt, a.wait_ms))
    if a.agent_id is not None:  # loomcycle's snapshot (GET /v1/agents/{agent_id})
        return await loomcycle.get_agent(a.agent_id, rt, who)
    return await runs.get_run(run_id, rt, who)


class ListRunsArgs(_Args):
    status: RunStatus | None = None
    limit: int = Field(default=50, ge=1, le=500)
    cursor: str | None = Field(default=None, max_length=512)
    user_id: str | None = Field(default=None, max_length=128)
    agent: str | None = Field(default=None, max_length=128)


@tool("list_runs", "The tenant's runs, newest first; pass next_cursor back as cursor for the next page.",
      ListRunsArgs)
async def list_runs(rt: Runtime, who: Principal, a: ListRunsArgs) -> dict[str, Any]:
    return await runs.list_runs(rt, who, a.status, a.limit, a.cursor, a.user_id, a.agent)


class CancelArgs(CancelRequest):
    run_id: str | None = Field(default=None, min_length=1, max_length=128)
    #: loomcycle's key: the whole run of that agent_id (POST /v1/agents/{agent_id}/cancel)
    agent_id: str | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _one_id(self) -> CancelArgs:
        if (self.run_id is None) == (self.agent_id is None):
            raise ValueError("give agent_id (loomcycle's) or run_id, not both")
        if self.agent_id is not None and self.scope is not None:
            raise ValueError("scope: only with run_id (an agent_id cancel ends the whole run, as loomcycle's)")
        return self


@tool("cancel_run", "Cancel a run (and its sub-agent runs) at its next safe point, by run_id or by "
      "loomcycle's agent_id; scope 'turn' (with run_id) stops only the current turn of an interactive run.",
      CancelArgs)
async def cancel_run(rt: Runtime, who: Principal, a: CancelArgs) -> dict[str, Any]:
    if a.agent_id is not None:
        return await loomcycle.cancel_agent(a.agent_id, rt, who, AgentCancelRequest(reason=a.reason))
    assert a.run_id is not None
    # the whole run unless scope says turn (POST …/cancel without scope is loomcycle's turn cancel)
    return await runs.cancel_run(a.run_id, rt, who, CancelRequest(reason=a.reason, scope=a.scope or "run"))


class TranscriptArgs(_Args):
    run_id: str = Field(min_length=1, max_length=128)
    from_seq: int = Field(default=0, ge=0)
    limit: int = Field(default=200, ge=1, le=1000)


@tool("get_transcript", "A page of a run's stored events after from_seq; pass next_from_seq back for the next "
      "page (null: nothing more stored yet).", TranscriptArgs)
async def get_transcript(rt: Runtime, who: Principal, a: TranscriptArgs) -> dict[str, Any]:
    page = await runs.get_events(a.run_id, rt, who, a.from_seq, a.limit)
    events = page["events"]
    page["next_from_seq"] = events[-1]["seq"] if len(events) == a.limit else None
    return page


class InputArgs(steering.InputRequest):
    run_id: str = Field(min_length=1, max_length=128)


async def _input(rt: Runtime, who: Principal, a: InputArgs) -> dict[str, Any]:
    out = await steering.post_input(a.run_id, steering.InputRequest(text=a.text), rt, who)
    run = await rt.runs.get(who.tenant_id, a.run_id)
    if TASK_MODE.get() is not None and run is not None and run.interactive and out.get("input_id") is not None:
        # a resident's turn: the task follows it until the resident parks for input again
        raise AnswerAsTask(TaskRef("send", (a.run_id,), int(out["input_id"])), out)
    return out


_STEER = ("Queue text as the run's next user turn (delivered at its next safe point), or wake an "
          "interactive run waiting for input.")
tool("steer_run", _STEER, InputArgs)(_input)
tool("send_input", _STEER + " (alias of steer_run)", InputArgs)(_input)


# -- interruptions ---------------------------------------------------------------------------------


class ListInterruptsArgs(_Args):
    run_id: str = Field(min_length=1, max_length=128)
    status: str | None = Field(default=None, max_length=16)


@tool("list_interrupts", "The questions a run asked (Interruption ask), optionally of one status.",
      ListInterruptsArgs)
async def list_interrupts(rt: Runtime, who: Principal, a: ListInterruptsArgs) -> dict[str, Any]:
    return await interrupts.list_interrupts(a.run_id, rt, who, a.status)


class ResolveArgs(_Args):
    run_id: str = Field(min_length=1, max_length=128)
    interrupt_id: str = Field(min_length=1, max_length=128)
    answer: str | None = Field(default=None, max_length=64_000)
    disposition: Literal["answer", "declined"] = "answer"


@tool("resolve_interrupt", "Answer (or decline) a run's pending question; the run wakes with the answer.",
      ResolveArgs)
async def resolve_interrupt(rt: Runtime, who: Principal, a: ResolveArgs) -> dict[str, Any]:
    body = interrupts.ResolveRequest(answer=a.answer, disposition=a.disposition, resolved_by="mcp")
    return await interrupts.resolve_interrupt(a.run_id, a.interrupt_id, body, rt, who)


tool("interruption_resolve", "loomcycle's name of resolve_interrupt.", ResolveArgs)(resolve_interrupt)


# -- memory and channels ---------------------------------------------------------------------------


class MemoryArgs(_Args):
    op: Literal["get", "set", "delete", "list", "search"]
    scope: memory.Scope
    scope_id: str
    key: str | None = None
    value: Any = None
    ttl_seconds: float | None = Field(default=None, gt=0)
    embed: bool = False
    prefix: str = ""
    limit: int = Field(default=200, ge=1, le=1000)
    query: str | None = None
    k: int | None = Field(default=None, ge=1)


@tool("memory", "The tenant's memory (as /v1/_memory): op get|set|delete|list|search in a scope "
      "(agent|user|tenant; the tenant scope's scope_id is '_').", MemoryArgs)
async def memory_tool(rt: Runtime, who: Principal, a: MemoryArgs) -> dict[str, Any]:
    if a.op == "list":
        return await memory.list_keys(a.scope, a.scope_id, rt, who, a.prefix, a.limit)
    if a.op == "search":
        body = memory.MemorySearch(scope=a.scope, scope_id=a.scope_id, query=a.query or "", k=a.k, prefix=a.prefix)
        return await memory.search(body, rt, who)
    if a.key is None:
        raise ValidationFailed(f"key: required for op {a.op!r}")
    if a.op == "get":
        return await memory.get_key(a.scope, a.scope_id, a.key, rt, who)
    if a.op == "delete":
        return await memory.delete_key(a.scope, a.scope_id, a.key, rt, who)
    if "value" not in a.model_fields_set:
        raise ValidationFailed("value: required for op 'set'")
    put = memory.MemoryPut(value=a.value, embed=a.embed, ttl_seconds=a.ttl_seconds)
    return await memory.put_key(a.scope, a.scope_id, a.key, put, rt, who)


class PublishArgs(channels.PublishBody):
    channel: str = Field(min_length=1, max_length=128)


@tool("publish_channel", "Publish a value to a channel (wakes the runs waiting on it).", PublishArgs)
async def publish_channel(rt: Runtime, who: Principal, a: PublishArgs) -> dict[str, Any]:
    return await rt.publish(who.tenant_id, a.channel, a.value, scope_id=a.scope_id, ttl_s=a.ttl_seconds,
                            deliver_at=parse_deliver_at(a.deliver_at))


class PeekArgs(_Args):
    channel: str = Field(min_length=1, max_length=128)
    scope_id: str = ""
    consumer: str = "mcp"
    max_messages: int = Field(default=10, ge=1, le=100)


@tool("peek_channel", "Read a channel's messages for a consumer without consuming them.", PeekArgs)
async def peek_channel(rt: Runtime, who: Principal, a: PeekArgs) -> dict[str, Any]:
    return await channels.peek(a.channel, rt, who, a.scope_id, a.consumer, a.max_messages)


class NoArgs(_Args):
    pass


@tool("list_channels", "The tenant's channels (treadle.yaml and created ones).", NoArgs)
async def list_channels(rt: Runtime, who: Principal, _a: NoArgs) -> dict[str, Any]:
    return await channels.list_channels(rt, who)


@tool("whoami", "The caller as treadle sees it: tenant, subject, scopes.", NoArgs)
async def whoami(_rt: Runtime, who: Principal, _a: NoArgs) -> dict[str, Any]:
    return principal_view(who)


# -- the runtime's pause (the operator's; api/pause.py) ----------------------------------------------


class PauseArgs(_Args):
    timeout_ms: int = Field(default=0, ge=0)


def _operator_across_tenants(who: Principal) -> None:
    from treadle.api.admin import _operator
    from treadle.store import scope as tenant_scope

    _operator(who)
    tenant_scope.unbind()  # the pause counts and wakes every tenant's runs


@tool("pause_runtime", "Pause the runtime (operator): new runs are refused (runtime_paused), every run parks at "
      "its next iteration boundary; answers {state, duration_ms, force_cancelled_count, paused_runs_count, "
      "warnings?} once all parked or at timeout_ms (default 30000).", PauseArgs)
async def pause_runtime(rt: Runtime, who: Principal, a: PauseArgs) -> dict[str, Any]:
    _operator_across_tenants(who)
    return await rt.pausing.pause(a.timeout_ms, budget_s=rt.sse_budget_s)


@tool("resume_runtime", "Resume a paused runtime (operator): every parked run goes on where it was. "
      "{state, resumed_runs_count}", NoArgs)
async def resume_runtime(rt: Runtime, who: Principal, _a: NoArgs) -> dict[str, Any]:
    _operator_across_tenants(who)
    return await rt.pausing.resume()


@tool("get_runtime_state", "The runtime's state (operator): {state: running|pausing|paused, paused_runs_count, "
      "active_runs_count}", NoArgs)
async def get_runtime_state(rt: Runtime, who: Principal, _a: NoArgs) -> dict[str, Any]:
    _operator_across_tenants(who)
    return await rt.pausing.state()


# -- the *Def families: the op input of the builtin tool of the same kind ----------------------------

#: meta-tool name → the runtime's op service (Runtime's `_OpServices` names, the builtin tools' names)
DEF_TOOLS = {"agentdef": "AgentDef", "skilldef": "SkillDef", "scheduledef": "ScheduleDef",
             "webhookdef": "WebhookDef", "evaluation": "Evaluation", "teamdef": "TeamDef", "volumedef": "VolumeDef"}


def _def_handler(service: str) -> Handler:
    async def handler(rt: Runtime, who: Principal, args: dict[str, Any]) -> dict[str, Any]:
        return await rt.engine.tools.ops[service].dispatch(who.tenant_id, args)

    return handler


@tool("mcpserverdef", "The MCPServerDef ops (as POST /v1/_mcpserverdef): create (discovers the server's "
      "tools unless discover is false), fork, get, list, retire, promote, verify, rediscover.", None)
async def mcpserverdef(rt: Runtime, who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await rt.mcp_defs.dispatch(who.tenant_id, args)


@tool("operatortokendef", "The OperatorTokenDef ops (as POST /v1/_operatortokendef): create (a bearer, shown "
      "once), rotate, retire, get, list; an operator may name another tenant_id.", None)
async def operatortokendef(rt: Runtime, who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await tokens.operator_token_dispatch(rt, who, args)


#: loomcycle's `path` and `document` meta-tools: the tools' input, on the caller's own store (as
#: POST /v1/_path and /v1/_document without ?scope_id=/?tenant=)
KNOWLEDGE_TOOLS = {"path": "Path", "document": "Document"}


@tool("path", "Path tool ops (as POST /v1/_path): resolve, ls, stat, mkdir, mv, rm over the caller's Path tree "
      "(scope agent | user | tenant).", None)
async def path_tool(rt: Runtime, who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    from treadle.api.knowledge import caller_tree, run_op
    from treadle.builtins.path import path_op
    from treadle.store.dirents import DirentStore

    return await run_op("Path", lambda: path_op(
        DirentStore(rt.pool), caller_tree(who, args.get("scope"), "agent", None, None, "Path"), args))


@tool("document", "Document tool ops (as POST /v1/_document): documents, chunks (update_chunk with the revision "
      "read; a stale one is refused), edges, types, queries, revisions, Markdown — in the caller's store.", None)
async def document_tool(rt: Runtime, who: Principal, args: dict[str, Any]) -> dict[str, Any]:
    from treadle.api.knowledge import caller_tree, run_op
    from treadle.builtins.document import document_op
    from treadle.store.dirents import DirentStore

    return await run_op("Document", lambda: document_op(
        DirentStore(rt.pool), caller_tree(who, args.get("scope"), "user", None, None, "Document"), args,
        who.subject, rt.substrate.memory))


for _name, _service in DEF_TOOLS.items():
    tool(_name, f"The {_service} ops (as POST /v1/_{_name}): the input is the {_service} tool's "
         "{op, ...}.", None)(_def_handler(_service))


# -- the MCP surface -------------------------------------------------------------------------------


@cache
def _args_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def _schema(rt: Runtime, meta: MetaTool) -> dict[str, Any]:
    if meta.args is not None:
        return _args_schema(meta.args)
    named = DEF_TOOLS.get(meta.name) or KNOWLEDGE_TOOLS.get(meta.name)
    builtin = rt.registry.get(named) if named is not None else None
    if builtin is not None:
        return dict(builtin.input_schema)
    return {"type": "object", "properties": {"op": {"type": "string"}}, "required": ["op"]}


def list_tools(rt: Runtime, who: Principal) -> list[types.Tool]:
    """The meta-tools the caller's scopes allow (api/auth.py TOOL_SCOPES)."""
    return [types.Tool(name=m.name, description=m.description, input_schema=_schema(rt, m),
                       execution=_TASK_OPTIONAL if m.name in TASK_TOOLS else None)
            for m in TOOLS.values() if may_call_tool(who, m.name)]


#: 2025-11-25: the long tools may be called with `task` (2026-07-28: the server decides)
_TASK_OPTIONAL = types.ToolExecution(task_support="optional")


def tool_error(code: str, message: str) -> types.CallToolResult:
    body = {"code": code, "error": message}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(body))], structured_content=body, is_error=True
    )


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid arguments"}
    where = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
    return f"{where}: {first.get('msg', '')}"


async def call_tool(rt: Runtime, who: Principal, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    meta = TOOLS.get(name)
    if meta is None:
        return tool_error("unknown_tool", f"no tool named {name!r}; tools/list names them")
    if not may_call_tool(who, name):
        return tool_error("insufficient_scope", f"this token lacks the scope {tool_scope(name)} ({name})")
    try:
        args: Any = meta.args.model_validate(arguments) if meta.args is not None else dict(arguments)
        result = await meta.handler(rt, who, args)
    except AnswerAsTask:
        raise  # the work goes on: the server answers with a task or a question (taskmethods.py)
    except ValidationError as exc:
        return tool_error("validation_error", _validation_message(exc))
    except TreadleError as exc:
        if exc.status >= 500:
            log.error("mcp %s: %s: %s", name, exc.code, exc.message)
        return tool_error(exc.code, exc.message)
    except psycopg.DataError as exc:
        log.warning("mcp %s: refused input: %s", name, exc)
        return tool_error("invalid_input", "the arguments hold a value that cannot be stored")
    except Exception:
        log.exception("mcp %s: unhandled error", name)
        return tool_error("internal_error", "internal error")
    text = json.dumps(result, default=str)
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=json.loads(text)
    )
