"""Context compaction (issue 34 item 3) against a served treadle: auto (the previous iteration's
input tokens past `autocompact_at_pct` of the window the model reports), self (`Context
op=compact`, applied before the next iteration), a failed summary (history unchanged, a
`compaction_failed` event), settings merged agent < run. The stored transcript replays into the
compacted history with every tool_use beside its tool_result."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.sidecar import sidecar_client, sidecar_settings
from tests.unit.test_replay import assert_pairing
from treadle.config import parse_config
from treadle.engine.replay import replay
from treadle.testing import until as wait_for

AGENTS = {
    # 40 Memory calls wanted, 12 iterations allowed: the context grows until auto-compaction fires
    "long": {"model": "tool-caller", "tools": ["Memory"], "max_iterations": 14,
             "mock": {"tool_calls": 40, "context_window": 300},
             "compaction": {"enabled": True, "autocompact_at_pct": 50, "keep_last_n": 2}},
    # calls Context op=compact each time it sees no tool call in its history
    "selfish": {"model": "tool-caller", "tools": ["Context"], "max_iterations": 3,
                "mock": {"tool_calls": 1, "tool_input": {"op": "compact"}},
                "compaction": {"keep_last_n": 0}},
    "chatty": {"model": "echo"},
    # a child without compaction of its own: it inherits the parent's, a spawn's overrides that
    "child": {"model": "tool-caller", "tools": ["Memory"], "max_iterations": 14,
              "mock": {"tool_calls": 40, "context_window": 300}},
    "boss": {"model": "script", "tools": ["Agent"],
             "compaction": {"enabled": True, "autocompact_at_pct": 50, "keep_last_n": 2},
             "mock": {"script": [{"tool": "Agent", "input": {"op": "parallel_spawn", "spawns": [
                 {"name": "child", "prompt": "inherit"},
                 {"name": "child", "prompt": "off", "compaction": {"enabled": False}}]}}, {"text": "done"}]}},
    "slowchat": {"model": "echo", "mock": {"latency_ms": 1500}},
    "broken": {"model": "tool-caller", "tools": ["Context"], "max_iterations": 3,
               "mock": {"tool_calls": 1, "tool_input": {"op": "compact"}, "summary_error": True},
               "compaction": {"keep_last_n": 0}},
}


@pytest.fixture(scope="module")
async def client(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with sidecar_client(sidecar_settings(db_url, provider_retries=0), parse_config({"agents": AGENTS})) as http:
        yield http


async def run_to_end(http: httpx.AsyncClient, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    resp = await http.post("/v1/runs", json={"prompt": "the task", "user_id": "u_" + secrets.token_hex(4), **body})
    assert resp.status_code == 202, resp.text
    run_id = resp.json()["run_id"]

    async def ended() -> dict[str, Any] | None:
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        return run if run["status"] in ("completed", "failed", "cancelled") else None

    run = await wait_for(ended, 30, interval=0.05, what=f"run {run_id}")
    events = (await http.get(f"/v1/runs/{run_id}/events")).json()["events"]
    return run, events


def stored(events: list[dict[str, Any]]) -> list[tuple[int, str, dict[str, Any]]]:
    return [(e["seq"], e["type"], {k: v for k, v in e.items() if k not in ("seq", "type", "ts")}) for e in events]


async def test_auto_compaction_fires_past_the_threshold(client: httpx.AsyncClient) -> None:
    run, events = await run_to_end(client, {"agent": "long"})
    assert run["status"] == "completed" and run["stop_reason"] == "max_iterations", run
    marks = [e for e in events if e["type"] == "context_compaction"]
    assert marks and all(m["trigger"] == "auto" for m in marks)
    first = marks[0]
    assert first["keep_first"] is True and first["after_tokens"] < first["before_tokens"]
    assert first["summary"].startswith("summary of ")
    # the model's next request was the compacted history: its input shrank
    usage = [(e["seq"], e["usage"]["input_tokens"]) for e in events if e["type"] == "usage"]
    before = [n for seq, n in usage if seq < first["seq"]][-1]
    after = next(n for seq, n in usage if seq > first["seq"])
    assert after < before, usage
    # never twice in a row: one model call at least between two compactions
    iterations = [m["iteration"] for m in marks]
    assert all(b - a >= 2 for a, b in itertools.pairwise(iterations)), iterations
    # replay (any worker, after any crash) rebuilds the compacted history, paired
    messages = replay(stored(events)).messages
    assert messages[0].text().startswith("[Original task — preserved verbatim:]\nthe task")
    assert_pairing(messages)


async def test_self_compaction_applies_before_the_next_iteration(client: httpx.AsyncClient) -> None:
    _run, events = await run_to_end(client, {"agent": "selfish"})
    types = [e["type"] for e in events]
    i = types.index("context_compaction")
    assert types[i - 1] == "tool_result" and events[i - 1]["tool_use"]["input"] == {"op": "compact"}
    mark = events[i]
    assert mark["trigger"] == "self" and mark["iteration"] == 2 and mark["keep_n"] == 0
    assert types[i + 1] in ("text", "tool_call")  # then the model, on the compacted history
    result = events[i - 1]["text"]
    assert '"requested": true' in result or '"requested":true' in result


async def test_a_failed_summary_leaves_the_history_unchanged(client: httpx.AsyncClient) -> None:
    run, events = await run_to_end(client, {"agent": "broken"})
    assert run["status"] == "completed", run  # the run goes on
    failed = [e for e in events if e["type"] == "compaction_failed"]
    assert failed and failed[0]["trigger"] == "self" and "summary" in failed[0]["error"]
    assert not [e for e in events if e["type"] == "context_compaction"]
    assert_pairing(replay(stored(events)).messages)


async def test_the_runs_settings_merge_over_the_agents(client: httpx.AsyncClient) -> None:
    # the run turns auto-compaction off: no compaction however full the window
    run, events = await run_to_end(client, {"agent": "long", "compaction": {"enabled": False}})
    assert run["stop_reason"] == "max_iterations"
    assert not [e for e in events if e["type"] == "context_compaction"]
    bad = await client.post("/v1/runs", json={"agent": "long", "prompt": "x", "compaction": {"memory_flush": True}})
    assert bad.status_code == 422 and "memory_flush" in bad.text
    bad = await client.post("/v1/runs", json={"agent": "long", "prompt": "x", "compaction": {"keep_last": 1}})
    assert bad.status_code == 422 and "keep_last" in bad.text


async def _status(http: httpx.AsyncClient, run_id: str, want: str, check: Any = None) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        return run if run["status"] == want and (check is None or check(run)) else None

    found: dict[str, Any] = await wait_for(reached, 30, interval=0.05, what=f"run {run_id} {want}")
    return found


async def test_manual_compaction_of_a_parked_and_of_an_ended_run(client: httpx.AsyncClient) -> None:
    started = await client.post("/v1/runs", json={"agent": "chatty", "prompt": "turn 0", "interactive": True})
    run_id = started.json()["run_id"]
    for n in range(1, 4):
        await _status(client, run_id, "waiting", lambda r, n=n: r["iterations"] >= n)
        resp = await client.post(f"/v1/runs/{run_id}/input", json={"text": f"turn {n} " + "words " * 100})
        assert resp.status_code == 200, resp.text
    await _status(client, run_id, "waiting", lambda r: r["iterations"] >= 4)
    # parked for input: compacted at once through its steering queue (loomcycle's `live`)
    resp = await client.post(f"/v1/runs/{run_id}/compact", json={"reason": "tidy"})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["applied"] == "live" and out["compacted"] is True and out["after_tokens"] < out["before_tokens"]

    async def marked() -> list[dict[str, Any]] | None:
        events = (await client.get(f"/v1/runs/{run_id}/events")).json()["events"]
        done = [e for e in events if e["type"] == "context_compaction"]
        return events if done and events[-1]["type"] == "awaiting_input" else None

    events = await wait_for(marked, 30, interval=0.05, what="the live compaction")
    mark = next(e for e in events if e["type"] == "context_compaction")
    assert mark["trigger"] == "manual" and mark["keep_first"] is True and isinstance(mark["input_id"], int)
    messages = replay(stored(events)).messages
    assert messages[0].text().startswith("[Original task — preserved verbatim:]\nturn 0")
    assert [m.text()[:7] for m in messages[-2:]] == ["turn 3 ", "turn 3 "]  # the kept tail (echo)
    # the conversation goes on from the compacted history
    resp = await client.post(f"/v1/runs/{run_id}/input", json={"text": "turn 4"})
    assert resp.status_code == 200
    await _status(client, run_id, "waiting", lambda r: r["iterations"] >= 5)
    # ended: the marker, replayed by the session's next turn
    await client.post(f"/v1/runs/{run_id}/cancel", json={"scope": "run"})
    await _status(client, run_id, "cancelled")
    resp = await client.post(f"/v1/runs/{run_id}/compact")
    assert resp.status_code == 200 and resp.json()["applied"] == "marker", resp.text
    events = (await client.get(f"/v1/runs/{run_id}/events")).json()["events"]
    assert events[-1]["type"] == "context_compaction" and events[-1]["trigger"] == "manual"
    assert_pairing(replay(stored(events)).messages)
    session_id = started.json()["session_id"]
    resp = await client.post(f"/v1/sessions/{session_id}/messages", json={"prompt": "after"})
    assert resp.status_code == 202, resp.text
    await _status(client, resp.json()["run_id"], "completed")


async def test_manual_compaction_refusals(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/runs/r_nope/compact", json={})
    assert resp.status_code == 404, resp.text
    short, _ = await run_to_end(client, {"agent": "chatty"})
    resp = await client.post(f"/v1/runs/{short['run_id']}/compact")
    assert resp.status_code == 200 and resp.json()["applied"] == "noop" and resp.json()["compacted"] is False
    busy = (await client.post("/v1/runs", json={"agent": "slowchat", "prompt": "x", "interactive": True})).json()
    await _status(client, busy["run_id"], "running")
    resp = await client.post(f"/v1/runs/{busy['run_id']}/compact")
    assert resp.status_code == 409 and resp.json()["code"] == "run_busy", resp.text
    resp = await client.post(f"/v1/runs/{busy['run_id']}/compact", json={"bogus": 1})
    assert resp.status_code == 422
    await client.post(f"/v1/runs/{busy['run_id']}/cancel", json={"scope": "run"})


async def test_a_spawn_inherits_the_parents_compaction_and_may_override_it(client: httpx.AsyncClient) -> None:
    parent, _ = await run_to_end(client, {"agent": "boss"})
    assert parent["status"] == "completed", parent
    children = (await client.get("/v1/runs", params={"limit": 50})).json()["runs"]
    mine = {c["run_id"]: c for c in children if c.get("parent_run_id") == parent["run_id"]}
    assert len(mine) == 2
    compactions = {}
    for run_id in mine:
        events = (await client.get(f"/v1/runs/{run_id}/events")).json()["events"]
        prompt = events[0]["segments"][0]["content"][0]["text"]
        compactions[prompt] = sum(e["type"] == "context_compaction" for e in events)
    assert compactions["inherit"] >= 1 and compactions["off"] == 0, compactions
    bad = await client.post("/v1/runs", json={"agent": "boss", "prompt": "x", "compaction": {"target_percentage": 5}})
    assert bad.status_code == 422
