"""Runs and their transcripts: creating a run, reading it, its events, cancelling it."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.errors import UniqueViolation
from psycopg.types.json import Jsonb

from treadle.domain.events import EventType
from treadle.domain.runs import RunOptions, RunStatus
from treadle.errors import Conflict, NotFound
from treadle.store.db import Pool
from treadle.telemetry import tracing

JOBS_CHANNEL = "treadle_jobs"


def new_run_id() -> str:
    return "r_" + secrets.token_hex(16)


@dataclass(slots=True)
class RunRecord:
    id: str
    tenant_id: str
    user_id: str | None
    agent: str
    status: str
    stop_reason: str | None
    error: dict[str, Any] | None
    step_no: int
    last_seq: int
    iterations: int
    interactive: bool
    metadata: dict[str, Any]
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    lease_owner: str | None = None
    lease_until: datetime | None = None
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    def_id: str | None = None
    def_content_sha256: str | None = None
    skill_def_ids: dict[str, str] | None = None
    #: loomcycle's caller handle, parent_context and the per-run options (migration 0018)
    agent_id: str | None = None
    parent_context: dict[str, Any] | None = None
    run_options: dict[str, Any] | None = None
    #: the session the run belongs to and its place in it (migration 0050; None: a sub-agent run,
    #: whose session id is derived from its run id)
    session_id: str | None = None
    session_seq: int | None = None

    @property
    def session(self) -> str:
        """loomcycle's session id of the run."""
        return self.session_id or session_id_of(self.id)

    @property
    def terminal(self) -> bool:
        return RunStatus(self.status).terminal

    def usage(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_tokens,
            "cache_read_input_tokens": self.cache_read_tokens,
        }

    def to_api(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "agent": self.agent,
            "user_id": self.user_id,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "iterations": self.iterations,
            "usage": self.usage(),
            "metadata": self.metadata,
            "interactive": self.interactive,
            "parent_run_id": self.parent_run_id,
            "root_run_id": self.root_run_id,
            "depth": self.depth,
            "def_id": self.def_id,
            "def_content_sha256": self.def_content_sha256,
            "skill_def_ids": self.skill_def_ids,
            "last_seq": self.last_seq,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
            # loomcycle's names (additive): the caller's handle, a session per run, the context
            "agent_id": self.agent_id or self.id,
            "session_id": self.session,
            "parent_context": self.parent_context,
        }


_RUN_COLUMNS = (
    "id, tenant_id, user_id, agent, status, stop_reason, error, step_no, last_seq, iterations, interactive,"
    " metadata, input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cancel_requested,"
    " created_at, updated_at, completed_at, lease_owner, lease_until, parent_run_id, root_run_id, depth,"
    " def_id, def_content_sha256, skill_def_ids, agent_id, parent_context, run_options, session_id, session_seq"
)


def session_id_of(run_id: str) -> str:
    """The session id a run opens (a top-level run started without `session_id`), or — for a
    sub-agent run, which has no session row — its derived session id."""
    return "s_" + run_id.removeprefix("r_")


@dataclass(slots=True)
class NewRun:
    tenant_id: str
    agent: str
    segments: list[dict[str, Any]]
    user_id: str | None = None
    metadata: dict[str, Any] | None = None
    interactive: bool = False
    idempotency_key: str | None = None
    #: a sub-agent run (tools/agent.py): its parent, the tree's root, its depth (root = 0) and
    #: the wait key its terminal commit pokes to wake the parent
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    parent_wait_key: str | None = None
    #: set by Runtime.start_run (substrate/resolve.py): the AgentDef the run runs with (None: the
    #: treadle.yaml agent), its content hash, and the skills pinned by name
    def_id: str | None = None
    def_content_sha256: str | None = None
    skill_def_ids: dict[str, str] | None = None
    #: application tools the caller declared ([{name, description, input_schema}]) and how long
    #: a call of one waits for the application's answer (builtins/client.py)
    client_tools: list[dict[str, Any]] | None = None
    client_tool_timeout_s: float | None = None
    #: the caller's narrowing of the hosts the run's tools may reach (None: none); children inherit it
    allowed_hosts: list[str] | None = None
    #: loomcycle's caller handle (None: the run id), parent_context (inherited by sub-agents) and
    #: per-run options (domain/runs.py RunOptions; api/loomcycle.py)
    agent_id: str | None = None
    parent_context: dict[str, Any] | None = None
    run_options: RunOptions | None = None
    #: the caller's `user_credentials`, sealed (treadle/mcp/credentials.py); stored in
    #: run_credentials with the run, never in the runs row
    sealed_credentials: bytes | None = None
    #: continue this session (store/sessions.py): the run takes the session's next place and its
    #: history is the session's earlier runs (None: a top-level run opens its own session)
    session_id: str | None = None


