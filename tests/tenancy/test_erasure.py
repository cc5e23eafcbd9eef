"""Erasure of one subject (issue 42 item 4): POST /v1/_erasure (loomcycle's body) removes a user
everywhere treadle keeps it — runs and their transcripts, stored OpenAI responses (its own and its
runs' turns), sessions, user-scoped memory, user-scoped channel messages and their wait keys,
CredentialDefs, budgets, tokens — and answers a receipt; afterwards no row of any table mentions
the subject's id or text, another user of the tenant and another tenant's user of the same id are
intact, and the tenant's usage totals are unchanged."""

from __future__ import annotations

import secrets
from typing import Any

from tests.mcp.test_client_tools import rows_containing
from tests.support.e2e import query
from tests.support.tenancy import api, bearer, mint
from treadle.governance.budgets import Limit
from treadle.store.openai_responses import ResponseStore, StoredResponse
from treadle.store.runs import NewRun


def prompt(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "trusted-text", "text": text}]}]


async def seed(rt: Any, disp: Any, tenant: str, user: str, words: str) -> None:
    """A subject's data in every place the erasure covers."""
    runs = [(await rt.start_run(NewRun(tenant_id=tenant, user_id=user, agent="echo",
                                       segments=prompt(f"{words} {n}"))))[0] for n in range(2)]
    await disp.drain()
    for owner, run_id in ((user, None), (None, runs[0].id)):  # its own stored response; a turn of its run
        await ResponseStore(rt.pool).create(StoredResponse(
            id="resp_" + secrets.token_hex(12), tenant_id=tenant, user_id=owner, created_unix=0,
            background=run_id is not None, request={"model": "echo", "input": words},
            input_items=[{"id": "msg_0", "type": "message", "role": "user", "content": words}],
            previous_response_id=None, run_id=run_id, start_seq=None if run_id is None else 0, doc=None))
    db = rt.database_url
    await query(db, "INSERT INTO memory (tenant_id, scope, scope_id, key, value) VALUES"
                " (%s, 'user', %s, 'note', to_jsonb(%s::text))", (tenant, user, words))
    # memory consolidation's queue and watermark for the user's scope (migration 0094)
    await query(db, "INSERT INTO memory_pending (id, tenant_id, scope, scope_id, payload) VALUES"
                " (%s, %s, 'user', %s, jsonb_build_object('text', %s::text))",
                (secrets.token_hex(6), tenant, user, words))
    await query(db, "INSERT INTO memory_cursors (tenant_id, scope, scope_id) VALUES (%s, 'user', %s)", (tenant, user))
    await query(db, "INSERT INTO channels (tenant_id, name, scope) VALUES (%s, 'inbox', 'user')"
                " ON CONFLICT DO NOTHING", (tenant,))
    await query(db, "INSERT INTO channel_messages (tenant_id, channel, scope_id, payload) VALUES"
                " (%s, 'inbox', %s, jsonb_build_object('text', %s::text))", (tenant, user, words))
    await query(db, "INSERT INTO wait_keys (tenant_id, key, version) VALUES (%s, 'channel:inbox:' || %s, 1)",
                (tenant, user))
    await rt.limits.put(Limit(tenant, "user", user, hard_limit=10**9), updated_by="test")


async def test_a_subject_is_erased_everywhere_with_a_receipt_and_nothing_else_is(tenancy_rt: Any) -> None:
    rt, disp = tenancy_rt
    alice, bob = "alice-" + secrets.token_hex(6), "bob-" + secrets.token_hex(6)
    alice_words, bob_words = "alice-words-" + secrets.token_hex(6), "bob-words-" + secrets.token_hex(6)
    await seed(rt, disp, "acme", alice, alice_words)
    await seed(rt, disp, "acme", bob, bob_words)
    await seed(rt, disp, "globex", alice, "globex-" + alice_words)  # the same id in another tenant
    totals_before = await query(rt.database_url, "SELECT sum(calls) AS calls, sum(input_tokens) AS i"
                                " FROM usage_daily WHERE tenant_id = 'acme'")
    assert rows_containing(rt.database_url, [alice, alice_words]) != []  # the scan sees them before

    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme-admin", tenant="acme", scopes=["substrate:tenant"]))
        await mint(c, operator, "alice-token", tenant="acme", scopes=["runs:read"], subject=alice)

        dry = await c.post("/v1/_erasure", json={"subject": alice}, headers=acme)
        assert dry.status_code == 200, dry.text
        counted = dry.json()
        assert counted["dry_run"] is True and counted["tenant"] == "acme"
        assert counted["deleted"]["runs"] == 2 and counted["deleted"]["memory"] == 1
        assert counted["deleted"]["openai_responses"] == 2
        assert {"events", "channel_messages", "wait_keys", "token_limits", "auth_tokens"} <= set(counted["deleted"])
        assert counted["anonymized"]["usage_daily"] >= 1
        assert rows_containing(rt.database_url, [alice_words]) != []  # a dry run changes nothing

        unconfirmed = await c.post("/v1/_erasure", json={"subject": alice, "dry_run": False}, headers=acme)
        assert unconfirmed.status_code == 400 and unconfirmed.json()["code"] == "confirm_mismatch"
        other_tenant = await c.post("/v1/_erasure", params={"tenant": "globex"}, json={"subject": alice},
                                    headers=acme)
        assert other_tenant.status_code == 403

        done = await c.post("/v1/_erasure", json={"subject": alice, "dry_run": False, "confirm": alice},
                            headers=acme)
        assert done.status_code == 200, done.text
        receipt = done.json()
        assert receipt["dry_run"] is False and receipt["deleted"] == counted["deleted"]

    # nothing of alice in acme: every table scanned for her id and her words
    hits = [h for h in rows_containing(rt.database_url, [alice, alice_words]) if h]
    acme_hits = []
    for table in {h.split(":")[0] for h in hits}:
        rows = await query(rt.database_url, f"SELECT count(*) AS n FROM {table} t WHERE tenant_id = 'acme'"
                           " AND (strpos(t::text, %s) > 0 OR strpos(t::text, %s) > 0)", (alice, alice_words))
        if rows[0]["n"]:
            acme_hits.append(table)
    assert acme_hits == [], acme_hits
    # bob, and globex's alice, intact
    assert rows_containing(rt.database_url, [bob_words]) != []
    left = await query(rt.database_url, "SELECT tenant_id, user_id FROM runs ORDER BY 1, 2")
    assert sorted((r["tenant_id"], r["user_id"]) for r in left) == sorted(
        [("acme", bob)] * 2 + [("globex", alice)] * 2)
    kept = await query(rt.database_url, "SELECT count(*) AS n FROM memory WHERE scope_id IN (%s, %s)", (bob, alice))
    assert kept[0]["n"] == 2  # bob's and globex's alice's
    totals_after = await query(rt.database_url, "SELECT sum(calls) AS calls, sum(input_tokens) AS i"
                               " FROM usage_daily WHERE tenant_id = 'acme'")
    assert totals_after == totals_before  # usage kept, the subject folded out of it
