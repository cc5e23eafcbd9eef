"""Sending a run's next step — the one place that decides whether a step message is needed.

The rule: when the dispatcher keeps its jobs in the database (`Dispatcher.jobs_in_db`, the
sidecar's Postgres queue), the statement that committed the step (or woke the run) already
inserted the next job, so nothing is sent; with any other dispatcher (SQS, inline) a
`StepMessage` is sent after the commit. A message lost in between is covered by `lease_until`,
which doubles as a re-queue deadline the sweeper honours.

Inside a step transaction (a transactional tool that wakes or starts a run) the message waits
for the commit (`store.db.after_commit`): a worker must never receive a step the database does
not show yet.

`always` is for the cases no commit enqueued anything: a cancel request flags a run (a parked
one has no job at all, a running one needs a message to notice) — the message is sent whatever
the dispatcher. A duplicate is harmless: the lease drops it.
"""

from __future__ import annotations

from treadle.dispatch.base import Dispatcher
from treadle.domain.runs import StepMessage
from treadle.store.db import after_commit


class StepSender:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def next_step(self, run_id: str, step_no: int) -> None:
        """The step a commit (or a wake-up) just made due: sent unless the commit enqueued it."""
        if not self.dispatcher.jobs_in_db:
            await self._send(StepMessage(run_id, step_no))

    async def always(self, run_id: str, step_no: int) -> None:
        """A step no commit enqueued (a cancel request): sent with every dispatcher."""
        await self._send(StepMessage(run_id, step_no))

    async def _send(self, msg: StepMessage) -> None:
        async def send() -> None:
            await self.dispatcher.enqueue(msg)

        await after_commit(send)
