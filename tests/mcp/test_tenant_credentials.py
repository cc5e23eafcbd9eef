"""Tenant credentials (issue 42 item 3, loomcycle's CredentialDef): a tenant stores a named secret
through POST /v1/_credentialdef, an MCP server's header references it (`${credential.NAME}` or
loomcycle's `$cred:NAME`), a real run's tool call carries it to a real MCP server over loopback —
and the value is in no stored row (ciphertext only), no answer, no event, no log line, no span; an
echo of it is masked. Sealing: per-tenant keys (a row moved to another tenant does not open),
precedence agent > user > tenant, rotation under a previous key."""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tests.mcp.test_client_tools import rows_containing
from tests.support.mcp import CREDENTIAL, finished, tool_results
from tests.support.mcp_servers import serve_http, vault
from tests.support.sidecar import sidecar_client, sidecar_settings
from tests.support.spans import leaked, recording_spans
from treadle.config import parse_config
from treadle.governance import credentials as creds
from treadle.governance.credentials import CredentialUnreadable, TenantCredentials, TenantSealer
from treadle.store.db import open_pool

KEY_A, KEY_B = os.urandom(32), os.urandom(32)


@pytest.fixture
def deployment_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(creds.KEY_ENV, base64.b64encode(KEY_A).decode())
    monkeypatch.setenv("TREADLE_HTTP_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST", "127.0.0.1")
    creds.process_sealer.cache_clear()
    yield
    creds.process_sealer.cache_clear()


def treadle_yaml(vault_url: str) -> dict[str, Any]:
    script = {"script": [{"tool": "mcp__vault__secret_lookup", "input": {"item": "gold"}},
                         {"tool": "mcp__vault__leak", "input": {}}, {"text": "all done"}]}
    loom_script = {"script": [{"tool": "mcp__loomvault__secret_lookup", "input": {"item": "gold"}},
                              {"text": "all done"}]}
    return {
        "mcp_servers": {
            "vault": {"transport": "http", "url": vault_url,
                      "headers": {"Authorization": "Bearer ${credential.vault}"}},
            "loomvault": {"transport": "http", "url": vault_url, "headers": {"Authorization": "Bearer $cred:vault"}},
        },
        "agents": {
            "vaulter": {"model": "script", "tools": ["mcp__vault__secret_lookup", "mcp__vault__leak"], "mock": script},
            "loomer": {"model": "script", "tools": ["mcp__loomvault__secret_lookup"], "mock": loom_script},
        },
    }


