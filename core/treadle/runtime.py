"""The runtime both shapes share: database, stores, agents, engine — minus how steps travel.

A shape composes it with a dispatcher (Postgres queue in the sidecar, SQS in the cloud, inline
in tests) and whatever serves the API.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from treadle.builtins.registry import default_registry
from treadle.config import Settings, TreadleConfig
from treadle.dispatch.base import Dispatcher
from treadle.domain.runs import StepMessage
from treadle.engine.agents import ResolvedAgent, resolve_agents
from treadle.engine.hub import RunEventHub
from treadle.engine.step import Engine, EngineSettings
from treadle.providers.base import Provider
from treadle.providers.mock import MockProvider
from treadle.providers.registry import build_providers
from treadle.store.channels import ChannelDef, ChannelStore, channel_key
from treadle.store.db import Pool, open_pool, resolve_database_url
from treadle.store.memory import MemoryStore
from treadle.store.migrate import migrate
from treadle.store.runs import NewRun, RunRecord, RunStore
from treadle.store.steps import StepStore
from treadle.store.subruns import SubRunStore
from treadle.store.waits import WaitStore
from treadle.tools.registry import ToolRegistry

log = logging.getLogger("treadle")


def default_providers(config: TreadleConfig | None = None) -> dict[str, Provider]:
    """`mock`, plus the configured `providers:` when a config is given."""
    return build_providers(config) if config is not None else {"mock": MockProvider()}


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
    waits: WaitStore | None = None

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
        built = {**default_providers(config), **(providers or {})}
        agents = resolve_agents(config, registry, built, source=config_source)
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
            requeue_after_s=settings.requeue_after_seconds, sync_mid_step=settings.sync_mid_step_writes,
        )
        memory = MemoryStore(pool, max_value_bytes=config.memory.max_value_bytes,
                             max_scope_bytes=config.memory.max_scope_bytes)
        waits = WaitStore(pool, jobs_in_db=jobs_in_db, requeue_after_s=settings.requeue_after_seconds)
        services: dict[str, Any] = {}
        hub = RunEventHub()
        engine = Engine(
            waits=waits,
            services=services,
            steps=steps,
            memory=memory,
            agents=agents,
            enqueue=dispatcher.enqueue,
            hub=hub,
            settings=EngineSettings(
                tool_parallelism=settings.tool_parallelism,
                provider_retries=settings.provider_retries,
                chain_steps=settings.chain_steps,
                chain_budget_s=settings.chain_budget_seconds,
            ),
        )
        rt = cls(settings, config, url, pool, dispatcher, runs, steps, memory, agents, engine, hub, registry)
        rt.extras["providers"] = built
        rt.waits = waits
        services["runtime"] = rt
        # substrate: runs pinned to AgentDefs/skills are resolved per step; Memory embeddings
        from treadle.embeddings.registry import build_embedder
        from treadle.substrate.resolve import AgentResolver

        services["agent_resolver"] = AgentResolver(rt)
        services["embedder"] = build_embedder(config.memory.embedder)
        services["channels"] = ChannelStore(
            pool,
            {
                name: ChannelDef(name, c.scope, c.semantic, c.default_ttl, c.max_messages, c.description, "yaml")
                for name, c in config.channels.items()
            },
        )
        return rt

    async def close(self) -> None:
        for provider in (self.extras.get("providers") or {}).values():
            aclose = getattr(provider, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception as exc:  # closing idle connections must not block shutdown
                    log.warning("closing provider %s: %s", getattr(provider, "name", "?"), exc)
        await self.pool.close()

    async def start_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        from treadle.substrate.resolve import pin_run

        await pin_run(self, new)  # the promoted AgentDef, else the yaml agent; skills pinned (or UnknownAgent)
        run, created = await self.runs.create(new)
        if created and not self.dispatcher.jobs_in_db:
            await self.dispatcher.enqueue(StepMessage(run.id, 0))
        return run, created

    @property
    def channels(self) -> ChannelStore:
        store = self.engine.services["channels"]
        assert isinstance(store, ChannelStore)
        return store

    async def publish(
        self, tenant_id: str, channel: str, value: Any, *, scope_id: str = "", ttl_s: float | None = None
    ) -> dict[str, Any]:
        """Publish to a channel and wake the runs parked on it (HTTP, webhooks, schedule hooks)."""
        d = await self.channels.get_def(tenant_id, channel)
        if d.scope == "global":
            scope_id = ""
        msg, dropped = await self.channels.publish(tenant_id, d, scope_id, value, ttl_s)
        woken = await self.poke(tenant_id, [channel_key(d.name, scope_id)])
        return {"channel": d.name, "message_id": msg.id, "scope_id": scope_id, "published_at": msg.published_at,
                "dropped_oldest": dropped, "woken": woken}

    async def poke(self, tenant_id: str, keys: list[str]) -> int:
        """Wake every run parked on any of `keys`; returns how many woke."""
        assert self.waits is not None
        woken = await self.waits.poke(tenant_id, keys)
        await self._enqueue_woken(woken)
        return len(woken)

    async def wake_due(self) -> int:
        """Wake runs whose wait deadline passed (sweeper / maintenance)."""
        assert self.waits is not None
        woken = await self.waits.wake_due()
        await self._enqueue_woken(woken)
        n = len(woken)
        subruns = SubRunStore(self.pool)
        # parents parked on sub-agents that all ended, whose wake-up was lost (crash after the final commit)
        for tenant_id, key in await subruns.settled_parent_waits():
            n += await self.poke(tenant_id, [key])
        # parked runs whose cancel request never reached a step (it landed mid-step, then a crash)
        for run_id, step_no in await subruns.parked_cancels():
            await self.dispatcher.enqueue(StepMessage(run_id, step_no))
            n += 1
        return n

    async def _enqueue_woken(self, woken: list[tuple[str, int]]) -> None:
        if not self.dispatcher.jobs_in_db:
            for run_id, step_no in woken:
                await self.dispatcher.enqueue(StepMessage(run_id, step_no))
        for run_id, _ in woken:
            self.hub.notify(run_id)

    async def cancel_run(self, tenant_id: str, run_id: str, reason: str) -> RunRecord | None:
        """Flag the run and its unfinished sub-agent runs (one statement, the whole subtree); each
        gets a step message so its next step finishes it. A finished run is returned unchanged."""
        for flagged_id, step_no in await SubRunStore(self.pool).request_cancel_tree(tenant_id, run_id, reason):
            await self.dispatcher.enqueue(StepMessage(flagged_id, step_no))
        return await self.runs.get(tenant_id, run_id)
