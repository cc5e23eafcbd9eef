"""What the benchmark scripts share: percentiles, a scratch database, driving a tenant's runs to
the end with a worker pool while timing it, wrapping the engine's seams (failing loudly when one
is gone), and counting the SQL a pass sends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent

#: False while the benchmark's own bookkeeping queries run (they are not the engine's work)
_COUNTED: ContextVar[bool] = ContextVar("bench_counted", default=True)


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank); NaN without values."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))] if s else float("nan")


def ms(x: float) -> str:
    return f"{x * 1000:.2f}"


class SeamMissing(SystemExit):
    pass


def seam(obj: Any, name: str, why: str) -> Any:
    """`getattr(obj, name)`, or exit with a message naming the seam: the engine changed under the
    benchmark and its numbers would silently mean something else."""
    found = getattr(obj, name, None)
    if found is None:
        raise SeamMissing(
            f"benchmark seam missing: {type(obj).__module__}.{type(obj).__name__}.{name} ({why}).\n"
            f"The engine changed; update the benchmark script to the new seam before trusting its numbers."
        )
    return found


def first_seam(obj: Any, names: list[str], why: str) -> str:
    """The first of `names` that `obj` has (a seam renamed between engine versions), else exit."""
    for name in names:
        if getattr(obj, name, None) is not None:
            return name
    raise SeamMissing(
        f"benchmark seam missing: none of {', '.join(type(obj).__name__ + '.' + n for n in names)} ({why}).\n"
        f"The engine changed; update the benchmark script to the new seam before trusting its numbers."
    )


def code_version() -> str:
    """Which treadle is measured: its source directory and git commit (dirty or not)."""
    import treadle

    src = Path(treadle.__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, check=True).stdout.strip()
        return f"{src} @ {rev}{' (+uncommitted changes)' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return str(src)


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A fresh database on $DATABASE_URL's server (else the embedded one), dropped afterwards."""
    from treadle.store.db import resolve_database_url

    home = ROOT / ".treadle" / "bench"
    home.mkdir(parents=True, exist_ok=True)
    server = resolve_database_url(os.environ.get("DATABASE_URL"), home)
    dbname = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    try:
        yield make_conninfo(server, dbname=dbname)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


