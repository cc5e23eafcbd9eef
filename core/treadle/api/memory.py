"""Memory over HTTP (bearer; tenant from the principal). The tenant scope's scope_id is `_`.

    GET    /v1/_memory/scopes/{scope}/{scope_id}/keys?prefix=&limit=    the live entries
    GET    /v1/_memory/scopes/{scope}/{scope_id}/keys/{key}             one entry (404 if absent)
    PUT    /v1/_memory/scopes/{scope}/{scope_id}/keys/{key}             {"value", "embed"?, "embed_text"?,
                                                                         "ttl_seconds"?}
    DELETE /v1/_memory/scopes/{scope}/{scope_id}/keys/{key}
    POST   /v1/_memory/search        {"scope", "scope_id", "query", "k"?, "min_score"?,
                                      "recency_weight"?, "recency_half_life_hours"?, "prefix"?}

Errors: 413 value_too_large | memory_quota_exceeded, 501 embedder_not_configured |
pgvector_not_installed, 502 embedder_*.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.domain.ids import is_identifier
from treadle.errors import BadRequest, NotFound, ValidationFailed
from treadle.runtime import Runtime
from treadle.wire import (
    MemoryDeleted,
    MemoryEntries,
    MemoryEntry,
    MemoryPut,
    MemoryScopes,
    MemorySearch,
    MemorySearchResult,
    MemoryWritten,
)
from treadle.wire.memory import MemoryScope as Scope

router = APIRouter(prefix="/v1/_memory", tags=["memory"], route_class=LazyAPIRoute)
__all__ = ["MemoryPut", "MemorySearch", "Scope", "router"]
TENANT_SCOPE_ID = "_"
MAX_KEY_LEN = 512


def _scope_id(scope: str, scope_id: str) -> str:
    if scope == "tenant":
        if scope_id != TENANT_SCOPE_ID:
            raise ValidationFailed(f"the tenant scope has one scope_id, {TENANT_SCOPE_ID!r}")
        return ""
    if not is_identifier(scope_id):
        raise ValidationFailed("scope_id (an agent name or user id) must match [A-Za-z0-9_-]{1,128}")
    return scope_id


def _key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LEN:
        raise ValidationFailed(f"key must be 1..{MAX_KEY_LEN} characters")
    return key


def _quota(rt: Runtime, scope: str, scope_id: str) -> int | None:
    agent = rt.config.agents.get(scope_id) if scope == "agent" else None
    return agent.memory_quota_bytes if agent is not None else None


@router.get("/scopes", response_model=MemoryScopes, response_model_exclude_unset=True, responses=errors(*AUTHED))
async def list_scopes(who: Who) -> dict[str, Any]:
    """loomcycle's list of memory scope kinds."""
    return {"scopes": [
        {"name": "agent", "description": "shared by every run of one agent (scope_id: the agent name)"},
        {"name": "user", "description": "one user's memory across agents (scope_id: the user id)"},
        {"name": "tenant", "description": f"shared by the whole tenant (scope_id: {TENANT_SCOPE_ID!r})"},
    ]}


@router.get("/scopes/{scope}/{scope_id}/keys", response_model=MemoryEntries, response_model_exclude_unset=True,
            responses=errors(*AUTHED))
async def list_keys(
    scope: Scope, scope_id: str, rt: Rt, who: Who,
    prefix: Annotated[str, Query(max_length=MAX_KEY_LEN)] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    sid = _scope_id(scope, scope_id)
    entries = await rt.memory.list(who.tenant_id, scope, sid, prefix, limit)
    return {"scope": scope, "scope_id": scope_id, "entries": entries, "count": len(entries)}


@router.get("/scopes/{scope}/{scope_id}/keys/{key:path}", response_model=MemoryEntry,
            response_model_exclude_unset=True, responses=errors(*AUTHED, 404))
async def get_key(scope: Scope, scope_id: str, key: str, rt: Rt, who: Who) -> dict[str, Any]:
    entry = await rt.memory.entry(who.tenant_id, scope, _scope_id(scope, scope_id), _key(key))
    if entry is None:
        raise NotFound(f"memory key {key!r} not found in {scope}/{scope_id}")
    return {"scope": scope, "scope_id": scope_id, **entry}


@router.put("/scopes/{scope}/{scope_id}/keys/{key:path}", response_model=MemoryWritten,
            response_model_exclude_unset=True,
            responses=errors(*BODY, 501, 502))
async def put_key(scope: Scope, scope_id: str, key: str, body: MemoryPut, rt: Rt, who: Who) -> dict[str, Any]:
    sid = _scope_id(scope, scope_id)
    out = await rt.substrate.memory.set(
        who.tenant_id, scope, sid, _key(key), body.value, body.ttl_seconds, embed=body.embed,
        embed_text=body.embed_text, quota_bytes=_quota(rt, scope, sid),
    )
    return {**out, "scope_id": scope_id}


@router.delete("/scopes/{scope}/{scope_id}/keys/{key:path}", response_model=MemoryDeleted,
               response_model_exclude_unset=True,
               responses=errors(*AUTHED, 404))
async def delete_key(scope: Scope, scope_id: str, key: str, rt: Rt, who: Who) -> dict[str, Any]:
    if not await rt.memory.delete(who.tenant_id, scope, _scope_id(scope, scope_id), _key(key)):
        raise NotFound(f"memory key {key!r} not found in {scope}/{scope_id}")
    return {"deleted": True, "scope": scope, "scope_id": scope_id, "key": key}


@router.post("/search", response_model=MemorySearchResult, response_model_exclude_unset=True,
             responses=errors(*BODY, 400, 501, 502))
async def search(body: MemorySearch, rt: Rt, who: Who) -> dict[str, Any]:
    if body.top_k is not None and body.k is not None and body.top_k != body.k:
        raise ValidationFailed("top_k and k name the same limit; give one")
    scope_id = body.scope_id or (TENANT_SCOPE_ID if body.scope == "tenant" else "")
    sid = _scope_id(body.scope, scope_id)
    try:
        out = await rt.substrate.memory.search(
            who.tenant_id, body.scope, sid, body.query, k=body.top_k or body.k, min_score=body.min_score,
            recency_weight=body.recency_weight, half_life_hours=body.recency_half_life_hours, prefix=body.prefix,
            include_values=body.include_values, rank=body.rank, dedup=body.dedup, sources=body.sources,
        )
    except ValidationFailed as exc:
        if exc.code == "invalid_sources":  # loomcycle's 400 (its clients raise InvalidArgumentError)
            raise BadRequest(exc.message, code=exc.code) from None
        raise
    # loomcycle's names (additive): `entries` (= results); the query's embedding size and `truncated` are in out
    return {**out, "scope_id": scope_id, "entries": out.get("results") or []}
