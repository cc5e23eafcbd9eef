"""Replay forks (issue 36: `POST /v1/runs/{id}/fork {mode: "replay"}`): the fork's tool calls are
answered from the original run's recorded results while they match, and run for real from the
first one that does not.

The matching rule is code agents' (providers/codejs.py): the fork's k-th call is compared with the
k-th call the original made after the fork's cut — the same tool name and the same canonical JSON
input (`canonical_json`) — and the first call that differs, that falls past the record, or that
names a tool the fork's agent does not hold (a replay never grants a tool) is the divergence;
that call and every later one run. A replayed call runs nothing — no HTTP request, no Memory
write, no child, no park — and its `tool_result` carries `replayed: {run_id, seq}` (the
original's result it repeats); the divergence is recorded once, as a `replay_diverged` event in
the turn that made the call.

Pure: the fork's own transcript and the original's record decide, so a step re-run after a crash or
a duplicate delivery answers the same calls the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from treadle.domain.content import ToolUseBlock
from treadle.domain.events import EventType, ReplayDiverged, ToolCall, ToolResult, ToolUseRef
from treadle.domain.runs import NewEvent
from treadle.providers.codejs import canonical_json

Events = Iterable[tuple[int, str, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Recorded:
    """One call of the original, with its result (`seq`: the result's event)."""

    name: str
    input: dict[str, Any]
    text: str
    is_error: bool
    seq: int


def record(events: Events) -> list[Recorded]:
    """The original's calls after the cut, in the order it made them, each with its result; the
    record stops at the first call without one (as `codejs.recorded_calls`)."""
    calls: list[ToolUseRef] = []
    results: dict[str, tuple[int, ToolResult]] = {}
    for seq, etype, payload in events:
        if etype == EventType.TOOL_CALL:
            calls.append(ToolCall.parse(payload).tool_use)
        elif etype == EventType.TOOL_RESULT:
            result = ToolResult.parse(payload)
            results[result.tool_use.id] = (seq, result)
    out: list[Recorded] = []
    for call in calls:
        found = results.get(call.id)
        if found is None:
            break
        seq, result = found
        out.append(Recorded(call.name, call.input, result.text, result.is_error, seq))
    return out


def made_before(events: Events, uses: Sequence[ToolUseBlock]) -> list[ToolUseRef]:
    """The calls the fork made before `uses` (its transcript's tool_calls, `uses` left out)."""
    now = {u.id for u in uses}
    return [ref for _, etype, payload in events if etype == EventType.TOOL_CALL
            and (ref := ToolCall.parse(payload).tool_use).id not in now]


@dataclass(slots=True)
class Answers:
    """Which of a turn's calls are replayed: their `tool_result` events by tool_use id, and the
    `replay_diverged` event when the divergence falls in this turn."""

    results: dict[str, NewEvent] = field(default_factory=dict)
    diverged: NewEvent | None = None


def _divergence(made: Sequence[ToolUseRef | ToolUseBlock], rec: Sequence[Recorded],
                held: frozenset[str]) -> tuple[int, str]:
    """The index of the first call that is not replayed, and why (len(made), "": none)."""
    for i, call in enumerate(made):
        if call.name not in held:
            return i, "not_held"
        if i >= len(rec):
            return i, "end_of_record"
        if rec[i].name != call.name or canonical_json(rec[i].input) != canonical_json(call.input):
            return i, "mismatch"
    return len(made), ""


def answer(source_run_id: str, rec: Sequence[Recorded], made: Sequence[ToolUseRef],
           uses: Sequence[ToolUseBlock], held: frozenset[str]) -> Answers:
    """The replayed answers among `uses` (this turn's calls), given the calls the fork `made`
    before them and the original's record `rec`."""
    calls: list[ToolUseRef | ToolUseBlock] = [*made, *uses]
    at, reason = _divergence(calls, rec, held)
    out = Answers()
    for i, tu in enumerate(uses, start=len(made)):
        if i >= at:
            break
        r = rec[i]
        replayed = ToolResult(ToolUseRef(tu.id, tu.name, tu.input), r.text, r.is_error,
                              {"run_id": source_run_id, "seq": r.seq})
        out.results[tu.id] = replayed.event()
    if len(made) <= at < len(calls):
        got = calls[at]
        want = {"name": rec[at].name, "input": rec[at].input} if at < len(rec) else None
        out.diverged = ReplayDiverged(source_run_id, at, {"name": got.name, "input": got.input}, want,
                                      "mismatch" if reason == "mismatch" else
                                      "not_held" if reason == "not_held" else "end_of_record").event()
    return out
