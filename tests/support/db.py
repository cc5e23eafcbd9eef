"""Test databases on one Postgres server ($DATABASE_URL, else the embedded pgserver under
.treadle/test): empty ones, and migrated ones cloned from a migrated template.

Cloning (`CREATE DATABASE … TEMPLATE`) copies the template's files instead of replaying every
migration, so a migrated database costs about half as much as create + migrate. Postgres refuses
to clone a database that has any other session, so the template is closed to connections
(`ALLOW_CONNECTIONS false`) as soon as it is migrated: nothing can connect to it afterwards.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from treadle.store.db import resolve_database_url
from treadle.store.migrate import migrate

ROOT = Path(__file__).resolve().parents[2]
TEST_HOME = ROOT / ".treadle" / "test"
PREFIX = "treadle_"  # every database the tests create (and only those) is dropped by name


def server_url() -> str:
    """An admin URL of the Postgres server the tests use."""
    TEST_HOME.mkdir(parents=True, exist_ok=True)
    return resolve_database_url(os.environ.get("DATABASE_URL"), TEST_HOME)


def db_name(url: str) -> str:
    name = conninfo_to_dict(url).get("dbname")
    assert isinstance(name, str) and name.startswith(PREFIX), f"not a test database: {name!r}"
    return name


def create_database(server_url: str, prefix: str = "t", *, template: str | None = None) -> str:
    """A new database (empty, or a copy of `template`); returns its URL."""
    name = f"{PREFIX}{prefix}_{secrets.token_hex(4)}"
    sql = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql)
    return make_conninfo(server_url, dbname=name)


def drop_database(server_url: str, url: str) -> None:
    name = db_name(url)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def create_template(server_url: str, prefix: str = "tmpl") -> str:
    """A migrated database to clone, closed to connections; returns its name."""
    url = create_database(server_url, prefix)
    await migrate(url)  # its connection is closed when migrate returns
    name = db_name(url)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false')
        # a backend that is still exiting would make the first clone wait for it
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
    return name


def drop_template(server_url: str, name: str) -> None:
    assert name.startswith(PREFIX)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE false')
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def clone_database(server_url: str, template: str, prefix: str = "m") -> str:
    """A migrated database: a copy of the template (see `create_template`); returns its URL."""
    return create_database(server_url, prefix, template=template)


#: the machine's own PostgreSQL (CI machines run one beside the embedded server; it has no pgvector)
LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres?connect_timeout=3"


def has_pgvector(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return bool(row and row[0])


def server_without_pgvector(server_url: str) -> str | None:
    """An admin URL of a server without pgvector (the test server, else the machine's local
    PostgreSQL), for the tests of what treadle does there; None when there is none."""
    for url in (server_url, LOCAL_SERVER):
        try:
            if not has_pgvector(url):
                return url
        except psycopg.OperationalError:
            continue
    return None
