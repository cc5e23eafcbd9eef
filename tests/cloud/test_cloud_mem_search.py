"""Issue 39's memory and search pieces in the cloud shape: a run stepped by worker Lambdas from moto
SQS (every batch delivered to two environments at once) merges into Memory and searches the web
through loomcycle's `search_providers` circuit — the first provider rate limited (429), the second
answering on its own wire, keys from the functions' environment; the API function answers the
embedding maintenance routes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, start_run
from tests.cloud.test_cloud_path import envs as envs
from tests.reach.test_search_providers import tavily
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.localcloud import A2A_CARDS, AGENTS
from tests.support.loopback import Answer, Loopback, Seen

KEYS = {"SERPER_API_KEY": "serper-cloud-key", "TAVILY_API_KEY": "tavily-cloud-key"}
SEARCHER = {"model": "script", "tools": ["WebSearch", "Memory"], "memory_scopes": ["agent"],
            "system_prompt": "Search well.\n{{tool:Context.tools}}", "mock": {"script": [
                {"tool": "Memory", "input": {"op": "merge", "scope": "agent", "key": "profile",
                                             "value": {"name": "loom", "tags": {"a": 1}}}},
                {"tool": "WebSearch", "input": {"query": "durable agents", "max_results": 2}},
                {"tool": "Memory", "input": {"op": "merge", "scope": "agent", "key": "profile",
                                             "value": {"tags": {"b": 2}}}},
                {"text": "found"}]}}


class VendorsInThread:
    """serper (always 429) and tavily on loopback, served from a thread of their own (the simulated
    Lambda environments run in threads)."""

    def __init__(self) -> None:
        self.serper = Loopback({"/search": lambda s: Answer.json({"message": "Too many requests"}, status=429)})
        self.tavily = Loopback({"/search": self._tavily})
        self.keys: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vendors", daemon=True)

    def _tavily(self, s: Seen) -> Answer:
        self.keys.append(s.headers.get("authorization", ""))
        return tavily(s)

    def __enter__(self) -> VendorsInThread:
        self._thread.start()
        for srv in (self.serper, self.tavily):
            asyncio.run_coroutine_threadsafe(srv.__aenter__(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        for srv in (self.serper, self.tavily):
            asyncio.run_coroutine_threadsafe(srv.__aexit__(None, None, None), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture(scope="module")
def vendors() -> Iterator[VendorsInThread]:
    with VendorsInThread() as v:
        yield v


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory, vendors: VendorsInThread) -> Path:
    path = tmp_path_factory.mktemp("cloudcfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({
        "agents": {**AGENTS, "searcher": SEARCHER}, "a2a_server_cards": A2A_CARDS,
        "search_providers": {"serper": {"base_url": vendors.serper.url("/search", host="localhost")},
                             "tavily": {"base_url": vendors.tavily.url("/search", host="localhost")}},
        "search_priority": ["serper", "tavily"]}))
    return path


@pytest.fixture
def search_env(cloud_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for k, v in {**KEYS, "TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": "localhost"}.items():
        monkeypatch.setenv(k, v)
    return cloud_env


def test_merge_and_search_fallback_through_the_worker(
    search_env: dict[str, str], envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str,
    vendors: VendorsInThread,
) -> None:
    api = envs["api"]
    run_id = start_run(api, "searcher")
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=120)
    first, found, second = [json.loads(e["text"]) for e in events_of(api, run_id) if e["type"] == "tool_result"]
    assert first == {"key": "profile", "value": {"name": "loom", "tags": {"a": 1}}}
    assert found["provider"] == "tavily" and found["fell_over"] == ["serper"]
    assert [r["url"] for r in found["results"]] == ["https://tavily.example/1", "https://tavily.example/2"]
    assert second == {"key": "profile", "value": {"name": "loom", "tags": {"a": 1, "b": 2}}}
    assert set(vendors.keys) == {"Bearer tavily-cloud-key"}
    with psycopg.connect(cloud_db) as conn:
        row = conn.execute("SELECT value FROM memory WHERE scope = 'agent' AND scope_id = 'searcher'"
                           " AND key = 'profile'").fetchone()
    assert row == ({"name": "loom", "tags": {"a": 1, "b": 2}},)

    status, stats, _ = call(api, "GET", "/v1/_memory/embed_stats", query="scope=agent")
    assert status == 200 and stats["scope"] == "agent" and "models" in stats
    status, body, _ = call(api, "POST", "/v1/_memory/reembed",
                           query="scope=agent&scope_id=searcher&tenant=default")
    assert (status, body["code"]) == (503, "embedder_not_configured")
