"""SQL memory through the Memory tool: tables, bound args, RETURNING, the row cap, scopes apart
(agent vs run vs another tenant), default-deny sql_scopes, and the server without memory.sql."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import ok_results, run_agent, scripted, tool_results

SQL = {"memory": {"sql": {"max_rows": 3}}}


def op(op: str, scope: str = "agent", **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Memory", {"op": op, "scope": scope, **kw})


async def test_tables_args_returning_and_the_row_cap(open_rt: Any) -> None:
    agent = scripted(
        op("sql_exec", statement="CREATE TABLE notes (id serial PRIMARY KEY, body text, tags jsonb)"),
        op("sql_exec", statement="INSERT INTO notes (body, tags) VALUES ($1, $2), ($1 || '!', $2) RETURNING id;",
           args=["100% sure", {"k": ["a"]}]),
        op("sql_query", statement="SELECT body, tags->'k' AS k FROM notes WHERE body LIKE '100%' ORDER BY id"),
        op("sql_query", statement="SELECT g FROM generate_series(1, 10) g"),
        op("sql_exec", "run", statement="CREATE TABLE scratch (x int)"),
        op("sql_query", "run", statement="SELECT count(*) AS n FROM scratch"),
        op("sql_query", "run", statement="SELECT count(*) FROM notes"),  # the agent scope's table: not here
        sql_scopes=["agent", "run"])
    rt, disp = await open_rt({"agents": {"notes": agent}, **SQL})
    results = await tool_results(rt, (await run_agent(rt, disp, "notes")).id)
    created, inserted, selected, capped, scratch, counted, apart = results
    assert not created[0] and not inserted[0], results
    assert inserted[1]["rows_affected"] == 2 and inserted[1]["rows"] == [[1], [2]]
    assert inserted[1]["last_insert_id"] is None
    assert selected[1] == {"columns": ["body", "k"], "rows": [["100% sure", ["a"]], ["100% sure!", ["a"]]],
                           "truncated": False}
    assert capped[1]["rows"] == [[1], [2], [3]] and capped[1]["truncated"] is True
    assert not scratch[0] and counted[1]["rows"] == [[0]]
    assert apart[0] and "sql_error" in apart[1] and "notes" in apart[1]
    assert sorted(k.scope for k in await rt.sql_memory.scopes()) == ["agent", "run"]
    await rt.triggers.sweeper().tick_once()  # the run has ended: its scratch database goes
    assert [k.scope for k in await rt.sql_memory.scopes()] == ["agent"]


async def test_sql_scopes_are_default_deny_and_fields_are_checked(open_rt: Any) -> None:
    plain = scripted(op("sql_query", statement="SELECT 1"))
    agent = scripted(op("sql_begin"), op("sql_query", statement="SELECT 1", key="k"),
                     op("sql_query", statement="SELECT $2", args=[1]), op("set", key="k", value=1, statement="x"),
                     sql_scopes=["agent"])
    rt, disp = await open_rt({"agents": {"plain": plain, "t": agent}, **SQL})
    (err, text), = await tool_results(rt, (await run_agent(rt, disp, "plain")).id)
    assert err and "sql_scope_not_permitted" in text and "default-deny" in text
    begin, keyed, unbound, kv = await tool_results(rt, (await run_agent(rt, disp, "t")).id)
    assert begin[0] and "sql_transactions_unsupported" in begin[1]
    assert keyed[0] and "key does not apply" in keyed[1]
    assert unbound[0] and "$2 has no value" in unbound[1]
    assert kv[0] and "statement applies to the sql_* ops only" in kv[1]


async def test_without_memory_sql_the_ops_say_so(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {"a": scripted(op("sql_query", statement="SELECT 1"), sql_scopes=["agent"])}})
    (err, text), = await tool_results(rt, (await run_agent(rt, disp, "a")).id)
    assert err and "sql_not_enabled" in text


async def test_tenants_and_agents_have_their_own_databases(open_rt: Any) -> None:
    writer = scripted(op("sql_exec", statement="CREATE TABLE t (v text)"),
                      op("sql_exec", statement="INSERT INTO t VALUES ('mine')"), sql_scopes=["agent"])
    reader = scripted(op("sql_query", statement="SELECT v FROM t"), sql_scopes=["agent"])
    rt, disp = await open_rt({"agents": {"w": writer, "r": reader}, **SQL})
    await ok_results(rt, (await run_agent(rt, disp, "w")).id)
    (err, text), = await tool_results(rt, (await run_agent(rt, disp, "r")).id)
    assert err and 'relation "t" does not exist' in text
    other = await tool_results(rt, (await run_agent(rt, disp, "w", tenant="other")).id, tenant="other")
    assert all(not e for e, _ in other)  # the same agent in another tenant: a database of its own
    assert len(await rt.sql_memory.scopes()) == 3


async def test_erasing_a_tenant_drops_its_sql_scopes(open_rt: Any) -> None:
    from tests.support.tenancy import api, bearer, mint

    writer = scripted(op("sql_exec", statement="CREATE TABLE t (v text)"), sql_scopes=["agent"])
    rt, disp = await open_rt({"agents": {"w": writer}, **SQL})
    for tenant in ("acme", "other"):
        await ok_results(rt, (await run_agent(rt, disp, "w", tenant=tenant)).id, tenant=tenant)
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        r = await c.delete("/v1/_admin/tenants/acme", params={"confirm": "acme"}, headers=operator)
        assert r.status_code == 200, r.text
        assert r.json()["deleted"]["sql_memory_scopes"] == 1
    assert [k.tenant for k in await rt.sql_memory.scopes()] == ["other"]
