"""A step's decisions as pure functions: each reads the transcript and the leased facts and returns
a `StepPlan` — the events to record, what the run row becomes (`StepOutcome`), and the work that
must wait for the commit. `Engine._apply` (engine/step.py) is the one place that commits a plan
and sends the next step; nothing here does I/O, so every rule below is tested without a database
(tests/unit/test_step_plans.py).

The step in order (engine/README.md):
1. `top` — before anything else: a pending cancel, the runtime's pause, the run's deadline, an
   unknown agent, queued steering input, an interactive run at rest, pending tool calls, the
   iteration cap, a spent hard budget (`budget_exceeded`); or `MODEL`: call the model (a soft
   budget crossed for the first time records a `limit` event with the turn: `soft_crossings`).
2. `after_model` — the model answered: end the turn (complete, park an interactive run for
   input, or go on when input was queued meanwhile), or run the turn's tools.
3. `after_tools` — the tools answered (or parked): record the results and go on, park on the
   parked calls' keys, or end at the iteration cap.
4. `steer` — the steering queue's items at a step's top: user turns, turn cancels.
Endings — `cancelled`, `failed`, `finished` — answer every pending call so invariant 2 holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from treadle.domain.events import (
    AwaitingInput,
    CompactionFailed,
    ContextCompaction,
    Done,
    Error,
    EventType,
    LimitCrossed,
    RuntimePaused,
    ToolParked,
    ToolUseRef,
    TurnCancelled,
    UserInput,
)
from treadle.domain.runs import NewEvent, StopReason
from treadle.engine import compaction
from treadle.engine.outcomes import ParkedCall, tool_result_event
from treadle.engine.replay import Transcript, input_id_of
from treadle.governance.budgets import Breach
from treadle.store.inputs import QueuedInput
from treadle.store.pause import PAUSE_KEY, PAUSE_KIND
from treadle.store.steps import StepOutcome, WaitSpec

#: a run's steering input wakes it through this wait key
AWAITING_INPUT_KIND = EventType.AWAITING_INPUT.value
TURN_CANCEL_TEXT = "cancelled by operator"
INTERACTIVE_ITERATION_BACKSTOP = 1 << 20

Effect = Callable[[], Awaitable[object]]


def input_key(run_id: str) -> str:
    return f"input:{run_id}"


@dataclass(slots=True)
class StepPlan:
    """What one step commits, and what follows the commit."""

    events: list[NewEvent]
    outcome: StepOutcome
    #: idempotent work that must wait for the commit (cancel a turn's sub-runs, mark input consumed)
    after: list[Effect] = field(default_factory=list)
    #: a plan that goes on may run its next step under the same lease chain (the engine decides);
    #: False: always hand it to the dispatcher
    chainable: bool = True
    #: wait keys to poke once the commit is in (a resident sub-agent's turn ended: its parent's key)
    wake: list[str] = field(default_factory=list)


class Next(Enum):
    """What the step does next when `top` did not end it with a plan."""

    PAUSE = "pause"  # the runtime is pausing: park at this boundary (`pause`) once the state is re-read
    STEER = "steer"  # take the steering queue's items (engine/waiting.py), then decide again
    REST = "rest"  # an interactive run woken with no input: park again for input
    PENDING = "pending"  # run the last turn's unanswered tool calls
    MODEL = "model"  # call the model


@dataclass(frozen=True, slots=True)
class Facts:
    """What `top` reads besides the transcript: the leased run row's flags."""

    cancel_requested: bool
    cancel_reason: str | None
    deadline_unix: float | None
    agent_known: bool
    agent_name: str
    input_seq: int
    interactive: bool
    at_rest: bool
    iteration_cap: int
    #: the run's budgets as checked at this step (store/limits.py): a spent hard one, crossed soft ones
    over_budget: Breach | None = None
    soft_budget: tuple[Breach, ...] = ()
    #: the runtime was pausing or paused when the step was leased (store/pause.py)
    runtime_paused: bool = False


def top(facts: Facts, transcript: Transcript, now: float) -> StepPlan | Next:
    """The decisions before any model call, in priority order."""
    if facts.cancel_requested:
        return cancelled(transcript, facts.cancel_reason)
    if facts.runtime_paused:
        return Next.PAUSE
    if facts.deadline_unix is not None and now >= facts.deadline_unix:
        return failed(transcript, [], "run_timeout", "run timeout exceeded")
    if not facts.agent_known:
        return failed(transcript, [], "unknown_agent", f"agent {facts.agent_name!r} is not configured")
    if facts.input_seq > transcript.consumed_input_id:
        return Next.STEER
    if facts.at_rest:
        return Next.REST
    return after_steering(facts, transcript)


