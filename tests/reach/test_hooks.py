"""Tool-use hooks (POST /v1/hooks): a pre hook rewrites or denies a call, a post hook rewrites its
result, every request is HMAC-signed, and a hook that fails denies (fail-closed) or is skipped
(fail-open). Hook servers are loopback HTTP servers; nothing leaves the machine."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.folds import recording_folds
from tests.support.loopback import Answer, Loopback, Seen, TableResolver
from treadle.api.app import create_app
from treadle.config import Settings, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.runtime import Runtime
from treadle.security.network import NetworkSetup
from treadle.store.runs import NewRun
from treadle.testing import user_text

SECRET = "hook-signing-secret"
NETWORK = NetworkSetup(env={"TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": "hooks.test"},
                       resolver=TableResolver({"hooks.test": ["127.0.0.1"], "private.test": ["127.0.0.1"]}))
SETTER = {"model": "script", "tools": ["Memory"],
          "mock": {"script": [{"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "k", "value": "v"}},
                              {"text": "done"}]}}


@pytest.fixture
async def rig(migrated_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    monkeypatch.setenv("TREADLE_HOOKS_SECRET", SECRET)
    disp = InlineDispatcher()
    rt = await Runtime.open(Settings(database_url=migrated_db_url, home=tmp_path, workers=1, chain_steps=1),
                            parse_config({"agents": {"setter": SETTER}}), dispatcher_factory=lambda _p, _u: disp,
                            network=NETWORK)
    disp.handler = rt.engine.handle
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    app.state.runtime = rt
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        yield rt, disp, client
    await rt.close()


def verified(seen: Seen) -> dict[str, Any]:
    """The hook request's body, after checking its signature the way a receiver would."""
    stamp, mac = (part.split("=", 1)[1] for part in seen.headers["x-treadle-signature"].split(","))
    expected = hmac.new(SECRET.encode(), f"{stamp}.".encode() + seen.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(mac, expected), "bad signature"
    body: dict[str, Any] = json.loads(seen.body)
    return body


async def register(client: httpx.AsyncClient, srv: Loopback, path: str, **fields: Any) -> dict[str, Any]:
    body = {"owner": "ops", "name": secrets.token_hex(3), "phase": "pre", "tools": ["Mem*"],
            "callback_url": srv.url(path, host="hooks.test"), **fields}
    r = await client.post("/v1/hooks", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def run_setter(rt: Runtime, disp: InlineDispatcher) -> tuple[dict[str, Any], Any]:
    tenant = "default"
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="setter", segments=user_text("go")))
    await disp.drain()
    [result] = [e.payload for e in await rt.runs.events(tenant, run.id) if e.type == "tool_result"]
    found, value = await rt.memory.get(tenant, "agent", "setter", "k")
    await rt.memory.delete(tenant, "agent", "setter", "k")
    return result, value if found else None


async def test_a_pre_hook_rewrites_the_input_and_every_request_is_signed(rig: Any) -> None:
    rt, disp, client = rig
    rewrite = {"decision": "allow", "input": {"op": "set", "scope": "agent", "key": "k", "value": "rewritten"}}
    async with Loopback({"/pre": lambda s: Answer.json(rewrite)}) as srv:
        await register(client, srv, "/pre")
        result, value = await run_setter(rt, disp)
    assert not result["is_error"] and value == "rewritten"
    body = verified(srv.seen[0])
    assert (body["phase"], body["tool"], body["agent"], body["input"]["value"]) == ("pre", "Memory", "setter", "v")


async def test_a_pre_hook_denies_and_the_tool_never_runs(rig: Any) -> None:
    rt, disp, client = rig
    async with Loopback({"/pre": lambda s: Answer.json({"decision": "deny", "reason": "writes are frozen"})}) as srv:
        await register(client, srv, "/pre")
        result, value = await run_setter(rt, disp)
    assert result["is_error"] and "writes are frozen" in result["text"] and value is None


async def test_a_post_hook_rewrites_the_result(rig: Any) -> None:
    rt, disp, client = rig
    redact = {"result": {"content": "redacted", "is_error": False}}
    async with Loopback({"/post": lambda s: Answer.json(redact)}) as srv:
        await register(client, srv, "/post", phase="post")
        result, value = await run_setter(rt, disp)
    assert result["text"] == "redacted" and value == "v"  # the tool ran; only what the model reads changed
    assert json.loads(verified(srv.seen[0])["result"]["content"])["ok"] is True


async def test_a_failing_hook_denies_when_closed_and_is_skipped_when_open(rig: Any) -> None:
    rt, disp, client = rig
    async with Loopback({"/down": lambda s: Answer.text("boom", status=500)}) as srv:
        closed = await register(client, srv, "/down", fail_mode="closed")
        result, value = await run_setter(rt, disp)
        assert result["is_error"] and "HTTP 500" in result["text"] and value is None
        assert (await client.delete(f"/v1/hooks/{closed['id']}")).status_code == 204
        await register(client, srv, "/down", fail_mode="open")
        result, value = await run_setter(rt, disp)
        assert not result["is_error"] and value == "v"


