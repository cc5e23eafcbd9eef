"""Operator configuration: `treadle.yaml` (agents) plus `TREADLE_*` environment settings.

Invalid configuration fails at start with the file, the key path and what is wrong, e.g.
``treadle.yaml: agents.demo.max_iterations: Input should be greater than or equal to 1``.

Models (loomcycle's keys): ``providers:`` declares endpoints (id → driver, base_url, api_key_env,
max_concurrent, timeouts); ``models:`` names aliases (alias → provider + model); ``tiers:`` lists
ordered candidates (aliases or provider + model) tried in turn when one is unavailable. An agent
names ``provider`` + ``model``, or ``model: <alias>``, or ``tier: <name>``. The ``mock`` provider
needs no declaration. References are checked at start (``agents.a.tier: unknown tier 'x'``).

A loomcycle yaml loads as it is, or fails with one message per key treadle does not support
(specs/loomcycle.py): `defaults`, `provider_priority`, `user_tiers`, loomcycle's provider ids
(`ollama` is hosted ollama.com there, `ollama-local` the local daemon) and `category/name` agent
names are honoured.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from treadle.domain import skillmatch
from treadle.domain.ids import is_identifier
from treadle.domain.scopes import IMPLIES
from treadle.domain.substrate import EvaluationScope, SkillSpec
from treadle.envsettings import EnvSettings
from treadle.errors import ConfigError
from treadle.specs.a2a import A2AAgents, A2AClientConfig, A2AServerCard
from treadle.specs.a2a import split_tool_name as split_a2a_tool_name
from treadle.specs.fieldtypes import BaseUrl, DefScope, EnvVarName
from treadle.specs.hosts import HostPatternStr
from treadle.specs.layering import config_layers as config_layers
from treadle.specs.layering import load_config_data as load_config_data
from treadle.specs.layering import merge_layers as merge_layers
from treadle.specs.loomcycle import adapt as adapt_loomcycle
from treadle.specs.mcp import McpServerSpec, check_server_names
from treadle.specs.memory import MemoryConfig
from treadle.specs.mock import MockSettings as MockSettings
from treadle.specs.mock import ScriptTurn as ScriptTurn
from treadle.specs.pricing import PricingConfig
from treadle.specs.volumes import StaticVolumeSpec, VolumeBinding, WorkspaceConfig

if TYPE_CHECKING:
    from treadle.specs.schedule import ScheduleSpec
    from treadle.specs.webhook import WebhookSpec

MOCK_MODELS = ("echo", "tool-caller", "chat-tool", "script", "mock-generic")
#: the built-in provider of code agents (loomcycle's code-js; providers/codejs.py) and its model
CODE_JS = "code-js"
CODE_JS_MODEL = "loomcycle/code-js"
DEFAULT_MAX_ITERATIONS = 16
MemoryScope = Literal["agent", "user", "tenant"]
DEFAULT_MEMORY_SCOPES: tuple[MemoryScope, ...] = ("agent", "user")

# Cold starts: `TreadleConfig` (every process validates its treadle.yaml) and `AgentConfig` (a step
# of a run pinned to an AgentDef validates its body) are built at import. The sections below, and
# the specs they nest (treadle/specs, domain.segments, domain.substrate), say `defer_build=True`:
# TreadleConfig's schema holds them all the same, but their own validators — for a ScheduleDef,
# WebhookDef, VolumeDef, MCPServerDef, SkillDef call, a trigger firing — are built on that first
# use. `treadle.runtime.build_deferred()` builds them all (for a SnapStart INIT).


DriverName = Literal["anthropic", "openai", "deepseek", "ollama", "ollama_cloud", "gemini", "mock"]


class ProviderTimeouts(BaseModel):
    """Seconds. `first_byte` bounds the wait for the response to begin (cold local models are
    slow here), `idle` the silence between two stream chunks, `total` the whole call."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    connect: float = Field(default=10.0, gt=0)
    first_byte: float | None = Field(default=None, gt=0)  # None: the driver's default
    idle: float = Field(default=120.0, gt=0)
    total: float = Field(default=900.0, gt=0)


class ProviderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    driver: DriverName
    base_url: BaseUrl | None = None  # None: the driver's default endpoint
    api_key_env: EnvVarName | None = None  # None: the driver's default variable (e.g. ANTHROPIC_API_KEY)
    #: a tenant credential by name, `${credential.NAME}` (or `$cred:NAME`): a run whose agent, user
    #: or tenant holds that CredentialDef calls with it; otherwise the operator's key (api_key_env)
    api_key: str | None = None
    max_concurrent: int = Field(default=16, ge=1, le=10_000)
    timeouts: ProviderTimeouts = Field(default_factory=ProviderTimeouts)
    retries: int | None = Field(default=None, ge=0, le=10)  # None: TREADLE_PROVIDER_RETRIES
    options: dict[str, Any] = {}  # driver knobs (thinking budget, temperature, ...)

    @field_validator("api_key")
    @classmethod
    def _a_reference(cls, v: str | None) -> str | None:
        if v is not None and credential_name(v) is None:
            raise ValueError("api_key takes a tenant credential by name, ${credential.NAME} (or $cred:NAME) — a key "
                             "itself never goes in treadle.yaml (use api_key_env for the operator's key)")
        return v

    @property
    def credential(self) -> str | None:
        """The CredentialDef name `api_key` references, if any."""
        return credential_name(self.api_key) if self.api_key else None


_CREDENTIAL_REF = re.compile(r"^(?:\$\{credential\.([A-Za-z0-9_-]{1,64})\}|\$cred:([A-Za-z0-9_-]{1,64}))$")


def credential_name(value: str) -> str | None:
    """NAME when `value` is exactly `${credential.NAME}` or `$cred:NAME`, else None."""
    m = _CREDENTIAL_REF.match(value.strip())
    return (m.group(1) or m.group(2)) if m else None


class PrincipalSpec(BaseModel):
    """A static bearer token from the environment (yaml `principals:`): `token_env` names the
    variable holding it; treadle.yaml never holds the token itself."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    tenant: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    subject: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    scopes: list[str] = Field(default_factory=lambda: ["substrate:tenant"], min_length=1, max_length=64)
    token_env: EnvVarName

    @field_validator("scopes")
    @classmethod
    def _known_scopes(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(IMPLIES))
        if unknown:
            raise ValueError(f"unknown scope(s) {', '.join(unknown)} (known: {', '.join(IMPLIES)})")
        return sorted(set(v))

    def token(self) -> str | None:
        """The token, or None while its variable is unset or blank."""
        value = os.environ.get(self.token_env, "")
        return value.strip() or None


class ModelRef(BaseModel):
    """A concrete model on a provider (a `models:` alias, or a tier candidate). loomcycle's
    `model_pattern` (a glob) instead of `model` is kept as the model `pattern:<glob>`, resolved
    when called to the newest model the provider lists (providers/modelpattern.py)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    provider: str = Field(min_length=1)
    model: str = Field(min_length=1)
    options: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _model_pattern(cls, v: Any) -> Any:
        if isinstance(v, dict) and "model_pattern" in v:
            v = dict(v)
            pattern = v.pop("model_pattern")
            if "model" in v:
                raise ValueError("model and model_pattern: name one (model_pattern resolves to a listed model)")
            if not isinstance(pattern, str) or not pattern.strip():
                raise ValueError("model_pattern must be a non-empty glob, e.g. 'qwen3*'")
            v["model"] = "pattern:" + pattern
        return v


