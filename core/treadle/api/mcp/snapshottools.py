"""loomcycle's six snapshot meta-tools (`internal/api/mcp/tools.go`), under its names, argument
schemas and answer shapes: `create_snapshot {include_history, since_ts, description, max_bytes}` →
a descriptor, `list_snapshots` → `{snapshots}`, `get_snapshot {snapshot_id}` → the envelope row,
`export_snapshot {snapshot_id}` → `{snapshot_id, size_bytes, raw_json}`, `restore_snapshot
{snapshot_id | raw_json, include_history}` → the restore counters (as POST .../restore), and
`delete_snapshot {snapshot_id}` → `{deleted: true, snapshot_id}`. Scope `substrate:admin` (the
default of a tool TOOL_SCOPES does not name); the operator's act on the whole runtime, a tenant
admin's on its tenant (api/snapshots.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from treadle.api.mcp.registry import _Args, tool
from treadle.api.snapshots import caller_tenant, capture_and_save, parse_since, snapshot_time
from treadle.portable.snapshots import SCHEMA_VERSION, get
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.snapshots import SnapshotRow


class CreateSnapshotArgs(_Args):
    include_history: bool = False
    since_ts: str | None = None
    description: str | None = Field(default=None, max_length=500)
    max_bytes: int = Field(default=0, ge=0)


class ListSnapshotsArgs(_Args):
    pass


class SnapshotIdArgs(_Args):
    snapshot_id: str = Field(min_length=1, max_length=200)


class RestoreSnapshotArgs(_Args):
    snapshot_id: str | None = Field(default=None, min_length=1, max_length=200)
    raw_json: dict[str, Any] | None = None
    include_history: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> RestoreSnapshotArgs:
        if (self.snapshot_id is None) == (self.raw_json is None):
            raise ValueError("exactly one of snapshot_id or raw_json is required")
        return self


def _descriptor(row: SnapshotRow) -> dict[str, Any]:
    """loomcycle's connector.SnapshotDescriptor."""
    doc = row.json_content or {}
    out: dict[str, Any] = {
        "snapshot_id": row.id,
        "created_at": snapshot_time(row.created_at),
        "size_bytes": row.byte_size,
        "includes_history": bool(doc.get("include_history")),
        "format_version": str(row.schema_version),
    }
    if row.label:
        out["description"] = row.label
    return out


@tool(
    "create_snapshot",
    "Capture the runtime's state into a portable, versioned JSON document (defs, memory, "
    "channels, schedules, sessions, runs with their transcripts and waits; secrets named, never copied). "
    "Returns a descriptor {snapshot_id, created_at, size_bytes, includes_history, format_version}.",
    CreateSnapshotArgs,
)
async def create_snapshot(rt: Runtime, who: Principal, a: CreateSnapshotArgs) -> dict[str, Any]:
    row = await capture_and_save(
        rt,
        who,
        label=a.description,
        include_history=a.include_history,
        since=parse_since(a.since_ts),
        max_bytes=a.max_bytes,
    )
    return _descriptor(row)


@tool(
    "list_snapshots",
    "Snapshots, newest first (at most 200), metadata only: {snapshots: [descriptor]}.",
    ListSnapshotsArgs,
)
async def list_snapshots(rt: Runtime, who: Principal, _a: ListSnapshotsArgs) -> dict[str, Any]:
    rows = await rt.snapshots.list(caller_tenant(who), "", 200)
    return {"snapshots": [{k: v for k, v in _descriptor(r).items() if k != "includes_history"} for r in rows]}


@tool(
    "get_snapshot",
    "The whole snapshot: {snapshot_id, created_at, description?, format_version, size_bytes, "
    "json_content}; snapshot_not_found when none matches.",
    SnapshotIdArgs,
)
async def get_snapshot(rt: Runtime, who: Principal, a: SnapshotIdArgs) -> dict[str, Any]:
    row = await get(rt.snapshots, caller_tenant(who), a.snapshot_id)
    out = {k: v for k, v in _descriptor(row).items() if k != "includes_history"}
    return {**out, "json_content": row.json_content}


@tool(
    "export_snapshot",
    "The snapshot's document for another treadle: {snapshot_id, size_bytes, raw_json} "
    "(raw_json goes into restore_snapshot as is).",
    SnapshotIdArgs,
)
async def export_snapshot(rt: Runtime, who: Principal, a: SnapshotIdArgs) -> dict[str, Any]:
    row = await get(rt.snapshots, caller_tenant(who), a.snapshot_id)
    return {"snapshot_id": row.id, "size_bytes": row.byte_size, "raw_json": row.json_content}


@tool(
    "restore_snapshot",
    "Restore a stored snapshot (snapshot_id) or a document from another treadle "
    "(raw_json): rows whose keys exist are kept (counters are rows written), restored runs go on here. "
    f"Refuses a document newer than this treadle (schema {SCHEMA_VERSION}): snapshot_version_too_new.",
    RestoreSnapshotArgs,
)
async def restore_snapshot(rt: Runtime, who: Principal, a: RestoreSnapshotArgs) -> dict[str, Any]:
    tenant = caller_tenant(who)
    doc = a.raw_json if a.raw_json is not None else (await get(rt.snapshots, tenant, str(a.snapshot_id))).json_content
    return await rt.restore_snapshot(doc, tenant, include_history=a.include_history)


@tool(
    "delete_snapshot",
    "Delete a snapshot; succeeds whether or not it existed: {deleted: true, snapshot_id}.",
    SnapshotIdArgs,
)
async def delete_snapshot(rt: Runtime, who: Principal, a: SnapshotIdArgs) -> dict[str, Any]:
    await rt.snapshots.delete(caller_tenant(who), a.snapshot_id)
    return {"deleted": True, "snapshot_id": a.snapshot_id}
