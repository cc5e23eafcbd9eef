"""The runtime both shapes share: database, stores, agents, engine — minus how steps travel.

A shape composes it with a dispatcher (Postgres queue in the sidecar, SQS in the cloud, inline
in tests) and whatever serves the API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from treadle.builtins.registry import default_registry
from treadle.config import RETENTION_CLASSES, AgentConfig, Settings, TreadleConfig
from treadle.dispatch.base import Dispatcher
from treadle.domain.runs import RunStatus
from treadle.embeddings.registry import build_embedder
from treadle.engine.agents import AgentCatalogue, ResolvedAgent
from treadle.engine.hub import RunEventHub
from treadle.engine.sending import StepSender
from treadle.engine.waiting import Steering
from treadle.engine.waking import RunWaker
from treadle.errors import Backpressure, ConfigError, Conflict, QueueFull, RunNotFound, TokenLimitExceeded
from treadle.governance.budgets import Verdict
from treadle.governance.limits import LimitStore
from treadle.hooks.calls import HttpToolHooks
from treadle.ports import OpService
from treadle.providers.base import Provider
from treadle.providers.mock import MockProvider
from treadle.providers.registry import build_providers, key_report
from treadle.security.network import NetworkSetup
from treadle.security.redact import install_log_redaction, load_process_secrets
from treadle.store.cancels import NotifyCancels, PollingCancels
from treadle.store.channels import ChannelDef, ChannelStore, channel_key
from treadle.store.clienttools import ClientToolStore
from treadle.store.db import Pool, open_pool, resolve_database_url
from treadle.store.defs import DefStore
from treadle.store.dirents import DirentStore, Tree
from treadle.store.hooks import HookStore
from treadle.store.inputs import InputStore
from treadle.store.interrupts import InterruptStore
from treadle.store.memory import MemoryStore
from treadle.store.migrate import migrate
from treadle.store.pause import PauseStore
from treadle.store.residents import ResidentStore
from treadle.store.runs import NewRun, RunRecord, RunStore
from treadle.store.sessions import SessionStore
from treadle.store.sqlmem import SqlAudit, SqlMemory, SqlMemorySettings
from treadle.store.steps import LeasedRun, StepStore
from treadle.store.subruns import SubRunStore
from treadle.store.usage import UsageStore
from treadle.store.volumes import VolumeStore
from treadle.store.waits import WaitStore
from treadle.substrate import Substrate
from treadle.teams import TeamDefFamily, TeamRuns, is_team_agent
from treadle.tools.base import Principal, Tool, ToolContext, ToolServices
from treadle.tools.registry import ToolRegistry
from treadle.volumes.base import VolumeStorage
from treadle.volumes.service import VolumeService

if TYPE_CHECKING:
    from treadle.a2a.client import A2AToolSource
    from treadle.a2a.push import PushDelivery
    from treadle.engine.pausing import PauseControl
    from treadle.engine.step import Engine
    from treadle.mcp.defs import McpServerDefs
    from treadle.mcp.tools import McpToolSource
    from treadle.store.snapshots import SnapshotStore
    from treadle.store.sqlmemrestore import SqlScopeSnapshots
    from treadle.store.tokens import AuthTokenStore
    from treadle.substrate.tokens import OperatorTokens
    from treadle.substrate.volumedefs import VolumeDefFamily
    from treadle.triggers.service import Triggers

log = logging.getLogger("treadle")
#: one INFO line per run start (here) and end (engine/step.py)
runs_log = logging.getLogger("treadle.runs")

DispatcherFactory = Callable[[Pool, str], Dispatcher]


def default_providers(config: TreadleConfig | None = None) -> dict[str, Provider]:
    """`mock`, plus the configured `providers:` when a config is given."""
    return build_providers(config) if config is not None else {"mock": MockProvider()}


def build_deferred() -> list[str]:
    """Build now what the runtime otherwise builds on first use: every built-in tool's module, the
    engine's and the evaluations' modules, and each pydantic model declared `defer_build` (the
    config sections, specs, segments and wire models few invocations validate on their own).
    For a SnapStart INIT, so the snapshot holds them; a plain cold start never calls it. Answers the
    models it built."""
    import sys

    from pydantic import BaseModel

    from treadle.builtins.registry import import_all
    from treadle.config import build_sections

    import_all()
    build_sections()  # the lazy config sections' validators (and the trigger specs they import)
    import treadle.engine.step  # Runtime.engine is built on first use
    import treadle.substrate.evaluation  # noqa: F401

    built: list[str] = []
    todo: list[type[BaseModel]] = [BaseModel]
    while todo:
        for cls in todo.pop().__subclasses__():
            todo.append(cls)
            module = sys.modules.get(cls.__module__)
            if cls.__module__.startswith("treadle.") and module is not None and not cls.__pydantic_complete__:
                cls.model_rebuild()
                built.append(f"{cls.__module__}.{cls.__qualname__}")
    return built


#: after a retention batch, a pause this many times its duration (Runtime.enforce_retention)
RETENTION_YIELD = 3.0


def _client_tools(leased: LeasedRun) -> list[Tool]:
    """The tools a run's client declared (none for most runs: their module is imported for one)."""
    if not leased.client_tools:
        return []
    from treadle.builtins.client import ClientTool

    return [ClientTool.from_spec(spec, leased.client_tool_timeout_s) for spec in leased.client_tools]


class _OpServices(Mapping[str, OpService]):
    """The op services the *Def and Evaluation tools reach, by tool name; the trigger families are
    built on first use (a worker that never runs a ScheduleDef call never imports them)."""

    NAMES = ("AgentDef", "SkillDef", "Evaluation", "ScheduleDef", "WebhookDef", "VolumeDef", "TeamDef")

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    def __getitem__(self, name: str) -> OpService:
        rt = self._rt
        if name == "AgentDef":
            return rt.substrate.agents
        if name == "SkillDef":
            return rt.substrate.skills
        if name == "Evaluation":
            return rt.substrate.evaluations
        if name == "ScheduleDef":
            return rt.triggers.schedules.family
        if name == "WebhookDef":
            return rt.triggers.webhooks.family
        if name == "VolumeDef":
            return rt.volumedefs
        if name == "TeamDef":
            return rt.teamdefs
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.NAMES)

    def __len__(self) -> int:
        return len(self.NAMES)


