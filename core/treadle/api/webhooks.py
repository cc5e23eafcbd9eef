"""/v1/_webhooks: inbound webhooks (loomcycle's routes).

Webhook definitions are not in this build, so every name is unknown: `404 unknown_webhook`, never
a 500. The routes exist so the cloud shape's webhook function (and API Gateway's routes to it) are
in place for the feature.
"""

from __future__ import annotations

from typing import NoReturn

from fastapi import APIRouter

from treadle.errors import NotFound

router = APIRouter(prefix="/v1/_webhooks", tags=["webhooks"])


def _unknown(name: str) -> NoReturn:
    raise NotFound(f"unknown webhook {name!r}", code="unknown_webhook")


@router.post("/{name}", response_model=None)
async def receive(name: str) -> None:
    _unknown(name)


@router.post("/{tenant}/{name}", response_model=None)
async def receive_for_tenant(tenant: str, name: str) -> None:
    _unknown(name)
