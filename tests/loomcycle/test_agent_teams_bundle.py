"""loomcycle's agent-teams bundle (tests/loomcycle/bundles/agent-teams.yaml, unchanged) served by
`treadle serve` over a base layer that defines the `middle` tier its agents name — the way
loomcycle runs it (`LOOMCYCLE_PRESETS=base,agent-teams`; here `TREADLE_CONFIG=base.yaml:bundle`),
and run end to end with a model on loopback speaking OpenAI's wire:

- `agent/assistant` authors the review team's four agents (AgentDef create, `tier: middle`);
- `team/assistant` loads its `team/structure` skill on demand (Skill invoke, allowed by its
  `skills: [team/*]`), checks the agents (AgentDef list), authors the team (TeamDef create),
  renders it, and runs it (TeamDef run: writer → two parallel reviewers → editor → pushback once
  → writer → … → done), parked until the team run ends;
- `team/orchestrator` reads the team (TeamDef get), publishes on `team/coordination` (its channel
  allowlist `team/*`) and is refused Bashbox (treadle has none; loomcycle's refuses every call
  until enabled).

Without the layering (the bundle alone) the server does not start: its error names the tier."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.e2e import ServerProcess, check_paired, query
from tests.support.fake_http import Reply, Request
from tests.support.teams import REVIEW_TEAM, PlayersOpenAI, play_text
from tests.support.vendors.base import Turn, tools
from tests.support.vendors.base import text as say
from treadle.testing import ACCEPT_JSON

pytestmark = pytest.mark.e2e

BUNDLE = Path(__file__).parent / "bundles" / "agent-teams.yaml"
KEY_ENV = "TREADLE_TEST_PLAYERS_KEY"
PLAYERS = ("writer", "reviewer-a", "reviewer-b", "editor")


def base_layer(url: str) -> dict[str, Any]:
    """What loomcycle's `base` preset gives the bundle — providers, aliases, the three task tiers —
    pointed at the loopback model."""
    return {
        "providers": {"players": {"driver": "openai", "base_url": url + "/v1", "api_key_env": KEY_ENV}},
        "models": {"fake": {"provider": "players", "model": "gpt-4o-mini"}},
        "tiers": {"low": ["fake"], "middle": ["fake"], "high": ["fake"]},
    }


def _script(role: str, done: int) -> Turn:
    """The bundle's assistants, played: `done` = tool results in the conversation so far."""
    if role == "AGENT-ASSISTANT":
        if done == 0:
            return tools(*(("AgentDef", {"op": "create", "name": n,
                                         "overlay": {"tier": "middle", "system_prompt": n}}) for n in PLAYERS))
        return say("created writer, reviewer-a, reviewer-b, editor")
    if role == "TEAM-ASSISTANT":
        steps: list[tuple[str, dict[str, Any]]] = [
            ("Skill", {"op": "invoke", "name": "team/structure"}),
            ("AgentDef", {"op": "list"}),
            ("TeamDef", {"op": "create", "name": "review", "overlay": REVIEW_TEAM}),
            ("TeamDef", {"op": "render_diagram", "name": "review"}),
            ("TeamDef", {"op": "run", "name": "review", "input": "owls"}),
        ]
        return tools(steps[done]) if done < len(steps) else say("review team authored, rendered and run")
    if role == "TEAM-ORCHESTRATOR":
        steps = [
            ("TeamDef", {"op": "get", "name": "review"}),
            ("Channel", {"op": "publish", "channel": "team/coordination", "value": {"state": "write"}}),
            ("Bashbox", {"command": "git status"}),
        ]
        return tools(steps[done]) if done < len(steps) else say("team review: write is next")
    raise AssertionError(f"no script for {role}")


