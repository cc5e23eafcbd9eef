"""Group commit: the lone commit statements of concurrent steps, committed as one transaction.

A step whose commit statement is its only statement (store/db.py `StepTransaction.pending`) sends
it alone, in autocommit: one round trip, one transaction. With several workers in one process
those transactions queue behind each other for the same server, and each pays a whole
transaction's fixed cost — the round trip and its wake-up, BEGIN and COMMIT processing, a WAL
flush. Here they gather instead: the first worker to arrive sends its statement at once (a lone
worker waits for nobody); workers that arrive while a batch is in flight queue, and the next of
them sends everything queued — BEGIN, the statements, COMMIT — in one pipelined round trip, on its
own connection.

Why each member's outcome is the one it would have had alone:
- every statement is a whole step (its events, its step advance, its folded write) behind its own
  fence, and a fence that fails fails its statement (store/steps.py `_commit_sql`). One failing
  member fails the batch, so nothing of the batch commits, and every member is then sent again
  alone, where it gets exactly its own result or error;
- nothing commits before the COMMIT, which is queued only after every statement was: an error
  while queueing (a parameter that cannot be adapted) leaves the transaction open, and it is
  rolled back;
- a connection that breaks after the COMMIT was sent leaves the outcome unknown, as for a lone
  statement: every member gets that error and none is sent again (a statement that did commit
  advanced its step, so a retry of the step is fenced off).

Lock order: members are sorted by their folded writes (store/folding.py) before they are sent, so
batches that write the same rows lock them in one order instead of deadlocking each other. Each
run's own row is in one batch at a time (its lease). A deadlock with some other transaction is
still possible, as it is for lone statements; Postgres ends one side, and a batch it ends is sent
again member by member.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq
from psycopg.abc import Params, QueryNoTemplate
from psycopg.rows import DictRow

log = logging.getLogger("treadle.store")

Connection = psycopg.AsyncConnection[DictRow]

#: statements in one batch at most (a batch holds every member's row locks until it commits)
MAX_BATCH = 16


@dataclass(eq=False)
class _Member:
    query: QueryNoTemplate
    params: Params
    order: str
    #: resolved with True when the outcome is in (`row`/`error`), False when this member is to
    #: lead the next batch
    turn: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    row: DictRow | None = None
    error: BaseException | None = None
    done: bool = False

    def outcome(self) -> DictRow | None:
        if self.error is not None:
            raise self.error
        return self.row


@dataclass
class GroupCommit:
    """One per connection pool. `run` returns the statement's first row, or raises its error,
    exactly as `conn.execute` of the statement alone in autocommit would."""

    max_batch: int = MAX_BATCH
    #: batches sent and members committed through them (the benchmark reads these)
    batches: int = 0
    members: int = 0
    _queue: list[_Member] = field(default_factory=list)
    _leading: bool = False

    async def run(self, conn: Connection, query: QueryNoTemplate, params: Params, order: str = "") -> DictRow | None:
        me = _Member(query, params, order)
        self._queue.append(me)
        if self._leading:
            try:
                lead = not await me.turn
            except asyncio.CancelledError:
                if me in self._queue:  # never sent: nothing of it happens
                    self._queue.remove(me)
                if me.turn.done() and not me.turn.result():
                    self._pass_lead()  # it was to lead: the next one leads instead
                raise
            if not lead:
                return me.outcome()
        self._leading = True
        batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
        cancelled = False
        try:
            # the batch is the other members' commits too: a cancel of the task leading it (a worker
            # stopping) waits for the batch to end, instead of leaving their outcome unknown
            send = asyncio.ensure_future(self._send(conn, batch))
            while not send.done():
                try:
                    await asyncio.shield(send)
                except asyncio.CancelledError:
                    cancelled = True
        finally:
            for m in batch:
                if not m.done:  # unexpected: the outcome is unknown
                    m.error, m.done = psycopg.OperationalError("the group commit was interrupted"), True
                if m is not me and not m.turn.done():
                    m.turn.set_result(True)
            self._pass_lead()
        if cancelled:
            raise asyncio.CancelledError
        return me.outcome()

    def _pass_lead(self) -> None:
        if self._queue:
            self._queue[0].turn.set_result(False)
        else:
            self._leading = False

    async def _send(self, conn: Connection, batch: list[_Member]) -> None:
        self.batches += 1
        self.members += len(batch)
        if len(batch) == 1:
            await _alone(conn, batch[0])
            return
        batch.sort(key=lambda m: m.order)
        cursors: list[psycopg.AsyncCursor[DictRow]] = []
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                for m in batch:
                    cursors.append(await conn.execute(m.query, m.params))
                await conn.execute("COMMIT")
            rows = [await cur.fetchone() for cur in cursors]
        except psycopg.Error as exc:
            if conn.closed or conn.info.transaction_status == pq.TransactionStatus.UNKNOWN:
                for m in batch:
                    m.error, m.done = exc, True
                return
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                await conn.execute("ROLLBACK")
            log.debug("group commit of %d failed (%s): each member alone", len(batch), type(exc).__name__)
            for m in batch:
                await _alone(conn, m)
            return
        for m, row in zip(batch, rows, strict=True):
            m.row, m.done = row, True


async def _alone(conn: Connection, m: _Member) -> None:
    try:
        cur = await conn.execute(m.query, m.params)
        m.row = await cur.fetchone()
    except psycopg.Error as exc:
        m.error = exc
    m.done = True


def lock_order(folded_statement: str | None, folded_params: dict[str, Any] | None) -> str:
    """The sort key of a member: its folded write's statement and parameters (members with the
    same write to the same row sort together, in the same place in every batch)."""
    if folded_statement is None:
        return ""
    return f"{folded_statement}\x00{sorted((folded_params or {}).items(), key=lambda kv: kv[0])!r}"
