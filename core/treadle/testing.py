"""Helpers for testing treadle agents — treadle's own tests use them, and so can yours.

- `open_test_runtime`: a Runtime on a database of yours, with steps run in-process by an
  `InlineDispatcher` (`await dispatcher.drain()` runs every queued step to the end), or with
  the Postgres queue (`inline=False`).
- `ScriptedProvider`: a model the test drives turn by turn, like pydantic-ai's FunctionModel:
  a function of the `ModelRequest` gives each answer.
- `age_run`, `age_message`, `age_memory`, `expire_lease`, `sweep`: move a run's, a channel
  message's or a memory entry's clocks into the past (and sweep), instead of sleeping until a
  lease, a deadline, a `deliver_at` or a TTL passes.
- `until`: wait for a condition under a deadline, failing with what it last saw;
  `user_text`: the segments of one user turn, for `NewRun(segments=...)`.
- `ACCEPT_JSON`: the header a test's HTTP client sends to get `POST /v1/runs`' JSON answer
  (202) — without it the route answers with the run's SSE stream, as loomcycle does.

A run with a scripted model, two iterations and one tool call::

    def model(req: ModelRequest) -> Reply:
        if not tool_results(req):
            return [tool_use("Memory", {"op": "set", "scope": "agent", "key": "k", "value": 1})]
        return "done"

    agents = {"a": {"provider": "scripted", "model": "echo", "tools": ["Memory"]}}
    async with open_test_runtime(agents, database_url=url, providers=[ScriptedProvider(model)]) as (rt, d):
        run, _ = await rt.start_run(NewRun(tenant_id="t", agent="a", segments=[...]))
        await d.drain()

Providers passed to `open_test_runtime` that the config does not declare are declared for you
(as `providers: {<name>: {driver: mock}}`), so agents can name them; such an agent's `model`
must be one of the mock models (`echo`, `tool-caller`, `script`), and is only passed along in
`ModelRequest.model`.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, TypeAlias, overload

import psycopg

from treadle.builtins.registry import default_registry
from treadle.config import Settings, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.domain.content import Block, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.domain.events import EventType
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Provider, Usage
from treadle.runtime import Runtime
from treadle.store.db import Pool
from treadle.tools.base import Tool

__all__ = [
    "ACCEPT_JSON",
    "Reply",
    "ScriptedProvider",
    "UntilTimeout",
    "age_memory",
    "age_message",
    "age_run",
    "expire_lease",
    "open_test_runtime",
    "sweep",
    "tool_results",
    "tool_use",
    "until",
    "user_text",
]

#: what a scripted model function returns: a whole response, a text, or the content blocks
Reply: TypeAlias = ModelResponse | str | Sequence[Block]
ScriptFunction: TypeAlias = Callable[[ModelRequest], Reply | Awaitable[Reply]]
Database: TypeAlias = Runtime | Pool | str

#: a test client's default header: POST /v1/runs answers `202 {run_id, …}`, not the run's SSE stream
#: (which an ASGI transport would read to the run's end before answering)
ACCEPT_JSON: Mapping[str, str] = {"Accept": "application/json"}

#: settings a test runtime gets unless the caller gives its own (tests' runtimes are small)
TEST_SETTINGS: dict[str, Any] = {"workers": 4, "chain_steps": 1}


# -- the runtime ------------------------------------------------------------------------------------


@overload
def open_test_runtime(
    agents: Mapping[str, Any],
    *,
    database_url: str,
    config: Mapping[str, Any] | None = None,
    inline: Literal[True] = True,
    providers: Iterable[Provider] | Mapping[str, Provider] | None = None,
    tools: Iterable[Tool] = (),
    **settings: Any,
) -> AbstractAsyncContextManager[tuple[Runtime, InlineDispatcher]]: ...


@overload
def open_test_runtime(
    agents: Mapping[str, Any],
    *,
    database_url: str,
    config: Mapping[str, Any] | None = None,
    inline: bool,
    providers: Iterable[Provider] | Mapping[str, Provider] | None = None,
    tools: Iterable[Tool] = (),
    **settings: Any,
) -> AbstractAsyncContextManager[tuple[Runtime, Any]]: ...


def open_test_runtime(
    agents: Mapping[str, Any],
    *,
    database_url: str,
    config: Mapping[str, Any] | None = None,
    inline: bool = True,
    providers: Iterable[Provider] | Mapping[str, Provider] | None = None,
    tools: Iterable[Tool] = (),
    **settings: Any,
) -> AbstractAsyncContextManager[tuple[Runtime, Any]]:
    """`async with open_test_runtime(agents, database_url=url) as (rt, dispatcher):` — a Runtime
    with treadle.yaml's `agents:` = `agents` and its other top-level sections from `config` (an
    `agents:` there is merged under `agents`), migrated onto `database_url`, closed on exit.

    `inline=True` (default): the dispatcher is an `InlineDispatcher`; nothing runs until
    `await dispatcher.drain()`. `inline=False`: the Postgres queue (`rt.dispatcher`), whose
    workers the caller starts. `providers`: extra Provider instances (a list, by their `name`, or
    a mapping by id); they replace built-in ones of the same id (`mock`). `tools`: extra Tool
    instances, registered beside the built-in ones (agents name them in `tools:`). `settings` are
    `Settings` fields (`workers`, `lease_seconds`, `requeue_after_seconds`, `home`, ...); a test
    runtime has `workers=4, chain_steps=1` unless given."""
    return _open(agents, database_url, config, inline, _by_id(providers), list(tools), settings)


@asynccontextmanager
async def _open(
    agents: Mapping[str, Any],
    database_url: str,
    config: Mapping[str, Any] | None,
    inline: bool,
    providers: dict[str, Provider],
    tools: list[Tool],
    settings: dict[str, Any],
) -> AsyncIterator[tuple[Runtime, Any]]:
    data: dict[str, Any] = dict(config or {})
    data["agents"] = {**(data.get("agents") or {}), **agents}
    declared = dict(data.get("providers") or {})
    for pid in providers:
        if pid != "mock":
            declared.setdefault(pid, {"driver": "mock"})
    if declared:
        data["providers"] = declared
    s = Settings(database_url=database_url, **{**TEST_SETTINGS, **settings})
    dispatcher = InlineDispatcher() if inline else None
    registry = None
    if tools:
        registry = default_registry()
        for tool in tools:
            registry.register(tool)
    rt = await Runtime.open(
        s,
        parse_config(data),
        dispatcher_factory=(lambda _pool, _url: dispatcher) if dispatcher is not None else None,
        registry=registry,
        providers=providers or None,
    )
    try:
        if dispatcher is not None:
            dispatcher.handler = rt.engine.handle
        yield rt, (dispatcher if dispatcher is not None else rt.dispatcher)
    finally:
        await rt.close()


def _by_id(providers: Iterable[Provider] | Mapping[str, Provider] | None) -> dict[str, Provider]:
    if providers is None:
        return {}
    if isinstance(providers, Mapping):
        return dict(providers)
    return {p.name: p for p in providers}


def user_text(text: str) -> list[dict[str, Any]]:
    """The segments of one user turn saying `text` (trusted), as `NewRun.segments` takes them."""
    return [{"role": "user", "content": [{"type": "trusted-text", "text": text}]}]


# -- waiting ----------------------------------------------------------------------------------------


class UntilTimeout(AssertionError, TimeoutError):
    """`until`'s condition stayed falsy past its timeout: a failed assertion to pytest, and a
    `TimeoutError` to code that waits for liveness."""


async def until(
    cond: Callable[[], Any], timeout: float = 10.0, *, interval: float = 0.01, what: str | None = None
) -> Any:
    """Call `cond()` (sync, or returning an awaitable) every `interval` seconds until it returns
    something truthy, and return that. After `timeout` seconds raise `UntilTimeout`, naming `what`
    (or the condition) and the value it last returned — so a test that never sees its condition
    fails, and says what it saw instead."""
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        tries += 1
        if value:
            return value
        if time.monotonic() >= deadline:
            name = what or getattr(cond, "__qualname__", repr(cond))
            raise UntilTimeout(f"timed out after {timeout} s ({tries} tries) waiting for {name}; last saw {value!r}")
        await asyncio.sleep(interval)


# -- a scripted model -------------------------------------------------------------------------------


def tool_use(name: str, input: Mapping[str, Any] | None = None, *, id: str = "") -> ToolUseBlock:
    """A tool call for a scripted answer; `ScriptedProvider` fills an empty `id` with one derived
    from the run, the iteration and the call's position (the same on a re-delivered step)."""
    return ToolUseBlock(id, name, dict(input or {}))


