"""History by meaning in the cloud shape (issue 34 item 2): with an embedder configured, the api
function answers `POST /v1/_history op=related` and the worker function runs an agent's
`History op=related` call (an external call: the embedder, outside the step's transaction) on an
SQS-delivered step — every message delivered twice. Each chat is embedded once, lazily, and a
chat whose text changed is embedded again; the tool call has one result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, run_rows, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv

TITLES = {
    "paris": "A week in Paris: hotels, museums and cafés",
    "france": "Planning a summer vacation in France",
    "pipe": "Fixing the leaking kitchen sink pipe",
}
FINDER = [{"tool": "History", "input": {"op": "related", "scope": "tenant", "query": "holiday in France"}},
          {"text": "done"}]


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cloudrelated") / "treadle.yaml"
    path.write_text(yaml.safe_dump({
        "memory": {"embedder": {"driver": "local"}},
        "agents": {
            "chat": {"model": "echo"},
            "finder": {"model": "script", "tools": ["History"], "history_scope": ["tenant"],
                       "mock": {"script": FINDER}},
        },
    }))
    return path


def _embedded(db: str, ids: list[str]) -> dict[str, str]:
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT session_id, source_text FROM session_embeddings WHERE session_id = ANY(%s)",
                            (ids,)).fetchall()
    return {str(sid): str(text) for sid, text in rows}


def test_related_by_meaning_through_the_api_and_the_worker(
    cloud_env: dict[str, str], sqs: Any, queue: dict[str, str], cloud_db: str,
) -> None:
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], duplicate=True)
        chats = {key: start_run(api, "chat", title) for key, title in TITLES.items()}
        esm.run_until(lambda: all_terminal(cloud_db, list(chats.values())), timeout_s=90)
        sessions: dict[str, str] = {}
        for key, run_id in chats.items():
            status, run, _ = call(api, "GET", f"/v1/runs/{run_id}")
            assert status == 200, run
            sessions[key] = run["session_id"]
            status, body, _ = call(api, "POST", "/v1/_history",
                                   {"op": "rename", "session_id": sessions[key], "title": TITLES[key]})
            assert status == 200, body

        # the api function: related to the Paris chat ranks the France chat first
        status, out, _ = call(api, "POST", "/v1/_history", {"op": "related", "session_id": sessions["paris"]})
        assert status == 200 and out["ranking"] == "embedding", out
        ranked = [c["id"] for c in out["chats"] if c["id"] in sessions.values()]
        assert ranked[0] == sessions["france"], (ranked, sessions)
        stored = _embedded(cloud_db, list(sessions.values()))
        assert stored == {sessions["france"]: TITLES["france"], sessions["pipe"]: TITLES["pipe"]}, stored

        # a changed text is embedded again, by the next related call
        status, body, _ = call(api, "POST", "/v1/_history", {"op": "rename", "session_id": sessions["pipe"],
                                                             "title": "Weekend trip to Lyon and the Alps in France"})
        assert status == 200, body

        # the worker function: an agent's related call on an SQS step, delivered twice
        finder = start_run(api, "finder", "find the trips")
        esm.run_until(lambda: all_terminal(cloud_db, [finder]), timeout_s=90)
        assert run_rows(cloud_db, [finder])[finder]["status"] == "completed"
        results = [e for e in events_of(api, finder) if e["type"] == "tool_result"]
        assert len(results) == 1 and not results[0]["is_error"], results
        found = json.loads(results[0]["text"])
        assert found["ranking"] == "embedding", found
        mine = [c["id"] for c in found["chats"] if c["id"] in sessions.values()]
        assert mine and mine[0] in (sessions["france"], sessions["pipe"]), (mine, sessions)  # both now in France
        again = _embedded(cloud_db, list(sessions.values()))
        assert again[sessions["pipe"]].startswith("Weekend trip"), again
        assert set(again) == set(sessions.values()), again  # the query has no source chat: every chat embedded
    finally:
        api.close()
        worker.close()
