"""POST /v1/_erasure: erase one subject (a user id) of the caller's tenant everywhere treadle keeps
it (store/erasure.py), with a receipt — loomcycle's route and body (`subject`, `dry_run` default
true, `confirm` = the subject for a real erasure). The subject's live runs are cancelled first; its
volume files (those its runs wrote, its runs' ephemeral volumes, its rows in the retention archive:
host directory or S3 objects) are deleted before the rows go and listed in the receipt's `files`;
its SQL-memory schemas are dropped after the commit. A tenant's caller (scope `substrate:tenant`) erases
in its own tenant; the operator may name one (`?tenant=`)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter

from treadle.api.deps import Rt, Who
from treadle.api.errors import BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.tenantscope import focused_tenant
from treadle.errors import BadRequest
from treadle.store.erasure import SubjectErasure
from treadle.wire.governance import ErasureReceipt, ErasureRequest

router = APIRouter(prefix="/v1", tags=["governance"], route_class=LazyAPIRoute)
log = logging.getLogger("treadle.erasure")


@router.post("/_erasure", response_model=ErasureReceipt, responses=errors(*BODY))
async def erase_subject(body: ErasureRequest, rt: Rt, who: Who, tenant: str | None = None) -> dict[str, Any]:
    """Erase (or, `dry_run`, count) every row of one subject of the tenant; the receipt lists them."""
    tenant_id = focused_tenant(who, tenant, doing="erases in") or who.tenant_id
    if not body.dry_run and body.confirm != body.subject:
        raise BadRequest("erasure cannot be undone: repeat the subject as confirm", code="confirm_mismatch")
    notes: list[str] = []
    if not body.dry_run:
        live = [r for r in await rt.runs.list_unfinished(tenant_id, 5000) if r.user_id == body.subject]
        for run in live:  # nothing of it keeps running (a step in flight loses its lease fence)
            await rt.cancel_run(tenant_id, run.id, "subject erased")
        if live:
            notes.append(f"{len(live)} live run(s) cancelled first")
    erasure = SubjectErasure(rt.pool)
    files = await _volume_files(rt, erasure, tenant_id, body.subject, delete=not body.dry_run)
    receipt = await erasure.erase(tenant_id, body.subject, dry_run=body.dry_run)
    if files:
        receipt["deleted"]["volume_files"] = len(files)
    receipt["files"] = files
    if rt.sql_memory is not None:
        scopes = [k for k in await rt.sql_memory.scopes(tenant_id) if k.scope == "user" and k.scope_id == body.subject]
        if scopes:
            receipt["deleted"]["sql_memory_scopes"] = len(scopes)
            if not body.dry_run:
                for key in scopes:
                    await rt.sql_memory.drop_scope(key)
    if not body.dry_run:
        rt.auth_generation += 1  # its tokens are gone: no cached principal may outlive them
        log.info("erased subject of tenant %s: %s", tenant_id, receipt["deleted"])
    notes.append("usage kept for the tenant's totals, its user folded into the user-less rows")
    return {"tenant": tenant_id, "subject": body.subject, "dry_run": body.dry_run, **receipt, "notes": notes}


async def _volume_files(rt: Any, erasure: SubjectErasure, tenant_id: str, subject: str, *, delete: bool) -> list[str]:
    """The subject's volume files as `<location>/<path>`, deleted unless `delete` is False (a dry
    run): the files its runs wrote (migration 0063), every file of its runs' ephemeral volumes, and
    its part of the retention archive (`retention/<class>/u/<subject>/…`)."""
    from treadle.volumes.paths import tenant_segment

    storage = rt.volumes.storage
    if storage is None:
        return []
    written, ephemeral = await erasure.subject_files(tenant_id, subject)
    found: list[tuple[str, str]] = list(written)
    for location in ephemeral:
        found += [(location, e.path) for e in (await storage.walk(location, "", 100_000)).entries]
    archive = rt.config.retention.archive
    if archive is not None:
        location = rt.volumes.tenant_location(tenant_id, archive.volume)
        for entry in (await storage.walk(location, "retention", 1_000_000)).entries:
            parts = entry.path.split("/")
            if len(parts) > 3 and parts[2] == "u" and parts[3] == tenant_segment(subject):
                found.append((location, entry.path))
    out: list[str] = []
    for location, path in sorted(set(found)):
        there = await storage.delete(location, path) if delete else await storage.stat(location, path) is not None
        if not there:
            continue  # gone already (overwritten elsewhere, purged): not listed
        out.append(f"{location}/{path}")
    if delete:
        for location in ephemeral:
            await storage.purge(location)  # the now empty directories (host)
    return out
