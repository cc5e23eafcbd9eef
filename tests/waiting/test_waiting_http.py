"""The waiting primitives through HTTP: the app over an inline runtime (steps run when the test
drains the dispatcher), each test on its own database so `GET /v1/runs` sees only its runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.waiting import ECHO, FAILING, asker, spawner
from treadle.api.app import create_app
from treadle.testing import ACCEPT_JSON, age_run

AGENTS: dict[str, Any] = {
    "chat": ECHO,
    "asker": asker("ship it?"),
    "quick": asker("fast?", timeout_ms=60_000),
    "parent": spawner([{"name": "bad" if i in (2, 5) else "chat", "prompt": f"t{i}"} for i in range(8)]),
    "boss": spawner([{"name": "asker", "prompt": "a"}, {"name": "asker", "prompt": "b"}]),
    "bad": FAILING,
}


@dataclass
class Http:
    client: httpx.AsyncClient
    rt: Any
    disp: Any

    async def start(self, agent: str, **body: Any) -> str:
        resp = await self.client.post("/v1/runs", json={"agent": agent, "prompt": "hello", **body})
        assert resp.status_code == 202, resp.text
        await self.disp.drain()
        return str(resp.json()["run_id"])

    async def run(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/v1/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        resp = await self.client.get(f"/v1/runs/{run_id}/events")
        assert resp.status_code == 200, resp.text
        return resp.json()["events"]  # type: ignore[no-any-return]

    async def post(self, path: str, body: Any = None) -> httpx.Response:
        resp = await self.client.post(path, json=body)
        await self.disp.drain()
        return resp


@pytest.fixture
async def http(open_runtime: Any, migrated_db_url: str) -> AsyncIterator[Http]:
    rt, disp = await open_runtime(AGENTS, url=migrated_db_url, provider_retries=0)
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    app.state.runtime = rt
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(headers=ACCEPT_JSON, transport=transport, base_url="http://treadle") as client:
        yield Http(client, rt, disp)


def error(resp: httpx.Response, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.json()["code"] == code, resp.text


async def test_interactive_run_over_http(http: Http) -> None:
    run_id = await http.start("chat", interactive=True)
    run = await http.run(run_id)
    assert run["status"] == "waiting" and run["interactive"] is True
    listed = (await http.client.get("/v1/runs", params={"status": "waiting"})).json()
    [item] = listed["runs"]
    assert item["run_id"] == run_id
    assert item["waits"] == [{"kind": "awaiting_input", "key": f"input:{run_id}", "tool_use_id": None,
                              "deadline": None}]

    error(await http.post(f"/v1/runs/{run_id}/input", {"text": "   "}), 422, "validation_error")
    error(await http.post("/v1/runs/r_nope/input", {"text": "hi"}), 404, "run_not_found")
    error(await http.post(f"/v1/runs/{run_id}/cancel", {"scope": "turn"}), 409, "not_mid_turn")

    resp = await http.post(f"/v1/runs/{run_id}/input", {"text": "how are you?"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["delivered"] is True and resp.json()["woke"] is True
    evs = await http.events(run_id)
    assert [e["type"] for e in evs][-4:] == ["user_input", "text", "usage", "awaiting_input"]
    assert evs[-3]["text"] == "how are you?"
    assert (await http.run(run_id))["status"] == "waiting"

    # no scope on an interactive run is loomcycle's turn cancel: the whole run is scope "run"
    resp = await http.post(f"/v1/runs/{run_id}/cancel", {"reason": "done", "scope": "run"})
    assert resp.status_code == 200 and (await http.run(run_id))["status"] == "cancelled"
    error(await http.post(f"/v1/runs/{run_id}/input", {"text": "late"}), 409, "run_finished")
    error(await http.post(f"/v1/runs/{run_id}/cancel", {"scope": "turn"}), 409, "run_finished")


async def test_turn_cancel_over_http(http: Http) -> None:
    plain = await http.start("asker")
    error(await http.post(f"/v1/runs/{plain}/cancel", {"scope": "turn"}), 409, "not_interactive")
    run_id = await http.start("asker", interactive=True)
    resp = await http.post(f"/v1/runs/{run_id}/cancel", {"scope": "turn", "reason": "wrong question"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["stopped"] is True
    assert [e["type"] for e in await http.events(run_id)][-2:] == ["turn_cancelled", "awaiting_input"]
    [q] = (await http.client.get(f"/v1/runs/{run_id}/interrupts")).json()["interrupts"]
    assert q["status"] == "cancelled"
    assert (await http.run(run_id))["status"] == "waiting"


async def test_interrupt_answered_over_http_resumes_the_run(http: Http) -> None:
    run_id = await http.start("asker")
    assert (await http.run(run_id))["status"] == "waiting"
    listed = (await http.client.get("/v1/runs", params={"status": "waiting"})).json()["runs"]
    assert [w["kind"] for w in listed[0]["waits"]] == ["interruption"] and listed[0]["waits"][0]["deadline"]
    resp = await http.client.get(f"/v1/runs/{run_id}/interrupts")
    [q] = resp.json()["interrupts"]
    assert q["status"] == "pending" and q["question"] == "ship it?" and q["options"] == ["yes", "no"]
    pending = [e for e in await http.events(run_id) if e["type"] == "interruption_pending"]
    assert pending[0]["interrupt_id"] == q["interrupt_id"]

    base = f"/v1/runs/{run_id}/interrupts"
    error(await http.post(f"{base}/int_unknown/resolve", {"answer": "yes"}), 404, "interrupt_not_found")
    error(await http.post(f"{base}/{q['interrupt_id']}/resolve", {"disposition": "answer"}), 422,
          "validation_error")
    error(await http.post(f"{base}/{q['interrupt_id']}/resolve", {"answer": "y", "disposition": "maybe"}), 422,
          "validation_error")
    error(await http.post("/v1/runs/r_nope/interrupts/x/resolve", {"answer": "y"}), 404, "interrupt_not_found")
    error(await http.client.get("/v1/runs/r_nope/interrupts"), 404, "run_not_found")

    resp = await http.post(f"{base}/{q['interrupt_id']}/resolve", {"answer": "yes, ship"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["interrupt_id"] == q["interrupt_id"] and body["status"] == "resolved" and body["resolved_at"]
    run = await http.run(run_id)
    assert run["status"] == "completed"
    [res] = [e for e in await http.events(run_id) if e["type"] == "tool_result"]
    assert '"answer":"yes, ship"' in res["text"] and '"status":"resolved"' in res["text"]
    error(await http.post(f"{base}/{q['interrupt_id']}/resolve", {"answer": "again"}), 409, "interrupt_settled")


async def test_an_expired_interrupt_answers_410_and_the_run_gets_timed_out(http: Http) -> None:
    run_id = await http.start("quick")
    [q] = (await http.client.get(f"/v1/runs/{run_id}/interrupts")).json()["interrupts"]
    await age_run(http.rt, run_id, 61)  # the question's minute passes
    resp = await http.post(f"/v1/runs/{run_id}/interrupts/{q['interrupt_id']}/resolve", {"answer": "too late"})
    error(resp, 410, "interrupt_expired")
    run = await http.run(run_id)  # the expiry was settled and the run woken at once, not at the next sweep
    assert run["status"] == "completed"
    [res] = [e for e in await http.events(run_id) if e["type"] == "tool_result"]
    assert '"status":"timed_out"' in res["text"]


async def test_sub_agents_over_http(http: Http) -> None:
    run_id = await http.start("parent")
    run = await http.run(run_id)
    assert run["status"] == "completed"
    [res] = [e for e in await http.events(run_id) if e["type"] == "tool_result"]
    results = json.loads(res["text"])
    assert len(results) == 8 and [r["ok"] for r in results].count(False) == 2
    child = await http.run(results[0]["run_id"])
    assert child["parent_run_id"] == run_id and child["root_run_id"] == run_id and child["depth"] == 1


async def test_cancelling_a_parent_over_http_cancels_its_children(http: Http) -> None:
    run_id = await http.start("boss")
    listed = (await http.client.get("/v1/runs", params={"status": "waiting"})).json()["runs"]
    assert len(listed) == 3  # the parent and its two children
    kids = [r for r in listed if r["parent_run_id"] == run_id]
    assert len(kids) == 2 and all(r["waits"][0]["kind"] == "interruption" for r in kids)
    [parent] = [r for r in listed if r["run_id"] == run_id]
    assert parent["waits"][0]["kind"] == "agent"
    resp = await http.post(f"/v1/runs/{run_id}/cancel", {"reason": "stop all", "scope": "run"})
    assert resp.status_code == 200
    for r in [parent, *kids]:
        assert (await http.run(r["run_id"]))["status"] == "cancelled"
    waiting = (await http.client.get("/v1/runs", params={"status": "waiting"})).json()["runs"]
    assert waiting == []


async def test_waiting_runs_are_listed_a_page_at_a_time(http: Http) -> None:
    ids = {await http.start("chat", interactive=True) for _ in range(3)}
    seen: list[str] = []
    cursor = None
    for _ in range(4):
        params: dict[str, Any] = {"status": "waiting", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await http.client.get("/v1/runs", params=params)).json()
        seen += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 3
    error(await http.client.get("/v1/runs", params={"cursor": "%%%"}), 422, "validation_error")


async def test_a_users_interrupts_are_their_inbox(http: Http) -> None:
    """GET /v1/users/{user_id}/interrupts: the questions of that user's runs (newest first, with
    the agent), pending by default, `status=all` for every one; other users' questions stay out."""
    first = await http.start("asker", user_id="ada")
    second = await http.start("asker", user_id="ada")
    await http.start("asker", user_id="bob")
    await http.start("asker")  # no user

    inbox = (await http.client.get("/v1/users/ada/interrupts")).json()
    assert inbox["user_id"] == "ada"
    assert [q["run_id"] for q in inbox["interrupts"]] == [second, first]
    assert {q["agent"] for q in inbox["interrupts"]} == {"asker"}
    assert all(q["status"] == "pending" and q["question"] == "ship it?" for q in inbox["interrupts"])

    q = inbox["interrupts"][1]
    resp = await http.post(f"/v1/runs/{first}/interrupts/{q['interrupt_id']}/resolve", {"answer": "yes"})
    assert resp.status_code == 200, resp.text
    pending = (await http.client.get("/v1/users/ada/interrupts")).json()["interrupts"]
    assert [p["run_id"] for p in pending] == [second]
    every = (await http.client.get("/v1/users/ada/interrupts", params={"status": "all"})).json()["interrupts"]
    assert [(p["run_id"], p["status"]) for p in every] == [(second, "pending"), (first, "resolved")]
    resolved = (await http.client.get("/v1/users/ada/interrupts", params={"status": "resolved", "limit": 1})).json()
    assert [p["run_id"] for p in resolved["interrupts"]] == [first]
    assert (await http.client.get("/v1/users/nobody/interrupts")).json()["interrupts"] == []
    error(await http.client.get("/v1/users/ada/interrupts", params={"status": "maybe"}), 422, "validation_error")


