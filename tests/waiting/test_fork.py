"""Fork a run at any event (issue 36 item 4): POST /v1/runs/{id}/fork {at_seq, prompt?, agent?}
starts a new run whose history is the original's up to `at_seq` — moved back so that no tool_use is
separated from its result — carried into a session of its own; the fork's model sees exactly that
history (the mock tool-caller counts the tool calls it sees), and the fork runs another agent when
asked. A 10-iteration run is forked at every seq."""

from __future__ import annotations

from typing import Any

from tests.support.e2e import check_paired
from tests.support.tenancy import api
from tests.support.waiting import ECHO, spawner, start, status
from treadle.domain.events import EventType
from treadle.engine.replay import replay
from treadle.store.sessions import CARRIED

CALLS = 10
LOOPER: dict[str, Any] = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": CALLS}}
AGENTS = {"looper": LOOPER, "echo": ECHO, "parent": spawner([{"name": "echo", "prompt": "child"}])}


def _expected_cut(events: list[dict[str, Any]], at_seq: int) -> int:
    """Independently of the code under test: at_seq, unless it falls inside a tool exchange (after
    a tool_call, before its result) — then just before that tool_call."""
    results = {e["tool_use"]["id"]: e["seq"] for e in events if e["type"] == "tool_result"}
    for e in events:
        if e["type"] == "tool_call" and e["seq"] <= at_seq < results[e["tool_use"]["id"]]:
            return int(e["seq"]) - 1
    return at_seq


async def _carried(rt: Any, session_id: str) -> list[tuple[str, Any]]:
    """The history a fork's session holds: its seed run's carried events (type, payload)."""
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT e.type, e.payload FROM runs r JOIN events e ON e.run_id = r.id"
            " WHERE r.session_id = %s AND r.session_seq = 0 AND e.type = ANY(%s) ORDER BY e.seq",
            (session_id, [str(t) for t in CARRIED]),
        )
        return [(r["type"], r["payload"]) for r in await cur.fetchall()]


async def test_a_ten_iteration_run_forked_at_every_seq_keeps_tool_pairs_whole(
    open_runtime: Any, migrated_db_url: str
) -> None:
    rt, disp = await open_runtime(AGENTS, url=migrated_db_url)
    original = await start(rt, "looper", "count to ten")
    await disp.drain()
    async with api(rt) as c:
        events = (await c.get(f"/v1/runs/{original}/events")).json()["events"]
        stored = [(e["seq"], e["type"], {k: v for k, v in e.items() if k not in ("seq", "type", "ts")}) for e in events]
        assert sum(e["type"] == "tool_call" for e in events) == CALLS and events[-1]["type"] == "done"
        by_seq = {e["seq"]: e for e in events}
        forks: dict[int, dict[str, Any]] = {}
        for at in range(1, len(events) + 1):
            r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": at, "prompt": "go on"})
            assert r.status_code == 202, (at, r.text)
            fork = forks[at] = r.json()
            assert fork["forked_from"] == original and fork["agent"] == "looper"
            assert fork["at_seq"] == _expected_cut(events, at), (at, fork)
            assert fork["session_id"] != (await c.get(f"/v1/runs/{original}")).json()["session_id"]
            cut = fork["at_seq"]
            assert replay([s for s in stored if s[0] <= cut]).pending == []  # no tool_use without its result
            want = [(by_seq[s]["type"], p) for s, t, p in stored if s <= cut and t in CARRIED]
            got = await _carried(rt, fork["session_id"])
            assert [t for t, _ in got] == [t for t, _ in want]  # a prefix of the original, in order
            assert fork["events_copied"] == len(want)
        assert len({f["at_seq"] for f in forks.values()}) < len(forks)  # some seqs fell inside an exchange

        # three forks run: each model saw its history (the tool-caller goes on to 10 calls in all)
        chosen = {forks[3]["run_id"], forks[len(events) // 2]["run_id"], forks[len(events)]["run_id"]}
        disp.queue[:] = [m for m in disp.queue if m.run_id in chosen]
        await disp.drain()
        for at in (3, len(events) // 2, len(events)):
            fork = forks[at]
            assert await status(rt, fork["run_id"]) == "completed"
            fevents = (await c.get(f"/v1/runs/{fork['run_id']}/events")).json()["events"]
            assert check_paired(fevents) == []
            seen = sum(1 for t, _ in await _carried(rt, fork["session_id"]) if t == EventType.TOOL_CALL)
            assert sum(e["type"] == "tool_call" for e in fevents) == CALLS - seen
            assert [e["text"] for e in fevents if e["type"] == "text"] == [f"done after {CALLS} tool calls"]


async def test_a_fork_without_a_prompt_asks_the_last_turn_again_of_another_agent_and_refusals_are_named(
    open_runtime: Any, migrated_db_url: str
) -> None:
    rt, disp = await open_runtime(AGENTS, url=migrated_db_url)
    original = await start(rt, "looper", "what is seven times six?")
    await disp.drain()
    async with api(rt) as c:
        r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 9, "agent": "echo"})
        assert r.status_code == 202, r.text
        fork = r.json()
        assert fork["agent"] == "echo" and fork["at_seq"] == 0 and fork["events_copied"] == 0  # before turn 1
        await disp.drain()
        fevents = (await c.get(f"/v1/runs/{fork['run_id']}/events")).json()["events"]
        assert [e["text"] for e in fevents if e["type"] == "text"] == ["what is seven times six?"]

        # another version of the same agent: an AgentDef of `looper` that echoes, pinned by def_id
        made = await c.post("/v1/_agentdef", json={"op": "fork", "name": "looper", "overlay": {"model": "echo"}})
        assert made.status_code == 200, made.text
        def_id = made.json()["def_id"]
        r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1, "def_id": def_id, "prompt": "v2 here?"})
        assert r.status_code == 202 and r.json()["def_id"] == def_id and r.json()["agent"] == "looper", r.text
        await disp.drain()
        fevents = (await c.get(f"/v1/runs/{r.json()['run_id']}/events")).json()["events"]
        assert [e["text"] for e in fevents if e["type"] == "text"] == ["v2 here?"]
        r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1, "def_id": "d_nope", "prompt": "x"})
        assert r.status_code == 400 and r.json()["code"] == "unknown_agent", r.text

        last = (await c.get(f"/v1/runs/{original}")).json()["last_seq"]
        for body, code in (({"at_seq": 0}, "invalid_at_seq"), ({"at_seq": last + 1}, "invalid_at_seq")):
            r = await c.post(f"/v1/runs/{original}/fork", json=body)
            assert r.status_code == 400 and r.json()["code"] == code, r.text
        r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1, "agent": "nobody", "prompt": "x"})
        assert r.status_code == 400 and r.json()["code"] == "unknown_agent", r.text
        r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": 1, "mode": "rerun"})
        assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
        r = await c.post("/v1/runs/r_nope/fork", json={"at_seq": 1})
        assert r.status_code == 404 and r.json()["code"] == "run_not_found"
        parent = await start(rt, "parent")
        await disp.drain()
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT id FROM runs WHERE parent_run_id = %s", (parent,))
            [child] = [row["id"] for row in await cur.fetchall()]
        r = await c.post(f"/v1/runs/{child}/fork", json={"at_seq": 1, "prompt": "x"})
        assert r.status_code == 409 and r.json()["code"] == "not_forkable", r.text


