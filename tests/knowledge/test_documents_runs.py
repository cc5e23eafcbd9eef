"""The Document tool in runs (mock model): an agent builds a document the Path tree names; the
tenant scope needs both grants; and two agents editing one document at the same time, on the
Postgres queue with workers stepping in parallel — different chunks both land, the same chunk
lands once and the other edit is refused `stale_revision`, never applied over it."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import TemplatingMock, ok_results, run_agent, scripted, tool_results
from treadle.builtins.document import document_op
from treadle.engine.workers import WorkerPool
from treadle.store.dirents import DirentStore, Tree
from treadle.store.runs import NewRun
from treadle.testing import until, user_text

ALICE = Tree("default", "user", "alice")


def d(op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Document", {"op": op, **kw})


async def test_an_agent_writes_a_document_named_in_the_path_tree(open_rt: Any) -> None:
    mock = TemplatingMock()
    writer = scripted(
        d("create_document", title="Launch plan", path="/docs/launch"),
        d(
            "create_chunk",
            document_id="$RESULT.document_id",
            title="Ship date",
            type="decision",
            status="open",
            body="July",
        ),
        d("update_chunk", id="$RESULT.id", revision=1, status="done"),
        d("update_chunk", id="$RESULT.id", revision=1, body="too late"),
        ("Path", {"op": "ls", "scope": "user", "path": "/docs"}),
        d("query_chunks", type="decision", status="done"),
        d("export_md", path="/docs/launch", include_metadata=False),
        d("create_document", scope="tenant", title="Shared"),
    )
    granted = scripted(
        d("create_document", scope="tenant", title="Shared", path="/shared"),
        memory_scopes=["tenant"],
        sql_scopes=["tenant"],
    )
    rt, disp = await open_rt({"agents": {"writer": writer, "granted": granted}}, providers={"mock": mock})
    results = await tool_results(rt, (await run_agent(rt, disp, "writer", user_id="alice")).id)
    made, chunk, updated, stale, listed, found, md, tenant = results
    assert not made[0] and made[1]["path"] == "/docs/launch"
    assert updated[1]["revision"] == 2 and updated[1]["status"] == "done"
    assert stale[0] and "stale_revision" in stale[1] and "current is 2" in stale[1]
    assert listed[1]["entries"] == [
        {
            "name": "launch",
            "kind": "document",
            "full_path": "/docs/launch",
            "resource_ref": {"document_id": made[1]["document_id"]},
        }
    ]
    assert [c["id"] for c in found[1]["chunks"]] == [chunk[1]["id"]]
    assert md[1]["markdown"] == "# Launch plan\n\n## Ship date\n\nJuly\n\n"
    assert tenant[0] and "scope_not_permitted" in tenant[1] and "sql_scopes: [tenant]" in tenant[1]
    (shared,) = await ok_results(rt, (await run_agent(rt, disp, "granted")).id)
    assert shared["path"] == "/shared"


SLOW_EDIT = """
CREATE TABLE edit_log (chunk_id text, started timestamptz, ended timestamptz);
CREATE FUNCTION slow_edit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_sleep(1.5);
    INSERT INTO edit_log VALUES (NEW.id, t0, clock_timestamp());
    RETURN NEW;
END $$;
CREATE TRIGGER slow_edit BEFORE UPDATE ON chunks FOR EACH ROW WHEN (NEW.revision > OLD.revision)
    EXECUTE FUNCTION slow_edit();
