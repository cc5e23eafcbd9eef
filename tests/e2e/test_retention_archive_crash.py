"""Retention's archive survives kill -9 (issue 42 item 4): `treadle serve` is SIGKILLed while a
batch sits between its archive write and its commit (the batch's DELETE held by a slow trigger).
Nothing was deleted — the batch's transaction died with the process — and the file already written
holds exactly that batch; after the restart the same batch is archived again under the same name
(a file's name is its content's hash) and deleted: every expired run is in the archive exactly
once, and none is left in the database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.e2e import execute, query
from treadle.testing import until

pytestmark = pytest.mark.e2e

USERS = ("u0", "u1", "u2")
N_RUNS = 30
SLOW_DELETE = """
CREATE FUNCTION slow_run_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(30);
    RETURN OLD;
END $$;
CREATE TRIGGER slow_run_delete BEFORE DELETE ON runs FOR EACH ROW WHEN (OLD.id = 'x-0')
    EXECUTE FUNCTION slow_run_delete();
"""


def archived(root: Path) -> list[tuple[str, str]]:
    """(run id, user directory) of every run line in the archive, duplicates kept."""
    out: list[tuple[str, str]] = []
    for p in root.rglob("*.jsonl"):
        parts = p.parts
        who = parts[parts.index("u") + 1] if "u" in parts else "_"
        out += [(json.loads(line)["run"]["id"], who) for line in p.read_text().splitlines()]
    return out


async def test_a_batch_killed_between_its_archive_and_its_commit_is_archived_once(
    make_db: Any, start_server: Any, tmp_path: Path
) -> None:
    url = make_db("archivecrash", migrated=True)
    await query(url, "INSERT INTO runs (id, root_run_id, tenant_id, user_id, agent, status, stop_reason,"
                     " completed_at, created_at, last_seq) SELECT 'x-' || g, 'x-' || g, 'default',"
                     " 'u' || (g %% 3), 'echo', 'completed', 'end_turn', now() - interval '40 days',"
                     " now() - interval '41 days', 2 FROM generate_series(0, %s) g RETURNING 1", (N_RUNS - 1,))
    await query(url, "INSERT INTO events (run_id, seq, tenant_id, type, payload, created_at) SELECT 'x-' || g, s,"
                     " 'default', 'text', jsonb_build_object('text', 'words of x-' || g), now() - interval '41 days'"
                     " FROM generate_series(0, %s) g, generate_series(1, 2) s RETURNING 1", (N_RUNS - 1,))
    await execute(url, SLOW_DELETE)
    volumes = tmp_path / "volumes"
    vault = volumes / "t" / "default" / "v" / "vault" / "retention" / "runs"
    srv = await start_server(url, {"echo": {"model": "echo"}}, name="archivecrash", TREADLE_VOLUMES_ROOT=str(volumes),
                             extra_config={"volumes": {"vault": {}},
                                           "retention": {"days": 30, "archive": {"volume": "vault"}}})

    async def written() -> bool:
        return bool(archived(vault))

    await until(written, timeout=60, interval=0.05, what="the batch's archive written")
    async def sleeping() -> bool:  # the batch's DELETE is in the slow trigger: not committed
        rows = await query(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
                                " AND query LIKE '%%DELETE FROM runs%%' AND state = 'active'"
                                " AND pid <> pg_backend_pid()")  # (this database: other tests share the cluster)
        return int(rows[0]["n"]) >= 1

    await until(sleeping, timeout=60, interval=0.05, what="the batch's DELETE in the slow trigger")
    srv.kill9()
    first = archived(vault)
    assert sorted(r for r, _ in first) == sorted(f"x-{g}" for g in range(N_RUNS))  # the whole batch, once
    await query(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                     " AND query LIKE '%%DELETE FROM runs%%' AND pid <> pg_backend_pid()")
    left = await query(url, "SELECT count(*) AS n FROM runs WHERE id LIKE 'x-%%'")
    assert left[0]["n"] == N_RUNS  # the batch's transaction died with the process: nothing deleted
    await execute(url, "DROP TRIGGER slow_run_delete ON runs")

    await srv.restart()

    async def gone() -> bool:
        rows = await query(url, "SELECT count(*) AS n FROM runs WHERE id LIKE 'x-%%'")
        return bool(rows[0]["n"] == 0)

    await until(gone, timeout=60, interval=0.1, what="the expired runs deleted after the restart")
    after = archived(vault)
    assert sorted(r for r, _ in after) == sorted(f"x-{g}" for g in range(N_RUNS))  # archived once, not twice
    assert {(r, who) for r, who in after} == {(f"x-{g}", f"u{g % 3}") for g in range(N_RUNS)}
    events = await query(url, "SELECT count(*) AS n FROM events WHERE run_id LIKE 'x-%%'")
    assert events[0]["n"] == 0
