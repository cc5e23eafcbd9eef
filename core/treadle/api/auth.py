"""Authentication and scopes for every authenticated route.

Resolution order for a bearer token (loomcycle's): (1) an OperatorTokenDef, looked up by its
keyed hash; (2) a yaml `principals:` entry (its token read from the environment, compared in
constant time); (3) the legacy `TREADLE_AUTH_TOKEN` — an admin of the default tenant — until the
first valid admin OperatorTokenDef exists; else 401. With none of the three configured (no legacy
token, no principals, no valid token in the database) treadle runs open: every request acts as the
default tenant's admin (the sidecar refuses to listen beyond loopback then).

Each route's scope is in `ROUTE_SCOPES`, one table (a test checks that every authenticated route
has an entry; a route missing from it needs `substrate:admin`). 401 carries
`WWW-Authenticate: Bearer`; a token without the route's scope gets 403 `insufficient_scope`.
An operator (an admin of the default tenant) may act on another tenant with `X-Treadle-Tenant`.
Lookups are cached per token hash for `auth_cache_seconds` (flushed in this process whenever a
token is created, rotated or retired here; other replicas see a retire within that time).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field
from typing import Any

from treadle.config import PrincipalSpec
from treadle.domain import scopes as sc
from treadle.domain.ids import is_identifier
from treadle.errors import Forbidden, Unauthorized, ValidationFailed
from treadle.runtime import Runtime
from treadle.security.principal import DEFAULT_TENANT, OPEN_PRINCIPAL, Principal, bearer_from_header
from treadle.security.tokens import token_hash

TENANT_HEADER = "x-treadle-tenant"
R, W = sc.RUNS_READ, sc.RUNS_CREATE
#: (method, route path) → the scope it needs
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("POST", "/v1/runs"): W,
    ("GET", "/v1/runs"): R,
    ("GET", "/v1/runs/{run_id}"): R,
    ("GET", "/v1/runs/{run_id}/events"): R,
    ("GET", "/v1/runs/{run_id}/stream"): R,
    ("POST", "/v1/runs/{run_id}/cancel"): W,
    ("POST", "/v1/runs/{run_id}/fork"): W,
    ("POST", "/v1/runs/{run_id}/tool_results"): W,
    ("POST", "/v1/runs/{run_id}/input"): W,
    ("GET", "/v1/runs/{run_id}/interrupts"): R,
    ("GET", "/v1/users/{user_id}/interrupts"): R,
    ("GET", "/v1/interrupts"): R,
    ("POST", "/v1/runs/{run_id}/interrupts/{interrupt_id}/resolve"): W,
    ("GET", "/v1/_channels"): sc.CHANNEL_READ,
    ("POST", "/v1/_channels"): sc.TENANT,
    ("DELETE", "/v1/_channels/{name}"): sc.TENANT,
    ("POST", "/v1/_channels/_await"): sc.CHANNEL_READ,
    ("POST", "/v1/_channels/{name}/publish"): sc.CHANNEL_PUBLISH,
    ("GET", "/v1/_channels/{name}/peek"): sc.CHANNEL_READ,
    ("POST", "/v1/_scheduledef"): sc.TENANT,
    ("GET", "/v1/_scheduledef/names"): sc.TENANT,
    ("GET", "/v1/_schedules/list-all"): sc.TENANT,
    ("GET", "/v1/_schedules/{ident}/state"): sc.TENANT,
    ("POST", "/v1/_schedules/{ident}/run-now"): sc.TENANT,
    ("POST", "/v1/_schedules/{ident}/pause"): sc.TENANT,
    ("POST", "/v1/_schedules/{ident}/resume"): sc.TENANT,
    ("POST", "/v1/_webhookdef"): sc.WEBHOOKS_ADMIN,
    ("GET", "/v1/_webhookdef/names"): sc.WEBHOOKS_ADMIN,
    ("GET", "/v1/_webhooks/{name}/recent-deliveries"): sc.WEBHOOKS_ADMIN,
    ("POST", "/v1/_webhooks/{name}/test"): sc.WEBHOOKS_ADMIN,
    ("POST", "/v1/hooks"): sc.TENANT,
    ("GET", "/v1/hooks"): sc.TENANT,
    ("DELETE", "/v1/hooks/{hook_id}"): sc.TENANT,
    ("POST", "/v1/_agentdef"): sc.TENANT,
    ("GET", "/v1/_agentdef/names"): sc.TENANT,
    ("POST", "/v1/_skilldef"): sc.TENANT,
    ("GET", "/v1/_skilldef/names"): sc.TENANT,
    ("POST", "/v1/_teamdef"): sc.TENANT,
    ("GET", "/v1/_teamdef/names"): sc.TENANT,
    ("POST", "/v1/_evaluation"): sc.TENANT,
    ("GET", "/v1/_memory/scopes/{scope}/{scope_id}/keys"): sc.TENANT,
    ("GET", "/v1/_memory/scopes/{scope}/{scope_id}/keys/{key:path}"): sc.TENANT,
    ("PUT", "/v1/_memory/scopes/{scope}/{scope_id}/keys/{key:path}"): sc.TENANT,
    ("DELETE", "/v1/_memory/scopes/{scope}/{scope_id}/keys/{key:path}"): sc.TENANT,
    ("POST", "/v1/_memory/search"): sc.TENANT,
    ("GET", "/v1/_memory/embed_stats"): sc.TENANT,
    ("POST", "/v1/_memory/reembed"): sc.ADMIN,
    ("POST", "/v1/_memory/backfill_embeddings"): sc.ADMIN,
    ("POST", "/v1/_operatortokendef"): sc.ADMIN,
    ("GET", "/v1/_operatortokendef/names"): sc.ADMIN,
    ("GET", "/v1/_whoami"): R,
    ("GET", "/v1/_me"): R,
    # loomcycle's routes (api/loomcycle.py)
    ("POST", "/v1/runs:batch"): W,
    ("GET", "/v1/agents/{agent_id}"): R,
    ("POST", "/v1/agents/{agent_id}/cancel"): W,
    ("GET", "/v1/users/{user_id}/agents"): R,
    ("GET", "/v1/users/{user_id}/agents/stream"): R,
    ("GET", "/v1/sessions/{session_id}/transcript"): R,
    ("POST", "/v1/runs/{run_id}/compact"): W,
    # sessions (api/sessions.py)
    ("POST", "/v1/sessions/{session_id}/messages"): W,
    ("POST", "/v1/sessions/{session_id}/replay"): W,
    ("GET", "/v1/sessions"): R,
    ("GET", "/v1/sessions/{session_id}"): R,
    ("PATCH", "/v1/sessions/{session_id}"): W,
    ("GET", "/v1/users/{user_id}/sessions"): R,
    ("POST", "/v1/_history"): R,
    ("POST", "/v1/_channels/{name}/subscribe"): sc.CHANNEL_READ,
    ("POST", "/v1/_channels/{name}/ack"): sc.CHANNEL_READ,
    ("PATCH", "/v1/_channels/{name}"): sc.TENANT,
    ("POST", "/v1/_channels/{name}/purge"): sc.TENANT,
    ("POST", "/v1/_channels/_broadcast"): sc.CHANNEL_PUBLISH,
    ("POST", "/v1/users/{user_id}/channels/{name}/publish"): sc.CHANNEL_PUBLISH,
    ("POST", "/v1/users/{user_id}/channels/{name}/subscribe"): sc.CHANNEL_READ,
    ("GET", "/v1/users/{user_id}/channels/{name}/peek"): sc.CHANNEL_READ,
    ("POST", "/v1/users/{user_id}/channels/{name}/ack"): sc.CHANNEL_READ,
    ("GET", "/v1/_memory/scopes"): sc.TENANT,
    # the workspace and MCP servers
    ("POST", "/v1/_volumedef"): sc.TENANT,
    ("GET", "/v1/_volumedef/names"): sc.TENANT,
    ("POST", "/v1/_mcpserverdef"): sc.TENANT,
    ("GET", "/v1/_mcpserverdef/names"): sc.TENANT,
    ("POST", "/v1/_mcp"): R,  # the endpoint; each meta-tool needs its own scope (TOOL_SCOPES)
    # the OpenAI-compatible front door and the LLM gateway: a chat may start an agent run
    ("POST", "/v1/chat/completions"): W,
    ("POST", "/v1/embeddings"): W,
    ("POST", "/v1/responses"): W,
    ("GET", "/v1/responses/{response_id}"): R,
    ("DELETE", "/v1/responses/{response_id}"): W,
    ("POST", "/v1/responses/{response_id}/cancel"): W,
    ("GET", "/v1/responses/{response_id}/input_items"): R,
    ("GET", "/v1/models"): R,
    ("GET", "/v1/models/{model_id}"): R,
    ("POST", "/v1/_llm/chat"): W,
    # operations: the metrics and the operator's cross-tenant view and kill switch
    ("GET", "/metrics"): sc.ADMIN,
    ("GET", "/v1/_admin/runs"): sc.ADMIN,
    ("GET", "/v1/_concurrency"): R,
    ("POST", "/v1/_admin/tenants/{tenant_id}/cancel"): sc.ADMIN,
    ("GET", "/v1/_admin/tenants/{tenant_id}/export"): sc.ADMIN,
    ("DELETE", "/v1/_admin/tenants/{tenant_id}"): sc.ADMIN,
    # governance (issue 42): usage and cost, budgets, tenant credentials
    ("GET", "/v1/_usage"): sc.TENANT,
    ("GET", "/v1/_limits"): sc.TENANT,
    ("PUT", "/v1/_limits"): sc.TENANT,
    ("DELETE", "/v1/_limits"): sc.TENANT,
    ("POST", "/v1/_credentialdef"): sc.TENANT,
    ("GET", "/v1/_retention"): sc.TENANT,
    ("POST", "/v1/_erasure"): sc.TENANT,
    # knowledge (issue 41): the Path tree and Documents, the caller's tenant (loomcycle's scope)
    ("POST", "/v1/_path"): sc.TENANT,
    ("POST", "/v1/_document"): sc.TENANT,
    # the runtime's pause (issue 36): the operator's
    ("POST", "/v1/_pause"): sc.ADMIN,
    ("POST", "/v1/_resume"): sc.ADMIN,
    ("GET", "/v1/_state"): sc.ADMIN,
    # snapshots (issue 36): the operator's of the whole runtime, a tenant admin's of its tenant
    ("POST", "/v1/_snapshots"): sc.ADMIN,
    ("GET", "/v1/_snapshots"): sc.ADMIN,
    ("GET", "/v1/_snapshots/{snapshot_id}"): sc.ADMIN,
    ("DELETE", "/v1/_snapshots/{snapshot_id}"): sc.ADMIN,
    ("GET", "/v1/_snapshots/{snapshot_id}/export"): sc.ADMIN,
    ("POST", "/v1/_snapshots/{snapshot_id}/restore"): sc.ADMIN,
    # resident sub-agents (issue 36, loomcycle's RFC BK P3): a tenant's own, the operator's of every tenant
    ("GET", "/v1/_resident"): sc.TENANT,
    ("POST", "/v1/_resident/{run_id}/close"): sc.TENANT,
    ("POST", "/v1/_resident/{run_id}/cancel"): sc.TENANT,
    # introspection (loomcycle's): the model aliases, the routing cascades, the runnable agents
    ("GET", "/v1/_models"): sc.TENANT,
    ("GET", "/v1/_routing"): sc.TENANT,
    ("GET", "/v1/_runnable-agents"): R,
    ("GET", "/v1/_resolver"): sc.ADMIN,
    ("POST", "/v1/_resolve/probe"): sc.ADMIN,
    ("GET", "/v1/_providers/{provider_id}/models"): sc.ADMIN,
    ("GET", "/v1/config"): R,
    ("GET", "/openapi.json"): R,
    ("GET", "/docs"): R,
    ("GET", "/redoc"): R,
}


#: MCP meta-tool (api/mcp/tools.py) → the scope it needs; tools/list shows only those the caller holds
TOOL_SCOPES: dict[str, str] = {
    "spawn_run": W, "spawn_runs": W, "cancel_run": W, "resolve_interrupt": W, "interruption_resolve": W,
    "steer_run": W, "send_input": W,
    "get_run": R, "list_runs": R, "get_transcript": R, "list_interrupts": R, "whoami": R,
    "memory": sc.TENANT, "publish_channel": sc.CHANNEL_PUBLISH, "peek_channel": sc.CHANNEL_READ,
    "list_channels": sc.CHANNEL_READ, "agentdef": sc.TENANT, "skilldef": sc.TENANT, "scheduledef": sc.TENANT,
    "evaluation": sc.TENANT, "mcpserverdef": sc.TENANT, "webhookdef": sc.WEBHOOKS_ADMIN,
    "teamdef": sc.TENANT,
    # loomcycle's channel, hook and run-state tools (api/mcp/loomtools.py), scoped as their routes
    "channel": sc.TENANT, "channeldef": sc.TENANT, "subscribe_channel": sc.CHANNEL_READ, "ack_channel": sc.CHANNEL_READ,
    "register_hook": sc.TENANT, "list_hooks": sc.TENANT, "delete_hook": sc.TENANT, "stream_user_run_states": R,
    "volumedef": sc.TENANT, "operatortokendef": sc.ADMIN,
    # issue 41: the Path tree and Documents, as their routes
    "path": sc.TENANT, "document": sc.TENANT,
    # conversations (api/mcp/sessiontools.py), scoped as their routes
    "history": R, "compact_run": W, "replay_session": W,
    # governance and operations (api/mcp/govtools.py), scoped as their routes
    "erasure": sc.TENANT, "credentialdef": sc.TENANT, "resolve_probe": sc.ADMIN,
}


def required_scope(method: str, path: str) -> str:
    return ROUTE_SCOPES.get((method, path), sc.ADMIN)


def tool_scope(name: str) -> str:
    return TOOL_SCOPES.get(name, sc.ADMIN)


def may_call_tool(principal: Principal, name: str) -> bool:
    return principal.open_mode or sc.satisfies(principal.scopes, tool_scope(name))


@dataclass
class Authenticator:
    """See the module docstring."""

    legacy_token: str | None
    cache_seconds: float = 10.0
    _legacy_digest: bytes | None = field(init=False, default=None)
    _cache: dict[str, tuple[float, Principal | None]] = field(init=False, default_factory=dict)
    _admin_exists: tuple[float, bool] | None = field(init=False, default=None)
    _any_token: tuple[float, bool] | None = field(init=False, default=None)
    _generation: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.legacy_token == "":  # TREADLE_AUTH_TOKEN= (empty) is unset
            self.legacy_token = None
        if self.legacy_token is not None:
            if not self.legacy_token.strip():
                raise ValidationFailed("TREADLE_AUTH_TOKEN is blank; unset it or set a real token")
            self._legacy_digest = hashlib.sha256(self.legacy_token.encode()).digest()

    def flush(self) -> None:
        self._cache.clear()
        self._admin_exists = None
        self._any_token = None

    async def open_mode(self, rt: Runtime | None) -> bool:
        if rt is not None and rt.auth_generation != self._generation:  # a token changed here
            self.flush()
            self._generation = rt.auth_generation
            self.cache_seconds = rt.settings.auth_cache_seconds
        if self._legacy_digest is not None or (rt is not None and rt.config.principals):
            return False
        if rt is None:
            return True
        now = time.monotonic()
        if self._any_token is None or now - self._any_token[0] >= self.cache_seconds:
            self._any_token = (now, await rt.auth_tokens.any_valid())
        return not self._any_token[1]

    async def authenticate(self, authorization: str | None, rt: Runtime | None) -> Principal:
        if await self.open_mode(rt):
            return OPEN_PRINCIPAL
        token = bearer_from_header(authorization)
        if token is None:
            raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
        digest = token_hash(token, rt.settings.token_pepper if rt is not None else None)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < self.cache_seconds:
            principal = hit[1]
        else:
            principal = await self._resolve(token, digest, rt)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now, principal)
        if principal is None:
            raise Unauthorized("invalid bearer token")
        return principal

    async def _resolve(self, token: str, digest: str, rt: Runtime | None) -> Principal | None:
        if rt is not None:
            row = await rt.auth_tokens.lookup(digest)  # a store error fails closed (503), uncached
            if row is not None:
                return Principal(row.tenant_id, row.subject, row.scopes, token_id=row.def_id)
            for name, spec in rt.config.principals.items():
                expected = spec.token()
                if expected and hmac.compare_digest(hashlib.sha256(token.encode()).digest(),
                                                    hashlib.sha256(expected.encode()).digest()):
                    return Principal(spec.tenant, spec.subject or name, tuple(spec.scopes), token_id=f"cfg:{name}")
        if self._legacy_digest is not None and hmac.compare_digest(
                hashlib.sha256(token.encode()).digest(), self._legacy_digest):
            if rt is not None and await self._admin_token_exists(rt):
                return None  # the first admin OperatorTokenDef turned the legacy token off
            return Principal(DEFAULT_TENANT, "operator", legacy=True, token_id="legacy")
        return None

    async def _admin_token_exists(self, rt: Runtime) -> bool:
        now = time.monotonic()
        if self._admin_exists is None or now - self._admin_exists[0] >= self.cache_seconds:
            self._admin_exists = (now, await rt.auth_tokens.any_valid_admin())
        return self._admin_exists[1]


def principal_view(who: Principal) -> dict[str, Any]:
    """Who a bearer acts as — `GET /v1/_me` (loomcycle's name), `GET /v1/_whoami` and the MCP
    `whoami` tool answer this."""
    from treadle.security.network import NetworkEnv

    return {"tenant_id": who.tenant_id, "subject": who.subject, "scopes": list(who.scopes),
            "is_admin": sc.satisfies(who.scopes, sc.ADMIN), "open_mode": who.open_mode, "legacy": who.legacy,
            "token_id": who.token_id,
            # stdio MCP servers come from treadle.yaml only (mcp/defs.py): never created at runtime
            "capabilities": {"mcp_allow_dynamic_stdio": False,
                             "http_host_allowlist_configured": bool(NetworkEnv().http_allowed_hosts.strip())}}


def authorize(principal: Principal, method: str, path: str, tenant_header: str | None) -> Principal:
    """The principal the route acts as: its scope checked (403), the operator's tenant switch."""
    needed = required_scope(method, path)
    if not principal.open_mode and not sc.satisfies(principal.scopes, needed):
        raise Forbidden(f"this token lacks the scope {needed} ({method} {path})", scope=needed)
    if tenant_header is not None and tenant_header != principal.tenant_id:
        if not (principal.open_mode or principal.is_operator):
            raise Forbidden(f"only an operator (an admin of the default tenant) may use {TENANT_HEADER}",
                            scope=sc.ADMIN)
        if not is_identifier(tenant_header) or len(tenant_header) > 64:
            raise ValidationFailed(f"{TENANT_HEADER}: must match [A-Za-z0-9_-]{{1,64}}")
        return Principal(tenant_header, principal.subject, principal.scopes, principal.open_mode,
                         principal.legacy, principal.token_id)
    return principal


__all__ = ["ROUTE_SCOPES", "Authenticator", "PrincipalSpec", "authorize", "required_scope"]
