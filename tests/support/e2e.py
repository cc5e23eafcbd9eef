"""Helpers for the end-to-end tests: `treadle serve` as a real subprocess, SQL on its database,
SSE readers and transcript checks. Everything stays on loopback; every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml
from psycopg.rows import dict_row

from treadle.client.http import SseEvent, parse_sse

# -- SQL (the databases come from tests.support.db) ----------------------------------------------------


async def query(url: str, sql: str, params: Any = None) -> list[dict[str, Any]]:
    """One statement on its own autocommit connection (the tests look at the tables directly)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchall() if cur.description else []


async def dump_all(url: str) -> str:
    """Every row of every table, as COPY writes it (what pg_dump's data section holds)."""
    tables = [r["t"] for r in await query(
        url, "SELECT quote_ident(table_name) AS t FROM information_schema.tables"
             " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
    chunks: list[str] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for table in tables:
            async with conn.cursor().copy(f"COPY {table} TO STDOUT") as copy:
                async for data in copy:
                    chunks.append(bytes(data).decode())
    return "".join(chunks)


async def execute(url: str, sql: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(sql)


def slow_trigger(name: str, seconds: float, on: str, when: str = "") -> str:
    """SQL for a trigger `name` that sleeps `seconds` in every row statement `on` names (as
    "INSERT ON memory"), where `when` holds if given: a kill or a freeze then falls inside that
    statement every time, not by luck. Drop it with `DROP TRIGGER name ON table`."""
    condition = f" WHEN ({when})" if when else ""
    return f"""
CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep({seconds});
    RETURN NEW;
END $$;
CREATE TRIGGER {name} BEFORE {on} FOR EACH ROW{condition} EXECUTE FUNCTION {name}();
"""


# -- the server process --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(path: Path, agents: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({**(extra or {}), "agents": agents}, sort_keys=False))
    return path


class ServerProcess:
    """`python -m treadle.cli.main serve` on a fresh loopback port per start (or the same one again,
    as a client that reconnects to one address sees it); its stdout and stderr go to one log file
    per start (`<name>-<n>.log` in `workdir`)."""

    def __init__(
        self,
        *,
        database_url: str,
        config_path: Path,
        workdir: Path,
        name: str = "treadle",
        env: dict[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.config_path = config_path
        self.workdir = workdir
        self.name = name
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0
        self.logs: list[Path] = []

    # lifecycle ---------------------------------------------------------------------------------

    def start(self, *, same_port: bool = False) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        port = int(self.url.rsplit(":", 1)[1]) if same_port and self.url else free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_") and k != "DATABASE_URL"}
        env.update(
            {
                "DATABASE_URL": self.database_url,
                "TREADLE_CONFIG": str(self.config_path),
                "TREADLE_LISTEN": f"127.0.0.1:{port}",
                "TREADLE_HOME": str(self.workdir / ".treadle"),
                "PYTHONUNBUFFERED": "1",
                **self.extra_env,
            }
        )
        log_path = self.workdir / f"{self.name}-{self.starts}.log"
        self.logs.append(log_path)
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "treadle.cli.main", "serve", "--log-level", "info"],
                env=env,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll GET /healthz until it answers 200 (uvicorn answers only after the lifespan has
        opened the runtime, migrated and started the workers)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=1.0) as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode} during startup:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.url}/healthz")).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name} not healthy after {timeout}s:\n{self.log_tail()}")
                await asyncio.sleep(0.05)

    async def restart(self, timeout: float = 60.0, *, same_port: bool = False) -> None:
        self.start(same_port=same_port)
        await self.wait_ready(timeout)

    def kill9(self) -> None:
        """SIGKILL: no shutdown hook, no lease release, connections dropped mid-statement."""
        assert self.proc is not None and self.proc.poll() is None, "the server is not running"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=15)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def log_tail(self, chars: int = 4000, all_starts: bool = False) -> str:
        out = []
        for p in self.logs if all_starts else self.logs[-1:]:
            with contextlib.suppress(OSError):
                text = p.read_text(errors="replace")
                out.append(f"--- {p.name} ---\n{text[-chars:]}")
        return "\n".join(out)


