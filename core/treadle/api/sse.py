"""Server-sent events for a run: `id: <seq>` on every persisted frame, resumable with `from_seq`
or `Last-Event-ID`, ending once the run is terminal and fully drained (or a time budget passes).

While a model streams, live `text_delta` / `thinking_delta` frames (no `id:` line, never stored:
`{"text", "iteration", "attempt", "provider"}`) are merged in from the engine's hub. The
assembled `text` event follows them with an id; deltas of an iteration whose events are already
stored are not sent, so a replay (`from_seq`) shows only the assembled text. A frame with a higher
`attempt` than the deltas before it restarts the text (the earlier attempt failed mid-stream).

Order: a delta of iteration N is published by the step that calls the model, which runs only
after every event before that turn (iteration N-1's tool results, …) was committed. So live frames
are taken from the hub first, held, and sent only after a read of the store that has caught up —
that read sees every event committed before the frames were published, and those go out first.
A live delta therefore never overtakes a committed event that precedes its turn.

loomcycle's shapes (additive; the flat fields stay): `interruption_pending` also carries
`interruption{…}`, `awaiting_input` `awaiting_input{since_turn}`, `turn_cancelled`
`turn_cancelled{reason, since_turn}`, `context_compaction` `context_compaction{summary,
before_tokens, after_tokens, keep_n, keep_first, trigger}`; a steering input is sent as `event: steer` with
`user_input{text, source, seen_at}` (its stored type stays `user_input`, see GET …/events)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from treadle.domain.events import TERMINAL, EventType
from treadle.engine.hub import LiveFrame, RunEventHub
from treadle.store.runs import RunStore

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


def sse_frame(event: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


def sse_content(item: dict[str, Any], description: str) -> dict[str, Any]:
    """The spec of an SSE answer, as FastAPI writes its own: `itemSchema` describes each frame
    (`event`, `id`, `data`, `retry`, parsed as the SSE format reads them; OpenAPI 3.2's keyword,
    which schemathesis checks every frame against), and `data` is JSON (`contentMediaType`) of
    the shape `contentSchema` gives. Comment lines (keepalives) are not frames."""
    return {"content": {"text/event-stream": {"itemSchema": item}}, "description": description}


def json_data(schema: dict[str, Any]) -> dict[str, Any]:
    """A frame's `data` field: a JSON text of `schema`."""
    return {"type": "string", "contentMediaType": "application/json", "contentSchema": schema}


def sse_item(events: list[str] | None, data: dict[str, Any], *variants: dict[str, Any]) -> dict[str, Any]:
    """One frame: `event` one of `events` (None: no `event:` line, read as `message`), `data` as
    `data` says, and per `variants` (`if` the event is one of some, `then` its own `data`)."""
    item: dict[str, Any] = {"type": "object", "required": ["data", "event"], "properties": {
        "event": {"type": "string", "enum": events if events is not None else ["message"]},
        "data": data,
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    }}
    if variants:
        item["allOf"] = list(variants)
    return item


def when_event(events: list[str], then: dict[str, Any]) -> dict[str, Any]:
    """A variant of `sse_item`: frames whose event is one of `events` also match `then`."""
    return {"if": {"properties": {"event": {"enum": events}}}, "then": then}


OBJECT: dict[str, Any] = {"type": "object"}
#: the run streams' frames (GET /v1/runs/{id}/stream, POST /v1/runs and session messages with
#: `Accept: text/event-stream`): a stored event (`id: <seq>`, its data the event as GET …/events
#: shows it; a steering input's is `steer`), loomcycle's first `session`/`agent` frames and the
#: live `text_delta`/`thinking_delta` (no `id:` line of their own)
_LIVE = [EventType.TEXT_DELTA.value, EventType.THINKING_DELTA.value, EventType.SESSION.value, EventType.AGENT.value]
_STORED = [t.value for t in EventType if t.value not in _LIVE]
RUN_STREAM_ITEM = sse_item(
    [t.value for t in EventType], json_data(OBJECT),
    when_event(_STORED, {"required": ["id"], "properties": {
        "id": {"type": "string", "pattern": "^[1-9][0-9]*$"},
        "data": json_data({"$ref": "#/components/schemas/Event"})}}),
    when_event([EventType.TEXT_DELTA.value, EventType.THINKING_DELTA.value], {"properties": {"data": json_data({
        "type": "object", "required": ["text", "iteration"],
        "properties": {"text": {"type": "string"}, "iteration": {"type": "integer"},
                       "attempt": {"type": "integer"}, "provider": {"type": "string"}}})}}),
    when_event([EventType.SESSION.value], {"properties": {"data": json_data({
        "type": "object", "required": ["type", "session_id"],
        "properties": {"type": {"const": "session"}, "text": {"type": ["string", "null"]},
                       "session_id": {"type": ["string", "null"]}}})}}),
    when_event([EventType.AGENT.value], {"properties": {"data": json_data({
        "type": "object", "required": ["agent_id", "run_id"],
        "properties": {"agent_id": {"type": "string"}, "run_id": {"type": "string"},
                       "session_id": {"type": ["string", "null"]}}})}}),
)

