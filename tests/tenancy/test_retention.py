"""Retention (finished runs older than their tenant's days are deleted, with their events, in
bounded batches) and a tenant's export and erase."""

from __future__ import annotations

import json
from typing import Any

from tests.support.e2e import query
from tests.support.tenancy import api, bearer, mint
from treadle.config import RetentionConfig


async def _finished_run(c: Any, who: dict[str, str], disp: Any, prompt: str) -> str:
    r = await c.post("/v1/runs", json={"agent": "echo", "prompt": prompt}, headers=who)
    assert r.status_code == 202, r.text
    await disp.drain()
    return str(r.json()["run_id"])


async def test_finished_runs_past_their_tenants_retention_are_deleted(tenancy_rt: Any) -> None:
    rt, disp = tenancy_rt
    rt.config.retention = RetentionConfig(days=30, tenants={"keepers": None, "short": 1})
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        tenants = {t: bearer(await mint(c, operator, t, tenant=t, scopes=["substrate:tenant"]))
                   for t in ("acme", "keepers", "short")}
        old = {t: await _finished_run(c, who, disp, f"old {t}") for t, who in tenants.items()}
        recent = {t: await _finished_run(c, who, disp, f"recent {t}") for t, who in tenants.items()}
        # age the "old" runs instead of waiting: 40 days for acme and keepers, 2 days for short
        for t, days in (("acme", 40), ("keepers", 40), ("short", 2)):
            await query(rt.database_url, "UPDATE runs SET completed_at = now() - make_interval(days => %s)"
                        " WHERE id = %s", (days, old[t]))
        assert rt.triggers.sweeper().retention == rt.enforce_retention  # every sweeper tick (cloud: maintenance)
        assert await rt.enforce_retention() == 2  # acme (30 days) and short (1 day); keepers: forever
        assert await rt.enforce_retention() == 0  # at most once a minute …
        assert await rt.enforce_retention(force=True) == 0  # … and nothing left to delete
        for t, who in tenants.items():
            gone = (await c.get(f"/v1/runs/{old[t]}", headers=who)).status_code
            assert gone == (200 if t == "keepers" else 404), t
            assert (await c.get(f"/v1/runs/{recent[t]}", headers=who)).status_code == 200
        left = await query(rt.database_url, "SELECT count(*) AS n FROM events WHERE run_id = ANY(%s)",
                           ([old["acme"], old["short"]],))
        assert left[0]["n"] == 0  # the transcripts went with the runs


async def test_a_tenants_export_and_erase(tenancy_rt: Any) -> None:
    rt, disp = tenancy_rt
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme", tenant="acme", scopes=["substrate:tenant"]))
        other = bearer(await mint(c, operator, "other", tenant="other", scopes=["substrate:tenant"]))
        mine = await _finished_run(c, acme, disp, "acme's words")
        theirs = await _finished_run(c, other, disp, "other's words")
        assert (await c.put("/v1/_memory/scopes/agent/echo/keys/k", json={"value": "acme-memory"},
                            headers=acme)).status_code < 300

        r = await c.get("/v1/_admin/tenants/acme/export", headers=operator)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        items = [json.loads(line) for line in r.text.splitlines()]
        tables = {i["table"] for i in items}
        assert {"runs", "events", "memory", "defs"} <= tables and "auth_tokens" not in tables
        assert all(i["row"]["tenant_id"] == "acme" for i in items)
        assert "acme's words" in r.text and "acme-memory" in r.text and "other's words" not in r.text
        assert (await c.get("/v1/_admin/tenants/acme/export", headers=acme)).status_code == 403

        refused = await c.delete("/v1/_admin/tenants/acme", headers=operator)
        assert refused.status_code == 422 and "confirm=acme" in refused.json()["error"]
        r = await c.delete("/v1/_admin/tenants/acme", params={"confirm": "acme"}, headers=operator)
        assert r.status_code == 200, r.text
        assert {"runs", "memory", "auth_tokens"} <= set(r.json()["deleted"])
        assert (await c.get(f"/v1/runs/{mine}", headers=acme)).status_code == 401  # its token went too
        assert (await c.get(f"/v1/runs/{theirs}", headers=other)).status_code == 200
        gone = await query(rt.database_url, "SELECT (SELECT count(*) FROM runs WHERE tenant_id = 'acme')"
                           " + (SELECT count(*) FROM events WHERE tenant_id = 'acme') AS n")
        assert gone[0]["n"] == 0


