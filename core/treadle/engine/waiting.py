"""The engine's side of waiting without compute: steering input, interactive runs, turn cancels,
and waking a parent when a sub-agent run ends.

- Steering: `POST /v1/runs/{id}/input` queues a row (store/inputs.py) and pokes the run's input
  key. The run's next step — under its lease, and only when no tool call is pending, so a
  tool_use is never separated from its tool_result — appends each queued text as a `user_input`
  event carrying the row id (`input_id`): the transcript itself records what was consumed.
- Interactive runs park at end_turn (event `awaiting_input`, wait kind `awaiting_input` on the
  input key) instead of completing; input wakes them.
- A turn cancel (queued like input) answers the pending tool calls with an error, cancels the
  run's unfinished sub-agents and pending interruptions, records `turn_cancelled` and parks
  again for input (or goes on at once when input was queued after the cancel).
- A run with `parent_wait_key` (a sub-agent) pokes that key when it reaches a terminal status;
  if the poke is lost, `RunWaker.wake_due` finds the parked parent (store/subruns.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from treadle.domain.runs import NewEvent
from treadle.engine.agents import ResolvedAgent
from treadle.engine.hub import RunEventHub
from treadle.engine.outcomes import StepResult, tool_result_event
from treadle.engine.replay import Transcript, input_id_of, replay
from treadle.engine.sending import StepSender
from treadle.engine.waking import RunWaker
from treadle.store.inputs import InputStore, QueuedInput
from treadle.store.interrupts import InterruptStore, interrupt_key
from treadle.store.steps import LeasedRun, StepOutcome, StepStore, WaitSpec
from treadle.store.subruns import SubRunStore
from treadle.store.waits import WaitStore

log = logging.getLogger("treadle.engine")

INTERACTIVE_ITERATION_BACKSTOP = 1 << 20
AWAITING_INPUT = "awaiting_input"
TURN_CANCEL_TEXT = "cancelled by operator"


def input_key(run_id: str) -> str:
    return f"input:{run_id}"


def consumed_input_id(events: list[tuple[int, str, dict[str, Any]]]) -> int:
    """The highest steering-queue id the transcript has consumed (0: none)."""
    return max((input_id_of(etype, payload) for _seq, etype, payload in events), default=0)


def iteration_cap(agent: ResolvedAgent, leased: LeasedRun) -> int:
    """An interactive run without an explicit `max_iterations` only has a hard backstop."""
    cfg = agent.config
    if cfg.unbounded_iterations or (leased.interactive and "max_iterations" not in cfg.model_fields_set):
        return INTERACTIVE_ITERATION_BACKSTOP
    return cfg.max_iterations


def at_rest(leased: LeasedRun) -> bool:
    """An interactive run whose last turn ended (it parked for input) and got nothing new."""
    return leased.interactive and bool(leased.events) and leased.events[-1][1] == AWAITING_INPUT


def steer_event(item: QueuedInput) -> NewEvent:
    segments = [{"role": "user", "content": [{"type": "trusted-text", "text": item.text}]}]
    return NewEvent("user_input", {"segments": segments, "input_id": item.id, "source": "steer"})


@dataclass(slots=True)
class Steered:
    transcript: Transcript
    result: StepResult | None = None  # set when the step ended here (a turn cancel parked the run)


class Steering:
    """Steering input, interactive parking, turn cancels and parent wake-ups for the engine's
    steps. Every write is fenced by the step's lease (StepStore); every step it makes due goes
    through the StepSender, every wake-up through the RunWaker."""

    def __init__(
        self,
        *,
        steps: StepStore,
        waits: WaitStore,
        inputs: InputStore,
        interrupts: InterruptStore,
        subruns: SubRunStore,
        sender: StepSender,
        waker: RunWaker,
        hub: RunEventHub,
    ) -> None:
        self.steps = steps
        self.waits = waits
        self.inputs = inputs
        self.interrupts = interrupts
        self.subruns = subruns
        self.sender = sender
        self.waker = waker
        self.hub = hub

    async def take_inputs(self, leased: LeasedRun, owner: str, transcript: Transcript) -> Steered:
        """Drain the steering queue at the top of a step (the caller saw `input_seq` move);
        `transcript`: the replay of `leased.events`."""
        version = await self.waits.version(leased.tenant_id, input_key(leased.run_id))  # before looking
        items = await self.inputs.after(leased.run_id, transcript.consumed_input_id)
        cancels = [i for i, it in enumerate(items) if it.kind == "turn_cancel"]
        if not items or (not cancels and transcript.pending):
            return Steered(transcript)  # input waits until the pending tool calls have their results
        events: list[NewEvent] = []
        after_cancel = items
        if cancels:
            last = cancels[-1]
            for tu in transcript.pending:
                events.append(tool_result_event(tu, f"error: {TURN_CANCEL_TEXT} (turn cancelled)", True))
            events.extend(steer_event(it) for it in items[:last] if it.kind == "input")
            cancel = items[last]
            events.append(NewEvent("turn_cancelled", {"reason": cancel.text or TURN_CANCEL_TEXT,
                                                      "since_turn": transcript.iterations, "input_id": cancel.id}))
            after_cancel = items[last + 1:]
            await self._abandon_turn(leased)
        events.extend(steer_event(it) for it in after_cancel if it.kind == "input")
        if cancels and not after_cancel:
            behind = max(0, transcript.iterations - leased.iterations)  # a crashed step's turn, not yet counted
            result = await self.park_for_input(leased, owner, events, delta=behind, version=version)
            await self.inputs.mark_consumed(leased.run_id, items[-1].id)
            return Steered(transcript, result)
        await self.steps.append(leased, owner, events)
        await self.inputs.mark_consumed(leased.run_id, items[-1].id)
        self.hub.notify(leased.run_id)
        return Steered(replay(leased.events))

    async def park_for_input(
        self,
        leased: LeasedRun,
        owner: str,
        events: list[NewEvent],
        *,
        usage: dict[str, int] | None = None,
        delta: int = 0,
        version: int | None = None,
    ) -> StepResult:
        """End the turn of an interactive run: commit `events` + `awaiting_input` and park on the
        run's input key — unless input is already queued, then the next step takes it at once."""
        key = input_key(leased.run_id)
        if version is None:
            version = await self.waits.version(leased.tenant_id, key)  # before looking at the queue
        latest = await self.inputs.latest(leased.run_id)
        consumed = max(consumed_input_id(leased.events),
                       consumed_input_id([(0, e.type, e.payload) for e in events]))
        events = [*events, NewEvent(AWAITING_INPUT, {"since_turn": leased.iterations + delta})]
        if latest > consumed:
            outcome = StepOutcome("running", iterations_delta=delta, usage=usage, enqueue_next=True)
        else:
            outcome = StepOutcome("waiting", iterations_delta=delta, usage=usage,
                                  waits=[WaitSpec("", AWAITING_INPUT, key, version, None)])
        next_step = await self.steps.commit(leased, owner, events, outcome)
        if outcome.waits:
            return StepResult.PARKED
        await self.sender.next_step(leased.run_id, next_step)
        return StepResult.CONTINUED

    async def take_late_input(
        self, leased: LeasedRun, owner: str, events: list[NewEvent], *, usage: dict[str, int]
    ) -> StepResult | None:
        """A non-interactive run about to complete while steering input is queued goes on instead,
        so the input becomes the next user turn. None: nothing queued, complete as usual. (Input
        queued after this check, in the instant before the final commit, is accepted but never read.)"""
        if await self.inputs.latest(leased.run_id) <= consumed_input_id(leased.events):
            return None
        outcome = StepOutcome("running", iterations_delta=1, usage=usage, enqueue_next=True)
        next_step = await self.steps.commit(leased, owner, events, outcome)
        await self.sender.next_step(leased.run_id, next_step)
        return StepResult.CONTINUED

    async def _abandon_turn(self, leased: LeasedRun) -> None:
        """A turn cancel also ends what the turn was waiting on: its sub-agents and questions.
        Both are idempotent, so a step re-run after a crash repeats them harmlessly."""
        for run_id, step_no in await self.subruns.request_cancel_tree(
            leased.tenant_id, leased.run_id, "", include_root=False, child_reason="parent turn cancelled"
        ):
            await self.sender.always(run_id, step_no)  # a parked child has no job: it needs a message to finish
        settled = await self.interrupts.cancel(leased.tenant_id, leased.run_id, None, by="turn_cancel")
        if settled:
            await self.waker.poke(leased.tenant_id, [interrupt_key(row.id) for row in settled])

    async def cancel_if_requested(self, leased: LeasedRun) -> None:
        """The run just parked: if a cancel landed while the step ran, its step message was stale
        and dropped, so send one now (a parked run is leased only to be cancelled). A crash before
        this is covered by `RunWaker.wake_due` (SubRunStore.parked_cancels)."""
        step_no = await self.subruns.parked_cancel(leased.run_id)
        if step_no is not None:
            await self.sender.always(leased.run_id, step_no)

    async def wake_parent(self, leased: LeasedRun) -> None:
        """A sub-agent run ended: poke its parent's wait key. Best effort — a lost poke is found by
        the sweeper (`SubRunStore.settled_parent_waits`)."""
        key = leased.parent_wait_key
        if not key:
            return
        try:
            await self.waker.poke(leased.tenant_id, [key])
        except Exception as exc:
            log.warning("waking the parent of %s failed (the sweeper will): %s", leased.run_id, exc)
