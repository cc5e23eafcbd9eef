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

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from treadle.api.deps import get_principal, get_runtime
from treadle.domain.ids import is_identifier
from treadle.errors import NotFound, ValidationFailed
from treadle.runtime import Runtime
from treadle.security.principal import Principal

router = APIRouter(prefix="/v1/_memory", tags=["memory"])
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]
Scope = Literal["agent", "user", "tenant"]
TENANT_SCOPE_ID = "_"
MAX_KEY_LEN = 512


class MemoryPut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: Any
    embed: bool = False
    embed_text: str | None = None
    ttl_seconds: float | None = Field(default=None, gt=0)


class MemorySearch(BaseModel):
    """loomcycle's MemorySearchRequest (`top_k`; scope_id may be omitted for the tenant scope)
    with treadle's knobs; `k` is treadle's earlier name of `top_k`."""

    model_config = ConfigDict(extra="forbid")
    scope: Scope
    scope_id: str = ""
    query: str = Field(min_length=1)
    top_k: int | None = Field(default=None, ge=1, le=50)
    k: int | None = Field(default=None, ge=1)
    #: loomcycle's ranking, dedup and source filters: treadle has none of them (refused when given)
    rank: dict[str, Any] | None = None
    dedup: dict[str, Any] | None = None
    sources: list[str] | None = None
    min_score: float | None = None
    recency_weight: float = Field(default=0.0, ge=0, le=1)
    recency_half_life_hours: float | None = Field(default=None, gt=0)
    prefix: str = ""
    include_values: bool = True


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


@router.get("/scopes")
async def list_scopes(who: Who) -> dict[str, Any]:
    """loomcycle's list of memory scope kinds."""
    return {"scopes": [
        {"name": "agent", "description": "shared by every run of one agent (scope_id: the agent name)"},
        {"name": "user", "description": "one user's memory across agents (scope_id: the user id)"},
        {"name": "tenant", "description": f"shared by the whole tenant (scope_id: {TENANT_SCOPE_ID!r})"},
    ]}


@router.get("/scopes/{scope}/{scope_id}/keys")
async def list_keys(
    scope: Scope, scope_id: str, rt: Rt, who: Who,
    prefix: Annotated[str, Query(max_length=MAX_KEY_LEN)] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    sid = _scope_id(scope, scope_id)
    entries = await rt.memory.list(who.tenant_id, scope, sid, prefix, limit)
    return {"scope": scope, "scope_id": scope_id, "entries": entries, "count": len(entries)}


@router.get("/scopes/{scope}/{scope_id}/keys/{key:path}")
async def get_key(scope: Scope, scope_id: str, key: str, rt: Rt, who: Who) -> dict[str, Any]:
    entry = await rt.memory.entry(who.tenant_id, scope, _scope_id(scope, scope_id), _key(key))
    if entry is None:
        raise NotFound(f"memory key {key!r} not found in {scope}/{scope_id}")
    return {"scope": scope, "scope_id": scope_id, **entry}


@router.put("/scopes/{scope}/{scope_id}/keys/{key:path}")
async def put_key(scope: Scope, scope_id: str, key: str, body: MemoryPut, rt: Rt, who: Who) -> dict[str, Any]:
    sid = _scope_id(scope, scope_id)
    out = await rt.substrate.memory.set(
        who.tenant_id, scope, sid, _key(key), body.value, body.ttl_seconds, embed=body.embed,
        embed_text=body.embed_text, quota_bytes=_quota(rt, scope, sid),
    )
    return {**out, "scope_id": scope_id}


@router.delete("/scopes/{scope}/{scope_id}/keys/{key:path}")
async def delete_key(scope: Scope, scope_id: str, key: str, rt: Rt, who: Who) -> dict[str, Any]:
    if not await rt.memory.delete(who.tenant_id, scope, _scope_id(scope, scope_id), _key(key)):
        raise NotFound(f"memory key {key!r} not found in {scope}/{scope_id}")
    return {"deleted": True, "scope": scope, "scope_id": scope_id, "key": key}


@router.post("/search")
async def search(body: MemorySearch, rt: Rt, who: Who) -> dict[str, Any]:
    for name in ("rank", "dedup", "sources"):
        if getattr(body, name) is not None:
            raise ValidationFailed(f"{name}: not supported by treadle's memory search; omit it",
                                   code="unsupported_field")
    if body.top_k is not None and body.k is not None and body.top_k != body.k:
        raise ValidationFailed("top_k and k name the same limit; give one")
    scope_id = body.scope_id or (TENANT_SCOPE_ID if body.scope == "tenant" else "")
    sid = _scope_id(body.scope, scope_id)
    out = await rt.substrate.memory.search(
        who.tenant_id, body.scope, sid, body.query, k=body.top_k or body.k, min_score=body.min_score,
        recency_weight=body.recency_weight, half_life_hours=body.recency_half_life_hours, prefix=body.prefix,
        include_values=body.include_values,
    )
    # loomcycle's names (additive): `entries` (= results), the query's embedding size, `truncated`
    hits = out.get("results") or []
    dim = getattr(rt.substrate.memory.embedder, "dimension", None) if rt.substrate.memory.embedder else None
    return {**out, "scope_id": scope_id, "entries": hits, "truncated": False,
            "query_embedding_dim": dim if isinstance(dim, int) else 0}
