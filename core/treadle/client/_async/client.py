"""AsyncTreadle: the one implementation of the client (the sync `Treadle` in _sync/client.py is
generated from this file by unasync; edit here, then `python -m treadle.client.generate`).

    async with AsyncTreadle() as tl:            # TREADLE_URL / TREADLE_TOKEN from the environment
        started = await tl.runs.start("demo", "hello")
        async for ev in tl.runs.stream(started.run_id):
            ...
        run = await tl.runs.get(started.run_id)

Every call retries on connection loss when that is safe (client/_base.py `Retry`); a run stream
resumes after the last seq it saw, with `from_seq`, until the run's `done` or `error`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel

from treadle import wire
from treadle.client import models as m
from treadle.client._base import (
    JSON,
    NO_RETRY,
    TERMINAL_STATUSES,
    Call,
    Retry,
    SseDecoder,
    SseEvent,
    StreamCursor,
    api_error,
    body_of,
    clean,
    decode,
    resolve_token,
    resolve_url,
)
from treadle.client._sleep import async_sleep

T = TypeVar("T", bound=BaseModel)
Scope = Literal["agent", "user", "tenant"]
# (the resources have a method named `list`: inside them the builtin is spelled through these)
JsonList = list[dict[str, Any]]
StrList = list[str]


class AsyncTreadle:
    """A treadle server's HTTP API. `url` defaults to $TREADLE_URL (else http://127.0.0.1:8787),
    `token` to $TREADLE_TOKEN (else $TREADLE_AUTH_TOKEN); `tenant` sends X-Treadle-Tenant (an
    admin token acting for a tenant)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        tenant: str | None = None,
        timeout: float = 30.0,
        retry: Retry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = resolve_url(url)
        token = resolve_token(token)
        headers = {"User-Agent": "treadle-client"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if tenant:
            headers["X-Treadle-Tenant"] = tenant
        self.retry = retry or Retry()
        self.http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, transport=transport)
        self.runs = AsyncRuns(self)
        self.agents = AsyncAgents(self)
        self.sessions = AsyncSessions(self)
        self.memory = AsyncMemory(self)
        self.channels = AsyncChannels(self)
        self.agentdefs = AsyncDefs(self, "/v1/_agentdef")
        self.skilldefs = AsyncDefs(self, "/v1/_skilldef")
        self.volumedefs = AsyncDefs(self, "/v1/_volumedef")
        self.scheduledefs = AsyncDefs(self, "/v1/_scheduledef")
        self.webhookdefs = AsyncDefs(self, "/v1/_webhookdef")
        self.operatortokendefs = AsyncDefs(self, "/v1/_operatortokendef")
        self.evaluations = AsyncDefs(self, "/v1/_evaluation")
        self.schedules = AsyncSchedules(self)
        self.webhooks = AsyncWebhooks(self)
        self.hooks = AsyncHooks(self)
        self.admin = AsyncAdmin(self)
        self.residents = AsyncResidents(self)

    async def __aenter__(self) -> AsyncTreadle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- the transport -----------------------------------------------------------------------------

    async def send(self, call: Call, retry: Retry | None = None) -> httpx.Response:
        """One request, retried on connection loss when `retry` allows it."""
        policy = retry or self.retry
        attempt = 0
        while True:
            try:
                return await self.http.request(call.method, call.path, params=call.params, json=call.json,
                                               headers=call.headers)
            except httpx.TransportError as exc:
                attempt += 1
                if attempt >= policy.attempts or not policy.may_retry(exc, call.method, call.headers):
                    raise
                await async_sleep(policy.delay(attempt))

    async def json(self, call: Call) -> Any:
        return decode(await self.send(call))

    async def model(self, call: Call, model: type[T]) -> T:
        return model.model_validate(await self.json(call))

    async def events(self, call: Call, cursor: StreamCursor) -> AsyncIterator[SseEvent]:
        """A run's SSE, resumed after the last seq on every lost connection or ended response,
        until the run's `done`/`error` (or, with no events left, a terminal run)."""
        failures = 0
        while True:
            seen = lost = False
            try:
                headers = {"Accept": "text/event-stream", **call.headers}
                async with self.http.stream(call.method, call.path, params=call.params, json=call.json,
                                            headers=headers, timeout=httpx.Timeout(self.http.timeout.connect,
                                                                                    read=None)) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise api_error(resp)
                    decoder = SseDecoder()
                    async for line in resp.aiter_lines():
                        ev = decoder.line(line)
                        if ev is not None and cursor.accept(ev):
                            seen = seen or ev.id is not None
                            failures = 0
                            yield ev
                            if cursor.done:
                                return
            except httpx.TransportError as exc:
                failures += 1
                if failures >= self.retry.attempts or not self.retry.may_retry(exc, call.method, call.headers):
                    raise
                await async_sleep(self.retry.delay(failures))
                lost = True
            if cursor.run_id is None:
                # a start lost before its `started` event: sent again with the same Idempotency-Key
                # (the server answers with the run it created); a response that simply ended: done
                if lost:
                    continue
                return
            if not seen and not lost:
                run = await self.runs.get(cursor.run_id)
                if run.status in TERMINAL_STATUSES and run.last_seq <= cursor.last:
                    return
            cursor.resumed = True
            call = Call("GET", f"/v1/runs/{cursor.run_id}/stream", params={"from_seq": cursor.last})

    # -- the server ----------------------------------------------------------------------------------

    async def health(self) -> m.Health:
        return await self.model(Call("GET", "/healthz"), m.Health)

    async def me(self) -> m.Whoami:
        """GET /v1/_me: the principal the token acts as (loomcycle's name)."""
        return await self.model(Call("GET", "/v1/_me"), m.Whoami)

    async def whoami(self) -> m.Whoami:
        """GET /v1/_whoami: the principal the token acts as."""
        return await self.model(Call("GET", "/v1/_whoami"), m.Whoami)


