"""Folded writes: a transactional tool call done by the step's commit statement itself.

A step whose only transactional call is, say, `Memory.incr` used to take two round trips: the
call's statement (whose answer the tool result quotes), then the commit statement with the
result. When the tool can state its write as one SQL statement and the text of its result as a
function of what that statement returns (`FoldedWrite`), the engine hands the write to the step
transaction instead of running it (`StepTransaction.fold`), and the commit statement carries it
as a data-modifying CTE: the write, the `tool_result` it fills in, the step advance and the lease
fence are one statement — one round trip with its COMMIT, exactly once or not at all (the fence
fails the whole statement). Only in a pipelined step transaction (the fence is a failing
statement there); behind a pooler the call runs as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from treadle.domain.events import EventType
from treadle.domain.runs import NewEvent

_PARAM = re.compile(r"%\((\w+)\)s")


@lru_cache(maxsize=64)
def _names(statement: str) -> frozenset[str]:
    """The parameter names of a statement (a tool folds the same text again and again)."""
    return frozenset(_PARAM.findall(statement))


@dataclass(frozen=True, slots=True)
class FoldedWrite:
    """A transactional call as one statement the step commit carries.

    `statement`: an INSERT, UPDATE or DELETE with no WITH clause of its own, `RETURNING` one row
    whose column `text` is the call's result text — NULL when the call failed, `failed` then being
    its error text. Parameters are named (`%(tool_…)s`, every name starting with `tool_`, so they
    cannot collide with the commit statement's)."""

    statement: str
    params: dict[str, Any]
    failed: str

    def __post_init__(self) -> None:
        names = _names(self.statement)
        if names != set(self.params) or not all(n.startswith("tool_") for n in names):
            raise ValueError(f"a folded write's parameters must be exactly its tool_* names: {sorted(names)}")


@dataclass(frozen=True, slots=True)
class Folded:
    """A folded write and the call it answers."""

    tool_use_id: str
    write: FoldedWrite


class FoldFailed(Exception):
    """The commit statement failed because of its folded write (not the fence): the step
    transaction has rolled back, and the engine runs the call as an ordinary one instead."""

    def __init__(self, tool_use_id: str, error: Exception) -> None:
        super().__init__(f"folded write of {tool_use_id} failed: {type(error).__name__}: {error}")
        self.tool_use_id = tool_use_id
        self.error = error


def fill_result(events: list[NewEvent], folded: Folded, text: str | None) -> None:
    """Put the folded call's outcome into its `tool_result` event (the copy the worker keeps)."""
    for event in events:
        if event.type == EventType.TOOL_RESULT and event.tool_use_id == folded.tool_use_id:
            event.payload["text"] = folded.write.failed if text is None else text
            event.payload["is_error"] = text is None
            return
