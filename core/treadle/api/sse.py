"""Server-sent events for a run: `id: <seq>` on every persisted frame, resumable with `from_seq`
or `Last-Event-ID`, ending once the run is terminal and fully drained (or a time budget passes).

While a model streams, live `text_delta` / `thinking_delta` frames (no `id:` line, never stored:
`{"text", "iteration", "attempt", "provider"}`) are merged in from the engine's hub. The
assembled `text` event follows them with an id; deltas of an iteration whose events are already
stored are not sent, so a replay (`from_seq`) shows only the assembled text. A frame with a higher
`attempt` than the deltas before it restarts the text (the earlier attempt failed mid-stream)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from treadle.engine.hub import RunEventHub
from treadle.store.runs import RunStore

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


def sse_frame(event: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


TERMINAL_EVENTS = frozenset({"done", "error"})


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
) -> AsyncIterator[bytes]:
    cursor = from_seq
    started = time.monotonic()
    last_sent = started
    stored_iteration = 0  # the highest iteration whose assistant turn is stored (and sent)
    with hub.subscribe(run_id) as live:
        while True:
            # live frames first: a delta published before its turn was stored is still current here
            for frame in live.drain():
                it = frame.data.get("iteration")
                if isinstance(it, int) and it <= stored_iteration:
                    continue
                last_sent = time.monotonic()
                yield sse_frame(frame.event, frame.data)
            events = await runs.events(tenant_id, run_id, cursor, limit=500)
            for ev in events:
                cursor = ev.seq
                it = ev.payload.get("iteration") if ev.type == "usage" else None
                if isinstance(it, int):
                    stored_iteration = max(stored_iteration, it)
                yield sse_frame(ev.type, ev.to_api(), ev.seq)
            now = time.monotonic()
            if events:
                last_sent = now
                if events[-1].type in TERMINAL_EVENTS:  # written by the run's final commit: nothing follows
                    return
                if len(events) == 500:
                    continue
            else:
                run = await runs.get(tenant_id, run_id)
                if run is None or (run.terminal and run.last_seq <= cursor):
                    return
            if budget_s is not None and now - started >= budget_s:
                yield b": budget exhausted; resume with from_seq\n\n"
                return
            if now - last_sent >= keepalive_s:
                last_sent = now
                yield b": keepalive\n\n"
            await live.wait(poll_s)
