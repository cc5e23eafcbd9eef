"""Usage and cost (issue 42 item 1): every model call's `usage` event rolls up, in the statement
that records it (the step commit, or the append before an external tool's call), per
tenant/user/agent/def/provider/model/day, priced from the operator's `pricing:` table;
GET /v1/_usage reports it (JSON or CSV), a tenant's caller sees only its own tenant."""

from __future__ import annotations

import csv
import io
from typing import Any

import httpx
import pytest

from treadle.api.app import create_app
from treadle.domain.content import TextBlock
from treadle.providers.base import ModelRequest, ModelResponse, Usage
from treadle.store.runs import NewRun
from treadle.testing import ScriptedProvider, open_test_runtime, tool_results, tool_use
from treadle.tools.base import ToolContext, ToolEffects, ToolResult

PRICING = {"currency": "USD", "models": {"scripted/echo": {"input": 3.0, "output": 15.0, "cache_write": 3.75,
                                                           "cache_read": 0.3}}}
CALL = Usage(input_tokens=1200, output_tokens=340, cache_creation_input_tokens=50, cache_read_input_tokens=7000)


class Outside:
    """An external tool: the turn that calls it is recorded (with its usage) before the call."""

    name = "Outside"
    description = "reaches outside the database"
    effects: ToolEffects = "external"
    input_schema: dict[str, Any] = {"type": "object"}

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        return ToolResult("done")


def model(req: ModelRequest) -> ModelResponse:
    if not tool_results(req):
        name = "Outside" if req.model == "mock-generic" else "Memory"
        return ModelResponse(content=[tool_use(name, {"op": "get", "scope": "agent", "key": "k"})],
                             stop_reason="tool_use", usage=CALL, model=req.model, provider="scripted")
    return ModelResponse(content=[TextBlock("ok")], stop_reason="end_turn", usage=CALL, model=req.model,
                         provider="scripted")


def prompt() -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]


@pytest.fixture
async def recorded(migrated_db_url: str) -> Any:
    agents = {"a": {"provider": "scripted", "model": "echo", "tools": ["Memory"], "memory_scopes": ["agent"]},
              "cheap": {"provider": "scripted", "model": "tool-caller"},
              "ext": {"provider": "scripted", "model": "mock-generic", "tools": ["Outside"]}}
    async with open_test_runtime(agents, database_url=migrated_db_url, providers=[ScriptedProvider(model)],
                                 config={"pricing": PRICING}, tools=[Outside()]) as (rt, dispatcher):
        for tenant, user, agent in (("acme", "u1", "a"), ("acme", "u1", "a"), ("acme", "u2", "a"),
                                    ("acme", "u2", "cheap"), ("acme", "u3", "ext"), ("other", "u9", "a")):
            await rt.start_run(NewRun(tenant_id=tenant, user_id=user, agent=agent, segments=prompt()))
        await dispatcher.drain()
        yield rt


async def vendor_sums(rt: Any, tenant: str) -> dict[str, int]:
    """What the transcript's usage events say (the vendor's own fields), summed."""
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS calls, sum((payload->'usage'->>'input_tokens')::bigint) AS input_tokens,"
            " sum((payload->'usage'->>'cache_read_input_tokens')::bigint) AS cache_read_tokens"
            " FROM events WHERE type = 'usage' AND tenant_id = %s", (tenant,))
        return dict(await cur.fetchone())


async def test_usage_is_rolled_up_and_priced_exactly(recorded: Any) -> None:
    rt = recorded
    rows = await rt.usage.report(tenant_id="acme", group_by=["user", "model"])
    by = {(r["user_id"], r["model"]): r for r in rows}
    assert set(by) == {("u1", "echo"), ("u2", "echo"), ("u2", "tool-caller"), ("u3", "mock-generic")}
    assert by[("u3", "mock-generic")]["calls"] == 2  # the call before the external tool (appended) and after it
    u1 = by[("u1", "echo")]
    assert (u1["calls"], u1["input_tokens"], u1["output_tokens"], u1["cache_creation_tokens"],
            u1["cache_read_tokens"]) == (4, 4800, 1360, 200, 28000)
    per_call = (1200 * 3.0 + 340 * 15.0 + 50 * 3.75 + 7000 * 0.3) / 1e6
    assert u1["cost"] == pytest.approx(4 * per_call) and u1["currency"] == "USD" and u1["unpriced_calls"] == 0
    unpriced = by[("u2", "tool-caller")]
    assert unpriced["currency"] == "" and unpriced["cost"] == 0 and unpriced["unpriced_calls"] == unpriced["calls"]
    vendor = await vendor_sums(rt, "acme")
    assert sum(r["calls"] for r in rows) == vendor["calls"]
    assert sum(r["input_tokens"] for r in rows) == vendor["input_tokens"]
    assert sum(r["cache_read_tokens"] for r in rows) == vendor["cache_read_tokens"]


async def test_the_usage_route_reports_json_and_csv_and_refuses_unknown_dimensions(recorded: Any) -> None:
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    app.state.runtime = recorded
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.get("/v1/_usage", params={"group_by": "tenant,agent", "tenant": "acme"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["group_by"] == ["tenant", "agent"]
        agents = {(x["tenant_id"], x["agent"]) for x in body["rows"]}
        assert agents == {("acme", "a"), ("acme", "cheap"), ("acme", "ext")}
        assert all("call_count" in x and "calls" not in x for x in body["rows"])
        everyone = (await c.get("/v1/_usage", params={"group_by": "tenant"})).json()["rows"]
        assert {x["tenant_id"] for x in everyone} == {"acme", "other"}  # open mode: the operator's view
        text = (await c.get("/v1/_usage", params={"group_by": "user,day", "tenant": "acme", "format": "csv"})).text
        table = list(csv.DictReader(io.StringIO(text)))
        assert {row["user_id"] for row in table} == {"u1", "u2", "u3"} and "day" in table[0]
        bad = await c.get("/v1/_usage", params={"group_by": "source"})
        assert bad.status_code == 400 and "unknown group_by dimension: source" in bad.text
        bad_from = await c.get("/v1/_usage", params={"from": "yesterday"})
        assert bad_from.status_code == 400