def after_steering(facts: Facts, transcript: Transcript) -> StepPlan | Next:
    """The decisions once the steering queue was taken (or held nothing)."""
    if transcript.pending:
        return Next.PENDING
    if transcript.iterations >= facts.iteration_cap:
        return finished([], transcript.usage, StopReason.MAX_ITERATIONS)
    if facts.over_budget is not None:  # the boundary before the next model call
        return over_budget(transcript, facts.over_budget)
    return Next.MODEL


def over_budget(transcript: Transcript, breach: Breach) -> StepPlan:
    """A hard budget is spent: the run ends before its next model call — a `limit` event naming
    it, then `done` with stop reason `budget_exceeded` (no pending call: tools are answered first)."""
    crossed = LimitCrossed(breach.info(), transcript.iterations).event()
    return finished([crossed], transcript.usage, StopReason.BUDGET_EXCEEDED)


def soft_crossings(soft: tuple[Breach, ...], events: list[tuple[int, str, dict[str, Any]]],
                   iteration: int) -> list[NewEvent]:
    """A `limit` event (severity soft) for each crossed soft budget this run has not recorded yet."""
    if not soft:
        return []
    seen = {_limit_key(p.get("limit") or {}) for _, t, p in events if t == EventType.LIMIT}
    return [LimitCrossed(b.info(), iteration).event() for b in soft if _limit_key(b.info()) not in seen]


def _limit_key(info: dict[str, Any]) -> tuple[Any, ...]:
    return (info.get("scope"), info.get("scope_id"), info.get("window"), info.get("metric"), info.get("severity"))


# -- compaction -------------------------------------------------------------------------------------


def compaction_due(settings: compaction.Settings, transcript: Transcript) -> str | None:
    """Before the model is called (no tool call pending): the trigger of a compaction to do first —
    `self` (the last iteration called `Context op=compact`), `auto` (engine/compaction.py
    `auto_due`) — or None. Never twice before one iteration (a failed attempt included)."""
    iteration = transcript.iterations + 1
    if transcript.compaction_tried_at == iteration:
        return None
    if transcript.iterations > 0 and transcript.self_compact_at == transcript.iterations:
        return "self"
    if compaction.auto_due(settings, transcript.context_used, transcript.context_window, iteration,
                           transcript.compacted_at):
        return "auto"
    return None


def compacted(event: ContextCompaction) -> StepPlan:
    """Record the compaction; the next step replays the compacted history and calls the model."""
    return StepPlan([event.event()], StepOutcome("running", enqueue_next=True))


def compaction_failed(trigger: str, iteration: int, error: str) -> StepPlan:
    """The summary failed: the history stays as it is; the next step calls the model."""
    return StepPlan([CompactionFailed(error, trigger, iteration).event()], StepOutcome("running", enqueue_next=True))


# -- endings ----------------------------------------------------------------------------------------


def finished(events: list[NewEvent], totals: dict[str, int], reason: StopReason, *, delta: int = 0,
             usage: dict[str, int] | None = None) -> StepPlan:
    done = Done(reason.value, totals).event()
    return StepPlan([*events, done], StepOutcome("completed", reason.value, iterations_delta=delta, usage=usage))


def cancelled(transcript: Transcript, reason: str | None, code: str | None = None) -> StepPlan:
    """The run ends cancelled; `code` names what the cancel aborted (a code agent's replay:
    `code_agent_cancelled`, kept in the run's error as loomcycle's error text is — the stream ends
    with the one `done`, not an `error` as well)."""
    why = reason or "cancelled by api"
    events = [tool_result_event(tu, f"cancelled: {why}", True) for tu in transcript.pending]
    events.append(Done(StopReason.CANCELLED.value, transcript.usage, reason=why).event())
    error = Error(code, f"{code}: {why}").to_payload() if code else None
    return StepPlan(events, StepOutcome("cancelled", StopReason.CANCELLED.value, error=error))


def failed(transcript: Transcript, events: list[NewEvent], code: str, message: str,
           details: dict[str, Any] | None = None) -> StepPlan:
    closing = [tool_result_event(tu, f"run failed: {message}", True) for tu in transcript.pending]
    error = Error(code, message, dict(details or {}))
    return StepPlan([*events, *closing, error.event()],
                    StepOutcome("failed", StopReason.ERROR.value, error=error.to_payload()))


