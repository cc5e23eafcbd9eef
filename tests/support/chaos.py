"""Helpers of the chaos tests: SQL on their database, `treadle serve` replicas as real subprocesses
that can be SIGKILLed, SIGSTOPped and SIGCONTed, bounded polling and transcript checks (like
tests/support/e2e.py, plus stop/continue). Loopback only; every wait is bounded by a deadline."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import psycopg
import yaml
from psycopg.rows import dict_row

# -- SQL (the databases come from tests.support.db) ---------------------------------------------------
from tests.support.e2e import ServerProcess, query  # the same helpers as the e2e tests


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


class Replica(ServerProcess):
    """One `python -m treadle.cli.main serve` on a fresh loopback port per start, in its own
    process group (e2e's `ServerProcess`), that can also be frozen (SIGSTOP) and continued;
    stdout+stderr go to `<name>-<n>.log` in `workdir` (one file per start)."""

    def __init__(
        self, *, name: str, database_url: str, config_path: Path, workdir: Path, env: dict[str, str]
    ) -> None:
        super().__init__(database_url=database_url, config_path=config_path, workdir=workdir, name=name, env=env)
        self.stopped = False  # SIGSTOPped and not continued yet
        self.pids: list[int] = []

    def start(self, *, same_port: bool = False) -> None:
        super().start(same_port=same_port)
        assert self.proc is not None
        self.pids.append(self.proc.pid)
        self.stopped = False

    def kill9(self) -> None:
        """SIGKILL: no shutdown hook, no lease release, connections dropped mid-statement."""
        assert self.running, f"{self.name} is not running"
        super().kill9()
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
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
        super().stop(timeout)

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


