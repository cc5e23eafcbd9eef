"""Routes built on first use (treadle.api.lazyroute): declared, a route holds what matching needs;
a request builds the route it matches and no other; the OpenAPI document builds and lists every
route with its models; and every router of treadle's API declares its routes so."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from treadle.api.app import api_routers, create_app, mount
from treadle.api.lazyroute import LazyAPIRoute, build_all
from treadle.wire import CancelRequest, RunCancelled


def _app() -> tuple[FastAPI, dict[str, LazyAPIRoute]]:
    router = APIRouter(prefix="/v1", route_class=LazyAPIRoute)

    @router.post("/things/{thing_id}/cancel", response_model=RunCancelled)
    async def cancel(thing_id: str, body: CancelRequest) -> dict[str, Any]:
        return {"run_id": thing_id, "status": "cancelled", "cancel_requested": body.reason is not None}

    @router.get("/things/{thing_id}", response_model=RunCancelled)
    async def get(thing_id: str) -> dict[str, Any]:
        return {"run_id": thing_id, "status": "running", "cancel_requested": False}

    app = FastAPI()
    mount(app, [router])
    routes = {r.name: r for r in router.routes if isinstance(r, LazyAPIRoute)}
    return app, routes


def test_a_request_builds_the_route_it_matches_and_no_other() -> None:
    app, routes = _app()
    assert [r.built for r in routes.values()] == [False, False]
    assert routes["cancel"].path_format == "/v1/things/{thing_id}/cancel"  # matching needs no build
    client = TestClient(app)
    # a wire model (defer_build) as the body, validated with warnings as errors (pytest's setting)
    resp = client.post("/v1/things/t1/cancel", json={"reason": "enough"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"run_id": "t1", "status": "cancelled", "cancel_requested": True}
    assert routes["cancel"].built and not routes["get"].built
    assert client.post("/v1/things/t1/cancel", json={"nope": 1}).status_code == 422  # the body is validated
    assert client.delete("/v1/things/t1").status_code == 405  # a method no route takes: nothing built
    assert not routes["get"].built
    assert client.get("/v1/things/t2").json()["run_id"] == "t2"
    assert routes["get"].built


def test_the_openapi_document_builds_every_route_and_lists_its_models() -> None:
    app, routes = _app()
    spec = TestClient(app).get("/openapi.json").json()
    assert all(r.built for r in routes.values())
    op = spec["paths"]["/v1/things/{thing_id}/cancel"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/CancelRequest"}
    assert {"CancelRequest", "RunCancelled"} <= set(spec["components"]["schemas"])
    assert "get" in spec["paths"]["/v1/things/{thing_id}"]


def test_a_built_route_is_an_ordinary_api_route() -> None:
    _, routes = _app()
    build_all()
    route = routes["cancel"]
    assert isinstance(route, APIRoute) and route.built
    assert route.body_field is not None and route.response_model is RunCancelled
    assert route.methods == {"POST"} and route.name == "cancel"


def test_every_route_of_the_api_is_declared_lazy() -> None:
    eager = [f"{r.path} {sorted(r.methods or ())}" for router in api_routers() for r in router.routes
             if isinstance(r, APIRoute) and not isinstance(r, LazyAPIRoute)]
    assert eager == []


def test_importing_the_api_builds_no_route_and_the_whole_apis_document_builds_them_all() -> None:
    code = ("import json\nfrom fastapi.testclient import TestClient\n"
            "from treadle.api.app import create_app\nfrom treadle.api.lazyroute import _DECLARED\n"
            "app = create_app(auth_token=None, max_request_bytes=1 << 20, public_docs=True)\n"
            "before = sum(r.built for r in _DECLARED)\n"
            "spec = TestClient(app).get('/openapi.json').json()\n"
            "print(json.dumps([len(_DECLARED), before, sum(r.built for r in _DECLARED), len(spec['paths'])]))")
    out = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    declared, before, after, paths = json.loads(out.stdout.strip().splitlines()[-1])
    assert declared > 60 and before == 0 and after == declared
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    assert paths == len({r.path for r in app.routes if isinstance(r, APIRoute) and r.include_in_schema})
