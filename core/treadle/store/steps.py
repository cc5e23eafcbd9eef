"""The hot path of the engine: lease a run for one step, append events, commit the step.

Every write carries a fence: it applies only while `runs.lease_owner` is this worker and
`runs.step_no` is the step being executed. A write whose fence fails raises LeaseLost and
changes nothing, so a worker that lost its lease (it was presumed dead and swept) can never
corrupt a transcript another worker has continued.

Durability: the step commit is synchronous. Mid-step writes (taking the lease, appending the
assistant turn) commit with `synchronous_commit = off` unless `sync_mid_step` is set: a crash of
treadle loses none of them (Postgres holds them), and after a crash of Postgres itself only a
suffix of the log can be missing — the in-flight step then simply runs again from its start,
because every later synchronous commit flushes the writes before it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.errors import DivisionByZero
from psycopg.types.json import Jsonb

from treadle.domain.events import EventType
from treadle.domain.runs import NewEvent, RunOptions
from treadle.errors import CancelPending, LeaseLost
from treadle.store.db import Pool, StepTransaction, current_step_transaction, prepare_now
from treadle.store.folding import Folded, FoldedWrite, FoldFailed, fill_result
from treadle.store.held import HeldTranscripts
from treadle.store.locks import CLAIM_LOCK_KEY, xact_lock
from treadle.store.pause import PAUSED_COLUMN
from treadle.store.runs import JOBS_CHANNEL
from treadle.store.sqltext import compact
from treadle.store.stalled import StalledSession, end_stalled_sessions
from treadle.store.usage import ROLLUP_CTE, rollup_params, rollup_rows
from treadle.telemetry.metrics import metrics

_LEASED_COLUMNS = (
    "runs.id, runs.tenant_id, runs.user_id, runs.agent, runs.status, runs.step_no, runs.last_seq,"
    " runs.iterations, runs.step_failures, runs.cancel_requested, runs.cancel_reason, runs.metadata,"
    " runs.interactive, runs.input_seq, runs.parent_wait_key, runs.def_id, runs.skill_def_ids,"
    " runs.client_tools, runs.client_tool_timeout_s, runs.allowed_hosts, runs.trace_context, runs.created_at,"
    " runs.parent_context, runs.run_options, runs.session_id, runs.session_seq, " + PAUSED_COLUMN
)
def _events_agg(after: str = "0") -> str:
    """The run's events after seq `after` (an SQL expression) as one JSON array, `events`."""
    return ("(SELECT coalesce(json_agg(json_build_array(e.seq, e.type, e.payload) ORDER BY e.seq), '[]')"
            f" FROM events e WHERE e.run_id = runs.id AND e.seq > {after}) AS events")


_EVENTS_AGG = _events_agg()
#: a claim's: only the events after the job's mark when this process made it (store/held.py)
_EVENTS_AFTER_MARK = _events_agg("j.after") + ", j.after AS events_after"


@dataclass(slots=True)
class LeasedRun:
    run_id: str
    tenant_id: str
    user_id: str | None
    agent: str
    status: str
    step_no: int
    last_seq: int
    iterations: int
    step_failures: int
    cancel_requested: bool
    cancel_reason: str | None
    metadata: dict[str, Any]
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    #: an interactive run parks at end_turn for the next user input instead of completing
    interactive: bool = False
    #: id of the newest queued run_inputs row (0: none); see engine/waiting.py
    input_seq: int = 0
    #: a sub-agent's wake key of its parent, poked when this run reaches a terminal status
    parent_wait_key: str | None = None
    #: the AgentDef (def_id) and skills ({name: def_id | "yaml"}) pinned at run start
    def_id: str | None = None
    skill_def_ids: dict[str, str] | None = None
    #: application tools the caller declared for this run, and their answer timeout
    client_tools: list[dict[str, Any]] | None = None
    client_tool_timeout_s: float | None = None
    #: the caller's narrowing of reachable hosts (None: none)
    allowed_hosts: list[str] | None = None
    #: the W3C context of the run's span (telemetry/tracing.py); None when tracing is off
    trace_context: dict[str, str] | None = None
    #: when the run was created (the run-duration metric)
    created_at: datetime | None = None
    #: loomcycle's parent_context (inherited by sub-agents) and per-run options (tools, sampling, user_tier)
    parent_context: dict[str, Any] | None = None
    run_options: RunOptions = field(default_factory=RunOptions)
    #: whether the runtime was pausing or paused when the step was leased (store/pause.py)
    runtime_paused: bool = False
    #: the engine's replay state of `events` that this process kept with them (store/held.py),
    #: found by the claim; opaque here (engine/lease.py owns it)
    kept_replay: Any = None
    #: the session the run belongs to, and its place there: a run with session_seq > 0 continues
    #: the session, its history the events of the session's earlier runs (`StepStore.session_history`)
    session_id: str | None = None
    session_seq: int = 0


@dataclass(slots=True)
class WaitSpec:
    tool_use_id: str
    kind: str
    key: str
    since_version: int
    deadline_epoch: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tool_use_id": self.tool_use_id,
            "kind": self.kind,
            "key": self.key,
            "deadline": self.deadline_epoch,
        }


@dataclass(frozen=True, slots=True)
class Committed:
    """What a step's commit did to the run (the store never changes the run it was given)."""

    step_no: int
    #: the transcript's last seq before the commit's events (another writer moved it if it is not
    #: the one the committing worker knew)
    base: int
    input_seq: int
    cancel_requested: bool
    cancel_reason: str | None
    #: the lease passed to this token for the next step (None: released, parked or ended)
    chain_owner: str | None = None
    #: the run's final commit: whether volume instances are rooted at it (None: not final)
    rooted_volumes: bool | None = None
    #: the run's final commit: its iterations and tokens, all told (None: not final)
    totals: RunTotals | None = None
    #: the job it enqueued carries this process's mark: keep the transcript (`StepStore.keep`)
    marked: bool = False