class BundleModel(PlayersOpenAI):
    """The bundle's three agents by their system prompts' `You are X` line; the review team's
    agents as PlayersOpenAI plays them."""

    def __init__(self) -> None:
        super().__init__(delay_s=0.0)
        self.results: dict[str, list[str]] = {}  # role → its tool results, in order (last request's)

    def _handle(self, req: Request) -> Reply:
        refused, body = self.accept(req)
        if refused is not None:
            return refused
        msgs = body["messages"]
        system = next((_text(m) for m in msgs if m["role"] in ("system", "developer")), "")
        first = system.strip().split("\n", 1)[0]
        role = first.removeprefix("You are ").split(" ", 1)[0].rstrip(".")
        if first.startswith("You are ") and role.isupper():
            done = [_text(m) for m in msgs if m["role"] == "tool"]
            self.results[role] = done
            return self.turn_reply(_script(role, len(done)), body, req)
        task = next((_text(m) for m in msgs if m["role"] == "user"), "")
        return self.turn_reply(say(play_text(first, task)), body, req)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


async def _run(http: httpx.AsyncClient, agent: str, prompt: str) -> str:
    # (a user: the bundle's team/coordination channel is user-scoped)
    started = await http.post("/v1/runs", json={"agent": agent, "prompt": prompt, "user_id": "ada"})
    assert started.status_code in (200, 201, 202), started.text
    run_id: str = started.json()["run_id"] if "run_id" in started.json() else started.json()["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        if run["status"] in ("completed", "failed", "cancelled"):
            assert run["status"] == "completed", run
            return run_id
        await asyncio.sleep(0.1)  # poll the run's progress
    raise AssertionError(f"{agent} run {run_id} did not end")


async def test_the_agent_teams_bundle_runs_end_to_end(migrated_db_url: str, tmp_path: Path) -> None:
    model = BundleModel()
    async with model:
        base = tmp_path / "base.yaml"
        base.write_text(yaml.safe_dump(base_layer(model.url)))
        env = {KEY_ENV: model.key}
        alone = ServerProcess(database_url=migrated_db_url, config_path=BUNDLE, workdir=tmp_path, name="alone",
                              env=env)
        alone.start()
        assert alone.proc is not None and alone.proc.wait(60) != 0
        assert "unknown tier 'middle'" in alone.log_tail() and "base layer" in alone.log_tail()

        srv = ServerProcess(database_url=migrated_db_url, config_path=Path(f"{base}{os.pathsep}{BUNDLE}"),
                            workdir=tmp_path, name="bundle", env=env)
        srv.start()
        try:
            await srv.wait_ready(60)
            async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30.0) as http:
                await _run(http, "agent/assistant", "build a writer, two reviewers and an editor")
                assistant = await _run(http, "team/assistant", "assemble the review team and test it")
                await _run(http, "team/orchestrator", "drive the review team")
                events = (await http.get(f"/v1/runs/{assistant}/events")).json()["events"]
        finally:
            srv.stop()
        assert not model.violations, model.violations
        assert check_paired(events) == []

    skill, agents, created, diagram, ran = model.results["TEAM-ASSISTANT"]
    assert "Team structure — the graph shape" in skill  # the skill's body, loaded on demand
    assert all(f'"{n}"' in agents for n in PLAYERS)
    assert json.loads(created)["name"] == "review"
    assert "stateDiagram-v2" in diagram and "review --> write: pushback:rework" in diagram
    walked = json.loads(ran)
    assert walked["status"] == "completed" and walked["final_output"] == "approved: draft v2", walked
    assert [s["edge"] for s in walked["steps"]] == ["success", "pushback:rework", "success", "success"]

    team = walked["run_id"]
    kids = await query(migrated_db_url, "SELECT agent, status, count(*) AS n FROM runs WHERE parent_run_id = %s "
                                        "GROUP BY agent, status", (team,))
    assert {(k["agent"], k["status"]): k["n"] for k in kids} == {(n, "completed"): 2 for n in PLAYERS}

    got, published, bashbox = model.results["TEAM-ORCHESTRATOR"]
    assert '"entry":"write"' in got.replace(" ", "") and "error" not in published.lower()
    assert "bashbox" in bashbox.lower() and "refused" in bashbox.lower()
