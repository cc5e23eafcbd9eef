"""The Postgres job queue: jobs rows claimed with FOR UPDATE SKIP LOCKED, LISTEN/NOTIFY wake-ups,
delayed jobs by `run_at`. The store inserts the next step's job in the step's own commit."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg

from treadle.domain.runs import StepMessage
from treadle.domain.tasks import cancel_and_wait
from treadle.store.db import Pool
from treadle.store.runs import JOBS_CHANNEL

log = logging.getLogger("treadle.dispatch")


class PostgresQueue:
    jobs_in_db = True

    def __init__(self, pool: Pool, url: str) -> None:
        self.pool = pool
        self.url = url
        self.wakeup = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    async def enqueue(self, msg: StepMessage, delay_s: float = 0.0) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO jobs (tenant_id, run_id, step_no, run_at, run_created)"
                " SELECT tenant_id, id, %s, now() + make_interval(secs => %s), created_at FROM runs WHERE id = %s",
                (msg.step_no, delay_s, msg.run_id),
            )
            await conn.execute(f"SELECT pg_notify('{JOBS_CHANNEL}', '')")

    async def pending(self) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM jobs")
            row = await cur.fetchone()
        return int(row["n"]) if row else 0

    async def next_due_in(self) -> float | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT extract(epoch FROM min(run_at) - now()) AS s FROM jobs"
            )
            row: Any = await cur.fetchone()
        if row is None or row["s"] is None:
            return None
        return max(0.0, float(row["s"]))

    def start_listening(self) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name="treadle-jobs-listener")

    async def stop_listening(self) -> None:
        if self._listener is not None:
            await cancel_and_wait(self._listener)
            self._listener = None

    async def _listen(self) -> None:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {JOBS_CHANNEL}")
                    self.wakeup.set()  # anything enqueued while we were not listening
                    async for _ in conn.notifies():
                        self.wakeup.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("job listener lost its connection (%s); reconnecting", exc)
                self.wakeup.set()
                await asyncio.sleep(0.5)
