"""Two tenants on one runtime: with tenant B's token, every authenticated route in the API is tried
against tenant A's objects (A's run ids, interrupt, channel, defs, schedule, webhook, hook, memory
keys in the paths; op inputs naming them in the bodies). B must read nothing of A's (A's marker
never appears in an answer) and write nothing of A's (every row that is not B's own is unchanged,
byte for byte). The counts are printed."""

from __future__ import annotations

import secrets
from collections import Counter
from typing import Any

import httpx

from tests.support.e2e import dump_all
from tests.support.tenancy import api, bearer, mint
from treadle.api.app import api_routers
from treadle.api.deps import get_principal

MARK = "A-MARKER-" + secrets.token_hex(6)
TENANT_SCOPES = ["substrate:tenant", "webhooks:admin"]


async def ok(c: httpx.AsyncClient, method: str, path: str, auth: dict[str, str], body: Any = None) -> Any:
    r = await c.request(method, path, json=body, headers=auth)
    assert r.status_code < 300, (method, path, r.text)
    return r.json()


async def tenant_a_objects(c: httpx.AsyncClient, a: dict[str, str], disp: Any) -> dict[str, str]:
    run = await ok(c, "POST", "/v1/runs", a, {"agent": "echo", "prompt": MARK, "user_id": "alice"})
    asking = await ok(c, "POST", "/v1/runs", a, {"agent": "asker", "prompt": MARK, "user_id": "alice"})
    await disp.drain()
    interrupts = await ok(c, "GET", f"/v1/runs/{asking['run_id']}/interrupts", a)
    items = interrupts.get("interrupts", interrupts.get("items", []))
    await ok(c, "PUT", "/v1/_memory/scopes/agent/echo/keys/notes", a, {"value": MARK})
    await ok(c, "POST", "/v1/_channels", a, {"name": "a-chan", "semantic": "queue", "description": MARK})
    await ok(c, "POST", "/v1/_channels/a-chan/publish", a, {"value": MARK})
    await ok(c, "POST", "/v1/_channels/news/publish", a, {"value": MARK})
    agentdef = await ok(c, "POST", "/v1/_agentdef", a, {"op": "create", "name": "a-agent", "description": MARK,
                                                        "overlay": {"model": "echo", "system_prompt": MARK}})
    await ok(c, "POST", "/v1/_skilldef", a, {"op": "create", "name": "a-skill", "description": MARK,
                                             "overlay": {"body": MARK}})
    await ok(c, "POST", "/v1/_scheduledef", a, {"op": "create", "name": "a-sched", "description": MARK, "overlay": {
        "agent": "echo", "schedule": "0 3 * * *", "prompt": MARK}})
    await ok(c, "POST", "/v1/_webhookdef", a, {"op": "create", "name": "a-hook", "description": MARK, "overlay": {
        "agent": "echo", "auth": {"header": "X-Sig", "signing_secret_env": "A_HOOK_SECRET"},
        "payload_mapping": {"id": "$.id"}, "metadata": {"m": MARK}}})
    hook = await ok(c, "POST", "/v1/hooks", a, {"owner": "a-owner", "name": "a-h", "phase": "pre", "tools": ["Mem*"],
                                                "callback_url": "https://hooks.example/a"})
    await ok(c, "POST", "/v1/_evaluation", a,
             {"op": "submit", "run_id": run["run_id"], "score": 0.5, "judgement": MARK})
    return {"run_id": run["run_id"], "asking": asking["run_id"], "interrupt_id": items[0]["interrupt_id"] if items
            else "i_none", "def_id": agentdef["def_id"], "hook_id": hook.get("hook_id", hook.get("id", "h_none"))}


def path_values(ids: dict[str, str]) -> dict[str, list[str]]:
    return {"{run_id}": [ids["run_id"], ids["asking"]], "{interrupt_id}": [ids["interrupt_id"]],
            "{user_id}": ["alice"], "{name}": ["a-chan", "news", "a-hook", "a-sched"], "{ident}": ["a-sched"],
            "{scope}": ["agent"], "{scope_id}": ["echo"], "{key:path}": ["notes"], "{hook_id}": [ids["hook_id"]]}