class SqlCounter:
    """Counts what psycopg sends to the server while active (all connections of the process,
    except the benchmark's own bookkeeping, see `uncounted`):

    - `query`: every `AsyncCursor.execute` (`conn.execute` goes through it) — one SQL statement,
      one round trip;
    - `BEGIN`/`COMMIT`/`ROLLBACK`/`SAVEPOINT`/`RELEASE`: the transaction-control commands psycopg
      sends itself for `conn.transaction()` (psycopg's `_exec_command`, a private method: its
      absence ends the benchmark with a message);
    - `autocommit`: queries sent on an autocommit connection with no transaction open — each is a
      transaction of its own that commits when the statement ends;
    - `pipelined`: queries and commands sent while the connection is in pipeline mode (queued,
      not a round trip each), and `sync`: the pipeline's Syncs — a round trip each.

    transactions = autocommit + BEGIN; commits = autocommit + COMMIT (read-only ones included: the
    client cannot tell them apart; the server-side count of `pg_stat_database` is printed beside).
    """

    def __init__(self, timed: bool = False) -> None:
        self.counts: Counter[str] = Counter()
        #: with `timed`: seconds spent awaiting each kind of statement (`fingerprint`), and calls
        self.waits: dict[str, list[float]] = {}
        self.timed = timed
        self._patched: list[tuple[type, str, Any]] = []

    @property
    def round_trips(self) -> int:
        return round_trips(self.counts)

    @property
    def transactions(self) -> int:
        return self.counts["autocommit"] + self.counts["BEGIN"]

    @property
    def commits(self) -> int:
        return self.counts["autocommit"] + self.counts["COMMIT"]

    def reset(self) -> None:
        self.counts.clear()

    def _patch(self, owner: type, name: str, make: Callable[[Any], Any]) -> None:
        for klass in owner.__mro__:
            if name in klass.__dict__:
                orig = klass.__dict__[name]
                setattr(klass, name, make(orig))
                self._patched.append((klass, name, orig))
                return
        raise SeamMissing(f"psycopg {psycopg.__version__}: {owner.__name__}.{name} not found; the SQL counter"
                          " needs it (update scripts/bench_support.py)")

    def __enter__(self) -> SqlCounter:
        counts = self.counts
        #: per connection in pipeline mode: what its next Sync carries (for the timed table)
        queued: dict[int, str] = {}

        def pipelined(conn: Any, what: str) -> bool:
            if getattr(conn, "_pipeline", None) is None:
                return False
            counts["pipelined"] += 1
            queued[id(conn)] = what if id(conn) not in queued else queued[id(conn)] + " + " + what
            return True

        def timed_sync(label: str, conn: Any, t0: float) -> None:
            what = queued.pop(id(conn), "nothing queued")
            if self.timed:
                slot = self.waits.setdefault(f"pipeline Sync ({label}): {what}"[:110], [0.0, 0])
                slot[0] += time.perf_counter() - t0
                slot[1] += 1

        def wrap_sync(orig: Any) -> Any:
            async def sync(pipeline: Any) -> Any:
                if not _COUNTED.get():
                    return await orig(pipeline)
                t0 = time.perf_counter()
                try:
                    return await orig(pipeline)
                finally:
                    timed_sync("sync", pipeline._conn, t0)

            return sync

        def wrap_pipeline_exit(orig: Any) -> Any:
            async def aexit(pipeline: Any, *exc: Any) -> Any:
                if not _COUNTED.get():
                    return await orig(pipeline, *exc)
                t0 = time.perf_counter()
                try:
                    return await orig(pipeline, *exc)
                finally:
                    timed_sync("end", pipeline._conn, t0)

            return aexit

        def wrap_execute(orig: Any) -> Any:
            async def execute(cur: Any, query: Any, *a: Any, **kw: Any) -> Any:
                if not _COUNTED.get():
                    return await orig(cur, query, *a, **kw)
                counts["query"] += 1
                conn = cur.connection
                queued = pipelined(conn, fingerprint(query)[:40])
                if not queued and conn.autocommit and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE:
                    counts["autocommit"] += 1
                if queued or not self.timed:
                    return await orig(cur, query, *a, **kw)
                t0 = time.perf_counter()
                try:
                    return await orig(cur, query, *a, **kw)
                finally:
                    slot = self.waits.setdefault(fingerprint(query), [0.0, 0])
                    slot[0] += time.perf_counter() - t0
                    slot[1] += 1

            return execute

        def timed_gen(gen: Any, word: str) -> Any:
            t0 = time.perf_counter()
            try:
                return (yield from gen)
            finally:
                slot = self.waits.setdefault(word, [0.0, 0])
                slot[0] += time.perf_counter() - t0
                slot[1] += 1

        def wrap_command(orig: Any) -> Any:
            def exec_command(conn: Any, command: Any, *a: Any, **kw: Any) -> Any:
                if _COUNTED.get():
                    text = command if isinstance(command, bytes) else command.as_bytes(conn)
                    word = text.split(None, 1)[0].decode().upper() if text.strip() else "?"
                    if word == "ROLLBACK" and b" TO " in text.upper():
                        word = "ROLLBACK TO"
                    word = word if word in ("BEGIN", "COMMIT", "ROLLBACK", "ROLLBACK TO", "SAVEPOINT",
                                            "RELEASE") else "query"
                    counts[word] += 1
                    if pipelined(conn, word):
                        return orig(conn, command, *a, **kw)
                    if self.timed:
                        return timed_gen(orig(conn, command, *a, **kw), word)
                return orig(conn, command, *a, **kw)

            return exec_command

        self._patch(psycopg.AsyncCursor, "execute", wrap_execute)
        self._patch(psycopg.AsyncConnection, "_exec_command", wrap_command)
        def wrap_enqueue_sync(orig: Any) -> Any:
            def enqueue_sync(pipeline: Any) -> Any:
                if _COUNTED.get():
                    counts["sync"] += 1  # every Sync psycopg sends: pipeline.sync(), a block's exit, ...
                return orig(pipeline)

            return enqueue_sync

        self._patch(psycopg.AsyncPipeline, "_enqueue_sync", wrap_enqueue_sync)
        self._patch(psycopg.AsyncPipeline, "sync", wrap_sync)
        self._patch(psycopg.AsyncPipeline, "__aexit__", wrap_pipeline_exit)
        return self

    def __exit__(self, *exc: object) -> None:
        for klass, name, orig in reversed(self._patched):
            setattr(klass, name, orig)
        self._patched.clear()


