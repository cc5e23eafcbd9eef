"""What a step ends in, and the records both the step and steering write for a tool call:
`StepResult` (the step's outcome, for workers and dispatchers), `ParkedCall` (a tool call that
parked instead of answering) and `tool_result_event` (the one shape of a recorded tool result)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from treadle.domain.content import ToolUseBlock
from treadle.domain.events import EventType
from treadle.domain.runs import NewEvent
from treadle.tools.base import Park


class StepResult(Enum):
    DROPPED = "dropped"  # stale or duplicate message, or lease held elsewhere
    CONTINUED = "continued"  # the next step was sent (engine/sending.py)
    CHAINED = "chained"  # the step committed and this worker holds the lease for the next one
    FINISHED = "finished"  # the run reached a terminal status
    RETRY_LATER = "retry_later"  # the step crashed and was handed back
    LEASE_LOST = "lease_lost"
    PARKED = "parked"  # the run waits (status 'waiting'); a poke or a deadline wakes it
    DEFERRED = "deferred"  # its tenant (user) is at its fairness cap: sent again with a delay


@dataclass(slots=True)
class ParkedCall:
    """A tool call that returned Park: no result yet; the run parks on its keys."""

    tool_use: ToolUseBlock
    park: Park
    resume: dict[str, Any] | None = None


def tool_result_event(tu: ToolUseBlock, text: str, is_error: bool) -> NewEvent:
    """The `tool_result` event answering `tu` (unique per tool_use_id in the store)."""
    return NewEvent(
        EventType.TOOL_RESULT,
        {"tool_use": {"id": tu.id, "name": tu.name, "input": tu.input}, "text": text, "is_error": is_error},
        tool_use_id=tu.id,
    )
