"""Connecting to Postgres: `DATABASE_URL`, or an embedded server (pgserver: PG 16 + pgvector)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
import psycopg
from psycopg import pq
from psycopg.abc import RV, Buffer, Params, PQGen, QueryNoTemplate
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg.types.string import StrDumperUnknown
from psycopg_pool import AsyncConnectionPool

from treadle.errors import StoreError
from treadle.security.redact import SECRETS
from treadle.store import scope
from treadle.store.folding import Folded
from treadle.store.scope import current_tenant
from treadle.store.socketwait import NotReadOnly, Resumed, SocketReader

log = logging.getLogger("treadle.store")


def without_nul(value: Any) -> Any:
    """`value` with U+0000 replaced by U+FFFD in every string (keys too)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    """orjson (a tenth of the stdlib's time: a step's events are encoded on every commit), else
    the stdlib for what orjson refuses (a lone surrogate, a non-str key, an int past 64 bits)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value)


#: 19 digits in a row: maybe an integer past what orjson reads as an int (it reads 2**64 and
#: beyond as a float, silently); text with such a run is read by the stdlib instead
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _loads(data: str | bytes) -> Any:
    """What the stores read (jsonb: a claim reads a run's whole transcript): orjson, four times
    the stdlib's speed, except where an integer might lose digits, or where orjson refuses what
    the stdlib reads (a number past a double's range)."""
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def dumps_jsonb(value: Any) -> str:
    """JSON for a jsonb parameter. Postgres's jsonb cannot hold U+0000, which a model or a tool
    may well produce: such characters become U+FFFD instead of failing the step that writes them
    (and, five crashed steps later, the run). Known secret values are redacted
    (treadle.security.redact: the replacement keeps the JSON valid; a value is matched raw and
    JSON-escaped, so whether the encoder escapes non-ASCII or not, it is found)."""
    text = _dumps(value)
    if "\\u0000" in text:  # rare; a literal backslash-u0000 only costs a second pass
        text = _dumps(without_nul(value))
    return SECRETS.redact_text(text)


class RedactingStrDumper(StrDumperUnknown):
    """Every text parameter (answers, questions, errors, search text, ...) with known secret
    values redacted, as JSON values are."""

    def dump(self, obj: str) -> Buffer | None:
        return super().dump(SECRETS.redact_text(obj))


set_json_dumps(dumps_jsonb)  # every Jsonb(...) the stores write
set_json_loads(_loads)  # every json and jsonb value the stores read
psycopg.adapters.register_dumper(str, RedactingStrDumper)  # every str parameter

_embedded: dict[Path, Any] = {}

Connection = psycopg.AsyncConnection[DictRow]
AfterCommit = Callable[[], Awaitable[None]]


@dataclass(eq=False)
class StepTransaction:
    """A transaction the engine holds open while transactional tools run (see `Tool.effects`).

    While it is current (`Pool.step_transaction`), every store call in this task uses its
    connection, so a tool's writes commit — or roll back — together with the step. Work that must
    not happen before the commit (sending a step message to SQS, syncing an external scheduler)
    goes through `after_commit`, which runs it at once when no transaction is current."""

    pool: Pool
    conn: Connection
    #: the task that opened it: tasks it starts (which inherit the context) do not join it
    task: asyncio.Task[Any] | None
    callbacks: list[AfterCommit] = field(default_factory=list)
    #: the connection's pipeline while the transaction runs in pipeline mode (`Pool.pipelined`),
    #: and the transaction itself (psycopg's)
    pipeline: psycopg.AsyncPipeline | None = None
    block: psycopg.AsyncTransaction | None = None
    #: ended by `finish_with` (committed, or rolled back when its statement failed)
    finished: bool = False
    committed: bool = False
    #: open store transactions (savepoints) inside it, see `_Connection.transaction`
    savepoints: int = 0
    #: a transactional call's write the commit statement carries (store/folding.py)
    folded: Folded | None = None
    #: pipelined, and nothing sent yet: the pipeline and BEGIN wait for the first statement
    #: (`Pool.connection` calls `begin`), so a transaction whose only statement is the one
    #: `finish_with` sends runs it alone, as an autocommit statement — no BEGIN, no COMMIT
    pending: bool = False
    _pipeline_cm: AbstractAsyncContextManager[psycopg.AsyncPipeline] | None = None
    _plain_cursor: Any = None

    async def begin(self) -> None:
        """Start a pending transaction: enter pipeline mode and queue BEGIN (it travels with the
        first statement)."""
        if not self.pending:
            return
        self.pending = False
        await self.enter_pipeline()
        # psycopg's transaction(), not the connection's: no Syncs of its own
        block = psycopg.AsyncTransaction(self.conn)
        await block.__aenter__()
        self.block = block  # only once entered: the exit paths leave what was entered

    async def enter_pipeline(self) -> None:
        cm = self.conn.pipeline()
        self.pipeline = await cm.__aenter__()
        self._pipeline_cm = cm
        self._plain_cursor, self.conn.cursor_factory = self.conn.cursor_factory, _StepCursor

    async def leave_pipeline(self, exc: BaseException | None) -> None:
        """End pipeline mode with a last Sync (which carries whatever is queued: the COMMIT)."""
        cm, self._pipeline_cm = self._pipeline_cm, None
        if cm is None:
            return
        self.pipeline = None
        self.conn.cursor_factory = self._plain_cursor
        if exc is None:
            await cm.__aexit__(None, None, None)
        else:
            await cm.__aexit__(type(exc), exc, exc.__traceback__)

    @property
    def can_finish(self) -> bool:
        """Whether `finish_with` may end this transaction: pipelined (begun or pending), not
        ended, and no savepoint (a store's own `transaction()`) open on its connection."""
        begun = self.pipeline is not None and self.block is not None
        return (self.pending or begun) and not self.finished and not self.savepoints

    def fold(self, folded: Folded) -> bool:
        """Let the commit statement carry a call's write (store/folding.py); False when this
        transaction cannot: not pipelined (no failing fence), ended, a savepoint open, or a write
        already folded (one per step: two upserts of one row in one statement would fail)."""
        if not self.can_finish or self.folded is not None:
            return False
        self.folded = folded
        return True

    async def finish_with(self, query: QueryNoTemplate, params: Params) -> DictRow | None:
        """Send `query` and COMMIT in one round trip (one pipeline Sync) and return the query's
        first row. The query must fail when the transaction must not commit (e.g. its lease fence
        matched no row): a failing statement makes the server skip the COMMIT; the transaction is
        then rolled back and the error raised. Either way the transaction has ended; the
        connection stays lent to the task, in autocommit mode, until the `step_transaction` block
        ends. A pending transaction (nothing sent yet) sends `query` alone, in autocommit: one
        statement is one transaction, and failing, it rolls back whole."""
        if not self.can_finish:
            raise RuntimeError("finish_with: not a pipelined step transaction at its top level")
        if self.pending:
            self.pending, self.finished = False, True
            row = await run_statement(self.conn, query, params)
            self.committed = True
            return row
        assert self.pipeline is not None and self.block is not None
        cur = psycopg.AsyncCursor(self.conn)  # a plain cursor: queued until the Sync below
        # (raising here, the block's exit rolls back as usual)
        await cur.execute(query, params, prepare=prepare_now(self.conn))
        await self.block.__aexit__(None, None, None)  # queues COMMIT; psycopg's block has ended
        self.finished = True
        try:
            await self.leave_pipeline(None)  # its Sync sends both; the block goes on without a pipeline
            self.committed = True
        except psycopg.Error as exc:
            if self.conn.closed:
                raise
            await self.conn.execute("ROLLBACK")  # the statement failed: the COMMIT was skipped
            failure = statement_error(exc)
            if failure is exc:
                raise
            raise failure from None
        return await cur.fetchone()


def prepare_now(conn: Any) -> bool | None:
    """`prepare=` for a statement that every step runs: prepared on the server at its first run on
    a connection. psycopg prepares a statement at its 6th run (`prepare_threshold` 5), and the
    server parses and plans each run before that in full — for the step's large statements, a
    fresh process spent ~a tenth of its first seconds' CPU on it (docs/benchmarks.md, session 11).
    None (psycopg's rule) on a connection that never prepares (behind a transaction pooler)."""
    return None if conn.prepare_threshold is None else True


_statement_cursors: weakref.WeakKeyDictionary[Connection, psycopg.AsyncCursor[DictRow]] = weakref.WeakKeyDictionary()


async def run_statement(conn: Connection, query: QueryNoTemplate, params: Params) -> DictRow | None:
    """Execute a hot statement (the step's lone commit statement) on the connection's own
    long-lived cursor and return its first row. psycopg keeps a cursor's adaptation state (its
    dumper per parameter type) while the same query object runs again on it; `conn.execute`
    builds a cursor, a transformer and ~30 dumpers for each statement."""
    cur = _statement_cursors.get(conn)
    if cur is None or cur.closed:
        cur = _statement_cursors[conn] = psycopg.AsyncCursor(conn)
    await cur.execute(query, params, prepare=prepare_now(conn))
    return await cur.fetchone()


def statement_error(exc: psycopg.Error) -> psycopg.Error:
    """The error of the statement that failed in a pipeline. Leaving a pipeline whose statement
    failed raises that statement's error — or, depending on how the server's answers arrive,
    `PipelineAborted` (for the skipped COMMIT) with the statement's error as its context; callers
    match on the statement's error (e.g. the step commit's fence, DivisionByZero)."""
    found: BaseException = exc
    while isinstance(found, psycopg.errors.PipelineAborted) and isinstance(found.__context__, psycopg.Error):
        found = found.__context__
    return found if isinstance(found, psycopg.Error) else exc


_CURRENT: ContextVar[StepTransaction | None] = ContextVar("treadle_step_transaction", default=None)


def _current() -> StepTransaction | None:
    tx = _CURRENT.get()
    if tx is None or tx.task is not asyncio.current_task():
        return None
    return tx


async def after_commit(callback: AfterCommit) -> None:
    """Run `callback` once the current step transaction commits (now, when there is none); a
    transaction that rolls back drops it."""
    tx = _current()
    if tx is None:
        await callback()
    else:
        tx.callbacks.append(callback)


def in_step_transaction() -> bool:
    return _current() is not None


def current_step_transaction(pool: Pool) -> StepTransaction | None:
    """The step transaction current in this task on `pool`, if any."""
    tx = _current()
    return tx if tx is not None and tx.pool is pool else None


class _Connection(psycopg.AsyncConnection[DictRow]):
    """The pool's connections. Inside a pipelined step transaction `transaction()` (a store's own
    transaction: a savepoint there) queues SAVEPOINT and RELEASE to travel with the next statement,
    without the Syncs psycopg adds around a transaction block in pipeline mode — every statement
    is synced where it runs (`_StepCursor`), so errors surface inside the block all the same.
    Waiting for the server keeps the socket registered with the loop between statements
    (store/socketwait.py)."""

    _reader: SocketReader | None = None

    async def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        # (`interval`: psycopg's own default, used by its wait only)
        if timeout is None:
            try:
                return cast(RV, await self._socket_reader().wait(gen))
            except NotReadOnly as other:  # a write to wait for: psycopg's wait does it
                gen = cast(PQGen[RV], other.resumed)
            except (asyncio.CancelledError, KeyboardInterrupt, SystemExit) as exc:
                # psycopg's wait, interrupted the same way, cancels the running query on the server
                # (the connection stays usable) and raises it again
                gen = cast(PQGen[RV], Resumed(gen, error=exc))
        elif self._reader is not None:
            self._reader.drop()  # psycopg's wait registers the socket itself, and unregisters it
        return await super().wait(gen, interval, timeout)

    def _socket_reader(self) -> SocketReader:
        loop, fd = asyncio.get_running_loop(), self.pgconn.socket
        reader = self._reader
        if reader is None or reader.loop is not loop or reader.fd != fd:
            if reader is not None:
                reader.drop()
            reader = self._reader = SocketReader(loop, fd)
            weakref.finalize(self, reader.drop)  # a connection collected unclosed: its socket goes too
        return reader

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.drop()
        await super().close()

    @asynccontextmanager
    async def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> AsyncIterator[psycopg.AsyncTransaction]:
        tx = _current()
        if tx is None or tx.conn is not self or tx.pipeline is None or tx.finished:
            async with super().transaction(savepoint_name, force_rollback) as block:
                yield block
            return
        if self.pgconn.transaction_status == pq.TransactionStatus.IDLE:
            await tx.pipeline.sync()  # BEGIN still queued: send it, so that this block is a savepoint
        tx.savepoints += 1
        try:
            async with psycopg.AsyncTransaction(self, savepoint_name, force_rollback) as block:
                yield block
        finally:
            tx.savepoints -= 1


class _StepCursor(psycopg.AsyncCursor[DictRow]):
    """The cursor of a pipelined step transaction's connection: each statement is sent with
    whatever the pipeline has queued (BEGIN, SAVEPOINT, RELEASE) and synced at once, so its result
    — rows, `rowcount`, an error — is there when `execute` returns, exactly as without a pipeline
    (store code reads `rowcount` and catches errors around `execute`)."""

    async def execute(self, *args: Any, **kwargs: Any) -> _StepCursor:
        await super().execute(*args, **kwargs)
        tx = _current()
        if tx is not None and tx.conn is self.connection and tx.pipeline is not None:
            await tx.pipeline.sync()
        return self


@dataclass(slots=True)
class _Held:
    task: asyncio.Task[Any] | None
    #: taken from the pool at the task's first step statement, given back by `Pool.released`
    conn: Connection | None = None


_HELD: ContextVar[_Held | None] = ContextVar("treadle_held_connection", default=None)


class _Lent:
    """The held connection as a context manager that returns nothing to the pool (taken from it
    first when the task holds none at the moment)."""

    __slots__ = ("held", "pool")

    def __init__(self, pool: Pool, held: _Held) -> None:
        self.pool = pool
        self.held = held

    async def __aenter__(self) -> Connection:
        if self.held.conn is None:
            conn = await self.pool.inner.getconn()
            try:
                await self.pool._act_for(conn, None)
            except BaseException:
                await self.pool.inner.putconn(conn)
                raise
            self.held.conn = conn
        return self.held.conn

    async def __aexit__(self, *exc: object) -> None:
        return None


class Pool:
    """The connection pool, aware of the current step transaction: `connection()` lends that
    transaction's connection while one is current in this task (a store's own `transaction()`
    then becomes a savepoint), else a pooled connection in autocommit mode — acting for the
    request's tenant while one is bound (store/scope.py), as the tables' owner otherwise."""

    def __init__(self, inner: AsyncConnectionPool[Connection], *, behind_pooler: bool = False) -> None:
        self.inner = inner
        self.behind_pooler = behind_pooler
        #: run step transactions in libpq's pipeline mode: BEGIN travels with the transaction's
        #: first statement and COMMIT with its last, instead of each costing a round trip (off
        #: behind a transaction pooler: RDS Proxy does not document taking a pipeline)
        self.pipelined = not behind_pooler
        #: the tenant each pooled connection's session acts for (absent: the owner)
        self._acting: weakref.WeakKeyDictionary[Connection, str] = weakref.WeakKeyDictionary()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        tx = _current()
        if tx is not None and tx.pool is self:
            await tx.begin()
            yield tx.conn
            return
        tenant = current_tenant()
        async with self.inner.connection() as conn:
            if tenant is not None and self.behind_pooler:
                # a transaction pooler (RDS Proxy) may hand the next statement to another server
                # connection: the binding must be transaction-local, the checkout one transaction
                # (a store's own transaction() inside it becomes a savepoint)
                await conn.execute(scope.enter_transaction(tenant))
                try:
                    yield conn
                except BaseException:
                    with suppress(psycopg.Error):  # a broken connection: the pool discards it
                        await conn.execute("ROLLBACK")
                    raise
                await conn.execute("COMMIT")
                return
            await self._act_for(conn, tenant)
            yield conn

    async def _act_for(self, conn: Connection, tenant: str | None) -> None:
        """Switch a direct connection's session to `tenant` (None: back to the owner) — no round
        trip when it already acts so, which is the common case (workers never bind; a request's
        connections are reused by the next request of the same tenant)."""
        if self._acting.get(conn) == tenant:
            return
        self._acting.pop(conn, None)  # unknown until the statement succeeded
        await conn.execute(scope.session_statement(tenant))
        if tenant is not None:
            self._acting[conn] = tenant

    @asynccontextmanager
    async def holding(self) -> AsyncIterator[None]:
        """While the block runs, this task's step statements (`step_connection`: its events, its
        commits) share one pooled connection, taken at the first of them — except across what
        `released` wraps: a model call or an external tool gives it back, so a step waiting on
        something slow holds no connection (issue 32). Any other `connection()` is its own."""
        held = _Held(asyncio.current_task())
        token = _HELD.set(held)
        try:
            yield
        finally:
            _HELD.reset(token)
            await self._give_back(held)

    @asynccontextmanager
    async def released(self, after_s: float = 0.0, also: Callable[[], None] | None = None) -> AsyncIterator[None]:
        """Give this task's held connection (`holding`) back to the pool while the block waits (on
        a model or a tool) — once it has waited `after_s`: a wait that ends sooner (a model that
        answers at once) keeps it. The next step statement takes one again. `also` is called at
        the same moment, from the same timer (the engine gives back its worker slot with it)."""
        held = _HELD.get()
        lend = (held is not None and held.task is asyncio.current_task() and held.conn is not None
                and held.conn.pgconn.transaction_status == pq.TransactionStatus.IDLE)
        if not lend and also is None:
            yield
            return
        if after_s <= 0:
            if lend and held is not None:
                await self._give_back(held)
            if also is not None:
                also()
            yield
            return
        putting: list[asyncio.Future[None]] = []

        def give_back() -> None:
            if lend and held is not None:
                conn, held.conn = held.conn, None  # detached now: the step cannot use it meanwhile
                if conn is not None:
                    putting.append(asyncio.ensure_future(self.inner.putconn(conn)))
            if also is not None:
                also()

        timer = asyncio.get_running_loop().call_later(after_s, give_back)
        try:
            yield
        finally:
            timer.cancel()
            if putting:
                await putting[0]

    async def _give_back(self, held: _Held) -> None:
        conn, held.conn = held.conn, None
        if conn is not None:
            await self.inner.putconn(conn)

    def step_connection(self) -> AbstractAsyncContextManager[Connection]:
        """A connection for a step's own work (its claim, its events, its commit), acting as the
        tables' owner: the current step transaction's, else the one this task holds (`holding`)
        while it is idle and sound, else a pooled one."""
        if _current() is not None:
            return self.connection()
        held = _HELD.get()
        if held is not None and held.task is asyncio.current_task() and (
                held.conn is None or (not held.conn.broken
                                      and held.conn.pgconn.transaction_status == pq.TransactionStatus.IDLE)):
            return _Lent(self, held)
        return self._owner_connection()

    @asynccontextmanager
    async def _owner_connection(self) -> AsyncIterator[Connection]:
        """A pooled connection acting as the tables' owner: steps are the runtime's work, never a
        tenant's."""
        async with self.inner.connection() as conn:
            await self._act_for(conn, None)
            yield conn

    @asynccontextmanager
    async def step_transaction(self) -> AsyncIterator[StepTransaction]:
        """Open a transaction and make it current for this task; on a clean exit commit it, then
        run its after-commit callbacks; on an exception roll it back and drop them."""
        if _current() is not None:
            raise RuntimeError("a step transaction is already open in this task")
        async with self.step_connection() as conn:
            tx = StepTransaction(self, conn, asyncio.current_task())
            token = _CURRENT.set(tx)
            try:
                if self.pipelined:
                    # the first statement starts it (`begin`): BEGIN (and a SAVEPOINT, a RELEASE)
                    # is queued and travels with the next statement; every statement is synced at
                    # once (`_StepCursor`), so it runs, and fails, where it is executed, as without
                    # a pipeline; COMMIT goes with the pipeline's last Sync
                    tx.pending = True
                    try:
                        try:
                            yield tx
                        except BaseException as exc:
                            if tx.block is not None and not tx.finished:
                                await tx.block.__aexit__(type(exc), exc, exc.__traceback__)
                            raise
                        finally:
                            tx.pending = False
                        if tx.block is not None and not tx.finished:
                            await tx.block.__aexit__(None, None, None)
                    except BaseException as exc:
                        await tx.leave_pipeline(exc)
                        raise
                    await tx.leave_pipeline(None)
                else:
                    async with conn.transaction():
                        yield tx
            except BaseException:
                if tx.committed:
                    # `finish_with` committed, then the block raised: what waited for the commit
                    # still runs
                    for callback in tx.callbacks:
                        await callback()
                raise
            finally:
                _CURRENT.reset(token)
        for callback in tx.callbacks:
            await callback()

    async def check(self) -> None:
        await self.inner.check()

    async def close(self) -> None:
        await self.inner.close()


def embedded_database_url(home: Path) -> str:
    """Start (or reuse) the embedded Postgres under `home/pg` and return its URL.

    The server outlives a crashed treadle process and is reused by the next start; a clean
    exit of the last process using it stops it.
    """
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise StoreError("embedded Postgres needs the 'pgserver' package; or set DATABASE_URL") from exc
    home = home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    data = home / "pg"
    if data not in _embedded:
        if "XDG_RUNTIME_DIR" not in os.environ:  # pgserver's platformdirs wants a private one
            run_dir = home / "run"
            run_dir.mkdir(mode=0o700, exist_ok=True)
            os.environ["XDG_RUNTIME_DIR"] = str(run_dir)
        _forget_dead_users(data)
        try:
            _embedded[data] = pgserver.postgres_server.get_server(data, cleanup_mode="stop")
        except Exception as exc:
            raise StoreError(f"could not start embedded Postgres in {data}: {exc}") from exc
    return str(_embedded[data].get_uri())


def _forget_dead_users(data: Path) -> None:
    """pgserver lists the processes using its server in `.handle_pids.json` and stops the server
    when the last of them exits cleanly; a process killed (-9) never takes itself off, and then no
    later clean exit is the last. Drop the pids no longer running, under pgserver's own
    inter-process lock (what it holds while it adds and removes them)."""
    listing = data / ".handle_pids.json"
    if not listing.exists():
        return
    from pgserver.postgres_server import PostgresServer
    from pgserver.utils import DiskList

    with PostgresServer._lock:
        users = DiskList(listing)
        pids = users.get()
        alive = [pid for pid in pids if _running(pid)]
        if alive != pids:
            users.put(alive)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's, and running
        return True
    return True


def resolve_database_url(database_url: str | None, home: Path) -> str:
    return database_url or embedded_database_url(home)


async def _configure(conn: psycopg.AsyncConnection[DictRow]) -> None:
    await conn.set_autocommit(True)


async def open_pool(
    url: str, size: int, *, name: str = "treadle", idle_in_transaction_s: float | None = None,
    behind_pooler: bool = False,
) -> Pool:
    """With `idle_in_transaction_s` (the runtime passes its lease), Postgres ends a session that
    sits inside a transaction longer than that — a process frozen mid-transaction (SIGSTOP, a
    hung host) then releases its locks and is swept like a dead worker, instead of stalling every
    other worker that needs the same rows. Set as a startup parameter: no statement per session.
    `behind_pooler`: nothing that pins a pooler's connection (see the comment below)."""
    kwargs: dict[str, Any] = {"row_factory": dict_row}
    if behind_pooler:
        # psycopg prepares a statement server-side after 5 runs on a connection, and a startup
        # `options` is session state: RDS Proxy would pin each of these connections to one
        # database connection for its whole life. The server's parameter group sets the timeout.
        kwargs["prepare_threshold"] = None
    elif idle_in_transaction_s is not None:
        kwargs["options"] = f"-c idle_in_transaction_session_timeout={max(1, int(idle_in_transaction_s * 1000))}"
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        url,
        connection_class=_Connection,
        min_size=min(size, 4),
        max_size=size,
        kwargs=kwargs,
        configure=_configure,
        name=name,
        open=False,
        timeout=30.0,
    )
    try:
        await pool.open(wait=True, timeout=30.0)
    except Exception as exc:
        await pool.close()
        raise StoreError(f"database unreachable: {redact_url(url)}: {exc}") from exc
    return Pool(pool, behind_pooler=behind_pooler)


def redact_url(url: str) -> str:
    """Hide a password in a libpq URL for messages and logs."""
    try:
        scheme, rest = url.split("://", 1)
    except ValueError:
        return url
    if "@" not in rest.split("/", 1)[0]:
        return url
    creds, host = rest.split("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url
