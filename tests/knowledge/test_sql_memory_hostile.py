"""SQL memory against a hostile agent (issue 41): each call below tries to leave its scope — another
scope's tables, the bookkeeping schema, host files, programs, roles, settings, the timeout, the
quota, the row cap. The suite counts escapes (must be 0), then checks the victim's data and the
runtime are intact and the audit trail holds every attempt."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import run_agent, scripted, tool_results
from treadle.store.sqlmem import ScopeKey, SqlMemory

SQL = {"memory": {"sql": {"statement_timeout_ms": 600, "quota_bytes": 256 * 1024, "max_rows": 100}}}


def q(statement: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Memory", {"op": "sql_query", "scope": "agent", "statement": statement, **kw})


def x(statement: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Memory", {"op": "sql_exec", "scope": "agent", "statement": statement, **kw})


def fn(name: str, body: str, returns: str = "text") -> tuple[str, dict[str, Any]]:
    """A plpgsql function whose body builds its SQL at run time (the statement floor cannot see it)."""
    return x(f"CREATE FUNCTION {name}() RETURNS {returns} LANGUAGE plpgsql AS $f$ {body} $f$")


def attempts(victim: str) -> list[tuple[str, tuple[str, dict[str, Any]]]]:
    """(what must answer, call): a code in the error, or 'ok:<check>' for a call that may succeed
    but must not reach outside."""
    r = "DECLARE r text; BEGIN EXECUTE {} INTO r; RETURN r; END"
    return [
        ("sql_permission_denied", q(f"SELECT * FROM {victim}.secrets")),
        ("sql_permission_denied", x(f"INSERT INTO {victim}.secrets VALUES ('mallory')")),
        ("sql_permission_denied", x(f"DROP SCHEMA {victim} CASCADE")),
        ("sql_permission_denied", q("SELECT * FROM treadle_sqlmem.secret")),
        ("sql_permission_denied", q("SELECT * FROM public.runs")),  # treadle's tables: another database
        ("sql_statement_refused", q("SELECT pg_read_file('/etc/passwd')")),
        ("sql_statement_refused", q("SELECT \"pg_read_file\"('/etc/passwd')")),
        ("sql_statement_refused", x("COPY t FROM PROGRAM 'id'")),
        ("sql_statement_refused", q("SELECT set_config('role', 'postgres', false)")),
        ("sql_statement_refused", x("SET ROLE postgres")),
        ("sql_statement_refused", x("CREATE EXTENSION dblink")),
        ("sql_statement_refused", x("SELECT 1; DROP TABLE t")),
        ("sql_statement_refused", q("SELECT 1 /* ; */ ; SELECT lo_import('/etc/passwd')")),
        ("sql_statement_refused", q("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d")),
        ("sql_statement_refused", q("SELECT * INTO t3 FROM t")),
        ("sql_statement_refused", q("INSERT INTO t VALUES ('q')")),
        ("sql_statement_refused", x("ALTER ROLE postgres SUPERUSER")),
        ("sql_statement_refused",
         x("CREATE FUNCTION f0() RETURNS text LANGUAGE sql AS $$ SELECT pg_read_file('x') $$")),
        ("sql_permission_denied", x("CREATE TEMP TABLE tt (x int)")),
        ("ok", fn("rd", r.format("'SELECT pg_read' || '_file(''/etc/passwd'')'"))),
        ("sql_permission_denied", q("SELECT rd()")),
        ("ok", fn("peek", r.format(f"'SELECT string_agg(s, '','') FROM {victim}' || '.secrets'"))),
        ("sql_permission_denied", q("SELECT peek()")),
        ("ok", fn("su", r.format("'S' || 'ET ROLE postgres'"))),
        ("sql_", q("SELECT su()")),
        ("ok", fn("lo", r.format("'SELECT lo_' || 'import(''/etc/passwd'')::text'"))),
        ("sql_permission_denied", q("SELECT lo()")),
        ("sql_statement_refused", fn("notimeout", "BEGIN PERFORM set_config('statement_timeout', '0', false);"
                                     " PERFORM pg_sleep(5);"
                  " RETURN 1; END", returns="int")),
        ("ok", fn("nap", "BEGIN EXECUTE 'SELECT set_' || 'config(''statement_timeout'', ''0'', false)';"
                  " PERFORM pg_sleep(5); RETURN 1; END", returns="int")),
        ("sql_timeout", q("SELECT nap()")),
        ("sql_timeout", q("SELECT pg_sleep(5)")),
        ("sql_timeout", q("SELECT count(*) FROM (SELECT generate_series(1, 1000000000000)) s")),
        ("sql_resource_limit", q("SELECT g FROM generate_series(1, 1000000000000) g")),  # temp files: bounded
        ("ok:truncated", q("SELECT generate_series(1, 1000000000000)")),  # streamed: the row cap stops it
        ("sql_quota_exceeded", x("INSERT INTO t SELECT repeat(md5(g::text), 40) FROM generate_series(1, 20000) g")),
        ("sql_permission_denied", q("SELECT rolpassword FROM pg_authid")),
        ("ok", fn("alter_me", "BEGIN EXECUTE 'ALTER ROLE ' || current_user || ' S' || 'ET statement_timeout = 0';"
                  " RETURN 1; END", returns="int")),
        ("sql_", q("SELECT alter_me()")),
        ("sql_timeout", q("SELECT pg_sleep(5)")),  # still bounded: the runtime sets the timeout per call
        ("sql_scope_not_permitted", ("Memory", {"op": "sql_query", "scope": "user", "statement": "SELECT 1"})),
        ("sql_scope_not_permitted", ("Memory", {"op": "sql_query", "scope": "tenant", "statement": "SELECT 1"})),
        ("ok", fn("readonly_dodge", "BEGIN INSERT INTO t VALUES ('w'); RETURN 1; END", returns="int")),
        ("sql_permission_denied", q("SELECT readonly_dodge()")),  # sql_query's transaction is read-only
    ]


async def test_a_hostile_agent_stays_in_its_scope(open_rt: Any, migrated_db_url: str) -> None:
    victim_schema, _ = SqlMemory(migrated_db_url).names(ScopeKey("default", "agent", "alice"))
    plan = attempts(victim_schema)
    alice = scripted(x("CREATE TABLE secrets (s text)"), x("INSERT INTO secrets VALUES ($1)", args=["alice-secret"]),
                     sql_scopes=["agent"])
    mallory = scripted(x("CREATE TABLE t (s text)"), *[call for _, call in plan], sql_scopes=["agent", "run"],
                       max_iterations=200)
    reader = scripted(q("SELECT s FROM secrets"), sql_scopes=["agent"])
    rt, disp = await open_rt({"agents": {"alice": alice, "mallory": mallory}, **SQL})
    assert all(not err for err, _ in await tool_results(rt, (await run_agent(rt, disp, "alice")).id))

    run = await run_agent(rt, disp, "mallory")
    results = (await tool_results(rt, run.id))[1:]
    assert len(results) == len(plan)
    escapes = []
    for (expect, call), (err, out) in zip(plan, results, strict=True):
        if expect.startswith("ok"):
            if err or (expect == "ok:truncated" and not (out["truncated"] and len(out["rows"]) == 100)):
                escapes.append((call, out))
        elif not (err and expect in out):
            escapes.append((call, out))
    attempted = [e for e, _ in plan if not e.startswith("ok")]
    assert len(attempted) >= 25
    assert escapes == [], "\n".join(f"{c[1].get('statement')} -> {str(o)[:200]}" for c, o in escapes)

    # the victim's data is intact and the runtime answers
    rt2, disp2 = await open_rt({"agents": {"alice": reader}, **SQL})
    (err, out), = await tool_results(rt2, (await run_agent(rt2, disp2, "alice")).id)
    assert not err and out["rows"] == [["alice-secret"]]
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n, count(error) AS failed FROM sql_memory_audit"
                                 " WHERE run_id = %s", (run.id,))
        row = await cur.fetchone()
    unaudited = sum(e == "sql_scope_not_permitted" for e in attempted)  # refused before any scope was named
    assert row is not None and row["n"] == len(plan) + 1 - unaudited
    assert row["failed"] == len(attempted) - unaudited