def tool_results(req: ModelRequest) -> list[ToolResultBlock]:
    """Every tool result in the request's transcript, oldest first."""
    return [b for m in req.messages for b in m.content if isinstance(b, ToolResultBlock)]


class ScriptedProvider:
    """A provider whose every answer comes from `fn(request)` (sync or async), which returns:

    - a `ModelResponse`, used as is;
    - a `str`: one text block, `stop_reason="end_turn"`;
    - a list of blocks: `stop_reason="tool_use"` when one is a `ToolUseBlock`, else `"end_turn"`.

    `requests` records every request, in order. Text is streamed to `on_delta` in one piece."""

    def __init__(self, fn: ScriptFunction, *, name: str = "scripted") -> None:
        self.fn = fn
        self.name = name
        self.requests: list[ModelRequest] = []

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        self.requests.append(req)
        reply = self.fn(req)
        if inspect.isawaitable(reply):
            reply = await reply
        resp = self._response(req, reply)
        if on_delta is not None:
            for block in resp.content:
                if isinstance(block, TextBlock) and block.text:
                    await on_delta("text", block.text)
        return resp

    def _response(self, req: ModelRequest, reply: Reply) -> ModelResponse:
        if isinstance(reply, ModelResponse):
            return reply
        blocks: list[Block] = [TextBlock(reply)] if isinstance(reply, str) else list(reply)
        for i, block in enumerate(blocks):
            if isinstance(block, ToolUseBlock) and not block.id:
                blocks[i] = ToolUseBlock(_tool_use_id(req, i), block.name, block.input)
        stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in blocks) else "end_turn"
        out_chars = sum(len(b.text) if isinstance(b, TextBlock) else 16 for b in blocks)
        return ModelResponse(
            content=blocks,
            stop_reason=stop,
            usage=Usage(input_tokens=1, output_tokens=max(1, out_chars // 4)),
            model=req.model,
            provider=self.name,
        )


def _tool_use_id(req: ModelRequest, index: int) -> str:
    run_id, iteration = (req.run.run_id, req.run.iteration) if req.run is not None else ("", 0)
    digest = hashlib.blake2b(f"scripted\x1f{run_id}\x1f{iteration}\x1f{index}".encode(), digest_size=12)
    return "toolu_" + digest.hexdigest()


# -- clocks -----------------------------------------------------------------------------------------

_AGE_RUN = [
    "UPDATE runs SET lease_until = lease_until - make_interval(secs => %(s)s)"
    " WHERE id = %(run)s AND lease_until IS NOT NULL",
    "UPDATE run_waits SET deadline = deadline - make_interval(secs => %(s)s)"
    " WHERE run_id = %(run)s AND deadline IS NOT NULL",
    # the deadline the parked tool call recorded (a woken tool compares it with the clock)
    "UPDATE events SET payload = jsonb_set(payload, '{wait,deadline}',"
    " to_jsonb((payload #>> '{wait,deadline}')::float8 - %(s)s))"
    f" WHERE run_id = %(run)s AND type = '{EventType.TOOL_PARKED}'"
    " AND jsonb_typeof(payload #> '{wait,deadline}') = 'number'",
    "UPDATE interrupts SET expires_at = expires_at - make_interval(secs => %(s)s)"
    " WHERE run_id = %(run)s AND status = 'pending' AND expires_at IS NOT NULL",
    "UPDATE jobs SET run_at = run_at - make_interval(secs => %(s)s) WHERE run_id = %(run)s",
]


async def age_run(db: Database, run_id: str, seconds: float) -> None:
    """Move run `run_id`'s clocks `seconds` into the past, as if that much time went by: its
    lease or re-queue deadline (`runs.lease_until`), its wait deadlines (`run_waits.deadline`
    and the deadline its parked tool calls recorded), its pending questions' `expires_at`, and
    its queued jobs' `run_at`. `db`: a Runtime, its pool, or a database URL."""
    await _execute(db, [(sql, {"s": float(seconds), "run": run_id}) for sql in _AGE_RUN])


_AGE_MESSAGE = [
    # the timed poke that wakes the stream's parked readers at the message's visible_at
    "UPDATE wait_timers w SET due_at = w.due_at - make_interval(secs => %(s)s) FROM channel_messages m"
    " WHERE m.id = %(id)s AND w.tenant_id = m.tenant_id AND w.due_at = m.visible_at"
    " AND w.key = 'channel:' || m.channel || ':' || m.scope_id",  # store/channels.py channel_key
    "UPDATE channel_messages SET published_at = published_at - make_interval(secs => %(s)s),"
    " visible_at = visible_at - make_interval(secs => %(s)s),"
    " expires_at = expires_at - make_interval(secs => %(s)s),"
    " claimed_at = claimed_at - make_interval(secs => %(s)s) WHERE id = %(id)s",
]


async def age_message(db: Database, message_id: int, seconds: float) -> bool:
    """Move channel message `message_id`'s clocks `seconds` into the past, as if that much time
    went by since it was published: `published_at`, `visible_at` (a `deliver_at` passes, and the
    timed wake of the stream's parked readers with it), `expires_at` (a TTL runs out) and
    `claimed_at`. False when there is no such message."""
    rows = await _execute(db, [(sql, {"s": float(seconds), "id": message_id}) for sql in _AGE_MESSAGE])
    return rows[-1] == 1


async def age_memory(
    db: Database, tenant_id: str, key: str, seconds: float, *, scope: str | None = None, scope_id: str | None = None
) -> int:
    """Move memory entry `key`'s clocks (`created_at`, `updated_at`, `expires_at`) `seconds` into
    the past, as if that much time went by since it was written: a TTL shorter than `seconds`
    has run out. Every scope's `key` of the tenant, unless `scope`/`scope_id` narrow it; returns
    how many entries moved."""
    rows = await _execute(
        db,
        [("UPDATE memory SET created_at = created_at - make_interval(secs => %(s)s),"
          " updated_at = updated_at - make_interval(secs => %(s)s),"
          " expires_at = expires_at - make_interval(secs => %(s)s)"
          " WHERE tenant_id = %(t)s AND key = %(k)s"
          " AND (%(scope)s::text IS NULL OR scope::text = %(scope)s)"
          " AND (%(sid)s::text IS NULL OR scope_id = %(sid)s)",
          {"s": float(seconds), "t": tenant_id, "k": key, "scope": scope, "sid": scope_id})],
    )
    return rows[0]


async def expire_lease(db: Database, run_id: str) -> bool:
    """Put run `run_id`'s lease (or re-queue deadline) in the past, as if its worker died: the
    next sweep re-enqueues its step. False when the run is not queued or running."""
    rows = await _execute(
        db,
        [("UPDATE runs SET lease_until = now() - interval '1 second'"
          " WHERE id = %(run)s AND status IN ('queued', 'running')", {"run": run_id})],
    )
    return rows[0] == 1


async def sweep(rt: Runtime) -> int:
    """One pass of the sweeper: re-enqueue the steps whose lease passed and wake the runs whose
    wait deadline passed. Returns how many steps were re-enqueued plus how many runs woke."""
    due = await rt.steps.sweep_expired()
    for run_id, step_no in due:
        await rt.sender.next_step(run_id, step_no)  # the sweep statement enqueued it with jobs_in_db
    return len(due) + await rt.wake_due()


async def _execute(db: Database, statements: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """Run `statements` in one transaction; returns each one's row count."""
    if isinstance(db, str):
        async with await psycopg.AsyncConnection.connect(db) as conn, conn.transaction():
            return [(await conn.execute(sql, params)).rowcount for sql, params in statements]
    pool = db.pool if isinstance(db, Runtime) else db
    async with pool.connection() as pconn, pconn.transaction():
        return [(await pconn.execute(sql, params)).rowcount for sql, params in statements]