async def test_a_hook_on_a_private_address_the_operator_did_not_allow_is_refused(rig: Any) -> None:
    rt, disp, client = rig
    async with Loopback({"/pre": lambda s: Answer.json({"decision": "allow"})}) as srv:
        r = await client.post("/v1/hooks", json={"owner": "ops", "name": "sneaky", "phase": "pre",
                                                 "callback_url": srv.url("/pre", host="private.test")})
        assert r.status_code == 201
        result, value = await run_setter(rt, disp)
    assert result["is_error"] and value is None and not srv.seen  # fail-closed, and never contacted


async def test_registration_refusals(rig: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, client = rig
    base = {"owner": "ops", "name": "audit", "phase": "pre", "callback_url": "https://hooks.test/x"}
    assert (await client.post("/v1/hooks", json=base)).status_code == 201
    dup = await client.post("/v1/hooks", json=base)
    assert (dup.status_code, dup.json()["code"]) == (409, "hook_exists")
    for bad in ({"callback_url": "ftp://x"}, {"phase": "during"}, {"tools": ["no spaces"]}, {"extra": 1}):
        assert (await client.post("/v1/hooks", json={**base, "name": "b", **bad})).status_code == 422, bad
    monkeypatch.delenv("TREADLE_HOOKS_SECRET")
    r = await client.post("/v1/hooks", json={**base, "name": "unsigned"})
    assert (r.status_code, r.json()["code"]) == (422, "hook_secret_missing")
    listed = (await client.get("/v1/hooks")).json()["hooks"]
    assert [h["name"] for h in listed] == ["audit"]
    assert (await client.delete("/v1/hooks/hook_nope")).status_code == 404


INCR = {"decision": "allow", "input": {"op": "incr", "scope": "agent", "key": "n"}}


async def test_a_call_a_pre_hook_rewrote_into_a_foldable_one_is_folded_into_the_commit(rig: Any) -> None:
    rt, disp, client = rig
    folded = recording_folds(rt)
    async with Loopback({"/pre": lambda s: Answer.json(INCR)}) as srv:
        await register(client, srv, "/pre")
        result, _ = await run_setter(rt, disp)
    assert (result["text"], result["is_error"]) == ('{"key":"n","value":1}', False) and len(folded) == 1
    assert await rt.memory.get("default", "agent", "setter", "n") == (True, 1)


async def test_a_call_whose_result_a_post_hook_reads_is_not_folded(rig: Any) -> None:
    rt, disp, client = rig
    folded = recording_folds(rt)
    redact = {"result": {"content": "redacted", "is_error": False}}
    async with Loopback({"/pre": lambda s: Answer.json(INCR), "/post": lambda s: Answer.json(redact)}) as srv:
        await register(client, srv, "/pre")
        await register(client, srv, "/post", phase="post")
        result, _ = await run_setter(rt, disp)
        posted = [verified(s) for s in srv.seen if s.path == "/post"]
    found, value = await rt.memory.get("default", "agent", "setter", "n")
    assert result["text"] == "redacted" and folded == [] and found
    assert [json.loads(p["result"]["content"]) for p in posted] == [{"key": "n", "value": value}]


async def test_a_hook_signs_with_and_sends_the_tenants_credentials(
    rig: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`secret_credential` and `${credential.NAME}` in `headers` (issue 42 item 3): the calling run's
    tenant's CredentialDefs sign the call and authenticate it; the registered hook shows names only,
    no value is stored, and a hook whose signing credential is missing fails (closed: denied)."""
    import base64
    import logging
    import os

    from tests.support.e2e import dump_all
    from treadle.governance import credentials as creds
    from treadle.governance.credentials import TenantCredentials

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(creds.KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    creds.process_sealer.cache_clear()
    signing, token = "sign-" + secrets.token_hex(16), "tok-" + secrets.token_hex(16)
    rt, disp, client = rig
    try:
        async with Loopback({"/pre": lambda s: Answer.json({"decision": "allow"})}) as srv:
            hook = await register(client, srv, "/pre", secret_credential="hook_signing",
                                  headers={"Authorization": "Bearer ${credential.hook_token}", "X-Team": "ops"})
            assert (hook["secret_credential"], hook["headers"]["Authorization"]) == (
                "hook_signing", "Bearer ${credential.hook_token}")
            # the signing credential is not there yet: the (fail-closed) hook denies the call
            result, value = await run_setter(rt, disp)
            assert result["is_error"] and "hook_signing" in result["text"] and value is None and srv.seen == []
            store = TenantCredentials(rt.pool)
            await store.create("default", "tenant", "", "hook_signing", signing, updated_by="test")
            await store.create("default", "tenant", "", "hook_token", token, updated_by="test")
            result, value = await run_setter(rt, disp)
            assert not result["is_error"] and value == "v"
        seen = srv.seen[-1]
        stamp, mac = (part.split("=", 1)[1] for part in seen.headers["x-treadle-signature"].split(","))
        assert mac == hmac.new(signing.encode(), f"{stamp}.".encode() + seen.body, hashlib.sha256).hexdigest()
        assert (seen.headers["authorization"], seen.headers["x-team"]) == (f"Bearer {token}", "ops")
        dump = await dump_all(rt.database_url)
        assert signing not in dump and token not in dump
        assert not [r for r in caplog.records if signing in r.getMessage() or token in r.getMessage()]
        both = await client.post("/v1/hooks", json={"owner": "ops", "name": "x", "phase": "pre", "secret_env": "A_B",
                                                    "secret_credential": "c", "callback_url": "http://hooks.test/"})
        assert both.status_code == 422
    finally:
        creds.process_sealer.cache_clear()
