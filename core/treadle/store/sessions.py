"""Sessions (migration 0050): a session holds many runs of one agent and user, in order
(`runs.session_seq`). A run continuing a session is created by `RunStore.create` with
`NewRun.session_id`; its history is the session's earlier runs' events, read in place
(`StepStore.session_history`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.domain.events import EventType, sql_in
from treadle.store.db import Pool

_COLUMNS = ("id, tenant_id, agent, user_id, created_at, updated_at, title, description, tags, pinned,"
            " archived_at, summary, summary_updated_at, run_count")


@dataclass(slots=True)
class SessionRecord:
    id: str
    tenant_id: str
    agent: str
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    title: str | None = None
    description: str | None = None
    tags: list[str] = field(default_factory=list)
    pinned: bool = False
    archived_at: datetime | None = None
    summary: str | None = None
    summary_updated_at: datetime | None = None
    run_count: int = 0

    def to_api(self) -> dict[str, Any]:
        """loomcycle's session object (`{id, user_id, agent, created_at, …}`), plus treadle's counts."""
        return {
            "id": self.id,
            "session_id": self.id,
            "agent": self.agent,
            "user_id": self.user_id or "",
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "title": self.title or "",
            "description": self.description or "",
            "tags": list(self.tags or []),
            "pinned": self.pinned,
            "archived": self.archived_at is not None,
            "archived_at": self.archived_at.isoformat() if self.archived_at else None,
            "summary": self.summary or "",
            "summary_updated_at": self.summary_updated_at.isoformat() if self.summary_updated_at else None,
            "run_count": self.run_count,
        }


#: the events a replay carries into its new session: the conversation (user turns, the assistant's
#: text and tool calls, the tool results) and its compactions. Reasoning (`thinking`, signed for one
#: provider) is left out so another provider may continue it, as loomcycle strips it; usage, endings
#: and waits belong to the runs that made them.
CARRIED = (EventType.USER_INPUT, EventType.TEXT, EventType.TOOL_CALL, EventType.TOOL_RESULT,
           EventType.CONTEXT_COMPACTION)


@dataclass(frozen=True, slots=True)
class Seed:
    """A replay's new session: its ended seed run, the session's agent and user, the first event
    (`started`) and the events after the carried ones (a compaction marker, the `done`)."""

    run_id: str
    session_id: str
    agent: str
    user_id: str | None
    def_id: str | None
    def_content_sha256: str | None
    started: dict[str, Any]
    tail: tuple[tuple[str, dict[str, Any]], ...]


@dataclass(slots=True)
class SessionEvent:
    """One event of a session's transcript: its run, the run's seq, the session-wide order."""

    run_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: datetime | None


class SessionStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM sessions WHERE id = %s AND tenant_id = %s",
                                     (session_id, tenant_id))
            row = await cur.fetchone()
        return SessionRecord(**row) if row else None

    async def list_sessions(self, tenant_id: str, *, user_id: str | None = None, agent: str | None = None,
                   include_archived: bool = False, limit: int = 50,
                   before: tuple[datetime, str] | None = None) -> list[SessionRecord]:
        """Newest activity first; pinned sessions are not reordered (the caller sorts if it wants)."""
        where = ["tenant_id = %s"]
        params: list[object] = [tenant_id]
        for column, value in (("user_id", user_id), ("agent", agent)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        if not include_archived:
            where.append("archived_at IS NULL")
        if before is not None:
            where.append("(updated_at, id) < (%s, %s)")
            params.extend(before)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE {' AND '.join(where)}"
                " ORDER BY updated_at DESC, id DESC LIMIT %s", (*params, limit))
            return [SessionRecord(**r) for r in await cur.fetchall()]

    async def update(self, tenant_id: str, session_id: str, changes: dict[str, Any]) -> SessionRecord | None:
        """Set the given metadata (`title`, `description`, `tags`, `pinned`, `archived`, `summary`)."""
        sets: list[str] = []
        params: list[object] = []
        for name in ("title", "description", "tags", "pinned"):
            if name in changes:
                sets.append(f"{name} = %s")
                params.append(changes[name])
        if "archived" in changes:
            sets.append("archived_at = CASE WHEN %s THEN coalesce(archived_at, now()) END")
            params.append(bool(changes["archived"]))
        if "summary" in changes:
            sets.append("summary = %s, summary_updated_at = now()")
            params.append(changes["summary"])
        if not sets:
            return await self.get(tenant_id, session_id)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"UPDATE sessions SET {', '.join(sets)} WHERE id = %s AND tenant_id = %s RETURNING {_COLUMNS}",
                (*params, session_id, tenant_id))
            row = await cur.fetchone()
        return SessionRecord(**row) if row else None

    async def live_run(self, tenant_id: str, session_id: str) -> str | None:
        """The id of the session's unfinished run, if any."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM runs WHERE tenant_id = %s AND session_id = %s"
                " AND status IN ('queued','running','waiting') LIMIT 1", (tenant_id, session_id))
            row = await cur.fetchone()
        return row["id"] if row else None

    async def run_ids(self, tenant_id: str, session_id: str) -> list[str]:
        """The session's runs in order."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM runs WHERE tenant_id = %s AND session_id = %s ORDER BY session_seq",
                (tenant_id, session_id))
            return [r["id"] for r in await cur.fetchall()]

    async def seed(self, tenant_id: str, source_id: str, seed: Seed, upto: tuple[int, int] | None) -> int:
        """loomcycle's replay, as one statement (a crash leaves all of it or none): a new session
        holding one ended run whose events are `started`, the source session's `CARRIED` events
        (up to `upto` = (session_seq, seq) when given: what a compaction was computed on), then
        `seed.tail`. Returns how many events were carried; 0: none, and nothing was written. A
        seed run that exists already (a retried fork's: its id comes from the idempotency key) is
        kept as it is, and the count is still returned."""
        params: dict[str, Any] = {
            "tenant": tenant_id, "src": source_id, "types": [str(t) for t in CARRIED],
            "place": upto[0] if upto else None, "seq": upto[1] if upto else None,
            "id": seed.run_id, "user": seed.user_id, "agent": seed.agent, "ntail": len(seed.tail),
            "def_id": seed.def_id, "def_sha": seed.def_content_sha256, "sid": seed.session_id,
            "started": Jsonb(seed.started)}
        tail: list[str] = []
        for back, (etype, payload) in enumerate(reversed(seed.tail)):
            params[f"tt{back}"], params[f"tp{back}"] = etype, Jsonb(payload)
            tail.append(f"SELECT {back} AS back, %(tt{back})s::text AS type, %(tp{back})s::jsonb AS payload")
        tail_insert = (" UNION ALL SELECT r.id, r.last_seq - t.back, r.tenant_id, t.type, t.payload"
                       f" FROM r, ({' UNION ALL '.join(tail)}) t") if tail else ""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH src AS ("
                " SELECT e.type, e.payload, 1 + row_number() OVER (ORDER BY r.session_seq, e.seq) AS seq"
                " FROM runs r JOIN events e ON e.run_id = r.id"
                " WHERE r.tenant_id = %(tenant)s AND r.session_id = %(src)s AND e.type = ANY(%(types)s)"
                " AND (%(place)s::int IS NULL OR (r.session_seq, e.seq) <= (%(place)s::int, %(seq)s::int))"
                "), n AS (SELECT count(*)::int AS copied FROM src"
                "), r AS ("
                " INSERT INTO runs (id, tenant_id, user_id, agent, status, stop_reason, root_run_id, last_seq,"
                " completed_at, def_id, def_content_sha256, session_id, session_seq)"
                " SELECT %(id)s, %(tenant)s, %(user)s, %(agent)s, 'completed', 'end_turn', %(id)s,"
                " 1 + n.copied + %(ntail)s, now(), %(def_id)s, %(def_sha)s, %(sid)s, 0"
                " FROM n WHERE n.copied > 0 ON CONFLICT (id) DO NOTHING"
                " RETURNING id, tenant_id, last_seq, created_at"
                "), ns AS ("
                " INSERT INTO sessions (id, tenant_id, agent, user_id, run_count, created_at, updated_at)"
                " SELECT %(sid)s, r.tenant_id, %(agent)s, %(user)s, 1, r.created_at, r.created_at FROM r"
                "), ev AS ("
                " INSERT INTO events (run_id, seq, tenant_id, type, payload)"
                f" SELECT r.id, 1, r.tenant_id, '{EventType.STARTED}', %(started)s FROM r"
                " UNION ALL SELECT r.id, src.seq, r.tenant_id, src.type, src.payload FROM r, src"
                f"{tail_insert}"
                ") SELECT n.copied FROM n", params)
            row = await cur.fetchone()
        return int(row["copied"]) if row else 0

    async def events(self, tenant_id: str, session_id: str, *, after: tuple[int, int] = (-1, 0),
                     limit: int = 1000) -> list[tuple[int, SessionEvent]]:
        """A page of the session's events in order, each with its run's place in the session;
        `after` = (session_seq, seq) of the last event of the previous page."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT r.session_seq, e.run_id, e.seq, e.type, e.payload, e.created_at"
                " FROM runs r JOIN events e ON e.run_id = r.id"
                " WHERE r.tenant_id = %s AND r.session_id = %s AND (r.session_seq, e.seq) > (%s, %s)"
                " ORDER BY r.session_seq, e.seq LIMIT %s",
                (tenant_id, session_id, after[0], after[1], limit))
            rows = await cur.fetchall()
        return [(int(r["session_seq"]), SessionEvent(r["run_id"], r["seq"], r["type"], r["payload"], r["created_at"]))
                for r in rows]


