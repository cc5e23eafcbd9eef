"""ScheduleDef: the def kind (the def lifecycle's ops, plus add_hook and remove_hook),
the schedule state behind it, the admin operations (state, pause, resume, run-now) and keeping an
external scheduler (EventBridge) in step.

A schedule is identified by `schedule_id` (`sch_…`, stable across versions of its name); admin
routes also accept a def_id or the name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from treadle.defs.args import parse_spec, require_agent
from treadle.defs.gates import Gate, require_scopes
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain.defs import DefRecord, content_sha256
from treadle.errors import Conflict, DefRefused, UnknownSchedule
from treadle.ports import AgentDirectory, RunStarter
from treadle.specs.schedule import Hook, ScheduleSpec, validation_message
from treadle.store.db import Pool, after_commit, in_step_transaction
from treadle.store.defs import DefStore
from treadle.store.schedules import ScheduleState, ScheduleStore
from treadle.triggers.firing import Firing
from treadle.triggers.scheduler import Scheduler, ScheduleTarget
from treadle.triggers.settings import TriggerSettings

log = logging.getLogger("treadle.schedules")
_HOOK = TypeAdapter(Hook)


class ScheduleFamily(DefLifecycle):
    """Hooks: normalize (ScheduleSpec, the agent exists, the external scheduler accepts the cron),
    content_hash, gate_subject (the agent a schedule starts), on_activate/on_retire (the schedule
    state and the external scheduler follow the active version), view (+ the schedule state), and
    the extra ops add_hook/remove_hook (a fork that changes `on_complete`)."""

    kind = "schedule"
    label = "ScheduleDef"
    create_promotes = True
    fork_promotes = True
    extra_ops = ("add_hook", "remove_hook")

    def __init__(self, defs: DefStore, agents: AgentDirectory, service: ScheduleService) -> None:
        super().__init__(defs)
        self.agents = agents
        self.service = service

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        spec = parse_spec(self.label, ScheduleSpec, body)
        await require_agent(self.agents, tenant, spec.agent, self.label)
        scheduler = self.service.scheduler
        if scheduler is not None:
            try:
                scheduler.validate(spec.schedule, spec.timezone)
            except ValueError as exc:
                raise DefRefused(f"invalid ScheduleDef: schedule: {exc}") from None
        return spec.body()

    def content_hash(self, body: dict[str, Any]) -> str:
        return content_sha256(body)

    def gate_subject(self, name: str, body: Mapping[str, Any] | None) -> str | None:
        agent = body.get("agent") if body is not None else None
        return agent if isinstance(agent, str) else None

    async def on_activate(self, tenant: str, record: DefRecord) -> None:
        await self.service.activate(tenant, record)

    async def on_retire(self, tenant: str, record: DefRecord) -> None:
        await self.service.deactivate(tenant, record, "retired")

    async def view(self, tenant: str, record: DefRecord) -> dict[str, Any]:
        out = self.record_view(record)
        state = await self.service.store.get(tenant, name=record.name)
        if state is not None:
            out["schedule"] = state.to_api()
            out["schedule_id"] = state.schedule_id
        return out

    async def op_add_hook(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        if gate is not None:
            require_scopes(gate, self.what("add_hook"))
        try:
            hook = _HOOK.validate_python(args.get("hook")).model_dump(mode="json", exclude_none=True)
        except ValidationError as exc:
            raise DefRefused(f"ScheduleDef.add_hook: hook: {validation_message(exc)}") from None
        return await self._fork_hooks(tenant, args, gate, run_id, lambda hooks: [*hooks, hook])

    async def op_remove_hook(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        if gate is not None:
            require_scopes(gate, self.what("remove_hook"))
        index = args.get("hook_index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise DefRefused("ScheduleDef.remove_hook: hook_index (a non-negative integer) is required")

        def remove(hooks: list[Any]) -> list[Any]:
            if index >= len(hooks):
                raise DefRefused(f"ScheduleDef.remove_hook: hook_index {index} out of range ({len(hooks)} hook(s))")
            return [h for i, h in enumerate(hooks) if i != index]

        return await self._fork_hooks(tenant, args, gate, run_id, remove)

    async def _fork_hooks(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None,
        change: Callable[[list[Any]], list[Any]],
    ) -> dict[str, Any]:
        """A fork of the resolved version with `on_complete` changed (promote, description: as given)."""
        parent = await self.resolve(tenant, args, static_ok=False)
        fork_args: dict[str, Any] = {"op": "fork", "def_id": parent.def_id,
                                     "overlay": {"on_complete": change(list(parent.body.get("on_complete") or []))}}
        for key in ("promote", "description"):
            if key in args:
                fork_args[key] = args[key]
        return await self.op_fork(tenant, fork_args, gate, run_id)


class ScheduleService:
    def __init__(
        self, pool: Pool, starter: RunStarter, agents: AgentDirectory, *, scheduler: Scheduler | None = None,
        settings: TriggerSettings | None = None,
    ) -> None:
        self.pool = pool
        self.starter = starter
        #: the external scheduler kept in step with ScheduleDefs (EventBridge in the cloud shape)
        self.scheduler = scheduler
        self.settings = settings or TriggerSettings()
        self.store = ScheduleStore(pool)
        self.family = ScheduleFamily(DefStore(pool), agents, self)
        self.firing = Firing(pool, self.store, self.settings, starter, self.family.defs, self)
        self.firing.agents = agents

    # -- lifecycle ---------------------------------------------------------------------------------

    async def activate(self, tenant_id: str, record: DefRecord) -> ScheduleState:
        spec = ScheduleSpec.model_validate(record.body)
        nxt = spec.cron.next_after(datetime.now(UTC)) if spec.enabled else None
        state = await self.store.activate(tenant_id, record.name, record.def_id, record.version, nxt)
        return await self.sync(state, spec)

    async def deactivate(self, tenant_id: str, record: DefRecord, reason: str) -> ScheduleState | None:
        state = await self.store.get(tenant_id, name=record.name)
        if state is None or state.def_id != record.def_id:
            return state
        retired = await self.store.retire(tenant_id, state.schedule_id, reason)
        return await self.sync(retired) if retired is not None else None

    # -- admin -------------------------------------------------------------------------------------

    async def resolve(self, tenant_id: str, ident: str) -> ScheduleState:
        """A schedule by `sch_…` id, by a def_id of any of its versions, or by name."""
        state: ScheduleState | None = None
        if ident.startswith("sch_"):
            state = await self.store.get(tenant_id, schedule_id=ident)
        elif ident.startswith("def_"):
            record = await self.family.defs.get(tenant_id, "schedule", def_id=ident)
            if record is not None:
                state = await self.store.get(tenant_id, name=record.name)
        else:
            state = await self.store.get(tenant_id, name=ident)
        if state is None:
            raise UnknownSchedule(f"unknown schedule {ident!r}")
        return state

    async def state_view(self, tenant_id: str, ident: str) -> dict[str, Any]:
        state = await self.resolve(tenant_id, ident)
        out = state.to_api()
        body = await self.store.body_of(state.def_id) or {}
        out["schedule"] = body.get("schedule")
        out["timezone"] = body.get("timezone")
        out["enabled"] = body.get("enabled", True)
        out["max_fires"] = body.get("max_fires", 0)
        out["catch_up_max"] = body.get("catch_up_max")
        out["recent_fires"] = await self.store.recent_fires(tenant_id, state.schedule_id)
        return out

    async def pause(self, tenant_id: str, ident: str) -> dict[str, Any]:
        state = await self.resolve(tenant_id, ident)
        updated = await self.store.set_paused(tenant_id, state.schedule_id, True, None)
        assert updated is not None
        return (await self.sync(updated)).to_api()

    async def resume(self, tenant_id: str, ident: str) -> dict[str, Any]:
        """Resume from now: fires missed while paused are not caught up."""
        state = await self.resolve(tenant_id, ident)
        spec = ScheduleSpec.model_validate(await self.store.body_of(state.def_id) or {})
        nxt = spec.cron.next_after(datetime.now(UTC)) if spec.enabled else None
        updated = await self.store.set_paused(tenant_id, state.schedule_id, False, nxt)
        assert updated is not None
        return (await self.sync(updated, spec)).to_api()

    async def run_now(self, tenant_id: str, ident: str) -> dict[str, Any]:
        state = await self.resolve(tenant_id, ident)
        if state.status != "active":
            raise Conflict(f"schedule {state.name!r} is retired", code="schedule_retired")
        return await self.firing.run_now(state)

    # -- external scheduler ------------------------------------------------------------------------

    async def target(self, state: ScheduleState, spec: ScheduleSpec | None = None) -> ScheduleTarget | None:
        """How the external scheduler should hold `state` (None: not at all)."""
        if state.status != "active":
            return None
        if spec is None:
            spec = ScheduleSpec.model_validate(await self.store.body_of(state.def_id) or {})
        return ScheduleTarget(
            state.schedule_id, state.tenant_id, state.name, state.version, spec.schedule, spec.timezone,
            spec.enabled and not state.paused,
        )

    async def sync(self, state: ScheduleState, spec: ScheduleSpec | None = None) -> ScheduleState:
        """Bring the external scheduler in line with `state`; a failure is recorded (`sync_error`)
        and retried by `reconcile`, never raised (the state in the database is the truth). Inside
        a step transaction (a ScheduleDef tool call) it waits for the commit: the external
        scheduler never holds a schedule the database rolled back."""
        scheduler = self.scheduler
        if scheduler is None:
            return state
        if in_step_transaction():

            async def later() -> None:
                await self.sync(state, spec)

            await after_commit(later)
            return state
        try:
            target = await self.target(state, spec)
        except ValidationError as exc:
            target, state.sync_error = None, validation_message(exc)
        desired = target.synced_state if target is not None else None
        if desired == state.synced_state and not state.sync_error:
            return state
        try:
            if target is None:
                await scheduler.delete(state.schedule_id)
            else:
                await scheduler.upsert(target)
        except Exception as exc:
            log.warning("schedule %s: %s sync failed: %s", state.schedule_id, scheduler.name, exc)
            await self.store.mark_synced(state.schedule_id, None, f"{type(exc).__name__}: {exc}"[:1000])
            state.sync_error = f"{type(exc).__name__}: {exc}"[:1000]
            return state
        await self.store.mark_synced(state.schedule_id, desired, None)
        state.synced_state, state.sync_error = desired, None
        return state

    async def reconcile(self) -> int:
        """Sync every schedule whose external state differs; returns how many were synced."""
        if self.scheduler is None:
            return 0
        n = 0
        for state in await self.store.all_states():
            target = await self.target(state) if state.status == "active" else None
            desired = target.synced_state if target is not None else None
            if desired != state.synced_state or state.sync_error:
                await self.sync(state)
                n += 1
        return n