async def test_a_cancelled_runs_questions_leave_the_inbox(http: Http) -> None:
    run_id = await http.start("asker", user_id="cy")
    [q] = (await http.client.get("/v1/users/cy/interrupts")).json()["interrupts"]
    resp = await http.post(f"/v1/runs/{run_id}/cancel", {"reason": "changed my mind", "scope": "run"})
    assert resp.status_code == 200, resp.text
    assert (await http.run(run_id))["status"] == "cancelled"
    assert (await http.client.get("/v1/users/cy/interrupts")).json()["interrupts"] == []
    [settled] = (await http.client.get(f"/v1/runs/{run_id}/interrupts")).json()["interrupts"]
    assert settled["interrupt_id"] == q["interrupt_id"] and settled["status"] == "cancelled"
    error(await http.post(f"/v1/runs/{run_id}/interrupts/{q['interrupt_id']}/resolve", {"answer": "yes"}), 409,
          "interrupt_settled")


async def test_runs_are_listed_by_user_and_by_agent(http: Http) -> None:
    ada = [await http.start("chat", user_id="ada"), await http.start("asker", user_id="ada")]
    bob = await http.start("chat", user_id="bob")

    async def listed(**params: Any) -> list[str]:
        resp = await http.client.get("/v1/runs", params=params)
        assert resp.status_code == 200, resp.text
        return [r["run_id"] for r in resp.json()["runs"]]

    assert await listed(user_id="ada") == ada[::-1]
    assert await listed(user_id="bob") == [bob]
    assert await listed(agent="chat") == [bob, ada[0]]
    assert await listed(user_id="ada", agent="chat") == [ada[0]]
    assert await listed(user_id="ada", status="waiting") == [ada[1]]
    assert await listed(user_id="nobody") == []
    page = (await http.client.get("/v1/runs", params={"user_id": "ada", "limit": 1})).json()
    rest = await listed(user_id="ada", cursor=page["next_cursor"])
    assert [r["run_id"] for r in page["runs"]] + rest == ada[::-1]


