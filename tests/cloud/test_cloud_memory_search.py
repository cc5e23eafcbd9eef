"""Memory search, complete, in the cloud shape (issue 41 item 4): an agent run stepped by worker
Lambdas from moto SQS (every batch delivered to two environments at once) adds a conversation
with `infer` (the mock model extracts its facts), then searches them with loomcycle's `rank`,
`dedup` and `sources` and recalls them — each fact stored once. The API function answers
POST /v1/_memory/search with the same blocks on the same rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, start_run
from tests.cloud.test_cloud_path import envs as envs
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.localcloud import A2A_CARDS, AGENTS

SAID = "I prefer dark mode in every editor. I live in Berlin with my cat. My team ships on Thursdays."
REMEMBERER = {"model": "script", "tools": ["Memory"], "memory_scopes": ["agent"], "mock": {"script": [
    {"tool": "Memory", "input": {"op": "add", "scope": "agent", "messages": [{"role": "user", "content": SAID}]}},
    {"tool": "Memory", "input": {"op": "search", "scope": "agent", "query": "which editor theme?", "k": 2,
                                 "sources": ["facts"], "dedup": {"enabled": True},
                                 "rank": {"recency_weight": 0.1, "frequency_weight": 0.1}}},
    {"tool": "Memory", "input": {"op": "recall", "scope": "agent", "query": "where does the user live"}},
    {"text": "remembered"}]}}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The local cloud's treadle.yaml with the local embedder and the remembering agent."""
    path = tmp_path_factory.mktemp("cloudcfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({"agents": {**AGENTS, "rememberer": REMEMBERER}, "a2a_server_cards": A2A_CARDS,
                                    "memory": {"embedder": {"driver": "local"}}}))
    yield path


def test_add_search_and_recall_through_the_worker_and_the_api_function(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api = envs["api"]
    run_id = start_run(api, "rememberer")
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=120)
    results = [json.loads(e["text"]) for e in events_of(api, run_id) if e["type"] == "tool_result"]
    added, found, recalled = results
    assert added["status"] == "done" and len(added["facts"]) == 3
    [top] = [h for h in found["results"] if h["kind"] == "fact"][:1]
    assert top["value"] == "I prefer dark mode in every editor." and top["provenance"]["origin"] == "add"
    assert "rank_score" in top and found["dedup_dropped"] == 0
    assert recalled["facts"][0]["memory"] == "I live in Berlin with my cat."
    with psycopg.connect(cloud_db) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT key) FROM memory WHERE scope = 'agent'"
                           " AND scope_id = 'rememberer' AND key LIKE 'fact:%%'").fetchone()
    assert row == (3, 3)  # every batch went to two workers: each fact once

    body = {"scope": "agent", "scope_id": "rememberer", "query": "when does the team ship?", "top_k": 1,
            "sources": ["facts", "notes"], "rank": {"source_weight": 0.2}, "dedup": {"enabled": True}}
    status, answer, _ = call(api, "POST", "/v1/_memory/search", body)
    assert status == 200, answer
    assert answer["entries"][0]["value"] == "My team ships on Thursdays." and answer["entries"][0]["kind"] == "fact"
    assert answer["rank_note"].startswith("source_weight is reserved") and answer["dedup_dropped"] == 0
    status, refused, _ = call(api, "POST", "/v1/_memory/search", {**body, "sources": ["documents", "facts"]})
    assert status == 400 and refused["code"] == "invalid_sources", refused
