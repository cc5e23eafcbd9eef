"""A team run survives kill -9 at every transition (issue 40): `treadle serve` walks the review
team (writer → two parallel reviewers → editor → pushback once → writer → … → done) with its
agents answered by a loopback server speaking OpenAI's wire, and is SIGKILLed (then restarted)
each time the team run starts a new state's agents — a kill lands in each of the six calls of the
walk. The run completes with the same answer as an undisturbed one, every state's agents ran
exactly once per visit (no child started twice), and every tool call in the team run's
transcript has exactly one result. The second test kills around a `wait: any` parallel state's
early cancel."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import httpx
import pytest

from tests.support.e2e import check_paired, query
from tests.support.fake_http import FakeHTTPServer, Reply, Request
from tests.support.teams import REVIEW_TEAM, PlayersOpenAI, _text
from tests.support.vendors.base import text
from treadle.testing import ACCEPT_JSON

pytestmark = pytest.mark.e2e

KEY_ENV = "TREADLE_TEST_PLAYERS_KEY"
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_WORKERS": "4"}
MAX_KILLS = 8
# the review team's calls per state visit, as the number of child runs once the call's agents
# started: write 1, review's reviewers 2-3 and its consolidator 4, write 5, review 6-7 and 8
VISITS = {"write#1": (1, 1), "review#1 reviewers": (2, 3), "review#1 editor": (4, 4), "write#2": (5, 5),
          "review#2 reviewers": (6, 7), "review#2 editor": (8, 8)}


async def test_a_team_run_survives_kill9_at_every_transition(make_db: Any, start_server: Any) -> None:
    url = make_db("team", migrated=True)
    async with PlayersOpenAI(delay_s=0.15) as vendor:
        os.environ[KEY_ENV] = vendor.key
        agents = {name: {"provider": "players", "model": "gpt-4o-mini", "system_prompt": name}
                  for name in ("writer", "reviewer-a", "reviewer-b", "editor")}
        providers = {"players": {"driver": "openai", "base_url": vendor.url + "/v1", "api_key_env": KEY_ENV}}
        srv = await start_server(url, agents, extra_config={"providers": providers}, **{KEY_ENV: vendor.key}, **ENV)
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30.0) as http:
            created = await http.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": REVIEW_TEAM})
            assert created.status_code == 200, created.text
            started = (await http.post("/v1/_teamdef", json={"op": "run", "name": "review", "input": "owls",
                                                             "wait": False})).json()
        team = started["run_id"]

        kills, seen, at_kills = 0, 0, []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            rows = await query(url, "SELECT status FROM runs WHERE id = %s", (team,))
            if rows[0]["status"] in ("completed", "failed", "cancelled"):
                break
            children = (await query(url, "SELECT count(*) AS n FROM runs WHERE parent_run_id = %s", (team,)))[0]["n"]
            if children > seen and kills < MAX_KILLS:  # a transition: the next state's agents just started
                seen = children
                at_kills.append(children)
                srv.kill9()
                kills += 1
                await srv.restart()
            else:
                await asyncio.sleep(0.05)  # poll the run's progress
        print(f"\nteam run {team}: {kills} kill -9 + restarts, children at each kill: {at_kills}")
        # a kill landed in every state visit, while its agents ran (the consolidator's too)
        missed = [v for v, (lo, hi) in VISITS.items() if not any(lo <= n <= hi for n in at_kills)]
        assert not missed, f"no kill while {missed} ran (children at each kill: {at_kills})"
        assert not vendor.violations, vendor.violations

        rows = await query(url, "SELECT status, error FROM runs WHERE id = %s", (team,))
        assert rows[0]["status"] == "completed", rows
        texts = await query(url, "SELECT payload->>'text' AS t FROM events WHERE run_id = %s AND type = 'text'"
                            " ORDER BY seq", (team,))
        assert '"status":"completed"' in texts[-1]["t"] and "approved: draft v2" in texts[-1]["t"]
        kids = await query(url, "SELECT agent, count(*) AS n FROM runs WHERE parent_run_id = %s GROUP BY agent",
                           (team,))
        assert {k["agent"]: k["n"] for k in kids} == {"writer": 2, "reviewer-a": 2, "reviewer-b": 2, "editor": 2}
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30.0) as http:
            events = (await http.get(f"/v1/runs/{team}/events")).json()["events"]
        assert check_paired(events) == []


QUORUM_TEAM: dict[str, Any] = {
    "entry": "write",
    "max_iterations": 2,
    "states": [
        {"state": "write", "handler": {"kind": "agent", "agent": "writer"}},
        {"state": "review", "handler": {"kind": "parallel", "agents": ["reviewer-a", "reviewer-b"],
                                        "consolidator": "editor", "wait": "any"}},
        {"state": "done", "handler": {"kind": "terminal"}},
    ],
    "transitions": [
        {"from": "write", "to": "review", "on": "success"},
        {"from": "review", "to": "write", "on": "pushback:rework"},
        {"from": "review", "to": "done", "on": "success"},
    ],
}


class GatedPlayers(PlayersOpenAI):
    """The players, but a reviewer's answer waits for its gate (`release`); the editor approves
    what it reads. `asked` counts the model calls per agent; `editor_read` is the envelope."""

    def __init__(self) -> None:
        super().__init__(delay_s=0.0)
        self.gates = {"reviewer-a": asyncio.Event(), "reviewer-b": asyncio.Event()}
        self.asked: dict[str, int] = {}
        self.editor_read = ""
        self.server = FakeHTTPServer(self._gated)

    async def _gated(self, req: Request) -> Reply:
        body = req.json() if req.body else {}
        msgs = body.get("messages") or []
        who = next((_text(m) for m in msgs if m.get("role") in ("system", "developer")), "").split("\n", 1)[0]
        self.asked[who] = self.asked.get(who, 0) + 1
        if who == "editor":
            self.editor_read = next((_text(m) for m in msgs if m.get("role") == "user"), "")
            refused, body = self.accept(req)
            return refused or self.turn_reply(text("approved: quorum\nsignal: success"), body, req)
        if who in self.gates:
            await self.gates[who].wait()
        return self.handle(req)


async def _wait_until(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.02)  # poll the run's progress
    raise AssertionError(f"timed out waiting for {what}")


async def test_kill9_around_a_parallel_states_early_cancel(make_db: Any, start_server: Any) -> None:
    """`wait: any`: once reviewer-a answered, reviewer-b (still waiting on its model) is cancelled
    and the editor reads it as `cancelled: …`. `treadle serve` is SIGKILLed (1) while both reviewers
    wait on the model, (2) the moment reviewer-a's run is completed — the early cancel being
    decided — and (3) once reviewer-b is cancelled, before the editor starts. Each state's agents
    run once (one child run each), reviewer-b ends cancelled and nothing of the tree is left
    running or queued: no run without its terminal status, no job, no lease, and reviewer-b's
    model is not asked again, also after another restart."""
    url = make_db("teamcancel", migrated=True)
    vendor = GatedPlayers()
    async with vendor:
        os.environ[KEY_ENV] = vendor.key
        agents = {name: {"provider": "players", "model": "gpt-4o-mini", "system_prompt": name}
                  for name in ("writer", "reviewer-a", "reviewer-b", "editor")}
        providers = {"players": {"driver": "openai", "base_url": vendor.url + "/v1", "api_key_env": KEY_ENV}}
        srv = await start_server(url, agents, extra_config={"providers": providers}, **{KEY_ENV: vendor.key}, **ENV)
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30.0) as http:
            created = await http.post("/v1/_teamdef", json={"op": "create", "name": "quorum", "overlay": QUORUM_TEAM})
            assert created.status_code == 200, created.text
            started = (await http.post("/v1/_teamdef", json={"op": "run", "name": "quorum", "input": "owls",
                                                             "wait": False})).json()
        team = started["run_id"]

        async def child(agent: str) -> dict[str, Any] | None:
            rows = await query(url, "SELECT id, status, cancel_requested FROM runs WHERE parent_run_id = %s "
                                    "AND agent = %s", (team, agent))
            return rows[0] if rows else None

        # (1) both reviewers are waiting on their model
        await _wait_until(lambda: _asked(vendor, "reviewer-a", "reviewer-b"), "both reviewers asked")
        srv.kill9()
        await srv.restart()
        vendor.gates["reviewer-a"].set()

        # (2) reviewer-a completed: the team run's parallel call is being woken to cancel reviewer-b
        async def a_done() -> bool:
            a = await child("reviewer-a")
            return a is not None and a["status"] == "completed"
        await _wait_until(a_done, "reviewer-a completed")
        srv.kill9()
        b_at_kill = await child("reviewer-b")
        await srv.restart()

        # (3) reviewer-b cancelled; the editor not started yet (if the walk has not moved on already)
        async def b_cancelled() -> bool:
            b = await child("reviewer-b")
            return b is not None and b["status"] == "cancelled"
        await _wait_until(b_cancelled, "reviewer-b cancelled")
        editor_before_kill3 = await child("editor")
        srv.kill9()
        await srv.restart()

        async def ended() -> str | None:
            status: str = (await query(url, "SELECT status FROM runs WHERE id = %s", (team,)))[0]["status"]
            return status if status in ("completed", "failed", "cancelled") else None
        assert await _wait_until(ended, "the team run to end", timeout=120) == "completed"
        print(f"\nreviewer-b at kill 2: {b_at_kill}; editor at kill 3: {editor_before_kill3}")

        asked_b = vendor.asked["reviewer-b"]
        vendor.gates["reviewer-b"].set()  # a model call of reviewer-b still open would answer now
        # a fresh process after the walk: its sweeper and workers find nothing of the tree to resume
        srv.kill9()
        await srv.restart()
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30.0) as http:
            probe = (await http.post("/v1/runs", json={"agent": "writer", "prompt": "owls"})).json()["run_id"]

            async def probed() -> bool:
                return bool((await http.get(f"/v1/runs/{probe}")).json()["status"] == "completed")
            await _wait_until(probed, "a run of the fresh process")  # its workers and sweeper are at work
            events = (await http.get(f"/v1/runs/{team}/events")).json()["events"]
        assert not vendor.violations, vendor.violations

    texts = [e["text"] for e in events if e["type"] == "text"]
    assert '"status":"completed"' in texts[-1] and "approved: quorum" in texts[-1]
    assert check_paired(events) == []
    kids = await query(url, "SELECT agent, status, count(*) AS n FROM runs WHERE parent_run_id = %s "
                            "GROUP BY agent, status", (team,))
    assert {(k["agent"], k["status"]): k["n"] for k in kids} == {
        ("writer", "completed"): 1, ("reviewer-a", "completed"): 1, ("reviewer-b", "cancelled"): 1,
        ("editor", "completed"): 1}
    read = json.loads(vendor.editor_read)["results"]
    assert read[0]["ok"] and not read[1]["ok"] and read[1]["error"].startswith("cancelled"), read
    tree = await query(url, "SELECT id, status, lease_owner FROM runs WHERE id = %s OR root_run_id = %s "
                            "OR parent_run_id = %s", (team, team, team))
    assert len(tree) == 5 and all(r["status"] in ("completed", "cancelled") for r in tree), tree
    assert all(r["lease_owner"] is None for r in tree), tree
    jobs = await query(url, "SELECT count(*) AS n FROM jobs WHERE run_id = ANY(%s)", ([r["id"] for r in tree],))
    assert jobs[0]["n"] == 0
    assert vendor.asked["reviewer-b"] == asked_b  # not asked again once cancelled


async def _asked(vendor: GatedPlayers, *agents: str) -> bool:
    return all(vendor.asked.get(a, 0) >= 1 for a in agents)
