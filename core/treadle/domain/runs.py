"""Run status, stop reasons, step messages and event type names."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
ACTIVE_STATUSES = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)


class StopReason(StrEnum):
    END_TURN = "end_turn"
    MAX_ITERATIONS = "max_iterations"
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class StepMessage:
    """One loop iteration to perform: delivered at least once, applied at most once."""

    run_id: str
    step_no: int

    def to_json(self) -> dict[str, object]:
        return {"run_id": self.run_id, "step_no": self.step_no}


@dataclass(slots=True)
class NewEvent:
    """An event the engine is about to append; `seq` is assigned by the store under the lease."""

    type: str
    payload: dict[str, object]
    tool_use_id: str | None = None
    #: events recorded just before this one in the same write (a tool's own events)
    preceding: list[NewEvent] = field(default_factory=list)

    def flattened(self) -> list[NewEvent]:
        return [*self.preceding, self] if self.preceding else [self]