@dataclass(frozen=True, slots=True)
class RunTotals:
    """A run's iterations and tokens at its final commit (the run-end log line)."""

    iterations: int
    #: input tokens, cache writes and reads included
    tokens_in: int
    tokens_out: int


@dataclass(slots=True)
class StepOutcome:
    """What a step commits besides its events."""

    status: str  # running | completed | failed | cancelled
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    iterations_delta: int = 0
    usage: dict[str, int] | None = None
    enqueue_next: bool = False
    delay_s: float = 0.0
    #: keep the run leased for its next step under this new owner token, instead of releasing
    #: it and enqueueing a job: the same worker continues at once (no claim, no reload)
    chain_owner: str | None = None
    #: park the run (status 'waiting') on these waits; see store/waits.py for the protocol
    waits: list[WaitSpec] | None = None

    @property
    def final(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")


def _leased(row: dict[str, Any]) -> LeasedRun:
    events = row["events"]
    if isinstance(events, str):
        events = json.loads(events)
    return LeasedRun(
        run_id=row["id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        agent=row["agent"],
        status=row["status"],
        step_no=row["step_no"],
        last_seq=row["last_seq"],
        iterations=row["iterations"],
        step_failures=row["step_failures"],
        cancel_requested=row["cancel_requested"],
        cancel_reason=row["cancel_reason"],
        metadata=row["metadata"],
        events=[(e[0], e[1], e[2]) for e in events],
        interactive=bool(row.get("interactive")),
        input_seq=int(row.get("input_seq") or 0),
        parent_wait_key=row.get("parent_wait_key"),
        def_id=row.get("def_id"),
        skill_def_ids=row.get("skill_def_ids"),
        client_tools=row.get("client_tools"),
        client_tool_timeout_s=row.get("client_tool_timeout_s"),
        allowed_hosts=row.get("allowed_hosts"),
        trace_context=row.get("trace_context"),
        created_at=row.get("created_at"),
        parent_context=row.get("parent_context"),
        run_options=RunOptions.from_json(row.get("run_options")),
        session_id=row.get("session_id"),
        session_seq=int(row.get("session_seq") or 0),
        runtime_paused=bool(row.get("runtime_paused")),
    )


def _events_param(events: list[NewEvent]) -> Jsonb:
    """All new events as one JSON array parameter (one dump, no per-element array escaping)."""
    return Jsonb([{"type": e.type, "payload": e.payload, "tool_use_id": e.tool_use_id} for e in events])


class StepStore:
    def __init__(
        self,
        pool: Pool,
        *,
        jobs_in_db: bool,
        lease_s: float,
        requeue_after_s: float,
        sync_mid_step: bool = False,
        tenant_max_running: int = 0,
        user_max_running: int = 0,
    ) -> None:
        self.pool = pool
        #: the operator's prices, (provider, model) → (input, output, cache write, cache read per
        #: million, currency): the usage metrics' cost (the runtime sets them with usage_prices)
        self.prices: dict[tuple[str, str], tuple[float, float, float, float, str]] = {}
        self.mid_step_commit = "on" if sync_mid_step else "off"
        self.jobs_in_db = jobs_in_db
        self.lease_s = lease_s
        self.requeue_after_s = requeue_after_s
        #: fairness (0 = no cap): a job is not claimed while its tenant (its user) already has this
        #: many runs under a live lease; it stays queued and is claimed when one finishes its step
        self.tenant_max_running = tenant_max_running
        self.user_max_running = user_max_running
        #: the transcripts of runs this store yielded to the job queue, for its next claim, and
        #: the mark its yielding commits leave on their jobs (a claim by this store recognises it)
        self.held = HeldTranscripts()
        self.mark = secrets.token_hex(8)

    # -- taking a lease ------------------------------------------------------------------------

    #: a step that goes on under the same lease chain keeps the lease's deadline while at least half
    #: of a lease is left (the renewal task extends it past that): the commit then changes no
    #: indexed column of `runs`, and Postgres updates the row in place (HOT, migration 0023)
    _KEEP_LEASE = ("CASE WHEN runs.lease_until >= now() + make_interval(secs => %(lease)s / 2) THEN runs.lease_until"
                   " ELSE now() + make_interval(secs => %(lease)s) END")

    _LEASE_SET = (
        "lease_owner = %(owner)s, lease_until = now() + make_interval(secs => %(lease)s),"
        " status = CASE WHEN runs.status = 'queued' THEN 'running' ELSE runs.status END, updated_at = now()"
    )
    # a parked run is leased only to be cancelled; a poke sets it back to 'running' first
    _LEASE_FREE = (
        "(runs.status IN ('queued','running') OR (runs.status = 'waiting' AND runs.cancel_requested))"
        " AND (runs.lease_owner IS NULL OR runs.lease_until < now())"
    )

    async def lease(self, run_id: str, step_no: int, owner: str) -> LeasedRun | None:
        """Lease the run for `step_no`; None when the message is stale or the lease is held."""
        async with self.pool.connection() as conn:
            return await self._lease_on(conn, run_id, step_no, owner)

    async def lease_within_cap(self, run_id: str, step_no: int, owner: str) -> tuple[bool, LeasedRun | None]:
        """(over_cap, leased): lease the run for `step_no` unless its tenant (or user) already has
        its fairness cap of runs under a live lease — checked and leased in one turn of the claim
        lock, so that workers at the same moment cannot all see room (the SQS path's lease)."""
        if not (self.tenant_max_running or self.user_max_running):
            return False, await self.lease(run_id, step_no, owner)
        async with self.pool.connection() as conn, conn.transaction():
            await xact_lock(conn, CLAIM_LOCK_KEY)
            if await self._over_cap_on(conn, run_id):
                return True, None
            return False, await self._lease_on(conn, run_id, step_no, owner)

    async def _lease_on(self, conn: Any, run_id: str, step_no: int, owner: str) -> LeasedRun | None:
        sql = f"""UPDATE runs SET {self._LEASE_SET}
                  FROM (SELECT set_config('synchronous_commit', %(commit_mode)s, true)) AS s
                  WHERE runs.id = %(run_id)s AND runs.step_no = %(step)s AND {self._LEASE_FREE}
                  RETURNING {_LEASED_COLUMNS}, {_EVENTS_AGG}"""
        cur = await conn.execute(
            sql,
            {
                "owner": owner,
                "lease": self.lease_s,
                "run_id": run_id,
                "step": step_no,
                "commit_mode": self.mid_step_commit,
            },
            prepare=prepare_now(conn),
        )
        row = await cur.fetchone()
        leased = _leased(row) if row else None
        if leased is not None:
            await self._ensure_complete(conn, leased)
        return leased

    def holding(self) -> AbstractAsyncContextManager[None]:
        """While the block runs, the task's steps share one pooled connection (store/db.py
        `Pool.holding`): a lease chain's statements — given back across `released`."""
        return self.pool.holding()

    def released(self, after_s: float = 0.0, also: Callable[[], None] | None = None
                 ) -> AbstractAsyncContextManager[None]:
        """Give the task's held connection back while the block waits on a model or a tool (once
        it has waited `after_s`; `also` called then too)."""
        return self.pool.released(after_s, also)

    async def claim_job(self, owner: str) -> tuple[bool, LeasedRun | None]:
        """Take the next due job off the Postgres queue and lease its run, atomically.

        Returns (found_job, leased). A job whose step is stale or whose run is leased by a live
        worker is consumed and dropped (found_job=True, leased=None)."""
        sql = f"""
        WITH s AS (SELECT set_config('synchronous_commit', %(commit_mode)s, true) AS v),
        j AS (
            DELETE FROM jobs WHERE id = ({self._next_job()})
            RETURNING run_id, step_no,
                      CASE WHEN yielded_by = %(mark)s THEN coalesce(known_seq, 0) ELSE 0 END AS after
        ), l AS (
            UPDATE runs SET {self._LEASE_SET} FROM j
            WHERE runs.id = j.run_id AND runs.step_no = j.step_no AND {self._LEASE_FREE}
            RETURNING {_LEASED_COLUMNS}, {_EVENTS_AFTER_MARK}
        )
        SELECT l.*, j.run_id AS job_run_id FROM s, j LEFT JOIN l ON l.id = j.run_id
        """
        params = {
            "owner": owner, "lease": self.lease_s, "commit_mode": self.mid_step_commit,
            "tenant_cap": self.tenant_max_running, "user_cap": self.user_max_running, "mark": self.mark,
        }
        async with self.pool.step_connection() as conn:
            if self.tenant_max_running or self.user_max_running:
                # under a cap, claims take turns: two claims counting the same leases at once would
                # both see room and lease past the cap (the statement's snapshot starts after the
                # lock, so it sees the previous claimer's committed lease)
                async with conn.transaction():
                    await xact_lock(conn, CLAIM_LOCK_KEY)
                    cur = await conn.execute(sql, params, prepare=prepare_now(conn))
                    row = await cur.fetchone()
            else:
                cur = await conn.execute(sql, params, prepare=prepare_now(conn))
                row = await cur.fetchone()
            if row is None:
                return False, None
            if row["id"] is None:
                return True, None
            leased = _leased(row)
            after = int(row["events_after"] or 0)
            if after:  # this process yielded the run at `after`: the rest of its transcript is held
                held = await self.held.take_when_filled(leased.run_id, after)
                if held is None:
                    leased.events = await self._read_events(conn, leased.run_id)
                else:
                    held.events.extend(leased.events)
                    leased.events, leased.kept_replay = held.events, held.replayed
            await self._ensure_complete(conn, leased)
        return True, leased

    async def over_cap(self, run_id: str) -> bool:
        """Whether the run's tenant (or user) already has its fairness cap of runs under a live
        lease (the Postgres queue's claim skips such jobs; the SQS path uses `lease_within_cap`)."""
        if not (self.tenant_max_running or self.user_max_running):
            return False
        async with self.pool.connection() as conn:
            return await self._over_cap_on(conn, run_id)

    async def _over_cap_on(self, conn: Any, run_id: str) -> bool:
        checks = []
        if self.tenant_max_running:
            checks.append(self._RUNNING.format(match="x.tenant_id = r.tenant_id") + " >= %(tenant_cap)s")
        if self.user_max_running:
            checks.append("(r.user_id IS NOT NULL AND " + self._RUNNING.format(
                match="x.tenant_id = r.tenant_id AND x.user_id = r.user_id") + " >= %(user_cap)s)")
        cur = await conn.execute(
            "SELECT (" + " OR ".join(checks) + ") AS over FROM runs r WHERE r.id = %(run_id)s",
            {"run_id": run_id, "tenant_cap": self.tenant_max_running, "user_cap": self.user_max_running},
        )
        row = await cur.fetchone()
        return bool(row and row["over"])

    #: how many runs like `r` (`match`) hold a live lease, `r` itself not counted
    _RUNNING = ("(SELECT count(*) FROM runs x WHERE x.status IN ('queued','running') AND x.lease_owner IS NOT NULL"
                " AND x.lease_until > now() AND x.id <> r.id AND {match})")

    def _next_job(self) -> str:
        """The due job to claim: the oldest — skipping, under a fairness cap, jobs whose tenant (or
        user) already has that many runs under a live lease. Without caps, the plain queue order."""
        if not (self.tenant_max_running or self.user_max_running):
            return "SELECT id FROM jobs WHERE run_at <= now() ORDER BY run_created, id LIMIT 1 FOR UPDATE SKIP LOCKED"
        running = self._RUNNING
        caps = []
        if self.tenant_max_running:
            caps.append(running.format(match="x.tenant_id = r.tenant_id") + " < %(tenant_cap)s")
        if self.user_max_running:
            caps.append("(r.user_id IS NULL OR " + running.format(
                match="x.tenant_id = r.tenant_id AND x.user_id = r.user_id") + " < %(user_cap)s)")
        return ("SELECT j2.id FROM jobs j2 JOIN runs r ON r.id = j2.run_id WHERE j2.run_at <= now() AND "
                + " AND ".join(caps) + " ORDER BY j2.run_created, j2.id LIMIT 1 FOR UPDATE OF j2 SKIP LOCKED")

    async def _ensure_complete(self, conn: Any, leased: LeasedRun) -> None:
        """The events were read in the lease statement's snapshot; if a commit raced in just
        before our lease, reread them so the transcript matches `last_seq`."""
        if (leased.events[-1][0] if leased.events else 0) == leased.last_seq:
            return
        leased.events, leased.kept_replay = await self._read_events(conn, leased.run_id), None

    @staticmethod
    async def _read_events(conn: Any, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
        cur = await conn.execute("SELECT seq, type, payload FROM events WHERE run_id = %s ORDER BY seq", (run_id,),
                                 prepare=prepare_now(conn))
        return [(r["seq"], r["type"], r["payload"]) for r in await cur.fetchall()]

    async def reload_events(self, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
        """Re-read the run's transcript (a chained step found it changed by another writer)."""
        async with self.pool.step_connection() as conn:
            return await self._read_events(conn, run_id)

    async def tool_record(self, tenant_id: str, run_id: str, after_seq: int) -> list[tuple[int, str, dict[str, Any]]]:
        """Run `run_id`'s tool_call and tool_result events after `after_seq`, in order: what a
        replay fork of it answers its calls from (engine/forkreplay.py)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT seq, type, payload FROM events WHERE run_id = %s AND tenant_id = %s AND seq > %s"
                " AND type = ANY(%s) ORDER BY seq",
                (run_id, tenant_id, after_seq, [str(EventType.TOOL_CALL), str(EventType.TOOL_RESULT)]))
            return [(r["seq"], r["type"], r["payload"]) for r in await cur.fetchall()]

    async def read(self, tenant_id: str, run_id: str) -> LeasedRun | None:
        """The run's row and transcript as a step would see them, without a lease (a run at rest:
        ended, or parked for input)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_LEASED_COLUMNS}, {_EVENTS_AGG} FROM runs"
                                     " WHERE runs.id = %s AND runs.tenant_id = %s", (run_id, tenant_id))
            row = await cur.fetchone()
        return _leased(row) if row else None

    async def append_at_rest(self, tenant_id: str, run_id: str, etype: str, payload: dict[str, Any]) -> bool:
        """Append one event to an ended run (a manual compaction's marker): no lease, as nothing
        else writes an ended run; False when the run is not ended (or not there)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH r AS (UPDATE runs SET last_seq = last_seq + 1, updated_at = now()"
                "  WHERE id = %s AND tenant_id = %s AND status IN ('completed','failed','cancelled')"
                "  RETURNING id, tenant_id, last_seq)"
                " INSERT INTO events (run_id, seq, tenant_id, type, payload)"
                " SELECT r.id, r.last_seq, r.tenant_id, %s, %s FROM r RETURNING seq",
                (run_id, tenant_id, etype, Jsonb(payload)))
            return await cur.fetchone() is not None

    async def session_history_since(self, leased: LeasedRun, since: int) -> tuple[
            tuple[int, int], list[list[tuple[int, str, dict[str, Any]]]]]:
        """The events of the session's runs from place `since` up to this run's, run by run (each
        in seq order), and the fingerprint of the runs before `since`: (how many, the sum of their
        `last_seq`) — it changes when an event is appended to one of them or one is deleted."""
        async with self.pool.step_connection() as conn:
            cur = await conn.execute(
                "WITH fp AS (SELECT count(*) AS n, coalesce(sum(last_seq), 0) AS s FROM runs"
                "  WHERE tenant_id = %(t)s AND session_id = %(sid)s AND session_seq < %(since)s)"
                " SELECT fp.n, fp.s, x.session_seq, x.seq, x.type, x.payload FROM fp LEFT JOIN ("
                "  SELECT r.session_seq, e.seq, e.type, e.payload FROM runs r JOIN events e ON e.run_id = r.id"
                "  WHERE r.tenant_id = %(t)s AND r.session_id = %(sid)s"
                "  AND r.session_seq >= %(since)s AND r.session_seq < %(upto)s) x ON true"
                " ORDER BY x.session_seq, x.seq",
                {"t": leased.tenant_id, "sid": leased.session_id, "since": since, "upto": leased.session_seq},
                prepare=prepare_now(conn))
            rows = await cur.fetchall()
        runs: list[list[tuple[int, str, dict[str, Any]]]] = []
        place = None
        for r in rows:
            if r["seq"] is None:
                continue
            if r["session_seq"] != place:
                runs.append([])
                place = r["session_seq"]
            runs[-1].append((r["seq"], r["type"], r["payload"]))
        return (int(rows[0]["n"]), int(rows[0]["s"])), runs

    def keep(self, run_id: str, last_seq: int, events: list[tuple[int, str, dict[str, Any]]] | None,
             replay: object = None) -> None:
        """Fill in the transcript a commit that marked its job (`Committed.marked`) reserved for
        this process's next claim of the run (store/held.py); None: it is not the one the mark
        promises (another writer moved the transcript) — give the reservation up."""
        if events is None:
            self.held.give_up(run_id)
        else:
            self.held.fill(run_id, last_seq, events, replay)

    async def renew(self, leased: LeasedRun, owner: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE runs SET lease_until = now() + make_interval(secs => %s)"
                " WHERE id = %s AND lease_owner = %s AND step_no = %s",
                (self.lease_s, leased.run_id, owner, leased.step_no),
            )
            return cur.rowcount == 1

    # -- writing under the lease ---------------------------------------------------------------

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A savepoint of the current step transaction: an exception inside rolls back to it."""
        async with self.pool.connection() as conn, conn.transaction():
            yield

    def transaction(self) -> AbstractAsyncContextManager[StepTransaction]:
        """The step's commit transaction, current for the task: the writes of transactional tools
        and the step's `commit` become one atomic commit. The commit statement is the fence — a
        worker that lost its lease gets LeaseLost there and the whole transaction, tool writes
        included, rolls back; it also takes the run row's lock and re-checks a pending cancel after
        any wait, so a cancel either committed before (then `commit` refuses to complete the run)
        or waits for this commit. A worker that stalls inside (SIGSTOP, a hung tool) is ended by
        Postgres after a lease (`open_pool`'s idle-in-transaction limit) and swept like a dead one.
        Pipelined (`Pool.pipelined`): BEGIN goes with the first statement, and `commit` sends its
        statement with the COMMIT (`StepTransaction.finish_with`) — 2 round trips for a step with
        one transactional call; a step whose commit statement is its only one (no transactional
        call, or one folded into it) sends it alone, in autocommit — 1 round trip, no BEGIN.
        (The pool's context manager itself, not one wrapping it: a layer less on every step.)"""
        return self.pool.step_transaction()

    def fold(self, tool_use_id: str, write: FoldedWrite) -> bool:
        """Hand a transactional call's write to the current step transaction's commit statement
        (store/folding.py); False when there is none that can carry it — run the call instead."""
        tx = current_step_transaction(self.pool)
        return tx is not None and tx.fold(Folded(tool_use_id, write))

    def folded_id(self) -> str | None:
        """The tool_use_id whose write the current step transaction's commit carries, if any."""
        tx = current_step_transaction(self.pool)
        return tx.folded.tool_use_id if tx is not None and tx.folded is not None else None

    async def append(self, leased: LeasedRun, owner: str, events: list[NewEvent]) -> list[int]:
        """Append events mid-step (e.g. the assistant turn before its tools run)."""
        if not events:
            return []
        usage_rows = rollup_rows(events)
        rollup = ROLLUP_CTE if usage_rows else ""
        sql = f"""
        WITH g AS (
            UPDATE runs SET last_seq = last_seq + %(n)s, updated_at = now(),
                   lease_until = {self._KEEP_LEASE}
            WHERE id = %(run_id)s AND lease_owner = %(owner)s AND step_no = %(step)s
            RETURNING tenant_id, last_seq - %(n)s AS base
        ){rollup}
        INSERT INTO events (run_id, seq, tenant_id, type, payload, tool_use_id)
        SELECT %(run_id)s, g.base + t.ord, g.tenant_id, t.type, t.payload, t.tool_use_id
        FROM g, (SELECT set_config('synchronous_commit', %(commit_mode)s, true)) AS s,
             ROWS FROM (jsonb_to_recordset(%(events)s::jsonb) AS (type text, payload jsonb, tool_use_id text))
             WITH ORDINALITY AS t(type, payload, tool_use_id, ord)
        RETURNING seq
        """
        async with self.pool.step_connection() as conn:
            cur = await conn.execute(
                sql,
                {
                    "n": len(events),
                    "lease": self.lease_s,
                    "run_id": leased.run_id,
                    "owner": owner,
                    "step": leased.step_no,
                    "events": _events_param(events),
                    "commit_mode": self.mid_step_commit,
                    **(rollup_params(leased.user_id, leased.agent, leased.def_id, usage_rows) if usage_rows else {}),
                },
                prepare=prepare_now(conn),
            )
            seqs = [r["seq"] for r in await cur.fetchall()]
        if not seqs:
            raise LeaseLost(f"run {leased.run_id}: lease lost before step {leased.step_no} could append")
        if usage_rows:
            self._measure_usage(leased, usage_rows)
        return seqs

    def _measure_usage(self, leased: LeasedRun, rows: list[dict[str, Any]]) -> None:
        """The usage metrics of a committed statement's model calls (telemetry/metrics.py), priced
        as ROLLUP_CTE prices them."""
        m = metrics()
        for row in rows:
            price = self.prices.get((row["provider"], row["model"]))
            cost = 0.0
            if price is not None:
                cost = (row["i"] * price[0] + row["o"] * price[1] + row["cw"] * price[2] + row["cr"] * price[3]) / 1e6
            m.usage({"tenant": leased.tenant_id, "user": leased.user_id or "", "agent": leased.agent,
                     "def": leased.def_id or "", "provider": row["provider"], "model": row["model"]},
                    row["calls"], {"input": row["i"], "output": row["o"], "cache_creation": row["cw"],
                                   "cache_read": row["cr"]}, cost, price[4] if price is not None else "")

    async def commit(
        self, leased: LeasedRun, owner: str, events: list[NewEvent], outcome: StepOutcome, *,
        stale: bool = False,
    ) -> Committed:
        """Append the step's last events, advance `step_no`, release the lease and (with the
        Postgres queue) enqueue the next step, all in one statement; what it did comes back as a
        `Committed` (`leased` is left as it was: the engine owns the lease chain's state).

        With `outcome.chain_owner` the lease passes to that token for the next step and nothing is
        enqueued. `stale`: the caller's transcript no longer matches the database (its job is then
        not marked for keeping). A park that a poke raced becomes a running step: `outcome` says so."""
        tx = current_step_transaction(self.pool)
        if tx is not None and tx.folded is not None and (outcome.waits or not tx.can_finish):
            # only the pipelined commit statement carries a folded write: never drop one
            raise FoldFailed(tx.folded.tool_use_id, RuntimeError("this commit cannot carry a folded write"))
        if outcome.waits:
            return await self._commit_parking(leased, owner, events, outcome)
        if tx is not None and tx.can_finish:  # its own connection, never a pending transaction's BEGIN
            return await self._commit(tx.conn, leased, owner, events, outcome, finish=tx, stale=stale)
        async with self.pool.step_connection() as conn:
            return await self._commit(conn, leased, owner, events, outcome, stale=stale)

    async def _commit_parking(
        self, leased: LeasedRun, owner: str, events: list[NewEvent], outcome: StepOutcome
    ) -> Committed:
        """Park unless a poke raced the tool's check: lock the wait keys, compare versions."""
        waits = outcome.waits or []
        async with self.pool.step_connection() as conn, conn.transaction():
            # lock the run first: a cancel either committed before (seen here: do not park) or
            # waits for this commit and then enqueues the new step_no itself. So does a turn cancel
            # queued after this step was leased (its poke found the run running, not parked here):
            # the run goes on, and its next step takes the cancel (engine/plan.py `steer`)
            cur = await conn.execute(
                "SELECT cancel_requested OR EXISTS (SELECT 1 FROM run_inputs i WHERE i.run_id = runs.id"
                " AND i.kind = 'turn_cancel' AND i.id > %s) AS cancelled FROM runs WHERE id = %s FOR UPDATE",
                (_inputs_seen(leased, events), leased.run_id))
            run = await cur.fetchone()
            cancelled = bool(run and run["cancelled"])
            cur = await conn.execute(
                "SELECT key, version FROM wait_keys WHERE tenant_id = %s AND key = ANY(%s) FOR SHARE",
                (leased.tenant_id, [w.key for w in waits]),
            )
            current = {r["key"]: int(r["version"]) for r in await cur.fetchall()}
            if cancelled or any(current.get(w.key, 0) != w.since_version for w in waits):
                outcome.status, outcome.waits, outcome.enqueue_next = "running", None, True
                outcome.chain_owner = None
            else:
                outcome.status = "waiting"
            committed = await self._commit(conn, leased, owner, events, outcome)
        outcome.waits = waits if outcome.status == "waiting" else None
        return committed

    async def _commit(
        self, conn: Any, leased: LeasedRun, owner: str, events: list[NewEvent], outcome: StepOutcome,
        finish: StepTransaction | None = None, stale: bool = False,
    ) -> Committed:
        """The commit statement. With `finish` (the pipelined step transaction it ends) the
        statement travels with the COMMIT in one round trip; its fence then must fail loudly
        instead of matching no row, so that the server skips the COMMIT (and the tool writes before
        it roll back): `fence` divides by the number of rows the fenced UPDATE matched."""
        usage = outcome.usage or {}
        chain = outcome.chain_owner is not None and not outcome.final
        parked = bool(outcome.waits)
        enqueue_here = outcome.enqueue_next and self.jobs_in_db and not chain and not parked
        folded = finish.folded if finish is not None else None
        # a running run that goes on running keeps `status` out of its SET list: Postgres then skips
        # the `UPDATE OF status` trigger (run_credentials_forget) at once, where it otherwise reads
        # and compiles the trigger's WHEN clause again for every step's statement
        keeps_status = not (outcome.final or parked) and outcome.status == leased.status == "running"
        usage_rows = rollup_rows(events)
        sql = _commit_sql(finish is not None, folded.write.statement if folded is not None else None,
                          final=outcome.final, parked=parked, enqueue=enqueue_here, keeps_status=keeps_status,
                          chain=chain, yields=outcome.status in ("running", "completed", "waiting"),
                          sets_stop=outcome.stop_reason is not None, sets_error=outcome.error is not None,
                          usage=bool(usage_rows), pokes_parent=outcome.final and bool(leased.parent_wait_key))
        params = {
            "n": len(events),
            "requeue": self.requeue_after_s,
            "delay": outcome.delay_s,
            "status": outcome.status,
            "stop": outcome.stop_reason,
            "error": Jsonb(outcome.error) if outcome.error is not None else None,
            "iters": outcome.iterations_delta,
            "in_t": usage.get("input_tokens", 0),
            "out_t": usage.get("output_tokens", 0),
            "cc_t": usage.get("cache_creation_input_tokens", 0),
            "cr_t": usage.get("cache_read_input_tokens", 0),
            "run_id": leased.run_id,
            "owner": owner,
            "step": leased.step_no,
            "events": _events_param(events),
            "chain_owner": outcome.chain_owner if chain else None,
            "waits": Jsonb([w.to_json() for w in outcome.waits or []]),
            "lease": self.lease_s,
            "parent_key": leased.parent_wait_key,
            # the run goes back to the queue with the transcript this process holds: mark its job
            "yielder": (self.mark if enqueue_here and not outcome.final and not stale
                        and self.held.has_room(len(leased.events) + len(events)) else None),
        }
        if usage_rows:
            params.update(rollup_params(leased.user_id, leased.agent, leased.def_id, usage_rows))
        if folded is not None:
            params.update(folded.write.params, fold_id=folded.tool_use_id, fold_failed=folded.write.failed)
        if params["yielder"] is not None:  # the claimer may see the job before this task sees the answer
            self.held.reserve(leased.run_id, leased.last_seq + len(events))
        try:
            row = await self._execute_commit(conn, sql, params, finish, folded)
        except BaseException:
            self.held.give_up(leased.run_id)
            raise
        if row is None:
            self.held.give_up(leased.run_id)
        if row is None:
            pending = await self._cancel_pending(conn, leased, owner)
            if pending is not None:
                raise CancelPending(f"run {leased.run_id}: a cancel landed before step {leased.step_no} committed",
                                    reason=pending)
            raise LeaseLost(f"run {leased.run_id}: lease lost before step {leased.step_no} could commit")
        if folded is not None:
            fill_result(events, folded, row["fold_text"])
        if usage_rows:
            self._measure_usage(leased, usage_rows)
        return Committed(
            step_no=int(row["step_no"]), base=int(row["base"]), input_seq=int(row["input_seq"] or 0),
            cancel_requested=bool(row["cancel_requested"]), cancel_reason=row["cancel_reason"],
            chain_owner=outcome.chain_owner if chain else None,
            rooted_volumes=bool(row["rooted_volumes"]) if outcome.final else None,
            totals=RunTotals(int(row["iterations"]), int(row["tokens_in"]), int(row["tokens_out"]))
            if outcome.final else None,
            marked=params["yielder"] is not None,
        )

    @staticmethod
    async def _execute_commit(conn: Any, sql: str, params: dict[str, Any], finish: StepTransaction | None,
                              folded: Folded | None) -> Any:
        """The commit statement's row; None when its fence matched no row."""
        if finish is None:
            cur = await conn.execute(sql, params, prepare=prepare_now(conn))
            return await cur.fetchone()
        try:
            return await finish.finish_with(sql, params)
        except DivisionByZero:  # the fence matched no row; the transaction rolled back
            return None
        except psycopg.Error as exc:
            if folded is None or finish.conn.closed:
                raise
            raise FoldFailed(folded.tool_use_id, exc) from exc

    @staticmethod
    async def _cancel_pending(conn: Any, leased: LeasedRun, owner: str) -> str | None:
        """The pending cancel's reason ("" when none was given) if the run is still this worker's
        step and a cancel is pending (why a completing commit matched no row — else the lease was
        lost); None otherwise."""
        cur = await conn.execute(
            "SELECT cancel_requested, cancel_reason FROM runs WHERE id = %s AND lease_owner = %s AND step_no = %s",
            (leased.run_id, owner, leased.step_no),
        )
        row = await cur.fetchone()
        if row is None or not row["cancel_requested"]:
            return None
        return str(row["cancel_reason"] or "")

    async def release_after_failure(self, leased: LeasedRun, owner: str, backoff_s: float) -> bool:
        """A step crashed with an unexpected error: give the lease back so the step is retried
        after `backoff_s` (by the sweeper, or a delayed job). Returns False if the lease was lost."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """WITH g AS (
                       UPDATE runs SET lease_owner = NULL, step_failures = step_failures + 1,
                              lease_until = now() + make_interval(secs => %(b)s), updated_at = now()
                       WHERE id = %(run_id)s AND lease_owner = %(owner)s AND step_no = %(step)s
                       RETURNING tenant_id, step_no, created_at)
                   INSERT INTO jobs (tenant_id, run_id, step_no, run_at, run_created)
                   SELECT tenant_id, %(run_id)s, step_no, now() + make_interval(secs => %(b)s), created_at FROM g
                   WHERE %(jobs)s
                   RETURNING 1""",
                {
                    "b": backoff_s,
                    "run_id": leased.run_id,
                    "owner": owner,
                    "step": leased.step_no,
                    "jobs": self.jobs_in_db,
                },
            )
            return cur.rowcount == 1 or not self.jobs_in_db

    # -- the sweeper ---------------------------------------------------------------------------

    async def end_stalled_sessions(self) -> list[StalledSession]:
        """End the sessions whose client froze inside a pipelined transaction for longer than a
        lease while others wait on their locks (store/stalled.py)."""
        return await end_stalled_sessions(self.pool, self.lease_s)

    async def sweep_expired(self, limit: int = 500) -> list[tuple[str, int]]:
        """Re-enqueue steps whose lease (or re-queue deadline) has passed: the worker died, or the
        step message was lost. Runs as a singleton per database (transaction advisory lock)."""
        sql = """
        WITH lock AS (SELECT pg_try_advisory_xact_lock(7472616401) AS ok),
        due AS (
            SELECT id FROM runs, lock
            WHERE lock.ok AND status IN ('queued','running') AND lease_until < now()
            ORDER BY lease_until LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        ), upd AS (
            UPDATE runs SET lease_owner = NULL,
                   lease_until = now() + make_interval(secs => %(requeue)s), updated_at = now()
            FROM due WHERE runs.id = due.id
            RETURNING runs.id, runs.tenant_id, runs.step_no, runs.created_at
        ), jb AS (
            INSERT INTO jobs (tenant_id, run_id, step_no, run_created)
            SELECT tenant_id, id, step_no, created_at FROM upd
            WHERE %(jobs)s
        )
        SELECT id, step_no FROM upd
        """
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                sql, {"limit": limit, "requeue": self.requeue_after_s, "jobs": self.jobs_in_db}
            )
            rows = await cur.fetchall()
            if rows and self.jobs_in_db:
                await conn.execute(f"SELECT pg_notify('{JOBS_CHANNEL}', '')")
        return [(r["id"], r["step_no"]) for r in rows]


def _inputs_seen(leased: LeasedRun, events: list[NewEvent]) -> int:
    """The newest steering input this step knew of: queued when it was leased, or taken into the
    transcript (by this commit's events or earlier ones)."""
    ids = [p.get("input_id") for _s, _t, p in leased.events] + [e.payload.get("input_id") for e in events]
    return max([leased.input_seq, *(i for i in ids if isinstance(i, int))])


@lru_cache(maxsize=256)
def _commit_sql(fenced: bool, fold: str | None, *, final: bool, parked: bool, enqueue: bool,
                keeps_status: bool = False, chain: bool = False, yields: bool = True,
                sets_stop: bool = False, sets_error: bool = False, usage: bool = False,
                pokes_parent: bool = False) -> str:
    """The commit statement's text for each shape (fenced: it ends a pipelined step transaction;
    `fold`: the folded write it carries; `final`: the run ends; `parked`: it waits; `enqueue`: it
    enqueues its next step; `keeps_status`: the run's status stays as it is; `chain`: the lease
    goes to the chain's next step; `yields`: it yields to a pending cancel; `sets_stop`,
    `sets_error`: it records a stop reason, an error; `usage`: its events hold model calls to roll up,
    store/usage.py `ROLLUP_CTE`; `pokes_parent`: a sub-agent ends — it records the poke of its
    parent's wait key, store/waits.py's durable poke), made once and compacted
    (store/sqltext.py): psycopg re-parses a statement longer than 4,096 characters on every
    execute. A shape holds only the writes it makes: every table a statement names is locked,
    and every index of a table it writes opened, on each execution, even when a condition on a
    parameter skips the write. Its SET list names only the columns it changes, each with what the
    shape knows written in, not passed: a prepared statement's generic plan keeps a `CASE WHEN
    $1 ...` and evaluates it on every run, and each column in the list costs an expression."""
    fence = ", fence AS (SELECT 1 / count(*) AS fenced FROM g)" if fenced else ""
    source = ", fence.fenced FROM fence LEFT JOIN g ON true" if fenced else "FROM g"
    # a folded write (store/folding.py) is a CTE of this statement, its result filled into the
    # tool_result it answers; the fence fails the whole statement, the write with it. The run
    # row's update waits for the write (`after_tool`: an InitPlan evaluated before the row is
    # locked), so a cancel never queues behind a slow write for the run's lock
    tool = f"tool AS ({fold}), " if fold is not None else ""
    after_tool = " AND (SELECT count(*) FROM tool) >= 0" if fold is not None else ""
    payload = (f"CASE WHEN t.type = '{EventType.TOOL_RESULT}' AND t.tool_use_id = %(fold_id)s THEN t.payload"
               " || jsonb_build_object('text', coalesce((SELECT text FROM tool), %(fold_failed)s),"
               " 'is_error', (SELECT text FROM tool) IS NULL) ELSE t.payload END"
               if fold is not None else "t.payload")
    fold_text = ", (SELECT text FROM tool) AS fold_text" if fold is not None else ""
    jobs = (", jb AS (INSERT INTO jobs (tenant_id, run_id, step_no, run_at, yielded_by, known_seq, run_created)"
            " SELECT g.tenant_id, %(run_id)s, g.step_no, now() + make_interval(secs => %(delay)s),"
            " %(yielder)s, g.base + %(n)s, g.created_at FROM g)"
            if enqueue else "")
    notify = f", pg_notify('{JOBS_CHANNEL}', '') AS _n" if enqueue else ""
    waits = (", wt AS (INSERT INTO run_waits (run_id, tenant_id, tool_use_id, kind, key, deadline)"
             " SELECT %(run_id)s, g.tenant_id, w.tool_use_id, w.kind, w.key,"
             " CASE WHEN w.deadline IS NULL THEN NULL ELSE to_timestamp(w.deadline) END"
             " FROM g, jsonb_to_recordset(%(waits)s::jsonb)"
             " AS w(tool_use_id text, kind text, key text, deadline float8)"
             " ON CONFLICT DO NOTHING)" if parked else "")
    # the run ended: its waits go, a question nobody can answer any more leaves the inbox, and
    # its file-effect journal goes (it never runs a step again; volumes/service.py `run_ended`
    # then runs only when volume instances are rooted at the run, to purge them)
    ended = (", clean AS (DELETE FROM run_waits WHERE run_id = %(run_id)s AND EXISTS (SELECT 1 FROM g))"
             ", asked AS (UPDATE interrupts SET status = 'cancelled', resolved_at = now(),"
             " resolved_by = 'agent_cancel' WHERE run_id = %(run_id)s AND status = 'pending'"
             " AND EXISTS (SELECT 1 FROM g))"
             ", forget AS (DELETE FROM volume_effects WHERE run_id = %(run_id)s AND EXISTS (SELECT 1 FROM g))"
             if final else "")
    # a sub-agent's end is a fact its parent may wait for: the poke of the parent's wait key is
    # recorded with it (the engine pokes after this commit and that deletes the record; a crash in
    # between leaves it to `WaitStore.poke_due`). Without it a parallel_spawn `wait: any` whose
    # threshold this child met, its siblings still running, would stay parked until they end
    ended += (", pw AS (INSERT INTO wait_timers (tenant_id, key, due_at) SELECT g.tenant_id, %(parent_key)s, now()"
              " FROM g ON CONFLICT DO NOTHING)" if final and pokes_parent else "")
    rooted = (", EXISTS (SELECT 1 FROM volume_instances WHERE root_run_id = %(run_id)s) AS rooted_volumes,"
              " g.iterations, g.tokens_in, g.tokens_out" if final else "")
    rollup = ROLLUP_CTE if usage else ""
    owner = "lease_owner = %(chain_owner)s," if chain else "lease_owner = NULL,"
    if final or parked:  # a parked run waits for a wake-up, not a deadline
        lease = owner + " lease_until = NULL,"
    elif chain:
        lease = owner + f" lease_until = {StepStore._KEEP_LEASE},"
    else:  # back to the queue: the deadline after which the sweeper enqueues it again
        lease = owner + " lease_until = now() + make_interval(secs => %(requeue)s + %(delay)s),"
    status = "" if keeps_status else "status = %(status)s,"
    stop = "stop_reason = %(stop)s," if sets_stop else ""
    error = "error = %(error)s," if sets_error else ""
    completed = "completed_at = now()," if final else ""
    # a step that would go on or complete yields to a pending cancel: it rolls back (with the
    # effects of its transactional tools) and the run ends cancelled instead
    yield_ = " AND NOT cancel_requested" if yields else ""
    return compact(f"""
    WITH {tool}g AS (
        UPDATE runs SET
            last_seq = last_seq + %(n)s, step_no = step_no + 1, step_failures = 0,
            {lease}{status}{stop}{error}{completed}
            iterations = iterations + %(iters)s,
            input_tokens = input_tokens + %(in_t)s, output_tokens = output_tokens + %(out_t)s,
            cache_creation_tokens = cache_creation_tokens + %(cc_t)s,
            cache_read_tokens = cache_read_tokens + %(cr_t)s,
            updated_at = now()
        WHERE id = %(run_id)s AND lease_owner = %(owner)s AND step_no = %(step)s{yield_}{after_tool}
        RETURNING tenant_id, last_seq - %(n)s AS base, step_no, cancel_requested, cancel_reason, input_seq,
                  created_at, iterations, input_tokens + cache_creation_tokens + cache_read_tokens AS tokens_in,
                  output_tokens AS tokens_out
    ), ev AS (
        INSERT INTO events (run_id, seq, tenant_id, type, payload, tool_use_id)
        SELECT %(run_id)s, g.base + t.ord, g.tenant_id, t.type, {payload}, t.tool_use_id
        FROM g, ROWS FROM (jsonb_to_recordset(%(events)s::jsonb) AS (type text, payload jsonb, tool_use_id text))
             WITH ORDINALITY AS t(type, payload, tool_use_id, ord)
    ){rollup}{jobs}{waits}{ended}{fence}
    SELECT g.step_no, g.cancel_requested, g.cancel_reason, g.base, g.input_seq{notify}{rooted}{fold_text} {source}
    """)
