"""Firing schedules: the sidecar sweeper's tick, one EventBridge invocation, run-now.

Exactly-once: a fire is claimed by inserting its (schedule_id, scheduled_for) row — a conflict
means someone else fired it. Its run is started after the claim commits, with the idempotency key
`schedule:<schedule_id>:<scheduled_for>`, so a claimant that died in between is completed by
`recover` (or by a redelivery) without ever creating a second run. max_fires is counted under
the schedule row's lock, so racing claimants never over-fire either.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from opentelemetry.trace import Span
from pydantic import ValidationError

from treadle.errors import TreadleError
from treadle.ports import AgentDirectory, RunStarter
from treadle.specs.cron import fire_late_ok, plan
from treadle.specs.schedule import ScheduleSpec
from treadle.store.db import Pool
from treadle.store.defs import DefStore
from treadle.store.runs import NewRun
from treadle.store.schedules import DueSchedule, FireRow, ScheduleState, ScheduleStore
from treadle.telemetry import tracing
from treadle.telemetry.metrics import metrics
from treadle.triggers.fanout import fanout_runs, is_fanout
from treadle.triggers.settings import TriggerSettings

log = logging.getLogger("treadle.schedules")

#: a claimed fire without a run after this long is started by `recover`
RECOVER_AFTER_S = 30.0
#: a schedule whose def no longer validates is retried this much later
BROKEN_RETRY = timedelta(hours=1)


#: (schedule, its spec or None if broken, times to fire, skipped count, next fire time, retire reason)
Planned = tuple[DueSchedule, ScheduleSpec | None, list[datetime], int, datetime | None, str | None]


def _fire_row(st: ScheduleState, t: datetime) -> FireRow:
    return FireRow(st.schedule_id, t, st.tenant_id, st.def_id, st.version, "sweeper")


def _valid(fire: FireRow, name: str, body: dict[str, Any] | None) -> Claimed | None:
    try:
        return Claimed(fire, name, ScheduleSpec.model_validate(body or {}))
    except ValidationError:
        return None


def run_key(schedule_id: str, scheduled_for: datetime) -> str:
    return f"schedule:{schedule_id}:{scheduled_for.astimezone(UTC).isoformat()}"


def new_run(fire: FireRow, name: str, spec: ScheduleSpec) -> NewRun:
    """The fired run: the def's agent, prompt and user; it carries the schedule id and fire time."""
    at = fire.scheduled_for.astimezone(UTC).isoformat()
    metadata = {
        **spec.metadata,
        "schedule_id": fire.schedule_id,
        "schedule_name": name,
        "schedule_def_id": fire.def_id,
        "schedule_version": fire.version,
        "scheduled_for": at,
        "trigger": f"schedule:{fire.source}",
    }
    return NewRun(
        tenant_id=fire.tenant_id,
        agent=spec.agent,
        segments=spec.segments(),
        user_id=spec.user_id,
        metadata=metadata,
        idempotency_key=run_key(fire.schedule_id, fire.scheduled_for),
    )


@dataclass(slots=True)
class Claimed:
    fire: FireRow
    name: str
    spec: ScheduleSpec


@dataclass(slots=True)
class TickResult:
    fired: int = 0
    skipped: int = 0
    failed: int = 0
    retired: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)


class ScheduleSync(Protocol):
    """Keeps the external scheduler in step with a schedule's state (ScheduleService.sync)."""

    async def sync(self, state: ScheduleState) -> ScheduleState: ...


