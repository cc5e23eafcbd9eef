"""A scripted agent edits a file in three steps through a real `treadle serve`, which is SIGKILLed
three times and restarted: once between two steps (a model call in flight), once the moment the
second edit shows in the file (a trigger makes recording a tool_result slow, so its result is not
committed yet and the restarted process runs that call again), and once before the final answer.
The file must end exactly as the three edits leave it — the second edit (a replace_all whose new
text contains its old text) would show twice if a re-run applied it again — and every call must
have one successful result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos import Replica, write_config
from tests.support.db import clone_database, drop_database
from tests.support.e2e import check_paired, execute, query, slow_trigger
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

START = "title: draft\nbeta\nend\n"
EDITS = [
    {"path": "doc.md", "old_string": "draft", "new_string": "final"},
    {"path": "doc.md", "old_string": "beta", "new_string": "beta beta", "replace_all": True},
    {"path": "doc.md", "old_string": "end", "new_string": "the end"},
]
EXPECTED = "title: final\nbeta beta\nthe end\n"
AFTER_SECOND = "title: final\nbeta beta\nend\n"
CONFIG = {
    "volumes": {"work": {"mode": "rw", "default": True}},
    "agents": {"editor": {
        "model": "script", "tools": ["Write", "Edit"], "volumes": ["work"],
        "mock": {"latency_ms": 400, "script": [
            {"tool": "Write", "input": {"path": "doc.md", "content": START}},
            *({"tool": "Edit", "input": e} for e in EDITS),
            {"text": "edited"},
        ]},
    }},
}


#: a tool_result takes 0.3 s to record, so the kill "as the second edit lands" falls between the
#: edit's write and the commit of its result — every time, not by luck
SLOW_RESULTS = slow_trigger("ws_slow_results", 0.3, "INSERT ON events", when="NEW.type = 'tool_result'")


@pytest.fixture
def db(server_url: str, migrated_template: str) -> Iterator[str]:
    url = clone_database(server_url, migrated_template, "kill9")
    yield url
    drop_database(server_url, url)


async def _results(url: str, run_id: str) -> list[dict[str, Any]]:
    return await query(url, "SELECT payload FROM events WHERE run_id = %s AND type = 'tool_result' ORDER BY seq",
                       (run_id,))


async def test_edits_survive_kill9_between_and_inside_steps(db: str, tmp_path: Path) -> None:
    await execute(db, SLOW_RESULTS)
    config = write_config(tmp_path / "treadle.yaml", CONFIG)
    srv = Replica(name="ws", database_url=db, config_path=config, workdir=tmp_path,
                  env={"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"})
    srv.start()
    try:
        await srv.wait_ready()
        async with TreadleClient(srv.url, timeout=10) as client:
            run_id = (await client.start_run("editor", "edit the doc"))["run_id"]

        def doc() -> Path | None:
            found = list((tmp_path / ".treadle" / "volumes").glob("t/*/v/work/doc.md"))
            return found[0] if found else None

        async def results_at_least(n: int) -> bool:
            return len(await _results(db, run_id)) >= n

        async def second_edit_visible() -> bool:
            path = doc()
            return path is not None and path.read_text() == AFTER_SECOND

        kills = []
        for label, reached in (("after the first edit's result", lambda: results_at_least(2)),
                               ("as the second edit lands", second_edit_visible),
                               ("after the third edit's result", lambda: results_at_least(4))):
            await until(reached, timeout=60, interval=0.005, what=label)
            srv.kill9()
            kills.append((label, len(await _results(db, run_id))))
            srv.start()
            await srv.wait_ready()

        async def ended() -> bool:
            rows = await query(db, "SELECT status FROM runs WHERE id = %s", (run_id,))
            return rows[0]["status"] in ("completed", "failed", "cancelled")

        await until(ended, timeout=60, interval=0.1, what="the run to end")
    finally:
        srv.stop()
    # the second kill hit the window a crash can open: the edit was on disk, its result was not
    assert kills[1] == ("as the second edit lands", 2), kills
    run = (await query(db, "SELECT status, stop_reason, error FROM runs WHERE id = %s", (run_id,)))[0]
    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn"), (run, kills, srv.log_tail())
    path = doc()
    assert path is not None and path.read_text() == EXPECTED, (path and path.read_text(), kills)
    results = [r["payload"] for r in await _results(db, run_id)]
    assert [r["is_error"] for r in results] == [False] * 4, results
    assert [r["tool_use"]["name"] for r in results] == ["Write", "Edit", "Edit", "Edit"]
    events = await query(db, "SELECT seq, type, payload, tool_use_id FROM events WHERE run_id = %s ORDER BY seq",
                         (run_id,))
    assert check_paired([{"seq": e["seq"], "type": e["type"], "_tuid": e["tool_use_id"], **e["payload"]}
                         for e in events]) == []
    print(f"kills (label, tool results committed at the kill): {kills}")
