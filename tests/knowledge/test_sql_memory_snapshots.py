"""SQL memory in snapshots, tenant exports and retention (issue 41 item 5): a scope's schema (types,
tables with serial, identity and generated columns, constraints, foreign keys, indexes, a view, a
function, a trigger) and rows travel in a snapshot and restore into another treadle (another
database: the scope gets that database's names) where an agent of that scope reads and writes on;
the triggers are made after the rows (they do not fire again); another tenant's same agent sees
nothing. A hostile document reaches nothing outside its scope, a scope over its quota is refused,
and a refused restore leaves nothing anywhere. Retention drops a scope unused for memory_days."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.db import clone_database, drop_database
from tests.support.substrate import TENANT, client_for, ok_results, run_agent, scripted, tool_results
from treadle.errors import SnapshotRefused
from treadle.portable.snapshots import CaptureOptions, capture
from treadle.store.sqlmem import ScopeKey
from treadle.store.sqlmemdump import dump_scope

SQL: dict[str, Any] = {"memory": {"sql": {}}}
STORY = "tab\there\nnew line \\ backslash 'quote' ünï"


def op(op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Memory", {"op": op, "scope": "agent", **kw})


WRITER = scripted(
    op("sql_exec", statement="CREATE TYPE mood AS ENUM ('calm', 'busy')"),
    op("sql_exec", statement="CREATE TABLE owners (id serial PRIMARY KEY, name text UNIQUE NOT NULL)"),
    op("sql_exec", statement="CREATE TABLE counters (k text PRIMARY KEY, n int NOT NULL)"),
    op("sql_exec", statement="INSERT INTO counters VALUES ('stamped', 0)"),
    op("sql_exec", statement="CREATE TABLE notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                             " owner int REFERENCES owners (id), body text NOT NULL CHECK (length(body) < 1000),"
                             " blob bytea, meta jsonb NOT NULL DEFAULT '{}', m mood DEFAULT 'calm',"
                             " len int GENERATED ALWAYS AS (length(body)) STORED)"),
    op("sql_exec", statement="CREATE INDEX notes_body_ix ON notes (lower(body))"),
    op("sql_exec", statement="CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                             " UPDATE counters SET n = n + 1 WHERE k = 'stamped';"
                             " NEW.meta := NEW.meta || '{\"stamped\": true}'; RETURN NEW; END $$"),
    op("sql_exec", statement="CREATE TRIGGER notes_stamp BEFORE INSERT ON notes FOR EACH ROW EXECUTE FUNCTION stamp()"),
    op("sql_exec", statement="CREATE VIEW owner_counts AS SELECT o.name, count(n.id) AS notes FROM owners o"
                             " LEFT JOIN notes n ON n.owner = o.id GROUP BY o.name"),
    op("sql_exec", statement="INSERT INTO owners (name) VALUES ('ann'), ('bob')"),
    op("sql_exec", statement="INSERT INTO notes (owner, body, blob, m) VALUES (1, $1, decode('00ff5c', 'hex'),"
                             " 'busy'), (2, 'plain', NULL, DEFAULT)", args=[STORY]),
    sql_scopes=["agent"])
NOTES = "SELECT id, owner, body, encode(blob, 'hex') AS blob, meta, m::text AS m, len FROM notes ORDER BY id"
READER = scripted(
    op("sql_query", statement=NOTES),
    op("sql_query", statement="SELECT name, notes FROM owner_counts ORDER BY name"),
    op("sql_exec", statement="INSERT INTO owners (name) VALUES ('cy') RETURNING id"),
    op("sql_exec", statement="INSERT INTO notes (owner, body) VALUES (3, 'new') RETURNING id, meta"),
    op("sql_query", statement="SELECT n FROM counters"),
    op("sql_exec", statement="INSERT INTO owners (name) VALUES ('ann')"),
    op("sql_exec", statement="INSERT INTO notes (owner, body) VALUES (99, 'orphan')"),
    sql_scopes=["agent"])


@pytest.fixture
def target_url(server_url: str, migrated_template: str) -> Iterator[str]:
    url = clone_database(server_url, migrated_template, "sqlsnap")
    yield url
    drop_database(server_url, url)


async def _dump(rt: Any, key: ScopeKey) -> dict[str, Any]:
    async with await rt.sql_memory._admin() as conn:
        return await dump_scope(conn, rt.sql_memory.names(key)[0])


async def _source(open_rt: Any) -> tuple[Any, dict[str, Any]]:
    src, disp = await open_rt({"agents": {"keeper": WRITER}, **SQL})
    await ok_results(src, (await run_agent(src, disp, "keeper")).id)
    row = await capture(src.snapshots, None, CaptureOptions(), src.sql_snapshots)
    assert row.json_content is not None
    return src, row.json_content


async def test_a_scope_travels_whole_and_the_agent_goes_on_with_it_in_another_treadle(
    open_rt: Any, target_url: str
) -> None:
    src, doc = await _source(open_rt)
    [entry] = doc["sections"]["sql_memory"]["entries"]
    assert (entry["tenant_id"], entry["scope"], entry["scope_id"], entry["not_carried"]) == (
        TENANT, "agent", "keeper", [])
    assert not any(src.sql_memory.names(ScopeKey(TENANT, "agent", "keeper"))[0] in s
                   for s in entry["pre"] + entry["post"])  # no source schema name travels

    dst, disp = await open_rt({"agents": {"keeper": READER}, **SQL}, url=target_url)
    out = await dst.restore_snapshot(doc, None, include_history=True)
    assert out["restored"]["sql_memory"] == 1 and "warnings" not in out, out
    key = ScopeKey(TENANT, "agent", "keeper")
    assert src.sql_memory.names(key) != dst.sql_memory.names(key)  # keyed here: this database's names
    assert await _dump(dst, key) == await _dump(src, key)  # schema, rows and sequences, as they were

    notes, counts, owner, note, counter, dup, orphan = await tool_results(dst, (await run_agent(dst, disp,
                                                                                                "keeper")).id)
    assert notes[1]["rows"] == [[1, 1, STORY, "00ff5c", {"stamped": True}, "busy", len(STORY)],
                                [2, 2, "plain", None, {"stamped": True}, "calm", 5]]
    assert counts[1]["rows"] == [["ann", 1], ["bob", 1]]
    assert owner[1]["rows"] == [[3]]  # the serial's sequence came along
    assert note[1]["rows"] == [[3, {"stamped": True}]]  # the identity's too, and the trigger works
    assert counter[1]["rows"] == [[3]]  # 2 at the source: the restore's rows did not fire it again
    assert dup[0] and "unique" in dup[1] and orphan[0] and "foreign key" in orphan[1]

    other = await tool_results(dst, (await run_agent(dst, disp, "keeper", tenant="other")).id, tenant="other")
    assert other[0][0] and 'relation "notes" does not exist' in other[0][1]  # another tenant: its own scope

    again = await dst.restore_snapshot(doc, None, include_history=True)  # the scope exists here now: kept
    assert again["restored"]["sql_memory"] == 0
    assert any("exists here and holds objects: kept" in w for w in again["warnings"])


async def test_a_tenant_restore_and_export_carry_its_scopes_only(open_rt: Any, target_url: str) -> None:
    src, disp = await open_rt({"agents": {"keeper": WRITER}, **SQL})
    for tenant in (TENANT, "other"):
        await ok_results(src, (await run_agent(src, disp, "keeper", tenant=tenant)).id, tenant=tenant)
    async with client_for(src) as c:
        r = await c.get(f"/v1/_admin/tenants/{TENANT}/export")
        assert r.status_code == 200, r.text
        lines = [line for line in r.text.splitlines() if '"table": "sql_memory"' in line]
    assert len(lines) == 1 and f'"tenant_id": "{TENANT}"' in lines[0] and "CREATE TRIGGER" in lines[0]
    row = await capture(src.snapshots, "other", CaptureOptions(), src.sql_snapshots)
    assert row.json_content is not None
    assert [e["tenant_id"] for e in row.json_content["sections"]["sql_memory"]["entries"]] == ["other"]
    dst0, _ = await open_rt({"agents": {"keeper": READER}, **SQL}, url=target_url)
    with pytest.raises(SnapshotRefused) as refused:  # a tenant restores its own tenant's scopes only
        await dst0.restore_snapshot(row.json_content, TENANT, include_history=True)
    assert refused.value.code == "snapshot_other_tenant"
    assert await dst0.sql_memory.scopes() == []


async def hostile(doc: dict[str, Any], change: Any) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    bad.pop("checksum")
    change(bad["sections"]["sql_memory"]["entries"][0])
    return bad


ESCAPES: list[tuple[str, Any]] = [
    ("sql_statement_refused", lambda e: e["pre"].insert(0, "SET ROLE postgres")),
    ("sql_statement_refused", lambda e: e["pre"].insert(0, "COPY owners FROM '/etc/passwd'")),
    ("sql_statement_refused", lambda e: e["pre"].insert(0, "CREATE EXTENSION dblink")),
    ("sql_statement_refused", lambda e: e["post"].append("SELECT pg_read_file('/etc/passwd')")),
    ("sql_statement_refused", lambda e: e["pre"].insert(0, "CREATE TABLE a (x int); CREATE TABLE b (y int)")),
    ("snapshot_invalid", lambda e: e["pre"].insert(0, "CREATE TABLE public.evil (x int)")),
    ("snapshot_invalid", lambda e: e["pre"].insert(0, "CREATE TABLE treadle_sqlmem.evil (x int)")),
    ("snapshot_invalid", lambda e: e["pre"].append("CREATE TABLE stolen AS SELECT * FROM treadle_sqlmem.secret")),
    ("snapshot_invalid", lambda e: e["pre"].append("CREATE TABLE roles AS SELECT rolpassword FROM pg_authid")),
    ("snapshot_invalid", lambda e: e["data"].append({"table": "pg_authid", "columns": ["rolname"], "copy": "x\n"})),
    ("snapshot_invalid", lambda e: e["data"].append({"table": "secret", "columns": ["id"], "copy": "2\n"})),
    ("snapshot_invalid", lambda e: e["pre"].append("CREATE TEMP TABLE dodge (x int)")),
    ("snapshot_invalid", lambda e: e["sequences"].append({"name": "pg_class", "value": 1})),
    ("snapshot_invalid", lambda e: e.update(scope="nobody")),
]


async def test_a_hostile_document_reaches_nothing_and_leaves_nothing(open_rt: Any, target_url: str) -> None:
    src, doc = await _source(open_rt)
    others = await src.sql_memory.scopes()
    dst, _ = await open_rt({"agents": {}, "memory": {"sql": {"quota_bytes": 40_000}}}, url=target_url)
    for code, change in ESCAPES:
        with pytest.raises(SnapshotRefused) as refused:
            await dst.restore_snapshot(await hostile(doc, change), None, include_history=True)
        assert refused.value.code == code, (refused.value.message, code)
    with pytest.raises(SnapshotRefused) as refused:  # the whole scope is over this server's quota
        await dst.restore_snapshot(doc, None, include_history=True)
    assert refused.value.code == "sql_quota_exceeded" and "quota is 40000" in refused.value.message
    assert await dst.sql_memory.scopes() == [] and await src.sql_memory.scopes() == others
    async with await dst.sql_memory._admin() as conn:  # nothing staged stays, nothing landed elsewhere
        cur = await conn.execute("SELECT nspname FROM pg_namespace WHERE nspname ~ '^(r|s)_?[0-9a-f]{8}'")
        assert await cur.fetchall() == []
        cur = await conn.execute("SELECT count(*) AS n FROM treadle_sqlmem.staged")
        assert await cur.fetchone() == {"n": 0}
        cur = await conn.execute("SELECT count(*) AS n FROM pg_tables WHERE tablename IN ('evil', 'stolen', 'roles')")
        assert await cur.fetchone() == {"n": 0}
    async with dst.pool.connection() as conn:
        cur = await conn.execute("SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM snapshot_sql_restores)"
                                 " AS n")
        assert await cur.fetchone() == {"n": 0}


async def test_retention_drops_a_scope_unused_for_memory_days(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {"keeper": WRITER}, "memory": {"sql": {}},
                              "retention": {"memory_days": 30, "tenants": {"kept": {"memory": None}}}})
    for tenant in (TENANT, "kept", "fresh"):
        await ok_results(rt, (await run_agent(rt, disp, "keeper", tenant=tenant)).id, tenant=tenant)
    async with await rt.sql_memory._admin() as conn:
        await conn.execute("UPDATE treadle_sqlmem.scopes SET last_used_at = now() - interval '40 days'"
                           " WHERE tenant_id <> 'fresh'")
    assert await rt.enforce_retention(force=True) >= 1
    assert sorted(k.tenant for k in await rt.sql_memory.scopes()) == ["fresh", "kept"]
    with psycopg.connect(rt.sql_memory.url) as conn:  # the role went with its schema
        role = rt.sql_memory.names(ScopeKey(TENANT, "agent", "keeper"))[1]
        assert conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (0,)


async def test_embeddings_travel_as_vectors_and_search_finds_them_after_a_restore(
    open_rt: Any, target_url: str
) -> None:
    config = {"agents": {}, "memory": {"embedder": {"driver": "local"}}}
    src, _ = await open_rt(config)
    await src.substrate.memory.set(TENANT, "user", "ann", "backups", "Backups run nightly at 02:00.", None,
                                   embed=True)
    await src.substrate.memory.set(TENANT, "user", "ann", "lunch", "Lunch is at noon in the canteen.", None,
                                   embed=True)
    row = await capture(src.snapshots, None, CaptureOptions())
    assert row.json_content is not None
    vectors = row.json_content["sections"]["memory_embeddings"]["entries"]
    assert sorted(v["key"] for v in vectors) == ["backups", "lunch"] and all(v["dimension"] for v in vectors)
    dst, _ = await open_rt(config, url=target_url)
    out = await dst.restore_snapshot(row.json_content, None, include_history=True)
    assert out["restored"]["memory_embeddings"] == 2, out
    read = "SELECT key, embedding::text AS v FROM memory_embeddings ORDER BY key"
    async with src.pool.connection() as a, dst.pool.connection() as b:
        assert await (await b.execute(read)).fetchall() == await (await a.execute(read)).fetchall()
    found = await dst.substrate.memory.search(TENANT, "user", "ann", "when do the backups run?", k=1)
    assert [h["key"] for h in found["results"]] == ["backups"]
