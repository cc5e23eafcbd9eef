"""One place that turns errors into HTTP responses: `{"code": "<snake_case>", "error": "<message>"}`
(`treadle.wire.ErrorBody`), and what each operation documents of them (`errors`)."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from treadle import wire
from treadle.errors import Forbidden, TreadleError
from treadle.wire import ErrorBody

log = logging.getLogger("treadle.api")

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    501: "not_implemented",
    503: "unavailable",
}


#: what a status means on this API, with the codes it carries (the OpenAPI spec and docs/api.md)
STATUS_DOCS: dict[int, str] = {
    400: "bad request: `bad_request`, `unknown_agent`, `unsupported_field`, `tenant_mismatch`, `bad_deliver_at`, …",
    401: "no bearer token, or an invalid one: `unauthorized` (with `WWW-Authenticate: Bearer`)",
    403: "the token lacks the route's scope: `insufficient_scope`",
    404: "not found (also another tenant's): `not_found`, `run_not_found`, `agent_not_found`, …",
    409: "conflicts with the current state: `conflict`, `run_finished`, `not_interactive`, `agent_id_in_use`, …",
    410: "gone: `interrupt_expired`",
    413: "too large: `body_too_large`, `memory_quota_exceeded`",
    422: "invalid input: `validation_error` (with `details`), `tool_refused`, `invalid_input`, …",
    429: "too many: `queue_full`, `rate_limited` (with `Retry-After`), `backpressure`, `per_user_quota_exhausted`",
    501: "not available on this server: `embedder_not_configured`, `pgvector_not_installed`, `not_implemented`",
    502: "an upstream (model provider, embedder) failed: `provider_error`, `embedder_error`, …",
    503: "treadle or its database is not available: `store_unavailable`, `channels_unavailable`, …",
}
#: every authenticated operation may answer these (the bearer, the scope, X-Treadle-Tenant, the database)
AUTHED = (401, 403, 422, 503)
#: …and those with a body: not JSON (400), over the size limit (413)
BODY = (*AUTHED, 400, 413)


def errors(*statuses: int, openai: bool = False) -> dict[int | str, dict[str, Any]]:
    """`responses=` of an operation: each status with the error body it carries (`{code, error,
    details?}`, or OpenAI's `{error: {...}}` on the OpenAI-compatible routes)."""
    model = wire.OpenAIErrorBody if openai else ErrorBody  # the OpenAI models: imported by their routes
    return {status: {"model": model, "description": STATUS_DOCS.get(status, "error")}
            for status in sorted(set(statuses))}


def _allowed(req: Request) -> str:
    """Every method some route serves at the request's path: Starlette's 405 names only the
    methods of the first route whose path matched (a path served by two routes, say GET and POST
    /v1/runs, would answer a PUT with `Allow: POST`)."""
    methods: set[str] = set()
    for route in req.app.routes:
        match, _ = route.matches(req.scope)
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def json_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`errors(...)` for a route whose success answer is not JSON (an SSE stream): its errors are
    still the JSON error body, documented as `application/json` (a `model` would take the route's
    media type)."""
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {status: {"description": STATUS_DOCS.get(status, "error"), "content": content}
            for status in sorted(set(statuses))}


_ANY_JSON: TypeAdapter[Any] = TypeAdapter(Any)


def fast_json(doc: Any, status_code: int = 200) -> Response:
    """A JSON answer sent as it is, for the long event pages (a transcript of thousands of
    events): validating each event against the route's model costs several times the encoding.
    The route still documents its model, and tests/contract checks these answers against it."""
    return Response(_ANY_JSON.dump_json(doc), status_code=status_code, media_type="application/json")


def error_body(code: str, message: str, /, **extra: Any) -> dict[str, Any]:
    return {"code": code, "error": message, **extra}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(TreadleError)
    async def _treadle(_req: Request, exc: TreadleError) -> JSONResponse:
        if exc.status >= 500:
            log.error("%s: %s", exc.code, exc.message)
        headers = None
        if exc.status == 401:
            headers = {"WWW-Authenticate": 'Bearer realm="treadle"'}
        elif isinstance(exc, Forbidden):
            headers = {"WWW-Authenticate": f'Bearer realm="treadle", error="insufficient_scope", scope="{exc.scope}"'}
        retry_after = getattr(exc, "retry_after_s", None) if exc.status == 429 else None
        if isinstance(retry_after, (int, float)):
            headers = {"Retry-After": str(max(1, int(retry_after)))}
        extra = getattr(exc, "body_extra", None)  # e.g. a TeamDef refusal's `reason` (teams/graph.py)
        return JSONResponse(error_body(exc.code, exc.message, **(extra if isinstance(extra, dict) else {})),
                            status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", "")} for e in exc.errors()
        ]
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(p for p in first["loc"] if p != "body") or "body"
        return JSONResponse(
            error_body("validation_error", f"{where}: {first['msg']}", details=details), status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code
        headers = exc.headers
        if exc.status_code == 405 and exc.detail == "Method Not Allowed":  # the router's; a route's own Allow wins
            headers = {**(headers or {}), "Allow": _allowed(req)}
        return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=headers)

    @app.exception_handler(psycopg.DataError)
    async def _unstorable(_req: Request, exc: psycopg.DataError) -> JSONResponse:
        # SQLSTATE class 22: a value from the request the database refuses (a NUL character in a
        # path or a name, a number out of range); nothing was written
        log.warning("refused input: %s", exc)
        return JSONResponse(
            error_body("invalid_input", "the request holds a value that cannot be stored (a NUL character, or a "
                       "number out of range)"),
            status_code=422,
        )

    @app.exception_handler(ClientDisconnect)
    async def _gone(_req: Request, _exc: ClientDisconnect) -> Response:
        # the client left while its body was being read: no one reads an answer, and nothing
        # failed here (not a 500, no traceback); 499 is the status proxies log for it
        log.info("client disconnected before its request body was read")
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(error_body("internal_error", "internal error"), status_code=500)
