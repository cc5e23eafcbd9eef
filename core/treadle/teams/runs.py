"""Team runs: an ordinary run of the agent `team:<name>` whose model is the walk.

- `start` records the run with the team version pinned (`runs.def_id` = the TeamDef's def_id,
  `def_content_sha256` = its hash): a team forked or promoted later never changes a running walk.
  `pin` is what `Runtime.start_run` calls for a `team:` agent instead of the AgentDef pinning.
- `resolve` is the engine's agent for such a run: tools Agent (each state's agents are child
  runs: the tree of the team run) and Interruption (a cap with `interrupt_on_cap`), the walk
  provider (teams/provider.py) as its only model, the pinned team in its system prompt.
- `result` waits (holding no worker: it reads the run row between notifications) until the run
  ended and answers the walk's result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from treadle.config import AgentConfig
from treadle.domain.defs import DefRecord
from treadle.domain.events import EventType
from treadle.engine.agents import ResolvedAgent
from treadle.engine.model_routes import Candidate, ModelRoute
from treadle.errors import NotFound, UnknownAgent
from treadle.ports import RunStarter
from treadle.store.defs import DefStore
from treadle.store.runs import NewRun, RunStore
from treadle.store.steps import LeasedRun
from treadle.teams.defs import KIND
from treadle.teams.graph import parse
from treadle.teams.provider import MODEL, PROVIDER, TeamSpec, TeamWalkProvider
from treadle.teams.walk import Walked, walk
from treadle.tools.registry import ToolRegistry

#: a team run's agent name: `team:<team name>`
TEAM_PREFIX = "team:"
#: the run's metadata key holding `interrupt_on_cap`
OPTION = "team_interrupt_on_cap"
TOOLS = ("Agent", "Interruption")
#: turns a walk may take (each state visit is one to two); the per-state caps bound it first
MAX_TURNS = 1 << 20


def is_team_agent(agent: str) -> bool:
    return agent.startswith(TEAM_PREFIX)


def prompt(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "trusted-text", "text": text or "(no input)"}]}]


class TeamRuns:
    def __init__(self, defs: DefStore, runs: RunStore, registry: ToolRegistry, starter: RunStarter,
                 wait: Callable[[str, float], Awaitable[bool]]) -> None:
        self.defs = defs
        self.runs = runs
        self.registry = registry
        self.starter = starter
        self._wait = wait
        self.provider = TeamWalkProvider()
        #: the version a new run of a team name walks (TeamDefFamily.current_record: the active
        #: version, else treadle.yaml's); set by the runtime
        self.current: Callable[[str, str], Awaitable[DefRecord | None]] | None = None

    def new_run(self, tenant: str, record: DefRecord, task: str, *, interrupt_on_cap: bool,
                **fields: Any) -> NewRun:
        return NewRun(tenant_id=tenant, agent=TEAM_PREFIX + record.name, segments=prompt(task), def_id=record.def_id,
                      metadata={OPTION: interrupt_on_cap}, **fields)

    async def start(self, tenant: str, record: DefRecord, task: str, *, interrupt_on_cap: bool) -> str:
        run, _ = await self.starter.start_run(self.new_run(tenant, record, task, interrupt_on_cap=interrupt_on_cap))
        return run.id

    async def pin(self, new: NewRun) -> None:
        """The team version a new team run runs: its preset def_id (not retired), else the name's
        active version."""
        name = new.agent.removeprefix(TEAM_PREFIX)
        if new.def_id is not None:
            record = await self.defs.get(new.tenant_id, KIND, def_id=new.def_id)
            if record is None or record.name != name or record.status != "active":
                raise UnknownAgent(f"TeamDef {new.def_id!r} of team {name!r} not found (or retired)")
        else:
            found = (await self.current(new.tenant_id, name) if self.current is not None
                     else await self.defs.get(new.tenant_id, KIND, name=name))
            if found is None:
                raise UnknownAgent(f"unknown team {name!r} (no promoted TeamDef of that name)")
            record = found
        new.def_id, new.def_content_sha256 = record.def_id, record.content_sha256

    async def resolve(self, leased: LeasedRun) -> ResolvedAgent | None:
        if leased.def_id is None:
            return None
        record = await self.defs.get(leased.tenant_id, KIND, def_id=leased.def_id)
        if record is None:
            return None
        spec = TeamSpec(record.name, record.def_id, record.body,
                        bool((leased.metadata or {}).get(OPTION)))
        cfg = AgentConfig(provider=PROVIDER, model=MODEL, system_prompt=spec.to_prompt(), tools=list(TOOLS),
                          max_iterations=MAX_TURNS, max_concurrent_children=32,
                          description=f"team {record.name} (version {record.version})")
        tools = [t for t in (self.registry.get(n) for n in TOOLS) if t is not None]
        route = ModelRoute((Candidate(PROVIDER, self.provider, MODEL),))
        return ResolvedAgent(leased.agent, cfg, self.provider, tools, route=route)

    async def result(self, tenant: str, run_id: str, timeout_s: float) -> dict[str, Any]:
        """The walk's answer once the run ended (`status: running` with the run id at the timeout)."""
        deadline = time.monotonic() + timeout_s
        run = await self.runs.get(tenant, run_id)
        while run is not None and not run.terminal and time.monotonic() < deadline:
            await self._wait(run_id, min(1.0, max(0.01, deadline - time.monotonic())))
            run = await self.runs.get(tenant, run_id)
        if run is None:
            raise NotFound(f"team run {run_id!r} not found")
        return await self.answer(run.tenant_id, run.id, run.status, run.error)

    async def progress(self, tenant: str, run_id: str) -> tuple[DefRecord, Walked, str] | None:
        """(the version a team run walks, where its walk is, the run's status) — the walk replayed
        from the run's transcript; None when `run_id` is no team run of the tenant."""
        run = await self.runs.get(tenant, run_id)
        if run is None or not is_team_agent(run.agent) or run.def_id is None:
            return None
        record = await self.defs.get(tenant, KIND, def_id=run.def_id)
        if record is None:
            return None
        events = await self.runs.events(tenant, run_id, 0, 100_000)
        task = next((_segments_text(e.payload.get("segments")) for e in events if e.type == EventType.USER_INPUT), "")
        results = [(bool(e.payload.get("is_error")), str(e.payload.get("text", ""))) for e in events
                   if e.type == EventType.TOOL_RESULT]
        walked = walk(record.name, record.def_id, parse(record.body), task, results,
                      interrupt_on_cap=bool((run.metadata or {}).get(OPTION)))
        return record, walked, run.status

    async def answer(self, tenant: str, run_id: str, status: str, error: dict[str, Any] | None) -> dict[str, Any]:
        """A team run's result: the walk's final JSON, or what became of the run."""
        if status == "completed":
            texts = [str(e.payload.get("text", "")) for e in await self.runs.events(tenant, run_id, 0, 100_000)
                     if e.type == EventType.TEXT]
            try:
                out: dict[str, Any] = json.loads(texts[-1]) if texts else {}
            except ValueError:
                out = {}
            if isinstance(out, dict) and "status" in out:
                return {**out, "run_id": run_id}
        if status in ("completed", "failed", "cancelled"):
            return {"run_id": run_id, "status": "failed" if status == "completed" else status,
                    "error": (error or {}).get("error") or f"the team run ended {status}", "steps": []}
        return {"run_id": run_id, "status": "running", "steps": []}


def _segments_text(segments: Any) -> str:
    """The text of a user turn's segments (what the walk reads as its task)."""
    out = []
    for seg in segments or []:
        for part in (seg.get("content") or []) if isinstance(seg, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return "".join(out)