class TierConfig(BaseModel):
    """Ordered candidates; `pin_after_success` keeps a run on the candidate that first answered it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    candidates: list[str | ModelRef] = Field(min_length=1)
    pin_after_success: bool = False

    @model_validator(mode="before")
    @classmethod
    def _list_form(cls, v: Any) -> Any:
        return {"candidates": v} if isinstance(v, list) else v


class SamplingConfig(BaseModel):
    """loomcycle's `sampling:` (an agent's; a run's merges over it per field), passed to the provider."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=1)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = None
    stop: list[str] | None = Field(default=None, max_length=8)


class CompactionConfig(BaseModel):
    """loomcycle's `compaction:` (an agent's; a run's and a spawn's merge over it per field,
    agent < run < spawn): summarize the older turns to free the model's context window
    (engine/compaction.py). Unset fields take loomcycle's defaults at use."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    #: AUTO-compaction (manual and `Context op=compact` work without it); default off
    enabled: bool | None = None
    #: the summary aims at ~N % of the summarized span's length (default 10)
    target_percentage: int | None = Field(default=None, ge=10, le=50)
    #: the last N messages are kept verbatim, snapped back to a fresh user turn (default 4; 0: none)
    keep_last_n: int | None = Field(default=None, ge=0)
    #: pin the first user message (the task) verbatim (default true)
    keep_first: bool | None = None
    #: auto-compact when the previous iteration's input + cache tokens reach N % of the window (default 80)
    autocompact_at_pct: int | None = Field(default=None, ge=50, le=95)
    #: the summary's model, on the same provider (default: the run's)
    model: str | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _memory_flush(cls, v: Any) -> Any:
        if isinstance(v, dict) and "memory_flush" in v:
            raise ValueError("memory_flush: treadle has no memory consolidation queue to bank a compacted span "
                             "into; omit memory_flush")
        return v

    def merged(self, over: CompactionConfig | Mapping[str, Any] | None) -> CompactionConfig:
        """`over`'s set fields win, field by field (loomcycle's MergeCompaction)."""
        if over is None:
            return self
        fields = over.model_dump(exclude_none=True) if isinstance(over, CompactionConfig) else {
            k: v for k, v in over.items() if v is not None}
        return self.model_copy(update=fields)


class UserTierConfig(BaseModel):
    """loomcycle's `user_tiers.<name>`: which providers (in order) and which tier candidates a
    run of that user tier may use; `fallback_on_error: false` keeps it on the first candidate,
    `max_fallback_attempts` bounds the switches, `retry_attempts` is the same-provider retry budget
    of each candidate (a retryable error: 429, 5xx, a timeout) for runs of that user tier."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    provider_priority: list[str] | None = None
    tiers: dict[str, list[str | ModelRef]] = {}
    fallback_on_error: bool = True
    max_fallback_attempts: int | None = Field(default=None, ge=0, le=32)
    #: None: each provider's `retries` (else TREADLE_PROVIDER_RETRIES)
    retry_attempts: int | None = Field(default=None, ge=0, le=10)


class ConcurrencyConfig(BaseModel):
    """loomcycle's `concurrency:`, as admission caps on a durable queue (docs/loomcycle.md): a new
    top-level run is refused with 429 `backpressure` while its tenant has `max_concurrent_runs +
    max_queue_depth` runs queued or running, and with 429 `per_user_quota_exhausted` (Retry-After
    5) while its user has `max_concurrent_runs_per_user`. Parked runs hold nothing and do not
    count; how many steps compute at once is TREADLE_WORKERS. Admission answers at once, so any
    `queue_timeout_ms` holds. 0 = no cap."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    max_concurrent_runs: int = Field(default=0, ge=0, le=1_000_000)
    max_queue_depth: int = Field(default=0, ge=0, le=1_000_000)
    queue_timeout_ms: int = Field(default=0, ge=0)
    max_concurrent_runs_per_user: int = Field(default=0, ge=0, le=1_000_000)
    #: loomcycle's per-provider gate queue: treadle queues provider calls without a cap (refused if set)
    provider_queue_depth: int = Field(default=0, ge=0)
    provider_queue_timeout_ms: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _no_provider_queue(self) -> ConcurrencyConfig:
        for name in ("provider_queue_depth", "provider_queue_timeout_ms"):
            if getattr(self, name):
                raise ValueError(f"{name}: not supported by treadle (a provider's max_concurrent calls wait "
                                 "without a queue cap or timeout); remove it")
        return self

    @property
    def live_cap(self) -> int:
        """The tenant's live (queued + running) runs a new one is refused at; 0: no cap."""
        return self.max_concurrent_runs + self.max_queue_depth if self.max_concurrent_runs else 0


