"""Text deltas reach live SSE readers while the model streams; the transcript keeps only the
assembled text, and a replay (`from_seq`) shows just that."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.providers import MakeHarness, StartVendor
from tests.support.vendors.base import text, tools
from treadle.api.sse import stream_run_events
from treadle.client.http import SseEvent, TreadleClient, parse_sse
from treadle.config import Settings, parse_config
from treadle.store.runs import NewRun
from treadle.testing import until, user_text

PIECES = ("The ", "quick ", "brown ", "fox.")


async def frames_of(gen: Any) -> list[SseEvent]:
    async def lines() -> Any:
        async for chunk in gen:
            for line in chunk.decode().split("\n"):
                yield line

    return [ev async for ev in parse_sse(lines())]


@pytest.mark.parametrize("kind", ["anthropic", "openai", "gemini"])
async def test_live_deltas_then_assembled_text(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(tools(("Memory", {"op": "get", "scope": "agent", "key": "x"}), text=("Looking.",)),
                text(*PIECES, chunk_delay_s=0.05))  # fmt: skip
    h = await treadle({"providers": {"p": v.provider()},
                       "agents": {"a": {"provider": "p", "model": v.model, "tools": ["Memory"]}}})  # fmt: skip
    run, _ = await h.rt.start_run(NewRun(tenant_id=h.tenant, agent="a", segments=user_text("go")))
    reader = asyncio.create_task(frames_of(stream_run_events(h.rt.runs, h.rt.hub, h.tenant, run.id, 0, poll_s=0.05)))
    await until(lambda: h.rt.hub.has_live(run.id), what="the reader to subscribe")  # before the model starts
    await h.disp.drain()
    live = await asyncio.wait_for(reader, 10)

    deltas = [f for f in live if f.event == "text_delta"]
    assert all(f.id is None for f in deltas)
    # every piece streams live; one published in the instant before its turn is stored may be
    # superseded by the stored text, never shown after it
    streamed = [f.data["text"] for f in deltas if f.data["iteration"] == 2]
    assert len(streamed) >= len(PIECES) - 1 and streamed == list(PIECES[: len(streamed)])
    assert {f.data["provider"] for f in deltas} == {"p"}
    texts = [f for f in live if f.event == "text"]
    assert [t.data["text"] for t in texts] == ["Looking.", "".join(PIECES)] and all(t.id for t in texts)
    last_delta = max(i for i, f in enumerate(live) if f.event == "text_delta")
    assert last_delta < live.index(texts[-1])  # the assembled text comes after its deltas
    assert [f.id for f in live if f.id is not None] == sorted(f.id for f in live if f.id is not None)

    stored = await h.rt.runs.events(h.tenant, run.id)
    assert "text_delta" not in {e.type for e in stored}
    replay = await frames_of(stream_run_events(h.rt.runs, h.rt.hub, h.tenant, run.id, 0))
    assert [f.event for f in replay] == [e.type for e in stored]
    assert [f.data["text"] for f in replay if f.event == "text"] == ["Looking.", "".join(PIECES)]
    tail = await frames_of(stream_run_events(h.rt.runs, h.rt.hub, h.tenant, run.id, stored[-3].seq))
    assert [f.id for f in tail] == [e.seq for e in stored[-2:]]


async def test_deltas_over_http_sse(vendor: StartVendor, migrated_db_url: str) -> None:
    """The sidecar served on loopback: a client streaming POST /v1/runs sees the deltas."""
    from treadle_sidecar.server import BackgroundServer

    v = await vendor("openai")
    v.fake.then(text(*PIECES, chunk_delay_s=0.05))
    config = parse_config({"providers": {"p": v.provider()}, "agents": {"a": {"provider": "p", "model": v.model}}})
    settings = Settings(database_url=migrated_db_url, workers=1, listen="127.0.0.1:0", sweep_interval_seconds=5)
    server = BackgroundServer(settings, config)
    url = await server.start()
    try:
        async with TreadleClient(url) as client:
            got = [ev async for ev in client.run_streaming("a", "go")]
    finally:
        await server.stop()
    names = [e.event for e in got]
    assert names.count("text_delta") == len(PIECES) and names[-1] == "done"
    assert "".join(e.data["text"] for e in got if e.event == "text_delta") == "".join(PIECES)
    assert names.index("text") > max(i for i, n in enumerate(names) if n == "text_delta")
    assert v.fake.violations == []