async def test_channel_messages_and_memory_past_their_tenants_days_are_deleted_and_reported(tenancy_rt: Any) -> None:
    """Per class and per tenant: `channel_messages_days` and `memory_days` by default, a tenant's
    mapping overriding one class (null: forever). Rows are aged, never waited for; GET
    /v1/_retention shows the policy and what it would delete now."""
    from treadle.config import TenantRetention

    rt, _ = tenancy_rt
    rt.config.retention = RetentionConfig(channel_messages_days=7, memory_days=90, tenants={
        "keepers": TenantRetention(memory=None), "short": TenantRetention(channel_messages=1)})
    db = rt.database_url
    for t in ("acme", "keepers", "short"):
        for age_days, tag in ((3, "recent"), (10, "old")):
            await query(db, "INSERT INTO channel_messages (tenant_id, channel, scope_id, payload, published_at)"
                        " VALUES (%s, 'news', '', %s, now() - make_interval(days => %s))",
                        (t, json.dumps({"tag": tag}), age_days))
            await query(db, "INSERT INTO memory (tenant_id, scope, scope_id, key, value, updated_at)"
                        " VALUES (%s, 'agent', 'a', %s, '1', now() - make_interval(days => %s))",
                        (t, tag, age_days * 10))  # 30 and 100 days
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme", tenant="acme", scopes=["substrate:tenant"]))
        report = (await c.get("/v1/_retention", headers=acme)).json()
        assert report["policy"] == {"runs": None, "channel_messages": 7, "memory": 90, "responses": None}
        assert report["purgeable"] == {"runs": 0, "channel_messages": 1, "memory": 1, "responses": 0}
        assert "tenants" not in report
        assert (await c.get("/v1/_retention", params={"tenant": "short"}, headers=acme)).status_code == 403
        short = (await c.get("/v1/_retention", params={"tenant": "short"}, headers=operator)).json()
        assert short["policy"] == {"runs": None, "channel_messages": 1, "memory": 90, "responses": None}
        assert short["purgeable"]["channel_messages"] == 2 and short["tenants"]["keepers"]["memory"] is None

    assert await rt.enforce_retention(force=True) == 1 + 1 + 2 + 1 + 1  # acme 1+1, short 2+1, keepers 1 (+0)
    left = await query(db, "SELECT tenant_id, 'msg:' || (payload->>'tag') AS what FROM channel_messages"
                       " UNION ALL SELECT tenant_id, 'mem:' || key FROM memory ORDER BY 1, 2")
    assert [(r["tenant_id"], r["what"]) for r in left] == [
        ("acme", "mem:recent"), ("acme", "msg:recent"),
        ("keepers", "mem:old"), ("keepers", "mem:recent"), ("keepers", "msg:recent"),
        ("short", "mem:recent")]
    assert await rt.enforce_retention(force=True) == 0


async def test_retention_deletes_in_batches_and_skips_rows_a_live_transaction_holds(tenancy_rt: Any) -> None:
    rt, _ = tenancy_rt
    from treadle.store.retention import RetentionStore

    db = rt.database_url
    await query(db, "INSERT INTO channel_messages (tenant_id, channel, scope_id, payload, published_at)"
                " SELECT 'bulk', 'c', '', '{}', now() - interval '30 days' FROM generate_series(1, 1200)")
    store = RetentionStore(rt.pool)
    async with rt.pool.connection() as holder, holder.transaction():  # a reader holds the oldest 10
        await holder.execute("SELECT id FROM channel_messages WHERE tenant_id = 'bulk' ORDER BY published_at, id"
                             " LIMIT 10 FOR UPDATE")
        batches = []
        while n := await store.purge("channel_messages", 7, tenant_id="bulk"):
            batches.append(n)
    assert batches == [500, 500, 190]  # bounded, never waiting on the held rows
    left = await query(db, "SELECT count(*) AS n FROM channel_messages WHERE tenant_id = 'bulk'")
    assert left[0]["n"] == 10
    assert await store.purge("channel_messages", 7, tenant_id="bulk") == 10


async def test_stored_responses_past_their_days_are_deleted_and_go_with_their_runs(tenancy_rt: Any) -> None:
    """Class `responses` (issue 38): a stored OpenAI response older than `responses_days` is
    deleted; an agent's response is a turn of its run, so it goes with the run's retention."""
    rt, disp = tenancy_rt
    rt.config.retention = RetentionConfig(days=30, responses_days=7)
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        who = bearer(await mint(c, operator, "acme", tenant="acme",
                                scopes=["substrate:tenant", "runs:create", "runs:read"]))

        async def respond(body: dict[str, Any]) -> str:
            r = await c.post("/v1/responses", json=body, headers=who)
            assert r.status_code == 200, r.text
            return str(r.json()["id"])

        old, recent = await respond({"model": "mock/echo", "input": "old"}), await respond(
            {"model": "mock/echo", "input": "recent"})
        turn = await respond({"model": "echo", "input": "a run's turn", "background": True})
        await disp.drain()
        run_id = (await query(rt.database_url, "SELECT run_id FROM openai_responses WHERE id = %s",
                              (turn,)))[0]["run_id"]
        await query(rt.database_url, "UPDATE openai_responses SET created_at = now() - interval '8 days'"
                    " WHERE id = %s", (old,))
        await query(rt.database_url, "UPDATE runs SET completed_at = now() - interval '40 days' WHERE id = %s",
                    (run_id,))
        report = (await c.get("/v1/_retention", headers=who)).json()
        assert report["policy"]["responses"] == 7 and report["purgeable"]["responses"] == 1
        assert await rt.enforce_retention(force=True) == 2  # the old response, the old run
        for rid, status in ((old, 404), (recent, 200), (turn, 404)):
            got = await c.get(f"/v1/responses/{rid}", headers=who)
            assert got.status_code == status, (rid, got.text)
        gone = (await c.get(f"/v1/responses/{old}", headers=who)).json()
        assert gone["error"]["code"] == "response_not_found"