def pause(iterations: int, since_version: int) -> StepPlan:
    """The runtime is pausing: park at this iteration boundary (nothing between a tool_use and its
    result is open at a step's top) on the tenant's pause key, read at `since_version` before the
    state was checked again; a resume pokes it and the run goes on where it was."""
    wait = WaitSpec("", PAUSE_KIND, PAUSE_KEY, since_version, None)
    return StepPlan([RuntimePaused(iterations).event()], StepOutcome("waiting", waits=[wait]))


# -- after the model ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InputFacts:
    """The steering queue as a step saw it: the input key's version (read first) and the newest
    queued input's id."""

    version: int
    latest: int


def park_for_input(run_id: str, events: list[NewEvent], consumed: int, iterations: int, inputs: InputFacts, *,
                   delta: int = 0, usage: dict[str, int] | None = None, wake: str | None = None) -> StepPlan:
    """End an interactive run's turn: record `awaiting_input` and park on the run's input key —
    unless input is already queued (newer than what the transcript consumed): then go on at once.
    `consumed`: the highest steering id the transcript (with `events`) has consumed. `wake`: the
    key a resident sub-agent's parent waits on for this turn's end (poked after the commit)."""
    consumed = max(consumed, *(input_id_of(e.type, e.payload) for e in events), 0)
    events = [*events, AwaitingInput(iterations + delta).event()]
    woken = [wake] if wake else []
    if inputs.latest > consumed:
        return StepPlan(events, StepOutcome("running", iterations_delta=delta, usage=usage, enqueue_next=True),
                        chainable=False, wake=woken)
    wait = WaitSpec("", AWAITING_INPUT_KIND, input_key(run_id), inputs.version, None)
    return StepPlan(events, StepOutcome("waiting", iterations_delta=delta, usage=usage, waits=[wait]), wake=woken)


def resident_wake(interactive: bool, parent_wait_key: str | None) -> str | None:
    """The key a turn's end pokes: a resident sub-agent's (an interactive child run's) parent key."""
    return parent_wait_key if interactive and parent_wait_key else None


def opened_residents(*event_lists: list[Any]) -> bool:
    """Whether the transcript holds an `Agent op=open` call (the run may hold resident sub-agents,
    which its end closes). Items are (seq, type, payload) tuples or NewEvents."""
    for events in event_lists:
        for e in events:
            etype, payload = (e.type, e.payload) if isinstance(e, NewEvent) else (e[1], e[2])
            if etype == EventType.TOOL_CALL and isinstance(payload, dict):
                use = payload.get("tool_use")
                if isinstance(use, dict) and use.get("name") == "Agent" and (
                        use.get("input") or {}).get("op") == "open":
                    return True
    return False


def end_of_turn(turn: list[NewEvent], totals: dict[str, int], usage: dict[str, int], *,
                consumed: int, latest_input: int) -> StepPlan:
    """A non-interactive run's model answered with no tool call: it completes — unless steering
    input was queued while the model answered: then that input is the next user turn."""
    if latest_input > consumed:
        return StepPlan(turn, StepOutcome("running", iterations_delta=1, usage=usage, enqueue_next=True),
                        chainable=False)
    return finished(turn, add_usage(totals, usage), StopReason.END_TURN, delta=1, usage=usage)


# -- after the tools ----------------------------------------------------------------------------------


def after_tools(outcomes: list[NewEvent | ParkedCall], turn: list[NewEvent], *, iteration: int, cap: int,
                totals: dict[str, int], usage: dict[str, int] | None, new_iteration: bool,
                now: float | None = None) -> StepPlan:
    """The turn's calls answered (or parked): park on what parked, end at the iteration cap, else
    go on with the next iteration. `turn`: the assistant turn when it commits with its results."""
    delta = 1 if new_iteration else 0
    if any(isinstance(o, ParkedCall) for o in outcomes):
        return parked(outcomes, turn, iteration=iteration, usage=usage, delta=delta,
                      now=time.time() if now is None else now)
    results = [*turn, *(e for o in outcomes if isinstance(o, NewEvent) for e in o.flattened())]
    if iteration >= cap:
        return finished(results, totals, StopReason.MAX_ITERATIONS, delta=delta, usage=usage)
    return StepPlan(results, StepOutcome("running", iterations_delta=delta, usage=usage, enqueue_next=True))


