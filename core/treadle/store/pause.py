"""The runtime's pause state (migration 0065): one row every replica and every cloud function reads.

`running` → `pausing` (new runs refused; each run parks at its next step's top) → `paused` (no
run left between a lease and its commit, or the pause's deadline passed) → `running` (resume:
the parked runs are woken where they were). A step's lease reads the row with the run
(store/steps.py `runtime_paused`); a run parks on the wait key `PAUSE_KEY` of its tenant.

No wake-up is lost (the wait-key protocol of store/waits.py): a parking step reads the key's
version *before* it checks the state again (`paused`); `resume` first commits `running`, then bumps
every tenant's `PAUSE_KEY` and wakes the runs parked on it — so a park that raced the resume finds
its version moved and goes on. `lost_wakes` (the sweeper) repairs a resume that died half way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from treadle.store.db import Pool
from treadle.store.waits import WaitStore

#: the wait key (in the run's tenant) a paused run parks on
PAUSE_KEY = "runtime:resume"
#: the wait kind of that park
PAUSE_KIND = "runtime_pause"

#: the state a step's lease reads with the run (a column of its RETURNING list)
PAUSED_COLUMN = "EXISTS (SELECT 1 FROM runtime_state WHERE state <> 'running') AS runtime_paused"

_ACTIVE = "SELECT count(*) FROM runs WHERE status IN ('queued', 'running')"
_PARKED = "SELECT count(DISTINCT run_id) FROM run_waits WHERE key = %(key)s"


@dataclass(frozen=True, slots=True)
class PauseState:
    state: str  # running | pausing | paused
    since: datetime | None
    deadline: datetime | None
    #: runs parked by the pause (every tenant)
    paused_runs: int
    #: runs not parked yet: queued, or between a lease and a commit (every tenant)
    active_runs: int
    #: whether the deadline of a `pausing` state has passed (it settles to `paused`)
    overdue: bool = False


async def runtime_paused(pool: Pool) -> bool:
    """Whether new work must wait (pausing or paused)."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT state <> 'running' AS paused FROM runtime_state")
        row = await cur.fetchone()
    return bool(row and row["paused"])


class PauseStore:
    def __init__(self, pool: Pool, waits: WaitStore) -> None:
        self.pool = pool
        self.waits = waits

    async def paused(self) -> bool:
        """Whether new work must wait (pausing or paused)."""
        return await runtime_paused(self.pool)

    async def read(self) -> PauseState:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""SELECT state, since, deadline, coalesce(deadline <= now(), false) AS overdue,
                           ({_PARKED}) AS parked, ({_ACTIVE}) AS active FROM runtime_state""",
                {"key": PAUSE_KEY},
            )
            row = await cur.fetchone()
        if row is None:  # the migration inserts the row; a restore that dropped it runs
            return PauseState("running", None, None, 0, 0)
        return PauseState(row["state"], row["since"], row["deadline"], int(row["parked"]), int(row["active"]),
                          bool(row["overdue"]))

    async def begin(self, timeout_s: float) -> bool:
        """running → pausing, until `timeout_s` from now at the latest. False: not running."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """UPDATE runtime_state SET state = 'pausing', since = now(),
                          deadline = now() + make_interval(secs => %s), updated_at = now()
                   WHERE state = 'running' RETURNING state""",
                (timeout_s,),
            )
            return await cur.fetchone() is not None

    async def settle(self, *, force: bool = False) -> bool:
        """pausing → paused once no run is active (or `force`: its deadline passed, the caller
        decided). True when the state is `paused` afterwards."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""UPDATE runtime_state SET state = 'paused', updated_at = now()
                    WHERE state = 'paused' OR (state = 'pausing'
                          AND (%(force)s OR ({_ACTIVE}) = 0))
                    RETURNING state""",
                {"force": force},
            )
            return await cur.fetchone() is not None

    async def resume(self) -> tuple[bool, list[tuple[str, int]]]:
        """paused → running, then wake every run the pause parked. (False, []) when not paused.
        Returns the woken runs' (run_id, step_no) (enqueued already with the Postgres queue)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE runtime_state SET state = 'running', since = NULL, deadline = NULL, updated_at = now()"
                " WHERE state = 'paused' RETURNING state"
            )
            if await cur.fetchone() is None:
                return False, []
        return True, await self.wake_parked()

    async def wake_parked(self) -> list[tuple[str, int]]:
        """Bump every tenant's pause key and wake the runs parked on it — in a transaction that
        starts after `running` committed (the module docstring)."""
        return await self.waits.wake_key_everywhere(PAUSE_KEY)

    async def lost_wakes(self) -> list[tuple[str, int]]:
        """The sweeper's repair: runs still parked by a pause while the runtime runs (a resume
        that died between its two transactions) are woken."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM run_waits WHERE key = %s)"
                " AND EXISTS (SELECT 1 FROM runtime_state WHERE state = 'running') AS lost",
                (PAUSE_KEY,),
            )
            row: dict[str, Any] | None = await cur.fetchone()
        return await self.wake_parked() if row and row["lost"] else []
