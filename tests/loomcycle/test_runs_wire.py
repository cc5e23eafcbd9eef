"""loomcycle's runs wire contract against a served treadle (uvicorn on loopback, workers, the
shared database): the shapes are loomcycle's as documented in its source (internal/api/http:
server.go runRequest / handleRuns, run_stream.go, sse.go; internal/providers/provider.go Event;
internal/connector/types.go SpawnRunResult) and /work/shared/reference/loomcycle-wire.md §1."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.support import sidecar
from tests.support.sidecar import sidecar_client, sidecar_settings
from tests.support.vendors.base import text
from tests.support.vendors.openai import FakeOpenAI
from tests.support.waiting import asker, spawner
from treadle.client.http import SseEvent, parse_sse
from treadle.config import parse_config

KEY_ENV = "I18B_LOOM_FAKE_OPENAI_KEY"
PNG_1PX = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cfc0f01f0005"
    "0001ff5aa0c8a10000000049454e44ae426082")).decode()


class Served(sidecar.Served):
    def __init__(self, client: httpx.AsyncClient, vendor: FakeOpenAI) -> None:
        super().__init__(client)
        self.vendor = vendor


@pytest.fixture(scope="module")
async def served(db_url: str) -> AsyncIterator[Served]:
    vendor = FakeOpenAI()
    async with vendor:
        import os

        os.environ[KEY_ENV] = vendor.key
        config = parse_config({
            "providers": {"fake": {"driver": "openai", "base_url": vendor.url + "/v1", "api_key_env": KEY_ENV}},
            "tiers": {"premium": [{"provider": "fake", "model": "gpt-4o-mini"}]},
            "agents": {
                "echo": {"model": "echo"},
                "tools": {"model": "tool-caller", "tools": ["Memory", "Context"], "mock": {"tool_calls": 1}},
                "asker": asker("ship it?"),
                "parent": spawner([{"name": "echo", "prompt": "child"}]),
                "boss": spawner([{"name": "asker", "prompt": "ask"}]),
                "gpt": {"provider": "fake", "model": "gpt-4o-mini"},
                "slow": {"model": "echo", "mock": {"latency_ms": 300}},
            },
        })
        try:
            async with sidecar_client(sidecar_settings(db_url, provider_retries=0), config) as client:
                yield Served(client, vendor)
        finally:
            os.environ.pop(KEY_ENV, None)


async def test_post_runs_stream_opens_with_session_and_agent_frames(served: Served) -> None:
    frames = await served.stream("POST", "/v1/runs", json={
        "agent": "echo", "prompt": "streamed", "agent_id": "a_" + secrets.token_hex(8),
        "parent_context": {"root_agent_run_id": "r_root", "function_key": "fk"}})
    session, agent = frames[0], frames[1]
    # loomcycle: `session` {type, text: session_id}; `agent` {agent_id, run_id, session_id,
    # parent_agent_id: null, parent_context} without a `type` field; then started … done
    assert session.event == "session" and session.data["type"] == "session"
    assert session.data["text"] == agent.data["session_id"] and session.data["text"].startswith("s_")
    assert agent.event == "agent" and "type" not in agent.data
    assert agent.data["parent_agent_id"] is None
    assert agent.data["parent_context"] == {"root_agent_run_id": "r_root", "function_key": "fk"}
    assert agent.data["run_id"].startswith("r_") and agent.data["agent_id"].startswith("a_")
    names = [f.event for f in frames if f.id is not None]
    assert "started" in names and names[-1] == "done"
    done = frames[-1].data
    assert done["type"] == "done" and done["stop_reason"] == "end_turn"
    text = [f.data["text"] for f in frames if f.event == "text"]
    assert text == ["streamed"]
    # GET /v1/runs/{id}/stream: the `agent` frame carries agent_id, run_id, session_id only
    again = await served.stream("GET", f"/v1/runs/{agent.data['run_id']}/stream")
    assert again[0].event == "agent" and set(again[0].data) == {"agent_id", "run_id", "session_id"}


async def test_agent_routes_read_and_cancel_the_whole_run(served: Served) -> None:
    handle = "a_" + secrets.token_hex(8)
    started = await served.start("slow", agent_id=handle, interactive=True,
                                 parent_context={"tier_at_run": "low"})
    assert started["agent_id"] == handle and started["session_id"].startswith("s_")
    run_id = started["run_id"]
    await served.post("/v1/runs", {"agent": "echo", "prompt": "x", "agent_id": handle}, 409)  # live: in use
    state = await served.get(f"/v1/agents/{handle}")
    for key in ("agent_id", "run_id", "session_id", "agent", "user_id", "parent_agent_id", "status", "started_at",
                "completed_at", "stop_reason", "error", "usage", "live", "interactive", "parent_context"):
        assert key in state, key
    assert state["run_id"] == run_id and state["parent_context"] == {"tier_at_run": "low"}
    listed = await served.get(f"/v1/users/{served.user}/agents")
    assert handle in [a["agent_id"] for a in listed["agents"]]
    cancelled = await served.post(f"/v1/agents/{handle}/cancel", {"reason": "enough"})
    assert cancelled["cancelled"] is True and cancelled["agent_id"] == handle and cancelled["cascaded"] == []
    final = await served.wait(run_id)
    assert final["status"] == "cancelled"
    again = await served.post(f"/v1/agents/{handle}/cancel")  # idempotent: the prior status
    assert again["cancelled"] is False and again["status"] == "cancelled"
    await served.get("/v1/agents/a_nobody", 404)


async def test_interactive_turn_cancel_steer_and_nested_payloads(served: Served) -> None:
    run_id = (await served.start("echo", interactive=True))["run_id"]
    await served.wait(run_id, lambda r: r["status"] == "waiting")
    # parked for input: loomcycle's turn cancel (no scope) answers 409 not_mid_turn
    parked = await served.client.post(f"/v1/runs/{run_id}/cancel", json={})
    assert parked.status_code == 409 and parked.json()["code"] == "not_mid_turn"
    delivered = await served.post(f"/v1/runs/{run_id}/input", {"text": "more please"})
    assert delivered["run_id"] == run_id and delivered["delivered"] is True
    await served.wait(run_id, lambda r: r["status"] == "waiting" and r["iterations"] >= 2)
    await served.post(f"/v1/runs/{run_id}/cancel", {"scope": "run"})
    await served.wait(run_id)
    frames = await served.stream("GET", f"/v1/runs/{run_id}/stream")
    steer = [f for f in frames if f.event == "steer"]
    assert len(steer) == 1 and steer[0].data["type"] == "steer"
    assert steer[0].data["user_input"]["text"] == "more please" and steer[0].data["user_input"]["source"] == "steer"
    awaiting = [f.data["awaiting_input"] for f in frames if f.event == "awaiting_input"]
    assert awaiting == [{"since_turn": 1}, {"since_turn": 2}]


async def test_turn_cancel_mid_turn_parks_with_nested_payload(served: Served) -> None:
    run_id = (await served.start("slow", interactive=True))["run_id"]
    await served.wait(run_id, lambda r: r["status"] == "running")
    resp = await served.client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "wrong question"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["run_id"] == run_id and body["stopped"] is True and body["parked"] is True
    await served.wait(run_id, lambda r: r["status"] == "waiting")
    await served.post(f"/v1/runs/{run_id}/cancel", {"scope": "run"})
    frames = await served.stream("GET", f"/v1/runs/{run_id}/stream")
    cancelled = [f.data for f in frames if f.event == "turn_cancelled"]
    assert cancelled and cancelled[0]["turn_cancelled"]["reason"] == "wrong question"
    assert isinstance(cancelled[0]["turn_cancelled"]["since_turn"], int)


async def test_turn_cancel_of_a_non_interactive_run_is_409_and_the_run_goes_on(served: Served) -> None:
    """loomcycle's client `cancelTurn` posts `{}` or `{reason}` (no scope): on a run that is not
    interactive loomcycle answers 409 `not_interactive` (server.go handleCancelTurn) and the run
    is left alone: a turn cancel never ends a run."""
    run_id = (await served.start("asker"))["run_id"]
    await served.wait(run_id, lambda r: r["status"] == "waiting")
    for body in ({}, {"reason": "stop the turn"}):
        resp = await served.client.post(f"/v1/runs/{run_id}/cancel", json=body)
        assert resp.status_code == 409, resp.text
        assert resp.json()["code"] == "not_interactive"
    run = await served.get(f"/v1/runs/{run_id}")
    assert run["status"] == "waiting" and not run.get("cancel_requested")
    [pending] = (await served.get(f"/v1/runs/{run_id}/interrupts"))["interrupts"]
    await served.post(f"/v1/runs/{run_id}/interrupts/{pending['interrupt_id']}/resolve", {"answer": "yes"})
    assert (await served.wait(run_id))["status"] == "completed"
    # a running one too; `{"scope": "run"}` still ends the whole run
    run_id = (await served.start("slow"))["run_id"]
    resp = await served.client.post(f"/v1/runs/{run_id}/cancel", json={})
    assert resp.status_code == 409 and resp.json()["code"] == "not_interactive"
    assert (await served.wait(run_id))["stop_reason"] == "end_turn"


async def test_interruption_pending_is_nested_and_resolved_by_client(served: Served) -> None:
    run_id = (await served.start("asker"))["run_id"]
    await served.wait(run_id, lambda r: r["status"] == "waiting")
    listed = await served.get(f"/v1/runs/{run_id}/interrupts")
    [pending] = listed["interrupts"]
    resolved = await served.post(f"/v1/runs/{run_id}/interrupts/{pending['interrupt_id']}/resolve",
                                 {"kind": pending["kind"], "answer": "yes", "resolved_by": "client"})
    assert resolved["interrupt_id"] == pending["interrupt_id"] and resolved["status"] == "resolved"
    await served.wait(run_id)
    frames = await served.stream("GET", f"/v1/runs/{run_id}/stream")
    [asked] = [f.data for f in frames if f.event == "interruption_pending"]
    nested = asked["interruption"]
    assert set(nested) == {"interrupt_id", "kind", "question", "options", "context", "priority", "expires_at"}
    assert nested["question"] == "ship it?" and nested["options"] == ["yes", "no"]


async def test_unsupported_fields_are_refused_naming_the_field(served: Served) -> None:
    for field, value in (("user_bearer", "x" * 20),
                         ("web_search_filter", "drop")):
        resp = await served.client.post("/v1/runs", json={"agent": "echo", "prompt": "x", field: value})
        assert resp.status_code == 400 and resp.json()["code"] == "unsupported_field", resp.text
        assert resp.json()["error"].startswith(f"{field}:")
    resp = await served.client.post("/v1/runs", json={"agent": "echo", "prompt": "x", "user_tier": "nope"})
    assert resp.status_code == 400 and resp.json()["code"] == "unknown_user_tier"
    resp = await served.client.post("/v1/runs", json={"agent": "echo", "prompt": "x", "tenant_id": "other"})
    assert resp.status_code == 400 and resp.json()["code"] == "tenant_mismatch"
    resp = await served.client.post("/v1/runs", json={"agent": "echo", "prompt": "x", "tenant_id": "default"})
    assert resp.status_code == 202


async def test_tools_narrow_the_agents_tools(served: Served) -> None:
    run_id = (await served.start("tools", tools=["Context", "HTTP"]))["run_id"]
    await served.wait(run_id)
    events = (await served.get(f"/v1/runs/{run_id}/events"))["events"]
    calls = [e["tool_use"]["name"] for e in events if e["type"] == "tool_call"]
    assert calls == ["Context"]  # the mock calls the first tool it is offered: Memory was narrowed away
    wide = (await served.start("tools"))["run_id"]
    await served.wait(wide)
    events = (await served.get(f"/v1/runs/{wide}/events"))["events"]
    assert [e["tool_use"]["name"] for e in events if e["type"] == "tool_call"] == ["Memory"]


async def test_parent_context_reaches_sub_agents(served: Served) -> None:
    ctx = {"root_agent_run_id": "r_caller", "board_scope": "b1"}
    started = await served.start("parent", parent_context=ctx)
    await served.wait(started["run_id"])
    agents = (await served.get(f"/v1/users/{served.user}/agents"))["agents"]
    [child] = [a for a in agents if a["parent_agent_id"] == started["agent_id"]]
    assert child["parent_context"] == ctx


async def test_sampling_user_tier_and_images_reach_the_provider(served: Served) -> None:
    served.vendor.then(text("seen"), text("tiered"))
    before = len(served.vendor.calls)
    sampled = await served.start("gpt", sampling={"temperature": 0.2, "top_p": 0.9, "seed": 7, "stop": ["END"]},
                                 segments=[{"role": "user", "content": [
                                     {"type": "trusted-text", "text": "what is this?"},
                                     {"type": "image", "media_type": "image/png", "data": PNG_1PX}]}],
                                 prompt=None)
    assert (await served.wait(sampled["run_id"]))["status"] == "completed"
    body = served.vendor.calls[before]
    assert (body["temperature"], body["top_p"], body["seed"], body["stop"]) == (0.2, 0.9, 7, ["END"])
    parts = body["messages"][-1]["content"]
    assert any(p.get("type") == "image_url" and PNG_1PX in p["image_url"]["url"] for p in parts), parts
    # user_tier: the echo agent's run is routed through tier "premium" (the fake vendor)
    tiered = await served.start("echo", user_tier="premium")
    assert (await served.wait(tiered["run_id"]))["status"] == "completed"
    assert served.vendor.calls[before + 1]["model"] == "gpt-4o-mini"
    assert not served.vendor.violations
    bad = await served.client.post("/v1/runs", json={"agent": "echo", "segments": [{"role": "system", "content": [
        {"type": "image", "media_type": "image/png", "data": PNG_1PX}]}]})
    assert bad.status_code == 422 and "user segments only" in bad.text


async def test_run_timeout_fails_the_run_at_its_next_step(served: Served, db_url: str) -> None:
    run_id = (await served.start("echo", interactive=True, run_timeout_seconds=3600))["run_id"]
    await served.wait(run_id, lambda r: r["status"] == "waiting")
    await served.client.post(f"/v1/runs/{run_id}/input", json={"text": "later"})  # before the deadline: served
    await served.wait(run_id, lambda r: r["status"] == "waiting" and r["iterations"] >= 2)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:  # move the deadline back
        await conn.execute("UPDATE runs SET run_options = jsonb_set(run_options, '{deadline_unix}', '0')"
                           " WHERE id = %s", (run_id,))
    await served.client.post(f"/v1/runs/{run_id}/input", json={"text": "too late"})
    run = await served.wait(run_id)
    assert run["status"] == "failed" and run["error"] == "run timeout exceeded"
    assert run["stop_reason"] is None and run["error_detail"]["code"] == "run_timeout"


async def test_failed_run_carries_error_string_and_no_stop_reason(served: Served) -> None:
    served.vendor.then()  # an empty script: the vendor answers 500, retries are off
    run_id = (await served.start("gpt"))["run_id"]
    run = await served.wait(run_id)
    assert run["status"] == "failed" and isinstance(run["error"], str) and run["error"]
    assert run["stop_reason"] is None and isinstance(run["error_detail"], dict)
    served.vendor.violations.clear()


async def test_batch_is_index_aligned(served: Served) -> None:
    out = await served.post("/v1/runs:batch", {"spawns": [
        {"agent": "echo", "prompt": "one"},
        {"agent": "nope", "prompt": "two"},
        {"agent": "echo", "prompt": "three", "parent_context": {"function_key": "k3"}},
    ], "timeout_ms": 20_000})
    assert out["spawned"] == 2 and len(out["results"]) == 3
    first, bad, third = out["results"]
    assert first["status"] == "completed" and first["final_text"] == "one"
    assert set(first) >= {"agent_id", "run_id", "session_id", "status", "stop_reason", "final_text", "usage",
                          "error", "parent_context"}
    assert bad["status"] == "failed" and "nope" in bad["error"]
    assert third["final_text"] == "three" and third["parent_context"] == {"function_key": "k3"}
    too_many = await served.client.post("/v1/runs:batch", json={"spawns": [{"agent": "echo", "prompt": "x"}] * 33})
    assert too_many.status_code == 422


async def test_channels_and_whoami_in_loomcycles_names(served: Served) -> None:
    name = "lc-" + secrets.token_hex(4)
    made = await served.post("/v1/_channels", {"name": name, "scope": "global", "semantic": "broadcast",
                                               "default_ttl": 60}, 201)
    assert made["default_ttl"] == 60 and made["default_ttl_seconds"] == 60
    published = await served.post(f"/v1/_channels/{name}/publish", {"payload": {"n": 1}}, 202)
    assert published["msg_id"] and published["channel"] == name and published["created_at"]
    await served.post(f"/v1/_channels/{name}/publish", {"payload": {"n": 1}, "value": {"n": 2}}, 422)
    waited = await served.post("/v1/_channels/_await", {"channels": [name], "scope": "global", "wait_ms": 10})
    assert waited["satisfied"] is True
    got = await served.post(f"/v1/_channels/{name}/subscribe", {"max_messages": 5})
    assert [m["value"] for m in got["messages"]] == [{"n": 1}] and got["next_cursor"]
    assert (await served.post(f"/v1/_channels/{name}/subscribe", {}))["messages"] == []  # the cursor moved
    await served.post(f"/v1/_channels/{name}/ack", {"cursor": got["next_cursor"]})
    me = await served.get("/v1/_me")
    assert me["tenant_id"] == "default" and me["subject"] == "default" and me["is_admin"] is True


async def test_session_transcript_and_memory_scopes(served: Served) -> None:
    started = await served.start("echo")
    await served.wait(started["run_id"])
    out = await served.get(f"/v1/sessions/{started['session_id']}/transcript")
    assert out["session"]["id"] == started["session_id"] and out["session"]["agent"] == "echo"
    types = [e["type"] for e in out["events"]]
    assert types[0] == "user_input" and types[-1] == "done"
    first = out["events"][0]
    assert first["run_id"] == started["run_id"] and isinstance(first["ts_ns"], int) and first["ts_ns"] > 0
    assert first["payload"][0]["content"][0]["text"] == "hello"
    await served.get("/v1/sessions/s_nope/transcript", 404)
    scopes = await served.get("/v1/_memory/scopes")
    assert [s["name"] for s in scopes["scopes"]] == ["agent", "user", "tenant"]


async def test_one_live_run_per_agent_id_even_when_racing(served: Served) -> None:
    handle = "a_" + secrets.token_hex(8)
    body = {"agent": "echo", "prompt": "x", "agent_id": handle, "interactive": True}
    answers = await asyncio.gather(*(served.client.post("/v1/runs", json=body) for _ in range(4)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [202, 409, 409, 409], [r.text for r in answers]
    assert all(r.json()["code"] == "agent_id_in_use" for r in answers if r.status_code == 409)
    await served.post(f"/v1/agents/{handle}/cancel")
    run_id = next(r.json()["run_id"] for r in answers if r.status_code == 202)
    await served.wait(run_id)
    again = await served.start("echo", agent_id=handle)  # a finished run frees its handle
    assert again["agent_id"] == handle


async def test_a_retry_with_its_idempotency_key_gets_its_run_back_despite_the_agent_id(served: Served) -> None:
    handle = "a_" + secrets.token_hex(8)
    body = {"agent": "echo", "prompt": "x", "agent_id": handle, "interactive": True}
    key = {"Idempotency-Key": "k-" + secrets.token_hex(6)}
    first = await served.client.post("/v1/runs", json=body, headers=key)
    again = await served.client.post("/v1/runs", json=body, headers=key)
    assert (first.status_code, again.status_code) == (202, 202), again.text
    assert again.json()["run_id"] == first.json()["run_id"] and again.json()["created"] is False
    await served.post(f"/v1/agents/{handle}/cancel")


async def test_cancel_agent_cascades_to_the_runs_sub_agents(served: Served) -> None:
    boss = await served.start("boss")
    await served.wait(boss["run_id"], lambda r: r["status"] == "waiting")
    agents = (await served.get(f"/v1/users/{served.user}/agents"))["agents"]
    [child] = [a for a in agents if a["parent_agent_id"] == boss["agent_id"]]
    await served.wait(child["run_id"], lambda r: r["status"] == "waiting")
    out = await served.post(f"/v1/agents/{boss['agent_id']}/cancel", {"reason": "stop all"})
    assert out["cancelled"] is True and out["cascaded"] == [child["agent_id"]] and out["cancelled_count"] == 2
    assert (await served.wait(child["run_id"]))["status"] == "cancelled"
    assert (await served.wait(boss["run_id"]))["status"] == "cancelled"


async def _run_states(served: Served, query: str, until_run: list[str],
                      n_done: int) -> tuple[SseEvent, list[dict[str, Any]]]:
    """Open loomcycle's user run-state stream, start the runs `until_run` names once it is open,
    and read `run_state` frames until `n_done` terminal ones arrived."""
    states: list[dict[str, Any]] = []
    async with served.client.stream("GET", f"/v1/users/{served.user}/agents/stream{query}",
                                    headers={"Accept": "text/event-stream"}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        frames = parse_sse(resp.aiter_lines())
        opened = await asyncio.wait_for(anext(frames), 10)
        for agent in until_run:
            await served.start(agent)

        async def read() -> None:
            done = 0
            async for f in frames:
                assert f.event == "run_state", f
                states.append(f.data)
                done += f.data["status"] in ("completed", "failed", "cancelled")
                if done == n_done:
                    return

        await asyncio.wait_for(read(), 20)
    return opened, states


async def test_user_agents_stream_sends_loomcycle_run_state_frames(served: Served) -> None:
    """loomcycle's GET /v1/users/{user_id}/agents/stream (runs_stream.go; its client's
    streamUserRunStates): `stream_open`, then a `run_state` per transition
    (connector.RunStateEvent)."""
    opened, states = await _run_states(served, "", ["echo"], 1)
    assert opened.event == "stream_open"
    assert opened.data == {"user_id": served.user, "filter_status": None, "filter_agent": "",
                           "keepalive_interval": opened.data["keepalive_interval"]}
    last = states[-1]
    assert last["status"] == "completed" and last["stop_reason"] == "end_turn"
    assert last["agent"] == "echo" and last["user_id"] == served.user and last["agent_id"].startswith("a_")
    assert last["run_id"].startswith("r_") and last["ts"] and "error" not in last
    assert all(s["run_id"] == last["run_id"] for s in states)
    assert len({s["status"] for s in states}) == len(states)  # one frame per transition


async def test_user_agents_stream_filters_by_status_and_agent(served: Served) -> None:
    opened, states = await _run_states(served, "?status=completed,failed&agent=echo", ["slow", "echo"], 1)
    assert opened.data["filter_status"] == ["completed", "failed"] and opened.data["filter_agent"] == "echo"
    assert [(s["agent"], s["status"]) for s in states] == [("echo", "completed")]