@dataclass(slots=True)
class StoredEvent:
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: datetime | None = None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "type": self.type}
        out.update(self.payload)
        if self.created_at is not None:
            out["ts"] = self.created_at.isoformat()
        return out


class RunStore:
    def __init__(self, pool: Pool, *, jobs_in_db: bool, requeue_after_s: float) -> None:
        self.pool = pool
        self.jobs_in_db = jobs_in_db
        self.requeue_after_s = requeue_after_s

    async def live_counts(self, tenant_id: str, user_id: str | None) -> tuple[int, int]:
        """(the tenant's queued or running runs, those of them `user_id` started): the admission
        caps' counts (config ConcurrencyConfig); parked runs hold nothing and are left out."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n, count(*) FILTER (WHERE user_id = %s) AS mine FROM runs"
                " WHERE tenant_id = %s AND status IN ('queued', 'running')", (user_id, tenant_id))
            row = await cur.fetchone()
        return (int(row["n"]), int(row["mine"])) if row else (0, 0)

    async def create(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Insert a queued run with its `user_input` and `started` events (and, with the Postgres
        queue, its first job) in one statement. Returns (run, created); an idempotency key that was
        seen before returns the existing run and created=False."""
        run_id = new_run_id()
        user_input = {"segments": new.segments}
        started = {"agent": new.agent, "run_id": run_id, "user_id": new.user_id}
        if new.def_id is not None:
            started["def_id"] = new.def_id
            started["def_content_sha256"] = new.def_content_sha256
        continues = new.session_id is not None
        # a continuation takes the session's next place (the row lock orders concurrent starts; the
        # second then meets runs_live_session: 409 session_busy); a top-level run opens its session
        sql = f"""
        WITH s AS (
            UPDATE sessions SET run_count = run_count + 1, updated_at = now()
            WHERE %(cont)s AND id = %(sid)s AND tenant_id = %(tenant)s
            RETURNING id, run_count - 1 AS seq
        ), r AS (
            INSERT INTO runs (id, tenant_id, user_id, agent, status, metadata, interactive,
                              idempotency_key, root_run_id, last_seq, lease_until,
                              parent_run_id, depth, parent_wait_key, def_id, def_content_sha256,
                              skill_def_ids, client_tools, client_tool_timeout_s, allowed_hosts,
                              trace_context, agent_id, parent_context, run_options, session_id, session_seq)
            SELECT %(id)s, %(tenant)s, %(user)s, %(agent)s, 'queued', %(meta)s, %(interactive)s,
                    %(idem)s, coalesce(%(root)s, %(id)s), 2, now() + make_interval(secs => %(requeue)s),
                    %(parent)s, %(depth)s, %(pwk)s, %(def_id)s, %(def_sha)s, %(skills)s, %(ctools)s,
                    %(ctimeout)s, %(hosts)s, %(trace)s, %(agent_id)s, %(pctx)s, %(ropts)s,
                    CASE WHEN %(cont)s THEN (SELECT id FROM s) ELSE %(own_sid)s END,
                    CASE WHEN %(cont)s THEN (SELECT seq FROM s) WHEN %(own_sid)s::text IS NOT NULL THEN 0 END
            WHERE NOT %(cont)s OR EXISTS (SELECT 1 FROM s)
            ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING {_RUN_COLUMNS}
        ), ns AS (
            INSERT INTO sessions (id, tenant_id, agent, user_id, run_count, created_at, updated_at)
            SELECT r.session_id, r.tenant_id, r.agent, r.user_id, 1, r.created_at, r.created_at
            FROM r WHERE NOT %(cont)s AND r.session_id IS NOT NULL
        ), ev AS (
            INSERT INTO events (run_id, seq, tenant_id, type, payload)
            SELECT r.id, v.seq, r.tenant_id, v.type, v.payload FROM r,
              (VALUES (1, '{EventType.USER_INPUT}', %(ui)s::jsonb), (2, '{EventType.STARTED}', %(st)s::jsonb))
                AS v(seq, type, payload)
        ), jb AS (
            INSERT INTO jobs (tenant_id, run_id, step_no, run_created)
            SELECT r.tenant_id, r.id, 0, r.created_at FROM r WHERE %(jobs)s
        ), cr AS (
            INSERT INTO run_credentials (run_id, tenant_id, sealed)
            SELECT r.id, r.tenant_id, %(creds)s::bytea FROM r WHERE %(creds)s::bytea IS NOT NULL
        )
        SELECT r.*, CASE WHEN %(jobs)s THEN pg_notify('{JOBS_CHANNEL}', '') END AS _n FROM r
        """
        params = {
            "id": run_id,
            "tenant": new.tenant_id,
            "user": new.user_id,
            "agent": new.agent,
            "meta": Jsonb(new.metadata or {}),
            "interactive": new.interactive,
            "idem": new.idempotency_key,
            "root": new.root_run_id,
            "parent": new.parent_run_id,
            "depth": new.depth,
            "pwk": new.parent_wait_key,
            "def_id": new.def_id,
            "def_sha": new.def_content_sha256,
            "skills": Jsonb(new.skill_def_ids) if new.skill_def_ids else None,
            "ctools": Jsonb(new.client_tools) if new.client_tools else None,
            "ctimeout": new.client_tool_timeout_s,
            "hosts": Jsonb(new.allowed_hosts) if new.allowed_hosts is not None else None,
            "agent_id": new.agent_id,
            "pctx": Jsonb(new.parent_context) if new.parent_context else None,
            "ropts": Jsonb(opts) if new.run_options is not None and (opts := new.run_options.to_json()) else None,
            "requeue": self.requeue_after_s,
            "trace": _trace_context(new, run_id),
            "ui": Jsonb(user_input),
            "st": Jsonb(started),
            "jobs": self.jobs_in_db,
            "creds": new.sealed_credentials,
            "cont": continues,
            "sid": new.session_id,
            "own_sid": session_id_of(run_id) if new.parent_run_id is None else None,
        }
        async with self.pool.connection() as conn:
            try:
                cur = await conn.execute(sql, params)
            except UniqueViolation as exc:
                if exc.diag.constraint_name == "runs_live_agent_id":  # migration 0018
                    raise Conflict(f"agent_id {new.agent_id!r} belongs to a live run",
                                   code="agent_id_in_use") from None
                if exc.diag.constraint_name == "runs_live_session":  # migration 0050
                    raise Conflict(f"another run of session {new.session_id!r} is live",
                                   code="session_busy") from None
                raise
            row = await cur.fetchone()
            if row is None and new.idempotency_key is not None:
                cur = await conn.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = %s AND idempotency_key = %s",
                    (new.tenant_id, new.idempotency_key),
                )
                existing = await cur.fetchone()
                if existing is not None:
                    return _record(existing), False
            if row is None and continues:
                raise NotFound(f"session {new.session_id!r} not found", code="session_not_found")
            if row is None:  # pragma: no cover - the insert cannot silently fail otherwise
                raise RuntimeError("run insert returned nothing")
            return _record(row), True

    async def get(self, tenant_id: str, run_id: str) -> RunRecord | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = %s AND tenant_id = %s", (run_id, tenant_id)
            )
            row = await cur.fetchone()
        return _record(row) if row else None

    async def events(
        self, tenant_id: str, run_id: str, from_seq: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT seq, type, payload, created_at FROM events"
                " WHERE run_id = %s AND tenant_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                (run_id, tenant_id, from_seq, limit),
            )
            rows = await cur.fetchall()
        return [StoredEvent(r["seq"], r["type"], r["payload"], r["created_at"]) for r in rows]

    async def request_cancel(self, tenant_id: str, run_id: str, reason: str) -> RunRecord | None:
        """Flag the run; the next step (at its next safe point) finishes it as cancelled.
        Returns the run as it is now (a finished run is returned unchanged)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""UPDATE runs SET cancel_requested = true, cancel_reason = %s, updated_at = now()
                    WHERE id = %s AND tenant_id = %s AND status NOT IN ('completed','failed','cancelled')
                    RETURNING {_RUN_COLUMNS}""",
                (reason, run_id, tenant_id),
            )
            row = await cur.fetchone()
            if row is None:
                cur = await conn.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = %s AND tenant_id = %s", (run_id, tenant_id)
                )
                row = await cur.fetchone()
        return _record(row) if row else None

    async def purge_finished(
        self, days: int, *, tenant_id: str | None = None, exclude: list[str] | None = None, limit: int = 500
    ) -> int:
        """Delete up to `limit` finished run trees (a finished top-level run ended more than `days`
        ago, with its finished sub-agent runs) of `tenant_id`, or of every tenant not in `exclude`;
        their events (a trigger, migration 0024), questions, inputs and waits (ON DELETE CASCADE)
        go with them. Returns the runs deleted."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH roots AS (SELECT id FROM runs WHERE parent_run_id IS NULL"
                "   AND status IN ('completed','failed','cancelled')"
                "   AND completed_at < now() - make_interval(days => %(days)s)"
                "   AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)"
                "   AND NOT (tenant_id = ANY(%(exclude)s))"
                "   ORDER BY completed_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED),"
                " gone AS (DELETE FROM runs r USING roots WHERE r.root_run_id = roots.id"
                "   AND r.status IN ('completed','failed','cancelled') RETURNING r.id)"
                " SELECT count(*) AS n FROM gone",
                {"days": days, "tenant": tenant_id, "exclude": exclude or [], "limit": limit},
            )
            row = await cur.fetchone()
        return int(row["n"]) if row else 0

    async def concurrency(self, tenant_id: str) -> dict[str, Any]:
        """The tenant's runs holding a worker (a live lease), queued for one, and parked; per user."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT user_id,"
                " count(*) FILTER (WHERE lease_owner IS NOT NULL AND lease_until > now()) AS running,"
                " count(*) FILTER (WHERE status IN ('queued','running')"
                "   AND NOT (lease_owner IS NOT NULL AND lease_until > now())) AS queued,"
                " count(*) FILTER (WHERE status = 'waiting') AS waiting"
                " FROM runs WHERE tenant_id = %s AND status IN ('queued','running','waiting') GROUP BY user_id",
                (tenant_id,),
            )
            rows = await cur.fetchall()
        total = {k: sum(int(r[k]) for r in rows) for k in ("running", "queued", "waiting")}
        users = [{"user_id": r["user_id"], "running": int(r["running"]), "queued": int(r["queued"]),
                  "waiting": int(r["waiting"])} for r in rows if r["user_id"] is not None]
        return {**total, "users": users}

    async def list_unfinished(self, tenant_id: str | None, limit: int) -> list[RunRecord]:
        """Runs not yet finished (queued, running, waiting), oldest first: of one tenant, or — for
        the operator's cross-tenant view — of every tenant."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE status NOT IN ('completed', 'failed', 'cancelled')"
                " AND (%s::text IS NULL OR tenant_id = %s) ORDER BY created_at, id LIMIT %s",
                (tenant_id, tenant_id, limit),
            )
            return [_record(r) for r in await cur.fetchall()]

    async def list_runs(
        self, tenant_id: str, status: str | None, limit: int, before: tuple[datetime, str] | None = None,
        *, user_id: str | None = None, agent: str | None = None, parent_run_id: str | None = None,
        created_after: datetime | None = None, created_before: datetime | None = None,
    ) -> list[RunRecord]:
        """Newest first; `before` = (created_at, id) of the last run of the previous page;
        optionally only one user's runs, or one agent's, or one run's children, created in a window."""
        # only the filters asked for are in the statement: a prepared statement's generic plan
        # cannot use an index behind `(param IS NULL OR column = param)` (runs_tenant_agent_ix,
        # runs_tenant_user_ix)
        where: list[str] = ["tenant_id = %s"]
        params: list[object] = [tenant_id]
        for column, value in (("status", status), ("user_id", user_id), ("agent", agent),
                              ("parent_run_id", parent_run_id)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        if created_after is not None:
            where.append("created_at >= %s")
            params.append(created_after)
        if created_before is not None:
            where.append("created_at < %s")
            params.append(created_before)
        if before is not None:
            where.append("(created_at, id) < (%s, %s)")
            params.extend(before)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)}"
                " ORDER BY created_at DESC, id DESC LIMIT %s",
                (*params, limit),
            )
            rows = await cur.fetchall()
        return [_record(r) for r in rows]


def _record(row: dict[str, Any]) -> RunRecord:
    return RunRecord(**{k: v for k, v in row.items() if not k.startswith("_")})


def _trace_context(new: NewRun, run_id: str) -> Jsonb | None:
    """The context of the run's span (telemetry/tracing.py), stored on the run; None: tracing off."""
    carrier = tracing.run_created(run_id=run_id, tenant_id=new.tenant_id, agent=new.agent,
                                  parent_run_id=new.parent_run_id, depth=new.depth)
    return Jsonb(carrier) if carrier else None
