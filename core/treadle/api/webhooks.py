"""/v1/_webhooks: inbound webhooks (no bearer: the def's signature is the authority) and their
triage routes (bearer). Served by the sidecar's app and by the webhook Lambda alike.

    POST /v1/_webhooks/{name}                     a delivery for the default tenant
    POST /v1/_webhooks/{tenant}/{name}            a delivery for another tenant
    GET  /v1/_webhooks/{name}/recent-deliveries   triage (?limit ≤ 50)
    POST /v1/_webhooks/{name}/test                dry run: no run, no dedup, no rate token
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, error_body, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.domain.ids import is_identifier
from treadle.errors import BodyTooLarge, NotFound, RateLimited
from treadle.runtime import Runtime
from treadle.security.principal import DEFAULT_TENANT
from treadle.triggers.webhooks import ActiveWebhook, WebhookService
from treadle.wire import WebhookAccepted, WebhookDeliveries, WebhookDryRun

router = APIRouter(prefix="/v1/_webhooks", tags=["webhooks"], route_class=LazyAPIRoute)


def _unknown(name: str) -> NotFound:
    return NotFound(f"unknown webhook {name!r}", code="unknown_webhook")


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the body is larger than this webhook's limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body is larger than this webhook's limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _headers(request: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


async def _load(svc: WebhookService, tenant: str, name: str) -> ActiveWebhook:
    if not is_identifier(tenant) or not is_identifier(name):
        raise _unknown(name)
    return await svc.active(tenant, name)


async def _deliver(rt: Runtime, tenant: str, name: str, request: Request) -> JSONResponse:
    svc = rt.triggers.webhooks
    hook = await _load(svc, tenant, name)
    try:
        body = await _read_body(request, hook.spec.body_size_limit_bytes)
    except BodyTooLarge as exc:
        await svc.reject(hook, "rejected_body", exc.message)
        raise
    try:
        reply = await svc.receive(hook, _headers(request), body)
    except RateLimited as exc:
        retry = str(int(max(1.0, exc.retry_after_s)))
        return JSONResponse(error_body(exc.code, exc.message), status_code=429, headers={"Retry-After": retry})
    return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers or None)


#: a delivery's body: whatever the sender sends (the webhook's mapping reads it)
ANY_BODY: dict[str, Any] = {"requestBody": {"required": False, "content": {"*/*": {"schema": {}}}}}
#: what a delivery may answer besides its success (signature, payload, mapping, rate, secret)
DELIVERY_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"model": WebhookAccepted, "description": "a duplicate delivery (its id was seen before)"},
    **errors(400, 401, 404, 413, 422, 429, 503)}


@router.get("/{name}/recent-deliveries", response_model=WebhookDeliveries, response_model_exclude_unset=True,
            responses=errors(*AUTHED, 404))
async def recent_deliveries(
    name: str, rt: Rt, who: Who, limit: Annotated[int, Query(ge=1, le=50)] = 50
) -> dict[str, Any]:
    return await rt.triggers.webhooks.recent(who.tenant_id, name, limit)


@router.post("/{name}/test", response_model=WebhookDryRun, response_model_exclude_unset=True, openapi_extra=ANY_BODY,
             responses=errors(*BODY, 404))
async def test_delivery(name: str, request: Request, rt: Rt, who: Who) -> dict[str, Any]:
    svc = rt.triggers.webhooks
    hook = await _load(svc, who.tenant_id, name)
    body = await _read_body(request, hook.spec.body_size_limit_bytes)
    return await svc.dry_run(hook, _headers(request), body)


@router.post("/{name}", response_model=WebhookAccepted, response_model_exclude_unset=True, openapi_extra=ANY_BODY,
             responses=DELIVERY_ANSWERS, status_code=202)
async def receive(name: str, request: Request, rt: Rt) -> JSONResponse:
    return await _deliver(rt, DEFAULT_TENANT, name, request)


@router.post("/{tenant}/{name}", response_model=WebhookAccepted, response_model_exclude_unset=True,
             openapi_extra=ANY_BODY, responses=DELIVERY_ANSWERS, status_code=202)
async def receive_for_tenant(tenant: str, name: str, request: Request, rt: Rt) -> JSONResponse:
    return await _deliver(rt, tenant, name, request)