def bodies(ids: dict[str, str]) -> list[Any]:
    names = ["a-agent", "a-skill", "a-sched", "a-hook"]
    out: list[Any] = [None, {}, {"op": "list"}, {"op": "list", "retired": True}, {"value": "B"}, {"text": "B"},
                      {"answer": "yes", "resolved_by": "api"}, {"agent": "a-agent", "prompt": "B"},
                      {"query": MARK, "scope": "agent", "scope_id": "echo"},
                      {"op": "list_for_run", "run_id": ids["run_id"]}, {"op": "aggregate", "name": "echo"},
                      {"op": "get", "def_id": ids["def_id"]}, {"op": "promote", "def_id": ids["def_id"]},
                      {"tool_use_id": "toolu_1", "content": "B"}]
    for name in names:
        out += [{"op": "get", "name": name}, {"op": "retire", "name": name},
                {"op": "fork", "name": name, "overlay": {"description": "B"}}, {"op": "run", "name": name}]
    return out


def _authenticated(route: Any) -> bool:
    if not hasattr(route, "dependant"):  # /v1/_mcp (a raw endpoint): tests/mcp covers its tenancy
        return False

    def calls(dep: Any) -> set[Any]:
        return {d.call for d in dep.dependencies} | {c for d in dep.dependencies for c in calls(d)}
    return get_principal in calls(route.dependant)


def others_rows(dump: str, b_markers: list[str]) -> Counter[str]:
    return Counter(line for line in dump.splitlines() if not any(m in line for m in b_markers))


async def test_tenant_b_reads_and_writes_nothing_of_tenant_a(tenancy_rt: Any, monkeypatch: Any) -> None:
    rt, disp = tenancy_rt
    monkeypatch.setenv("TREADLE_HOOKS_SECRET", "hooks-signing-secret-for-tests")
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        a = bearer(await mint(c, operator, "a", tenant="tenant-a", scopes=TENANT_SCOPES))
        b = bearer(await mint(c, operator, "b", tenant="tenant-b", scopes=TENANT_SCOPES))
        ids = await tenant_a_objects(c, a, disp)
        before = await dump_all(rt.database_url)
        assert MARK in before
        tried, statuses, leaks = 0, Counter[int](), []
        routes = [r for router in api_routers() for r in router.routes if _authenticated(r)]
        for route in routes:
            if route.path.endswith(("/_await", "/agents/stream")):  # type: ignore[attr-defined]
                continue  # a long poll of B's own channels, a stream of B's own runs; covered by their own tests
            urls = [route.path]  # type: ignore[attr-defined]
            for param, values in path_values(ids).items():
                urls = [u.replace(param, v) for u in urls for v in values] if param in route.path else urls  # type: ignore[attr-defined]
            for url in urls:
                for method in sorted(route.methods - {"HEAD"}):  # type: ignore[attr-defined]
                    for body in bodies(ids) if method in ("POST", "PUT", "DELETE") else [None]:
                        resp = await c.request(method, url, json=body, headers=b, params={"timeout": 0})
                        tried += 1
                        statuses[resp.status_code] += 1
                        if MARK in resp.text:
                            leaks.append(f"{method} {url} {body} → {resp.status_code} {resp.text[:200]}")
                        # another tenant's object is 404 (never 403, which would confirm it exists)
                        assert resp.status_code != 403 or resp.json()["code"] == "insufficient_scope", resp.text
        await disp.drain()
        after = await dump_all(rt.database_url)
    b_runs = [r async for r in _b_run_ids(rt)]
    b_markers = ["tenant-b", *b_runs]
    changed = (others_rows(before, b_markers) - others_rows(after, b_markers)) + (
        others_rows(after, b_markers) - others_rows(before, b_markers))
    print(f"\ntenant B tried {tried} requests against tenant A's objects: statuses {dict(sorted(statuses.items()))};"
          f" reads of A: {len(leaks)}; rows of A changed: {sum(changed.values())}")
    assert leaks == []
    assert sorted(changed) == []
    assert tried > 500 and statuses[404] > 50  # the requests reached the handlers


async def _b_run_ids(rt: Any) -> Any:
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT id AS run_id FROM runs WHERE tenant_id = 'tenant-b'")
        for row in await cur.fetchall():
            yield row["run_id"]