class Firing:
    def __init__(
        self, pool: Pool, store: ScheduleStore, settings: TriggerSettings, starter: RunStarter, defs: DefStore,
        sync: ScheduleSync,
    ) -> None:
        self.pool = pool
        self.store = store
        self.settings = settings
        self.starter = starter
        self.defs = defs
        self.syncer = sync
        #: the directory a consolidation fan-out reads `internal:` agents from (triggers/fanout.py)
        self.agents: AgentDirectory | None = None

    # -- the sidecar's sweeper ---------------------------------------------------------------------

    async def tick(self, now: datetime | None = None) -> TickResult:
        """Fire everything due at `now`, batch by batch; then start fires a dead claimant left."""
        now = now or datetime.now(UTC)
        result = TickResult()
        while True:
            claimed, n_locked, skipped, retired = await self._claim_batch(now)
            result.skipped += skipped
            await self._start(claimed, result)
            await self._retire(retired, result)
            if n_locked < self.settings.scheduler_batch:
                break
        await self.recover(result=result)
        return result

    async def _claim_batch(
        self, now: datetime
    ) -> tuple[list[Claimed], int, int, list[tuple[str, str, str]]]:
        grace = self.settings.grace
        async with self.pool.connection() as conn, conn.transaction():
            due = await ScheduleStore.lock_due(conn, now, self.settings.scheduler_batch)
            planned: list[Planned] = []
            fires: list[FireRow] = []
            for d in due:
                st = d.state
                try:
                    spec = ScheduleSpec.model_validate(d.body)
                except ValidationError as exc:
                    log.error("schedule %s: its def does not validate (%s); retrying in 1 h", st.schedule_id, exc)
                    planned.append((d, None, [], 0, now + BROKEN_RETRY, None))
                    continue
                p = plan(spec.cron, st.next_fire_at or now, now, grace=grace, catch_up_max=spec.catch_up_max)
                times, retire = p.fire, None
                if spec.max_fires:
                    room = max(0, spec.max_fires - st.fire_count)
                    if len(times) >= room:
                        times, retire = times[:room], "max_fires"
                if not spec.enabled:
                    times, retire = [], None
                planned.append((d, spec, times, p.skipped, p.next_at if spec.enabled else None, retire))
                fires += [_fire_row(st, t) for t in times]
            inserted = await ScheduleStore.insert_fires(conn, fires)
            updates: list[tuple[str, datetime | None, int, int, datetime | None, str | None]] = []
            claimed: list[Claimed] = []
            retired: list[tuple[str, str, str]] = []
            for d, maybe_spec, times, skipped, nxt, retire in planned:
                st = d.state
                mine = [t for t in times if (st.schedule_id, t) in inserted]
                if maybe_spec is not None:
                    claimed += [Claimed(_fire_row(st, t), st.name, maybe_spec) for t in mine]
                updates.append((st.schedule_id, nxt, len(mine), skipped, max(mine) if mine else None, retire))
                if retire:
                    retired.append((st.tenant_id, st.schedule_id, st.def_id))
            await ScheduleStore.advance(conn, updates)
            disabled = [p[0].state.schedule_id for p in planned if p[1] is not None and not p[1].enabled]
            if disabled:
                await ScheduleStore.clear_next(conn, disabled)
        return claimed, len(due), sum(u[3] for u in updates), retired

    async def recover(self, *, older_than_s: float = RECOVER_AFTER_S, result: TickResult | None = None) -> int:
        """Start the runs of fires claimed long ago but never started (idempotent by run key)."""
        async with self.pool.connection() as conn:
            rows = await ScheduleStore.lock_unstarted(conn, older_than_s, 500)
        claimed: list[Claimed] = []
        for r in rows:
            try:
                spec = ScheduleSpec.model_validate(r["body"])
            except ValidationError:
                continue
            fire = FireRow(r["schedule_id"], r["scheduled_for"], r["tenant_id"], r["def_id"], r["version"], r["source"])
            claimed.append(Claimed(fire, r["name"], spec))
        if claimed:
            log.info("starting %d claimed fire(s) whose claimant stopped before starting them", len(claimed))
            await self._start(claimed, result or TickResult())
        return len(claimed)

    # -- one EventBridge invocation ------------------------------------------------------------------

    async def fire_event(self, event: Any, now: datetime | None = None) -> dict[str, Any]:
        """`{"schedule_id", "version"?, "scheduled_time"}` → fire that time once. Never raises for a
        schedule that cannot fire (EventBridge would retry): answers `fired: false` with a reason."""
        if not isinstance(event, dict) or not isinstance(event.get("schedule_id"), str) or not event["schedule_id"]:
            raise ValueError(f"scheduler event without a schedule_id: {event!r}")
        schedule_id: str = event["schedule_id"]
        now = now or datetime.now(UTC)
        at = _parse_time(event.get("scheduled_time"), now)
        out: dict[str, Any] = {"schedule_id": schedule_id, "fired": False, "scheduled_for": at.isoformat()}
        async with self.pool.connection() as conn, conn.transaction():
            d = await ScheduleStore.lock_one(conn, schedule_id)
            if d is None:
                return {**out, "reason": "unknown_schedule"}
            st = d.state
            existing = await ScheduleStore.fire(conn, schedule_id, at)
            if existing:  # a redelivery (or the sweeper's twin): never a second run
                out.update(reason="duplicate", run_id=existing.get("run_id"))
                if existing.get("status") != "claimed":
                    return out
                body = await ScheduleStore.def_body(conn, existing["def_id"])
                fire = FireRow(schedule_id, at, st.tenant_id, existing["def_id"], existing["version"], "eventbridge")
                claimed, retire = _valid(fire, st.name, body), None
            else:
                decision = self._decide(d, at, now, event.get("version"))
                if isinstance(decision, str):
                    if decision == "missed":
                        skipped = FireRow(schedule_id, at, st.tenant_id, st.def_id, st.version, "eventbridge")
                        await ScheduleStore.insert_fires(conn, [skipped], status="skipped")
                        await ScheduleStore.advance(conn, [(schedule_id, None, 0, 1, None, None)])
                    return {**out, "reason": decision}
                claimed, retire = decision
                await ScheduleStore.insert_fires(conn, [claimed.fire])
                nxt = claimed.spec.cron.next_after(max(now, at))
                await ScheduleStore.advance(conn, [(schedule_id, nxt, 1, 0, at, retire)])
        result = TickResult()
        if claimed is not None:
            # a duplicate here is a claim whose first invocation died before starting its run
            await self._start([claimed], result)
        if retire:
            await self._retire([(st.tenant_id, schedule_id, st.def_id)], result)
        run_id = result.run_ids[0] if result.run_ids else out.get("run_id")
        if existing:
            return {**out, "run_id": run_id}
        return {**out, "fired": bool(run_id), "run_id": run_id, **({"retired": True} if retire else {}),
                **({} if run_id else {"reason": "start_failed"})}

    def _decide(
        self, d: DueSchedule, at: datetime, now: datetime, version: Any
    ) -> str | tuple[Claimed, str | None]:
        """Under the schedule's lock: a reason not to fire `at`, or the fire (and a retire reason)."""
        st = d.state
        if st.status != "active":
            return "retired"
        if st.paused:
            return "paused"
        try:
            spec = ScheduleSpec.model_validate(d.body)
        except ValidationError:
            return "invalid_def"
        if not spec.enabled:
            return "disabled"
        if isinstance(version, int) and version != st.version and not spec.cron.matches(at):
            return "stale_version"
        if not fire_late_ok(spec.cron, at, now, grace=self.settings.grace, catch_up_max=spec.catch_up_max):
            return "missed"
        if spec.max_fires and st.fire_count >= spec.max_fires:
            return "max_fires"
        retire = "max_fires" if spec.max_fires and st.fire_count + 1 >= spec.max_fires else None
        fire = FireRow(st.schedule_id, at, st.tenant_id, st.def_id, st.version, "eventbridge")
        return Claimed(fire, st.name, spec), retire

    # -- run-now ---------------------------------------------------------------------------------

    async def run_now(self, state: ScheduleState) -> dict[str, Any]:
        now = datetime.now(UTC)
        async with self.pool.connection() as conn, conn.transaction():
            d = await ScheduleStore.lock_one(conn, state.schedule_id)
            assert d is not None
            spec = ScheduleSpec.model_validate(d.body)
            st = d.state
            if spec.max_fires and st.fire_count >= spec.max_fires:
                from treadle.errors import Conflict

                raise Conflict(f"schedule {st.name!r} has fired max_fires={spec.max_fires} times", code="max_fires")
            fire = FireRow(st.schedule_id, now, st.tenant_id, st.def_id, st.version, "run_now")
            await ScheduleStore.insert_fires(conn, [fire])
            retire = "max_fires" if spec.max_fires and st.fire_count + 1 >= spec.max_fires else None
            await ScheduleStore.advance(conn, [(st.schedule_id, None, 1, 0, None, retire)])
        result = TickResult()
        await self._start([Claimed(fire, st.name, spec)], result)
        if retire:
            await self._retire([(st.tenant_id, st.schedule_id, st.def_id)], result)
        if not result.run_ids and result.skipped:  # a consolidation fan-out with no target (triggers/fanout.py)
            return {"schedule_id": st.schedule_id, "run_id": None, "run_ids": [], "scheduled_for": now.isoformat(),
                    "retired": bool(retire), "skipped": True}
        if not result.run_ids:
            from treadle.errors import StoreError

            raise StoreError(f"schedule {st.name!r} fired but its run could not start", code="start_failed")
        return {"schedule_id": st.schedule_id, "run_id": result.run_ids[0], "scheduled_for": now.isoformat(),
                "retired": bool(retire)}

    # -- shared ----------------------------------------------------------------------------------

    async def _start(self, claimed: list[Claimed], result: TickResult) -> None:
        if not claimed:
            return
        sem = asyncio.Semaphore(self.settings.scheduler_fire_concurrency)

        async def one(c: Claimed) -> tuple[str, datetime, str | None, str, str | None, bool]:
            async with sem:
                with fire_span(c.name, c.fire.schedule_id) as span:  # the run's trace starts here
                    try:
                        if is_fanout(c.spec) and self.agents is not None:
                            runs = await fanout_runs(self.pool, self.agents, c.spec, new_run(c.fire, c.name, c.spec))
                            started = [(await self.starter.start_run(r))[0] for r in runs]
                            if not started:  # no target has work: nothing to run
                                fired(span, "skipped")
                                return c.fire.schedule_id, c.fire.scheduled_for, None, "skipped", None, False
                            run = started[0]
                        else:
                            run, _ = await self.starter.start_run(new_run(c.fire, c.name, c.spec))
                    except TreadleError as exc:
                        log.warning("schedule %s fire %s: %s", c.fire.schedule_id, c.fire.scheduled_for, exc.message)
                        fired(span, "failed", exc.code)
                        return (c.fire.schedule_id, c.fire.scheduled_for, None, "failed",
                                f"{exc.code}: {exc.message}", False)
                    fired(span, "started")
                return c.fire.schedule_id, c.fire.scheduled_for, run.id, "started", None, bool(c.spec.on_complete)

        rows = await asyncio.gather(*(one(c) for c in claimed))
        await self.store.record_starts(list(rows))
        for r in rows:
            if r[3] == "skipped":
                result.skipped += 1
            elif r[2] is None:
                result.failed += 1
            else:
                result.fired += 1
                result.run_ids.append(r[2])

    async def _retire(self, retired: list[tuple[str, str, str]], result: TickResult) -> None:
        """Schedules that reached max_fires: their def version is retired too."""
        for tenant_id, schedule_id, def_id in retired:
            result.retired.append(schedule_id)
            try:
                await self.defs.retire(tenant_id, "schedule", def_id)
                state = await self.store.get(tenant_id, schedule_id=schedule_id)
                if state is not None:
                    await self.syncer.sync(state)
            except TreadleError as exc:
                log.warning("schedule %s reached max_fires; retiring its def failed: %s", schedule_id, exc.message)


def _parse_time(value: Any, default: datetime) -> datetime:
    """EventBridge's `<aws.scheduler.scheduled-time>` (ISO 8601, UTC); absent → now."""
    if value is None or value == "<aws.scheduler.scheduled-time>":
        return default.replace(microsecond=0)
    if not isinstance(value, str):
        raise ValueError(f"scheduled_time must be an ISO 8601 string, got {value!r}")
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC)


def fire_span(name: str, schedule_id: str) -> AbstractContextManager[Span]:
    """The span of one schedule fire (the run it starts is its child)."""
    return tracing.span(f"schedule fire {name}", {"treadle.schedule.name": name, "treadle.schedule.id": schedule_id})


def fired(span: Span, outcome: str, code: str | None = None) -> None:
    tracing.set_outcome(span, "error" if code else outcome)
    if code:
        span.set_attribute("treadle.error.code", code)
    metrics().schedule_fire(outcome)
