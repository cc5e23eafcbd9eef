"""loomcycle's own TypeScript client (adapters/ts of its repository, built from source) against a
served treadle: `continueSession`, a `session_id` run, `getTranscript`, `compactRun`, `replaySession` and the
typed session errors (ts_client/drive_sessions.mjs holds the checks); the pause and snapshot
methods and their typed errors (ts_client/drive_snapshots.mjs).

Tests never reach a registry, so the client must be built beforehand: set TREADLE_LOOMCYCLE_TS to
its folder (`git clone https://github.com/denn-gubsky/loomcycle && cd loomcycle/adapters/ts &&
npm install && npx tsc`); without it (or without `node`) the test is skipped."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, TreadleConfig, load_config, parse_config
from treadle.store.sqlmem import SqlMemory

HERE = Path(__file__).parent / "ts_client"
SCRIPT = {"model": "script", "mock": {"script": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}}


def _client_dir() -> str:
    built = os.environ.get("TREADLE_LOOMCYCLE_TS")
    if not shutil.which("node") or not built or not (Path(built) / "dist" / "index.js").is_file():
        pytest.skip("needs node and TREADLE_LOOMCYCLE_TS (loomcycle's adapters/ts, built: dist/index.js)")
    return built


@pytest.fixture(scope="module")
async def base(db_url: str) -> AsyncIterator[str]:
    config = parse_config({"agents": {"script": SCRIPT, "slow": {"model": "echo", "mock": {"latency_ms": 400}}}})
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=None, sweep_interval_seconds=30.0, provider_retries=0)
    server = BackgroundServer(settings, config)
    url = await server.start()
    try:
        yield url
    finally:
        await server.stop()


async def _drive(script: str, base: str, built: str, expected_ok: int, **env: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "node", str(HERE / script), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "BASE": base, "LOOMCYCLE_TS": built, **env})
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    lines = out.decode().splitlines()
    assert proc.returncode == 0, "\n".join(lines)
    assert len([line for line in lines if line.startswith("ok ")]) == expected_ok, "\n".join(lines)


async def test_continue_session_and_compact_run_with_loomcycles_client(base: str) -> None:
    await _drive("drive_sessions.mjs", base, _client_dir(), 7)


@asynccontextmanager
async def served_alone(db_url: str, config: TreadleConfig, path: Path = Path("unused.yaml")) -> AsyncIterator[str]:
    """A treadle on a database of its own (another server's workers would take its runs)."""
    settings = Settings(database_url=db_url, home=TEST_HOME, config=path, workers=2,
                        auth_token=None, sweep_interval_seconds=30.0, provider_retries=0)
    server = BackgroundServer(settings, config)
    url = await server.start()
    try:
        yield url
    finally:
        await server.stop()


async def test_pause_and_snapshots_with_loomcycles_client(migrated_db_url: str) -> None:
    """On a database of its own: the pause is runtime-wide (ts_client/drive_snapshots.mjs)."""
    built = _client_dir()
    config = parse_config({"agents": {"slow": {"model": "echo", "mock": {"latency_ms": 400}}}})
    async with served_alone(migrated_db_url, config) as url:
        await _drive("drive_snapshots.mjs", url, built, 6)


async def test_the_clients_run_channel_memory_and_def_methods(migrated_db_url: str) -> None:
    """drive.mjs (31 checks: runs, streams, interactive sessions, interrupts, hooks, defs, channels,
    memory incl. search, sessions, transcript, compaction) and drive_parity.mjs (7: turn cancel,
    agent cancel count, user run-state stream, channel update/purge/broadcast, the user-scoped
    family) against a treadle with ts_client/drive.yaml (hooks need TREADLE_HOOKS_SECRET), on a
    database of its own (another server's workers would take these runs)."""
    built = _client_dir()
    before = os.environ.get("TREADLE_HOOKS_SECRET")
    os.environ["TREADLE_HOOKS_SECRET"] = "hooksecret0123456789"
    try:
        async with served_alone(migrated_db_url, load_config(HERE / "drive.yaml"), HERE / "drive.yaml") as url:
            await _drive("drive.mjs", url, built, 31)
            await _drive("drive_parity.mjs", url, built, 7)
    finally:
        if before is None:
            os.environ.pop("TREADLE_HOOKS_SECRET", None)
        else:
            os.environ["TREADLE_HOOKS_SECRET"] = before


#: an agent granted SQL memory by loomcycle's `sql_scopes`: it creates a table, fills it, reads it,
#: and tries a scope it was not granted
SQLER = {"model": "script", "tools": ["Memory"], "sql_scopes": ["agent", "run"], "mock": {"script": [
    {"tool": "Memory", "input": {"op": "sql_exec", "scope": "run", "statement": "CREATE TABLE t (k text, n int)"}},
    {"tool": "Memory", "input": {"op": "sql_exec", "scope": "run",
                                 "statement": "INSERT INTO t VALUES ($1, 1), ($2, 2)", "args": ["a", "b"]}},
    {"tool": "Memory", "input": {"op": "sql_query", "scope": "run", "statement": "SELECT k, n FROM t ORDER BY k"}},
    {"tool": "Memory", "input": {"op": "sql_query", "scope": "tenant", "statement": "SELECT 1"}},
    {"text": "counted"}]}}


async def test_documents_path_memory_search_and_sql_memory_with_loomcycles_client(migrated_db_url: str) -> None:
    """Issue 41 (ts_client/drive_knowledge.mjs): path() per op, document() with each op of the
    client's DocumentToolInput (the ones treadle refuses by name count as partial), memorySearch()
    with rank/dedup/sources, and SQL memory in a run of an agent configured with sql_scopes."""
    built = _client_dir()
    config = parse_config({"agents": {"sqler": SQLER}, "memory": {"embedder": {"driver": "local"}, "sql": {}}})
    try:
        async with served_alone(migrated_db_url, config) as url:
            await _drive("drive_knowledge.mjs", url, built, 37)
    finally:
        await SqlMemory(migrated_db_url).drop_all()  # its scopes' roles are per cluster


async def test_ensure_code_agent_with_loomcycles_client(migrated_db_url: str) -> None:
    """Issue 35: `ensureCodeAgent` registers an inline code-js agent (idempotent by content), its
    runs stream, new code is a new version, and an LLM agent spawns it (ts_client/drive_code_agents.mjs)."""
    pytest.importorskip("quickjs")
    built = _client_dir()
    spawn = {"tool": "Agent", "input": {"name": "ts-greeter", "prompt": "boss"}}
    config = parse_config({"code_agents": {"enabled": True}, "agents": {"boss": {
        "model": "script", "tools": ["Agent"], "agent_def_scopes": ["any"],
        "mock": {"script": [spawn, {"text": "boss done"}]}}}})
    async with served_alone(migrated_db_url, config) as url:
        await _drive("drive_code_agents.mjs", url, built, 5)

ASK = {"tool": "Interruption", "input": {"op": "ask", "question": "proceed?", "options": ["yes", "no"]}}
RESIDENT_AGENTS = {
    "holder": {"model": "script", "tools": ["Agent", "Interruption"], "mock": {"script": [
        {"tool": "Agent", "input": {"op": "open", "name": "echo", "prompt": "hello", "idle_ttl_seconds": 90}},
        {"tool": "Agent", "input": {"op": "open", "name": "asker", "prompt": "q"}},
        {"tool": "Interruption", "input": {"op": "ask", "question": "keep them?", "options": ["yes", "no"]}},
        {"text": "bye"}]}},
    "echo": {"model": "echo"},
    "asker": {"model": "script", "tools": ["Interruption"], "mock": {"script": [
        ASK, {"text": "asked"}, ASK, {"text": "asked again"}, ASK, {"text": "asked thrice"}]}},
}


async def test_resident_sub_agents_with_loomcycles_client_and_web_module(migrated_db_url: str) -> None:
    """Issue 36 item 1 (ts_client/drive_residents.mjs): loomcycle's resident methods — in its web
    console's api.ts (listResidentChildren, closeResidentChild, cancelResidentChildTurn; its client
    has none) — and its client's getAgent (resident, resident_state), sendRunInput, listRunInterrupts
    and resolveInterrupt. Also needs TREADLE_LOOMCYCLE_WEB: a folder whose dist/api.js is loomcycle's
    web/src/api.ts compiled (`tsc --strict --target es2022 --module es2022 --lib es2022,dom --outDir
    dist api.ts`)."""
    built = _client_dir()
    web = os.environ.get("TREADLE_LOOMCYCLE_WEB")
    if not web or not (Path(web) / "dist" / "api.js").is_file():
        pytest.skip("needs TREADLE_LOOMCYCLE_WEB (loomcycle's web/src/api.ts compiled: dist/api.js)")
    config = parse_config({"agents": RESIDENT_AGENTS})
    settings = Settings(database_url=migrated_db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=None, sweep_interval_seconds=30.0, provider_retries=0)
    server = BackgroundServer(settings, config)
    url = await server.start()
    try:
        await _drive("drive_residents.mjs", url, built, 5, LOOMCYCLE_WEB=web)
    finally:
        await server.stop()
