"""MCP servers as agent tools in real runs: a FastMCP server over Streamable HTTP on a loopback port
(through the network guard, with a per-run credential it checks) and one over stdio, mounted by
`mcp_servers:` in treadle.yaml and started through the HTTP API of a real sidecar.

The per-run credential must appear in no stored row (every table scanned), no log line and no
event; a run without it gets a clear tool error; a tool the agent did not opt in to is not offered."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from psycopg import sql

from tests.support.mcp import CREDENTIAL, finished, payload, tool_results
from tests.support.mcp_servers import serve_http, vault
from tests.support.sidecar import sidecar_client, sidecar_settings
from tests.support.spans import leaked, recording_spans
from treadle.config import parse_config

ROOT = Path(__file__).resolve().parents[2]


def treadle_yaml(vault_url: str) -> dict[str, Any]:
    return {
        "mcp_servers": {
            "vault": {"transport": "http", "url": vault_url,
                      "headers": {"Authorization": "Bearer ${run.credentials.vault}"}},
            "calc": {"transport": "stdio", "command": sys.executable,
                     "args": ["-m", "tests.support.mcp_servers", "stdio"],
                     "env": {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}},
        },
        "agents": {
            "vaulter": {"model": "script", "tools": ["mcp__vault__secret_lookup", "mcp__vault__leak"], "mock": {
                "script": [{"tool": "mcp__vault__secret_lookup", "input": {"item": "gold"}},
                           {"tool": "mcp__vault__leak", "input": {}},
                           {"tool": "mcp__vault__other", "input": {}},
                           {"text": "all done"}]}},
            "adder": {"model": "script", "tools": ["mcp__calc__*"], "mock": {
                "script": [{"tool": "mcp__calc__add", "input": {"a": 2, "b": 3}}, {"text": "added"}]}},
        },
    }


@asynccontextmanager
async def sidecar(db_url: str, vault_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with sidecar_client(sidecar_settings(db_url), parse_config(treadle_yaml(vault_url)), timeout=60) as client:
        yield client


def rows_containing(db_url: str, needles: list[str]) -> list[str]:
    """Every table of the database whose rows, as text, contain one of `needles`."""
    hits: list[str] = []
    with psycopg.connect(db_url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
        for table in tables:
            for needle in needles:
                # the needle goes as bytes: a str parameter is redacted on its way (store/db.py), and
                # this process knows the run's credential
                query = sql.SQL("SELECT count(*) FROM {} t WHERE strpos(t::text, convert_from(%s, 'UTF8')) > 0"
                                ).format(sql.Identifier(table))
                row = conn.execute(query, (needle.encode(),)).fetchone()
                if row and row[0]:
                    hits.append(f"{table}: {needle}")
    return hits


@pytest.fixture
def network_allows_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_HTTP_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST", "127.0.0.1")


async def test_mcp_tools_in_a_run_with_a_per_run_credential_that_is_stored_nowhere(
    migrated_db_url: str, network_allows_loopback: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with recording_spans() as exporter:
        await _run_the_vault(migrated_db_url, caplog)
    calls = [s for s in exporter.get_finished_spans() if s.name == "mcp.call"]
    assert [(s.attributes or {}).get("mcp.tool") for s in calls] == ["secret_lookup", "leak"], calls
    assert all((s.attributes or {}).get("mcp.server") == "vault" for s in calls)
    assert leaked(exporter.get_finished_spans(), [CREDENTIAL]) == []  # no credential in any span


async def _run_the_vault(migrated_db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    async with serve_http(vault(CREDENTIAL)) as vault_url, sidecar(migrated_db_url, vault_url) as client:
        resp = await client.post("/v1/runs", json={"agent": "vaulter", "prompt": "open the vault",
                                                   "user_credentials": {"vault": CREDENTIAL}})
        assert resp.status_code == 202, resp.text
        run, events = await finished(client, resp.json()["run_id"])
        assert run["status"] == "completed", run
        lookup, leak, other = tool_results(events)
        assert "vault item gold: open sesame" in json.dumps(lookup) and not lookup.get("is_error")
        assert "you sent: Bearer [redacted:credential]" in json.dumps(leak)  # the echo is masked
        assert other.get("is_error") and "mcp__vault__other" in json.dumps(other)  # never offered

        # without the credential: the server is not called, the tool says what is missing
        resp = await client.post("/v1/runs", json={"agent": "vaulter", "prompt": "try without"})
        _, events2 = await finished(client, resp.json()["run_id"])
        missing = tool_results(events2)[0]
        assert missing.get("is_error") and "needs the run credential(s) vault" in missing["text"], missing

        listed = (await client.get("/v1/runs", params={"limit": 500})).json()
        stream = (await client.get(f"/v1/runs/{run['run_id']}/stream")).text
        for text in (json.dumps(events), json.dumps(events2), json.dumps(listed), stream, json.dumps(run)):
            assert CREDENTIAL not in text

    assert rows_containing(migrated_db_url, [CREDENTIAL, CREDENTIAL.encode().hex()]) == []
    with psycopg.connect(migrated_db_url) as conn:  # sealed while the run ran, deleted when it ended
        left = conn.execute("SELECT count(*) FROM run_credentials WHERE run_id = %s", (run["run_id"],)).fetchone()
    assert left == (0,)
    assert CREDENTIAL not in caplog.text
    assert all(CREDENTIAL not in str(r.args) for r in caplog.records)


async def test_a_stdio_mcp_server_as_tools(migrated_db_url: str, network_allows_loopback: None) -> None:
    async with serve_http(vault(CREDENTIAL)) as vault_url, sidecar(migrated_db_url, vault_url) as client:
        resp = await client.post("/v1/runs", json={"agent": "adder", "prompt": "2+3"})
        run, events = await finished(client, resp.json()["run_id"])
        assert run["status"] == "completed", run
        [result] = tool_results(events)
        assert not result.get("is_error") and "5" in json.dumps(result)


async def test_the_network_guard_refuses_mcp_over_http_to_a_private_address(migrated_db_url: str) -> None:
    async with serve_http(vault(CREDENTIAL)) as vault_url, sidecar(migrated_db_url, vault_url) as client:
        resp = await client.post("/v1/runs", json={"agent": "vaulter", "prompt": "x",
                                                   "user_credentials": {"vault": CREDENTIAL}})
        _, events = await finished(client, resp.json()["run_id"])
        first = tool_results(events)[0]
        # no floor, loopback not exempted: the call is refused before any connection is made
        assert first.get("is_error") and "is not allowed" in first["text"], first


async def test_spawn_run_over_mcp_carries_user_credentials(migrated_db_url: str, network_allows_loopback: None) -> None:
    async with serve_http(vault(CREDENTIAL)) as vault_url, sidecar(migrated_db_url, vault_url) as client:
        mcp_url = str(client.base_url).rstrip("/") + "/v1/_mcp"
        async with httpx2.AsyncClient(timeout=60) as http, \
                Client(streamable_http_client(mcp_url, http_client=http)) as mcp:
            out = payload(await mcp.call_tool("spawn_run", {
                "agent": "vaulter", "prompt": "open", "user_credentials": {"vault": CREDENTIAL}}))
            assert out["status"] == "completed" and out["final_text"] == "all done", out
            transcript = payload(await mcp.call_tool("get_transcript", {"run_id": out["run_id"]}))
        assert "vault item gold: open sesame" in json.dumps(transcript) and CREDENTIAL not in json.dumps(transcript)
