"""POST /v1/_credentialdef: tenant credentials (issue 42 item 3) — loomcycle's CredentialDef ops
(`create`, `get`, `list`, `delete`, plus `rotate`) over HTTP. A value goes in with `create` and
never comes back out: `get`/`list` answer metadata only. The caller's tenant only (the principal's;
scope `substrate:tenant`). `scope: user` defaults `scope_id` to the caller's subject; `agent`
needs the agent's name; `tenant` takes none (400). Storage and sealing: governance/credentials.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from treadle.api.deps import Rt, Who
from treadle.api.errors import BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.errors import BadRequest, NotFound
from treadle.governance.credentials import TenantCredentials
from treadle.security.principal import Principal
from treadle.wire.governance import CredentialOp, CredentialResult

router = APIRouter(prefix="/v1", tags=["governance"], route_class=LazyAPIRoute)


def _scope_id(body: CredentialOp, who: Principal) -> str:
    if body.scope == "tenant":
        if body.scope_id:
            raise BadRequest("scope_id must be empty for scope=tenant")
        return ""
    if body.scope == "user":
        return body.scope_id or who.subject
    if not body.scope_id:
        raise BadRequest("scope_id (the agent name) is required for scope=agent")
    return body.scope_id


def _need(body: CredentialOp, *fields: str) -> None:
    missing = [f for f in fields if getattr(body, f) is None]
    if missing:
        raise BadRequest(f"op {body.op} needs {', '.join(missing)}")


@router.post("/_credentialdef", response_model=CredentialResult, response_model_exclude_unset=True,
             responses=errors(*BODY, 404))
async def credential_op(body: CredentialOp, rt: Rt, who: Who) -> dict[str, Any]:
    """One CredentialDef op in the caller's tenant (a value is never answered back)."""
    store = TenantCredentials(rt.pool)
    tenant = who.tenant_id
    if body.op != "create" and body.value is not None:
        raise BadRequest(f"op {body.op} takes no value")
    if body.op == "rotate":
        return {"op": "rotate", "rotated": await store.rotate(tenant)}
    if body.op == "list":
        scope_id = _scope_id(body, who) if body.scope is not None else None
        rows = await store.list(tenant, body.scope, scope_id if body.scope_id is not None or body.scope else None)
        return {"op": "list", "credentials": [m.to_json() for m in rows]}
    _need(body, "scope", "name")
    assert body.scope is not None and body.name is not None
    scope_id = _scope_id(body, who)
    if body.op == "create":
        _need(body, "value")
        assert body.value is not None
        meta = await store.create(tenant, body.scope, scope_id, body.name, body.value, updated_by=who.subject)
        return {"op": "create", "credential": meta.to_json()}
    if body.op == "get":
        found = await store.list(tenant, body.scope, scope_id, body.name)
        if not found:
            raise NotFound(f"no credential {body.name!r} in scope {body.scope} {scope_id}".rstrip())
        return {"op": "get", "credential": found[0].to_json()}
    if not await store.delete(tenant, body.scope, scope_id, body.name):
        raise NotFound(f"no credential {body.name!r} in scope {body.scope} {scope_id}".rstrip())
    return {"op": "delete", "deleted": True}
