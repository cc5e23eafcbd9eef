"""Operator tokens over HTTP: open mode ends with the first token, the legacy token ends with the
first admin token, rotation keeps the old token for its grace period, retire ends it, scopes are
enforced per route (401 vs 403), yaml principals, the operator's tenant switch, and the docs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.e2e import query
from tests.support.tenancy import api, bearer, mint
from treadle.api.app import api_routers
from treadle.api.auth import ROUTE_SCOPES
from treadle.api.deps import get_principal


async def test_the_first_token_ends_open_mode_and_is_stored_only_as_a_hash(tenancy_rt: Any) -> None:
    rt, _ = tenancy_rt
    async with api(rt) as c:
        assert (await c.get("/v1/_whoami")).json()["open_mode"] is True
        token = await mint(c, {}, "ops")
        r = await c.get("/v1/runs")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        who = (await c.get("/v1/_whoami", headers=bearer(token))).json()
        assert {k: who[k] for k in ("tenant_id", "subject", "scopes", "is_admin", "open_mode", "legacy")} == {
            "tenant_id": "default", "subject": "tok-ops", "scopes": ["substrate:admin"], "is_admin": True,
            "open_mode": False, "legacy": False}
        assert who["token_id"].startswith("def_")
        assert (await c.get("/v1/_me", headers=bearer(token))).json() == who  # loomcycle's name, one answer
        assert (await c.get("/v1/_whoami", headers=bearer(token + "x"))).status_code == 401
    dump = await query(rt.database_url, "SELECT (SELECT json_agg(d) FROM defs d)::text || "
                       "(SELECT json_agg(t) FROM auth_tokens t)::text AS all")
    assert token not in dump[0]["all"] and token[4:] not in dump[0]["all"]


async def test_the_legacy_token_works_until_the_first_admin_token(tenancy_rt: Any) -> None:
    rt, _ = tenancy_rt
    async with api(rt, legacy="legacy-operator-token") as c:
        legacy = bearer("legacy-operator-token")
        assert (await c.get("/v1/_whoami", headers=legacy)).json()["legacy"] is True
        reader = await mint(c, legacy, "reader", scopes=["runs:read"])  # not an admin: legacy stays
        assert (await c.get("/v1/runs", headers=legacy)).status_code == 200
        admin = await mint(c, legacy, "admin")
        r = await c.get("/v1/runs", headers=legacy)
        assert r.status_code == 401, r.text
        assert (await c.get("/v1/runs", headers=bearer(admin))).status_code == 200
        assert (await c.get("/v1/runs", headers=bearer(reader))).status_code == 200


async def test_rotation_keeps_the_old_token_for_its_grace_period_and_retire_ends_it(tenancy_rt: Any) -> None:
    rt, _ = tenancy_rt
    async with api(rt) as c:
        admin = await mint(c, {}, "admin")
        old = await mint(c, bearer(admin), "ci", scopes=["runs:read"])
        r = await c.post("/v1/_operatortokendef", headers=bearer(admin),
                         json={"op": "rotate", "name": "ci", "grace_seconds": 3600})
        assert r.status_code == 200, r.text
        rotated = r.json()
        new = rotated["token"]
        assert new != old and rotated["previous_expires_at"] and rotated["version"] == 2
        for token in (old, new):  # both work during the grace period
            assert (await c.get("/v1/runs", headers=bearer(token))).status_code == 200
        # the grace period ends: move the row's expiry instead of waiting an hour
        await query(rt.database_url, "UPDATE auth_tokens SET expires_at = now() - interval '1 second'"
                    " WHERE def_id = %s", (rotated["rotated_from"],))
        assert (await c.get("/v1/runs", headers=bearer(old))).status_code == 401
        assert (await c.get("/v1/runs", headers=bearer(new))).status_code == 200
        listed = (await c.post("/v1/_operatortokendef", headers=bearer(admin),
                               json={"op": "list", "retired": True})).json()
        assert {d["name"] for d in listed["defs"]} == {"ci", "admin"}
        assert all("token_hash" not in d["body"] for d in listed["defs"])
        r = await c.post("/v1/_operatortokendef", headers=bearer(admin), json={"op": "retire", "name": "ci"})
        assert r.status_code == 200, r.text
        assert (await c.get("/v1/runs", headers=bearer(new))).status_code == 401
        for op in ("fork", "promote", "verify"):  # reviving an old version would revive its token
            r = await c.post("/v1/_operatortokendef", headers=bearer(admin), json={"op": op, "name": "ci"})
            assert r.status_code == 422 and "op must be one of" in r.json()["error"]


@pytest.mark.parametrize(("scopes", "allowed", "refused"), [
    (["runs:read"], [("GET", "/v1/runs")], [("POST", "/v1/runs"), ("GET", "/v1/_channels"),
                                             ("POST", "/v1/_agentdef")]),
    (["runs:create", "runs:read"], [("POST", "/v1/runs"), ("GET", "/v1/runs")], [("POST", "/v1/_agentdef")]),
    (["channel:read"], [("GET", "/v1/_channels")], [("POST", "/v1/_channels/news/publish"), ("GET", "/v1/runs")]),
    (["substrate:tenant"], [("POST", "/v1/runs"), ("POST", "/v1/_agentdef"), ("POST", "/v1/_channels/news/publish")],
     [("POST", "/v1/_webhookdef"), ("POST", "/v1/_operatortokendef")]),
])
async def test_scopes_are_enforced_per_route(tenancy_rt: Any, scopes: list[str], allowed: list[tuple[str, str]],
                                             refused: list[tuple[str, str]]) -> None:
    rt, _ = tenancy_rt
    bodies = {"/v1/runs": {"agent": "echo", "prompt": "hi"}, "/v1/_agentdef": {"op": "list"},
              "/v1/_channels/news/publish": {"value": 1}, "/v1/_webhookdef": {"op": "list"},
              "/v1/_operatortokendef": {"op": "list"}}
    async with api(rt) as c:
        admin = await mint(c, {}, "admin")
        token = await mint(c, bearer(admin), "t", tenant="acme", scopes=scopes)
        for method, path in allowed:
            r = await c.request(method, path, json=bodies.get(path), headers=bearer(token))
            assert r.status_code < 400, (method, path, r.text)
        for method, path in refused:
            r = await c.request(method, path, json=bodies.get(path), headers=bearer(token))
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["code"] == "insufficient_scope"
            assert 'error="insufficient_scope"' in r.headers["www-authenticate"]


async def test_yaml_principals_read_their_token_from_the_environment(
        tenancy_rt: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rt, _ = tenancy_rt
    from treadle.config import PrincipalSpec

    monkeypatch.setenv("CI_BOT_TOKEN", "ci-bot-token-0123456789")
    rt.config.principals["ci-bot"] = PrincipalSpec(tenant="acme", scopes=["runs:read"], token_env="CI_BOT_TOKEN")
    try:
        async with api(rt) as c:
            who = await c.get("/v1/_whoami", headers=bearer("ci-bot-token-0123456789"))
            assert who.json()["tenant_id"] == "acme" and who.json()["token_id"] == "cfg:ci-bot"
            assert (await c.get("/v1/_whoami")).status_code == 401  # principals end open mode
            monkeypatch.setenv("CI_BOT_TOKEN", "  ")  # a blank variable is no token
            assert (await c.get("/v1/_whoami", headers=bearer("  "))).status_code == 401
    finally:
        rt.config.principals.clear()


async def test_only_the_operator_may_act_on_another_tenant(tenancy_rt: Any) -> None:
    rt, _ = tenancy_rt
    async with api(rt) as c:
        operator = await mint(c, {}, "operator")
        acme_admin = await mint(c, bearer(operator), "acme-admin", tenant="acme")
        r = await c.get("/v1/_whoami", headers={**bearer(operator), "X-Treadle-Tenant": "acme"})
        assert r.json()["tenant_id"] == "acme"
        r = await c.get("/v1/_whoami", headers={**bearer(acme_admin), "X-Treadle-Tenant": "default"})
        assert r.status_code == 403
        r = await c.post("/v1/_operatortokendef", headers=bearer(acme_admin),
                         json={"op": "create", "name": "x", "tenant_id": "default"})
        assert r.status_code == 403


async def test_the_docs_need_a_token_unless_public(tenancy_rt: Any) -> None:
    rt, _ = tenancy_rt
    async with api(rt, legacy="legacy-operator-token") as c:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert (await c.get(path)).status_code == 401
            assert (await c.get(path, headers=bearer("legacy-operator-token"))).status_code == 200
        spec = (await c.get("/openapi.json", headers=bearer("legacy-operator-token"))).json()
        assert "/v1/runs" in spec["paths"]
    async with api(rt, legacy="legacy-operator-token", public_docs=True) as c:
        assert (await c.get("/openapi.json")).status_code == 200


async def test_a_browser_opening_the_docs_without_the_token_is_told_how(tenancy_rt: Any) -> None:
    """Issue 43 item 9: a browser (it cannot send a bearer) got raw 401 JSON from /docs."""
    rt, _ = tenancy_rt
    browser = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    async with api(rt, legacy="legacy-operator-token") as c:
        for path in ("/docs", "/redoc"):
            page = await c.get(path, headers=browser)
            assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
            assert "TREADLE_PUBLIC_DOCS=true" in page.text and "/openapi.json" in page.text
            assert (await c.get(path)).json()["code"] == "unauthorized"  # an API client: JSON as before
            ok = await c.get(path, headers={**browser, **bearer("legacy-operator-token")})
            assert ok.status_code == 200 and "TREADLE_PUBLIC_DOCS" not in ok.text
        wrong = await c.get("/docs", headers={**browser, **bearer("not-the-token")})
        assert wrong.status_code == 401 and "TREADLE_PUBLIC_DOCS=true" in wrong.text


def _calls(dependant: Any) -> set[Any]:
    out = set()
    for d in dependant.dependencies:
        out.add(d.call)
        out |= _calls(d)
    return out


def test_every_authenticated_route_has_a_scope() -> None:
    routes = [r for router in api_routers() for r in router.routes]
    missing = [f"{m} {r.path}" for r in routes if hasattr(r, "dependant") and get_principal in _calls(r.dependant)  # type: ignore[attr-defined]
               for m in r.methods - {"HEAD"} if (m, r.path) not in ROUTE_SCOPES]  # type: ignore[attr-defined]
    assert missing == []
    unused = {k for k in ROUTE_SCOPES if k[1] not in {"/openapi.json", "/docs", "/redoc", "/metrics", "/v1/_mcp"}} - {
        (m, r.path) for r in routes for m in r.methods}  # type: ignore[attr-defined]
    assert unused == set()


async def test_no_default_widens_a_token_or_shows_another_tenants_figures(tenancy_rt: Any) -> None:
    """A create without `scopes` mints the least ([runs:read]: it reads runs and does nothing
    else — never a silent admin), and /metrics — every tenant's counts — is the operator's:
    another tenant's admin gets 403."""
    rt, _ = tenancy_rt
    async with api(rt) as c:
        operator = await mint(c, {}, "operator")
        for tenant in (None, "acme"):
            op = {"op": "create", "name": "bare", **({"tenant_id": tenant} if tenant else {})}
            r = await c.post("/v1/_operatortokendef", headers=bearer(operator), json=op)
            assert r.status_code == 200, r.text
            bare = bearer(r.json()["token"])
            r = await c.post("/v1/_operatortokendef", headers=bearer(operator),
                             json={"op": "get", "name": "bare", **({"tenant_id": tenant} if tenant else {})})
            assert r.json()["body"]["scopes"] == ["runs:read"], r.text
            assert (await c.get("/v1/runs", headers=bare)).status_code == 200
            for method, path, body in (("POST", "/v1/runs", {"agent": "echo", "prompt": "hi"}),
                                       ("POST", "/v1/_operatortokendef", {"op": "list"}),
                                       ("GET", "/metrics", None)):
                r = await c.request(method, path, headers=bare, json=body)
                assert (r.status_code, r.json()["code"]) == (403, "insufficient_scope"), (path, r.text)
        acme_admin = await mint(c, bearer(operator), "acme-admin", tenant="acme")
        r = await c.get("/metrics", headers=bearer(acme_admin))
        assert (r.status_code, r.json()["code"]) == (403, "insufficient_scope")
        r = await c.get("/metrics", headers=bearer(operator))
        assert r.status_code == 200 and "treadle_" in r.text