_COMPACTION_KEYS = ("summary", "before_tokens", "after_tokens", "keep_n", "keep_first", "trigger")
_INTERRUPTION_KEYS = ("interrupt_id", "kind", "question", "options", "context", "priority", "expires_at")


def wire_event(etype: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A stored event as loomcycle's SSE frame (event name, data): the nested payloads added."""
    if etype == EventType.INTERRUPTION_PENDING:
        return etype, {**data, "interruption": {k: data.get(k) for k in _INTERRUPTION_KEYS}}
    if etype == EventType.AWAITING_INPUT:
        return etype, {**data, "awaiting_input": {"since_turn": data.get("since_turn")}}
    if etype == EventType.TURN_CANCELLED:
        return etype, {**data, "turn_cancelled": {"reason": data.get("reason"), "since_turn": data.get("since_turn")}}
    if etype == EventType.CONTEXT_COMPACTION:
        return etype, {**data, "context_compaction": {k: data.get(k) for k in _COMPACTION_KEYS}}
    if etype == EventType.USER_INPUT and data.get("source") == "steer":
        text = "\n\n".join(str(b.get("text", "")) for seg in data.get("segments") or []
                            for b in seg.get("content") or [] if isinstance(b, dict))
        return EventType.STEER, {**data, "type": EventType.STEER,
                         "user_input": {"text": text, "source": "steer", "seen_at": data.get("ts")}}
    return etype, data


async def stream_run_events(
    runs: RunStore,
    hub: RunEventHub,
    tenant_id: str,
    run_id: str,
    from_seq: int,
    *,
    keepalive_s: float = 15.0,
    poll_s: float = 0.25,
    budget_s: float | None = None,
    linger_s: float | None = None,
    preamble: list[bytes] | None = None,
    stop: Callable[[], bool] | None = None,
) -> AsyncIterator[bytes]:
    """`budget_s` bounds the response; with `linger_s` too it ends that long after its first
    frame (a buffering proxy shows the client nothing before the end: better early and often).
    `stop()` true (the server is shutting down, `Runtime.draining`) ends it at its next poll, as a
    budget does: the client resumes from its last id once the server is back."""
    for frame_bytes in preamble or []:  # loomcycle's `session` / `agent` frames (api/runs.py)
        yield frame_bytes
    cursor = from_seq
    started = time.monotonic()
    last_sent = started
    first_sent: float | None = None
    stored_iteration = 0  # the highest iteration whose assistant turn is stored (and sent)
    held: list[LiveFrame] = []  # live frames taken from the hub, not sent until the store is read
    with hub.subscribe(run_id) as live:
        while True:
            # take the live frames *before* reading the store: the read then sees every event
            # committed before they were published, and sends it first (module docstring)
            held.extend(live.drain())
            # shielded: a client that leaves mid-query cancels the stream, not the query — the
            # connection goes back to the pool sound instead of being closed and dropped
            events = await asyncio.shield(runs.events(tenant_id, run_id, cursor, limit=500))
            for ev in events:
                cursor = ev.seq
                it = ev.payload.get("iteration") if ev.type == EventType.USAGE else None
                if isinstance(it, int):
                    stored_iteration = max(stored_iteration, it)
                yield sse_frame(*wire_event(ev.type, ev.to_api()), ev.seq)
            now = time.monotonic()
            if events:
                last_sent = now
                first_sent = first_sent or now
                if events[-1].type in TERMINAL:  # written by the run's final commit: nothing follows
                    return
                if len(events) == 500:
                    continue  # not caught up: keep holding the live frames
            # caught up with the store: the held frames are current, unless their turn is stored now
            for frame in held:
                it = frame.data.get("iteration")
                if isinstance(it, int) and it <= stored_iteration:
                    continue
                last_sent = time.monotonic()
                first_sent = first_sent or last_sent
                yield sse_frame(frame.event, frame.data)
            held.clear()
            if not events:
                run = await asyncio.shield(runs.get(tenant_id, run_id))
                if run is None or (run.terminal and run.last_seq <= cursor):
                    return
            if stop is not None and stop():
                yield b": server shutting down; resume with from_seq\n\n"
                return
            lingered = linger_s is not None and first_sent is not None and now - first_sent >= linger_s
            if budget_s is not None and (now - started >= budget_s or lingered):
                yield b": budget exhausted; resume with from_seq\n\n"
                return
            if now - last_sent >= keepalive_s:
                last_sent = now
                yield b": keepalive\n\n"
            await live.wait(poll_s)
