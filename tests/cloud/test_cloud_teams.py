"""The review team of issue 40 in the cloud shape: the real api and worker handlers, moto's SQS,
a real Postgres, the team's agents answered over OpenAI's wire by a loopback fake. The team run
parks between states (no message left, no Lambda held) and completes with the pushback loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, queue_is_empty
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.teams import REVIEW_TEAM, PlayersInThread, PlayersOpenAI

KEY_ENV = "TREADLE_TEST_PLAYERS_KEY"


@pytest.fixture(scope="module")
def players() -> Iterator[PlayersOpenAI]:
    with PlayersInThread() as fake:
        yield fake


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory, players: PlayersOpenAI) -> Path:
    agents: dict[str, dict[str, Any]] = {name: {"provider": "players", "model": "gpt-4o-mini", "system_prompt": name}
              for name in ("writer", "reviewer-a", "reviewer-b", "editor")}
    ask = {"tool": "Interruption", "input": {"op": "ask", "question": "anyone?", "options": ["yes", "no"]}}
    agents["slow-reviewer"] = {"model": "script", "tools": ["Interruption"],  # waits for an answer
                               "mock": {"script": [ask, {"text": "late"}]}}
    providers = {"players": {"driver": "openai", "base_url": players.url + "/v1", "api_key_env": KEY_ENV}}
    path = tmp_path_factory.mktemp("cloudteams") / "treadle.yaml"
    path.write_text(yaml.safe_dump({"agents": agents, "providers": providers}))
    return path


def test_the_review_team_runs_in_the_cloud_shape(
    cloud_env: dict[str, str], players: PlayersOpenAI, sqs: Any, queue: dict[str, str], cloud_db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, players.key)
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        status, created, _ = call(api, "POST", "/v1/_teamdef", {"op": "create", "name": "review",
                                                                "overlay": REVIEW_TEAM})
        assert status == 200, created
        status, started, _ = call(api, "POST", "/v1/_teamdef", {"op": "run", "name": "review", "input": "owls",
                                                                "wait": False})
        assert status == 200, started
        team = started["run_id"]
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
        esm.run_until(lambda: all_terminal(cloud_db, [team]), timeout_s=120)
        assert queue_is_empty(sqs, queue["url"]) and not players.violations

        texts = [e["text"] for e in events_of(api, team) if e["type"] == "text"]
        assert '"status":"completed"' in texts[-1] and '"final_output":"approved: draft v2"' in texts[-1]
        parked = [e for e in events_of(api, team) if e["type"] == "tool_parked"]
        assert len(parked) >= 4  # the team run waited parked at every state
        with psycopg.connect(cloud_db) as conn:
            kids: dict[str, int] = dict(conn.execute(
                "SELECT agent, count(*) FROM runs WHERE parent_run_id = %s GROUP BY agent", (team,)).fetchall())
        assert kids == {"writer": 2, "reviewer-a": 2, "reviewer-b": 2, "editor": 2}
    finally:
        api.close()
        worker.close()


def test_a_wait_any_state_cancels_the_slow_reviewer_in_the_cloud_shape(
    cloud_env: dict[str, str], players: PlayersOpenAI, sqs: Any, queue: dict[str, str], cloud_db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The early cancel on the worker functions: `wait: any` — reviewer-a's answer is enough, the
    slow reviewer (parked on a question nobody answers) is cancelled, in each of the two visits."""
    monkeypatch.setenv(KEY_ENV, players.key)
    quorum = {**REVIEW_TEAM, "states": [
        REVIEW_TEAM["states"][0],
        {"state": "review", "handler": {"kind": "parallel", "agents": ["reviewer-a", "slow-reviewer"],
                                        "consolidator": "editor", "wait": "any"}},
        REVIEW_TEAM["states"][2]]}
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        status, created, _ = call(api, "POST", "/v1/_teamdef", {"op": "create", "name": "quorum", "overlay": quorum})
        assert status == 200, created
        status, started, _ = call(api, "POST", "/v1/_teamdef", {"op": "run", "name": "quorum", "input": "owls",
                                                                "wait": False})
        assert status == 200, started
        team = started["run_id"]
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
        esm.run_until(lambda: all_terminal(cloud_db, [team]), timeout_s=120)
        assert queue_is_empty(sqs, queue["url"]) and not players.violations

        texts = [e["text"] for e in events_of(api, team) if e["type"] == "text"]
        assert '"status":"completed"' in texts[-1] and '"final_output":"approved: draft v2"' in texts[-1]
        with psycopg.connect(cloud_db) as conn:
            kids = conn.execute("SELECT agent, status, count(*) FROM runs WHERE parent_run_id = %s "
                                "GROUP BY agent, status", (team,)).fetchall()
            live = conn.execute("SELECT count(*) FROM runs WHERE root_run_id = %s AND status NOT IN "
                                "('completed', 'failed', 'cancelled')", (team,)).fetchone()
        assert {(a, st): n for a, st, n in kids} == {
            ("writer", "completed"): 2, ("reviewer-a", "completed"): 2, ("slow-reviewer", "cancelled"): 2,
            ("editor", "completed"): 2}
        assert live == (0,)
    finally:
        api.close()
        worker.close()
