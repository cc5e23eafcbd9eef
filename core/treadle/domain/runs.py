"""Run status, stop reasons, step messages and event type names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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
    #: a hard budget of the run's tenant, user or agent was spent (governance/budgets.py)
    BUDGET_EXCEEDED = "budget_exceeded"


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


@dataclass(frozen=True, slots=True)
class RunOptions:
    """A run's own options, set at its start (loomcycle's run fields; stored as `runs.run_options`):
    the caller's narrowing of the agent's tools, sampling overrides (the run's win over the
    agent's), loomcycle's user tier (which tier candidates serve it) and its run timeout
    (`deadline_unix`: when it fails with `run_timeout`)."""

    tools: tuple[str, ...] | None = None
    sampling: Mapping[str, Any] | None = None
    user_tier: str | None = None
    run_timeout_seconds: float | None = None
    deadline_unix: float | None = None
    #: loomcycle's per-run `compaction` (over the agent's, field by field; a spawn's over the run's)
    compaction: Mapping[str, Any] | None = None
    #: a replay fork (issue 36, `POST /v1/runs/{id}/fork {mode: replay}`): `{run_id, after_seq}`, the
    #: original run whose recorded tool results after `after_seq` answer the fork's matching calls
    replay: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any] | None:
        out: dict[str, Any] = {}
        if self.tools is not None:
            out["tools"] = list(self.tools)
        if self.sampling:
            out["sampling"] = dict(self.sampling)
        if self.user_tier is not None:
            out["user_tier"] = self.user_tier
        if self.run_timeout_seconds is not None:
            out["run_timeout_seconds"] = self.run_timeout_seconds
        if self.deadline_unix is not None:
            out["deadline_unix"] = self.deadline_unix
        if self.compaction:
            out["compaction"] = dict(self.compaction)
        if self.replay:
            out["replay"] = dict(self.replay)
        return out or None

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RunOptions:
        d = data or {}
        tools, sampling, tier = d.get("tools"), d.get("sampling"), d.get("user_tier")
        timeout, deadline = d.get("run_timeout_seconds"), d.get("deadline_unix")
        compaction, replay = d.get("compaction"), d.get("replay")
        return cls(
            tools=tuple(str(t) for t in tools) if isinstance(tools, list) else None,
            sampling=dict(sampling) if isinstance(sampling, dict) else None,
            user_tier=tier if isinstance(tier, str) else None,
            run_timeout_seconds=_number(timeout),
            deadline_unix=_number(deadline),
            compaction=dict(compaction) if isinstance(compaction, dict) else None,
            replay=dict(replay) if isinstance(replay, dict) else None,
        )


def _number(x: object) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
