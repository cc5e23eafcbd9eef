"""POST /v1/_path on a served sidecar (real HTTP on loopback): loomcycle's body and answers, the
tree resolved from the bearer (tenant, subject; `http-admin` for scope agent), `?scope_id=`
browsing, `?tenant=` for the operator only, 422 `tool_refused` with the tool's reason, and the
same tree an agent run of that user sees."""

from __future__ import annotations

import json
from typing import Any

from tests.support.sidecar import run_ended, sidecar_client, sidecar_settings
from tests.support.tenancy import bearer, tenant_user
from treadle.config import parse_config

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


async def test_path_over_http(migrated_db_url: str) -> None:
    settings = sidecar_settings(migrated_db_url, token=OPERATOR)
    async with sidecar_client(settings, parse_config({"agents": AGENTS})) as c:
        operator = bearer(OPERATOR)
        alice, bob, eve = [await tenant_user(c, operator, tenant, subject)
                           for tenant, subject in (("acme", "alice"), ("acme", "bob"), ("evil", "eve"))]

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
        run_id, run = await run_ended(c, alice, "lister", "ls", "alice")
        assert run["status"] == "completed"
        events = (await c.get(f"/v1/runs/{run_id}/events", headers=alice)).json()["events"]
        (result,) = [json.loads(e["text"]) for e in events if e["type"] == "tool_result"]
        assert [e["full_path"] for e in result["entries"]] == ["/docs/plans"]