async def test_a_ten_iteration_run_replayed_from_every_seq_runs_no_call(
    open_runtime: Any, migrated_db_url: str
) -> None:
    """A replay fork at every seq, each asked to go on: the tool-caller makes the calls the
    original made after the cut, in the same order and with the same input, so each is answered
    from the record — 0 calls run (the counter stays at the original's 10) — and each fork ends
    with the original's answer."""
    rt, disp = await open_runtime(AGENTS, url=migrated_db_url)
    original = await start(rt, "looper", "count to ten")
    await disp.drain()
    async with api(rt) as c:
        events = (await c.get(f"/v1/runs/{original}/events")).json()["events"]
        recorded = {e["tool_use"]["id"]: e["seq"] for e in events if e["type"] == "tool_result"}
        forks: dict[int, dict[str, Any]] = {}
        for at in range(1, len(events) + 1):
            r = await c.post(f"/v1/runs/{original}/fork", json={"at_seq": at, "prompt": "go on", "mode": "replay"})
            assert r.status_code == 202 and r.json()["mode"] == "replay", (at, r.text)
            forks[at] = r.json()
        await disp.drain()
        for at, fork in forks.items():
            fevents = (await c.get(f"/v1/runs/{fork['run_id']}/events")).json()["events"]
            assert check_paired(fevents) == [] and fevents[-1]["type"] == "done", at
            results = [e for e in fevents if e["type"] == "tool_result"]
            after_cut = sorted(s for s in recorded.values() if s > fork["at_seq"])
            assert [e["replayed"]["seq"] for e in results] == after_cut, at  # each from the original's result
            assert all(e["replayed"]["run_id"] == original for e in results)
            assert not any(e["type"] == EventType.REPLAY_DIVERGED for e in fevents), at
            assert [e["text"] for e in fevents if e["type"] == "text"] == [f"done after {CALLS} tool calls"]
        mem = await c.get("/v1/_memory/scopes/agent/looper/keys/calls")
        assert mem.json()["value"] == CALLS, mem.text  # the original's ten; no replayed call wrote
