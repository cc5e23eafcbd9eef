"""One SQL-memory scope as portable text (issue 41 item 5): what a snapshot and a tenant export
carry of a scope's schema, read from the catalogue — no `pg_dump` (the cloud shape has none).

    {"pre":  [DDL before the rows: enum/composite types, domains, functions, sequences, tables],
     "data": [{"table", "columns", "copy"}: the rows in COPY's text format],
     "sequences": [{"name" | "identity": [table, column], "value", "is_called"}],
     "post": [DDL after the rows: constraints, foreign keys, views, indexes, triggers],
     "not_carried": ["partitioned table x", "1 rule", ...]}

Every statement names the scope's objects without a schema (read with `search_path` set to the
scope's schema; the few definitions Postgres always qualifies are unqualified here), so it
restores into whatever schema the target names the scope — another database's, another
tenant's. The rows are read in one REPEATABLE READ transaction (a consistent scope). Objects an
agent can make but this does not carry (partitioned tables, rules, row policies, ranges,
aggregates, operators, collations, text search, statistics) are named in `not_carried`; the
restore reports them (treadle/portable/snapshots.py)."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import sql


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _unqualify(definition: str, schema: str, after: str) -> str:
    """`definition` with the first `<after><schema>.` (Postgres's always-qualified name) made bare."""
    pattern = re.compile(re.escape(after) + r"(ONLY )?" + "(?:" + re.escape(schema) + "|" +
                         re.escape(ident(schema)) + r")\.")
    return pattern.sub(lambda m: after + (m.group(1) or ""), definition, count=1)


_RELS = """SELECT c.oid, c.relname, c.relkind, c.relpersistence, c.relispartition FROM pg_class c
            WHERE c.relnamespace = %(ns)s::regnamespace ORDER BY c.oid"""
_COLUMNS = """SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, a.attidentity,
                     a.attgenerated, pg_get_expr(d.adbin, d.adrelid) AS expr
                FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
               WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"""
_CONSTRAINTS = """SELECT k.conname, k.contype, k.conrelid::regclass::text AS rel, pg_get_constraintdef(k.oid) AS def
                    FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
                   WHERE c.relnamespace = %(ns)s::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
                     AND k.contype IN ('p', 'u', 'x', 'c', 'f')
                   ORDER BY CASE k.contype WHEN 'p' THEN 0 WHEN 'u' THEN 1 WHEN 'x' THEN 2 WHEN 'c' THEN 3 ELSE 4 END,
                            k.oid"""
_INDEXES = """SELECT pg_get_indexdef(i.indexrelid) AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
               WHERE c.relnamespace = %(ns)s::regnamespace AND c.relkind IN ('r', 'm') AND NOT c.relispartition
                 AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid
                                    AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))
               ORDER BY i.indexrelid"""
_TRIGGERS = """SELECT pg_get_triggerdef(t.oid) AS def FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                WHERE c.relnamespace = %(ns)s::regnamespace AND NOT t.tgisinternal ORDER BY t.oid"""
_FUNCTIONS = """SELECT p.prokind, pg_get_functiondef(p.oid) AS def FROM pg_proc p
                 WHERE p.pronamespace = %(ns)s::regnamespace AND p.prokind IN ('f', 'p') ORDER BY p.oid"""
_SEQUENCES = """SELECT c.relname, format_type(s.seqtypid, NULL) AS type, s.seqstart, s.seqincrement, s.seqmax,
                       s.seqmin, s.seqcache, s.seqcycle, d.deptype, o.relname AS owner, a.attname AS column
                  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
                  LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
                        AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
                  LEFT JOIN pg_class o ON o.oid = d.refobjid
                  LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                 WHERE c.relnamespace = %(ns)s::regnamespace ORDER BY c.oid"""
_ENUMS = """SELECT t.typname, array_agg(e.enumlabel ORDER BY e.enumsortorder) AS labels
              FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid
             WHERE t.typnamespace = %(ns)s::regnamespace GROUP BY t.oid, t.typname ORDER BY t.oid"""
_DOMAINS = """SELECT t.oid, t.typname, format_type(t.typbasetype, t.typtypmod) AS base, t.typnotnull, t.typdefault
                FROM pg_type t WHERE t.typnamespace = %(ns)s::regnamespace AND t.typtype = 'd' ORDER BY t.oid"""
_DOMAIN_CHECKS = "SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE contypid = %s ORDER BY oid"
#: (what, count query): objects an agent can make that a snapshot does not carry
_NOT_CARRIED = (
    ("rule", "SELECT count(*) AS n FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class"
             " WHERE c.relnamespace = %(ns)s::regnamespace AND r.rulename <> '_RETURN'"),
    ("row policy", "SELECT count(*) AS n FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid"
                   " WHERE c.relnamespace = %(ns)s::regnamespace"),
    ("range type", "SELECT count(*) AS n FROM pg_type WHERE typnamespace = %(ns)s::regnamespace AND typtype = 'r'"),
    ("aggregate or window function", "SELECT count(*) AS n FROM pg_proc WHERE pronamespace = %(ns)s::regnamespace"
                                     " AND prokind IN ('a', 'w')"),
    ("operator", "SELECT count(*) AS n FROM pg_operator WHERE oprnamespace = %(ns)s::regnamespace"),
    ("collation", "SELECT count(*) AS n FROM pg_collation WHERE collnamespace = %(ns)s::regnamespace"),
    ("statistics object", "SELECT count(*) AS n FROM pg_statistic_ext WHERE stxnamespace = %(ns)s::regnamespace"),
    ("text search configuration", "SELECT count(*) AS n FROM pg_ts_config WHERE cfgnamespace = %(ns)s::regnamespace"),
)


async def dump_scope(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, Any]:
    """The scope's schema and rows (see the module docstring). `conn`: an admin connection
    (autocommit, dict rows); the reads run in a REPEATABLE READ transaction of it."""
    ns = {"ns": schema}
    pre: list[str] = []
    post: list[str] = []
    data: list[dict[str, Any]] = []
    seqs: list[dict[str, Any]] = []
    not_carried: list[str] = []
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        await conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(schema)))
        for r in await (await conn.execute(_ENUMS, ns)).fetchall():
            pre.append(f"CREATE TYPE {ident(r['typname'])} AS ENUM ({', '.join(literal(x) for x in r['labels'])})")
        for r in await (await conn.execute(_DOMAINS, ns)).fetchall():
            text = f"CREATE DOMAIN {ident(r['typname'])} AS {r['base']}"
            text += f" DEFAULT {r['typdefault']}" if r["typdefault"] is not None else ""
            pre.append(text + (" NOT NULL" if r["typnotnull"] else ""))
            for k in await (await conn.execute(_DOMAIN_CHECKS, (r["oid"],))).fetchall():
                pre.append(f"ALTER DOMAIN {ident(r['typname'])} ADD CONSTRAINT {ident(k['conname'])} {k['def']}")
        rels = await (await conn.execute(_RELS, ns)).fetchall()
        for r in rels:  # standalone composite types
            if r["relkind"] == "c":
                cols = await (await conn.execute(_COLUMNS, (r["oid"],))).fetchall()
                pre.append(f"CREATE TYPE {ident(r['relname'])} AS ("
                           + ", ".join(f"{ident(c['attname'])} {c['type']}" for c in cols) + ")")
        for r in await (await conn.execute(_FUNCTIONS, ns)).fetchall():
            kind = "FUNCTION" if r["prokind"] == "f" else "PROCEDURE"
            pre.append(_unqualify(r["def"].strip(), schema, f"CREATE OR REPLACE {kind} "))
        owned: list[str] = []
        for r in await (await conn.execute(_SEQUENCES, ns)).fetchall():
            got = await (await conn.execute(sql.SQL("SELECT last_value, is_called FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(r["relname"])))).fetchone()
            assert got is not None
            state = {"value": int(got["last_value"]), "is_called": bool(got["is_called"])}
            if r["deptype"] == "i":  # an identity column's: made with its table
                seqs.append({"identity": [r["owner"], r["column"]], **state})
                continue
            pre.append(
                f"CREATE SEQUENCE {ident(r['relname'])} AS {r['type']} INCREMENT BY {r['seqincrement']}"
                f" MINVALUE {r['seqmin']} MAXVALUE {r['seqmax']} START WITH {r['seqstart']} CACHE {r['seqcache']}"
                + (" CYCLE" if r["seqcycle"] else ""))
            seqs.append({"name": r["relname"], **state})
            if r["deptype"] == "a" and r["owner"]:
                owned.append(f"ALTER SEQUENCE {ident(r['relname'])} OWNED BY {ident(r['owner'])}.{ident(r['column'])}")
        for r in rels:
            if r["relkind"] in ("p", "f") or r["relispartition"]:
                not_carried.append(f"{'foreign' if r['relkind'] == 'f' else 'partitioned'} table {r['relname']}")
            if r["relkind"] != "r" or r["relispartition"]:
                continue
            cols = await (await conn.execute(_COLUMNS, (r["oid"],))).fetchall()
            pre.append(("CREATE UNLOGGED TABLE " if r["relpersistence"] == "u" else "CREATE TABLE ")
                       + ident(r["relname"]) + " (" + ", ".join(_column(c) for c in cols) + ")")
            stored = [c["attname"] for c in cols if not c["attgenerated"]]
            data.append({"table": r["relname"], "columns": stored,
                         "copy": await _copy_out(conn, schema, r["relname"], stored)})
        pre.extend(owned)
        fks: list[str] = []
        for k in await (await conn.execute(_CONSTRAINTS, ns)).fetchall():
            text = f"ALTER TABLE {ident(_bare(k['rel'], schema))} ADD CONSTRAINT {ident(k['conname'])} {k['def']}"
            (fks if k["contype"] == "f" else post).append(text)
        post.extend(fks)
        for r in rels:
            if r["relkind"] in ("v", "m"):
                view = (await (await conn.execute("SELECT pg_get_viewdef(%s::oid) AS d", (r["oid"],))).fetchone())
                assert view is not None
                body = str(view["d"]).strip().rstrip(";")
                post.append(f"CREATE VIEW {ident(r['relname'])} AS {body}" if r["relkind"] == "v"
                            else f"CREATE MATERIALIZED VIEW {ident(r['relname'])} AS {body} WITH DATA")
        for r in await (await conn.execute(_INDEXES, ns)).fetchall():
            post.append(_unqualify(r["def"], schema, " ON "))
        for r in await (await conn.execute(_TRIGGERS, ns)).fetchall():
            post.append(_unqualify(r["def"], schema, " ON "))
        for what, query in _NOT_CARRIED:
            row = await (await conn.execute(query, ns)).fetchone()
            if row and row["n"]:
                not_carried.append(f"{row['n']} {what}{'s' if row['n'] > 1 else ''}")
    return {"pre": pre, "data": data, "sequences": seqs, "post": post, "not_carried": not_carried}


def _bare(regclass: str, schema: str) -> str:
    """A table's name from its regclass text (qualified only when not on the search_path)."""
    for prefix in (schema + ".", ident(schema) + "."):
        if regclass.startswith(prefix):
            regclass = regclass[len(prefix):]
    if regclass.startswith('"') and regclass.endswith('"'):
        return regclass[1:-1].replace('""', '"')
    return regclass


def _column(c: dict[str, Any]) -> str:
    text = f"{ident(c['attname'])} {c['type']}"
    if c["attgenerated"] == "s":
        text += f" GENERATED ALWAYS AS ({c['expr']}) STORED"
    elif c["attidentity"] in ("a", "d"):
        text += f" GENERATED {'ALWAYS' if c['attidentity'] == 'a' else 'BY DEFAULT'} AS IDENTITY"
    elif c["expr"] is not None:
        text += f" DEFAULT {c['expr']}"
    return text + (" NOT NULL" if c["attnotnull"] else "")


async def _copy_out(conn: psycopg.AsyncConnection[Any], schema: str, table: str, columns: list[str]) -> str:
    query = sql.SQL("COPY (SELECT {} FROM {}.{}) TO STDOUT").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in columns), sql.Identifier(schema), sql.Identifier(table))
    out = bytearray()
    async with conn.cursor() as cur, cur.copy(query) as copy:
        async for chunk in copy:
            out += chunk
    return out.decode()
