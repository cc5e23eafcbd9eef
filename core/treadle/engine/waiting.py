"""The engine's side of waiting without compute — the I/O the step's steering decisions
(engine/plan.py `steer`, `park_for_input`, `end_of_turn`) read, and the wake-ups around them.

- Steering: `POST /v1/runs/{id}/input` queues a row (store/inputs.py) and pokes the run's input
  key. The run's next step — under its lease, and only when no tool call is pending, so a
  tool_use is never separated from its tool_result — records each queued text as a `user_input`
  event carrying the row id (`input_id`): the transcript itself records what was consumed.
- Interactive runs park at end_turn (event `awaiting_input`, wait kind `awaiting_input` on the
  input key) instead of completing; input wakes them.
- A turn cancel (queued like input) answers the pending tool calls with an error, cancels the
  run's unfinished sub-agents and pending interruptions (`abandon_turn`), records
  `turn_cancelled` and parks again for input (or goes on at once when input was queued after it).
- A run with `parent_wait_key` (a sub-agent) pokes that key when it reaches a terminal status;
  its final commit records that poke (a durable poke, store/waits.py), so a poke lost to a crash
  is done by `RunWaker.wake_due` — also when the parent waits for only some of its children
  (parallel_spawn `wait: any`); a parent whose children all ended is found there too
  (store/subruns.py `settled_parent_waits`: runs ended by a cancel rather than a step).

Nothing here commits a step: the engine applies the plans (engine/step.py `Engine._apply`).
"""

from __future__ import annotations

import logging
from typing import Any

from treadle.engine.hub import RunEventHub
from treadle.engine.plan import InputFacts, input_key
from treadle.engine.replay import input_id_of
from treadle.engine.sending import StepSender
from treadle.engine.waking import RunWaker
from treadle.store.inputs import InputStore, QueuedInput
from treadle.store.interrupts import InterruptStore, interrupt_key
from treadle.store.steps import LeasedRun, StepStore
from treadle.store.subruns import SubRunStore
from treadle.store.waits import WaitStore

log = logging.getLogger("treadle.engine")

__all__ = ["Steering", "consumed_input_id", "input_key"]


def consumed_input_id(events: list[tuple[int, str, dict[str, Any]]]) -> int:
    """The highest steering-queue id the transcript has consumed (0: none)."""
    return max((input_id_of(etype, payload) for _seq, etype, payload in events), default=0)


class Steering:
    """The steering queue, interactive parking's facts, turn cancels' effects and parent wake-ups.
    Every step it makes due goes through the StepSender, every wake-up through the RunWaker."""

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

    async def input_version(self, leased: LeasedRun) -> int:
        """The run's input key's version — read before looking at the queue, so that input queued
        after the look bumps it and the park it decides does not hold."""
        return await self.waits.version(leased.tenant_id, input_key(leased.run_id))

    async def queued(self, leased: LeasedRun, after_id: int) -> list[QueuedInput]:
        return await self.inputs.after(leased.run_id, after_id)

    async def latest_input(self, leased: LeasedRun) -> int:
        return await self.inputs.latest(leased.run_id)

    async def input_facts(self, leased: LeasedRun, version: int | None = None) -> InputFacts:
        if version is None:
            version = await self.input_version(leased)
        return InputFacts(version, await self.latest_input(leased))

    async def mark_consumed(self, leased: LeasedRun, upto_id: int) -> None:
        await self.inputs.mark_consumed(leased.run_id, upto_id)

    async def abandon_turn(self, leased: LeasedRun) -> None:
        """A turn cancel also ends what the turn was waiting on: its sub-agents and questions.
        Both are idempotent; the engine runs this before the cancel's commit, so a step re-run
        after a crash repeats it harmlessly (after the commit, a crash would lose it for good)."""
        for run_id, step_no in await self.subruns.request_cancel_tree(
            leased.tenant_id, leased.run_id, "", include_root=False, child_reason="parent turn cancelled",
            keep_residents=True,  # a resident outlives its parent's turns (builtins/resident.py)
        ):
            await self.sender.always(run_id, step_no)  # a parked child has no job: it needs a message to finish
        settled = await self.interrupts.cancel(leased.tenant_id, leased.run_id, None, by="turn_cancel")
        if settled:
            await self.waker.poke(leased.tenant_id, [interrupt_key(row.id) for row in settled])

    async def cancel_if_requested(self, leased: LeasedRun) -> None:
        """The run just parked: if a cancel landed while the step ran, its step message was stale
        and dropped, so send one now (a parked run is leased only to be cancelled); if a turn
        cancel did, poke the keys it parked on (its own poke found none). A crash before
        this is covered by `RunWaker.wake_due` (SubRunStore.parked_cancels)."""
        step_no, turn_cancel = await self.subruns.parked_cancel(leased.run_id, leased.input_seq)
        if step_no is not None:
            await self.sender.always(leased.run_id, step_no)
        elif turn_cancel:  # a turn cancel that missed the park: wake the run where it is parked
            keys = await self.inputs.wait_keys(leased.run_id)
            await self.waker.poke(leased.tenant_id, sorted({*keys, input_key(leased.run_id)}))

    async def close_residents(self, leased: LeasedRun) -> None:
        """The run ended: close its resident sub-agents (idempotent; if this is lost to a crash the
        sweeper closes them, store/residents.py `due`)."""
        try:
            await self.waker.close_residents(leased.tenant_id, leased.run_id, "parent run ended")
        except Exception as exc:
            log.warning("closing the residents of %s failed (the sweeper will): %s", leased.run_id, exc)

    async def wake(self, leased: LeasedRun, keys: list[str]) -> None:
        """Poke `keys` after a commit (a resident sub-agent's turn ended: its parent's key). Best
        effort — a lost poke is found by the sweeper (store/residents.py `settled_waits`)."""
        try:
            await self.waker.poke(leased.tenant_id, keys)
        except Exception as exc:
            log.warning("waking %s after %s's commit failed (the sweeper will): %s", keys, leased.run_id, exc)

    async def wake_parent(self, leased: LeasedRun) -> None:
        """A sub-agent run ended: poke its parent's wait key. Best effort — a lost poke is done by
        the sweeper (the final commit recorded it: `WaitStore.poke_due`)."""
        key = leased.parent_wait_key
        if not key:
            return
        try:
            await self.waker.poke(leased.tenant_id, [key])
        except Exception as exc:
            log.warning("waking the parent of %s failed (the sweeper will): %s", leased.run_id, exc)