class _ToolCatalogue(Mapping[str, tuple[str, dict[str, Any]]]):
    """Every registered tool's (description, input schema), by name — the registry's names when the
    runtime was built; a tool's module is imported when its entry is first read (the Context tool's
    `tools` op), not at start."""

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self._names = registry.names()

    def __getitem__(self, name: str) -> tuple[str, dict[str, Any]]:
        tool = self._registry.get(name) if name in self._names else None
        if tool is None:
            raise KeyError(name)
        return tool.description, tool.input_schema

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass(eq=False)
class Runtime:
    """The composition root: builds every store, service and port once. Services receive stores
    and ports (treadle/ports.py) — the runtime implements `RunStarter`, `Waker`
    and `ChannelPublisher` — and never see the runtime itself."""

    settings: Settings
    config: TreadleConfig
    database_url: str
    pool: Pool
    dispatcher: Dispatcher
    catalogue: AgentCatalogue
    registry: ToolRegistry
    providers: dict[str, Provider]
    runs: RunStore = field(init=False)
    sessions: SessionStore = field(init=False)
    steps: StepStore = field(init=False)
    memory: MemoryStore = field(init=False)
    waits: WaitStore = field(init=False)
    channels: ChannelStore = field(init=False)
    subruns: SubRunStore = field(init=False)
    hub: RunEventHub = field(init=False)
    sender: StepSender = field(init=False)
    waker: RunWaker = field(init=False)
    substrate: Substrate = field(init=False)
    #: the cloud shape bounds an SSE response by the invocation's remaining time
    sse_budget_s: float | None = None
    #: ... and, since API Gateway delivers a response only once it ends, ends it this long after
    #: its first frame instead of at the budget (the client resumes from the last id)
    sse_linger_s: float | None = None
    #: POST /v1/runs answers with the run's SSE stream unless the request prefers JSON (loomcycle's
    #: default, api/runstream.py); False where a response cannot stream (the cloud's api function:
    #: API Gateway buffers it): JSON unless the request prefers the stream
    runs_stream_by_default: bool = True
    #: the server is shutting down gracefully (the sidecar's SIGTERM): open run streams end (their
    #: clients resume after the restart), and a stream that ends so is no client leaving its run
    draining: bool = False
    #: how outbound calls the runtime makes itself (tool-use hooks) resolve and connect (tests inject it)
    network: NetworkSetup | None = None
    #: bumped whenever a token is created, rotated or retired in this process (auth caches flush)
    auth_generation: int = 0
    #: when retention last ran (time.monotonic; enforce_retention runs at most once a minute)
    _retention_at: float = float("-inf")
    #: where volumes keep their files (volumes/); "host": a directory under TREADLE_VOLUMES_ROOT
    #: (default TREADLE_HOME/volumes); None: no volumes (the file tools refuse)
    volume_storage: VolumeStorage | Literal["host"] | None = "host"

    def __post_init__(self) -> None:
        settings, config, pool = self.settings, self.config, self.pool
        jobs_in_db = self.dispatcher.jobs_in_db
        requeue = settings.requeue_after_seconds
        self.runs = RunStore(pool, jobs_in_db=jobs_in_db, requeue_after_s=requeue)
        self.sessions = SessionStore(pool)
        self.usage = UsageStore(pool)  # usage and cost as recorded (GET /v1/_usage)
        self.limits = LimitStore(pool)  # budgets (GET|PUT|DELETE /v1/_limits), checked at start and each step
        self.steps = StepStore(
            pool, jobs_in_db=jobs_in_db, lease_s=settings.lease_seconds, requeue_after_s=requeue,
            sync_mid_step=settings.sync_mid_step_writes,
            tenant_max_running=settings.tenant_max_running, user_max_running=settings.user_max_running,
        )
        self.memory = MemoryStore(pool, max_value_bytes=config.memory.max_value_bytes,
                                  max_scope_bytes=config.memory.max_scope_bytes)
        self.waits = WaitStore(pool, jobs_in_db=jobs_in_db, requeue_after_s=requeue)
        self.channels = ChannelStore(pool, {
            name: ChannelDef(name, c.scope, c.semantic, c.default_ttl, c.max_messages, c.description, "yaml")
            for name, c in config.channels.items()
        })
        self.subruns = SubRunStore(pool)
        self.hub = RunEventHub()
        self.cancels: NotifyCancels | PollingCancels = (
            NotifyCancels(self.database_url) if settings.cancel_watch == "notify"
            else PollingCancels(pool, settings.cancel_poll_seconds)
        )
        self.sender = StepSender(self.dispatcher)
        self.hooks = HttpToolHooks(HookStore(pool), self.network)
        self.pause = PauseStore(pool, self.waits)  # the runtime's pause state (store/pause.py)
        self.residents = ResidentStore(pool)
        self.waker = RunWaker(self.waits, self.subruns, self.sender, self.hub, self.pause, self.residents)
        self.interrupts = InterruptStore(pool)
        self.substrate = Substrate(pool, self.catalogue, self.runs, self.memory, build_embedder(config.memory.embedder))
        storage = self.volume_storage
        if storage == "host":
            from treadle.volumes.host import HostDirStorage  # the sidecar's; the cloud keeps volumes in S3

            storage = self.volume_storage = HostDirStorage(settings.volumes_root or settings.home / "volumes")
        self.volumes = VolumeService(storage, config, VolumeStore(pool), DefStore(pool), self.subruns)
        self.teams = TeamRuns(DefStore(pool), self.runs, self.registry, self, self.hub.wait)
        self.teamdefs = TeamDefFamily(DefStore(pool), self.teams, config.teams, config.source)
        self.teams.current = self.teamdefs.current_record

    @cached_property
    def engine(self) -> Engine:
        """The engine and what its steps use (tools' services, steering), built on first use: the
        worker's every invocation and the sidecar's workers use it; the API, webhook, MCP and
        scheduler functions only for a rare route (a client tool's result, an op over MCP) or never,
        and do not import its modules."""
        from treadle.engine.step import Engine, EngineSettings

        settings, pool = self.settings, self.pool
        tools = ToolServices(
            config=self.config, runs=self.runs, memory=self.memory, waits=self.waits, channels=self.channels,
            interrupts=self.interrupts, subruns=self.subruns, defs=DefStore(pool),
            client_results=ClientToolStore(pool), waker=self,
            starter=self, canceller=self, agents=self.substrate.agents, vector_memory=self.substrate.memory,
            ops=_OpServices(self),
            catalogue=_ToolCatalogue(self.registry),
            volumes=self.volumes,
            sql_memory=self.sql_memory, sql_audit=SqlAudit(pool) if self.sql_memory is not None else None,
            recapper=self, asker=self,
            dirents=DirentStore(pool),
            residents=self.residents,
        )
        return Engine(
            steps=self.steps,
            agents=self.catalogue.static,
            tools=tools,
            sender=self.sender,
            steering=Steering(
                steps=self.steps, waits=self.waits, inputs=InputStore(pool), interrupts=self.interrupts,
                subruns=self.subruns, sender=self.sender, waker=self.waker, hub=self.hub,
            ),
            hub=self.hub,
            resolve_agent=self._resolve_agent,
            cancels=self.cancels,
            hooks=self.hooks,
            client_tools=_client_tools,
            mcp_tools=self._mcp_tools,
            settings=EngineSettings(
                tool_parallelism=settings.tool_parallelism,
                provider_retries=settings.provider_retries,
                chain_steps=settings.chain_steps,
                chain_budget_s=settings.chain_budget_seconds,
            ),
            on_run_end=self.volumes.run_ended,
            budgets=self._budget,
            pause=self.pause,
            provider_keys=self._provider_keys if self._provider_credentials else None,
            remember_secrets=self.remember_tenant_secrets if self._credentials_keyed else None,
            render_prompt=_render_prompt,
        )

    @cached_property
    def _credentials_keyed(self) -> bool:
        """Whether this process holds a CredentialDef key (else no credential can be stored or read)."""
        from treadle.governance.credentials import process_sealer

        return process_sealer().has_keys

    async def remember_tenant_secrets(self, tenant_id: str) -> None:
        """The tenant's CredentialDef values join this process's redaction set (cached per tenant):
        before a step, and before an API request of the tenant writes anything."""
        if self._credentials_keyed:
            from treadle.governance.credentials import TenantCredentials

            await TenantCredentials(self.pool).remember_tenant(tenant_id)

    @cached_property
    def _provider_credentials(self) -> dict[str, str]:
        """provider id → the CredentialDef its `api_key` references (`${credential.NAME}`)."""
        return {pid: cfg.credential for pid, cfg in self.config.providers.items() if cfg.credential}

    async def _provider_keys(self, leased: LeasedRun) -> dict[str, str]:
        """The run's values of its providers' credentials: the agent's, else its user's, else its
        tenant's CredentialDef (governance/credentials.py); a provider without one is left out."""
        from treadle.governance.credentials import TenantCredentials

        refs = self._provider_credentials
        got = await TenantCredentials(self.pool).resolve(leased.tenant_id, leased.user_id, leased.agent,
                                                         set(refs.values()))
        return {pid: got[name] for pid, name in refs.items() if name in got}

    async def _purge_ended(self) -> int:
        """The sweeper's pass over ended runs: their ephemeral volumes, and SQL memory's pass."""
        purged = await self.volumes.purge_ended()
        await self.tidy_sql_memory()
        return purged

    async def tidy_sql_memory(self) -> None:
        """SQL memory's pass (the sweeper's; cloud: the maintenance function): the `run` scopes of
        ended runs dropped, and a snapshot restore a killed process left half-way finished (its
        rows committed) or undone (store/sqlmemrestore.py)."""
        if self.sql_memory is not None:
            await self.sql_memory.drop_ended_runs(self.pool)
        if self.sql_snapshots is not None:
            await self.sql_snapshots.recover(self.snapshots.committed_restores)

    @cached_property
    def pausing(self) -> PauseControl:
        """The runtime's pause and resume (engine/pausing.py; /v1/_pause, /v1/_resume, /v1/_state)."""
        from treadle.engine.pausing import PauseControl

        return PauseControl(self.pause, self.waker)

    async def refuse_if_paused(self) -> None:
        """503 `runtime_paused` while the runtime pauses: the API's run starts call it (runs that
        schedules, webhooks and sub-agents start are created and wait, parked, for the resume)."""
        await self.pausing.refuse_new_runs()

    @cached_property
    def snapshots(self) -> SnapshotStore:
        """Snapshots' tables and SQL (store/snapshots.py; the document: portable/snapshots.py)."""
        from treadle.store.snapshots import SnapshotStore

        return SnapshotStore(self.pool, jobs_in_db=self.dispatcher.jobs_in_db)

    async def restore_snapshot(self, doc: Any, tenant: str | None, *, include_history: bool) -> dict[str, Any]:
        """Restore a snapshot document here (portable/snapshots.py), then send the restored
        mid-way runs' steps and wake what is due (runs a pause parked, while this runtime runs),
        and — where schedules fire from an external scheduler (the cloud's EventBridge Scheduler)
        — give each restored schedule its external one now, not at the next cold start (a
        snapshot never carries the source's sync state)."""
        from treadle.portable.snapshots import restore

        result, done = await restore(self.snapshots, doc, tenant, include_history=include_history,
                                     sql=self.sql_snapshots)
        for run_id, step_no in done.to_send:
            await self.sender.next_step(run_id, step_no)  # the restore enqueued it with jobs_in_db
        woken = await self.wake_due()
        out = result.wire(len(done.to_send) + woken)
        if done.written.get("schedules"):
            synced = await self.triggers.schedules.reconcile()
            if synced:
                out["schedules_synced"] = synced
        return out

    @cached_property
    def sql_memory(self) -> SqlMemory | None:
        """SQL memory's host (store/sqlmem.py) where `memory.sql` is configured."""
        sql = self.config.memory.sql
        if sql is None:
            return None
        return SqlMemory(self.database_url, SqlMemorySettings(
            database_url=sql.database_url, statement_timeout_ms=sql.statement_timeout_ms, max_rows=sql.max_rows,
            max_result_bytes=sql.max_result_bytes, quota_bytes=sql.quota_bytes))

    @cached_property
    def sql_snapshots(self) -> SqlScopeSnapshots | None:
        """SQL memory's scopes in snapshots and tenant exports (store/sqlmemrestore.py): a restore
        recreates them as each scope's role, every statement through SQL memory's floor."""
        if self.sql_memory is None:
            return None
        from treadle.knowledge.sqlcheck import check_statement
        from treadle.store.sqlmemrestore import SqlScopeSnapshots

        return SqlScopeSnapshots(self.sql_memory, lambda text: check_statement(text, read_only=False)[0])

    @classmethod
    async def open(
        cls,
        settings: Settings,
        config: TreadleConfig,
        *,
        dispatcher_factory: DispatcherFactory | None = None,
        registry: ToolRegistry | None = None,
        providers: dict[str, Provider] | None = None,
        config_source: str = "treadle.yaml",
        network: NetworkSetup | None = None,
        volume_storage: VolumeStorage | Literal["host"] | None = "host",
    ) -> Runtime:
        """Resolve agents (config errors first), connect, migrate, and wire the engine.

        `dispatcher_factory(pool, url) -> Dispatcher`; default is the Postgres queue."""
        registry = registry or default_registry()
        built = {**default_providers(config), **(providers or {})}
        load_process_secrets(  # secrets never land: treadle.security.redact
            [*settings.redact_env_names(), *(env for _, _, env, _, _ in key_report(config) if env)],
            enabled=settings.redact_secrets,
            patterns_at_rest=settings.redact_patterns,
        )
        install_log_redaction()
        catalogue = AgentCatalogue(config, registry, built, source=config_source)
        url = resolve_database_url(settings.database_url, settings.home)
        await migrate(url)
        # a worker holds one connection from its claim to the end of the lease chain it runs
        # (store/db.py `Pool.holding`), its tools may use one more meanwhile, and requests, the
        # sweepers and the listeners take the rest
        size = settings.db_pool_size or 2 * settings.workers + 4
        pool = await open_pool(url, size, idle_in_transaction_s=settings.lease_seconds,
                               behind_pooler=settings.db_behind_pooler)
        if dispatcher_factory is None:
            from treadle.dispatch.postgres import PostgresQueue

            dispatcher: Dispatcher = PostgresQueue(pool, url)
        else:
            dispatcher = dispatcher_factory(pool, url)
        rt = cls(settings, config, url, pool, dispatcher, catalogue, registry, built, network=network,
                 volume_storage=volume_storage)
        for family in (rt.substrate.agents, rt.substrate.skills):
            await family.rehash_legacy()  # rows hashed before loomcycle's hash (migration 0018)
        prices = config.pricing.rows() if config.pricing else []
        await rt.usage.set_prices(prices)  # usage is priced by it
        rt.steps.prices = {(p, m): (i, o, cw, cr, cur) for p, m, i, o, cw, cr, cur in prices}  # the usage metrics'
        if isinstance(rt.cancels, NotifyCancels):
            await rt.cancels.start()  # listening before the first step is leased
        return rt

    @property
    def agents(self) -> dict[str, ResolvedAgent]:
        """treadle.yaml's agents, resolved."""
        return self.catalogue.static

    def tool_context(
        self, tenant_id: str, run_id: str, agent: str, *, user_id: str | None = None, tool_use_id: str = "toolu_1",
        iteration: int = 1, agent_config: AgentConfig | None = None, resume: dict[str, Any] | None = None,
    ) -> ToolContext:
        """A ToolContext for calling a tool outside a step (tests, tools invoked by an operator).
        The agent's configuration is `agent_config`, else treadle.yaml's `agent`."""
        if agent_config is None:
            static = self.catalogue.get(agent)
            agent_config = static.config if static is not None else AgentConfig()
        return ToolContext(
            principal=Principal(tenant_id, user_id), run_id=run_id, tool_use_id=tool_use_id, iteration=iteration,
            agent=agent, agent_config=agent_config, services=self.engine.tools, resume=resume,
        )

    @cached_property
    def auth_tokens(self) -> AuthTokenStore:
        """What authentication reads (operator tokens by keyed hash)."""
        from treadle.store.tokens import AuthTokenStore

        return AuthTokenStore(self.pool)

    @cached_property
    def operator_tokens(self) -> OperatorTokens:
        """OperatorTokenDef: mint, rotate, retire bearer tokens (HTTP and `treadle token`)."""
        from treadle.substrate.tokens import OperatorTokens

        def changed() -> None:
            self.auth_generation += 1

        return OperatorTokens(DefStore(self.pool), self.auth_tokens, self.settings.token_pepper, changed)

    @cached_property
    def volumedefs(self) -> VolumeDefFamily:
        """Runtime volumes on the def lifecycle (VolumeDef tool, /v1/_volumedef)."""
        from treadle.knowledge.pathtree import PathTree
        from treadle.substrate.volumedefs import VolumeDefFamily

        paths = PathTree(DirentStore(self.pool))

        async def mount(tenant: str, name: str, mode: str, mount_at: Any) -> str:
            return await paths.name(Tree(tenant, "tenant", ""), mount_at, "volume_mount",
                                    {"volume_name": name, "mode": mode})

        return VolumeDefFamily(DefStore(self.pool), self.volumes, mount)

    @cached_property
    def triggers(self) -> Triggers:
        """Schedules, webhooks and their hooks (built on first use: the worker never needs them)."""
        from treadle.triggers.hooks import ScopedPublisher
        from treadle.triggers.service import Triggers

        return Triggers(self.pool, self.config, self, self.substrate.agents, self.memory,
                        ScopedPublisher(self.channels, self), purge_volumes=self._purge_ended,
                        retention=self.enforce_retention,
                        mcp=lambda tenant, server, tool, args: self.mcp.call_hook(tenant, server, tool, args))

    @cached_property
    def mcp(self) -> McpToolSource:
        """MCP servers as agent tools (treadle/mcp): built on the first step that needs one."""
        from treadle.mcp.connections import McpConnections
        from treadle.mcp.tools import McpToolSource, stdio_allowed

        return McpToolSource(self.config, McpConnections(pooled=stdio_allowed()), self.network, pool=self.pool,
                             lookup=lambda tenant, name: self.mcp_defs.server(tenant, name))

    @cached_property
    def mcp_defs(self) -> McpServerDefs:
        """MCPServerDef: MCP servers created at runtime (treadle/mcp/defs.py)."""
        from treadle.mcp.defs import McpServerDefs

        return McpServerDefs(DefStore(self.pool), self.mcp.discover_for_def, list(self.config.mcp_servers))

    @cached_property
    def a2a_client(self) -> A2AToolSource:
        """Remote A2A agents as agent tools (treadle/a2a/client.py): built on the first step that needs one."""
        from treadle.a2a.client import A2AToolSource

        return A2AToolSource(self.config, self.network or NetworkSetup(), self.pool, self.waits)

    async def _mcp_tools(self, leased: LeasedRun, agent: ResolvedAgent) -> list[Tool]:
        """The step's MCP and A2A tools (the engine's `McpTools` hook)."""
        names, hosts = agent.config.tools, getattr(agent.config, "allowed_hosts", None)
        out: list[Tool] = []
        if any(t.startswith("mcp__") for t in names):
            out += await self.mcp.tools_for(leased.tenant_id, leased.run_id, names, hosts, leased.allowed_hosts)
        if any(t.startswith("a2a__") for t in names):
            out += self.a2a_client.tools_for(names, hosts, leased.allowed_hosts)
        return out

    async def close(self) -> None:
        if "mcp" in self.__dict__:
            await self.mcp.connections.close()
        for provider in self.providers.values():
            aclose = getattr(provider, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception as exc:  # closing idle connections must not block shutdown
                    log.warning("closing provider %s: %s", getattr(provider, "name", "?"), exc)
        if isinstance(self.cancels, NotifyCancels):
            await self.cancels.close()
        await self.pool.close()

    async def _resolve_agent(self, leased: LeasedRun) -> ResolvedAgent | None:
        """The engine's agent for a step: a team run's walk (teams/runs.py), else the pinned agent."""
        if is_team_agent(leased.agent):
            return await self.teams.resolve(leased)
        return await self.substrate.pinning.resolve(leased)

    async def _budget(self, leased: LeasedRun) -> Verdict | None:
        """The engine's budget check at a step's top (governance/limits.py)."""
        return await self.limits.verdict(leased.tenant_id, leased.user_id, leased.agent)

    async def start_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        verdict = await self.limits.verdict(new.tenant_id, new.user_id, new.agent)
        if verdict is not None and verdict.hard is not None:  # refused before it starts (loomcycle's 429)
            from treadle.telemetry.metrics import metrics

            metrics().budget_crossed(verdict.hard.limit.scope, "refused")
            body = verdict.hard.body()
            raise TokenLimitExceeded(str(body["message"]), body)
        if self.config.concurrency is not None and new.parent_run_id is None:
            await self._admit(new)
        if is_team_agent(new.agent):  # a team run: the TeamDef version it walks (teams/runs.py)
            await self.teams.pin(new)
        else:
            await self.substrate.pinning.pin(new)  # the promoted AgentDef, else the yaml agent; skills pinned
        run, created = await self.runs.create(new)
        if created:
            await self.sender.next_step(run.id, 0)  # run creation enqueued it with jobs_in_db
            runs_log.info("run %s started: agent=%s tenant=%s user=%s", run.id, run.agent, run.tenant_id,
                          run.user_id or "-")
        return run, created

    async def _admit(self, new: NewRun) -> None:
        """loomcycle's `concurrency:` caps on a new top-level run (config ConcurrencyConfig). Sub-agents
        are not counted against them (a parent parked on its children must not starve them). A
        retried start (same Idempotency-Key) at the cap is refused like a new one, as loomcycle
        counts every request; concurrent starts each see the count before the others' rows."""
        caps = self.config.concurrency
        assert caps is not None
        if not caps.live_cap and not (caps.max_concurrent_runs_per_user and new.user_id):
            return
        live, mine = await self.runs.live_counts(new.tenant_id, new.user_id)
        per_user = caps.max_concurrent_runs_per_user
        if per_user and new.user_id and mine >= per_user:
            raise Backpressure(f"user {new.user_id!r} has {mine} runs in flight (cap {per_user}); retry shortly",
                               code="per_user_quota_exhausted", retry_after_s=5.0,
                               body={"user_id": new.user_id, "cap": per_user})
        if caps.live_cap and live >= caps.live_cap:
            raise Backpressure(f"{live} runs are queued or running (max_concurrent_runs {caps.max_concurrent_runs}"
                               f" + max_queue_depth {caps.max_queue_depth}); back off and retry")

    async def publish(
        self, tenant_id: str, channel: str, value: Any, *, scope_id: str = "", ttl_s: float | None = None,
        deliver_at: datetime | None = None,
    ) -> dict[str, Any]:
        """Publish to a channel and wake the runs parked on it (HTTP, webhooks, schedule hooks). A
        message delayed by `deliver_at` wakes them when it becomes visible (RunWaker.wake_due)."""
        d = await self.channels.get_def(tenant_id, channel)
        if d.scope == "global":
            scope_id = ""
        msg, dropped = await self.channels.publish(tenant_id, d, scope_id, value, ttl_s, deliver_at=deliver_at)
        woken = 0 if msg.delayed else await self.poke(tenant_id, [channel_key(d.name, scope_id)])
        out = {"channel": d.name, "message_id": msg.id, "scope_id": scope_id, "published_at": msg.published_at,
               "dropped_oldest": dropped, "woken": woken}
        if msg.visible_at is not None:
            out["visible_at"] = msg.visible_at
        return out

    async def poke(self, tenant_id: str, keys: list[str]) -> int:
        """Wake every run parked on any of `keys`; returns how many woke (engine/waking.py)."""
        return await self.waker.poke(tenant_id, keys)

    async def wake_due(self) -> int:
        """Wake runs whose wait deadline passed, and repair lost wake-ups (sweeper / maintenance);
        deliver the due A2A push notifications (treadle/a2a/push.py) where tasks are served."""
        n = await self.waker.wake_due()
        if self.config.a2a_server_cards:
            try:
                n += await self.a2a_push.deliver_due()
            except Exception as exc:  # never stops the sweep
                log.warning("A2A push delivery pass failed: %s", exc)
        return n

    @cached_property
    def a2a_push(self) -> PushDelivery:
        """Push notifications to the peers following this treadle's A2A tasks."""
        from treadle.a2a.push import PushDelivery

        return PushDelivery(self, self.config, self.network or NetworkSetup())

    async def enforce_retention(self, *, force: bool = False) -> int:
        """Delete one bounded batch per class — finished runs (with their transcripts), channel
        messages, memory — past their tenant's retention (config `retention:`); at most once a
        minute unless `force` (the sweeper calls it every tick; cloud: the maintenance function).
        Retention yields to live work: after a batch that deleted something it pauses
        RETENTION_YIELD times as long as the batch took, so it holds at most a quarter of the
        database's time while it has work (docs/tenancy.md, scripts/bench_retention.py)."""
        rules = self.config.retention
        if not rules.active:
            return 0
        now = time.monotonic()
        if not force and now - self._retention_at < 60.0:
            return 0
        self._retention_at = now
        from treadle.store.retention import RetentionStore

        store = RetentionStore(self.pool)
        archive = self._archive_batch if rules.archive is not None else None
        deleted = 0
        for cls in RETENTION_CLASSES:
            overrides = rules.overrides(cls)

            async def purge(days: int, tenant: str | None, exclude: list[str], cls: str = cls) -> int:
                started = time.monotonic()
                if archive is not None:  # written to the archive volume first, in the batch's transaction
                    n = await store.purge_archived(cls, days, archive, tenant_id=tenant, exclude=exclude)
                elif cls == "runs":
                    n = await self.runs.purge_finished(days, tenant_id=tenant, exclude=exclude)
                else:
                    n = await store.purge(cls, days, tenant_id=tenant, exclude=exclude)
                if n:  # yield to live work: retention takes at most 1 / (1 + RETENTION_YIELD) of the time
                    # (at most a second a batch: the sidecar's sweeper holds its lock's transaction meanwhile)
                    await asyncio.sleep(min((time.monotonic() - started) * RETENTION_YIELD, 1.0))
                return n

            default = rules.default(cls)
            if default is not None:
                deleted += await purge(default, None, list(overrides))
            for tenant, days in overrides.items():
                if days is not None:
                    deleted += await purge(days, tenant, [])
        if self.sql_memory is not None:  # memory's days also drop the SQL memory scopes not used for as long
            default, overrides = rules.default("memory"), rules.overrides("memory")
            if default is not None:
                deleted += await self.sql_memory.drop_unused(default, exclude=list(overrides))
            for tenant, days in overrides.items():
                if days is not None:
                    deleted += await self.sql_memory.drop_unused(days, tenant=tenant)
        return deleted

    async def _archive_batch(self, cls: str, rows: list[tuple[str, str, str]]) -> None:
        """Retention's archive (config `retention.archive`): a batch's rows (Postgres's JSON text
        of each) as JSON Lines in the archive volume of each row's tenant, one file per user
        (`retention/<class>/u/<user>/<UTC day>/<content hash>.jsonl`; rows of no user under
        `retention/<class>/_/…`). A file's name is its content's hash: a batch archived again
        after a crash rewrites the same file."""
        import hashlib

        from treadle.volumes.paths import tenant_segment

        volume = self.config.retention.archive.volume if self.config.retention.archive else ""
        storage = self.volumes.storage
        if storage is None:
            raise ConfigError("retention.archive needs volume storage (none is wired in this runtime)")
        day = datetime.now(UTC).date().isoformat()
        groups: dict[tuple[str, str], list[str]] = {}
        for tenant, who, doc in rows:
            groups.setdefault((tenant, who), []).append(doc)
        for (tenant, who), docs in groups.items():
            body = ("\n".join(docs) + "\n").encode()
            owner = f"u/{tenant_segment(who)}" if who else "_"
            path = f"retention/{cls}/{owner}/{day}/{hashlib.sha256(body).hexdigest()[:24]}.jsonl"
            await storage.write(self.volumes.tenant_location(tenant, volume), path, body)

    async def compact_run(self, tenant_id: str, run_id: str, reason: str | None = None) -> dict[str, Any]:
        """loomcycle's manual compaction (POST /v1/runs/{id}/compact, MCP compact_run): summarize
        the run's history now; an ended run gets the `context_compaction` marker (its session's next
        turn replays compacted: `applied: marker`), a run parked for input gets it through its
        steering queue (its next step records it and parks again: `live`); fewer than 4 messages,
        or nothing to summarize: `noop`. A run mid-turn: 409 `run_busy`. `reason` (loomcycle's audit
        note) goes to the log with the outcome."""
        import json as _json

        from treadle.engine.plan import at_rest, input_key

        leased = await self.engine.steps.read(tenant_id, run_id)
        if leased is None:
            raise RunNotFound(f"run {run_id!r} not found")
        ended = RunStatus(leased.status).terminal
        parked = leased.status == RunStatus.WAITING.value and at_rest(leased.interactive, leased.events)
        if not ended and not parked:
            raise Conflict("the run is mid-turn; compact it when it is parked waiting for input, or ended",
                           code="run_busy")
        event, messages, before = await self.engine.manual_compaction(leased)
        runs_log.info("run %s: manual compaction (%s), reason: %s", run_id,
                      "nothing to summarize" if event is None else f"{before} → {event.after_tokens} tokens",
                      reason or "-")
        out: dict[str, Any] = {"run_id": run_id, "compacted": event is not None, "before_tokens": before,
                               "after_tokens": event.after_tokens if event is not None else before,
                               "applied": "noop"}
        if event is None:
            return out
        if ended:
            if not await self.engine.steps.append_at_rest(tenant_id, run_id, event.type, event.to_payload()):
                raise Conflict("the run is no longer ended", code="run_busy")
            out["applied"] = "marker"
            return out
        spec = {**event.to_payload(), "messages": messages}
        queued = await InputStore(self.pool).add(tenant_id, run_id, "compact", _json.dumps(spec))
        if queued.queue_full:
            raise QueueFull("the run's input queue is full; retry shortly")
        if queued.input_id is None:
            raise Conflict("the run ended meanwhile; compact it again", code="run_busy")
        await self.poke(tenant_id, [input_key(run_id)])
        out["applied"] = "live"
        return out

    async def replay_session(self, tenant_id: str, source_id: str, agent: str, compress: bool) -> dict[str, Any]:
        """loomcycle's replay (POST /v1/sessions/{id}/replay): a new session of `agent` seeded with
        the source session's conversation — one ended run holding a copy of its turns (reasoning
        left out: another provider may continue it; store/sessions.py `CARRIED`) — continued like
        any session. `compress`: the carried history is summarized first with the target agent's
        compaction settings and a `context_compaction` marker follows it (computed before anything
        is written: a failed summary leaves nothing behind). Everything is written in one statement.
        404 `session_not_found`, 409 `agent_gone` (the target does not resolve), 400 `empty_source`,
        502 when the summary fails."""
        from treadle.domain.events import ContextCompaction, Done
        from treadle.engine import compaction
        from treadle.engine.replay import history_messages
        from treadle.errors import AgentGone, BadRequest, NotFound, UnknownAgent
        from treadle.store.runs import new_run_id, session_id_of
        from treadle.store.sessions import Seed

        source = await self.sessions.get(tenant_id, source_id)
        if source is None:
            raise NotFound(f"session {source_id!r} not found", code="session_not_found")
        new = NewRun(tenant_id=tenant_id, agent=agent, segments=[], user_id=source.user_id)
        try:
            if is_team_agent(agent):
                await self.teams.pin(new)
            else:
                await self.substrate.pinning.pin(new)
        except UnknownAgent as exc:
            raise AgentGone(f"target agent not found: {exc.message}") from None
        run_id = new_run_id()
        tail: list[tuple[str, dict[str, Any]]] = []
        upto: tuple[int, int] | None = None
        marker: ContextCompaction | None = None
        if compress:
            resolved = await self._summarizing_agent(new)
            events, upto = await self._conversation(tenant_id, source_id)
            settings = compaction.Settings.resolve(resolved.config.compaction)
            marker = await self.engine.compaction_of(history_messages(events), resolved, settings, "self", 0,
                                                     (run_id, agent), events)
            if marker is not None:
                tail.append((marker.type, marker.to_payload()))
        done = Done("end_turn", {}, "replay seed")
        tail.append((done.type, done.to_payload()))
        started = {"agent": agent, "run_id": run_id, "user_id": source.user_id, "replay_of": source_id}
        if new.def_id is not None:
            started["def_id"], started["def_content_sha256"] = new.def_id, new.def_content_sha256
        seed = Seed(run_id, session_id_of(run_id), agent, source.user_id, new.def_id, new.def_content_sha256,
                    started, tuple(tail))
        copied = await self.sessions.seed(tenant_id, source_id, seed, upto)
        if copied == 0:
            raise BadRequest("source session has no transcript to replay", code="empty_source")
        return {"new_session_id": seed.session_id, "seed_run_id": run_id, "events_copied": copied,
                "compacted": marker is not None}

    async def fork_run(self, tenant_id: str, run_id: str, at_seq: int, *, prompt: str | None = None,
                       agent: str | None = None, def_id: str | None = None, replay: bool = False,
                       idempotency_key: str | None = None) -> dict[str, Any]:
        """A new run whose history is `run_id`'s up to `at_seq` (never splitting a tool exchange;
        portable/fork.py says where it ends and what the first turn is), of the same agent or of
        `agent` / the AgentDef version `def_id`: a new session seeded with the history (the
        session's earlier runs and the run's events to the cut: store/sessions.py `seed`, in one
        statement), continued by the fork. `replay`: the fork's calls that match the original's
        after the cut are answered from its recorded results (engine/forkreplay.py).
        `idempotency_key`: a retry returns the fork the first call started (its seed run's id comes
        from the key, so a crash between the seed and the start leaves nothing behind). 404
        `run_not_found`; 409 `not_forkable` (a sub-agent run: no session); 400 `invalid_at_seq` /
        `no_user_turn`; 503 `runtime_paused`."""
        from treadle.domain.events import Done
        from treadle.domain.runs import RunOptions
        from treadle.errors import Conflict, RunNotFound
        from treadle.portable.fork import plan_fork, seed_run_id
        from treadle.store.runs import new_run_id, session_id_of
        from treadle.store.sessions import Seed

        run = await self.runs.get(tenant_id, run_id)
        if run is None:
            raise RunNotFound(f"run {run_id!r} not found")
        if run.session_id is None or run.session_seq is None:
            raise Conflict("a sub-agent run has no session to fork from: fork its root run", code="not_forkable")
        plan = plan_fork(await self.runs.events(tenant_id, run_id, limit=100_000), at_seq, prompt)
        await self.refuse_if_paused()
        target = agent or run.agent
        # what the caller gave the original run comes along: its application tools (their calls
        # park for the application's answer, or replay from the record), its narrowing of tools
        # and hosts, its sampling, tier and compaction (a run timeout counts afresh)
        src = await self.steps.read(tenant_id, run_id)
        was = src.run_options if src is not None else RunOptions()
        options = RunOptions(tools=was.tools, sampling=was.sampling, user_tier=was.user_tier,
                             run_timeout_seconds=was.run_timeout_seconds, compaction=was.compaction,
                             deadline_unix=time.time() + was.run_timeout_seconds if was.run_timeout_seconds else None,
                             replay={"run_id": run_id, "after_seq": plan.cut} if replay else None)
        fork = NewRun(tenant_id=tenant_id, agent=target, segments=plan.segments, user_id=run.user_id, def_id=def_id,
                      run_options=options if options.to_json() else None, idempotency_key=idempotency_key,
                      client_tools=src.client_tools if src is not None else None,
                      client_tool_timeout_s=src.client_tool_timeout_s if src is not None else None,
                      allowed_hosts=src.allowed_hosts if src is not None else None)
        if is_team_agent(target):  # the version the fork runs (UnknownAgent: 400)
            await self.teams.pin(fork)
        else:
            await self.substrate.pinning.pin(fork)
        seed_id = new_run_id() if idempotency_key is None else seed_run_id(tenant_id, idempotency_key)
        done = Done("end_turn", {}, "fork seed")
        started = {"agent": target, "run_id": seed_id, "user_id": run.user_id, "forked_from": run_id,
                   "at_seq": plan.cut}
        seed = Seed(seed_id, session_id_of(seed_id), target, run.user_id, fork.def_id, fork.def_content_sha256,
                    started, ((done.type, done.to_payload()),))
        copied = await self.sessions.seed(tenant_id, run.session_id, seed, (run.session_seq, plan.cut))
        if copied:
            fork.session_id = seed.session_id
        new, _ = await self.start_run(fork)
        return {"run_id": new.id, "status": new.status, "session_id": new.session, "forked_from": run_id,
                "at_seq": plan.cut, "events_copied": copied, "agent": new.agent, "def_id": new.def_id,
                "mode": "replay" if replay else "live"}

    async def recap_session(self, tenant_id: str, session_id: str) -> str:
        """loomcycle's RecapSession (History op=recap): a fresh summary of the whole session —
        every run's turns, compactions applied — written by the session's agent's model without
        tools (its `compaction.model` and `target_percentage` when set). Nothing is written here:
        the caller stores it. NotFound, AgentGone, BadRequest (no turns yet), ProviderError."""
        from treadle.engine import compaction
        from treadle.engine.replay import history_messages
        from treadle.errors import AgentGone, BadRequest, NotFound, UnknownAgent

        session = await self.sessions.get(tenant_id, session_id)
        if session is None:
            raise NotFound(f"session {session_id!r} not found", code="session_not_found")
        events, _ = await self._conversation(tenant_id, session_id)
        msgs = history_messages(events)
        if not msgs:
            raise BadRequest("the chat has no transcript to recap yet", code="empty_source")
        new = NewRun(tenant_id=tenant_id, agent=session.agent, segments=[], user_id=session.user_id)
        try:
            await self.substrate.pinning.pin(new)
        except UnknownAgent:
            raise AgentGone(f"the chat's agent {session.agent!r} no longer exists") from None
        agent = await self._summarizing_agent(new)
        settings = compaction.Settings.resolve(agent.config.compaction)
        summary = await self.engine.summarize((session_id, session.agent), agent, msgs, settings, 0, [])
        if not summary:
            from treadle.errors import ProviderError

            raise ProviderError("summarization produced no text", code="summary_empty")
        return summary

    async def ask_model(self, tenant_id: str, run_id: str, agent: str, def_id: str | None, system: str,
                        prompt: str, purpose: str, model: str | None = None) -> str:
        """ports.ModelAsker: one call on the run's agent's route (the version the run is pinned to)."""
        new = NewRun(tenant_id=tenant_id, agent=agent, segments=[], def_id=def_id)
        resolved = await self._summarizing_agent(new)
        return await self.engine.ask((run_id, agent), resolved, system, prompt, purpose, model)

    async def _summarizing_agent(self, new: NewRun) -> ResolvedAgent:
        """The agent `new` was pinned to, when it has a model route to summarize with."""
        from treadle.errors import AgentGone

        resolved = None if is_team_agent(new.agent) else await self.substrate.pinning.pinned_agent(new)
        if resolved is None or resolved.route is None:
            raise AgentGone(f"agent {new.agent!r} has no model to summarize with")
        return resolved

    async def _conversation(self, tenant_id: str, session_id: str) -> tuple[
            list[tuple[int, str, dict[str, Any]]], tuple[int, int] | None]:
        """The session's conversation events (store/sessions.py `CARRIED`) in order, and the place
        (session_seq, seq) of the last event read (None: the session has none)."""
        from treadle.store.sessions import CARRIED

        events: list[tuple[int, str, dict[str, Any]]] = []
        after = (-1, 0)
        while page := await self.sessions.events(tenant_id, session_id, after=after, limit=1000):
            events.extend((e.seq, e.type, e.payload) for _, e in page if e.type in CARRIED)
            after = (page[-1][0], page[-1][1].seq)
        return events, after if after[0] >= 0 else None

    async def cancel_run(self, tenant_id: str, run_id: str, reason: str) -> RunRecord | None:
        """Flag the run and its unfinished sub-agent runs (one statement, the whole subtree); each
        gets a step message so its next step finishes it. A finished run is returned unchanged."""
        for flagged_id, step_no in await self.subruns.request_cancel_tree(tenant_id, run_id, reason):
            await self.sender.always(flagged_id, step_no)  # a parked run has no job: it needs a message
        return await self.runs.get(tenant_id, run_id)


async def _render_prompt(system: str, ctx: ToolContext) -> str:
    """loomcycle's `{{tool:Context.…}}` placeholders (builtins/promptrefs.py; loaded on first use)."""
    from treadle.builtins.promptrefs import render_prompt

    return await render_prompt(system, ctx)
