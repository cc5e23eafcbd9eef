"""Resident sub-agents through HTTP (`GET /v1/_resident`, `POST /v1/_resident/{run_id}/close|cancel`)
and treadle's Python client: the app over an inline runtime on the test's own database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.waiting import ECHO, answer, children, scripted, start, status, types
from treadle.api.app import create_app
from treadle.client import AsyncTreadle
from treadle.client.errors import ApiError

ASK = {"tool": "Interruption", "input": {"op": "ask", "question": "proceed?", "options": ["yes", "no"]}}
ASKS_EVERY_TURN = scripted([ASK, {"text": "asked"}, ASK, {"text": "asked again"}], ["Interruption"])
HOLDS: list[dict[str, Any]] = [
    {"tool": "Agent", "input": {"op": "open", "name": "echo", "prompt": "hello", "idle_ttl_seconds": 90}},
         {"tool": "Agent", "input": {"op": "open", "name": "asker", "prompt": "q"}},
         {"tool": "Interruption", "input": {"op": "ask", "question": "keep them?"}}, {"text": "bye"}]
AGENTS = {"holder": scripted(HOLDS, ["Agent", "Interruption"]), "echo": ECHO, "asker": ASKS_EVERY_TURN}


@pytest.fixture
async def served(open_runtime: Any, migrated_db_url: str) -> AsyncIterator[tuple[Any, Any, AsyncTreadle]]:
    rt, disp = await open_runtime(AGENTS, url=migrated_db_url, provider_retries=0)
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    app.state.runtime = rt
    async with AsyncTreadle("http://treadle", transport=httpx.ASGITransport(app=app)) as client:
        yield rt, disp, client


async def test_list_close_and_cancel_over_http(served: tuple[Any, Any, AsyncTreadle]) -> None:
    rt, disp, client = served
    parent = await start(rt, "holder")
    await disp.drain()
    # the asker's first turn asks: open waits for it; answer it so the parent opens both
    [asker_kid] = [k for k in await children(rt, parent) if k["agent"] == "asker"]
    await answer(rt, asker_kid["id"])
    await disp.drain()
    assert await status(rt, parent) == "waiting"  # on its own question now, holding two residents
    listed = await client.residents.list()
    assert {r.agent for r in listed.resident} == {"echo", "asker"}
    by_agent = {r.agent: r for r in listed.resident}
    echo = by_agent["echo"]
    assert echo.state == "awaiting_input" and echo.idle_ttl_seconds == 90 and echo.parent_run_id == parent
    assert echo.agent_id == echo.child_run_id and echo.parent_agent_id == parent and echo.tenant_id == "default"
    assert by_agent["asker"].idle_ttl_seconds == 1800  # the operator's default
    assert [r.child_run_id for r in (await client.residents.list(parent_run_id="r_other")).resident] == []

    # a parked child has no turn to stop; close ends it (idempotent for a known one)
    assert (await client.residents.cancel(echo.child_run_id)).stopped is False
    closed = await client.residents.close(echo.child_run_id)
    assert closed.closed is True and closed.run_id == echo.child_run_id
    await disp.drain()
    assert await status(rt, echo.child_run_id) == "cancelled"
    assert (await client.residents.close(echo.child_run_id)).closed is True
    assert [r.agent for r in (await client.residents.list()).resident] == ["asker"]
    everything = await client.residents.list(include_closed=True)
    [gone] = [r for r in everything.resident if r.agent == "echo"]
    assert gone.state == "closed" and gone.close_reason == "closed by operator"

    # mid-turn: send the asker a turn from outside (steering input) so it asks again, then stop it
    asker_id = by_agent["asker"].child_run_id
    assert (await client.runs.input(asker_id, "again")).delivered is True
    await disp.drain()
    assert [r.state for r in (await client.residents.list()).resident] == ["running"]
    assert (await client.residents.cancel(asker_id)).stopped is True
    await disp.drain()
    assert [r.state for r in (await client.residents.list()).resident] == ["awaiting_input"]
    assert "turn_cancelled" in types(list(await rt.runs.events("default", asker_id)))

    with pytest.raises(ApiError) as err:
        await client.residents.close("r_nope")
    assert err.value.status == 404 and err.value.code == "resident_not_found"
    with pytest.raises(ApiError) as err:
        await client.residents.cancel(parent)  # a run that is not a resident
    assert err.value.code == "resident_not_found"


async def test_a_tenant_sees_and_acts_on_its_own_residents_only(open_runtime: Any, migrated_db_url: str) -> None:
    from tests.support.tenancy import api, bearer, mint

    holds: list[dict[str, Any]] = [
        {"tool": "Agent", "input": {"op": "open", "name": "echo", "prompt": "mine"}}, ASK, {"text": "bye"}]
    rt, disp = await open_runtime({"p": scripted(holds, ["Agent", "Interruption"]), "echo": ECHO},
                                  url=migrated_db_url)
    parents = {t: await start(rt, "p", tenant=t) for t in ("acme", "bolt")}
    await disp.drain()
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme", tenant="acme", scopes=["substrate:tenant"]))
        bolt = bearer(await mint(c, operator, "bolt", tenant="bolt", scopes=["substrate:tenant"]))
        reader = bearer(await mint(c, operator, "reader", tenant="acme", scopes=["runs:read"]))
        [mine] = (await c.get("/v1/_resident", headers=acme)).json()["resident"]
        [theirs] = (await c.get("/v1/_resident", headers=bolt)).json()["resident"]
        assert (mine["tenant_id"], mine["parent_run_id"]) == ("acme", parents["acme"])
        assert (theirs["tenant_id"], theirs["parent_run_id"]) == ("bolt", parents["bolt"])
        for action in ("close", "cancel"):  # another tenant's resident is not found, as an unknown one
            r = await c.post(f"/v1/_resident/{theirs['child_run_id']}/{action}", headers=acme)
            assert r.status_code == 404 and r.json()["code"] == "resident_not_found", r.text
        r = await c.get("/v1/_resident", params={"tenant": "bolt"}, headers=acme)
        assert r.status_code == 403 and r.json()["code"] == "insufficient_scope"
        r = await c.get("/v1/_resident", headers=reader)  # runs:read may not list them
        assert r.status_code == 403
        everyone = (await c.get("/v1/_resident", headers=operator)).json()["resident"]
        assert {x["tenant_id"] for x in everyone} == {"acme", "bolt"}
        focused = (await c.get("/v1/_resident", params={"tenant": "bolt"}, headers=operator)).json()["resident"]
        assert [x["child_run_id"] for x in focused] == [theirs["child_run_id"]]
        r = await c.post(f"/v1/_resident/{mine['child_run_id']}/close", headers=acme)
        assert r.status_code == 200 and r.json() == {"run_id": mine["child_run_id"], "closed": True}
    await disp.drain()
    assert await status(rt, mine["child_run_id"], tenant="acme") == "cancelled"
    assert await status(rt, theirs["child_run_id"], tenant="bolt") == "waiting"
