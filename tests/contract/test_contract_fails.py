"""The contract check can fail: against an app whose answers break its own spec (a body that
does not match the response model, a status the operation does not document), the same
schemathesis run reports both and exits non-zero."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from tests.contract.test_openapi_contract import CHECKS
from tests.support.contract import schemathesis_run, serve_app_in_thread
from treadle.api.errors import AUTHED, errors
from treadle.wire import Run


def broken_app() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/runs/latest", response_model=Run, responses=errors(*AUTHED))
    async def latest() -> Any:
        return JSONResponse({"run_id": 1, "status": "sleeping"})  # neither matches Run

    @app.get("/v1/teapot", response_model=Run, responses=errors(*AUTHED))
    async def teapot() -> Any:
        return JSONResponse({"code": "teapot", "error": "short and stout"}, status_code=418)

    return app


def test_a_route_that_breaks_its_schema_fails_the_contract_check() -> None:
    with serve_app_in_thread(broken_app()) as url:
        out = schemathesis_run(f"{url}/openapi.json", "unused", "--checks", CHECKS, "--phases", "examples,fuzzing",
                               "--max-examples", "2", "--seed", "1")
    report = out.stdout + out.stderr
    assert out.returncode != 0, report
    assert "GET /v1/runs/latest" in report and "Response violates schema" in report, report
    assert "GET /v1/teapot" in report and "Undocumented status code" in report, report
