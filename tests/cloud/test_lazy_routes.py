"""The API function imports a router when a request first needs it (treadle_cloud/routes.py):
the table of prefixes must stay the API's routers, in order, and a request must be answered as
the whole API would answer it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.lambda_sim import LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN
from treadle_cloud.routes import API_ROUTERS, api_lazy_routers, needed

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"authorization": f"Bearer {API_TOKEN}"}


def literal_head(path: str) -> str:
    return path.split("{", 1)[0]


def test_the_table_is_the_apis_routers_in_order_and_every_route_is_under_its_prefixes() -> None:
    from treadle.api.app import api_routers

    lazy = api_lazy_routers()
    assert [r for lr in lazy for r in lr.routers()] == api_routers(webhooks=False)
    for lr in lazy:
        for router in lr.routers():
            for route in router.routes:
                path = getattr(route, "path")  # noqa: B009 — APIRoute, or a starlette Route (MCP)
                # a concrete path the route matches starts with its literal head, so with a prefix
                assert literal_head(path).startswith(lr.prefixes), (lr.module, path, lr.prefixes)


def test_a_path_loads_only_the_routers_whose_prefixes_it_has() -> None:
    lazy = api_lazy_routers()
    assert {(lr.module, lr.attr) for lr in needed(lazy, "/v1/_whoami")} == {("treadle.api.tokens", "router")}
    # /v1/users/… is shared by interrupts, loomcycle's routes, sessions and a user's channels (a
    # prefix, not a pattern)
    assert {lr.module for lr in needed(lazy, "/v1/users/u1/agents")} == {"treadle.api.interrupts",
                                                                         "treadle.api.loomcycle",
                                                                         "treadle.api.sessions",
                                                                         "treadle.api.channels"}
    assert {lr.module for lr in needed(lazy, "/v1/sessions/s_1/messages")} == {"treadle.api.sessions"}
    assert len(needed(lazy, "/v1/no-such-thing")) == len(API_ROUTERS)  # a 404 is the whole API's
    assert len(needed(lazy, "/openapi.json")) == len(API_ROUTERS)


def test_the_api_handler_module_imports_no_router_but_the_runs_api() -> None:
    code = ("import json, sys; import functions.api.handler; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('treadle.api.'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "treadle.api.runs" in imported  # create_app's own (the runtime comes with it)
    # the runs API imports loomcycle's module for its shapes; no other router module is imported
    assert imported & {module for module, _attr, _prefixes in API_ROUTERS} == {
        "treadle.api.runs", "treadle.api.clienttools", "treadle.api.steering", "treadle.api.loomcycle"}


def call(api: LambdaEnv, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    resp = api.invoke(http_event(method, path, headers=AUTH, body=body))
    text = resp.get("body") or ""
    return resp["statusCode"], json.loads(text) if text.startswith(("{", "[")) else text


def loaded(api: LambdaEnv) -> list[str]:
    return [f"{lr.module}:{lr.attr}" for lr in api.handler.lazy if lr.loaded]


def test_requests_import_their_routers_and_are_answered_as_by_the_whole_api(api: LambdaEnv) -> None:
    status, health = call(api, "GET", "/healthz")  # the app's own route: no router imported
    assert status == 200 and health["ok"], health
    assert loaded(api) == []
    status, me = call(api, "GET", "/v1/_whoami")
    assert status == 200 and me["tenant_id"], me
    assert loaded(api) == ["treadle.api.tokens:router"]
    status, body = call(api, "POST", "/v1/runs", {"agent": "calc", "prompt": "1+1"})
    assert status in (200, 201, 202), body
    run_id = body["run_id"]
    status, body = call(api, "GET", f"/v1/runs/{run_id}/interrupts")
    assert status == 200, body
    assert loaded(api) == ["treadle.api.runs:router", "treadle.api.clienttools:router",
                           "treadle.api.steering:router", "treadle.api.interrupts:router",
                           "treadle.api.tokens:router"]
    # mount order kept: the app's routes are the loaded routers' routes, in the API's order
    app_paths = [getattr(r, "path", None) for r in api.handler.app.router.routes]
    mounted = [getattr(r, "path", None) for router in api.handler.routers for r in router.routes]
    assert app_paths[-len(mounted):] == mounted
    status, body = call(api, "GET", "/v1/no-such-route")
    assert status == 404
    assert len(loaded(api)) == len(API_ROUTERS)
    status, body = call(api, "GET", "/v1/models")  # a router loaded by the 404 answers
    assert status == 200, body