@asynccontextmanager
async def sidecar(db_url: str, vault_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with sidecar_client(sidecar_settings(db_url), parse_config(treadle_yaml(vault_url)), timeout=60) as client:
        yield client


async def test_a_tenant_credential_reaches_the_mcp_server_and_is_stored_nowhere(
    migrated_db_url: str, deployment_key: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with recording_spans() as exporter:
        async with serve_http(vault(CREDENTIAL)) as vault_url, sidecar(migrated_db_url, vault_url) as client:
            # before it exists: the header is left out (never a literal reference), the server refuses
            resp = await client.post("/v1/runs", json={"agent": "loomer", "prompt": "try"})
            _, early = await finished(client, resp.json()["run_id"])
            assert tool_results(early)[0].get("is_error")  # the server refused the call without a bearer

            created = await client.post("/v1/_credentialdef", json={"op": "create", "scope": "tenant",
                                                                    "name": "vault", "value": CREDENTIAL})
            assert created.status_code == 200, created.text
            assert created.json()["credential"]["name"] == "vault" and CREDENTIAL not in created.text
            got = await client.post("/v1/_credentialdef", json={"op": "get", "scope": "tenant", "name": "vault"})
            listed = await client.post("/v1/_credentialdef", json={"op": "list"})
            assert [c["name"] for c in listed.json()["credentials"]] == ["vault"]
            for answer in (got.text, listed.text):
                assert CREDENTIAL not in answer and "value" not in answer

            outs = []
            for agent in ("vaulter", "loomer"):
                resp = await client.post("/v1/runs", json={"agent": agent, "prompt": "open the vault"})
                assert resp.status_code == 202, resp.text
                run, events = await finished(client, resp.json()["run_id"])
                assert run["status"] == "completed", run
                results = tool_results(events)
                assert "vault item gold: open sesame" in json.dumps(results[0]) and not results[0].get("is_error")
                outs += [json.dumps(events), json.dumps(run)]
            assert "you sent: Bearer [redacted:credential]" in outs[0]  # the careless server's echo, masked
            for text in outs:
                assert CREDENTIAL not in text

            bad = await client.post("/v1/_credentialdef", json={"op": "create", "scope": "tenant", "scope_id": "x",
                                                                "name": "vault", "value": "v" * 12})
            assert bad.status_code == 400
            no_value = await client.post("/v1/_credentialdef", json={"op": "create", "scope": "tenant",
                                                                     "name": "other"})
            assert no_value.status_code == 400 and "value" in no_value.json()["error"]
            deleted = await client.post("/v1/_credentialdef", json={"op": "delete", "scope": "tenant",
                                                                    "name": "vault"})
            assert deleted.json() == {"op": "delete", "deleted": True}
            gone = await client.post("/v1/_credentialdef", json={"op": "get", "scope": "tenant", "name": "vault"})
            assert gone.status_code == 404
    assert rows_containing(migrated_db_url, [CREDENTIAL, CREDENTIAL.encode().hex()]) == []
    assert CREDENTIAL not in caplog.text and all(CREDENTIAL not in str(r.args) for r in caplog.records)
    assert leaked(exporter.get_finished_spans(), [CREDENTIAL]) == []


async def test_precedence_per_tenant_keys_and_rotation(migrated_db_url: str) -> None:
    pool = await open_pool(migrated_db_url, 2)
    try:
        store = TenantCredentials(pool, TenantSealer(KEY_A))
        await store.create("acme", "tenant", "", "tok", "tenant-value-1", updated_by="t")
        await store.create("acme", "user", "alice", "tok", "alice-value-1", updated_by="t")
        await store.create("acme", "agent", "writer", "tok", "writer-value-1", updated_by="t")
        await store.create("globex", "tenant", "", "tok", "globex-value-1", updated_by="t")
        assert await store.resolve("acme", "bob", "reader", ["tok"]) == {"tok": "tenant-value-1"}
        assert await store.resolve("acme", "alice", "reader", ["tok", "nope"]) == {"tok": "alice-value-1"}
        assert await store.resolve("acme", "alice", "writer", ["tok"]) == {"tok": "writer-value-1"}
        assert await store.resolve("globex", "alice", "writer", ["tok"]) == {"tok": "globex-value-1"}

        async with pool.connection() as conn:  # a row moved to another tenant does not open
            await conn.execute("UPDATE credential_defs SET sealed = (SELECT sealed FROM credential_defs"
                               " WHERE tenant_id = 'acme' AND scope = 'tenant') WHERE tenant_id = 'globex'")
        with pytest.raises(CredentialUnreadable):
            await store.resolve("globex", None, None, ["tok"])
        await store.delete("globex", "tenant", "", "tok")

        rotated = TenantCredentials(pool, TenantSealer(KEY_B, previous=KEY_A))  # the new key, the old as previous
        assert await rotated.resolve("acme", "alice", "x", ["tok"]) == {"tok": "alice-value-1"}
        assert await rotated.rotate("acme") == 3 and await rotated.rotate("acme") == 0
        only_b = TenantCredentials(pool, TenantSealer(KEY_B))
        assert await only_b.resolve("acme", None, "writer", ["tok"]) == {"tok": "writer-value-1"}
        with pytest.raises(CredentialUnreadable):  # the old key alone no longer opens them
            await TenantCredentials(pool, TenantSealer(KEY_A)).resolve("acme", None, None, ["tok"])
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM credential_defs WHERE"
                                     " strpos(encode(sealed, 'escape'), 'value') > 0")
            counted = await cur.fetchone()
            assert counted is not None and counted["n"] == 0  # ciphertext only
    finally:
        await pool.close()


def test_without_a_deployment_key_nothing_is_stored() -> None:
    from treadle.governance.credentials import CredentialKeyMissing

    with pytest.raises(CredentialKeyMissing):
        TenantSealer(None).seal("acme", "tenant", "", "tok", "value")
