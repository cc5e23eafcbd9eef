"""loomcycle's memory-consolidation fan-out (`scheduled_runs.*.metadata.memory_consolidation_fanout:
true`, `memory_consolidation_scope: user`): a fire starts one run of the schedule's agent per memory
target with work — a user with a settled chat past its watermark or an undrained queued `add` —
each run under that user, instead of one run with no target. At most MAX_TARGETS per fire (loomcycle's
LOOMCYCLE_MAX_CONSOLIDATION_TARGETS default); the rest wait for the next fire (the watermark makes
that safe). Each target's run has the fire's idempotency key + `:<user>`, so a fire completed by
`recover` or redelivered starts no second run for a target."""

from __future__ import annotations

from dataclasses import replace

from treadle.ports import AgentDirectory
from treadle.specs.schedule import ScheduleSpec
from treadle.store.consolidation import ConsolidationStore
from treadle.store.db import Pool
from treadle.store.runs import NewRun

FANOUT = "memory_consolidation_fanout"
SCOPE = "memory_consolidation_scope"
MAX_TARGETS = 32


def is_fanout(spec: ScheduleSpec) -> bool:
    return spec.metadata.get(FANOUT) is True


async def fanout_runs(pool: Pool, agents: AgentDirectory, spec: ScheduleSpec, run: NewRun) -> list[NewRun]:
    """The fire's runs, one per target (none: no target has work)."""
    exclude = {spec.agent}
    for name in agents.static_names():  # the `internal:` agents' chats are bookkeeping, not work
        record = await agents.current(run.tenant_id, name)
        if record is not None and record.body.get("internal") is True:
            exclude.add(name)
    users = await ConsolidationStore(pool).targets(run.tenant_id, sorted(exclude), MAX_TARGETS)
    return [replace(run, user_id=user, idempotency_key=f"{run.idempotency_key}:{user}",
                    metadata={**(run.metadata or {}), "memory_consolidation_target": user}) for user in users]
