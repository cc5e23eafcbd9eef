"""Snapshots (issue 36 item 3; loomcycle's `/v1/_snapshots`): the runtime's state as one portable,
versioned JSON document, restorable into another treadle of either shape.

    {"schema_version": 1, "producer": "treadle 0.1.0", "created_at": "...", "tenant_id": null,
     "migration": 66, "include_history": false,
     "sections": {"defs": {"version": "1.0", "entries": [...]}, "memory": {...}, "runs": {...}, ...},
     "notes": {"run_credentials_not_copied": [...]},
     "checksum": "sha256:<hex of the sections' canonical JSON>"}

Because a run's transcript is its state, a run travels as its rows (`runs`, `events`, `run_waits`,
...): restored, a parked run stays parked on the same wait keys, a run that was mid-way gets its
next step sent here, a run a pause parked resumes when this runtime runs (the sweeper's
`lost_wakes`). The sections are the tables of store/snapshots.py `TABLES`; a section's rows carry
the column names of the `migration` that wrote them, and a reader restores the columns it shares
with them (older documents restore; a newer one is refused, `snapshot_version_too_new`).

Secrets never travel: credentials are named (`credentials`: tenant, scope, name), their sealed
values and the runs' own credentials stay behind (a warning names what the target must define).

SQL memory (issue 41 item 5): where it is configured, the `sql_memory` section holds each scope's
schema (tables, sequences, constraints, indexes, views, functions, triggers, types) and rows
(store/sqlmemdump.py), read from its own database after the tables (not one transaction with
them). A restore recreates every scope under its role's limits and commits them with the rows,
all or nothing (store/sqlmemrestore.py); a target without SQL memory refuses such a document
(`sql_not_enabled`). Embeddings (memory, Document chunks, sessions) travel as vectors, with the
embedder, model and dimension that made them: restored, not re-embedded; a target without
pgvector restores everything else and names the vector sections it left out.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from treadle.errors import SnapshotNotFound, SnapshotRefused, SnapshotTooLarge
from treadle.store.migrate import available_migrations
from treadle.store.snapshots import LIVE, SECTIONS, TABLES, Restored, SnapshotRow, SnapshotStore, canonical
from treadle.store.sqlmemrestore import SqlScopeSnapshots

SCHEMA_VERSION = 1
SECTION_VERSION = "1.0"
#: the section of SQL-memory scopes (not a table of treadle's database)
SQL_SECTION = "sql_memory"
#: loomcycle's snapshot.DefaultMaxBytes
DEFAULT_MAX_BYTES = 512 * 1024 * 1024


def current_migration() -> int:
    return max(m.version for m in available_migrations())


def new_snapshot_id() -> str:
    """loomcycle's shape: snap_<unix ms>_<8 hex>."""
    return f"snap_{int(time.time() * 1000)}_{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    label: str | None = None
    include_history: bool = False
    include_history_since: datetime | None = None
    max_bytes: int = 0
    #: who wrote the document ("treadle <version>")
    producer: str = "treadle"


async def capture(
    store: SnapshotStore, tenant: str | None, opts: CaptureOptions, sql: SqlScopeSnapshots | None = None
) -> SnapshotRow:
    """Read the state (one tenant's, or every tenant's for None) into a document; SnapshotTooLarge
    past `max_bytes`. Not saved: the caller does (`SnapshotStore.save`). `sql`: SQL memory's
    scopes, where it is configured."""
    run_ids = await store.select_runs(tenant, history=opts.include_history, since=opts.include_history_since)
    sections: dict[str, Any] = {}
    for table in TABLES:
        sections[table.section] = {"version": SECTION_VERSION, "entries": await store.capture(table, tenant, run_ids)}
    notes: dict[str, Any] = {}
    if sql is not None:
        scopes = await sql.capture(tenant)
        sections[SQL_SECTION] = {"version": SECTION_VERSION, "entries": scopes}
        missing = [f"{e['tenant_id']}/{e['scope']}/{e['scope_id'] or '-'}: {n}"
                   for e in scopes for n in e["not_carried"]]
        if missing:
            notes["sql_memory_not_carried"] = missing
    with_credentials = await store.runs_with_credentials(run_ids)
    created = datetime.now(UTC)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "producer": opts.producer,
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "tenant_id": tenant,
        "migration": current_migration(),
        "include_history": opts.include_history,
        "sections": sections,
        "notes": {"run_credentials_not_copied": with_credentials, **notes},
        "checksum": checksum(sections),
    }
    size = len(canonical(doc))
    limit = opts.max_bytes or DEFAULT_MAX_BYTES
    if size > limit:
        raise SnapshotTooLarge(f"snapshot is {size} bytes, over max_bytes {limit}")
    return SnapshotRow(new_snapshot_id(), tenant, opts.label, SCHEMA_VERSION, size, created, doc)


