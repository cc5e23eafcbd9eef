"""A continuation's history kept per process (engine/history.py): the next turn reads only the runs
since the last one it built, and the result is exactly what reading the whole session gives — also
after a marker is appended to an earlier, ended run (a manual compaction), which the fingerprint
catches."""

from __future__ import annotations

from typing import Any

from treadle.engine.history import SessionHistories
from treadle.store.runs import NewRun

TENANT = "default"
AGENT = {"model": "echo", "compaction": {"keep_last_n": 2}}


def _texts(messages: list[Any]) -> list[tuple[str, str]]:
    return [(m.role, m.text()) for m in messages]


async def test_the_kept_history_equals_a_full_read(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"chat": AGENT})
    session_id: str | None = None
    runs: list[str] = []

    async def turn(k: int) -> str:
        nonlocal session_id
        seg = [{"role": "user", "content": [{"type": "trusted-text", "text": f"message {k}"}]}]
        run, _ = await rt.start_run(
            NewRun(tenant_id=TENANT, agent="chat", segments=seg, user_id="ada", session_id=session_id)
        )
        await disp.drain()
        session_id = run.session
        runs.append(run.id)
        return str(run.id)

    async def agrees(run_id: str) -> list[tuple[str, str]]:
        leased = await rt.engine.steps.read(TENANT, run_id)
        assert leased is not None
        kept = await rt.engine.histories.of(leased)  # what the run was given (kept since)
        fresh = await SessionHistories(rt.engine.steps).of(leased)  # a new process: everything read
        assert _texts(kept) == _texts(fresh)
        return _texts(kept)

    for k in range(1, 5):
        await turn(k)
    assert [t for _, t in await agrees(runs[3])] == [
        "message 1",
        "message 1",
        "message 2",
        "message 2",
        "message 3",
        "message 3",
    ]
    # a manual compaction of the last run, then of an earlier one (ended: the marker is appended)
    assert (await rt.compact_run(TENANT, runs[3]))["applied"] == "marker"
    await turn(5)
    history = await agrees(runs[4])
    assert "compacted to a summary" in history[0][1]
    assert (await rt.compact_run(TENANT, runs[3]))["applied"] == "marker"  # runs[3] is before the kept tail
    await turn(6)
    again = await agrees(runs[5])
    assert again != history[: len(again)] and again[-2:] == [("user", "message 5"), ("assistant", "message 5")]
