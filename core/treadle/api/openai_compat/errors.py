"""OpenAI's error shape on the OpenAI-compatible routes only: `{"error": {message, type, param,
code}}`, with treadle's stable code as `code`. A route class catches what the route raises —
authentication, request validation, treadle's error tree — so the app-wide handlers (treadle's
`{code, error}`) stay as they are for every other route."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from treadle.api.errors import errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.openai_compat.wire import UnsupportedParameter
from treadle.errors import TreadleError
from treadle.wire import ErrorBody, OpenAIErrorBody

log = logging.getLogger("treadle.api")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 409: "invalid_request_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error"}


#: what these routes document: OpenAI's error shape for every 4xx/5xx the route answers (an invalid
#: parameter is 400, never 422); 413 comes from the body limit, before the route, in treadle's shape
OPENAI_ERRORS: dict[int | str, dict[str, Any]] = {
    **errors(400, 401, 403, 404, 429, 502, 503, openai=True),
    "4XX": {"model": OpenAIErrorBody, "description": "OpenAI's error shape"},
    413: {"model": ErrorBody, "description": "the body is over the server's limit: `body_too_large`"},
}


def error_doc(status: int, message: str, code: str, param: str | None = None) -> dict[str, Any]:
    etype = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


def from_treadle(exc: TreadleError) -> tuple[int, dict[str, Any]]:
    param = exc.param if isinstance(exc, UnsupportedParameter) else None
    status = exc.status
    if status == 422:
        status = 400  # OpenAI answers an invalid parameter with 400
    return status, error_doc(status, exc.message, exc.code, param)


def from_validation(exc: RequestValidationError | ValidationError) -> dict[str, Any]:
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "extra_forbidden":
        return error_doc(400, f"Unrecognized request argument supplied: {param}", "unknown_parameter", param)
    if first.get("type") == "missing":
        return error_doc(400, f"Missing required parameter: {param}", "missing_required_parameter", param)
    return error_doc(400, f"Invalid value for {param or 'body'}: {first.get('msg', 'invalid')}", "invalid_value",
                     param)


def openai_error_response(exc: Exception) -> JSONResponse:
    if isinstance(exc, TreadleError):
        if exc.status >= 500:
            log.error("%s: %s", exc.code, exc.message)
        status, doc = from_treadle(exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(doc, status_code=status, headers=headers)
    if isinstance(exc, RequestValidationError | ValidationError):
        return JSONResponse(from_validation(exc), status_code=400)
    if isinstance(exc, StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        code = "invalid_json" if exc.status_code == 400 else "http_error"
        return JSONResponse(error_doc(exc.status_code, message, code), status_code=exc.status_code,
                            headers=exc.headers)
    log.exception("unhandled error", exc_info=exc)
    return JSONResponse(error_doc(500, "internal error", "internal_error"), status_code=500)


class OpenAIRoute(LazyAPIRoute):
    """An APIRoute whose failures answer in OpenAI's error shape (built on first use, as treadle's
    other routes: treadle.api.lazyroute)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                return openai_error_response(exc)

        return route
