"""Pausing the whole runtime (loomcycle's `POST /v1/_pause`, `POST /v1/_resume`, `GET /v1/_state`).

`pause` declares `pausing` in the database (every replica and cloud function sees it: new runs
are refused with 503 `runtime_paused`, each run parks at its next step's top, engine/plan.py
`pause`), then waits until no run is left between a lease and its commit — every run quiesced at
an iteration boundary, never inside a tool call — or until the timeout, and settles to `paused`.
A step in flight finishes its iteration (its model call, its tools, its commit) first; treadle
never cuts a tool call, so `force_cancelled_count` is always 0 and a run still in a step at the
timeout is named in `warnings` and parks at its next boundary.

`resume` sets `running` and wakes every parked run where it stood (engine/waking.py). Both survive
a crash: the state is a row; a `pausing` whose caller died settles when its deadline passes or the
last run parked (`state` settles it on read); a resume that died half way is finished by the
sweeper (`RunWaker.wake_due`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from treadle.engine.waking import RunWaker
from treadle.errors import Conflict, RuntimePaused
from treadle.store.pause import PauseState, PauseStore

#: loomcycle's pause.DefaultPauseTimeout and MaxPauseTimeout
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 300_000
_POLL_S = (0.02, 0.25)


class PauseControl:
    def __init__(self, store: PauseStore, waker: RunWaker) -> None:
        self.store = store
        self.waker = waker

    async def pause(self, timeout_ms: int = 0, *, budget_s: float | None = None) -> dict[str, Any]:
        """running → pausing → paused. `timeout_ms` 0: the default; capped at 5 minutes. The call
        returns within `budget_s` (the cloud shape's remaining invocation time) even when the
        timeout is longer: then it answers `pausing`, and `GET /v1/_state` says when it settled."""
        started = time.monotonic()
        timeout_s = min(timeout_ms or DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS) / 1000
        if not await self.store.begin(timeout_s):
            raise Conflict("pause: runtime is already pausing or paused", code="already_pausing")
        wait_s = timeout_s if budget_s is None else max(0.0, min(timeout_s, budget_s))
        until, poll = started + wait_s, _POLL_S[0]
        settled = await self.store.settle()
        while not settled and time.monotonic() < until:
            await asyncio.sleep(min(poll, max(0.0, until - time.monotonic())))
            poll = min(poll * 2, _POLL_S[1])
            settled = await self.store.settle()
        warnings: list[str] = []
        if not settled and wait_s >= timeout_s:  # the timeout passed: paused, with what is still in a step
            st = await self.store.read()
            settled = await self.store.settle(force=True)
            if st.active_runs:
                warnings.append(f"{st.active_runs} run(s) had not reached an iteration boundary within the "
                                "timeout; each parks at its next one")
        st = await self.store.read()
        if not settled:
            warnings.append("still pausing when this call had to answer; GET /v1/_state reports paused once "
                            f"every run parked ({st.active_runs} to go)")
        out: dict[str, Any] = {"state": st.state, "duration_ms": int((time.monotonic() - started) * 1000),
                               "force_cancelled_count": 0, "paused_runs_count": st.paused_runs}
        if warnings:
            out["warnings"] = warnings
        return out

    async def resume(self) -> dict[str, Any]:
        """paused → running; every run the pause parked goes on where it was."""
        await self._settle_if_due(await self.store.read())
        resumed, woken = await self.waker.resume_runtime()
        if not resumed:
            raise Conflict("resume: runtime is not paused", code="not_paused")
        return {"state": "running", "resumed_runs_count": woken}

    async def state(self) -> dict[str, Any]:
        """`{state, paused_runs_count}` (loomcycle's), and `active_runs_count`: runs not parked yet."""
        st = await self._settle_if_due(await self.store.read())
        return {"state": st.state, "paused_runs_count": st.paused_runs, "active_runs_count": st.active_runs}

    async def refuse_new_runs(self) -> None:
        """RuntimePaused (503 `runtime_paused`) while pausing or paused: for the API's run starts."""
        if await self.store.paused():
            raise RuntimePaused("runtime is paused (snapshot quiesce); retry after resume")

    async def _settle_if_due(self, st: PauseState) -> PauseState:
        if st.state == "pausing" and (st.overdue or st.active_runs == 0) and await self.store.settle(force=st.overdue):
            return await self.store.read()
        return st