class AsyncResource:
    def __init__(self, client: AsyncTreadle) -> None:
        self.client = client


class AsyncRuns(AsyncResource):
    """/v1/runs: start, stream (resumable), read, list, cancel, steer, answer questions."""

    @staticmethod
    def _body(agent: str, prompt: str | None, fields: dict[str, Any]) -> dict[str, Any]:
        """The POST /v1/runs body, checked by the server's own model before it is sent."""
        return body_of(wire.RunRequest(**clean({"agent": agent, "prompt": prompt, **fields})))

    async def start(
        self,
        agent: str,
        prompt: str | None = None,
        *,
        segments: JsonList | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        interactive: bool | None = None,
        client_tools: JsonList | None = None,
        client_tool_timeout_seconds: float | None = None,
        allowed_hosts: StrList | None = None,
        user_credentials: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> m.RunCreated:
        """Start a run (202: `Accept: application/json`, where the server's default answer is the
        run's stream). An Idempotency-Key is sent with every start (a fresh one unless given), so
        a retry after a lost connection gets the same run back, never a second one.
        `extra`: loomcycle's further run fields (agent_id, parent_context, …)."""
        body = self._body(agent, prompt, dict(
            segments=segments, user_id=user_id, metadata=metadata, interactive=interactive,
            client_tools=client_tools, client_tool_timeout_seconds=client_tool_timeout_seconds,
            allowed_hosts=allowed_hosts, user_credentials=user_credentials, **extra))
        key = idempotency_key or uuid.uuid4().hex
        return await self.client.model(Call("POST", "/v1/runs", json=body, headers={"Idempotency-Key": key, **JSON}),
                                       m.RunCreated)

    def start_streaming(
        self,
        agent: str,
        prompt: str | None = None,
        *,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> AsyncIterator[SseEvent]:
        """Start a run and stream its events (loomcycle's `session` and `agent` frames first),
        resumed after the last seq if the connection drops, until `done` or `error`. The run is
        started with `detach: true` (so a dropped connection, resumed, has not cancelled it; and
        leaving the iterator early leaves the run going): pass `detach=False` for loomcycle's rule,
        the client leaving cancels the run."""
        key = idempotency_key or uuid.uuid4().hex
        body = self._body(agent, prompt, {"detach": True, **fields})
        call = Call("POST", "/v1/runs", json=body, headers={"Idempotency-Key": key})
        return self.client.events(call, StreamCursor(None, 0))

    def stream(self, run_id: str, from_seq: int = 0) -> AsyncIterator[SseEvent]:
        """The run's events after `from_seq` (0: from the start), live until it ends; a dropped
        connection or an ended response is resumed after the last seq seen (no gap, no repeat)."""
        call = Call("GET", f"/v1/runs/{run_id}/stream", params={"from_seq": from_seq})
        return self.client.events(call, StreamCursor(run_id, from_seq))

    async def wait(self, run_id: str, from_seq: int = 0) -> m.Run:
        """Follow the run until it ends; its final state."""
        async for _ in self.stream(run_id, from_seq):
            pass
        return await self.get(run_id)

    async def get(self, run_id: str) -> m.Run:
        return await self.client.model(Call("GET", f"/v1/runs/{run_id}"), m.Run)

    async def list(
        self,
        *,
        status: m.RunStatus | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        user_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
    ) -> m.RunList:
        """One page, newest first; pass `next_cursor` back as `cursor` for the next. `parent_run_id`:
        that run's sub-agent runs; `created_after` (inclusive) / `created_before`: a window."""
        params = clean({"status": status, "limit": limit, "cursor": cursor, "user_id": user_id, "agent": agent,
                        "parent_run_id": parent_run_id,
                        "created_after": created_after.isoformat() if created_after else None,
                        "created_before": created_before.isoformat() if created_before else None})
        return await self.client.model(Call("GET", "/v1/runs", params=params), m.RunList)

    async def iterate(self, *, status: m.RunStatus | None = None, user_id: str | None = None,
                      agent: str | None = None, parent_run_id: str | None = None,
                      created_after: datetime | None = None, created_before: datetime | None = None,
                      page_size: int = 100) -> AsyncIterator[m.Run]:
        """Every matching run, newest first, page by page."""
        cursor: str | None = None
        while True:
            page = await self.list(status=status, limit=page_size, cursor=cursor, user_id=user_id, agent=agent,
                                   parent_run_id=parent_run_id, created_after=created_after,
                                   created_before=created_before)
            for run in page.runs:
                yield run
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def events(self, run_id: str, from_seq: int = 0, limit: int | None = None) -> m.RunEvents:
        params = clean({"from_seq": from_seq, "limit": limit})
        return await self.client.model(Call("GET", f"/v1/runs/{run_id}/events", params=params), m.RunEvents)

    async def cancel(self, run_id: str, reason: str | None = None) -> m.RunCancelled:
        """End the run (and its unfinished sub-agent runs) at its next safe point; a finished run
        is left as it is (its status is in the answer)."""
        body = body_of(wire.CancelRequest(**clean({"reason": reason, "scope": "run"})))
        return await self.client.model(Call("POST", f"/v1/runs/{run_id}/cancel", json=body), m.RunCancelled)

    async def cancel_turn(self, run_id: str, reason: str | None = None) -> m.TurnCancelled:
        """Stop the current turn of an interactive run; it then waits for input again."""
        body = body_of(wire.CancelRequest(**clean({"reason": reason, "scope": "turn"})))
        return await self.client.model(Call("POST", f"/v1/runs/{run_id}/cancel", json=body), m.TurnCancelled)

    async def fork(self, run_id: str, at_seq: int, *, prompt: str | None = None, agent: str | None = None,
                   def_id: str | None = None, mode: Literal["live", "replay"] = "live",
                   idempotency_key: str | None = None) -> m.ForkResult:
        """A new run whose history is this one's up to event `at_seq` (tool exchanges kept whole),
        its first turn `prompt` or the last user turn asked again, of `agent` / AgentDef `def_id`;
        `mode="replay"` answers its tool calls from this run's recorded results until it diverges
        (docs/conversations.md). A retry with the same key (one is made when none is given)
        returns the same fork."""
        body = body_of(wire.ForkRequest(**clean({"at_seq": at_seq, "prompt": prompt, "agent": agent,
                                                 "def_id": def_id, "mode": mode})))
        key = idempotency_key or uuid.uuid4().hex
        return await self.client.model(Call("POST", f"/v1/runs/{run_id}/fork", json=body,
                                            headers={"Idempotency-Key": key}), m.ForkResult)

    async def input(self, run_id: str, text: str) -> m.InputAccepted:
        """Steer a run, or answer an interactive run waiting for input (its next user turn)."""
        body = body_of(wire.InputRequest(text=text))
        return await self.client.model(Call("POST", f"/v1/runs/{run_id}/input", json=body), m.InputAccepted)

    async def tool_result(self, run_id: str, tool_use_id: str, content: str, *,
                          is_error: bool = False) -> m.ToolResultAccepted:
        """The result of a client tool call the run is parked on."""
        body = body_of(wire.ToolResultRequest(tool_use_id=tool_use_id, content=content, is_error=is_error))
        return await self.client.model(Call("POST", f"/v1/runs/{run_id}/tool_results", json=body),
                                       m.ToolResultAccepted)

    async def interrupts(self, run_id: str, status: str | None = None) -> m.RunInterrupts:
        """The run's questions (`status`: pending, resolved, declined, timed_out, cancelled)."""
        params = clean({"status": status})
        return await self.client.model(Call("GET", f"/v1/runs/{run_id}/interrupts", params=params),
                                       m.RunInterrupts)

    async def user_interrupts(self, user_id: str, status: str | None = None,
                              limit: int | None = None) -> m.UserInterrupts:
        """A user's inbox across runs (default: pending; `status="all"` for every one)."""
        params = clean({"status": status, "limit": limit})
        return await self.client.model(Call("GET", f"/v1/users/{user_id}/interrupts", params=params),
                                       m.UserInterrupts)

    async def inbox(self, status: str | None = None, limit: int | None = None) -> m.TenantInterrupts:
        """The tenant's inbox: every run's questions, newest first (default: pending), each with
        its run's agent, user and parent."""
        params = clean({"status": status, "limit": limit})
        return await self.client.model(Call("GET", "/v1/interrupts", params=params), m.TenantInterrupts)

    async def answer(self, run_id: str, interrupt_id: str, answer: str | None = None, *,
                     decline: bool = False,
                     resolved_by: Literal["webui", "mcp", "cli", "api", "client"] = "client") -> m.InterruptResolved:
        """Answer (or decline) a pending question; the run wakes with it."""
        body = body_of(wire.ResolveRequest(**clean({"answer": answer, "resolved_by": resolved_by,
                                                    "disposition": "declined" if decline else "answer"})))
        return await self.client.model(
            Call("POST", f"/v1/runs/{run_id}/interrupts/{interrupt_id}/resolve", json=body), m.InterruptResolved)

    async def batch(self, spawns: JsonList, timeout_ms: int | None = None) -> m.BatchResult:
        """loomcycle's batch spawn (≤ 32 run bodies), index-aligned results; with `timeout_ms` the
        answer waits (that long at most) for the runs to finish."""
        body = body_of(wire.BatchRequest(**clean({"spawns": spawns, "timeout_ms": timeout_ms})))
        return await self.client.model(Call("POST", "/v1/runs:batch", json=body), m.BatchResult)


class AsyncAgents(AsyncResource):
    """loomcycle's agent handles (`agent_id`) and session transcripts."""

    async def get(self, agent_id: str) -> m.AgentState:
        return await self.client.model(Call("GET", f"/v1/agents/{agent_id}"), m.AgentState)

    async def cancel(self, agent_id: str, reason: str | None = None) -> m.AgentCancelled:
        """Cancel the agent's run and its sub-agents (loomcycle's cancel)."""
        body = body_of(wire.AgentCancelRequest(**clean({"reason": reason})))
        return await self.client.model(Call("POST", f"/v1/agents/{agent_id}/cancel", json=body), m.AgentCancelled)

    async def for_user(self, user_id: str, status: str | None = None, limit: int | None = None) -> m.AgentList:
        params = clean({"status": status, "limit": limit})
        return await self.client.model(Call("GET", f"/v1/users/{user_id}/agents", params=params), m.AgentList)

    async def transcript(self, session_id: str) -> m.Transcript:
        return await self.client.model(Call("GET", f"/v1/sessions/{session_id}/transcript"), m.Transcript)

    async def replay(self, session_id: str, agent: str, *, compress: bool | None = None) -> m.ReplayResult:
        """A new session of `agent` seeded with this one's conversation (loomcycle's `replaySession`);
        continue it with `send(result.new_session_id, …)`."""
        body = body_of(wire.ReplayRequest(**clean({"agent": agent, "compress": compress})))
        return await self.client.model(Call("POST", f"/v1/sessions/{session_id}/replay", json=body), m.ReplayResult)


class AsyncSessions(AsyncResource):
    """/v1/sessions: conversations of many runs (docs/conversations.md)."""

    async def send(self, session_id: str, prompt: str | None = None, *, segments: JsonList | None = None,
                   idempotency_key: str | None = None, **fields: Any) -> m.RunCreated:
        """The session's next user turn, as a new run whose history is the session (202)."""
        body = body_of(wire.SessionMessageRequest(**clean({"prompt": prompt, "segments": segments, **fields})))
        key = idempotency_key or uuid.uuid4().hex
        return await self.client.model(Call("POST", f"/v1/sessions/{session_id}/messages", json=body,
                                            headers={"Idempotency-Key": key, **JSON}), m.RunCreated)

    def send_streaming(self, session_id: str, prompt: str | None = None, *, idempotency_key: str | None = None,
                       **fields: Any) -> AsyncIterator[SseEvent]:
        """`send`, streaming the new run's events (loomcycle's `continueSession`)."""
        body = body_of(wire.SessionMessageRequest(**clean({"prompt": prompt, **fields})))
        key = idempotency_key or uuid.uuid4().hex
        call = Call("POST", f"/v1/sessions/{session_id}/messages", json=body, headers={"Idempotency-Key": key})
        return self.client.events(call, StreamCursor(None, 0))

    async def get(self, session_id: str) -> m.SessionView:
        return await self.client.model(Call("GET", f"/v1/sessions/{session_id}"), m.SessionView)

    async def list(self, *, user_id: str | None = None, agent: str | None = None, archived: bool | None = None,
                   limit: int | None = None, cursor: str | None = None) -> m.SessionList:
        params = clean({"user_id": user_id, "agent": agent, "archived": archived, "limit": limit, "cursor": cursor})
        return await self.client.model(Call("GET", "/v1/sessions", params=params), m.SessionList)

    async def update(self, session_id: str, *, title: str | None = None, description: str | None = None,
                     tags: StrList | None = None, pinned: bool | None = None,
                     archived: bool | None = None) -> m.SessionView:
        body = body_of(wire.SessionPatch(**clean({"title": title, "description": description, "tags": tags,
                                                  "pinned": pinned, "archived": archived})))
        return await self.client.model(Call("PATCH", f"/v1/sessions/{session_id}", json=body), m.SessionView)

    async def transcript(self, session_id: str) -> m.Transcript:
        return await self.client.model(Call("GET", f"/v1/sessions/{session_id}/transcript"), m.Transcript)


class AsyncMemory(AsyncResource):
    """/v1/_memory: `scope` agent (scope_id: the agent), user (the user id) or tenant (`_`)."""

    @staticmethod
    def _path(scope: Scope, scope_id: str, key: str | None = None) -> str:
        base = f"/v1/_memory/scopes/{scope}/{scope_id or '_'}/keys"
        return base if key is None else f"{base}/{key}"

    async def scopes(self) -> m.MemoryScopes:
        return await self.client.model(Call("GET", "/v1/_memory/scopes"), m.MemoryScopes)

    async def list(self, scope: Scope, scope_id: str, *, prefix: str | None = None,
                   limit: int | None = None) -> m.MemoryEntries:
        params = clean({"prefix": prefix, "limit": limit})
        return await self.client.model(Call("GET", self._path(scope, scope_id), params=params), m.MemoryEntries)

    async def get(self, scope: Scope, scope_id: str, key: str) -> m.MemoryEntry:
        return await self.client.model(Call("GET", self._path(scope, scope_id, key)), m.MemoryEntry)

    async def put(self, scope: Scope, scope_id: str, key: str, value: Any, *, embed: bool | None = None,
                  embed_text: str | None = None, ttl_seconds: float | None = None) -> m.MemoryWritten:
        body = body_of(wire.MemoryPut(value=value, **clean({"embed": embed, "embed_text": embed_text,
                                                            "ttl_seconds": ttl_seconds})))
        return await self.client.model(Call("PUT", self._path(scope, scope_id, key), json=body), m.MemoryWritten)

    async def delete(self, scope: Scope, scope_id: str, key: str) -> m.MemoryDeleted:
        return await self.client.model(Call("DELETE", self._path(scope, scope_id, key)), m.MemoryDeleted)

    async def search(self, scope: Scope, query: str, scope_id: str | None = None, *, top_k: int | None = None,
                     min_score: float | None = None, recency_weight: float | None = None,
                     recency_half_life_hours: float | None = None, prefix: str | None = None,
                     include_values: bool | None = None) -> m.MemorySearchResult:
        body = body_of(wire.MemorySearch(**clean({
            "scope": scope, "scope_id": scope_id, "query": query, "top_k": top_k, "min_score": min_score,
            "recency_weight": recency_weight, "recency_half_life_hours": recency_half_life_hours, "prefix": prefix,
            "include_values": include_values})))
        return await self.client.model(Call("POST", "/v1/_memory/search", json=body), m.MemorySearchResult)


class AsyncChannels(AsyncResource):
    """/v1/_channels: declare, publish (waking parked subscribers), peek, subscribe, ack, await."""

    async def list(self) -> m.ChannelList:
        return await self.client.model(Call("GET", "/v1/_channels"), m.ChannelList)

    async def create(self, name: str, *, scope: Literal["agent", "user", "global"] | None = None,
                     semantic: Literal["queue", "broadcast"] | None = None,
                     default_ttl_seconds: int | None = None, max_messages: int | None = None,
                     description: str | None = None) -> m.Channel:
        body = body_of(wire.ChannelRequest(**clean({
            "name": name, "scope": scope, "semantic": semantic, "default_ttl_seconds": default_ttl_seconds,
            "max_messages": max_messages, "description": description})))
        return await self.client.model(Call("POST", "/v1/_channels", json=body), m.Channel)

    async def delete(self, name: str) -> m.ChannelDeleted:
        return await self.client.model(Call("DELETE", f"/v1/_channels/{name}"), m.ChannelDeleted)

    async def publish(self, name: str, value: Any, *, scope_id: str | None = None, ttl_seconds: float | None = None,
                      deliver_at: str | None = None) -> m.Published:
        body = body_of(wire.PublishRequest(value=value, **clean({"scope_id": scope_id, "ttl_seconds": ttl_seconds,
                                                                 "deliver_at": deliver_at})))
        return await self.client.model(Call("POST", f"/v1/_channels/{name}/publish", json=body), m.Published)

    async def peek(self, name: str, *, scope_id: str | None = None, consumer: str | None = None,
                   max_messages: int | None = None) -> m.Peeked:
        """The messages `consumer` would get next, without taking them."""
        params = clean({"scope_id": scope_id, "consumer": consumer, "max_messages": max_messages})
        return await self.client.model(Call("GET", f"/v1/_channels/{name}/peek", params=params), m.Peeked)

    async def subscribe(self, name: str, *, scope_id: str | None = None, consumer: str | None = None,
                        max_messages: int | None = None, from_cursor: str | None = None) -> m.Subscribed:
        """Take messages (a queue's are claimed; a broadcast advances the consumer's cursor)."""
        body = body_of(wire.SubscribeRequest(**clean({"scope_id": scope_id, "consumer": consumer,
                                                      "max_messages": max_messages, "from_cursor": from_cursor})))
        return await self.client.model(Call("POST", f"/v1/_channels/{name}/subscribe", json=body), m.Subscribed)

    async def ack(self, name: str, cursor: str | int, *, scope_id: str | None = None,
                  consumer: str | None = None) -> m.Acked:
        body = body_of(wire.AckRequest(cursor=cursor, **clean({"scope_id": scope_id, "consumer": consumer})))
        return await self.client.model(Call("POST", f"/v1/_channels/{name}/ack", json=body), m.Acked)

    async def wait_for(self, channels: StrList, *, mode: Literal["any", "all", "at_least"] | None = None,
                       n: int | None = None, scope_id: str | None = None, consumer: str | None = None,
                       wait_ms: int | None = None) -> m.AwaitResult:
        """POST /v1/_channels/_await: which channels have messages (never consumes)."""
        body = body_of(wire.AwaitRequest(**clean({"channels": channels, "mode": mode, "n": n, "scope_id": scope_id,
                                                  "consumer": consumer, "wait_ms": wait_ms})))
        return await self.client.model(Call("POST", "/v1/_channels/_await", json=body), m.AwaitResult)


class AsyncDefs(AsyncResource):
    """A def family (`POST /v1/_<kind>def` op + `GET …/names`): `op("create", name=…, body=…)`,
    `op("list")`, `op("promote", …)`, … — the ops and their fields are the *Def tool's
    (README, "Substrate: agent definitions, skills, …"); the answer is the op's JSON."""

    def __init__(self, client: AsyncTreadle, path: str) -> None:
        super().__init__(client)
        self.path = path

    async def op(self, op: str, **fields: Any) -> m.OpResult:
        """The op's answer: its fields are the op's (`result.model_extra`, or `result.name` …)."""
        body = body_of(wire.EvaluationOp(op=op, **fields) if self.path.endswith("_evaluation")  # type: ignore[arg-type]
                       else wire.DefOp(op=op, **fields))
        return await self.client.model(Call("POST", self.path, json=body), m.OpResult)

    async def names(self) -> StrList:
        return (await self.client.model(Call("GET", f"{self.path}/names"), m.Names)).names


class AsyncSchedules(AsyncResource):
    """/v1/_schedules: state and controls (`ident`: sch_…, a def_id, or the schedule's name)."""

    async def list(self) -> m.ScheduleList:
        return await self.client.model(Call("GET", "/v1/_schedules/list-all"), m.ScheduleList)

    async def state(self, ident: str) -> m.ScheduleDetail:
        return await self.client.model(Call("GET", f"/v1/_schedules/{ident}/state"), m.ScheduleDetail)

    async def run_now(self, ident: str) -> m.ScheduleFired:
        return await self.client.model(Call("POST", f"/v1/_schedules/{ident}/run-now"), m.ScheduleFired)

    async def pause(self, ident: str) -> m.ScheduleState:
        return await self.client.model(Call("POST", f"/v1/_schedules/{ident}/pause"), m.ScheduleState)

    async def resume(self, ident: str) -> m.ScheduleState:
        return await self.client.model(Call("POST", f"/v1/_schedules/{ident}/resume"), m.ScheduleState)


class AsyncWebhooks(AsyncResource):
    """/v1/_webhooks: recent deliveries, a test delivery, and delivering like a sender would."""

    async def deliveries(self, name: str, limit: int | None = None) -> m.WebhookDeliveries:
        return await self.client.model(
            Call("GET", f"/v1/_webhooks/{name}/recent-deliveries", params=clean({"limit": limit})),
            m.WebhookDeliveries)

    async def test(self, name: str, payload: Any = None) -> m.WebhookDryRun:
        """A dry run of the webhook's mapping on `payload` (nothing is started)."""
        return await self.client.model(Call("POST", f"/v1/_webhooks/{name}/test", json=payload), m.WebhookDryRun)

    async def deliver(self, name: str, payload: Any, *, tenant: str | None = None,
                      headers: dict[str, str] | None = None) -> m.WebhookAccepted:
        """POST the payload as the sender does (its signature headers in `headers`)."""
        path = f"/v1/_webhooks/{tenant}/{name}" if tenant else f"/v1/_webhooks/{name}"
        return await self.client.model(Call("POST", path, json=payload, headers=dict(headers or {})),
                                       m.WebhookAccepted)


class AsyncHooks(AsyncResource):
    """/v1/hooks: HTTP callbacks before/after tool calls."""

    async def create(self, owner: str, name: str, phase: Literal["pre", "post"], callback_url: str,
                     **fields: Any) -> m.Hook:
        """`fields`: agents, tools, fail_mode, timeout_ms, secret_env (wire.HookRequest)."""
        body = body_of(wire.HookRequest(owner=owner, name=name, phase=phase, callback_url=callback_url, **fields))
        return await self.client.model(Call("POST", "/v1/hooks", json=body), m.Hook)

    async def list(self) -> m.HookList:
        return await self.client.model(Call("GET", "/v1/hooks"), m.HookList)

    async def delete(self, hook_id: str) -> None:
        await self.client.json(Call("DELETE", f"/v1/hooks/{hook_id}"))


class AsyncResidents(AsyncResource):
    """/v1/_resident: the resident sub-agents runs opened (`Agent op=open`) — list, close, stop a turn."""

    async def list(self, *, parent_run_id: str | None = None, include_closed: bool | None = None,
                   tenant: str | None = None) -> m.ResidentList:
        """The open ones, newest first (`include_closed`: the closed and ended ones too)."""
        params = clean({"parent_run_id": parent_run_id, "include_closed": include_closed, "tenant": tenant})
        return await self.client.model(Call("GET", "/v1/_resident", params=params), m.ResidentList)

    async def close(self, run_id: str) -> m.ResidentClosed:
        """End a resident sub-agent: its run is cancelled (`closed by operator`)."""
        return await self.client.model(Call("POST", f"/v1/_resident/{run_id}/close"), m.ResidentClosed)

    async def cancel(self, run_id: str) -> m.ResidentCancelled:
        """Stop its current turn (it parks for input again); `stopped` false when it was not mid-turn."""
        return await self.client.model(Call("POST", f"/v1/_resident/{run_id}/cancel"), m.ResidentCancelled)


class AsyncAdmin(AsyncResource):
    """/v1/_admin (an admin token): unfinished runs, and a tenant's cancel, export, erase."""

    async def runs(self, tenant_id: str | None = None, limit: int | None = None) -> m.AdminRuns:
        return await self.client.model(
            Call("GET", "/v1/_admin/runs", params=clean({"tenant_id": tenant_id, "limit": limit})), m.AdminRuns)

    async def cancel_tenant(self, tenant_id: str, reason: str | None = None) -> m.TenantCancelled:
        body = body_of(wire.CancelTenantRequest(**clean({"reason": reason})))
        return await self.client.model(Call("POST", f"/v1/_admin/tenants/{tenant_id}/cancel", json=body),
                                       m.TenantCancelled)

    async def export_tenant(self, tenant_id: str) -> bytes:
        """The tenant's rows as the export streams them (JSON lines)."""
        resp = await self.client.send(Call("GET", f"/v1/_admin/tenants/{tenant_id}/export"), NO_RETRY)
        if resp.status_code >= 400:
            raise api_error(resp)
        return resp.content

    async def erase_tenant(self, tenant_id: str, confirm: str) -> m.TenantErased:
        """Delete every row of the tenant (`confirm`: the tenant id again)."""
        return await self.client.model(
            Call("DELETE", f"/v1/_admin/tenants/{tenant_id}", params={"confirm": confirm}), m.TenantErased)

