"""Two `treadle serve` processes on loopback, each with its own database: treadle B's agent calls
treadle A's agent as the tool `a2a__alpha__asker` (the official a2a-sdk client, through the network
guard, its bearer a run credential). A's agent asks a question first (an Interruption: the task is
TASK_STATE_INPUT_REQUIRED), so both runs park — A's on its question, B's on the remote task (no
worker held: a wait row, a timed poke and a push config). Then one of them is SIGKILLed and
restarted on the same port, the question is answered on A, and B's run must complete with exactly
one tool_result for the call, carrying A's answer.

- kill A: B's polls fail while A is down (the call stays parked), A's restarted maintenance pass
  pushes the task's new state to B's `/a2a/push` (a2a_calls.pushes counts it);
- kill B: A's push fails while B is down and is retried (the config's row survives both), B's
  restarted sweeper fires the call's timed poke; whichever comes first wakes the call."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import MakeDb
from tests.support.e2e import ServerProcess, free_port, query, write_config
from treadle.testing import until

pytestmark = pytest.mark.e2e

TOKEN_A = "a2a-a-" + secrets.token_hex(8)
TOKEN_B = "a2a-b-" + secrets.token_hex(8)
ANSWER = "blue, please"

A_AGENTS = {"asker": {"model": "script", "tools": ["Interruption"], "mock": {"script": [
    {"tool": "Interruption", "input": {"op": "ask", "question": "which colour?"}},
    {"text": "painted it"}]}}}
A_EXTRA = {"a2a_server_cards": {"main": {"name": "treadle A", "exposed_agents": [{"agent_name": "asker"}]}}}


def b_config(a_url: str, b_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    agents = {"caller": {"model": "script", "tools": ["a2a__alpha__asker"], "mock": {"script": [
        {"tool": "a2a__alpha__asker", "input": {"message": "paint the fence"}},
        {"text": "the remote agent is done"}]}}}
    extra = {
        "a2a_agents": {"alpha": {
            "agent_card_url": f"{a_url}/.well-known/agent-card.json",
            "auth": {"scheme": "http", "bearer_credential_ref": "alpha"},
            "expected_skills": [{"id": "asker", "required": True}],
            "poll_interval_seconds": 1,
        }},
        "a2a_client": {"push_url": f"{b_url}/a2a/push"},
    }
    return agents, extra


def env(token: str, ports: list[int]) -> dict[str, str]:
    return {
        "TREADLE_AUTH_TOKEN": token,
        "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3",
        "TREADLE_LEASE_SECONDS": "3",
        "TREADLE_HTTP_ALLOWED_HOSTS": "127.0.0.1",
        "TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": ",".join(f"127.0.0.1:{p}" for p in ports),
        "TREADLE_CREDENTIALS_KEY": base64.b64encode(os.urandom(32)).decode(),
    }


async def _pair(make_db: MakeDb, tmp_path: Path) -> tuple[ServerProcess, ServerProcess]:
    port_a, port_b = free_port(), free_port()
    a_url, b_url = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    servers = []
    for name, db, agents, extra, token in (
        ("a", make_db("a2a_a"), A_AGENTS, A_EXTRA, TOKEN_A),
        ("b", make_db("a2a_b"), *b_config(a_url, b_url), TOKEN_B),
    ):
        workdir = tmp_path / name
        workdir.mkdir()
        srv = ServerProcess(database_url=db, config_path=write_config(workdir / "treadle.yaml", agents, extra),
                            workdir=workdir, name=name, env=env(token, [port_a, port_b]))
        srv.url = a_url if name == "a" else b_url
        servers.append(srv)
    for srv in servers:
        srv.start(same_port=True)
    for srv in servers:
        await srv.wait_ready()
    return servers[0], servers[1]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _both_parked(a: ServerProcess, b: ServerProcess) -> tuple[str, str, str]:
    """B's run started and parked on the call; A's task parked on its question: (B's run, A's
    run, A's open interruption)."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        r = await http.post(f"{b.url}/v1/runs", headers={**_auth(TOKEN_B), "Accept": "application/json"},
                            json={"agent": "caller", "prompt": "go", "user_credentials": {"alpha": TOKEN_A}})
        assert r.status_code == 202, r.text
        b_run = r.json()["run_id"]

    async def a_asks() -> tuple[str, str] | None:
        rows = await query(a.database_url, "SELECT id, run_id FROM interrupts WHERE status = 'pending'")
        return (rows[0]["run_id"], rows[0]["id"]) if rows else None

    a_run, interrupt = await until(a_asks, 60, interval=0.1, what="A's task asks its question")

    async def b_parked() -> bool:
        rows = await query(b.database_url, "SELECT status FROM runs WHERE id = %s", (b_run,))
        return bool(rows[0]["status"] == "waiting")

    await until(b_parked, 60, interval=0.1, what="B's run parked on the A2A call")
    return b_run, a_run, interrupt


async def _answer(a: ServerProcess, a_run: str, interrupt: str) -> None:
    async with httpx.AsyncClient(timeout=10.0) as http:
        r = await http.post(f"{a.url}/v1/runs/{a_run}/interrupts/{interrupt}/resolve", headers=_auth(TOKEN_A),
                            json={"disposition": "answer", "answer": ANSWER})
        assert r.status_code == 200, r.text


async def _completed_once(b: ServerProcess, b_run: str) -> list[dict[str, Any]]:
    async def ended() -> str | None:
        rows = await query(b.database_url, "SELECT status FROM runs WHERE id = %s", (b_run,))
        status = str(rows[0]["status"])
        return status if status in ("completed", "failed", "cancelled") else None

    assert await until(ended, 90, interval=0.2, what="B's run ends") == "completed", b.log_tail()
    results = await query(b.database_url, "SELECT payload FROM events WHERE run_id = %s AND type = 'tool_result'",
                          (b_run,))
    assert len(results) == 1, results
    return results


@pytest.mark.parametrize("killed", ["a", "b"])
async def test_a2a_call_parked_survives_kill9(make_db: MakeDb, tmp_path: Path, killed: str) -> None:
    a, b = await _pair(make_db, tmp_path)
    try:
        b_run, a_run, interrupt = await _both_parked(a, b)
        victim = a if killed == "a" else b
        victim.kill9()
        if killed == "b":
            await _answer(a, a_run, interrupt)  # A's push to B fails while B is down
            await b.restart(same_port=True)
        else:
            await a.restart(same_port=True)
            await _answer(a, a_run, interrupt)
        results = await _completed_once(b, b_run)
        text = str(results[0]["payload"])
        assert "painted it" in text and "is_error': True" not in text, text
        calls = await query(b.database_url, "SELECT remote_task_id, pushes FROM a2a_calls WHERE run_id = %s",
                            (b_run,))
        assert [c["remote_task_id"] for c in calls] == [a_run]
        a_runs = await query(a.database_url, "SELECT count(*) AS n FROM runs")
        assert a_runs[0]["n"] == 1  # one remote task, whatever was retried
        print(f"killed {killed}: pushes received by B = {calls[0]['pushes']}")
    finally:
        a.stop()
        b.stop()
        for srv in (a, b):
            print(f"\n===== {srv.name}: {srv.starts} start(s)\n{srv.log_tail(3000, all_starts=True)}")