def checksum(sections: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(sections)).hexdigest()


@dataclass(frozen=True, slots=True)
class RestoreResult:
    restored: dict[str, int]
    runs_restored: dict[str, int]  # by status
    warnings: list[str]

    def wire(self, resumed: int) -> dict[str, Any]:
        """loomcycle's RestoreResult fields where treadle has them, and treadle's `restored` map;
        `resumed`: the runs set going here (mid-way ones sent, paused ones woken)."""
        r = self.restored
        out: dict[str, Any] = {
            "agent_defs_restored": r.get("defs", 0),
            "agent_def_active_restored": r.get("def_active", 0),
            "memory_restored": r.get("memory", 0),
            "channel_messages_restored": r.get("channel_messages", 0),
            "channel_cursors_restored": r.get("channel_cursors", 0),
            "evaluations_restored": r.get("evaluations", 0),
            "paused_runs_restored": self.runs_restored.get("waiting", 0),
            "paused_runs_resumed": resumed,
            "synthesized_sessions": 0,
            "transcript_events_restored": r.get("events", 0),
            "interaction_history_restored": sum(n for s, n in self.runs_restored.items() if s not in LIVE),
            "restored": r,
        }
        if self.warnings:
            out["warnings"] = self.warnings
        return out


def check(doc: Any, tenant: str | None) -> dict[str, list[dict[str, Any]]]:
    """The document's sections' rows, once it is known to be one this treadle restores (and, for
    a tenant's caller, of that tenant only). SnapshotRefused otherwise, by name."""
    if not isinstance(doc, dict) or not isinstance(doc.get("sections"), dict):
        raise SnapshotRefused("not a treadle snapshot: no sections object", code="snapshot_invalid")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise SnapshotRefused("schema_version: must be a positive integer", code="snapshot_invalid")
    if version > SCHEMA_VERSION or int(doc.get("migration") or 0) > current_migration():
        raise SnapshotRefused(
            f"snapshot (schema {version}, migration {doc.get('migration')}) is newer than this "
            f"treadle (schema {SCHEMA_VERSION}, migration {current_migration()}): upgrade first",
            code="snapshot_version_too_new",
        )
    sections: dict[str, Any] = doc["sections"]
    if doc.get("checksum") and checksum(sections) != doc["checksum"]:
        raise SnapshotRefused(
            "snapshot checksum mismatch: the document was altered or cut", code="snapshot_checksum_mismatch"
        )
    rows: dict[str, list[dict[str, Any]]] = {}
    for name, section in sections.items():
        if name not in SECTIONS and name != SQL_SECTION:
            raise SnapshotRefused(f"unknown section {name!r}", code="snapshot_version_unknown")
        if not isinstance(section, dict) or not isinstance(section.get("entries"), list):
            raise SnapshotRefused(f"section {name!r}: entries must be a list", code="snapshot_invalid")
        major = str(section.get("version", "")).split(".", 1)[0]
        if major != SECTION_VERSION.split(".", 1)[0]:
            code = "snapshot_version_too_new" if major.isdigit() and int(major) > 1 else "snapshot_version_unknown"
            raise SnapshotRefused(
                f"section {name!r} version {section.get('version')!r}; this treadle reads {SECTION_VERSION}", code=code
            )
        entries = section["entries"]
        if not all(isinstance(e, dict) for e in entries):
            raise SnapshotRefused(f"section {name!r}: every entry must be an object", code="snapshot_invalid")
        if tenant is not None and any(e.get("tenant_id") != tenant for e in entries):
            raise SnapshotRefused(
                f"section {name!r} holds rows of another tenant: a tenant restores its own only",
                code="snapshot_other_tenant",
            )
        rows[name] = entries
    return rows