@dataclass(frozen=True, slots=True)
class HistoryFilter:
    """Which sessions a History read sees: the owner fold (agent / user; None: any) and filters."""

    agent: str | None = None
    user_id: str | None = None
    tag: str | None = None
    title_contains: str | None = None
    pinned_only: bool = False
    include_archived: bool = False
    created_from: datetime | None = None
    created_to: datetime | None = None
    #: the chats of these agents are left out (the `internal:` agents')
    exclude_agents: tuple[str, ...] = ()

    def where(self, tenant_id: str) -> tuple[str, list[object]]:
        where: list[str] = ["s.tenant_id = %s"]
        params: list[object] = [tenant_id]
        clauses: tuple[tuple[str, object], ...] = (
            ("s.agent = %s", self.agent), ("s.user_id = %s", self.user_id), ("%s = ANY(s.tags)", self.tag),
            ("s.created_at >= %s", self.created_from), ("s.created_at < %s", self.created_to))
        for clause, value in clauses:
            if value is not None:
                where.append(clause)
                params.append(value)
        if self.title_contains:
            where.append("s.title ILIKE %s")
            params.append("%" + self.title_contains.replace("%", r"\%").replace("_", r"\_") + "%")
        if self.pinned_only:
            where.append("s.pinned")
        if not self.include_archived:
            where.append("s.archived_at IS NULL")
        if self.exclude_agents:
            where.append("NOT (s.agent = ANY(%s))")
            params.append(list(self.exclude_agents))
        return " AND ".join(where), params


