"""A team run survives kill -9 at every transition (issue 40): `treadle serve` walks the review
team (writer → two parallel reviewers → editor → pushback once → writer → … → done) with its
agents answered by a loopback server speaking OpenAI's wire, and is SIGKILLed (then restarted)
each time the team run starts a new state's agents. The run completes with the same answer as an
undisturbed one, every state's agents ran exactly once per visit (no child started twice), and
every tool call in the team run's transcript has exactly one result."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import httpx
import pytest

from tests.support.e2e import check_paired, query
from tests.support.teams import REVIEW_TEAM, PlayersOpenAI

pytestmark = pytest.mark.e2e

KEY_ENV = "TREADLE_TEST_PLAYERS_KEY"
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_WORKERS": "4"}
MAX_KILLS = 6


async def test_a_team_run_survives_kill9_at_every_transition(make_db: Any, start_server: Any) -> None:
    url = make_db("team", migrated=True)
    async with PlayersOpenAI(delay_s=0.15) as vendor:
        os.environ[KEY_ENV] = vendor.key
        agents = {name: {"provider": "players", "model": "gpt-4o-mini", "system_prompt": name}
                  for name in ("writer", "reviewer-a", "reviewer-b", "editor")}
        providers = {"players": {"driver": "openai", "base_url": vendor.url + "/v1", "api_key_env": KEY_ENV}}
        srv = await start_server(url, agents, extra_config={"providers": providers}, **{KEY_ENV: vendor.key}, **ENV)
        async with httpx.AsyncClient(base_url=srv.url, timeout=30.0) as http:
            created = await http.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": REVIEW_TEAM})
            assert created.status_code == 200, created.text
            started = (await http.post("/v1/_teamdef", json={"op": "run", "name": "review", "input": "owls",
                                                             "wait": False})).json()
        team = started["run_id"]

        kills, seen = 0, 0
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            rows = await query(url, "SELECT status FROM runs WHERE id = %s", (team,))
            if rows[0]["status"] in ("completed", "failed", "cancelled"):
                break
            children = (await query(url, "SELECT count(*) AS n FROM runs WHERE parent_run_id = %s", (team,)))[0]["n"]
            if children > seen and kills < MAX_KILLS:  # a transition: the next state's agents just started
                seen = children
                srv.kill9()
                kills += 1
                await srv.restart()
            else:
                await asyncio.sleep(0.05)  # poll the run's progress
        print(f"\nteam run {team}: {kills} kill -9 + restarts, {seen} children at the last kill")
        assert kills >= 4, f"only {kills} kills landed"
        assert not vendor.violations, vendor.violations

        rows = await query(url, "SELECT status, error FROM runs WHERE id = %s", (team,))
        assert rows[0]["status"] == "completed", rows
        texts = await query(url, "SELECT payload->>'text' AS t FROM events WHERE run_id = %s AND type = 'text'"
                            " ORDER BY seq", (team,))
        assert '"status":"completed"' in texts[-1]["t"] and "approved: draft v2" in texts[-1]["t"]
        kids = await query(url, "SELECT agent, count(*) AS n FROM runs WHERE parent_run_id = %s GROUP BY agent",
                           (team,))
        assert {k["agent"]: k["n"] for k in kids} == {"writer": 2, "reviewer-a": 2, "reviewer-b": 2, "editor": 2}
        async with httpx.AsyncClient(base_url=srv.url, timeout=30.0) as http:
            events = (await http.get(f"/v1/runs/{team}/events")).json()["events"]
        assert check_paired(events) == []
