"""A subject's erasure under kill -9 (issue 42 item 4): `treadle serve` is SIGKILLed after the
erasure deleted the subject's volume files and while its rows' transaction is still open (a slow
trigger holds its DELETE of `volume_files`). The rows are all still there (the transaction died
with the process), the files are gone; the erasure asked again after the restart finishes the
rows — and then no row of any table and no file under the volumes root mentions the subject,
while another user's note stays."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.mcp.test_client_tools import rows_containing
from tests.support.e2e import execute, query
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e

ALICE, BOB = "alice-" + secrets.token_hex(4), "bob-" + secrets.token_hex(4)
WORDS = {ALICE: "alice-words-" + secrets.token_hex(6), BOB: "bob-words-" + secrets.token_hex(6)}
AGENTS = {f"w-{u.split('-')[0]}": {"model": "script", "tools": ["Write"], "volumes": ["notes"], "mock": {"script": [
    {"tool": "Write", "input": {"path": f"by/{u}.md", "content": WORDS[u]}}, {"text": "noted"}]}} for u in WORDS}
SLOW = """
CREATE FUNCTION slow_volume_files_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(30);
    RETURN OLD;
END $$;
CREATE TRIGGER slow_volume_files_delete BEFORE DELETE ON volume_files FOR EACH ROW
    EXECUTE FUNCTION slow_volume_files_delete();
"""


def mentioning(root: Path, needles: list[str]) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                  and any(n in str(p) or n.encode() in p.read_bytes() for n in needles))


async def test_an_erasure_killed_mid_way_is_finished_by_asking_again(
    make_db: Any, start_server: Any, tmp_path: Path
) -> None:
    url = make_db("erasurecrash", migrated=True)
    volumes = tmp_path / "volumes"
    srv = await start_server(url, AGENTS, name="erasurecrash", TREADLE_VOLUMES_ROOT=str(volumes),
                             extra_config={"volumes": {"notes": {}}})
    async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=10) as http:
        for user in WORDS:
            r = await http.post("/v1/runs", json={"agent": f"w-{user.split('-')[0]}", "prompt": WORDS[user],
                                                  "user_id": user})
            assert r.status_code == 202, r.text

    async def written() -> bool:
        return len(mentioning(volumes, list(WORDS.values()))) == 2

    await until(written, timeout=60, interval=0.05, what="both notes written")
    await execute(url, SLOW)
    body = {"subject": ALICE, "dry_run": False, "confirm": ALICE}

    async def erase_in_background() -> None:
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=60) as http:
            with contextlib.suppress(httpx.HTTPError):  # the server dies under it
                await http.post("/v1/_erasure", json=body)

    pending = asyncio.create_task(erase_in_background())

    async def files_gone_rows_held() -> bool:
        active = await query(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE state = 'active'"
                                  " AND query LIKE '%%DELETE FROM volume_files%%'")
        return bool(active[0]["n"]) and not mentioning(volumes, [WORDS[ALICE]])

    await until(files_gone_rows_held, timeout=60, interval=0.05, what="the files deleted, the rows' DELETE held")
    srv.kill9()
    await pending
    await query(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE"
                     " '%%DELETE FROM volume_files%%' AND pid <> pg_backend_pid()")
    await execute(url, "DROP TRIGGER slow_volume_files_delete ON volume_files")
    left = await query(url, "SELECT count(*) AS n FROM runs WHERE user_id = %s", (ALICE,))
    assert left[0]["n"] == 1  # the rows' transaction died with the process

    await srv.restart()
    async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30) as http:
        again = await http.post("/v1/_erasure", json=body)
    assert again.status_code == 200, again.text
    receipt = again.json()
    assert receipt["deleted"]["runs"] == 1 and receipt["files"] == []  # its file went before the kill
    assert mentioning(volumes, [ALICE, WORDS[ALICE]]) == []
    assert [h for h in rows_containing(url, [ALICE, WORDS[ALICE]]) if h] == []
    assert mentioning(volumes, [WORDS[BOB]]) == [f"t/default/v/notes/by/{BOB}.md"]