# -- SSE ---------------------------------------------------------------------------------------------


async def _lines(items: Iterable[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


async def parse_lines(lines: list[str]) -> list[SseEvent]:
    return [ev async for ev in parse_sse(_lines(lines))]


async def sse_lines(
    base_url: str,
    path: str,
    *,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """The raw lines of one SSE response, read until the server ends it (bounded by `timeout`)."""
    lines: list[str] = []
    async with asyncio.timeout(timeout), httpx.AsyncClient(base_url=base_url, timeout=timeout) as http:
        hdrs = {"Accept": "text/event-stream", **(headers or {})}
        async with http.stream("GET", path, params=params, headers=hdrs) as resp:
            if resp.status_code != 200:
                await resp.aread()
                raise AssertionError(f"GET {path}: {resp.status_code} {resp.text}")
            assert resp.headers["content-type"].startswith("text/event-stream")
            async for line in resp.aiter_lines():
                lines.append(line)
    return lines


async def read_stream(
    base_url: str, run_id: str, *, from_seq: int | None = None, last_event_id: int | None = None,
    timeout: float = 30.0,
) -> list[SseEvent]:
    params = {"from_seq": from_seq} if from_seq is not None else None
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else None
    lines = await sse_lines(base_url, f"/v1/runs/{run_id}/stream", params=params, headers=headers, timeout=timeout)
    # the stored events only: loomcycle's id-less first `agent` frame is checked in tests/loomcycle
    return [ev for ev in await parse_lines(lines) if not (ev.id is None and ev.event == "agent")]


def frame_blocks(lines: list[str]) -> list[list[str]]:
    """Split raw SSE lines into frames (comments dropped)."""
    blocks: list[list[str]] = []
    cur: list[str] = []
    for line in lines:
        if line == "":
            if cur:
                blocks.append(cur)
            cur = []
        elif not line.startswith(":"):
            cur.append(line)
    if cur:
        blocks.append(cur)
    return blocks


# -- transcripts -----------------------------------------------------------------------------------


def tool_caller_types(tool_calls: int) -> list[str]:
    """The exact event types of a completed mock `tool-caller` run with one tool per turn."""
    return [
        "user_input",
        "started",
        *(["tool_call", "usage", "tool_result"] * tool_calls),
        "text",
        "usage",
        "done",
    ]


def sum_usage(usages: Iterable[dict[str, Any]]) -> dict[str, int]:
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    total = dict.fromkeys(keys, 0)
    for u in usages:
        for k in keys:
            total[k] += int(u.get(k, 0))
    return total


def check_paired(events: list[dict[str, Any]]) -> list[str]:
    """Problems with tool_call/tool_result pairing in one transcript (API-shaped events with
    `seq`, `type` and the payload): every call answered exactly once, after the call, and no
    result without a call. Returns a list of problems (empty when fine)."""
    problems: list[str] = []
    calls: dict[str, int] = {}
    results: dict[str, list[int]] = {}
    for e in events:
        if e["type"] == "tool_call":
            tid = e["tool_use"]["id"]
            if tid in calls:
                problems.append(f"tool_call {tid} recorded twice (seq {calls[tid]} and {e['seq']})")
            calls[tid] = e["seq"]
        elif e["type"] == "tool_result":
            results.setdefault(e["tool_use"]["id"], []).append(e["seq"])
    for tid, seq in calls.items():
        got = results.get(tid, [])
        if len(got) != 1:
            problems.append(f"tool_use {tid} (seq {seq}) has {len(got)} results {got}")
        elif got[0] < seq:
            problems.append(f"tool_use {tid}: result seq {got[0]} before its call seq {seq}")
    for tid in results.keys() - calls.keys():
        problems.append(f"tool_result for unknown tool_use {tid}")
    return problems