def parked(outcomes: list[NewEvent | ParkedCall], turn: list[NewEvent], *, iteration: int,
           usage: dict[str, int] | None, delta: int, now: float) -> StepPlan:
    """Commit the results that are in, a `tool_parked` record per parked call and the waits: the
    run becomes `waiting` and holds no worker (the store turns it back into a running step when
    a poke raced the tool's check)."""
    events: list[NewEvent] = list(turn)
    waits: list[WaitSpec] = []
    for o in outcomes:
        if isinstance(o, NewEvent):
            events.extend(o.flattened())
            continue
        tu, park = o.tool_use, o.park
        deadline = (o.resume or {}).get("deadline")
        if deadline is None and park.deadline_s is not None:
            deadline = now + park.deadline_s
        wait = {"kind": park.kind, "keys": sorted(park.keys), "deadline": deadline, "extra": park.extra}
        events.extend(NewEvent(t, p) for t, p in park.events)
        events.append(ToolParked(ToolUseRef(tu.id, tu.name, tu.input), wait, iteration).event())
        waits.extend(WaitSpec(tu.id, park.kind, k, v, deadline) for k, v in park.keys.items())
    return StepPlan(events, StepOutcome("waiting", iterations_delta=delta, usage=usage, waits=waits))


# -- steering -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Steer:
    """What the steering queue's items make of a step's top: `events` to record first, whether a
    turn cancel abandons the turn (its sub-runs and questions), and `park`: the turn was cancelled
    with nothing queued after it, so the run parks for input (`events` then commit with the park)."""

    events: list[NewEvent]
    consumed_through: int
    abandon: bool = False
    park: bool = False


def steer(items: list[QueuedInput], transcript: Transcript) -> Steer | None:
    """None: nothing to take now (no items, or input waiting for the pending tool calls' results —
    a tool_use is never separated from its tool_result)."""
    cancels = [i for i, it in enumerate(items) if it.kind == "turn_cancel"]
    if not items or (not cancels and transcript.pending):
        return None
    compacts = [it for it in items if it.kind == "compact"]
    if compacts:  # a manual compaction of the parked run: before any other item (it was computed on this history)
        items = [it for it in items if it.kind != "compact"]
        marks = [manual_compaction(it, transcript) for it in compacts]
        if not items:  # nothing else: the run parks again (a compaction is not input)
            return Steer(marks, compacts[-1].id, park=True)
        rest = steer(items, transcript)
        assert rest is not None
        return Steer([*marks, *rest.events], max(rest.consumed_through, compacts[-1].id), rest.abandon, rest.park)
    events: list[NewEvent] = []
    after_cancel = items
    if cancels:
        last = cancels[-1]
        for tu in transcript.pending:
            events.append(tool_result_event(tu, f"error: {TURN_CANCEL_TEXT} (turn cancelled)", True))
        events.extend(steer_event(it) for it in items[:last] if it.kind == "input")
        cancel = items[last]
        events.append(TurnCancelled(cancel.text or TURN_CANCEL_TEXT, transcript.iterations, cancel.id).event())
        after_cancel = items[last + 1:]
    events.extend(steer_event(it) for it in after_cancel if it.kind == "input")
    return Steer(events, items[-1].id, abandon=bool(cancels), park=bool(cancels) and not after_cancel)


def manual_compaction(item: QueuedInput, transcript: Transcript) -> NewEvent:
    """A queued manual compaction (api: POST /v1/runs/{id}/compact) as its event: applied when the
    history is still the one it was computed on (`messages` of it), else recorded as failed."""
    try:
        spec = json.loads(item.text)
        event = ContextCompaction(str(spec["summary"]), int(spec["keep_n"]), bool(spec["keep_first"]),
                                  int(spec["before_tokens"]), int(spec["after_tokens"]), "manual",
                                  transcript.iterations + 1, item.id)
        fits = int(spec["messages"]) == len(transcript.messages)
    except (ValueError, KeyError, TypeError):
        fits = False
    if not fits:
        return CompactionFailed("manual compaction: the history moved since it was summarized", "manual",
                                transcript.iterations + 1, item.id).event()
    return event.event()


def steer_event(item: QueuedInput) -> NewEvent:
    return UserInput.steer(item.text, item.id).event()


# -- small rules ---------------------------------------------------------------------------------------


def iteration_cap(max_iterations: int, *, unbounded: bool, interactive: bool, explicit: bool) -> int:
    """An interactive run without an explicit `max_iterations` only has a hard backstop."""
    if unbounded or (interactive and not explicit):
        return INTERACTIVE_ITERATION_BACKSTOP
    return max_iterations


def at_rest(interactive: bool, events: list[tuple[int, str, dict[str, Any]]]) -> bool:
    """An interactive run whose last turn ended (it parked for input) and got nothing new."""
    if not interactive:
        return False
    for _seq, etype, _payload in reversed(events):
        if etype != EventType.RUNTIME_PAUSED:  # a pause that parked it in between changes nothing
            return bool(etype == EventType.AWAITING_INPUT)
    return False


def add_usage(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}
