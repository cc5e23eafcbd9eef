"""Budgets (issue 42 item 2): /v1/_limits (loomcycle's shape), a hard limit refusing a new run with
429 `token_limit_exceeded` (loomcycle's body) and ending a running one at its next iteration
boundary with stop reason `budget_exceeded`, a soft one recorded once per run as a `limit` event —
and no other tenant's run touched. Usage is what the steps committed (usage_daily), so nothing of
it lives in a process: a worker killed mid-run leaves the same figures for the next one to check."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from treadle.api.app import create_app
from treadle.domain.content import TextBlock
from treadle.domain.events import EventType
from treadle.errors import TokenLimitExceeded
from treadle.providers.base import ModelRequest, ModelResponse, Usage
from treadle.store.runs import NewRun, RunRecord
from treadle.testing import ACCEPT_JSON, ScriptedProvider, open_test_runtime, tool_results, tool_use, until

CALL = Usage(input_tokens=1000, output_tokens=200, cache_creation_input_tokens=0, cache_read_input_tokens=300)
PER_CALL = 1500  # tokens one call counts (input + output + cache creation + cache read)
ITERATIONS = 12  # a run left alone calls its model this often and completes (end_turn)


def model(req: ModelRequest) -> ModelResponse:
    if len(tool_results(req)) < ITERATIONS - 1:
        return ModelResponse(content=[tool_use("Memory", {"op": "get", "scope": "agent", "key": "k"})],
                             stop_reason="tool_use", usage=CALL, model=req.model, provider="scripted")
    return ModelResponse(content=[TextBlock("done")], stop_reason="end_turn", usage=CALL, model=req.model,
                         provider="scripted")


AGENTS = {"looper": {"provider": "scripted", "model": "echo", "tools": ["Memory"], "memory_scopes": ["agent"],
                     "max_iterations": 50},
          "other": {"provider": "scripted", "model": "echo", "tools": ["Memory"], "memory_scopes": ["agent"],
                    "max_iterations": 50}}


def prompt() -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]


@pytest.fixture
async def runtime(migrated_db_url: str) -> Any:
    # this test's own Prometheus instruments: the process's may be another test's (a cloud shape's
    # EMF-only metrics have no registry), depending on which tests ran before in this worker
    from treadle.telemetry.metrics import Metrics, use_metrics

    use_metrics(Metrics())
    try:
        async with open_test_runtime(AGENTS, database_url=migrated_db_url,
                                     providers=[ScriptedProvider(model)]) as pair:
            yield pair
    finally:
        use_metrics(None)


def client(rt: Any, token: str | None = None) -> httpx.AsyncClient:
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    app.state.runtime = rt
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                             headers={**ACCEPT_JSON, **headers})


async def stored(rt: Any, tenant: str, run_id: str) -> RunRecord:
    got = await rt.runs.get(tenant, run_id)
    assert got is not None
    return got  # type: ignore[no-any-return]


async def calls_of(rt: Any, tenant: str) -> int:
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM events WHERE type = 'usage' AND tenant_id = %s", (tenant,))
        row = await cur.fetchone()
    return int(row["n"])


async def test_a_hard_limit_stops_50_runs_within_one_iteration_and_spares_other_tenants(runtime: Any) -> None:
    rt, dispatcher = runtime
    limit = 40_000
    hard_before, refused_before = crossings("tenant", "hard"), crossings("tenant", "refused")
    async with client(rt) as c:
        r = await c.put("/v1/_limits", json={"tenant_id": "acme", "scope": "tenant", "hard_limit": limit})
        assert r.status_code == 200, r.text
        row = r.json()
        assert row["updated_at"] and {k: v for k, v in row.items() if k not in ("updated_at", "updated_by")} == {
            "tenant_id": "acme", "scope": "tenant", "scope_id": "", "hard_limit": limit, "window": "month",
            "metric": "tokens", "used": 0.0}
    runs = [(await rt.start_run(NewRun(tenant_id="acme", user_id=f"u{i}", agent="looper", segments=prompt())))[0]
            for i in range(50)]
    bystanders = [(await rt.start_run(NewRun(tenant_id="other", agent="other", segments=prompt())))[0]
                  for _ in range(3)]
    await dispatcher.drain()

    # the steps interleave run by run: once the committed usage reaches the limit, every run's next
    # step top ends it — no run calls its model again
    crossing = math.ceil(limit / PER_CALL)
    assert await calls_of(rt, "acme") == crossing
    for run in runs:
        got = await stored(rt, "acme", run.id)
        assert got.status == "completed" and got.stop_reason == "budget_exceeded", got
        events = await rt.runs.events("acme", run.id)
        limit_events = [e.payload for e in events if e.type == EventType.LIMIT]
        assert limit_events and limit_events[-1]["limit"]["severity"] == "hard"
        assert limit_events[-1]["limit"]["scope"] == "tenant" and limit_events[-1]["limit"]["limit"] == limit
        assert events[-1].type == EventType.DONE and events[-1].payload["stop_reason"] == "budget_exceeded"
    for run in bystanders:  # another tenant: untouched, every iteration it wanted
        got = await stored(rt, "other", run.id)
        assert got.status == "completed" and got.stop_reason == "end_turn" and got.iterations == ITERATIONS
    assert await calls_of(rt, "other") == 3 * ITERATIONS
    assert crossings("tenant", "hard") == hard_before + 50

    # a new run of the tenant is refused before it starts: loomcycle's 429 body
    with pytest.raises(TokenLimitExceeded):
        await rt.start_run(NewRun(tenant_id="acme", agent="looper", segments=prompt()))
    assert crossings("tenant", "refused") == refused_before + 1
    async with client(rt) as c:  # open mode acts for the default tenant: its kill switch, a hard limit of 0
        listed = (await c.get("/v1/_limits", params={"tenant": "acme"})).json()["limits"]
        ok = await c.post("/v1/runs", json={"agent": "other", "prompt": "go"})
        assert (await c.put("/v1/_limits", json={"scope": "tenant", "hard_limit": 0})).status_code == 200
        r = await c.post("/v1/runs", json={"agent": "other", "prompt": "go"})
        gone = await c.delete("/v1/_limits", params={"scope": "tenant"})
        again = await c.delete("/v1/_limits", params={"scope": "tenant"})
        lifted = await c.post("/v1/runs", json={"agent": "other", "prompt": "go"})
        assert (await c.delete("/v1/_limits", params={"tenant": "acme", "scope": "tenant"})).status_code == 204
    assert r.status_code == 429, r.text
    body = r.json()
    assert body["code"] == "token_limit_exceeded" and body["scope"] == "tenant" and body["limit"] == 0
    assert body["window"] == "month" and body["message"] and "used" in body
    assert listed[0]["used"] == crossing * PER_CALL
    assert ok.status_code in (200, 201, 202), ok.text
    assert gone.status_code == 204 and again.status_code == 404
    assert lifted.status_code in (200, 201, 202), lifted.text
    await rt.start_run(NewRun(tenant_id="acme", agent="looper", segments=prompt()))  # lifted


def crossings(scope: str, severity: str) -> float:
    from treadle.telemetry.metrics import metrics

    registry = metrics().registry
    assert registry is not None
    return registry.get_sample_value("treadle_budget_crossings_total", {"scope": scope, "severity": severity}) or 0.0


async def test_a_soft_limit_is_recorded_once_and_refuses_nothing(runtime: Any) -> None:
    rt, dispatcher = runtime
    soft_before = crossings("agent", "soft")
    async with client(rt) as c:
        r = await c.put("/v1/_limits", json={"tenant_id": "acme", "scope": "agent", "scope_id": "looper",
                                             "soft_limit": 3 * PER_CALL})
        assert r.status_code == 200, r.text
    run, _ = await rt.start_run(NewRun(tenant_id="acme", agent="looper", segments=prompt()))
    await dispatcher.drain()
    got = await stored(rt, "acme", run.id)
    assert got.stop_reason == "end_turn" and got.iterations == ITERATIONS
    soft = [e.payload for e in await rt.runs.events("acme", run.id) if e.type == EventType.LIMIT]
    assert len(soft) == 1 and soft[0]["limit"]["severity"] == "soft" and soft[0]["limit"]["scope"] == "agent"
    assert soft[0]["iteration"] == 4  # recorded with the first turn after the third call crossed it
    assert crossings("agent", "soft") == soft_before + 1  # and counted (treadle_budget_crossings_total)


async def test_user_and_agent_scopes_bind_only_their_runs(runtime: Any) -> None:
    rt, dispatcher = runtime
    from treadle.governance.budgets import Limit

    await rt.limits.put(Limit("acme", "user", "alice", hard_limit=2 * PER_CALL), updated_by="test")
    await rt.limits.put(Limit("acme", "agent", "other", hard_limit=1), updated_by="test")
    alice, _ = await rt.start_run(NewRun(tenant_id="acme", user_id="alice", agent="looper", segments=prompt()))
    bob, _ = await rt.start_run(NewRun(tenant_id="acme", user_id="bob", agent="looper", segments=prompt()))
    await dispatcher.drain()
    assert (await stored(rt, "acme", alice.id)).stop_reason == "budget_exceeded"
    assert (await stored(rt, "acme", alice.id)).iterations == 2
    assert (await stored(rt, "acme", bob.id)).stop_reason == "end_turn"
    other, _ = await rt.start_run(NewRun(tenant_id="acme", user_id="bob", agent="other", segments=prompt()))
    await dispatcher.drain()  # the agent's limit (1 token) binds after its first call
    assert (await stored(rt, "acme", other.id)).iterations == 1
    with pytest.raises(TokenLimitExceeded) as refused:
        await rt.start_run(NewRun(tenant_id="acme", user_id="bob", agent="other", segments=prompt()))
    assert refused.value.body_extra["scope"] == "agent" and refused.value.body_extra["scope_id"] == "other"


async def test_a_cost_limit_counts_the_priced_usage(migrated_db_url: str) -> None:
    pricing = {"currency": "USD", "models": {"scripted/echo": {"input": 1000.0, "output": 0, "cache_write": 0,
                                                               "cache_read": 0}}}
    async with open_test_runtime(AGENTS, database_url=migrated_db_url, providers=[ScriptedProvider(model)],
                                 config={"pricing": pricing}) as (rt, dispatcher):
        from treadle.governance.budgets import Limit

        # each call costs 1000 tokens x 1000 USD / 1e6 = 1 USD; the day's limit: 3 USD
        await rt.limits.put(Limit("acme", "tenant", "", hard_limit=3.0, window="day", metric="cost"), updated_by="t")
        run, _ = await rt.start_run(NewRun(tenant_id="acme", agent="looper", segments=prompt()))
        await dispatcher.drain()
        got = await stored(rt, "acme", run.id)
        assert got.stop_reason == "budget_exceeded" and got.iterations == 3
        rows = await rt.limits.list("acme")
        assert rows[0]["used"] == pytest.approx(3.0) and rows[0]["currency"] == "USD"


async def test_the_limits_route_confines_a_tenant_and_refuses_bad_input(runtime: Any) -> None:
    rt, _ = runtime
    async with client(rt) as c:
        bad = await c.put("/v1/_limits", json={"scope": "team", "hard_limit": 1})
        assert bad.status_code == 422
        no_id = await c.put("/v1/_limits", json={"scope": "user", "hard_limit": 1})
        assert no_id.status_code == 400 and "scope_id" in no_id.json()["error"]
        with_id = await c.put("/v1/_limits", json={"scope": "tenant", "scope_id": "x", "hard_limit": 1})
        assert with_id.status_code == 400
        neither = await c.put("/v1/_limits", json={"scope": "tenant"})
        assert neither.status_code == 400
        negative = await c.put("/v1/_limits", json={"scope": "tenant", "hard_limit": -1})
        assert negative.status_code == 422
        unknown = await c.put("/v1/_limits", json={"scope": "tenant", "hard_limit": 1, "period": "week"})
        assert unknown.status_code == 422 and "period" in unknown.text
        assert (await c.delete("/v1/_limits", params={"scope": "tenant", "window": "week"})).status_code == 400


async def test_a_limit_put_in_another_process_binds_within_its_refresh(runtime: Any) -> None:
    """The set of limited tenants is cached per process for `refresh_s`; a limit written elsewhere
    (another LimitStore on the same database) binds once that passes."""
    rt, _ = runtime
    from treadle.governance.budgets import Limit
    from treadle.governance.limits import LimitStore

    assert await rt.limits.verdict("acme", None, "looper") is None
    elsewhere = LimitStore(rt.pool)
    await elsewhere.put(Limit("acme", "tenant", "", hard_limit=0), updated_by="t")
    rt.limits.refresh_s = 0.05

    async def refused() -> bool:
        verdict = await rt.limits.verdict("acme", None, "looper")
        return verdict is not None and verdict.hard is not None

    await until(refused, timeout=5)


async def test_on_the_queue_with_four_workers_no_run_calls_past_the_one_it_was_in(migrated_db_url: str) -> None:
    """Real workers on the Postgres queue: runs step at the same time, so a run may already be in
    its model call when another's commit crosses the limit — that call is its last. A step gives
    its worker slot back while its model answers, so at most one call per run (not per worker)
    lands past the crossing."""
    from treadle.engine.workers import WorkerPool

    workers_n, limit = 4, 30_000
    async with open_test_runtime(AGENTS, database_url=migrated_db_url, providers=[ScriptedProvider(model)],
                                 inline=False) as (rt, queue):
        from treadle.governance.budgets import Limit

        await rt.limits.put(Limit("acme", "tenant", "", hard_limit=limit), updated_by="t")
        runs = [(await rt.start_run(NewRun(tenant_id="acme", agent="looper", segments=prompt())))[0]
                for _ in range(50)]  # the 50 concurrent runs of one tenant
        bystander, _ = await rt.start_run(NewRun(tenant_id="other", agent="other", segments=prompt()))
        workers = WorkerPool(rt.engine, queue, workers_n, idle_poll_s=0.05)
        workers.start()
        try:
            async def ended() -> bool:
                for run_id, tenant in [*((r.id, "acme") for r in runs), (bystander.id, "other")]:
                    got = await stored(rt, tenant, run_id)
                    if not got.terminal:
                        return False
                return True

            await until(ended, timeout=120, interval=0.05, what="every run ended")
        finally:
            await workers.stop()
        crossing = math.ceil(limit / PER_CALL)
        calls = await calls_of(rt, "acme")
        print(f"\n50 runs on 4 workers: limit crossed at call {crossing}, {calls} calls made ({calls - crossing} past)")
        assert crossing <= calls <= crossing + len(runs), calls  # at most the one call each run was in
        assert {(await stored(rt, "acme", r.id)).stop_reason for r in runs} == {"budget_exceeded"}
        other = await stored(rt, "other", bystander.id)
        assert other.stop_reason == "end_turn" and other.iterations == ITERATIONS
