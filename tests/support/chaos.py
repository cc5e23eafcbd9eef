"""Helpers of the chaos tests: SQL on their database, `treadle serve` replicas as real subprocesses
that can be SIGKILLed, SIGSTOPped and SIGCONTed, bounded polling and transcript checks (like
tests/support/e2e.py, plus stop/continue). Loopback only; every wait is bounded by a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml
from psycopg.rows import dict_row

# -- SQL (the databases come from tests.support.db) ---------------------------------------------------
from tests.support.e2e import free_port, query  # the same helpers as the e2e tests


async def scalar(url: str, sql: str, params: Any = None) -> int:
    rows = await query(url, sql, params)
    return int(next(iter(rows[0].values())) or 0)


class Db:
    """One autocommit connection, opened on first use, for a loop that polls (a fresh connection
    per poll costs a Postgres backend fork each time)."""

    def __init__(self, url: str, application_name: str = "chaos-test") -> None:
        self.url = url
        self.application_name = application_name
        self.conn: psycopg.AsyncConnection[dict[str, Any]] | None = None

    async def query(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        if self.conn is None or self.conn.closed:
            self.conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, row_factory=dict_row, application_name=self.application_name
            )
        cur = await self.conn.execute(sql, params)
        return await cur.fetchall() if cur.description else []

    async def scalar(self, sql: str, params: Any = None) -> int:
        rows = await self.query(sql, params)
        return int(next(iter(rows[0].values())) or 0)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def __aenter__(self) -> Db:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# -- the server processes ------------------------------------------------------------------------------


def write_config(path: Path, config: dict[str, Any]) -> Path:
    """A whole treadle.yaml (agents, channels, ...)."""
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Replica:
    """One `python -m treadle.cli.main serve` on a fresh loopback port per start, in its own
    process group; stdout+stderr go to `<name>-<n>.log` in `workdir` (one file per start)."""

    def __init__(
        self, *, name: str, database_url: str, config_path: Path, workdir: Path, env: dict[str, str]
    ) -> None:
        self.name = name
        self.database_url = database_url
        self.config_path = config_path
        self.workdir = workdir
        self.extra_env = dict(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0
        self.stopped = False  # SIGSTOPped and not continued yet
        self.logs: list[Path] = []
        self.pids: list[int] = []

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        port = free_port()
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
        self.pids.append(self.proc.pid)
        self.stopped = False

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll GET /healthz until 200 (uvicorn answers only once the runtime is open)."""
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

    async def restart(self, timeout: float = 60.0) -> None:
        self.start()
        await self.wait_ready(timeout)

    def kill9(self) -> None:
        """SIGKILL: no shutdown hook, no lease release, connections dropped mid-statement."""
        assert self.running, f"{self.name} is not running"
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=15)
        self.stopped = False

    def sigstop(self) -> None:
        """SIGSTOP: the process freezes mid-whatever; its sockets stay open, its leases run out."""
        assert self.running and not self.stopped, f"{self.name} is not running"
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (after a SIGCONT, so that a frozen process can act on it), then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
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

    def log_grep(self, *needles: str, limit: int = 40) -> list[str]:
        """Log lines (of every start) containing any of `needles`."""
        hits: list[str] = []
        for p in self.logs:
            with contextlib.suppress(OSError):
                for line in p.read_text(errors="replace").splitlines():
                    if any(n in line for n in needles):
                        hits.append(f"{p.name}: {line}")
        return hits[-limit:]


# -- transcripts -----------------------------------------------------------------------------------