def round_trips(counts: Counter[str]) -> int:
    """Statements and transaction commands, each a round trip of its own — except in pipeline mode,
    where they are queued (`pipelined`) and each Sync (`sync`) is one round trip."""
    sent = sum(v for k, v in counts.items() if k not in ("autocommit", "pipelined", "sync"))
    return sent - counts["pipelined"] + counts["sync"]


def fingerprint(query: Any) -> str:
    """A short name for a statement: its first words, whitespace squeezed."""
    text = query if isinstance(query, str) else getattr(query, "_obj", None) or repr(query)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    words = " ".join(str(text).split())
    return words[:70]


@contextmanager
def uncounted() -> Iterator[None]:
    token = _COUNTED.set(False)
    try:
        yield
    finally:
        _COUNTED.reset(token)


def server_xact_commits(url: str) -> int:
    """`pg_stat_database.xact_commit` of the database (backends report theirs when they go idle
    or exit; read it after the pass's connections are closed)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def runs_updates(url: str) -> tuple[int, int]:
    """(updates, HOT updates) of the `runs` table so far (pg_stat_user_tables: reported by
    backends when they exit, like `server_xact_commits`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'runs'").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _proc_cpu(pid: int, children: bool) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu_s(url: str) -> float | None:
    """CPU seconds the Postgres server has used so far: the postmaster with its reaped children
    (exited backends) plus its live children (Linux /proc; None when the server is not local)."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        pid = int((Path(row[0]) / "postmaster.pid").read_text().split()[0]) if row else 0
        total = _proc_cpu(pid, children=True)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                        total += _proc_cpu(int(entry.name), children=False)
                except (OSError, ValueError, IndexError):
                    continue
        return total
    except (OSError, ValueError, IndexError, psycopg.Error):
        return None


def wal_lsn(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
    return int(row[0]) if row else 0


class ServerMeter:
    """WAL bytes written and server CPU used between `start()` and `stop()` (whole server)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.wal = 0
        self.cpu: float | None = None

    def start(self) -> ServerMeter:
        self._wal0, self._cpu0 = wal_lsn(self.url), server_cpu_s(self.url)
        return self

    def stop(self) -> ServerMeter:
        cpu1 = server_cpu_s(self.url)
        self.wal = wal_lsn(self.url) - self._wal0
        self.cpu = cpu1 - self._cpu0 if cpu1 is not None and self._cpu0 is not None else None
        return self


async def drive_to_completion(rt: Any, pool: Any, tenant: str, poll_s: float = 0.02,
                              ended: asyncio.Event | None = None) -> dict[str, Any]:
    """Start `pool`, wait until none of the tenant's runs is queued or running, stop it; the
    elapsed seconds, completed runs and iterations done. Its own queries are `uncounted`.
    `ended`: set in the process when every run has ended (`Instrumented.expect_ends`); the query
    that checks then runs once a second at most instead of every `poll_s` — a query every 20 ms
    costs the server CPU the workers compete for, which the floor's loop does not pay."""
    t0 = time.perf_counter()
    pool.start()
    polls = 0
    while True:
        if ended is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), 1.0)
        with uncounted():
            async with rt.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM runs WHERE tenant_id = %s AND status IN ('queued','running')",
                    (tenant,),
                )
                row = await cur.fetchone()
        polls += 1
        if row and row["n"] == 0:
            break
        if ended is None:
            await asyncio.sleep(poll_s)
    elapsed = time.perf_counter() - t0
    await pool.stop()
    with uncounted():
        async with rt.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'completed') AS ok, sum(iterations) AS iters"
                " FROM runs WHERE tenant_id = %s",
                (tenant,),
            )
            row = await cur.fetchone()
    iterations = int(row["iters"] or 0) if row else 0
    return {"elapsed": elapsed, "completed": int(row["ok"]) if row else 0, "iterations": iterations,
            "rate": iterations / elapsed if elapsed else 0.0, "polls": polls + 1}
