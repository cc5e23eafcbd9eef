"""Ending a session whose client froze in the middle of a pipelined transaction.

`open_pool` bounds a frozen client's time inside a transaction by the lease
(`idle_in_transaction_session_timeout`). That bound has a hole, and the pipelined step transaction
(store/db.py `Pool.pipelined`) falls into it: psycopg sends a pipelined statement as soon as it is
queued and the Sync that ends it a moment later, in a second write. A process stopped between the
two (SIGSTOP, a hung host) leaves its server session with the statement executed and its row locks
held, waiting for the next protocol message. Postgres reports that session as `active`, waiting on
`ClientRead` — not `idle in transaction` — so neither the idle timeout nor `statement_timeout`
(Postgres disables it once an Execute completes inside a pipeline) ever ends it, and every worker
that needs one of its rows waits until the process is continued. `transaction_timeout`
(Postgres 17) would bound it; treadle supports Postgres 15.

So the sweeper ends such a session itself: one of the database's client sessions, of this
database user, inside a transaction, that has waited on its client longer than `after_s` (the
lease) and blocks another session. A healthy pipelined client sends the Sync microseconds after
the statement, so a live treadle process is never ended this way; its lease has expired anyway
(the process that owned the session is swept like a dead worker).
"""

from __future__ import annotations

from dataclasses import dataclass

from treadle.store.db import Pool

_STALLED = """
SELECT a.pid, pg_terminate_backend(a.pid) AS ended, a.application_name,
       extract(epoch FROM now() - a.state_change)::float8 AS waited_s, left(a.query, 120) AS query
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.usename = current_user AND a.pid <> pg_backend_pid()
  AND a.backend_type = 'client backend' AND a.state = 'active'
  AND a.wait_event_type = 'Client' AND a.wait_event = 'ClientRead'
  AND a.xact_start IS NOT NULL AND a.state_change < now() - make_interval(secs => %(after)s)
  AND EXISTS (SELECT 1 FROM pg_stat_activity b WHERE a.pid = ANY(pg_blocking_pids(b.pid)))
"""


@dataclass(frozen=True)
class StalledSession:
    pid: int
    ended: bool
    application_name: str
    waited_s: float
    query: str


async def end_stalled_sessions(pool: Pool, after_s: float) -> list[StalledSession]:
    """End (pg_terminate_backend) every session stalled as the module docstring says; returns
    them (`ended` False where Postgres refused, e.g. no privilege over that session)."""
    async with pool.connection() as conn:
        cur = await conn.execute(_STALLED, {"after": after_s})
        rows = await cur.fetchall()
    return [StalledSession(int(r["pid"]), bool(r["ended"]), str(r["application_name"] or ""),
                           float(r["waited_s"]), " ".join(str(r["query"] or "").split())) for r in rows]