_AGGREGATES = (", (SELECT json_build_object('runs', count(*), 'input_tokens', coalesce(sum(r.input_tokens), 0),"
               " 'output_tokens', coalesce(sum(r.output_tokens), 0), 'last_status', (array_agg(r.status ORDER BY"
               " r.session_seq DESC))[1]) FROM runs r WHERE r.tenant_id = s.tenant_id AND r.session_id = s.id)"
               " AS aggregates")
#: a session's searchable text: its metadata and its user and assistant text
_DOCUMENT = ("coalesce(s.title, '') || ' ' || coalesce(s.description, '') || ' ' || coalesce(s.summary, '')"
             " || ' ' || array_to_string(s.tags, ' ') || ' ' || coalesce((SELECT string_agg(coalesce("
             "e.payload->>'text', e.payload->'segments'->0->'content'->0->>'text', ''), ' ') FROM runs r"
             " JOIN events e ON e.run_id = r.id WHERE r.tenant_id = s.tenant_id AND r.session_id = s.id"
             f" AND e.type IN {sql_in(EventType.USER_INPUT, EventType.TEXT)}), '')")
_HISTORY_COLUMNS = ", ".join("s." + c.strip() for c in _COLUMNS.split(","))


class SessionHistory:
    """The History tool's and route's reads (builtins/history.py): folded to an owner, ranked."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def list_chats(self, tenant_id: str, f: HistoryFilter, limit: int, offset: int) -> list[dict[str, Any]]:
        where, params = f.where(tenant_id)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_HISTORY_COLUMNS}{_AGGREGATES} FROM sessions s WHERE {where}"
                " ORDER BY s.pinned DESC, s.updated_at DESC, s.id DESC LIMIT %s OFFSET %s",
                (*params, limit, offset))
            return [_history_row(r) for r in await cur.fetchall()]

    async def search(self, tenant_id: str, f: HistoryFilter, query: str, limit: int, *,
                     any_term: bool = False, exclude: str | None = None) -> list[dict[str, Any]]:
        """Full-text search (Postgres `simple` configuration) over a session's title, description,
        summary, tags and its user and assistant text, best first; `any_term`: a session matching
        any word ranks (related), else every word must match."""
        where, params = f.where(tenant_id)
        if exclude is not None:
            where += " AND s.id <> %s"
            params.append(exclude)
        words = [w for w in "".join(c if c.isalnum() else " " for c in query.lower()).split() if w][:32]
        if not words:
            return []
        tsquery = (" | " if any_term else " & ").join(words)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT * FROM (SELECT {_HISTORY_COLUMNS}{_AGGREGATES},"
                f" ts_rank(to_tsvector('simple', {_DOCUMENT}), to_tsquery('simple', %s)) AS score"
                f" FROM sessions s WHERE {where}) x"
                " WHERE x.score > 0 ORDER BY x.score DESC, x.updated_at DESC LIMIT %s",
                (tsquery, *params, limit))
            return [_history_row(r) for r in await cur.fetchall()]


    async def embedding_candidates(self, tenant_id: str, f: HistoryFilter, model: str, limit: int,
                                   exclude: str | None = None) -> list[tuple[dict[str, Any], str, list[float] | None]]:
        """The newest chats of the fold that have a text to embed (title, summary, description):
        each as a History row, its text, and its stored vector of `model` if that text is the one
        it was made from (None: to embed)."""
        where, params = f.where(tenant_id)
        if exclude is not None:
            where += " AND s.id <> %s"
            params.append(exclude)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_HISTORY_COLUMNS}{_AGGREGATES}, x.source_text AS embedded_text, x.embedding"
                f" FROM sessions s LEFT JOIN session_embeddings x ON x.session_id = s.id AND x.model = %s"
                f" WHERE {where} AND coalesce(s.title, '') || coalesce(s.summary, '') || coalesce(s.description, '')"
                " <> '' ORDER BY s.updated_at DESC, s.id DESC LIMIT %s", (model, *params, limit))
            rows = await cur.fetchall()
        out: list[tuple[dict[str, Any], str, list[float] | None]] = []
        for r in rows:
            embedded, vector = r.pop("embedded_text"), r.pop("embedding")
            text = embed_text(r.get("title"), r.get("summary"), r.get("description"))
            out.append((_history_row(r), text, vector if embedded == text else None))
        return out

    async def store_embeddings(self, tenant_id: str, model: str, rows: list[tuple[str, str, list[float]]]) -> None:
        """(session_id, text, vector) of `model`, replacing what each chat had."""
        async with self.pool.connection() as conn:
            for session_id, text, vector in rows:
                await conn.execute(
                    "INSERT INTO session_embeddings (session_id, tenant_id, model, source_text, embedding)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id) DO UPDATE SET model = excluded.model,"
                    " source_text = excluded.source_text, embedding = excluded.embedding, updated_at = now()",
                    (session_id, tenant_id, model, text, vector))


def embed_text(title: str | None, summary: str | None, description: str | None) -> str:
    """What a chat's embedding is made from (loomcycle's sessionEmbedText)."""
    return "\n".join(t for t in ((title or "").strip(), (summary or "").strip(), (description or "").strip()) if t)


def _history_row(row: dict[str, Any]) -> dict[str, Any]:
    aggregates = row.pop("aggregates", None) or {}
    score = row.pop("score", None)
    out = SessionRecord(**row).to_api()
    out["run_count"] = int(aggregates.get("runs") or out["run_count"])
    out["usage"] = {"input_tokens": int(aggregates.get("input_tokens") or 0),
                    "output_tokens": int(aggregates.get("output_tokens") or 0)}
    out["status"] = aggregates.get("last_status")
    if score is not None:
        out["score"] = round(float(score), 6)
    return out
