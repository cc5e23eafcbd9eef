"""Numbered SQL migrations, applied in order under an advisory lock (safe with concurrent starts)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from treadle.errors import StoreError

MIGRATIONS_LOCK_KEY = 0x7472_6164_6C65  # "tradle": one lock for every treadle process on a database
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in resources.files("treadle.store.migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if len(set(versions)) != len(versions):
        raise StoreError(f"duplicate migration numbers: {versions}")
    return found


async def applied_versions(conn: psycopg.AsyncConnection[Any]) -> set[int]:
    cur = await conn.execute("SELECT to_regclass('treadle_migrations') IS NOT NULL AS present")
    row = await cur.fetchone()
    present = row["present"] if isinstance(row, dict) else row[0]  # type: ignore[index]
    if not present:
        return set()
    cur = await conn.execute("SELECT version FROM treadle_migrations")
    return {(r["version"] if isinstance(r, dict) else r[0]) for r in await cur.fetchall()}  # type: ignore[index,unused-ignore]


async def migrate(url: str) -> list[int]:
    """Apply every pending migration; returns the versions this call applied."""
    applied_now: list[int] = []
    try:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"database unreachable: {exc}") from exc
    async with conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATIONS_LOCK_KEY,))
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS treadle_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = await applied_versions(conn)
            for mig in available_migrations():
                if mig.version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(mig.sql.encode())
                    await conn.execute(
                        "INSERT INTO treadle_migrations (version, name) VALUES (%s, %s)",
                        (mig.version, mig.name),
                    )
                applied_now.append(mig.version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATIONS_LOCK_KEY,))
    return applied_now
