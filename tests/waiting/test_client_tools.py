"""Application tools: a run declares tools on POST /v1/runs; a call parks the run (a `tool_pending`
event, no worker held) until the application posts the result; timeouts answer with an error; a
restart between park and answer loses nothing."""

from __future__ import annotations

from typing import Any

import httpx

from treadle.api.app import create_app
from treadle.runtime import Runtime
from treadle.testing import ACCEPT_JSON, age_run

TOKEN = "s3cret"
LOOKUP = {"name": "lookup_order", "description": "Look an order up in the shop's database",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}
SHOPPER = {"model": "script", "tools": [],
           "mock": {"script": [{"tool": "lookup_order", "input": {"order_id": "A-17"}}, {"text": "all done"}]}}


def client_for(rt: Runtime) -> httpx.AsyncClient:
    app = create_app(auth_token=TOKEN, max_request_bytes=1 << 20)
    app.state.runtime = rt
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://treadle.test",
                             headers={**ACCEPT_JSON, "authorization": f"Bearer {TOKEN}"})


async def start(c: httpx.AsyncClient, **fields: Any) -> str:
    r = await c.post("/v1/runs", json={"agent": "shopper", "prompt": "where is my order?",
                                       "client_tools": [LOOKUP], **fields})
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


async def events(c: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    r = await c.get(f"/v1/runs/{run_id}/events")
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


async def test_a_call_parks_the_run_and_the_answer_resumes_it(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"shopper": SHOPPER, "echo": {"model": "echo"}})
    async with client_for(rt) as c:
        run_id = await start(c)
        await disp.drain()
        assert (await c.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting"
        [pending] = [e for e in await events(c, run_id) if e["type"] == "tool_pending"]
        assert pending["tool_use"]["name"] == "lookup_order" and pending["tool_use"]["input"] == {"order_id": "A-17"}

        # the parked run holds no worker: another run starts and completes meanwhile
        other = (await c.post("/v1/runs", json={"agent": "echo", "prompt": "hello"})).json()["run_id"]
        await disp.drain()
        assert (await c.get(f"/v1/runs/{other}")).json()["status"] == "completed"

        answer = {"tool_use_id": pending["tool_use"]["id"], "content": '{"status": "shipped"}'}
        r = await c.post(f"/v1/runs/{run_id}/tool_results", json=answer)
        assert r.status_code == 200 and r.json()["woke"] == 1, r.text
        await disp.drain()
        assert (await c.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"
        [result] = [e for e in await events(c, run_id) if e["type"] == "tool_result"]
        assert (result["text"], result["is_error"]) == ('{"status": "shipped"}', False)

        again = await c.post(f"/v1/runs/{run_id}/tool_results", json=answer)
        assert (again.status_code, again.json()["code"]) == (409, "tool_call_not_waiting")


async def test_refusals(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"shopper": SHOPPER})
    async with client_for(rt) as c:
        run_id = await start(c)
        await disp.drain()
        r = await c.post(f"/v1/runs/{run_id}/tool_results", json={"tool_use_id": "toolu_nope", "content": "x"})
        assert (r.status_code, r.json()["code"]) == (404, "tool_call_not_found")
        r = await c.post("/v1/runs/r_missing/tool_results", json={"tool_use_id": "t", "content": "x"})
        assert (r.status_code, r.json()["code"]) == (404, "tool_call_not_found")
        taken = {**LOOKUP, "name": "Memory"}
        r = await c.post("/v1/runs", json={"agent": "shopper", "prompt": "p", "client_tools": [taken]})
        assert (r.status_code, r.json()["code"]) == (422, "client_tool_name_taken")
        r = await c.post("/v1/runs", json={"agent": "shopper", "prompt": "p", "client_tools": [LOOKUP, LOOKUP]})
        assert (r.status_code, r.json()["code"]) == (422, "client_tool_name_taken")
        bad = {**LOOKUP, "input_schema": {"type": "string"}}
        r = await c.post("/v1/runs", json={"agent": "shopper", "prompt": "p", "client_tools": [bad]})
        assert r.status_code == 422 and "object" in r.text
        r = await c.post("/v1/runs", json={"agent": "shopper", "prompt": "p", "client_tools": [LOOKUP],
                                           "client_tool_timeout_seconds": 0})
        assert r.status_code == 422
        r = await c.post("/v1/runs", json={"agent": "shopper", "prompt": "p", "client_tool_timeout_seconds": 30})
        assert (r.status_code, r.json()["code"]) == (422, "client_tool_timeout_without_tools")


async def test_a_call_nobody_answers_times_out_with_an_error(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"shopper": SHOPPER})
    async with client_for(rt) as c:
        run_id = await start(c, client_tool_timeout_seconds=0.3)
        await disp.drain()
        await age_run(rt, run_id, 1)  # the call's 0.3 s pass
        assert await rt.wake_due() >= 1  # the sweeper's pass
        await disp.drain()
        assert (await c.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"
        [result] = [e for e in await events(c, run_id) if e["type"] == "tool_result"]
        assert result["is_error"] and "did not answer within 0.3 s" in result["text"]


async def test_a_restart_between_park_and_answer_loses_nothing(open_runtime: Any, migrated_db_url: str) -> None:
    rt, disp = await open_runtime({"shopper": SHOPPER}, url=migrated_db_url)
    async with client_for(rt) as c:
        run_id = await start(c)
        await disp.drain()
        [pending] = [e for e in await events(c, run_id) if e["type"] == "tool_pending"]
    await rt.close()  # the process goes away while the run waits

    rt2, disp2 = await open_runtime({"shopper": SHOPPER}, url=migrated_db_url)
    async with client_for(rt2) as c:
        r = await c.post(f"/v1/runs/{run_id}/tool_results",
                         json={"tool_use_id": pending["tool_use"]["id"], "content": "not found", "is_error": True})
        assert r.status_code == 200, r.text
        await disp2.drain()
        assert (await c.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"
        [result] = [e for e in await events(c, run_id) if e["type"] == "tool_result"]
        assert (result["text"], result["is_error"]) == ("not found", True)
    assert not disp2.queue  # nothing left to deliver
