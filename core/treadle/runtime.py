"""The runtime both shapes share: database, stores, agents, engine — minus how steps travel.

A shape composes it with a dispatcher (Postgres queue in the sidecar, SQS in the cloud, inline
in tests) and whatever serves the API.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from treadle.config import Settings, TreadleConfig
from treadle.dispatch.base import Dispatcher
from treadle.domain.runs import StepMessage
from treadle.engine.agents import ResolvedAgent, resolve_agents
from treadle.engine.hub import RunEventHub
from treadle.engine.step import Engine, EngineSettings
from treadle.errors import UnknownAgent
from treadle.providers.base import Provider
from treadle.providers.mock import MockProvider
from treadle.store.db import Pool, open_pool, resolve_database_url
from treadle.store.memory import MemoryStore
from treadle.store.migrate import migrate
from treadle.store.runs import NewRun, RunRecord, RunStore
from treadle.store.steps import StepStore
from treadle.tools.registry import ToolRegistry, default_registry

log = logging.getLogger("treadle")


def default_providers() -> dict[str, Provider]:
    return {"mock": MockProvider()}


@dataclass
class Runtime:
    settings: Settings
    config: TreadleConfig
    database_url: str
    pool: Pool
    dispatcher: Dispatcher
    runs: RunStore
    steps: StepStore
    memory: MemoryStore
    agents: dict[str, ResolvedAgent]
    engine: Engine
    hub: RunEventHub
    registry: ToolRegistry
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    async def open(
        cls,
        settings: Settings,
        config: TreadleConfig,
        *,
        dispatcher_factory: Any = None,
        registry: ToolRegistry | None = None,
        providers: dict[str, Provider] | None = None,
        config_source: str = "treadle.yaml",
    ) -> Runtime:
        """Resolve agents (config errors first), connect, migrate, and wire the engine.

        `dispatcher_factory(pool, url) -> Dispatcher`; default is the Postgres queue."""
        registry = registry or default_registry()
        agents = resolve_agents(config, registry, providers or default_providers(), source=config_source)
        url = resolve_database_url(settings.database_url, settings.home)
        await migrate(url)
        size = settings.db_pool_size or settings.workers + 4
        pool = await open_pool(url, size)
        if dispatcher_factory is None:
            from treadle.dispatch.postgres import PostgresQueue

            dispatcher: Dispatcher = PostgresQueue(pool, url)
        else:
            dispatcher = dispatcher_factory(pool, url)
        jobs_in_db = dispatcher.jobs_in_db
        runs = RunStore(pool, jobs_in_db=jobs_in_db, requeue_after_s=settings.requeue_after_seconds)
        steps = StepStore(
            pool, jobs_in_db=jobs_in_db, lease_s=settings.lease_seconds,
            requeue_after_s=settings.requeue_after_seconds,
        )
        memory = MemoryStore(pool)
        hub = RunEventHub()
        engine = Engine(
            steps=steps,
            memory=memory,
            agents=agents,
            enqueue=dispatcher.enqueue,
            hub=hub,
            settings=EngineSettings(
                tool_parallelism=settings.tool_parallelism, provider_retries=settings.provider_retries
            ),
        )
        return cls(settings, config, url, pool, dispatcher, runs, steps, memory, agents, engine, hub, registry)

    async def close(self) -> None:
        await self.pool.close()

    async def start_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        if new.agent not in self.agents:
            raise UnknownAgent(f"unknown agent {new.agent!r}")
        run, created = await self.runs.create(new)
        if created and not self.dispatcher.jobs_in_db:
            await self.dispatcher.enqueue(StepMessage(run.id, 0))
        return run, created

    async def cancel_run(self, tenant_id: str, run_id: str, reason: str) -> RunRecord | None:
        run = await self.runs.request_cancel(tenant_id, run_id, reason)
        if run is not None and not run.terminal:
            await self.dispatcher.enqueue(StepMessage(run.id, run.step_no))
        return run
