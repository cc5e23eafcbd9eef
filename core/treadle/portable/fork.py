"""Forking a run at an event (issue 36 item 4): where the fork's history ends and what its first
user turn is. Pure: the transcript in, the plan out (the runtime seeds and starts the fork).

- with `prompt`: the history is the run's transcript up to `at_seq`, and `prompt` is the next
  user turn ("go on from step 7 with this message");
- without: the last user turn at or before `at_seq` is asked again — the history ends just before
  it and its segments are the fork's first turn ("what would v5 have done with this turn?").

Either way the cut never splits a tool exchange (invariant 2): it moves back until no tool_use of
the history is left without its result.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from treadle.domain.events import EventType, UserInput
from treadle.engine.replay import replay
from treadle.errors import BadRequest
from treadle.store.runs import StoredEvent


@dataclass(frozen=True, slots=True)
class ForkPlan:
    #: the last seq of the run the fork's history holds (0: none of the run's own events)
    cut: int
    #: the fork's first user turn
    segments: list[dict[str, Any]]


def plan_fork(events: list[StoredEvent], at_seq: int, prompt: str | None) -> ForkPlan:
    """BadRequest `invalid_at_seq` when `at_seq` is past the transcript; `no_user_turn` when
    there is no user turn at or before it to ask again and no `prompt`."""
    last = events[-1].seq if events else 0
    if at_seq < 1 or at_seq > last:
        raise BadRequest(f"at_seq must be between 1 and the run's last seq ({last})", code="invalid_at_seq")
    if prompt is not None:
        cut = at_seq
        segments: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "trusted-text", "text": prompt}]}]
    else:
        turns = [e for e in events if e.seq <= at_seq and e.type == EventType.USER_INPUT]
        if not turns:
            raise BadRequest(f"no user turn at or before seq {at_seq} to ask again: give a prompt", code="no_user_turn")
        cut, segments = turns[-1].seq - 1, UserInput.parse(turns[-1].payload).segments
    return ForkPlan(whole_exchanges(events, cut), segments)


def whole_exchanges(events: list[StoredEvent], cut: int) -> int:
    """The greatest seq ≤ `cut` whose prefix leaves no tool_use without its result."""
    while cut > 0 and replay([(e.seq, str(e.type), e.payload) for e in events if e.seq <= cut]).pending:
        cut -= 1
    return cut


def seed_run_id(tenant_id: str, idempotency_key: str) -> str:
    """The seed run of a fork asked with `Idempotency-Key`: the same for every retry, so a retry
    after a crash between the seed and the fork's start reuses the seed instead of leaving one behind."""
    return "r_" + hashlib.sha256(f"fork-seed\x1f{tenant_id}\x1f{idempotency_key}".encode()).hexdigest()[:32]