async def test_the_tenants_inbox_holds_every_runs_questions_and_no_other_tenants(http: Http) -> None:
    """GET /v1/interrupts: the pending questions of every run of the tenant (any user, sub-agents
    with their parent), newest first, in one call; another tenant's question stays out."""
    ada = await http.start("asker", user_id="ada")
    anonymous = await http.start("asker")
    boss = await http.start("boss", user_id="bob")
    other = await http.client.post("/v1/runs", json={"agent": "asker", "prompt": "x", "user_id": "ada"},
                                   headers={"X-Treadle-Tenant": "other-tenant"})
    assert other.status_code == 202, other.text
    await http.disp.drain()

    inbox = (await http.client.get("/v1/interrupts")).json()["interrupts"]
    children = {q["run_id"] for q in inbox if q["parent_run_id"] == boss}
    assert len(children) == 2 and all(q["user_id"] == "bob" for q in inbox if q["run_id"] in children)
    assert {q["run_id"] for q in inbox} == {ada, anonymous, *children}      # not the other tenant's
    assert [q["created_at"] for q in inbox] == sorted((q["created_at"] for q in inbox), reverse=True)
    by_run = {q["run_id"]: q for q in inbox}
    assert (by_run[ada]["user_id"], by_run[ada]["agent"], by_run[ada]["parent_run_id"]) == ("ada", "asker", None)
    assert by_run[anonymous]["user_id"] is None

    q = by_run[ada]
    resolved = await http.post(f"/v1/runs/{ada}/interrupts/{q['interrupt_id']}/resolve", {"answer": "yes"})
    assert resolved.status_code == 200, resolved.text
    assert ada not in {p["run_id"] for p in (await http.client.get("/v1/interrupts")).json()["interrupts"]}
    every = (await http.client.get("/v1/interrupts", params={"status": "all", "limit": 100})).json()["interrupts"]
    assert {p["run_id"]: p["status"] for p in every}[ada] == "resolved"
    theirs = (await http.client.get("/v1/interrupts", headers={"X-Treadle-Tenant": "other-tenant"})).json()
    assert [p["run_id"] for p in theirs["interrupts"]] == [other.json()["run_id"]]
    error(await http.client.get("/v1/interrupts", params={"status": "maybe"}), 422, "validation_error")
