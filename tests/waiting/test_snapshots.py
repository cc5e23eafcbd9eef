"""Snapshots (issue 36 item 3; loomcycle's /v1/_snapshots): a runtime's state exported as a portable
document and restored into another treadle (another database), where every run goes on — a queued
one and one mid-way get their next step, a parked one stays parked on its wait key until answered,
one a pause parked resumes — and ended ones come along with `include_history`. The document holds
no secret value (checked against every row of the source database); loomcycle's fields and codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.mcp.test_tenant_credentials import deployment_key
from tests.support.e2e import check_paired, dump_all, query
from tests.support.tenancy import api, bearer, mint
from tests.support.waiting import answer, asker, start, status

LOOPER: dict[str, Any] = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3}}
AGENTS = {"looper": LOOPER, "asker": asker()}
__all__ = ["deployment_key"]  # the fixture (a sealing key for tenant credentials), shared
SECRET = "sk-live-0123456789abcdefSECRET"


async def _statuses(rt: Any, run_ids: list[str]) -> dict[str, str]:
    return {r: await status(rt, r) for r in run_ids}


async def source_with_runs_in_every_state(
    open_runtime: Any, url: str, looper: str = "looper"
) -> tuple[Any, Any, dict[str, str]]:
    """A runtime on `url` with a run ended, one queued, one mid-way (an iteration done, the next
    due) and one parked on its question; `looper` names the agent LOOPER runs as."""
    rt, disp = await open_runtime({looper: LOOPER, "asker": asker()}, url=url)
    runs = {"ended": await start(rt, looper)}
    await disp.drain()
    runs["queued"] = await start(rt, looper)
    disp.queue.clear()  # never stepped here
    runs["midway"] = await start(rt, looper)
    await rt.engine.handle(disp.queue.pop(0))  # one iteration: a tool call and its result; the next step is due
    disp.queue.clear()
    runs["parked"] = await start(rt, "asker")
    await rt.engine.handle(disp.queue.pop(0))  # parks on its question
    assert await _statuses(rt, list(runs.values())) == {
        runs["ended"]: "completed",
        runs["queued"]: "queued",
        runs["midway"]: "running",
        runs["parked"]: "waiting",
    }
    return rt, disp, runs


async def test_a_snapshot_restores_into_another_treadle_and_every_run_goes_on(
    deployment_key: None, open_runtime: Any, migrated_db_url: str, target_db: str
) -> None:
    src, _disp, runs = await source_with_runs_in_every_state(open_runtime, migrated_db_url)
    async with api(src) as c:
        r = await c.post(
            "/v1/_credentialdef", json={"op": "create", "scope": "tenant", "name": "stripe_key", "value": SECRET}
        )
        assert r.status_code == 200, r.text
        r = await c.post("/v1/_snapshots", json={"label": "move to b", "include_history": True})
        assert r.status_code == 201, r.text
        meta = r.json()
        assert meta["id"].startswith("snap_") and meta["schema_version"] == 1 and meta["label"] == "move to b"
        assert meta["created_at"].endswith("Z") and meta["byte_size"] > 0 and "tenant_id" not in meta
        listed = (await c.get("/v1/_snapshots", params={"label_contains": "move"})).json()["entries"]
        assert [e["id"] for e in listed] == [meta["id"]]
        assert (await c.get("/v1/_snapshots", params={"label_contains": "nope"})).json() == {"entries": []}
        r = await c.get("/v1/_snapshots", params={"limit": "-1"})
        assert r.status_code == 400 and r.json()["code"] == "invalid_limit"
        full = (await c.get(f"/v1/_snapshots/{meta['id']}")).json()
        r = await c.get(f"/v1/_snapshots/{meta['id']}/export")
        assert r.status_code == 200
        assert r.headers["content-disposition"] == f'attachment; filename="{meta["id"]}.json"'
        doc = r.json()
        assert doc == full["json_content"] and len(r.content) == meta["byte_size"]
        r = await c.get("/v1/_snapshots/snap_0_missing")
        assert r.status_code == 404 and r.json()["code"] == "snapshot_not_found"
        too_small = await c.post("/v1/_snapshots", json={"max_bytes": 100})
        assert too_small.status_code == 413 and too_small.json()["code"] == "snapshot_too_large"

    # no secret value travels: not the credential, not a sealed byte, not a token hash of the source
    exported = json.dumps(doc)
    assert SECRET not in exported
    sealed = await query(
        migrated_db_url, "SELECT encode(sealed, 'hex') AS h, encode(key_id, 'hex') AS k FROM credential_defs"
    )
    assert sealed and all(s["h"] not in exported and s["k"] not in exported for s in sealed)
    dump = await dump_all(migrated_db_url)
    assert sealed[0]["h"] in dump  # the dump holds it: the check above looks for something real
    assert [c["name"] for c in doc["sections"]["credentials"]["entries"]] == ["stripe_key"]
    assert all("sealed" not in c for c in doc["sections"]["credentials"]["entries"])

    dst, disp = await open_runtime(AGENTS, url=target_db)
    async with api(dst) as c:
        r = await c.post("/v1/_snapshots/elsewhere/restore", json={"json": doc, "include_history": True})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["paused_runs_restored"] == 1 and out["paused_runs_resumed"] == 2  # queued + mid-way
        assert out["interaction_history_restored"] == 1 and out["restored"]["runs"] == 4
        assert out["memory_restored"] == 1 and out["transcript_events_restored"] > 0
        assert out["warnings"] == [
            "credentials are named, never copied: define these here (POST "
            "/v1/_credentialdef) — default/tenant/-/stripe_key"
        ]
        again = (await c.post("/v1/_snapshots/elsewhere/restore", json={"json": doc, "include_history": True})).json()
        assert again["restored"]["runs"] == 0 and again["transcript_events_restored"] == 0  # rows written only
        assert await _statuses(dst, list(runs.values())) == {
            runs["ended"]: "completed",
            runs["queued"]: "queued",
            runs["midway"]: "running",
            runs["parked"]: "waiting",
        }
        await disp.drain()
        assert await status(dst, runs["parked"]) == "waiting"  # still parked on its question
        await answer(dst, runs["parked"], "yes")
        await disp.drain()
        assert set((await _statuses(dst, list(runs.values()))).values()) == {"completed"}
        for run_id in runs.values():
            events = (await c.get(f"/v1/runs/{run_id}/events")).json()["events"]
            assert check_paired(events) == [] and [e["type"] for e in events].count("done") == 1
        mid = (await c.get(f"/v1/runs/{runs['midway']}/events")).json()["events"]
        assert [e["iteration"] for e in mid if e["type"] == "tool_call"] == [1, 2, 3]  # went on where it was
    # the Memory counter: 3 incr of the ended run and 1 of the mid-way one came with it; 3 + 2 + 0 here
    [row] = await query(target_db, "SELECT value FROM memory WHERE key = 'calls'")
    assert row["value"] == 3 * 3


async def test_a_paused_runtime_snapshot_resumes_on_a_running_target_and_refusals_are_named(
    open_runtime: Any, migrated_db_url: str, target_db: str
) -> None:
    src, disp = await open_runtime(AGENTS, url=migrated_db_url)
    run_id = await start(src, "looper")
    async with api(src) as c:
        r = await c.post("/v1/_pause", json={"timeout_ms": 50})
        assert r.status_code == 200, r.text
        await disp.drain()  # parks at its first boundary
        assert await status(src, run_id) == "waiting"
        snap = (await c.post("/v1/_snapshots", json={})).json()
        doc = (await c.get(f"/v1/_snapshots/{snap['id']}/export")).json()
        assert doc["include_history"] is False and [r["id"] for r in doc["sections"]["runs"]["entries"]] == [run_id]
        assert (await c.delete(f"/v1/_snapshots/{snap['id']}")).status_code == 204
        assert (await c.delete(f"/v1/_snapshots/{snap['id']}")).status_code == 204  # idempotent
        assert (await c.get(f"/v1/_snapshots/{snap['id']}")).status_code == 404

    dst, ddisp = await open_runtime(AGENTS, url=target_db, auth_cache_seconds=0)
    async with api(dst) as c:
        mutations: tuple[tuple[Callable[[dict[str, Any]], object], str], ...] = (
            (lambda d: d.update(migration=d["migration"] + 1), "snapshot_version_too_new"),
            (lambda d: d["sections"]["memory"].update(version="2.0") or d.pop("checksum"), "snapshot_version_too_new"),
            (
                lambda d: d["sections"].update(gadgets={"version": "1.0", "entries": []}) or d.pop("checksum"),
                "snapshot_version_unknown",
            ),
            (lambda d: d["sections"]["runs"]["entries"][0].update(status="completed"), "snapshot_checksum_mismatch"),
            (lambda d: d.pop("sections"), "snapshot_invalid"),
        )
        for mutate, code in mutations:
            bad = json.loads(json.dumps(doc))
            mutate(bad)
            r = await c.post("/v1/_snapshots/x/restore", json={"json": bad})
            assert r.status_code == 422 and r.json()["code"] == code, (code, r.text)
        r = await c.post("/v1/_snapshots/x/restore", json={"json": doc, "surprise": 1})
        assert r.status_code == 422  # a field is honoured or refused
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme", tenant="acme", scopes=["substrate:admin"]))
        r = await c.post("/v1/_snapshots/x/restore", json={"json": doc}, headers=acme)
        assert r.status_code == 422 and r.json()["code"] == "snapshot_other_tenant"
        r = await c.post("/v1/_snapshots", json={"label": "acme's"}, headers=acme)
        assert r.status_code == 201 and r.json()["tenant_id"] == "acme"
        assert [e["label"] for e in (await c.get("/v1/_snapshots", headers=acme)).json()["entries"]] == ["acme's"]
        acme_doc = (await c.get(f"/v1/_snapshots/{r.json()['id']}", headers=acme)).json()["json_content"]
        assert acme_doc["sections"]["runs"]["entries"] == []  # the default tenant's run is not acme's

        r = await c.post("/v1/_snapshots/x/restore", json={"json": doc}, headers=operator)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["paused_runs_restored"] == 1 and out["paused_runs_resumed"] == 1  # this runtime runs: woken
    await ddisp.drain()
    assert await status(dst, run_id) == "completed"


async def test_the_mcp_snapshot_tools_take_loomcycles_arguments_and_answer_its_shapes(
    open_runtime: Any, migrated_db_url: str, target_db: str
) -> None:
    from treadle.api.mcp.tools import call_tool
    from treadle.security.principal import Principal

    operator = Principal("default", "operator")
    src, _disp, runs = await source_with_runs_in_every_state(open_runtime, migrated_db_url)
    made = await call_tool(src, operator, "create_snapshot", {"description": "via mcp", "include_history": True})
    assert not made.is_error and made.structured_content is not None, made
    desc = made.structured_content
    assert desc["description"] == "via mcp" and desc["includes_history"] is True and desc["format_version"] == "1"
    sid = desc["snapshot_id"]
    listed = (await call_tool(src, operator, "list_snapshots", {})).structured_content
    assert listed is not None and [s["snapshot_id"] for s in listed["snapshots"]] == [sid]
    got = (await call_tool(src, operator, "get_snapshot", {"snapshot_id": sid})).structured_content
    exported = (await call_tool(src, operator, "export_snapshot", {"snapshot_id": sid})).structured_content
    assert got is not None and exported is not None and exported["raw_json"] == got["json_content"]
    missing = await call_tool(src, operator, "get_snapshot", {"snapshot_id": "snap_0_none"})
    assert missing.is_error and missing.structured_content is not None
    assert missing.structured_content["code"] == "snapshot_not_found"
    both = await call_tool(src, operator, "restore_snapshot", {"snapshot_id": sid, "raw_json": {}})
    assert both.is_error  # exactly one source

    dst, disp = await open_runtime(AGENTS, url=target_db)
    restored = await call_tool(
        dst, operator, "restore_snapshot", {"raw_json": exported["raw_json"], "include_history": True}
    )
    assert not restored.is_error and restored.structured_content is not None, restored
    assert restored.structured_content["restored"]["runs"] == 4
    await disp.drain()
    assert await status(dst, runs["midway"]) == "completed" and await status(dst, runs["parked"]) == "waiting"
    acme = await call_tool(src, Principal("acme", "a"), "list_snapshots", {})  # a tenant admin: its own only
    assert acme.structured_content == {"snapshots": []}
    gone = (await call_tool(src, operator, "delete_snapshot", {"snapshot_id": sid})).structured_content
    assert gone == {"deleted": True, "snapshot_id": sid}
    assert (await call_tool(src, operator, "list_snapshots", {})).structured_content == {"snapshots": []}


async def test_documents_and_the_path_tree_travel_in_a_snapshot(
    open_runtime: Any, migrated_db_url: str, target_db: str
) -> None:
    """Issue 41: a document (chunks, an edge, a type, revisions) and its Path name restore elsewhere,
    chunk revisions and all, and go on being edited there."""
    from treadle.builtins.document import document_op
    from treadle.store.dirents import DirentStore, Tree

    alice = Tree("default", "user", "alice")
    src, _ = await open_runtime({}, url=migrated_db_url)
    dirents = DirentStore(src.pool)

    async def doc(rt: Any, **args: Any) -> Any:
        return await document_op(DirentStore(rt.pool), alice, args, "alice")

    made = await doc(src, op="create_document", title="Plan", path="/docs/plan")
    child = await doc(src, op="create_chunk", document_id=made["document_id"], title="Ship", body="July")
    grandchild = await doc(src, op="create_chunk", document_id=made["document_id"], parent_id=child["id"], title="x")
    await doc(src, op="update_chunk", id=child["id"], revision=1, body="August")
    await doc(src, op="link_chunks", from_id=grandchild["id"], to_id=child["id"], kind="refines")
    await doc(src, op="define_type", name="decision", fields={"type": "object"})
    before = (await doc(src, op="export_md", document_id=made["document_id"]))["markdown"]
    assert await dirents.under(alice, "/")
    async with api(src) as c:
        r = await c.post("/v1/_snapshots", json={"label": "docs"})
        assert r.status_code == 201, r.text
        snapshot = (await c.get(f"/v1/_snapshots/{r.json()['id']}/export")).json()
    dst, _ = await open_runtime({}, url=target_db)
    async with api(dst) as c:
        r = await c.post("/v1/_snapshots/elsewhere/restore", json={"json": snapshot})
        assert r.status_code == 200, r.text
    assert (await doc(dst, op="export_md", path="/docs/plan"))["markdown"] == before
    history = await doc(dst, op="history", id=child["id"])
    assert [h["revision"] for h in history["revisions"]] == [2, 1]
    assert (await doc(dst, op="update_chunk", id=child["id"], revision=2, body="September"))["revision"] == 3
    assert [t["name"] for t in (await doc(dst, op="list_types"))["types"]] == ["decision"]