class AgentChannelACL(BaseModel):
    """loomcycle's per-agent Channel allowlists (`channels: {publish: [...], subscribe: [...]}`):
    each entry a channel name or a `prefix/*` wildcard (domain/channelacl.py). With the block, a side
    left empty allows nothing on that side (loomcycle's default-deny); without it, the agent may use
    every channel of its tenant (treadle's rule, docs/loomcycle.md)."""

    model_config = ConfigDict(extra="forbid")
    publish: list[str] = []
    subscribe: list[str] = []

    @field_validator("publish", "subscribe")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for pat in v:
            wildcard_ok = "*" not in pat or (pat.endswith("/*") and pat.count("*") == 1)
            if not pat.strip() or ".." in pat or "//" in pat or not wildcard_ok:
                raise ValueError(f"{pat!r}: a channel name, or a prefix ending in /* (no '..', '//' or other '*')")
        return v


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str = "mock"
    model: str = "echo"
    tier: str | None = None
    description: str = ""
    system_prompt: str = ""
    tools: list[str] = []
    max_iterations: int = Field(default=DEFAULT_MAX_ITERATIONS, ge=1, le=1 << 20)
    max_tokens: int = Field(default=4096, ge=1)
    memory_scopes: list[MemoryScope] = Field(default_factory=lambda: list(DEFAULT_MEMORY_SCOPES))
    # which ScheduleDef / WebhookDef targets the agent's tools may author: self | named:<agent> | any (empty = deny)
    schedule_def_scopes: list[DefScope] = []
    webhook_def_scopes: list[DefScope] = []
    # substrate (default-deny): which AgentDefs / SkillDefs its tools may author (self | named:<name> | any),
    # and what its Evaluation tool may do (submit_self | submit_descendants | submit_any | read_any)
    agent_def_scopes: list[DefScope] = []
    skill_def_scopes: list[DefScope] = []
    evaluation_scopes: list[EvaluationScope] = []
    # History (loomcycle's, default-deny): whose past chats its History tool reaches (self | user | tenant)
    history_scope: list[Literal["self", "user", "tenant"]] = []
    # the skills it may use (domain/skillmatch.py): a plain name is bundled into the system prompt (yaml
    # `skills:` or a promoted SkillDef); `+pat`/`-pat`/globs (`review/*`) are loaded on demand (tool Skill)
    skills: list[str] = Field(default=[], max_length=32)
    # byte quota of this agent's `agent` Memory scope (default: memory.max_scope_bytes)
    memory_quota_bytes: int | None = Field(default=None, ge=16)
    # SQL memory (loomcycle's sql_scopes, default-deny): the scopes its Memory sql_* ops may use,
    # and a byte quota per scope overriding memory.sql.quota_bytes
    sql_scopes: list[Literal["agent", "user", "run", "tenant"]] = []
    # loomcycle's: append {{tool:Context.capabilities}} and {{tool:Context.guide}} to the system
    # prompt where it does not place them (specs/toolrefs.py)
    inject_tool_guide: bool = False
    # loomcycle's per-agent web-search fallback list: a full replacement of `search_priority`
    search_providers: list[str] = []
    # loomcycle's per-agent Channel allowlists (None: every channel of the tenant)
    channels: AgentChannelACL | None = None
    sql_quota_bytes: int | None = Field(default=None, ge=8192)
    # sub-agents (tool Agent): how many children of one call run at once
    max_concurrent_children: int = Field(default=4, ge=1, le=32)
    # resident sub-agents (Agent op=open): how many one run holds open, and their default idle TTL
    max_resident_children: int = Field(default=8, ge=1, le=64)
    resident_idle_ttl_seconds: int = Field(default=1800, ge=1, le=30 * 86_400)
    # HTTP / WebFetch: the hosts this agent may reach, within the operator's `http.allowed_hosts`
    # (None: the operator's list; []: none). It narrows, never widens (security/network.py).
    allowed_hosts: list[HostPatternStr] | None = Field(default=None, max_length=256)
    # the volumes its file tools (Read, Write, Edit, Grep, Glob, NotebookEdit, Bash) reach (none: no files)
    volumes: list[VolumeBinding] = Field(default=[], max_length=32)
    # which VolumeDefs its tools may author: named:<volume> | any (empty = deny)
    volume_def_scopes: list[DefScope] = []
    mock: MockSettings = Field(default_factory=MockSettings)
    #: loomcycle's: sampling passed to the provider; no iteration cap but a backstop of 2^20
    sampling: SamplingConfig | None = None
    #: loomcycle's context compaction (engine/compaction.py; docs/conversations.md)
    compaction: CompactionConfig | None = None
    unbounded_iterations: bool = False
    #: loomcycle's reasoning hint, mapped as loomcycle's drivers do: anthropic thinking budget
    #: (medium 2048, high 8192; low and haiku: none), openai reasoning_effort, gemini thinkingBudget
    effort: Literal["low", "medium", "high"] | None = None
    #: a code agent (`provider: code-js`, docs/code-agents.md): its JavaScript inline (`code`, or
    #: loomcycle's AgentDef spelling `code_body`); absent: `<code_agents.root>/<agent>/index.js`
    code: str | None = Field(default=None, max_length=1_048_576)
    #: the whole run's wall-clock budget: a code agent's (default code_agents.run_timeout_seconds); an
    #: LLM agent's run fails `run_timeout` at its first step past it (a model call in flight finishes)
    run_timeout_seconds: int | None = Field(default=None, ge=1, le=86_400)
    #: loomcycle's maintenance plumbing mark: this agent's sessions are left out of memory
    #: consolidation's scan and of History list / search / related (`include_internal` shows them)
    internal: bool = False
    #: loomcycle's grant of Memory's consolidation ops (cursor_*, supersede, pending_*; default-deny)
    memory_consolidation: bool = False
    #: loomcycle's opt-out of its auto-added Context tool: treadle adds no tool an agent does not list,
    #: so this holds for every treadle agent; accepted as loomcycle writes it
    disable_context: bool = False

    @field_validator("system_prompt")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        """loomcycle's boot check of `{{tool:…}}` placeholders (specs/toolrefs.py)."""
        if "{{" in v:
            from treadle.specs.toolrefs import problems

            found = problems(v)
            if found:
                raise ValueError("; ".join(found))
        return v

    @model_validator(mode="before")
    @classmethod
    def _code_body(cls, data: Any) -> Any:
        if isinstance(data, dict) and "code_body" in data:
            data = dict(data)
            body = data.pop("code_body")
            if "code" in data and data["code"] != body:
                raise ValueError("give `code` or `code_body`, not both")
            data["code"] = body
        return data

    @model_validator(mode="after")
    def _provider_model(self) -> AgentConfig:
        if self.provider == CODE_JS:
            if "model" not in self.model_fields_set:
                self.model = CODE_JS_MODEL
            if "max_iterations" not in self.model_fields_set:
                self.unbounded_iterations = True  # loomcycle: the run's time budget bounds a code agent
        elif self.code is not None:
            raise ValueError("code is for code agents (provider: code-js)")
        if self.tier is not None and self.model_fields_set & {"provider", "model"}:
            raise ValueError("tier: replaces provider/model; give one or the other")
        if self.tier is None and self.provider == "mock" and self.model == "script" and self.mock.script is None:
            raise ValueError("model 'script' needs mock.script")
        return self


class ChannelConfig(BaseModel):
    """A channel declared by the operator (shared by every tenant)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    scope: Literal["agent", "user", "global"] = "global"
    semantic: Literal["queue", "broadcast"] = "broadcast"
    default_ttl: int | None = Field(default=None, gt=0, description="seconds")
    max_messages: int | None = Field(default=None, gt=0)
    description: str = ""


#: the longest an Interruption.ask may wait (a parked run costs nothing while it waits)
INTERRUPTION_TIMEOUT_CAP_MS = 30 * 86_400_000


RETENTION_CLASSES = ("runs", "channel_messages", "memory", "responses")


class TenantRetention(BaseModel):
    """One tenant's overrides: days per class (null: keep forever; absent: the default)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    runs: int | None = Field(default=None, ge=1, le=36_500)
    channel_messages: int | None = Field(default=None, ge=1, le=36_500)
    memory: int | None = Field(default=None, ge=1, le=36_500)
    responses: int | None = Field(default=None, ge=1, le=36_500)


