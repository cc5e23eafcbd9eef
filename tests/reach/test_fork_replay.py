"""Replay forks (issue 36): `POST /v1/runs/{id}/fork {mode: "replay"}` answers the fork's tool calls
from the original run's recorded results while they match — same tool, same canonical JSON input,
in order — and runs them for real from the first divergence. Real runs (mock script agents, real
Postgres, inline dispatcher) whose HTTP calls reach a loopback server that counts them: until the
divergence the server sees nothing and Memory is not written again; past it every call reaches it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.reach.test_reach_tools import NETWORK
from tests.support.e2e import check_paired
from tests.support.loopback import Answer, Loopback, Seen
from tests.support.tenancy import api
from tests.support.waiting import start
from treadle.builtins.registry import default_registry
from treadle.config import Settings, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.domain.events import EventType
from treadle.runtime import Runtime

Open = Callable[[dict[str, Any]], Awaitable[tuple[Runtime, InlineDispatcher]]]


@pytest.fixture
async def open_rt(db_url: str, tmp_path: Path) -> AsyncIterator[Open]:
    opened: list[Runtime] = []

    async def open_(agents: dict[str, Any]) -> tuple[Runtime, InlineDispatcher]:
        disp = InlineDispatcher()
        rt = await Runtime.open(
            Settings(database_url=db_url, home=tmp_path, workers=1, chain_steps=1),
            parse_config({"agents": agents, "http": {"allowed_hosts": ["api.test"]}}),
            dispatcher_factory=lambda _p, _u: disp,
            registry=default_registry(NETWORK),
        )
        disp.handler = rt.engine.handle
        opened.append(rt)
        return rt, disp

    yield open_
    for rt in opened:
        await rt.close()


def bodies(results: list[dict[str, Any]]) -> list[str]:
    """The results' bodies (an HTTP result's text after its status and headers)."""
    return [e["text"].rpartition("\n\n")[2] for e in results]


def shopper(srv: Loopback, items: list[str]) -> dict[str, Any]:
    """Looks up each item's price (HTTP GET on the loopback server), counting lookups in Memory
    after the first one, then answers."""
    turns: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        turns.append({"tool": "HTTP", "input": {"url": srv.url(f"/price?item={item}", host="api.test")}})
        if i == 0:
            turns.append({"tool": "Memory", "input": {"op": "incr", "scope": "tenant", "key": "lookups"}})
    turns.append({"text": "priced " + ",".join(items)})
    return {"model": "script", "tools": ["HTTP", "Memory"], "memory_scopes": ["tenant"], "mock": {"script": turns}}


async def test_a_replay_fork_calls_nothing_until_it_diverges_then_runs_for_real(open_rt: Open) -> None:
    served: list[str] = []

    def price(s: Seen) -> Answer:
        served.append(s.target.partition("item=")[2])
        return Answer.text(f"{served[-1]}#{len(served)}")  # each real call's answer differs

    async with Loopback({"/price": price}) as srv:
        rt, disp = await open_rt({"shopper": shopper(srv, ["a", "b", "c"]),
                                  "shopper2": shopper(srv, ["a", "z", "c"])})
        original = await start(rt, "shopper", "price my basket")
        await disp.drain()
        assert served == ["a", "b", "c"]
        async with api(rt) as c:
            orig = (await c.get(f"/v1/runs/{original}/events")).json()["events"]
            orig_results = [e for e in orig if e["type"] == "tool_result"]
            assert bodies(orig_results) == ["a#1", '{"key":"lookups","value":1}', "b#2", "c#3"]

            # the same agent, the turn asked again: every call matches, nothing reaches the server
            r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1, "mode": "replay"})
            assert r.status_code == 202 and r.json()["mode"] == "replay", r.text
            same = r.json()["run_id"]
            await disp.drain()
            assert served == ["a", "b", "c"]  # 0 external calls
            evs = (await c.get(f"/v1/runs/{same}/events")).json()["events"]
            assert check_paired(evs) == [] and evs[-1]["type"] == "done"
            results = [e for e in evs if e["type"] == "tool_result"]
            assert [e["text"] for e in results] == [e["text"] for e in orig_results]
            assert [e["replayed"] for e in results] == [{"run_id": original, "seq": e["seq"]} for e in orig_results]
            assert not any(e["type"] == EventType.REPLAY_DIVERGED for e in evs)
            mem = await c.get("/v1/_memory/scopes/tenant/_/keys/lookups")
            assert mem.json()["value"] == 1, mem.text  # the replayed incr wrote nothing

            # another agent whose second lookup differs: the calls before it are replayed, it and
            # every later one (even `c`, which the original also made third) run for real
            r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1, "mode": "replay", "agent": "shopper2"})
            assert r.status_code == 202, r.text
            other = r.json()["run_id"]
            await disp.drain()
            assert served == ["a", "b", "c", "z", "c"]
            evs = (await c.get(f"/v1/runs/{other}/events")).json()["events"]
            assert check_paired(evs) == [] and [e["text"] for e in evs if e["type"] == "text"] == ["priced a,z,c"]
            results = [e for e in evs if e["type"] == "tool_result"]
            assert bodies(results) == ["a#1", '{"key":"lookups","value":1}', "z#4", "c#5"]
            assert [e.get("replayed") is not None for e in results] == [True, True, False, False]
            [diverged] = [e for e in evs if e["type"] == EventType.REPLAY_DIVERGED]
            calls = [e for e in evs if e["type"] == "tool_call"]
            assert calls[1]["seq"] < diverged["seq"] < results[2]["seq"]  # with the turn that made the call
            assert diverged["index"] == 2 and diverged["reason"] == "mismatch" and diverged["run_id"] == original
            assert diverged["want"]["input"]["url"].endswith("item=b")
            assert diverged["got"]["input"]["url"].endswith("item=z")

            # a live fork of the same turn runs every call
            r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1})
            assert r.status_code == 202 and r.json()["mode"] == "live", r.text
            await disp.drain()
            assert served[5:] == ["a", "b", "c"]
            mem = await c.get("/v1/_memory/scopes/tenant/_/keys/lookups")
            assert json.loads(mem.text)["value"] == 2


async def test_a_replay_fork_past_the_record_runs_for_real_and_never_grants_a_tool(open_rt: Open) -> None:
    """A fork with a `prompt` after the original's second lookup: the original made one more call
    after the cut, so the fork's first call is answered and its second runs; a fork whose agent
    does not hold the recorded tool runs (and is refused) instead of being answered. (A script
    agent's turns count the history's: the first three are the original's.)"""
    served: list[str] = []

    def price(s: Seen) -> Answer:
        served.append(s.target.partition("item=")[2])
        return Answer.text(f"{served[-1]}#{len(served)}")

    async with Loopback({"/price": price}) as srv:
        rt, disp = await open_rt({"shopper": shopper(srv, ["a", "b", "c"]),
                                  "again": shopper(srv, ["a", "b", "c", "d"]),
                                  "nohttp": {**shopper(srv, ["a", "b", "c"]), "tools": ["Memory"]}})
        original = await start(rt, "shopper", "price my basket")
        await disp.drain()
        async with api(rt) as c:
            orig = (await c.get(f"/v1/runs/{original}/events")).json()["events"]
            b_result = [e for e in orig if e["type"] == "tool_result"][2]
            r = await c.post(f"/v1/runs/{original}/fork",
                             json={"at_seq": b_result["seq"], "prompt": "and d", "agent": "again", "mode": "replay"})
            assert r.status_code == 202, r.text
            await disp.drain()
            evs = (await c.get(f"/v1/runs/{r.json()['run_id']}/events")).json()["events"]
            results = [e for e in evs if e["type"] == "tool_result"]
            assert bodies(results) == ["c#3", "d#4"]
            assert [e.get("replayed") is not None for e in results] == [True, False]
            [diverged] = [e for e in evs if e["type"] == EventType.REPLAY_DIVERGED]
            assert diverged["index"] == 1 and diverged["reason"] == "end_of_record" and diverged["want"] is None
            assert served == ["a", "b", "c", "d"]

            r = await c.post(f"/v1/runs/{original}/fork",
                             json={"at_seq": b_result["seq"], "prompt": "c?", "agent": "nohttp", "mode": "replay"})
            await disp.drain()
            evs = (await c.get(f"/v1/runs/{r.json()['run_id']}/events")).json()["events"]
            first = next(e for e in evs if e["type"] == "tool_result")
            assert first["is_error"] and "not permitted" in first["text"] and "replayed" not in first
            [diverged] = [e for e in evs if e["type"] == EventType.REPLAY_DIVERGED]
            assert diverged["reason"] == "not_held"
            assert served == ["a", "b", "c", "d"]


async def test_an_application_tool_is_answered_from_the_record_and_a_live_fork_asks_again(open_rt: Open) -> None:
    """A run's application tool (declared by its caller) comes along to its forks: a replay fork
    answers its call from the record — the application is not asked, the run never parks — and a
    live fork parks on it for the application's answer as the original did."""
    clerk = {"model": "script", "tools": [], "mock": {"script": [
        {"tool": "lookup_order", "input": {"order_id": "A-17"}}, {"text": "found it"}]}}
    tool = {"name": "lookup_order", "description": "the shop's order lookup", "input_schema": {"type": "object"}}
    rt, disp = await open_rt({"clerk": clerk})
    original = await start(rt, "clerk", "where is my order?", client_tools=[tool])
    await disp.drain()
    async with api(rt) as c:
        [pending] = [e for e in (await c.get(f"/v1/runs/{original}/events")).json()["events"]
                     if e["type"] == "tool_pending"]
        r = await c.post(f"/v1/runs/{original}/tool_results",
                         json={"tool_use_id": pending["tool_use"]["id"], "content": "shipped"})
        assert r.status_code == 200, r.text
        await disp.drain()
        assert (await c.get(f"/v1/runs/{original}")).json()["status"] == "completed"

        r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1, "mode": "replay"})
        replayed = r.json()["run_id"]
        await disp.drain()
        assert (await c.get(f"/v1/runs/{replayed}")).json()["status"] == "completed"  # never parked
        evs = (await c.get(f"/v1/runs/{replayed}/events")).json()["events"]
        assert not [e for e in evs if e["type"] in ("tool_pending", "tool_parked")]  # the application not asked
        [result] = [e for e in evs if e["type"] == "tool_result"]
        assert result["text"] == "shipped" and result["replayed"]["run_id"] == original

        r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1})
        live = r.json()["run_id"]
        await disp.drain()
        assert (await c.get(f"/v1/runs/{live}")).json()["status"] == "waiting"
        evs = (await c.get(f"/v1/runs/{live}/events")).json()["events"]
        assert [e["tool_use"]["name"] for e in evs if e["type"] == "tool_pending"] == ["lookup_order"]
