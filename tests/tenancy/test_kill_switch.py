"""The operator's cross-tenant view and kill switch: unfinished runs of every tenant, and one call
that cancels all of one tenant's runs (parked ones included) while other tenants' runs go on."""

from __future__ import annotations

from typing import Any

from tests.support.tenancy import api, bearer, mint


async def test_the_operator_lists_and_cancels_a_tenants_runs(tenancy_rt: Any) -> None:
    rt, disp = tenancy_rt
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme", tenant="acme", scopes=["substrate:admin"]))
        globex = bearer(await mint(c, operator, "globex", tenant="globex", scopes=["substrate:tenant"]))
        started: dict[str, Any] = {}
        for who, name in ((acme, "acme"), (acme, "acme"), (globex, "globex")):
            r = await c.post("/v1/runs", json={"agent": "asker", "prompt": "go"}, headers=who)
            assert r.status_code == 202, r.text
            started.setdefault(name, []).append(r.json()["run_id"])
        await disp.drain()  # every run is parked on its question now

        conc = (await c.get("/v1/_concurrency", headers=acme)).json()
        assert (conc["tenant_id"], conc["waiting"], conc["running"], conc["queued"]) == ("acme", 2, 0, 0), conc
        assert conc["caps"] == {"tenant_max_running": 0, "user_max_running": 0}
        listed = (await c.get("/v1/_admin/runs", headers=operator)).json()
        assert {(r["tenant_id"], r["run_id"]) for r in listed["runs"]} == {
            (t, rid) for t, ids in started.items() for rid in ids}
        assert {r["status"] for r in listed["runs"]} == {"waiting"}
        only = (await c.get("/v1/_admin/runs", params={"tenant_id": "globex"}, headers=operator)).json()
        assert [r["run_id"] for r in only["runs"]] == started["globex"]
        for path in ("/v1/_admin/runs",):  # a tenant's own admin does not see across tenants
            assert (await c.get(path, headers=acme)).status_code == 403
        r = await c.post("/v1/_admin/tenants/acme/cancel", headers=globex)
        assert r.status_code == 403 and r.json()["code"] == "insufficient_scope"

        r = await c.post("/v1/_admin/tenants/acme/cancel", json={"reason": "runaway"}, headers=operator)
        assert r.status_code == 200, r.text
        assert sorted(r.json()["run_ids"]) == sorted(started["acme"])
        await disp.drain()
        for rid in started["acme"]:
            run = (await c.get(f"/v1/runs/{rid}", headers=acme)).json()
            assert run["status"] == "cancelled", run
        [other] = started["globex"]
        assert (await c.get(f"/v1/runs/{other}", headers=globex)).json()["status"] == "waiting"
        assert (await c.get("/v1/_admin/runs", headers=operator)).json()["count"] == 1