class RetentionArchive(BaseModel):
    """`retention.archive`: before a batch is deleted, its rows are written as JSON Lines into this
    treadle.yaml volume (persistent; in the cloud shape its files are S3 objects), in each row's
    tenant's instance of it, under `retention/<class>/u/<user>/<UTC day>/<batch>.jsonl` (rows of no
    user under `retention/<class>/_/…`) — so a subject's erasure deletes its archived rows too."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    volume: str = Field(min_length=1, max_length=128)


class RetentionConfig(BaseModel):
    """How long data is kept, per class: finished runs (`days`: with their transcripts, questions,
    inputs and the stored OpenAI responses that are their turns), channel messages
    (`channel_messages_days`, since published), memory (`memory_days`, since last written; SQL
    memory's agent, user and tenant scopes since last used: the whole scope is dropped) and
    stored OpenAI responses (`responses_days`, since created). `tenants.<id>` overrides per tenant:
    a number (or null: keep forever) overrides `days`, a mapping `{runs, channel_messages, memory,
    responses}` overrides each class it names. Enforced by the sweeper (sidecar) and the maintenance function (cloud) in
    bounded batches (GET /v1/_retention reports it)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    days: int | None = Field(default=None, ge=1, le=36_500)
    channel_messages_days: int | None = Field(default=None, ge=1, le=36_500)
    memory_days: int | None = Field(default=None, ge=1, le=36_500)
    responses_days: int | None = Field(default=None, ge=1, le=36_500)
    tenants: dict[str, int | TenantRetention | None] = {}
    #: archive each batch to a volume before deleting it (None: delete only)
    archive: RetentionArchive | None = None

    @field_validator("tenants")
    @classmethod
    def _tenant_days(cls, v: dict[str, int | TenantRetention | None]) -> dict[str, int | TenantRetention | None]:
        for tenant, days in v.items():
            if not is_identifier(tenant):
                raise ValueError(f"tenant {tenant!r} must match [A-Za-z0-9_-]{{1,128}}")
            if isinstance(days, int) and not 1 <= days <= 36_500:
                raise ValueError(f"tenants.{tenant}: days must be in 1..36500 (or null: keep forever)")
        return v

    def default(self, cls: str) -> int | None:
        return {"runs": self.days, "channel_messages": self.channel_messages_days, "memory": self.memory_days,
                "responses": self.responses_days}[cls]

    def overrides(self, cls: str) -> dict[str, int | None]:
        """The tenants that override class `cls`: tenant → days (None: keep forever)."""
        out: dict[str, int | None] = {}
        for tenant, rule in self.tenants.items():
            if isinstance(rule, TenantRetention):
                if cls in rule.model_fields_set:
                    out[tenant] = getattr(rule, cls)
            elif cls == "runs":
                out[tenant] = rule
        return out

    def policy(self, tenant_id: str) -> dict[str, int | None]:
        """Days per class for one tenant (None: kept forever)."""
        out: dict[str, int | None] = {}
        for c in RETENTION_CLASSES:
            ov = self.overrides(c)
            out[c] = ov[tenant_id] if tenant_id in ov else self.default(c)
        return out

    @property
    def active(self) -> bool:
        return any(self.default(c) is not None or any(d is not None for d in self.overrides(c).values())
                   for c in RETENTION_CLASSES)


class InterruptionConfig(BaseModel):
    """`interruption:` — the operator's bounds on Interruption.ask (loomcycle's keys)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    default_timeout_ms: int = Field(default=3_600_000, ge=1, le=INTERRUPTION_TIMEOUT_CAP_MS)  # 1 h
    max_timeout_ms: int = Field(default=86_400_000, ge=1, le=INTERRUPTION_TIMEOUT_CAP_MS)  # 24 h
    max_pending_per_run: int = Field(default=10, ge=1, le=1000)

    @model_validator(mode="after")
    def _default_within_max(self) -> InterruptionConfig:
        if self.default_timeout_ms > self.max_timeout_ms:
            raise ValueError("default_timeout_ms must not exceed max_timeout_ms")
        return self


class HttpConfig(BaseModel):
    """`http:` — the operator's floor for the HTTP and WebFetch tools (security/network.py): the
    hosts agents may reach (with `TREADLE_HTTP_ALLOWED_HOSTS`; an agent's and a run's
    `allowed_hosts` narrow it) and the limits of each call."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    allowed_hosts: list[HostPatternStr] = Field(default=[], max_length=1024)
    max_request_bytes: int = Field(default=256 * 1024, ge=1, le=64 << 20)
    max_response_bytes: int = Field(default=256 * 1024, ge=1, le=64 << 20)
    #: WebFetch reads this much of a page before converting it (its output is capped at max_response_bytes)
    fetch_max_bytes: int = Field(default=2 << 20, ge=1, le=64 << 20)
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    max_redirects: int = Field(default=5, ge=0, le=20)


class SearchConfig(BaseModel):
    """`search:` — the WebSearch tool's provider. `searxng`: a SearXNG instance's JSON API
    (`GET {base_url}/search?q=…&format=json`; the instance must list `json` in `search.formats`),
    with `headers` (tenant credentials by name) on every request."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    driver: Literal["searxng"]
    base_url: BaseUrl
    timeout_seconds: float = Field(default=15.0, gt=0, le=120)
    #: sent with every search request (e.g. the auth proxy in front of an instance); a value may
    #: reference a tenant credential, `Bearer ${credential.NAME}` (or `$cred:NAME`), resolved for
    #: the calling run — a header whose credential the run's tenant lacks is left out
    headers: dict[str, str] = Field(default={}, max_length=32)


SearchProviderId = Literal["brave", "serper", "exa", "tavily", "searxng"]


class SearchProviderEntry(BaseModel):
    """One `search_providers:` entry (loomcycle's RFC BB): `base_url` is required for `searxng`
    (its instance) and, on a keyed provider, replaces the vendor's endpoint (loomcycle ignores it
    there). The key of brave / serper / exa / tavily is a CredentialDef named BRAVE_API_KEY /
    SERPER_API_KEY / EXA_API_KEY / TAVILY_API_KEY held by the run's agent, user or tenant, else the
    operator's environment variable of that name (builtins/searchcircuit.py)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    base_url: BaseUrl | None = None


#: the sections a lazy load (`parse_config(..., lazy=True)`: the cloud functions) leaves unvalidated
#: until first read, with their defaults — the sections few invocations read (triggers, MCP servers,
#: volumes, the HTTP and search tools' limits, principals, retention). Their models' schemas are
#: then built on that first read, and the spec modules behind them (schedule, cron, webhook) imported
#: then: a worker never builds a webhook's validator. A full load validates every section at once.
LAZY_SECTIONS: tuple[str, ...] = ("scheduled_runs", "webhooks", "interruption", "http", "search", "principals",
                                  "retention", "mcp_servers", "volumes", "workspace")


class CodeAgentsConfig(BaseModel):
    """Code agents (docs/code-agents.md): the operator's switch (off by default) and limits."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    enabled: bool = False
    #: where `<agent>/index.js` is read when an agent has no inline `code` (relative: to the cwd)
    root: str = "agent_code"
    #: whole-run wall-clock budget across replays (loomcycle's default 120 s)
    run_timeout_seconds: float = Field(default=120.0, gt=0, le=86_400)
    #: the longest one replay may compute (a `while(true)` ends here: code_agent_timeout)
    step_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    #: the JavaScript heap cap of one replay (code_agent_memory beyond it)
    memory_mb: int = Field(default=64, ge=4, le=4096)
    #: loomcycle's LOOMCYCLE_CODE_AGENTS_DETERMINISTIC: one seed and clock anchor for every run
    deterministic: bool = False


class TreadleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channels: dict[str, ChannelConfig] = {}
    #: code agents (`provider: code-js`; providers/codejs.py)
    code_agents: CodeAgentsConfig = Field(default_factory=CodeAgentsConfig)
    providers: dict[str, ProviderConfig] = {}
    models: dict[str, ModelRef] = {}
    tiers: dict[str, TierConfig] = {}
    agents: dict[str, AgentConfig] = {}
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    skills: dict[str, SkillSpec] = {}
    #: team workflows (docs/teams.md): name → graph; the static base of TeamDef, validated at start
    teams: dict[str, dict[str, Any]] = {}
    #: loomcycle's provider walk order and per-user-class routing (specs/loomcycle.py)
    provider_priority: list[str] = []
    user_tiers: dict[str, UserTierConfig] = {}
    #: loomcycle's `a2a_server_cards:` (specs/a2a.py): the agents served over A2A (api/a2a/); none by default
    a2a_server_cards: dict[str, A2AServerCard] = Field(default={}, max_length=1)
    #: loomcycle's `a2a_agents:` (specs/a2a.py): remote A2A peers as tools `a2a__<peer>__<skill>` (treadle/a2a/)
    a2a_agents: A2AAgents = Field(default={}, max_length=256)
    #: treadle's `a2a_client:` (specs/a2a.py): where peers push task updates to this treadle
    a2a_client: A2AClientConfig = Field(default_factory=A2AClientConfig)
    #: the operator's price table (specs/pricing.py): usage is priced when recorded (GET /v1/_usage)
    pricing: PricingConfig | None = None
    #: loomcycle's `concurrency:` admission caps (ConcurrencyConfig); None: no cap
    concurrency: ConcurrencyConfig | None = None
    #: loomcycle's web-search catalog with fallback (builtins/searchcircuit.py): the enabled
    #: providers, and the order WebSearch tries them in (default: the enabled ids, sorted)
    search_providers: dict[SearchProviderId, SearchProviderEntry] = {}
    search_priority: list[str] = []
    # The LAZY_SECTIONS as given (None: absent), each read through the property of its name, which
    # validates it on first read (a full load has validated and set them all: parse_config).
    raw_scheduled_runs: Any = Field(default=None, alias="scheduled_runs")
    raw_webhooks: Any = Field(default=None, alias="webhooks")
    raw_interruption: Any = Field(default=None, alias="interruption")
    raw_http: Any = Field(default=None, alias="http")
    raw_search: Any = Field(default=None, alias="search")
    raw_principals: Any = Field(default=None, alias="principals")
    raw_retention: Any = Field(default=None, alias="retention")
    raw_mcp_servers: Any = Field(default=None, alias="mcp_servers")
    raw_volumes: Any = Field(default=None, alias="volumes")
    raw_workspace: Any = Field(default=None, alias="workspace")

    @cached_property
    def source(self) -> str:
        """Where it was read from (parse_config sets it; not a field: equal configs from two files are equal)."""
        return "treadle.yaml"

    @cached_property
    def scheduled_runs(self) -> dict[str, ScheduleSpec]:
        return self._section("scheduled_runs")  # type: ignore[no-any-return]

    @cached_property
    def webhooks(self) -> dict[str, WebhookSpec]:
        return self._section("webhooks")  # type: ignore[no-any-return]

    @cached_property
    def interruption(self) -> InterruptionConfig:
        return self._section("interruption")  # type: ignore[no-any-return]

    @cached_property
    def http(self) -> HttpConfig:
        return self._section("http")  # type: ignore[no-any-return]

    @cached_property
    def search(self) -> SearchConfig | None:
        return self._section("search")  # type: ignore[no-any-return]

    @cached_property
    def principals(self) -> dict[str, PrincipalSpec]:
        return self._section("principals")  # type: ignore[no-any-return]

    @cached_property
    def retention(self) -> RetentionConfig:
        return self._section("retention")  # type: ignore[no-any-return]

    @cached_property
    def mcp_servers(self) -> dict[str, McpServerSpec]:
        """MCP servers whose tools agents may call as mcp__<server>__<tool> (specs/mcp.py)."""
        return self._section("mcp_servers")  # type: ignore[no-any-return]

    @cached_property
    def volumes(self) -> dict[str, StaticVolumeSpec]:
        return self._section("volumes")  # type: ignore[no-any-return]

    @cached_property
    def workspace(self) -> WorkspaceConfig:
        return self._section("workspace")  # type: ignore[no-any-return]

    def _section(self, name: str) -> Any:
        """A lazy section, validated (ConfigError on the first read of an invalid one)."""
        value, errors = _validate_section(name, getattr(self, f"raw_{name}"))
        if errors:
            raise ConfigError(_invalid(self.source, [], errors))
        return value

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, v: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in v:
            if not is_agent_name(name):
                raise ValueError(f"agent name {name!r} must match [A-Za-z0-9_-]{{1,128}} "
                                 "(or loomcycle's category/name)")
        return v

    @field_validator("providers", "models", "tiers")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name in v:
            if not is_identifier(name):
                raise ValueError(f"name {name!r} must match [A-Za-z0-9_-]{{1,128}}")
        return v

    def provider_ids(self) -> list[str]:
        extra = [CODE_JS] if self.code_agents.enabled else []
        return ["mock", *extra, *(p for p in self.providers if p not in ("mock", CODE_JS))]

    def knows_user_tier(self, name: str) -> bool:
        """A run's `user_tier`: a `user_tiers:` entry, or (without that block) a `tiers:` one."""
        return name in self.user_tiers if self.user_tiers else name in self.tiers

    def agent_provider(self, agent: AgentConfig) -> str:
        """The provider of an agent's `model`: `provider:` when given; else the mock for the mock's
        own models; else the one configured non-mock provider (with several, reference_errors asks
        for `provider:`) — a vendor model name never silently means the mock."""
        if "provider" in agent.model_fields_set or agent.model in MOCK_MODELS:
            return agent.provider
        real = [pid for pid, p in self.providers.items() if p.driver != "mock"]
        return real[0] if len(real) == 1 else agent.provider

    def _deref(self, c: str | ModelRef) -> ModelRef:
        return self.models[c] if isinstance(c, str) else c

    def _search_errors(self) -> list[tuple[str, str]]:
        """loomcycle's search catalog checks (its config.Validate), and one provider setup at a time."""
        errs: list[tuple[str, str]] = []
        enabled = list(self.search_providers)
        if enabled and self.raw_search is not None:
            errs.append(("search", "give `search:` (one provider) or loomcycle's `search_providers:`, not both"))
        searx = self.search_providers.get("searxng")
        if searx is not None and searx.base_url is None:
            errs.append(("search_providers.searxng.base_url",
                         "base_url is required for the self-hosted SearXNG provider"))
        for i, pid in enumerate(self.search_priority):
            if pid not in enabled:
                errs.append((f"search_priority.{i}", f"{pid!r} is not an enabled search_providers entry"))
        for name, agent in self.agents.items():
            for i, pid in enumerate(agent.search_providers):
                if pid not in enabled:
                    errs.append((f"agents.{name}.search_providers.{i}",
                                 f"{pid!r} is not an enabled search_providers entry"))
        return errs

    def reference_errors(self, *, lazy: bool = False) -> list[tuple[str, str]]:
        """Cross-references the schema cannot see: providers, aliases, tiers, mock models. `lazy`:
        leave out those that read a lazy section (the triggers' agents, the volume bindings)."""
        errs: list[tuple[str, str]] = []
        known = self.provider_ids()
        if "mock" in self.providers and self.providers["mock"].driver != "mock":
            errs.append(("providers.mock.driver", "the id 'mock' is the built-in mock provider; pick another id"))

        def check_ref(path: str, ref: ModelRef) -> None:
            if ref.provider not in known:
                errs.append((f"{path}.provider", f"unknown provider {ref.provider!r} (configured: {', '.join(known)})"))
            elif self.driver(ref.provider) == "mock" and ref.model not in MOCK_MODELS:
                errs.append((f"{path}.model", f"unknown mock model {ref.model!r} (one of {', '.join(MOCK_MODELS)})"))

        for alias, ref in self.models.items():
            check_ref(f"models.{alias}", ref)
        for tier, spec in self.tiers.items():
            for i, c in enumerate(spec.candidates):
                if isinstance(c, str):
                    if c not in self.models:
                        msg = f"unknown model alias {c!r}" + _listing(self.models)
                        errs.append((f"tiers.{tier}.candidates.{i}", msg))
                else:
                    check_ref(f"tiers.{tier}.candidates.{i}", c)
        for agent_name, agent in self.agents.items():  # default-deny: an a2a__ tool names a configured peer
            for i, t in enumerate(agent.tools):
                peer = split_a2a_tool_name(t)
                if peer is not None and peer[0] not in self.a2a_agents:
                    errs.append((f"agents.{agent_name}.tools.{i}",
                                 f"unknown A2A peer {peer[0]!r}" + _listing(self.a2a_agents)))
        for i, p in enumerate(self.provider_priority):
            if p not in known:
                errs.append((f"provider_priority.{i}", f"unknown provider {p!r} (configured: {', '.join(known)})"))
        for ut_name, ut in self.user_tiers.items():
            for i, p in enumerate(ut.provider_priority or []):
                if p not in known:
                    errs.append((f"user_tiers.{ut_name}.provider_priority.{i}",
                                 f"unknown provider {p!r} (configured: {', '.join(known)})"))
            for tier, cands in ut.tiers.items():
                for i, c in enumerate(cands):
                    if isinstance(c, str):
                        if c not in self.models:
                            errs.append((f"user_tiers.{ut_name}.tiers.{tier}.{i}",
                                         f"unknown model alias {c!r}" + _listing(self.models)))
                    else:
                        check_ref(f"user_tiers.{ut_name}.tiers.{tier}.{i}", c)
        errs.extend(self._search_errors())
        if CODE_JS in self.providers:
            errs.append((f"providers.{CODE_JS}", f"the id {CODE_JS!r} is the built-in provider of code agents"))
        for name, agent in self.agents.items():
            if agent.provider == CODE_JS and agent.tier is None:
                if not self.code_agents.enabled:
                    errs.append((f"agents.{name}.provider", "code agents are disabled: set code_agents.enabled: "
                                                            "true (loomcycle's LOOMCYCLE_CODE_AGENTS_ENABLED)"))
                elif agent.model != CODE_JS_MODEL:
                    errs.append((f"agents.{name}.model", f"a code agent's model is {CODE_JS_MODEL!r}"))
                continue
            if agent.tier is not None:
                if agent.tier not in self.tiers:
                    hint = "" if self.tiers else ("; a loomcycle bundle takes its tiers from a base layer: "
                                                  "--config base.yaml --config bundle.yaml")
                    errs.append((f"agents.{name}.tier", f"unknown tier {agent.tier!r}" + _listing(self.tiers) + hint))
                continue  # (what a user tier leaves it: engine/model_routes.py route_errors)
            explicit = "provider" in agent.model_fields_set
            if not explicit and agent.model in self.models:
                continue
            if not explicit and agent.model not in MOCK_MODELS and self.agent_provider(agent) == agent.provider:
                real = [pid for pid, p in self.providers.items() if p.driver != "mock"]
                fix = (f"add `provider:` (one of {', '.join(real)})" if real else
                       "declare a `providers:` entry (e.g. {driver: anthropic}) and name it in `provider:`")
                aliases = f", or use a `models:` alias ({', '.join(self.models)})" if self.models else ""
                mocks = ", ".join(MOCK_MODELS)
                errs.append((f"agents.{name}.model", f"{agent.model!r} names no provider: {fix}{aliases}; "
                                                     f"without one only the mock's models work ({mocks})"))
                continue
            provider = self.agent_provider(agent)
            if provider not in known:
                errs.append(
                    (f"agents.{name}.provider", f"unknown provider {provider!r} (configured: {', '.join(known)})")
                )
            elif self.driver(provider) == "mock" and agent.model not in MOCK_MODELS:
                hint = "" if explicit or not self.models else f"; model aliases: {', '.join(self.models)}"
                errs.append(
                    (
                        f"agents.{name}.model",
                        f"unknown mock model {agent.model!r} (one of {', '.join(MOCK_MODELS)}{hint})",
                    )
                )
        errs += _substrate_errors(self)
        if not lazy:
            errs += _trigger_errors(self)
            errs += _volume_errors(self)
        return errs

    def driver(self, provider_id: str) -> str:
        if provider_id == CODE_JS:
            return CODE_JS
        cfg = self.providers.get(provider_id)
        return cfg.driver if cfg is not None else "mock"


def _trigger_errors(config: TreadleConfig) -> list[tuple[str, str]]:
    """`scheduled_runs:` / `webhooks:` names and the agents they start."""
    errs: list[tuple[str, str]] = []
    for section, specs in (("scheduled_runs", config.scheduled_runs), ("webhooks", config.webhooks)):
        for name, spec in specs.items():
            if not is_identifier(name):
                errs.append((f"{section}.{name}", "name must match [A-Za-z0-9_-]{1,128}"))
            if spec.agent is not None and spec.agent not in config.agents:
                errs.append((f"{section}.{name}.agent", f"unknown agent {spec.agent!r}" + _listing(config.agents)))
    return errs


def _substrate_errors(config: TreadleConfig) -> list[tuple[str, str]]:
    """`memory:` (embedder package present, limits consistent), skill names and agents' `skills:`."""
    errs = config.memory.problems()
    for name in config.skills:
        if (problem := skillmatch.name_problem(name)) is not None:
            errs.append((f"skills.{name}", problem + " (segments of [A-Za-z0-9_-] joined by /)"))
    for agent_name, agent in config.agents.items():
        for i, skill in enumerate(agent.skills):
            if (problem := skillmatch.pattern_problem(skill)) is not None:
                errs.append((f"agents.{agent_name}.skills.{i}", problem))
        if len(set(agent.skills)) != len(agent.skills):
            errs.append((f"agents.{agent_name}.skills", "names a skill twice"))
    return errs


def _volume_errors(config: TreadleConfig) -> list[tuple[str, str]]:
    """`volumes:` names, one default at most; agents' `volumes:` name declared volumes, once each."""
    errs: list[tuple[str, str]] = []
    for name in config.volumes:
        if not is_identifier(name):
            errs.append((f"volumes.{name}", "name must match [A-Za-z0-9_-]{1,128}"))
    roots = [n for n, v in config.volumes.items() if v.dynamic_root]
    if len(roots) > 1:
        errs.append(("volumes", f"at most one volume may be dynamic_root: true (got {', '.join(roots)})"))
    defaults = [n for n, v in config.volumes.items() if v.default]
    if len(defaults) > 1:
        errs.append(("volumes", f"at most one volume may be default: true (got {', '.join(defaults)})"))
    archive = config.retention.archive
    if archive is not None:
        volume = config.volumes.get(archive.volume)
        if volume is None:
            errs.append(("retention.archive.volume", f"unknown volume {archive.volume!r}" + _listing(config.volumes)))
        elif volume.ephemeral:
            errs.append(("retention.archive.volume", f"volume {archive.volume!r} is ephemeral: the archive needs a "
                                                     "persistent one"))
    for agent_name, agent in config.agents.items():
        names = [b.name for b in agent.volumes]
        for i, b in enumerate(agent.volumes):
            if b.name not in config.volumes:
                errs.append((f"agents.{agent_name}.volumes.{i}",
                             f"unknown volume {b.name!r}" + _listing(config.volumes)))
        if len(set(names)) != len(names):
            errs.append((f"agents.{agent_name}.volumes", "binds a volume twice"))
        if sum(1 for b in agent.volumes if b.default) > 1:
            errs.append((f"agents.{agent_name}.volumes", "at most one binding may be default: true"))
    return errs


def _listing(names: dict[str, Any]) -> str:
    return f" (defined: {', '.join(names)})" if names else " (none defined)"


class Settings(EnvSettings):
    """Process settings from the environment (`TREADLE_*`, plus `DATABASE_URL`)."""

    config: Path = Path("treadle.yaml")
    home: Path = Path(".treadle")
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    listen: str = "127.0.0.1:8787"
    #: claimers on the Postgres queue; each claimed step then runs as a task of its own
    workers: int = Field(default=8, ge=0, le=256)
    #: steps in flight at once per process (waiting on models and external tools included): a step
    #: that waits holds no worker and no database connection, only this much room
    max_in_flight_steps: int = Field(default=4096, ge=1, le=100_000)
    auth_token: str | None = None
    #: the key of operator tokens' keyed hash (set it; see treadle.security.tokens)
    token_pepper: str | None = None
    #: how long a resolved bearer is remembered per process (0 = look up every request)
    auth_cache_seconds: float = Field(default=10.0, ge=0, le=300)
    #: fairness on the Postgres queue (0 = no cap): at most this many runs of one tenant (of one
    #: user) hold a worker at once; the rest stay queued, never refused
    tenant_max_running: int = Field(default=0, ge=0, le=100_000)
    user_max_running: int = Field(default=0, ge=0, le=100_000)
    #: serve /docs, /redoc and /openapi.json without a token even when auth is on
    public_docs: bool = False
    #: redact known secret values before anything is stored or logged (treadle.security.redact)
    redact_secrets: bool = True
    #: more environment variables whose values are secrets (comma-separated names), beyond those
    #: named *_KEY, *_TOKEN, *_SECRET, *_AUTH, *_PASSWORD, *_CREDENTIAL(S), *_DSN
    redact_env: str = ""
    #: redact secret-shaped strings (provider key formats, Bearer tokens, password=...) at rest too;
    #: outbound they are always scrubbed (treadle.security.redact)
    redact_patterns: bool = True
    lease_seconds: float = Field(default=30.0, gt=0)
    sweep_interval_seconds: float = Field(default=2.0, gt=0)
    requeue_after_seconds: float = Field(default=60.0, gt=0)
    max_request_bytes: int = Field(default=1 << 20, ge=1024)
    tool_parallelism: int = Field(default=8, ge=1)
    db_pool_size: int = Field(default=0, ge=0)  # 0 = 2 x workers + 4
    provider_retries: int = Field(default=4, ge=0, le=10)
    chain_steps: int = Field(default=8, ge=1, le=1000)
    chain_budget_seconds: float = Field(default=0.5, ge=0)
    sync_mid_step_writes: bool = False
    sse_keepalive_seconds: float = Field(default=15.0, gt=0)
    #: how a worker hears a cancel while it waits on a model or a tool: `notify` (a LISTEN
    #: connection per process, milliseconds) or `poll` (a check every `cancel_poll_seconds`; the
    #: cloud shape, where a LISTEN session would pin an RDS Proxy connection)
    cancel_watch: Literal["notify", "poll"] = "notify"
    cancel_poll_seconds: float = Field(default=1.0, gt=0, le=60)
    #: a transaction pooler (RDS Proxy, PgBouncer) sits between treadle and Postgres: no
    #: server-side prepared statements and no session options at connect (either pins a proxy
    #: connection to one client); idle_in_transaction_session_timeout then belongs to the server
    db_behind_pooler: bool = False

    def redact_env_names(self) -> list[str]:
        return [n.strip() for n in self.redact_env.split(",") if n.strip()]
    #: where the host-directory volumes live (default: TREADLE_HOME/volumes)
    volumes_root: Path | None = None

    def listen_host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"TREADLE_LISTEN: expected HOST:PORT, got {self.listen!r}")
        return host.strip("[]"), int(port)


