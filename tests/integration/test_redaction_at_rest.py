"""Redaction that holds, end to end (issue 42 item 5): a run's own credential and secret-shaped
strings that the model writes into a tool input, a Memory value and its final text — plain and
encoded — leave no copy in any table."""

from __future__ import annotations

import base64
from typing import Any

import psycopg

from treadle.mcp.credentials import seal_credentials
from treadle.providers.base import ModelRequest
from treadle.store.runs import NewRun
from treadle.testing import Reply, ScriptedProvider, open_test_runtime, tool_results, tool_use

TENANT = "redaction"
CREDENTIAL = "vault-cred-7Hq2Lm9Xw4Rt"
BEARER = "Zk3Vb8Nq1Wc6Ye0Ua5Sd"
PASSWORD = "correct-horse-battery"
SECRETS = [CREDENTIAL, base64.b64encode(CREDENTIAL.encode()).decode(), CREDENTIAL.encode().hex(), BEARER, PASSWORD]


def echo_everything(req: ModelRequest) -> Reply:
    if not tool_results(req):
        value = {"cred": CREDENTIAL, "b64": base64.b64encode(CREDENTIAL.encode()).decode(),
                 "header": f"Authorization: Bearer {BEARER}"}
        return [tool_use("Memory", {"op": "set", "scope": "agent", "key": f"k-{CREDENTIAL}", "value": value})]
    return f"done: {CREDENTIAL} hex {CREDENTIAL.encode().hex()} password={PASSWORD}"


async def copies(url: str, needles: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    async with await psycopg.AsyncConnection.connect(url) as conn:
        tables = [r[0] for r in await (await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).fetchall()]
        for table in tables:
            for needle in needles:
                # the needle goes as bytes: a str parameter would be redacted on its way (store/db.py)
                row = await (await conn.execute(
                    f'SELECT count(*) FROM "{table}" t WHERE strpos(t::text, convert_from(%s, \'UTF8\')) > 0',
                    (needle.encode(),))).fetchone()
                if row and row[0]:
                    found[f"{table}:{needle}"] = row[0]
    return found


async def test_a_run_that_echoes_its_secrets_stores_none(migrated_db_url: str) -> None:
    agents: dict[str, Any] = {"a": {"provider": "scripted", "model": "echo", "tools": ["Memory"],
                                    "memory_scopes": ["agent"]}}
    model = ScriptedProvider(echo_everything)
    async with open_test_runtime(agents, database_url=migrated_db_url, providers=[model]) as (rt, dispatcher):
        prompt = [{"role": "user", "content": [{"type": "trusted-text", "text": f"use {CREDENTIAL}"}]}]
        run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="a", segments=prompt,
                                           sealed_credentials=seal_credentials(TENANT, {"vault": CREDENTIAL})))
        await dispatcher.drain()
        done = await rt.runs.get(TENANT, run.id)
        assert done is not None and done.status == "completed", done
        events = await rt.runs.events(TENANT, run.id)
        final = [e.payload for e in events if e.type == "text"][-1]
        assert "[redacted:credential]" in str(final) and "password=[redacted]" in str(final)
    assert await copies(migrated_db_url, SECRETS) == {}
    assert await copies(migrated_db_url, ["[redacted:credential]"]) != {}  # the search can find
