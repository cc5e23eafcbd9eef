"""loomcycle's embedding maintenance routes (its memory_admin.go, memory_backfill.go; 1.57-1.58):

    GET  /v1/_memory/embed_stats?scope=&tenant=                       per-model counts (substrate:tenant)
    POST /v1/_memory/reembed?scope=&scope_id=&dry_run=&limit=&tenant=  re-embed what another model
                                                                       embedded (substrate:admin)
    POST /v1/_memory/backfill_embeddings?scope=&scope_id=&prefix=&limit=&dry_run=&tenant=
                                                                       embed what has no embedding (substrate:admin)

`dry_run` is true unless `false` or `0` (a bare POST previews); `limit` defaults to 1000 (reembed,
at most 10000) and 200 (backfill, at most 1000), an unusable value keeping the default, as in
loomcycle. `scope_id` is required but for the tenant scope (ignored there). An operator's token
names the tenant (`?tenant=`; `?tenant=` empty is refused by treadle's tenant rules) — the sweeps
refuse one that names none (400 `tenant_required`); a tenant's token acts on its own tenant
(another → 403). 400 `invalid_scope`, `missing_scope_id`; 503 `vector_unsupported` (no pgvector),
`embedder_not_configured`. The sweeps: substrate/memembed.py.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.tenantscope import focused_tenant
from treadle.embeddings.base import Embedder
from treadle.errors import BadRequest, EmbeddingMaintenanceUnavailable, VectorUnavailable
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.memembed import MemoryEmbeddings
from treadle.substrate import memembed
from treadle.wire.memory import EmbedStats, EmbedSweep

router = APIRouter(prefix="/v1/_memory", tags=["memory"], route_class=LazyAPIRoute)
SCOPES = ("agent", "user", "tenant")
Str = Annotated[str | None, Query(max_length=512)]


def _scope(scope: str | None) -> str:
    if scope not in SCOPES:
        raise BadRequest("scope must be one of: agent, user, tenant", code="invalid_scope")
    return scope


def _target(who: Principal, scope: str | None, scope_id: str | None, tenant: str | None) -> memembed.Target:
    s = _scope(scope)
    if s != "tenant" and not (scope_id or "").strip():
        raise BadRequest("scope_id is required", code="missing_scope_id")
    if tenant is None and who.is_operator and not who.open_mode:
        raise BadRequest("an operator token must name the tenant: memory rows are keyed on it. Pass ?tenant=<id>.",
                         code="tenant_required")
    return memembed.Target(focused_tenant(who, tenant, doing="maintains") or who.tenant_id, s,
                           "" if s == "tenant" else str(scope_id))


def _dry_run(v: str | None) -> bool:
    return v is None or v == "" or v not in ("false", "0")


def _limit(v: str | None, default: int, top: int, *, clamp: bool) -> int:
    """loomcycle's: reembed keeps its default for a value out of 1..10000, backfill clamps to 1000."""
    try:
        n = int(v) if v else 0
    except ValueError:
        n = 0
    if n <= 0:
        return default
    return min(n, top) if clamp else (n if n <= top else default)


async def _ready(rt: Runtime) -> tuple[MemoryEmbeddings, Embedder]:
    store = MemoryEmbeddings(rt.memory)
    if not await rt.memory.vectors_available():
        raise EmbeddingMaintenanceUnavailable("this server has no vector support (pgvector not installed)")
    embedder = rt.substrate.memory.embedder
    if embedder is None:
        raise EmbeddingMaintenanceUnavailable("no embedder configured; set memory.embedder in treadle.yaml",
                                              code="embedder_not_configured")
    return store, embedder


@router.get("/embed_stats", response_model=EmbedStats, responses=errors(*AUTHED, 400, 503))
async def embed_stats(rt: Rt, who: Who, scope: Str = None, tenant: Str = None) -> dict[str, Any]:
    s = _scope(scope)
    t = focused_tenant(who, tenant, doing="reads") or who.tenant_id
    try:
        models = await MemoryEmbeddings(rt.memory).stats(t, s)
    except VectorUnavailable as exc:
        raise EmbeddingMaintenanceUnavailable(exc.message) from None
    notes = ["counts aggregate every scope_id in this (tenant, scope) partition — there is no per-subject "
             "filter, so this is not one user's total."]
    if not models:
        notes.append(f"zero rows for tenant {t!r} — check that this is the tenant you meant before concluding the "
                     "scope is unembedded. Pass ?tenant=<id> to measure another one (operator only).")
    return {"scope": s, "tenant": t, "models": models,
            "total_embedding_bytes": sum(m["row_count"] * m["dimension"] * 4 for m in models), "notes": notes}


@router.post("/reembed", response_model=EmbedSweep, responses=errors(*AUTHED, 400, 502, 503))
async def reembed(rt: Rt, who: Who, scope: Str = None, scope_id: Str = None, dry_run: Str = None,
                  limit: Str = None, tenant: Str = None) -> dict[str, Any]:
    target = _target(who, scope, scope_id, tenant)
    store, embedder = await _ready(rt)
    return await memembed.reembed(store, embedder, target, dry_run=_dry_run(dry_run),
                                  limit=_limit(limit, 1000, 10_000, clamp=False))


@router.post("/backfill_embeddings", response_model=EmbedSweep, responses=errors(*AUTHED, 400, 502, 503))
async def backfill_embeddings(rt: Rt, who: Who, scope: Str = None, scope_id: Str = None, prefix: Str = None,
                              limit: Str = None, dry_run: Str = None, tenant: Str = None) -> dict[str, Any]:
    target = _target(who, scope, scope_id, tenant)
    store, embedder = await _ready(rt)
    return await memembed.backfill(store, embedder, target, prefix=prefix or "", dry_run=_dry_run(dry_run),
                                   limit=_limit(limit, 200, 1000, clamp=True))
