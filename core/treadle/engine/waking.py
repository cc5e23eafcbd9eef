"""Waking parked runs: poke the wait keys → send each woken run's step → notify live readers.

Every wake-up goes through `RunWaker` — channel publishes, answered interruptions, steering
input, a sub-agent waking its parent, the sweeper's deadlines and timed pokes (a channel
message's `deliver_at`). The runtime's `Waker` port (`Runtime.poke`) delegates here.
"""

from __future__ import annotations

from treadle.engine.hub import RunEventHub
from treadle.engine.sending import StepSender
from treadle.store.pause import PauseStore
from treadle.store.residents import ResidentStore
from treadle.store.subruns import SubRunStore
from treadle.store.waits import WaitStore


class RunWaker:
    def __init__(self, waits: WaitStore, subruns: SubRunStore, sender: StepSender, hub: RunEventHub,
                 pause: PauseStore | None = None, residents: ResidentStore | None = None) -> None:
        self.waits = waits
        self.pause = pause
        self.residents = residents
        self.subruns = subruns
        self.sender = sender
        self.hub = hub

    async def poke(self, tenant_id: str, keys: list[str]) -> int:
        """Wake every run parked on any of `keys`; returns how many woke."""
        woken = await self.waits.poke(tenant_id, keys)
        await self._woke(woken)
        return len(woken)

    async def wake_due(self) -> int:
        """Do the timed pokes that are due (a delayed channel message became visible), wake runs
        whose wait deadline passed, and repair lost wake-ups (sweeper / maintenance)."""
        woken = await self.waits.poke_due()
        woken += await self.waits.wake_due()
        if self.pause is not None:  # runs a pause parked, still parked after a resume (it died half way)
            woken += await self.pause.lost_wakes()
        await self._woke(woken)
        n = len(woken)
        # parents parked on sub-agents that all ended, whose wake-up was lost (crash after the final commit)
        for tenant_id, key in await self.subruns.settled_parent_waits():
            n += await self.poke(tenant_id, [key])
        # parked runs whose cancel request never reached a step (it landed mid-step, then a crash)
        for run_id, step_no in await self.subruns.parked_cancels():
            await self.sender.always(run_id, step_no)
            n += 1
        if self.residents is not None:
            n += await self._residents_due(self.residents)
        return n

    async def _residents_due(self, residents: ResidentStore) -> int:
        """Close the resident sub-agents idle past their TTL or whose parent ended (a crash after
        the parent's final commit); wake parents parked on a resident whose turn ended when that
        wake-up was lost (store/residents.py)."""
        n = 0
        for tenant_id, run_id, why, live in await residents.due():
            if live:
                await self.cancel_tree(tenant_id, run_id, f"resident closed: {why}")
                n += 1
        for tenant_id, key in await residents.settled_waits():
            n += await self.poke(tenant_id, [key])
        return n

    async def close_residents(self, tenant_id: str, parent_run_id: str, reason: str) -> int:
        """Close every open resident sub-agent of a run (its end): each is cancelled."""
        if self.residents is None:
            return 0
        live = await self.residents.close_children(tenant_id, parent_run_id, reason)
        for run_id in live:
            await self.cancel_tree(tenant_id, run_id, reason)
        return len(live)

    async def cancel_tree(self, tenant_id: str, run_id: str, reason: str) -> None:
        """Flag a run and its unfinished descendants for cancellation; each gets a step message."""
        for flagged_id, step_no in await self.subruns.request_cancel_tree(tenant_id, run_id, reason):
            await self.sender.always(flagged_id, step_no)  # a parked run has no job: it needs a message

    async def resume_runtime(self) -> tuple[bool, int]:
        """paused → running, and every run the pause parked woken (store/pause.py). (False, 0) when
        the runtime was not paused."""
        assert self.pause is not None
        resumed, woken = await self.pause.resume()
        await self._woke(woken)
        return resumed, len(woken)

    async def _woke(self, woken: list[tuple[str, int]]) -> None:
        for run_id, step_no in woken:
            await self.sender.next_step(run_id, step_no)  # the wake statement enqueued it with jobs_in_db
        for run_id, _ in woken:
            self.hub.notify(run_id)