def without_history(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The rows without the ended runs no live run needs (a restore's `include_history: false`):
    a run not ended keeps its session's and its tree's runs."""
    runs = rows.get("runs") or []
    live = [r for r in runs if r.get("status") in LIVE]
    sessions = {r.get("session_id") for r in live} - {None}
    roots = {r.get("root_run_id") or r.get("id") for r in live}
    keep = {
        r["id"]
        for r in runs
        if r.get("status") in LIVE or r.get("session_id") in sessions or (r.get("root_run_id") or r.get("id")) in roots
    }
    out = dict(rows)
    for table in TABLES:
        if table.rows == "runs" and table.section in out:
            field = "id" if table.table == "runs" else "run_id"
            out[table.section] = [r for r in out[table.section] if r.get(field) in keep]
    if SQL_SECTION in out:  # a run's scratch database goes with its run
        out[SQL_SECTION] = [e for e in out[SQL_SECTION] if e.get("scope") != "run" or e.get("scope_id") in keep]
    return out


async def restore(
    store: SnapshotStore, doc: Any, tenant: str | None, *, include_history: bool, sql: SqlScopeSnapshots | None = None
) -> tuple[RestoreResult, Restored]:
    """Write a document's rows here — and its SQL-memory scopes through `sql`, all committed
    together or none (store/sqlmemrestore.py). The caller sends the mid-way runs' steps
    (`Restored.to_send`) and wakes what is due."""
    rows = check(doc, tenant)
    if not include_history:
        rows = without_history(rows)
    scopes = rows.pop(SQL_SECTION, [])
    warnings = _warnings(doc, rows)
    if not scopes:
        done = await store.restore(rows)
    elif sql is None:
        raise SnapshotRefused(
            f"the snapshot holds {len(scopes)} SQL memory scope(s) and SQL memory is not enabled here"
            " (configure memory.sql)", code="sql_not_enabled")
    else:
        async with sql.restoring(scopes) as staged:
            done = await store.restore(rows, marker=staged.restore_id)
        await store.forget_restore(staged.restore_id)
        done.written[SQL_SECTION] = staged.restored
        warnings += staged.warnings
    warnings += [f"{s}: not restored — this database has no pgvector (the rows the vectors belong to are)"
                 for s in done.skipped]
    result = RestoreResult(done.written, done.runs_by_status, warnings)
    return result, done


def _warnings(doc: dict[str, Any], rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    out: list[str] = []
    creds = [
        f"{c.get('tenant_id')}/{c.get('scope')}/{c.get('scope_id') or '-'}/{c.get('name')}"
        for c in rows.get("credentials") or []
    ]
    if creds:
        out.append(
            "credentials are named, never copied: define these here (POST /v1/_credentialdef) — " + ", ".join(creds)
        )
    notes: dict[str, Any] = doc["notes"] if isinstance(doc.get("notes"), dict) else {}
    lost = [r for r in notes.get("run_credentials_not_copied") or [] if isinstance(r, str)]
    if lost:
        out.append(
            "these runs had per-run credentials, never copied: their MCP tools run without them — " + ", ".join(lost)
        )
    return out


async def get(store: SnapshotStore, tenant: str | None, snapshot_id: str) -> SnapshotRow:
    row = await store.get(tenant, snapshot_id)
    if row is None:
        raise SnapshotNotFound(f"no snapshot with id {snapshot_id}")
    return row
