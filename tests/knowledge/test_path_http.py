"""POST /v1/_path on a served sidecar (real HTTP on loopback): loomcycle's body and answers, the
tree resolved from the bearer (tenant, subject; `http-admin` for scope agent), `?scope_id=`
browsing, `?tenant=` for the operator only, 422 `tool_refused` with the tool's reason, and the
same tree an agent run of that user sees."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.sidecar import sidecar_client, sidecar_settings
from tests.support.tenancy import bearer
from treadle.config import parse_config
from treadle.testing import until as wait_for

OPERATOR = "op-" + "s3cret"
AGENTS = {
    "lister": {
        "model": "script",
        "tools": ["Path"],
        "mock": {
            "script": [{"tool": "Path", "input": {"op": "ls", "scope": "user", "path": "/docs"}}, {"text": "done"}]
        },
    }
}


async def mint(c: httpx.AsyncClient, tenant: str, subject: str) -> dict[str, str]:
    r = await c.post(
        "/v1/_operatortokendef",
        headers=bearer(OPERATOR),
        json={
            "op": "create",
            "name": f"{tenant}-{subject}",
            "tenant_id": tenant,
            "subject": subject,
            "scopes": ["substrate:tenant", "runs:create", "runs:read"],
        },
    )
    assert r.status_code == 200, r.text
    return bearer(r.json()["token"])


async def test_path_over_http(migrated_db_url: str) -> None:
    settings = sidecar_settings(migrated_db_url, token=OPERATOR)
    async with sidecar_client(settings, parse_config({"agents": AGENTS})) as c:
        alice, bob, eve = await mint(c, "acme", "alice"), await mint(c, "acme", "bob"), await mint(c, "evil", "eve")

        async def path(body: dict[str, Any], who: dict[str, str], status: int = 200, **params: str) -> Any:
            r = await c.post("/v1/_path", json=body, headers=who, params=params)
            assert r.status_code == status, r.text
            return r.json()

        assert await path({"op": "mkdir", "scope": "user", "path": "/docs/plans"}, alice) == {
            "ok": True,
            "path": "/docs/plans",
            "created": True,
        }
        await path({"op": "mkdir", "scope": "tenant", "path": "/shared"}, alice)
        await path({"op": "mkdir", "path": "/admin-only"}, alice)  # scope agent: the http-admin agent's tree
        listed = await path({"op": "ls", "scope": "user", "path": "/"}, alice)
        assert listed == {"path": "/", "entries": [{"name": "docs", "kind": "directory", "full_path": "/docs"}]}
        # bob: his own user tree is empty, the tenant's is shared, alice's is reachable by ?scope_id=
        assert (await path({"op": "ls", "scope": "user", "path": "/"}, bob))["entries"] == []
        assert [e["name"] for e in (await path({"op": "ls", "scope": "tenant"}, bob))["entries"]] == ["shared"]
        browsed = await path({"op": "ls", "scope": "user", "path": "/docs"}, bob, scope_id="alice")
        assert [e["full_path"] for e in browsed["entries"]] == ["/docs/plans"]
        # another tenant sees nothing of acme, and cannot name it
        assert (await path({"op": "ls", "scope": "tenant"}, eve))["entries"] == []
        assert (await path({"op": "ls", "scope": "user"}, eve, scope_id="alice"))["entries"] == []
        denied = await path({"op": "ls", "scope": "tenant"}, eve, 403, tenant="acme")
        assert denied["code"] == "insufficient_scope"
        # the operator may browse any tenant
        seen = await path(
            {"op": "ls", "scope": "user", "path": "/docs"}, bearer(OPERATOR), tenant="acme", scope_id="alice"
        )
        assert [e["name"] for e in seen["entries"]] == ["plans"]
        # refusals: loomcycle's 422 envelope, with the tool's reason
        refused = await path({"op": "rm", "scope": "user", "path": "/docs"}, alice, 422)
        assert refused["code"] == "tool_refused" and refused["tool"] == "Path"
        assert refused["reason"] == "path_not_empty"
        bad = await path({"op": "ls", "path": "/x", "scope_id": "alice"}, alice, 422)
        assert bad["reason"] == "unknown_field"
        assert (await path({"op": "stat", "path": "/../x"}, alice, 422))["reason"] == "invalid_path"
        assert (await c.post("/v1/_path", content=b"[1]", headers=alice)).status_code == 400
        assert (await c.post("/v1/_path", json={"op": "ls"})).status_code == 401

        # a run of alice's sees the tree she made over HTTP
        r = await c.post("/v1/runs", headers=alice, json={"agent": "lister", "prompt": "ls", "user_id": "alice"})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]

        async def ended() -> dict[str, Any] | None:
            run = (await c.get(f"/v1/runs/{run_id}", headers=alice)).json()
            return run if run["status"] in ("completed", "failed") else None

        assert (await wait_for(ended, 20, interval=0.05, what=run_id))["status"] == "completed"
        events = (await c.get(f"/v1/runs/{run_id}/events", headers=alice)).json()["events"]
        (result,) = [json.loads(e["text"]) for e in events if e["type"] == "tool_result"]
        assert [e["full_path"] for e in result["entries"]] == ["/docs/plans"]
