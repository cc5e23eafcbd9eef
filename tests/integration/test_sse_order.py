"""The SSE stream's order: a live text delta never overtakes a committed event that precedes its
turn (here: the previous iteration's tool_result), on a real Postgres and the engine's hub."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.streams import closable
from treadle.api.sse import stream_run_events
from treadle.store.channels import ChannelDef
from treadle.store.runs import NewRun
from treadle.testing import user_text


def parse(frame: bytes) -> tuple[str, dict[str, Any]] | None:
    lines = dict(line.split(": ", 1) for line in frame.decode().strip().splitlines() if not line.startswith(":"))
    return (lines["event"], json.loads(lines["data"])) if "event" in lines else None


async def test_a_live_delta_waits_for_the_committed_tool_result_before_its_turn(open_runtime: Any) -> None:
    script = [
        {"tool": "Channel", "input": {"op": "subscribe", "channel": "sse-news", "wait_ms": 600_000}},
        {"text": "heard it"},
    ]
    rt, disp = await open_runtime({"l": {"model": "script", "tools": ["Channel"], "mock": {"script": script}}})
    rt.channels.declared["sse-news"] = ChannelDef("sse-news", source="yaml")
    tenant = f"t-{time.monotonic_ns()}"
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="l", segments=user_text("listen")))
    await disp.drain()  # iteration 1: the tool call parks the run

    stream = closable(stream_run_events(rt.runs, rt.hub, tenant, run.id, 0, poll_s=0.05))
    seen: list[str] = []
    while "tool_parked" not in seen:  # everything stored so far; the stream now waits on the hub
        parsed = parse(await anext(stream))
        if parsed is not None:
            seen.append(parsed[0])

    await rt.publish(tenant, "sse-news", "hello")  # wakes the run: its step records the tool_result
    step = disp.queue.pop(0)
    await disp.handler(step)  # ...and commits it (the next iteration's step stays queued)
    # the next step's model call streams a delta of iteration 2 — here, published by hand
    rt.hub.publish(run.id, "text_delta", {"text": "heard", "iteration": 2, "attempt": 0, "provider": "mock"})

    after: list[str] = []
    while "text_delta" not in after:
        parsed = parse(await anext(stream))
        if parsed is not None:
            after.append(parsed[0])
    await stream.aclose()
    assert "tool_result" in after, after
    assert after.index("tool_result") < after.index("text_delta"), after
