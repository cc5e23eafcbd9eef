"""A run served by `treadle serve` (a real subprocess): it completes, and its events stream over
SSE — on the POST itself and on GET /stream — with `id: <seq>` frames that resume exactly where
a reader left off (`from_seq` or `Last-Event-ID`)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tests.support.e2e import (
    check_paired,
    frame_blocks,
    parse_lines,
    read_stream,
    sse_lines,
    sum_usage,
    tool_caller_types,
)
from tests.support.streams import closable
from treadle.client import ApiError, TreadleClient

pytestmark = pytest.mark.e2e

AGENTS: dict[str, Any] = {
    "tc": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3}},
    # slow enough that a reader can disconnect while the run is still going
    "slow": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3, "latency_ms": 250}},
}


def api_event(ev: Any) -> dict[str, Any]:
    return dict(ev.data)


async def test_served_run_streams_its_events_over_sse(make_db: Any, start_server: Any) -> None:
    srv = await start_server(make_db("served"), AGENTS, name="served")
    expected_types = tool_caller_types(3)

    async with TreadleClient(srv.url, timeout=10) as client:
        assert (await client.health())["ok"] is True

        # -- POST /v1/runs with Accept: text/event-stream streams the whole run ----------------
        async with asyncio.timeout(30):
            received = [ev async for ev in client.run_streaming("tc", "hello there")]
        # live-only frames (the model's text deltas) carry no id and are never stored
        live = [f for f in received if f.id is None]
        # and loomcycle's first `session` / `agent` frames (no id either)
        allowed = ("text_delta", "thinking_delta", "session", "agent")
        assert all(f.event in allowed for f in live), [f.event for f in live]
        frames = [f for f in received if f.id is not None]
        assert [f.event for f in frames] == expected_types, [f.event for f in frames]
        assert [f.id for f in frames] == list(range(1, len(frames) + 1)), "frame ids must be the seqs, gap-free"
        for f in frames:
            assert f.data["seq"] == f.id and f.data["type"] == f.event, f
        run_id = frames[1].data["run_id"]
        assert frames[1].data["agent"] == "tc"
        assert frames[0].data["segments"][0]["content"][0]["text"] == "hello there"

        data = [api_event(f) for f in frames]
        assert check_paired(data) == []
        calls = [e for e in data if e["type"] == "tool_call"]
        assert len({c["tool_use"]["id"] for c in calls}) == 3
        assert all(c["tool_use"]["name"] == "Memory" for c in calls)
        assert [e["iteration"] for e in calls] == [1, 2, 3]
        results = [e for e in data if e["type"] == "tool_result"]
        assert [r["is_error"] for r in results] == [False, False, False]
        assert [e["text"] for e in data if e["type"] == "text"] == ["done after 3 tool calls"]
        done = data[-1]
        assert done["stop_reason"] == "end_turn"
        assert done["usage"] == sum_usage(e["usage"] for e in data if e["type"] == "usage")

        run = await client.get_run(run_id)
        assert (run["status"], run["stop_reason"], run["iterations"]) == ("completed", "end_turn", 4)
        assert run["last_seq"] == len(frames)
        assert run["usage"] == done["usage"]
        # the JSON transcript and the streamed frames are the same events
        assert await client.events(run_id) == data

        # -- GET /stream?from_seq=N resumes after N ------------------------------------------------
        for n in (0, 1, 6, len(frames) - 1, len(frames)):
            again = await read_stream(srv.url, run_id, from_seq=n)
            assert [f.id for f in again] == list(range(n + 1, len(frames) + 1))
            assert [api_event(f) for f in again] == data[n:]

        # -- Last-Event-ID resumes too; the raw frames carry `id: <seq>` first ----------------------
        lines = await sse_lines(srv.url, f"/v1/runs/{run_id}/stream", headers={"Last-Event-ID": "7"})
        blocks = [b for b in frame_blocks(lines) if b[0] != "event: agent"]  # loomcycle's first frame: no id
        assert [b[0] for b in blocks] == [f"id: {seq}" for seq in range(8, len(frames) + 1)]
        assert [b[1] for b in blocks] == [f"event: {t}" for t in expected_types[7:]]
        assert [api_event(f) for f in await parse_lines(lines) if f.id is not None] == data[7:]
        # with both, the later position wins
        both = await read_stream(srv.url, run_id, from_seq=3, last_event_id=9)
        assert [f.id for f in both] == list(range(10, len(frames) + 1))
        both = await read_stream(srv.url, run_id, from_seq=11, last_event_id=2)
        assert [f.id for f in both] == list(range(12, len(frames) + 1))

        bad = await client.http.get(
            f"/v1/runs/{run_id}/stream", headers={"Accept": "text/event-stream", "Last-Event-ID": "x"}
        )
        assert (bad.status_code, bad.json()["code"]) == (422, "validation_error")
        with pytest.raises(ApiError) as missing:
            async for _ in client.stream("r_" + "0" * 32):
                pass
        assert missing.value.status == 404


async def test_a_reader_that_disconnects_mid_run_resumes_without_gaps(make_db: Any, start_server: Any) -> None:
    srv = await start_server(make_db("resume"), AGENTS, name="resume")
    async with TreadleClient(srv.url, timeout=10) as client:
        started = await client.start_run("slow", "take your time")
        run_id = started["run_id"]
        assert started["created"] is True

        # read the live stream until the first tool_call, then hang up
        first: list[Any] = []
        async with asyncio.timeout(30), contextlib.aclosing(closable(client.stream(run_id))) as live:
            async for ev in live:
                if ev.id is None:  # a live-only text delta
                    continue
                first.append(ev)
                if ev.event == "tool_call":
                    break
        status_at_disconnect = (await client.get_run(run_id))["status"]
        assert status_at_disconnect in ("queued", "running"), "the reader should have left mid-run"
        assert [f.id for f in first] == list(range(1, len(first) + 1))

        # resume from the last id seen: the rest of the run, nothing twice, nothing missing
        rest = [f for f in await read_stream(srv.url, run_id, last_event_id=first[-1].id) if f.id is not None]
        frames = first + rest
        assert [f.id for f in frames] == list(range(1, len(frames) + 1))
        assert [f.event for f in frames] == tool_caller_types(3)
        assert frames[-1].data["stop_reason"] == "end_turn"
        assert [api_event(f) for f in frames] == await client.events(run_id)
        run = await client.get_run(run_id)
        assert run["status"] == "completed" and run["last_seq"] == len(frames)