def _key_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc if p not in ("function-after", "function-before"))


def is_agent_name(name: str) -> bool:
    """An identifier, or loomcycle's `category/name` form (identifiers joined by `/`)."""
    return len(name) <= 128 and all(is_identifier(part) for part in name.split("/"))


def _message(e: Any) -> str:
    if e["type"] == "extra_forbidden":
        close = _did_you_mean(e)
        if close:
            return f"Extra inputs are not permitted (not a treadle key: did you mean {close!r}?)"
        return "Extra inputs are not permitted (not a treadle key: a loomcycle key treadle does not support, or a typo)"
    return str(e["msg"])


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model whose keys a config path `loc` (ending in the key itself) is checked against."""
    model: type[BaseModel] = TreadleConfig
    parts, i = list(loc[:-1]), 0
    while i < len(parts):
        if model is TreadleConfig and parts[i] in LAZY_SECTIONS:
            ann: Any = _section_type(str(parts[i]))
        else:
            field = model.model_fields.get(str(parts[i]))
            if field is None:
                return None
            ann = field.annotation
        step = 1
        if get_origin(ann) is Annotated:
            ann = get_args(ann)[0]
        if get_origin(ann) is dict:
            ann, step = get_args(ann)[1], 2
        candidates = [a for a in (get_args(ann) or (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(candidates) != 1:
            return None
        model, i = candidates[0], i + step
    return model


def _did_you_mean(error: Any) -> str | None:
    """For a misspelled key, the known key of that place closest to it."""
    loc = tuple(p for p in error.get("loc", ()) if p not in ("function-after", "function-before"))
    model = _model_at(loc) if loc else None
    if model is None:
        return None
    import difflib  # only on a config error

    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6)
    return close[0] if close else None


def _section_type(name: str) -> Any:
    """The type a lazy section validates to (its spec module imported here, on first need)."""
    if name == "scheduled_runs":
        from treadle.specs.schedule import ScheduleSpec

        return dict[str, ScheduleSpec]
    if name == "webhooks":
        from treadle.specs.webhook import WebhookSpec

        return dict[str, WebhookSpec]
    if name == "mcp_servers":
        return Annotated[dict[str, McpServerSpec], AfterValidator(_mcp_server_names)]
    return {"interruption": InterruptionConfig, "http": HttpConfig, "search": SearchConfig | None,
            "principals": dict[str, PrincipalSpec], "retention": RetentionConfig,
            "volumes": dict[str, StaticVolumeSpec], "workspace": WorkspaceConfig}[name]


def _mcp_server_names(v: dict[str, McpServerSpec]) -> dict[str, McpServerSpec]:
    check_server_names(list(v))
    return v


@cache
def _section_adapter(name: str) -> TypeAdapter[Any]:
    return TypeAdapter(_section_type(name))


def build_sections() -> None:
    """Build every lazy section's validator now (and import its spec module): a SnapStart INIT
    (treadle.runtime.build_deferred) leaves none to a first read."""
    for name in LAZY_SECTIONS:
        _section_adapter(name)


def _validate_section(name: str, raw: Any) -> tuple[Any, list[Any]]:
    """A lazy section's value (its default when absent), or its errors located under its name."""
    if raw is None and name != "search":
        raw = {}
    elif raw is None:
        return None, []
    try:
        return _section_adapter(name).validate_python(raw), []
    except ValidationError as exc:
        return None, [{**e, "loc": (name, *e["loc"])} for e in exc.errors()]


