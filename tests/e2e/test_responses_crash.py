"""A background response survives kill -9 (issue 38): the official `openai` SDK creates a
background, streamed response of an agent whose model is a fake OpenAI vendor on loopback; the
agent calls a server-side tool (Memory incr) twice. `treadle serve` is SIGKILLed after the first
tool result and before the second (the second model call is slow, so the kill lands there every
time), then restarted on the same address. The client, whose stream broke, reconnects with
`starting_after` = the last sequence number it saw, and reads on to `response.completed`: it gets
every event exactly once (contiguous sequence numbers, each the same event as a later full replay
tells), the response answers `completed` when retrieved, and each tool ran once."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseCompletedEvent, ResponseStreamEvent

from tests.support.e2e import check_paired, query
from tests.support.fake_http import Reply, Request
from tests.support.vendors.base import Turn, text, tools
from tests.support.vendors.openai import FakeOpenAI
from treadle.testing import until

pytestmark = pytest.mark.e2e

KEY_ENV = "TREADLE_TEST_RESPONSES_CRASH_KEY"
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"}
INCR = {"op": "incr", "scope": "agent", "key": "calls"}
SLOW_S = 2.0  # the second model call's first byte: the kill lands while it waits


class ByHistory(FakeOpenAI):
    """The answer is chosen by how many tool results the request carries, so a model call made
    again after the restart gets the same answer as the one the kill cut off."""

    turns: tuple[Turn, ...] = (
        tools(("Memory", INCR), text=("Counting once.",)),
        tools(("Memory", INCR), text=("Counting twice.",), first_byte_delay_s=SLOW_S),
        text("Counted ", "to two."),
    )

    def _handle(self, req: Request) -> Reply:
        refused, body = self.accept(req)
        if refused is not None:
            return refused
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        return self.turn_reply(self.turns[done], body, req)


async def _read(stream: Any, into: list[ResponseStreamEvent]) -> None:
    """Every event of one SSE stream, kept as it arrives; a stream cut by the kill just ends."""
    try:
        async for event in stream:
            into.append(event)
    except (httpx.HTTPError, openai.APIError):
        pass


async def test_a_background_response_survives_kill9_between_two_tool_calls(make_db: Any, start_server: Any) -> None:
    url = make_db("respcrash", migrated=True)
    async with ByHistory() as vendor:
        os.environ[KEY_ENV] = vendor.key
        providers = {"fake": {"driver": "openai", "base_url": vendor.url + "/v1", "api_key_env": KEY_ENV, "retries": 0}}
        agents = {"counter": {"provider": "fake", "model": "gpt-4o-mini", "tools": ["Memory"]}}
        srv = await start_server(
            url, agents, name="respcrash", extra_config={"providers": providers}, **{KEY_ENV: vendor.key}, **ENV
        )
        client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=2)
        seen: list[ResponseStreamEvent] = []
        stream = await client.responses.create(model="counter", input="count twice", background=True, stream=True)
        reader = asyncio.create_task(_read(stream, seen))
        first = await until(lambda: _first_event(seen), timeout=10, interval=0.02, what="response.created")
        response_id = first.response.id
        run_id = (await query(url, "SELECT run_id FROM openai_responses WHERE id = %s", (response_id,)))[0]["run_id"]

        async def one_result_and_its_text() -> bool:
            results = await _count(url, run_id, "tool_result")
            return results == 1 and any(e.type == "response.output_text.delta" for e in seen)

        await until(one_result_and_its_text, timeout=30, interval=0.02, what="the first tool result")
        srv.kill9()
        await asyncio.wait_for(reader, 10)  # the stream broke with the server
        assert await _count(url, run_id, "tool_result") == 1, "the kill did not land between the tool calls"
        assert seen[-1].type != "response.completed"
        before = len(seen)

        await srv.restart(same_port=True)
        while seen[-1].type not in ("response.completed", "response.failed", "response.incomplete"):
            again = await client.responses.retrieve(response_id, stream=True, starting_after=seen[-1].sequence_number)
            await asyncio.wait_for(_read(again, seen), 60)
        print(f"\n{before} events before the kill, {len(seen) - before} after the reconnect")

        assert [e.sequence_number for e in seen] == list(range(len(seen))), "an event lost or told twice"
        whole: list[ResponseStreamEvent] = []
        await _read(await client.responses.retrieve(response_id, stream=True), whole)
        assert [e.model_dump() for e in seen] == [e.model_dump() for e in whole]
        final = seen[-1]
        assert isinstance(final, ResponseCompletedEvent)
        assert final.response.output_text == "Counting once.\n\nCounting twice.\n\nCounted to two."
        retrieved = await client.responses.retrieve(response_id)
        assert retrieved.status == "completed" and retrieved.output_text == final.response.output_text
        await client.close()

        events = [
            {"seq": e["seq"], "type": e["type"], **e["payload"]}
            for e in await query(url, "SELECT seq, type, payload FROM events WHERE run_id = %s ORDER BY seq", (run_id,))
        ]
        assert [e["type"] for e in events].count("tool_call") == 2 and check_paired(events) == []
        memory = await query(url, "SELECT value FROM memory WHERE key = 'calls'")
        assert [m["value"] for m in memory] == [2], "a tool ran twice (or not at all) across the kill"
        assert vendor.violations == []
        os.environ.pop(KEY_ENV, None)


async def _first_event(seen: list[ResponseStreamEvent]) -> Any:
    return seen[0] if seen and seen[0].type == "response.created" else None


async def _count(url: str, run_id: str, kind: str) -> int:
    rows = await query(url, "SELECT count(*) AS n FROM events WHERE run_id = %s AND type = %s", (run_id, kind))
    return int(rows[0]["n"])