"""


async def test_two_agents_edit_one_document_at_once(open_rt: Any) -> None:
    mock = TemplatingMock()
    editor = {
        name: scripted(d("update_chunk", id=f"$VAR.{name}", revision=1, body=f"by {name}"))
        for name in ("ed1", "ed2", "ed3", "ed4")
    }
    rt, queue = await open_rt({"agents": editor}, providers={"mock": mock}, inline=False)
    dirents = DirentStore(rt.pool)
    made = await document_op(dirents, ALICE, {"op": "create_document", "title": "Board"}, "setup")
    c1, c2, c3 = [
        (
            await document_op(
                dirents, ALICE, {"op": "create_chunk", "document_id": made["document_id"], "title": t}, "setup"
            )
        )["id"]
        for t in ("one", "two", "three")
    ]
    mock.vars.update(ed1=c1, ed2=c2, ed3=c3, ed4=c3)
    async with rt.pool.connection() as conn:
        await conn.execute(SLOW_EDIT)

    async def edit_at_once(*agents: str) -> list[tuple[bool, Any]]:
        ids = [
            (await rt.start_run(NewRun(tenant_id="default", agent=a, segments=user_text("edit"), user_id="alice")))[
                0
            ].id
            for a in agents
        ]
        workers = WorkerPool(rt.engine, queue, 4, idle_poll_s=0.05)
        workers.start()
        try:

            async def ended() -> bool:
                return all([(await rt.runs.get("default", i)).terminal for i in ids])

            if agents[0] == "ed3":  # the same chunk: the second edit waits on the first one's row lock
                await until(_blocked_on_a_chunk(rt), timeout=20, interval=0.05, what="an edit waiting for the row")
            await until(ended, timeout=30, interval=0.05, what="the edits")
        finally:
            await workers.stop()
        return [(await tool_results(rt, i))[0] for i in ids]

    # different chunks: both land, their edits overlapping in time
    first, second = await edit_at_once("ed1", "ed2")
    assert not first[0] and not second[0], (first, second)
    assert first[1]["revision"] == second[1]["revision"] == 2
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT chunk_id, started, ended FROM edit_log ORDER BY started")
        (a, _a0, a1), (b, b0, _b1) = [(r["chunk_id"], r["started"], r["ended"]) for r in await cur.fetchall()]
    assert {a, b} == {c1, c2} and b0 < a1  # the second began before the first had finished

    # the same chunk: one lands, the other is refused and changes nothing
    third, fourth = await edit_at_once("ed3", "ed4")
    outcomes = sorted([third, fourth], key=lambda r: r[0])
    (ok_err, landed), (stale_err, refused) = outcomes
    assert not ok_err and stale_err, outcomes
    assert "stale_revision" in refused and "current is 2" in refused
    now = await document_op(dirents, ALICE, {"op": "get_chunk", "id": c3}, "check")
    assert now["revision"] == 2 and now["body"] == landed["body"]
    history = await document_op(dirents, ALICE, {"op": "history", "id": c3}, "check")
    assert [r["revision"] for r in history["revisions"]] == [2, 1]


def _blocked_on_a_chunk(rt: Any) -> Any:
    async def check() -> bool:
        async with rt.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'UPDATE chunks SET revision%%'"
            )
            row = await cur.fetchone()
            return bool(row and row["n"])

    return check


async def test_a_repeated_step_applies_an_edit_once(open_rt: Any) -> None:
    """The step's transaction carries the edit: a step delivered twice (at-least-once) finds its
    step already advanced and records nothing, so the revision moves once."""
    mock = TemplatingMock()
    rt, disp = await open_rt(
        {"agents": {"ed": scripted(d("update_chunk", id="$VAR.c", revision=1, body="x"))}}, providers={"mock": mock}
    )
    dirents = DirentStore(rt.pool)
    made = await document_op(dirents, ALICE, {"op": "create_document", "title": "B"}, "setup")
    mock.vars["c"] = (
        await document_op(
            dirents, ALICE, {"op": "create_chunk", "document_id": made["document_id"], "title": "c"}, "setup"
        )
    )["id"]
    disp.duplicate_every_message = True
    run = await run_agent(rt, disp, "ed", user_id="alice")
    ((err, result),) = await tool_results(rt, run.id)
    assert not err and result["revision"] == 2
    now = await document_op(dirents, ALICE, {"op": "history", "id": mock.vars["c"]}, "check")
    assert [r["revision"] for r in now["revisions"]] == [2, 1]


async def test_erasing_a_user_takes_their_documents(open_rt: Any) -> None:
    from treadle.store.erasure import SubjectErasure

    rt, _ = await open_rt({})
    dirents = DirentStore(rt.pool)
    for tree in (ALICE, Tree("default", "tenant", "")):
        made = await document_op(dirents, tree, {"op": "create_document", "title": "T", "path": "/t"}, "alice")
        first = await document_op(
            dirents, tree, {"op": "create_chunk", "document_id": made["document_id"], "title": "a"}, "alice"
        )
        second = await document_op(
            dirents, tree, {"op": "create_chunk", "document_id": made["document_id"], "title": "b"}, "alice"
        )
        await document_op(
            dirents, tree, {"op": "link_chunks", "from_id": first["id"], "to_id": second["id"], "kind": "k"}, "alice"
        )
        await document_op(dirents, tree, {"op": "define_type", "name": "t", "fields": []}, "alice")
    receipt = (await SubjectErasure(rt.pool).erase("default", "alice", dry_run=False))["deleted"]
    assert receipt["documents"] == 1 and receipt["chunks"] == 3 and receipt["chunk_edges"] == 1
    assert receipt["chunk_revisions"] == 3 and receipt["chunk_types"] == 1 and receipt["dirents"] == 1
    kept = await document_op(dirents, Tree("default", "tenant", ""), {"op": "get_document", "path": "/t"}, "x")
    assert kept["title"] == "T"
