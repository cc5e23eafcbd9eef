"""Snapshots (issue 36 item 3; loomcycle's `/v1/_snapshots` routes, fields and codes): capture the
runtime's state into a portable, versioned JSON document (treadle/portable/snapshots.py), list,
get, export, delete, and restore one — stored here, or exported from another treadle of either
shape (`json`). The operator's snapshots hold every tenant; a tenant admin's, that tenant only
(scope `substrate:admin`; a tenant admin sees and restores its own tenant's only)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from treadle import __version__
from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.tenantscope import focused_tenant
from treadle.errors import BadRequest
from treadle.portable.snapshots import CaptureOptions, capture, get
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.snapshots import SnapshotRow, canonical
from treadle.wire import SnapshotCreate, SnapshotFull, SnapshotList, SnapshotMeta, SnapshotRestore, SnapshotRestored

router = APIRouter(prefix="/v1", tags=["operations"], route_class=LazyAPIRoute)


def caller_tenant(who: Principal) -> str | None:
    """None: the operator's whole runtime; else the tenant admin's own tenant."""
    return focused_tenant(who, None, doing="snapshots")


def parse_since(value: str | None) -> datetime | None:
    """An RFC 3339 time (`include_history_since`, MCP `since_ts`); 400 `invalid_since`."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest("include_history_since must be RFC3339", code="invalid_since") from None


async def capture_and_save(
    rt: Runtime, who: Principal, *, label: str | None, include_history: bool, since: datetime | None, max_bytes: int
) -> SnapshotRow:
    """Capture the caller's snapshot (portable/snapshots.py) and keep it (the route and the MCP tool)."""
    opts = CaptureOptions(label, include_history, since, max_bytes, f"treadle {__version__}")
    row = await capture(rt.snapshots, caller_tenant(who), opts, rt.sql_snapshots)
    await rt.snapshots.save(row)
    return row


def _meta(row: SnapshotRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": row.id,
        "created_at": snapshot_time(row.created_at),
        "schema_version": row.schema_version,
        "byte_size": row.byte_size,
    }
    if row.label:
        out["label"] = row.label
    if row.tenant_id is not None:
        out["tenant_id"] = row.tenant_id
    return out


def snapshot_time(at: datetime) -> str:
    """loomcycle's 2006-01-02T15:04:05.000Z."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


@router.post(
    "/_snapshots",
    status_code=201,
    response_model=SnapshotMeta,
    response_model_exclude_none=True,
    responses=errors(*BODY),
)
async def create_snapshot(rt: Rt, who: Who, body: SnapshotCreate | None = None) -> dict[str, Any]:
    """Capture a snapshot. 413 `snapshot_too_large` past `max_bytes`; 400 `invalid_since`."""
    body = body or SnapshotCreate()
    row = await capture_and_save(
        rt,
        who,
        label=body.label,
        include_history=body.include_history,
        since=parse_since(body.include_history_since),
        max_bytes=body.max_bytes,
    )
    return _meta(row)


@router.get("/_snapshots", response_model=SnapshotList, response_model_exclude_none=True, responses=errors(*AUTHED))
async def list_snapshots(
    rt: Rt, who: Who, label_contains: str = "", limit: str | None = Query(default=None)
) -> dict[str, Any]:
    """Newest first, metadata only. `limit` 0 or absent: 200. 400 `invalid_limit`."""
    n = 200
    if limit is not None:
        if not limit.isdigit():
            raise BadRequest("limit must be a non-negative integer", code="invalid_limit")
        n = int(limit) or 200
    rows = await rt.snapshots.list(caller_tenant(who), label_contains, n)
    return {"entries": [_meta(r) for r in rows]}


@router.get(
    "/_snapshots/{snapshot_id}",
    response_model=SnapshotFull,
    response_model_exclude_none=True,
    responses=errors(*AUTHED, 404),
)
async def get_snapshot(snapshot_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    """The metadata and the whole document. 404 `snapshot_not_found`."""
    row = await get(rt.snapshots, caller_tenant(who), snapshot_id)
    return {**_meta(row), "json_content": row.json_content}


@router.get(
    "/_snapshots/{snapshot_id}/export", responses={200: {"content": {"application/json": {}}}, **errors(*AUTHED, 404)}
)
async def export_snapshot(snapshot_id: str, rt: Rt, who: Who) -> Response:
    """The document alone, as a download (`Content-Disposition: attachment; filename="<id>.json"`)."""
    row = await get(rt.snapshots, caller_tenant(who), snapshot_id)
    name = "".join("_" if c in '"\r\n' else c for c in row.id)
    return Response(
        canonical(row.json_content),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}.json"'},
    )


@router.delete("/_snapshots/{snapshot_id}", status_code=204, responses=errors(*AUTHED))
async def delete_snapshot(snapshot_id: str, rt: Rt, who: Who) -> Response:
    """Idempotent: 204 whether or not it existed (loomcycle's)."""
    await rt.snapshots.delete(caller_tenant(who), snapshot_id)
    return Response(status_code=204)


@router.post(
    "/_snapshots/{snapshot_id}/restore",
    response_model=SnapshotRestored,
    response_model_exclude_none=True,
    responses=errors(*BODY, 404),
)
async def restore_snapshot(snapshot_id: str, rt: Rt, who: Who, body: SnapshotRestore | None = None) -> dict[str, Any]:
    """Restore the stored snapshot — or `json`, a document exported elsewhere (then `{id}` is not
    looked up). Rows whose keys exist here are kept and not counted; restored runs go on here.
    422 `snapshot_version_too_new` / `snapshot_version_unknown` / `snapshot_checksum_mismatch` /
    `snapshot_invalid` / `snapshot_other_tenant`; 404 `snapshot_not_found`."""
    body = body or SnapshotRestore()
    tenant = caller_tenant(who)
    doc = body.json_doc if body.json_doc is not None else (await get(rt.snapshots, tenant, snapshot_id)).json_content
    return await rt.restore_snapshot(doc, tenant, include_history=body.include_history)
