"""Helpers for the tenancy tests: the API in-process with a given legacy token, and minting
operator tokens through it."""

from __future__ import annotations

from typing import Any

import httpx

from treadle.api.app import create_app
from treadle.runtime import Runtime
from treadle.testing import ACCEPT_JSON

AGENTS: dict[str, Any] = {
    "echo": {"model": "echo"},
    "asker": {"model": "script", "tools": ["Interruption"], "mock": {"script": [
        {"tool": "Interruption", "input": {"op": "ask", "question": "ok?", "options": ["yes", "no"]}},
        {"text": "asked"},
    ]}},
}


def api(rt: Runtime, *, legacy: str | None = None, public_docs: bool = False) -> httpx.AsyncClient:
    app = create_app(auth_token=legacy, max_request_bytes=1 << 20, public_docs=public_docs)
    app.state.runtime = rt
    return httpx.AsyncClient(headers=ACCEPT_JSON, transport=httpx.ASGITransport(app=app), base_url="http://treadle.test")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def mint(c: httpx.AsyncClient, auth: dict[str, str], name: str, *, tenant: str | None = None,
               scopes: list[str] | None = None, subject: str | None = None) -> str:
    op: dict[str, Any] = {"op": "create", "name": name, "scopes": scopes or ["substrate:admin"]}
    if tenant:
        op["tenant_id"] = tenant
    if subject:
        op["subject"] = subject
    r = await c.post("/v1/_operatortokendef", json=op, headers=auth)
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    assert isinstance(token, str) and token.startswith("trd_")
    return token


async def tenant_user(c: httpx.AsyncClient, operator: dict[str, str], tenant: str, subject: str) -> dict[str, str]:
    """The bearer header of user `subject` of `tenant` (minted by `operator`): runs agents and uses
    the tenant's substrate."""
    return bearer(await mint(c, operator, f"{tenant}-{subject}", tenant=tenant, subject=subject,
                             scopes=["substrate:tenant", "runs:create", "runs:read"]))
