"""Migrations: concurrent starts (tasks and separate processes) apply each version exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import psycopg

from treadle.store.migrate import available_migrations, migrate

EXPECTED_TABLES = ("runs", "events", "jobs", "memory", "treadle_migrations")

# Each child connects, reports "ready", waits for "go" on stdin, then migrates: both start at once.
CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from treadle.store.migrate import migrate
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    print(json.dumps(asyncio.run(migrate(sys.argv[1]))), flush=True)
    """
)


def versions() -> list[int]:
    return [m.version for m in available_migrations()]


def schema_state(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT version, count(*) FROM treadle_migrations GROUP BY version ORDER BY version")
        counts = {v: n for v, n in rows.fetchall()}
        tables = {
            name: conn.execute(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname = %s",
                (name,),
            ).fetchone()[0]  # type: ignore[index]
            for name in EXPECTED_TABLES
        }
        index = conn.execute("SELECT to_regclass('events_one_result_per_tool_use_uq') IS NOT NULL").fetchone()
    return {"counts": counts, "tables": tables, "index": index[0] if index else False}


def assert_migrated_once(url: str) -> None:
    state = schema_state(url)
    assert state["counts"] == {v: 1 for v in versions()}
    assert state["tables"] == {name: 1 for name in EXPECTED_TABLES}
    assert state["index"] is True


def test_migrations_are_numbered_and_ordered() -> None:
    migs = available_migrations()
    assert migs and [m.version for m in migs] == sorted({m.version for m in migs})
    assert migs[0].version == 1 and migs[0].name == "core" and "CREATE TABLE runs" in migs[0].sql


async def test_migrate_on_an_empty_database(fresh_db_url: str) -> None:
    assert await migrate(fresh_db_url) == versions()
    assert_migrated_once(fresh_db_url)
    assert await migrate(fresh_db_url) == []  # a second migrate applies nothing
    assert_migrated_once(fresh_db_url)


async def test_concurrent_migrate_tasks_apply_each_version_once(fresh_db_url: str) -> None:
    results = await asyncio.gather(*(migrate(fresh_db_url) for _ in range(4)))
    applied = sorted(v for r in results for v in r)
    assert applied == versions()
    assert sum(1 for r in results if r) == 1  # one caller applied everything, the others found it done
    assert_migrated_once(fresh_db_url)
    assert await migrate(fresh_db_url) == []


def migrate_in_processes(url: str, n: int) -> list[tuple[int, str, str]]:
    """Start `n` processes that migrate `url`, release them together, return (rc, stdout, stderr)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stderr is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", (line, p.stderr.read() if p.poll() is not None else "")
        for p in procs:  # release them as close together as we can
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]


async def test_concurrent_migrate_processes_apply_each_version_once(fresh_db_url: str) -> None:
    children = await asyncio.to_thread(migrate_in_processes, fresh_db_url, 2)
    assert [rc for rc, _, _ in children] == [0, 0], [err for _, _, err in children]
    applied = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in children]
    assert sorted(v for r in applied for v in r) == versions()
    assert sum(1 for r in applied if r) == 1
    assert_migrated_once(fresh_db_url)
    assert await migrate(fresh_db_url) == []
