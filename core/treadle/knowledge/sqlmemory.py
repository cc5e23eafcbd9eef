"""The Memory tool's SQL ops (loomcycle's RFC AA): `sql_query`, `sql_exec` over the scope's own
Postgres schema (store/sqlmem.py), behind the agent's `sql_scopes` (default-deny) and the
statement floor (knowledge/sqlcheck.py), every call written to the audit trail.

Scopes: `agent` (scope_id = the agent's name), `user` (the run's user), `tenant` (shared by the
tenant), `run` (this run's scratch database); all keyed by the tenant. Results are loomcycle's:
`{columns, rows, truncated}` and `{rows_affected, last_insert_id}` (Postgres has no implicit id:
null; a statement with RETURNING also answers its `columns` and `rows`), plus `scope_bytes`.

Explicit transactions (`sql_begin`/`sql_commit`/`sql_rollback`) are refused by name for now
(`sql_transactions_unsupported`): a transaction held open across tool calls pins a connection
across steps, which treadle's steps (and its cloud shape) do not keep."""

from __future__ import annotations

import re
import time
from typing import Any

from treadle.errors import ToolError, TreadleError
from treadle.knowledge.sqlcheck import for_driver
from treadle.security.redact import SECRETS
from treadle.store.sqlmem import ScopeKey, SqlMemory
from treadle.tools.base import ToolContext, ToolResult


def _scope(ctx: ToolContext, op: str, scope: Any) -> ScopeKey:
    allowed = list(getattr(ctx.agent_config, "sql_scopes", []) or [])
    if not allowed:
        raise ToolError(
            f"Memory.{op}: sql_scope_not_permitted: agent {ctx.agent!r} has no sql_scopes — SQL memory is"
            " default-deny; add `sql_scopes: [agent]` (and/or user, run, tenant) to the agent",
            code="sql_scope_not_permitted")
    if scope not in ("agent", "user", "run", "tenant"):
        raise ToolError(f"Memory.{op}: scope must be one of agent, user, run, tenant", code="invalid_input")
    if scope not in allowed:
        raise ToolError(f"Memory.{op}: sql_scope_not_permitted: sql scope {scope!r} is not in agent"
                        f" {ctx.agent!r}'s sql_scopes ({', '.join(allowed)})", code="sql_scope_not_permitted")
    if scope == "agent":
        scope_id = ctx.agent
    elif scope == "user":
        if not ctx.user_id:
            raise ToolError(f"Memory.{op}: scope 'user' needs a run with a user_id", code="invalid_input")
        scope_id = ctx.user_id
    elif scope == "run":
        scope_id = ctx.run_id
    else:
        scope_id = ""
    return ScopeKey(ctx.tenant_id or "default", scope, scope_id)


def _host(ctx: ToolContext, op: str) -> SqlMemory:
    host = ctx.services.sql_memory
    if host is None:
        raise ToolError(f"Memory.{op}: sql_not_enabled: SQL memory is not enabled on this server"
                        " (configure memory.sql)", code="sql_not_enabled")
    return host


async def sql_op(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    op = str(args["op"])
    key = _scope(ctx, op, args.get("scope"))
    if op in ("sql_begin", "sql_commit", "sql_rollback"):
        raise ToolError(f"Memory.{op}: sql_transactions_unsupported: explicit SQL transactions are not"
                        " supported by treadle yet; each sql_exec is one committed statement",
                        code="sql_transactions_unsupported")
    for name in ("key", "value", "prefix", "query", "delta", "ttl", "ttl_seconds", "embed", "limit"):
        if args.get(name) is not None:
            raise ToolError(f"Memory.{op}: {name} does not apply to the sql ops", code="field_not_applicable")
    host = _host(ctx, op)
    statement = args.get("statement")
    values = args.get("args") or []
    if not isinstance(values, list):
        raise ToolError(f"Memory.{op}: args must be an array", code="invalid_input")
    timeout_ms = args.get("timeout_ms")
    if timeout_ms is not None and (isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1):
        raise ToolError(f"Memory.{op}: timeout_ms must be a positive integer", code="invalid_input")
    read_only = op == "sql_query"
    t0 = time.perf_counter()
    rows, error = 0, None
    try:
        text = for_driver(statement if isinstance(statement, str) else "", read_only=read_only, nargs=len(values))
        if read_only:
            result = await host.query(key, text, values, timeout_ms=timeout_ms)
            rows = len(result["rows"])
            return ToolResult.json(result)
        lead = re.match(r"\s*\(*\s*([A-Za-z_]+)", text)
        quota = getattr(ctx.agent_config, "sql_quota_bytes", None)
        out = await host.exec(key, text, values, quota_bytes=quota, leading=(lead.group(1).lower() if lead else ""),
                              timeout_ms=timeout_ms)
        rows = int(out["rows_affected"])
        return ToolResult.json({"last_insert_id": None, **out})
    except TreadleError as exc:
        error = exc.code
        if isinstance(exc, ToolError):
            raise
        raise ToolError(f"Memory.{op}: {exc.code}: {exc.message.removeprefix(op + ': ')}", code=exc.code) from None
    finally:
        audit = ctx.services.sql_audit
        if audit is not None:
            await audit.record(
                tenant=ctx.tenant_id, run_id=ctx.run_id, agent=ctx.agent, op=op, scope=key.scope,
                scope_id=key.scope_id, statement=SECRETS.redact_text(statement) if isinstance(statement, str) else "",
                rows=rows, duration_ms=int((time.perf_counter() - t0) * 1000), error=error)
