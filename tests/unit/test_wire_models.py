"""treadle.wire is the one place the API's shapes live: every route's answer model and body model
come from it (the OpenAI-compatible and gateway bodies aside: their own wire formats), and the
limits it states agree with the code that enforces them."""

from __future__ import annotations

import typing

from fastapi.routing import APIRoute

from treadle.api.app import create_app
from treadle.builtins.client import MAX_CLIENT_TOOLS, MAX_TIMEOUT_S
from treadle.mcp.credentials import UserCredentials as SealedCredentials
from treadle.wire import ErrorBody, RunRequest, runs

#: bodies in their vendors' formats (api/openai_compat/wire.py, api/llm_gateway.py)
OWN_FORMATS = {"ChatRequest", "EmbeddingsRequest", "GatewayRequest"}


def _models(annotation: object) -> list[type]:
    args = typing.get_args(annotation)
    if args:
        return [m for a in args for m in _models(a)]
    return [annotation] if isinstance(annotation, type) and annotation is not type(None) else []  # `X | None`: X


def test_every_route_takes_and_answers_wire_models() -> None:
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    outside = []
    routes = [r for r in app.routes if isinstance(r, APIRoute) and r.include_in_schema]
    assert len(routes) > 60  # the app's own routes (FastAPI's include_router would hide them behind a wrapper)
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        if route.body_field is not None:
            for model in _models(route.body_field.field_info.annotation):
                if not model.__module__.startswith("treadle.wire") and model.__name__ not in OWN_FORMATS:
                    outside.append(f"{route.path} body {model.__module__}.{model.__name__}")
        for model in _models(route.response_model):
            if not model.__module__.startswith("treadle.wire"):
                outside.append(f"{route.path} answer {model.__module__}.{model.__name__}")
    assert outside == []


def test_the_limits_agree_with_the_code() -> None:
    assert (runs.MAX_CLIENT_TOOLS, runs.MAX_CLIENT_TOOL_TIMEOUT_S) == (MAX_CLIENT_TOOLS, MAX_TIMEOUT_S)
    assert runs.UserCredentials == SealedCredentials or str(runs.UserCredentials) == str(SealedCredentials)


def test_requests_refuse_unknown_fields_and_answers_keep_them() -> None:
    assert RunRequest.model_config.get("extra") == "forbid"
    err = ErrorBody.model_validate({"code": "x", "error": "y", "hint": "from a newer server"})
    assert err.model_dump()["hint"] == "from a newer server"
