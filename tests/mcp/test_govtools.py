"""loomcycle's erasure, credentialdef and resolve_probe meta-tools (api/mcp/govtools.py) under its
names and argument schemas, driven by the official `mcp` SDK client over Streamable HTTP; each does
what its HTTP route does."""

from __future__ import annotations

import base64
import os
import secrets

import pytest

from tests.mcp.test_server_http import connect
from tests.support.mcp import call, refused
from treadle.governance import credentials as creds


async def test_listed_with_loomcycles_arguments(base_url: str) -> None:
    async with connect(base_url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        erasure = tools["erasure"].input_schema
        assert erasure["required"] == ["subject"] and set(erasure["properties"]) == {"subject", "op", "dry_run",
                                                                                      "confirm"}
        assert {"op", "scope", "scope_id", "name", "value"} <= set(tools["credentialdef"].input_schema["properties"])
        assert "resolve_probe" in tools


async def test_erasure_reports_then_erases_only_when_confirmed(base_url: str) -> None:
    subject = f"gone-{secrets.token_hex(4)}"
    async with connect(base_url) as client:
        run = await call(client, "spawn_run", {"agent": "echo", "prompt": "remember me", "user_id": subject})
        report = await call(client, "erasure", {"subject": subject})
        assert report["dry_run"] is True and report["deleted"]["runs"] == 1
        assert await refused(client, "erasure", {"subject": subject, "dry_run": False}) == "validation_error"
        # execute is a dry run by default; a real one needs dry_run false and the subject as confirm
        assert (await call(client, "erasure", {"subject": subject, "op": "execute"}))["dry_run"] is True
        assert await refused(client, "erasure", {"subject": subject, "op": "execute", "dry_run": False,
                                                 "confirm": "someone-else"}) == "confirm_mismatch"
        assert (await call(client, "get_run", {"run_id": run["run_id"]}))["status"] == "completed"
        done = await call(client, "erasure", {"subject": subject, "op": "execute", "dry_run": False,
                                              "confirm": subject})
        assert done["dry_run"] is False and done["deleted"]["runs"] == 1
        assert await refused(client, "get_run", {"run_id": run["run_id"]}) == "run_not_found"
        assert (await call(client, "erasure", {"subject": subject}))["deleted"].get("runs", 0) == 0


async def test_credentialdef_stores_and_never_answers_the_value(base_url: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(creds.KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    creds.process_sealer.cache_clear()
    secret, name = "mcp-secret-" + secrets.token_hex(8), f"tok_{secrets.token_hex(3)}"
    try:
        async with connect(base_url) as client:
            made = await call(client, "credentialdef", {"op": "create", "scope": "tenant", "name": name,
                                                        "value": secret})
            assert made["credential"]["name"] == name and secret not in str(made)
            listed = await call(client, "credentialdef", {"op": "list"})
            assert name in [c["name"] for c in listed["credentials"]] and secret not in str(listed)
            assert await refused(client, "credentialdef", {"op": "get", "scope": "tenant", "name": name,
                                                           "value": "x"}) == "bad_request"
            assert (await call(client, "credentialdef", {"op": "delete", "scope": "tenant",
                                                         "name": name}))["deleted"] is True
            assert await refused(client, "credentialdef", {"op": "get", "scope": "tenant",
                                                           "name": name}) == "not_found"
    finally:
        creds.process_sealer.cache_clear()


async def test_resolve_probe_answers_the_matrix(base_url: str) -> None:
    async with connect(base_url) as client:
        matrix = await call(client, "resolve_probe", {})
        assert matrix["generated_at"] and isinstance(matrix["providers"], dict)