def _invalid(source: str, refused: list[tuple[str, str]], errors: list[Any]) -> str:
    lines = [f"{source}: {p}: {m}" for p, m in refused]
    lines += [f"{source}: {_key_path(e['loc']) or '(top)'}: {_message(e)}" for e in errors]
    return "invalid configuration\n  " + "\n  ".join(lines)


def parse_config(data: object, source: str = "treadle.yaml", *, lazy: bool = False) -> TreadleConfig:
    """Validate a configuration, or fail with every error (ConfigError: file, key path, message).
    `lazy`: the LAZY_SECTIONS are validated on first read instead — for a process whose
    configuration was validated in full before it was shipped (the cloud functions: at synth and by
    the deploy's migrate function), so a bad one fails a deploy, not a function."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping, got {type(data).__name__}")
    data, refused = adapt_loomcycle(data)
    errors: list[Any] = []
    try:
        config: TreadleConfig | None = TreadleConfig.model_validate(data)
    except ValidationError as exc:
        config, errors = None, exc.errors()
    sections: dict[str, Any] = {}
    if not lazy or config is None:
        for name in LAZY_SECTIONS:
            sections[name], section_errors = _validate_section(name, data.get(name))
            errors += section_errors
    if config is None or errors or refused:
        raise ConfigError(_invalid(source, refused, errors))
    config.__dict__["source"] = source  # what the cached properties answer
    if not lazy:
        config.__dict__.update(sections)
    errs = config.reference_errors(lazy=lazy)
    if errs:
        raise ConfigError("invalid configuration\n  " + "\n  ".join(f"{source}: {p}: {m}" for p, m in errs))
    return config


def load_config(path: Path | str, *, lazy: bool = False) -> TreadleConfig:
    """treadle.yaml; a `.json` file is read as JSON (the cloud shape stages the YAML as JSON at
    synth time, so its functions never import PyYAML); several files joined by `:` layer as
    loomcycle's do (`merge_layers`: a loomcycle bundle over a base layer with its tiers).
    `lazy`: see parse_config."""
    data, source = load_config_data(path)
    return parse_config(data, source, lazy=lazy)


def load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = [f"TREADLE_{_key_path(e['loc']).upper()}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid environment\n  " + "\n  ".join(lines)) from None


def default_database_hint() -> str:
    return os.environ.get("DATABASE_URL", "") or "embedded (pgserver under TREADLE_HOME/pg)"
