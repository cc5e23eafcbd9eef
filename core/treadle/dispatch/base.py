"""The Dispatcher port."""

from __future__ import annotations

from typing import Protocol

from treadle.domain.runs import StepMessage


class Dispatcher(Protocol):
    #: True when the store writes the step's job row in the same transaction that commits the
    #: step (the Postgres queue), so the engine never calls `enqueue` for the next step itself.
    jobs_in_db: bool

    async def enqueue(self, msg: StepMessage, delay_s: float = 0.0) -> None: ...
