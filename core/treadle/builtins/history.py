"""Built-in `History` (default-deny, loomcycle's): browse, search and annotate past chats — a chat is
a session (store/sessions.py), which may span several runs.

Scopes (the agent's `history_scope`; empty: the tool refuses every op): `self` — the chats of
this agent; `user` — the chats of this run's user; `tenant` — every chat of the tenant. The owner
is resolved from the run, never from the request; a chat outside the scope is "not found".
loomcycle's `global` (cross-tenant) is refused: treadle's tools never read another tenant.

ops: list, get (`format: markdown` renders the transcript, `conversation` only its user and
assistant turns), search (full-text over title,
description, summary, tags and the chat's text), rename, annotate (description, tags), pin,
archive, resume (a continuation handle: continue with POST /v1/sessions/{id}/messages), related
(chats near a chat or a query: by meaning when an embedder is configured; `search` then fuses its
full-text ranking with the meaning's, reciprocal rank fusion — each chat's title,
summary and description embedded, lazily, by `related` itself (migration 0052) — else chats sharing
words, full-text), recap (a
fresh summary of the whole chat by its agent's model, stored as the chat's `summary`: loomcycle's
RecapSession, `Runtime.recap_session`). A recap call is an external effect (a model call is never
made inside the step's transaction); it is idempotent — a re-run after a crash writes a summary
again. The other ops write inside the step's transaction.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from treadle.domain.events import EventType
from treadle.embeddings.base import Embedder
from treadle.errors import ToolError, TreadleError
from treadle.ports import SessionRecapper
from treadle.store.db import Pool
from treadle.store.sessions import HistoryFilter, SessionHistory, SessionStore, embed_text
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = ("list", "get", "search", "rename", "annotate", "pin", "archive", "resume", "related", "recap")
SCOPES = ("self", "user", "tenant")
MAX_LIMIT = 100
#: related by meaning ranks at most this many of the fold's newest described chats
RELATED_CANDIDATES = 500


class ChatNotFound(ToolError):
    """A chat the scope does not reach (or none by that id): POST /v1/_history answers 404."""

    code = "session_not_found"
    status = 404


class HistoryTool:
    name = "History"
    effects: ToolEffects = "transactional"  # its writes (rename, annotate, pin, archive) commit with the step
    description = (
        "Your past chats (a chat = a session of runs). op: list (scope, tag, title_contains, pinned_only, "
        "include_archived, include_internal, from, to, limit, offset) | get (session_id, format: "
        "json|markdown|conversation) | search (query, "
        "scope, …) | rename (session_id, title) | annotate (session_id, description, tags) | pin (session_id, "
        "pinned) | archive (session_id, archived) | recap (session_id → a fresh summary of the chat, stored as "
        "its summary) | resume (session_id → how to continue it) | related (session_id or query). scope: self "
        "(your chats, default) | user (this user's) | tenant — as your "
        "history_scope allows."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS)},
            "scope": {"type": "string", "enum": [*SCOPES, "global"]},
            "session_id": {"type": "string"},
            "query": {"type": "string"},
            "title": {"type": "string", "maxLength": 512},
            "description": {"type": "string", "maxLength": 4096},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 64}, "maxItems": 32},
            "tag": {"type": "string"},
            "title_contains": {"type": "string"},
            "pinned": {"type": "boolean"},
            "archived": {"type": "boolean"},
            "pinned_only": {"type": "boolean"},
            "include_archived": {"type": "boolean"},
            "include_internal": {"type": "boolean",
                                 "description": "list / search / related: also the chats of `internal:` agents"},
            "from": {"type": "string", "description": "ISO 8601: chats created at or after"},
            "to": {"type": "string", "description": "ISO 8601: chats created before"},
            "format": {"type": "string", "enum": ["json", "markdown", "conversation"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
            "offset": {"type": "integer", "minimum": 0},
        },
        "required": ["op"],
    }

    @staticmethod
    def effects_for(args: dict[str, Any]) -> ToolEffects:
        """recap calls a model, related and search may call the embedder: outside the step's
        transaction; the other ops commit with the step."""
        return "external" if args.get("op") in ("recap", "related", "search") else "transactional"

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        allowed = tuple(getattr(ctx.agent_config, "history_scope", ()) or ())
        if not allowed:
            raise ToolError("History: this agent has no history_scope (default-deny)")
        op = args.get("op")
        if op not in OPS:
            raise ToolError(f"History: op must be one of {', '.join(OPS)}")
        history = History(ctx.services.runs.pool, ctx.tenant_id, ctx.agent, ctx.user_id, allowed,
                          ctx.services.recapper, ctx.services.vector_memory.embedder,
                          internal=tuple(n for n, a in ctx.services.config.agents.items() if a.internal))
        try:
            return ToolResult.json(await history.dispatch(str(op), args))
        except ToolError:
            raise
        except TreadleError as exc:  # recap's summary: the model failed, the agent is gone, …
            raise ToolError(f"History.{op}: {exc.message}") from None


class History:
    """One History call (the tool's, or POST /v1/_history's): the owner fold, then the op. `agent`
    and `user_id` are the caller's (the run's), never the request's."""

    def __init__(self, pool: Pool, tenant_id: str, agent: str | None, user_id: str | None,
                 allowed: tuple[str, ...], recapper: SessionRecapper | None = None,
                 embedder: Embedder | None = None, internal: tuple[str, ...] = ()) -> None:
        self.tenant_id, self.agent, self.user_id = tenant_id, agent, user_id
        #: the `internal:` agents, whose chats list / search / related leave out unless include_internal
        self.internal = internal
        self.allowed = allowed
        self.recapper = recapper
        self.embedder = embedder
        self.sessions = SessionStore(pool)
        self.history = SessionHistory(pool)

    def scope(self, args: dict[str, Any]) -> str:
        return str(args.get("scope") or ("self" if "self" in self.allowed else self.allowed[0]))

    def fold(self, args: dict[str, Any]) -> HistoryFilter:
        scope = self.scope(args)
        if scope == "global":
            raise ToolError("History: scope global (every tenant) is not offered; a tool reads its own tenant only")
        if scope not in SCOPES:
            raise ToolError(f"History: scope must be one of {', '.join(SCOPES)}")
        if scope not in self.allowed:
            raise ToolError(f"History: scope {scope!r} is not in this agent's history_scope {list(self.allowed)}")
        if scope == "user" and not self.user_id:
            raise ToolError("History: scope user needs a run with a user_id")
        return HistoryFilter(
            agent=(self.agent or "") if scope == "self" else None,
            user_id=self.user_id if scope == "user" else None,
            tag=_str(args, "tag"), title_contains=_str(args, "title_contains"),
            pinned_only=bool(args.get("pinned_only")), include_archived=bool(args.get("include_archived")),
            created_from=_when(args, "from"), created_to=_when(args, "to"),
            exclude_agents=() if args.get("include_internal") else self.internal,
        )

    async def one(self, args: dict[str, Any]) -> dict[str, Any]:
        """The chat `session_id` names, if the scope reaches it (else: not found)."""
        session_id = _str(args, "session_id")
        if not session_id:
            raise ToolError("History: session_id is required")
        f = self.fold(args)
        found = await self.sessions.get(self.tenant_id, session_id)
        if found is None or (f.agent is not None and found.agent != f.agent) or (
                f.user_id is not None and found.user_id != f.user_id):
            raise ChatNotFound(f"History: chat {session_id!r} not found")
        return found.to_api()

    async def dispatch(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        tenant = self.tenant_id
        limit = min(int(args.get("limit") or 20), MAX_LIMIT)
        if op == "list":
            chats = await self.history.list_chats(tenant, self.fold(args), limit, int(args.get("offset") or 0))
            return {"chats": chats, "count": len(chats)}
        if op == "related" and self.embedder is not None:
            return await self.related_by_meaning(args, limit)
        if op in ("search", "related"):
            f = self.fold(args)
            query, exclude = _str(args, "query"), None
            if op == "related" and _str(args, "session_id"):
                source = await self.one(args)
                exclude = source["id"]
                query = " ".join(str(source.get(k) or "") for k in ("title", "summary", "description"))
                query = f"{query} {' '.join(source.get('tags') or [])}".strip()
            if not query:
                raise ToolError(f"History.{op}: query is required" + (" (or session_id)" if op == "related" else ""))
            chats = await self.history.search(tenant, f, query, limit, any_term=op == "related", exclude=exclude)
            if op == "search" and self.embedder is not None:  # and by meaning: the two rankings fused
                near = (await self.related_by_meaning({**args, "session_id": None}, limit))["chats"]
                fused = _fuse(chats, near, limit=limit)
                return {"chats": fused, "count": len(fused), "ranking": "hybrid"}
            return {"chats": chats, "count": len(chats), "ranking": "full-text"}
        chat = await self.one(args)
        sid = chat["id"]
        if op == "get":
            return await self.get(chat, args.get("format") or "json")
        if op == "recap":
            if self.recapper is None:
                raise ToolError("History.recap: not configured (no summarizer wired)")
            summary = await self.recapper.recap_session(tenant, sid)
            updated = await self.sessions.update(tenant, sid, {"summary": summary})
            assert updated is not None
            return {"scope": self.scope(args), "summary": summary, "chat": updated.to_api()}
        if op == "resume":
            live = await self.sessions.live_run(tenant, sid)
            return {"session_id": sid, "agent": chat["agent"], "tenant_id": tenant, "user_id": chat["user_id"],
                    "status": "live" if live else "idle", "live_run_id": live, "last_activity": chat["updated_at"],
                    "hint": f"continue with POST /v1/sessions/{sid}/messages (or POST /v1/runs with session_id)"
                            + (" once its live run has ended" if live else "")}
        changes: dict[str, Any]
        if op == "rename":
            title = _str(args, "title")
            if title is None:
                raise ToolError("History.rename: title is required")
            changes = {"title": title[:512]}
        elif op == "annotate":
            changes = {}
            if "description" in args:
                changes["description"] = str(args["description"])[:4096]
            if "tags" in args:
                tags = args["tags"]
                if not isinstance(tags, list) or len(tags) > 32 or not all(isinstance(t, str) and 0 < len(t) <= 64
                                                                          for t in tags):
                    raise ToolError("History.annotate: tags must be ≤ 32 strings of 1 to 64 characters")
                changes["tags"] = tags
            if not changes:
                raise ToolError("History.annotate: give description and/or tags")
        elif op == "pin":
            changes = {"pinned": bool(args.get("pinned", True))}
        else:  # archive
            changes = {"archived": bool(args.get("archived", True))}
        updated = await self.sessions.update(tenant, sid, changes)
        assert updated is not None
        return updated.to_api()

    async def related_by_meaning(self, args: dict[str, Any], limit: int) -> dict[str, Any]:
        """loomcycle's related: the chats whose title, summary and description are nearest (cosine)
        to a chat's own or to `query`; a chat whose text changed since it was embedded (or never
        was) is embedded first, in one call."""
        embedder = self.embedder
        assert embedder is not None
        f = self.fold(args)
        source_id = _str(args, "session_id")
        if source_id:
            source = await self.one(args)
            text = embed_text(source.get("title"), source.get("summary"), source.get("description"))
            if not text:
                raise ToolError("History.related: the chat has no title, summary or description to match on "
                                "(recap or annotate it first)")
        else:
            text = (_str(args, "query") or "").strip()
            if not text:
                raise ToolError("History.related: query is required (or session_id)")
        candidates = await self.history.embedding_candidates(self.tenant_id, f, embedder.model, RELATED_CANDIDATES,
                                                             exclude=source_id)
        stale = [(chat["id"], t) for chat, t, vec in candidates if vec is None]
        vectors = await embedder.embed([text, *(t for _, t in stale)], "document")
        fresh = {sid: vec for (sid, _), vec in zip(stale, vectors[1:], strict=True)}
        if stale:
            await self.history.store_embeddings(self.tenant_id, embedder.model,
                                                [(sid, t, fresh[sid]) for sid, t in stale])
        ranked = sorted(((_cosine(vectors[0], vec if vec is not None else fresh[chat["id"]]), chat)
                         for chat, _, vec in candidates), key=lambda p: -p[0])
        chats = [{**chat, "score": round(score, 6)} for score, chat in ranked[:limit]]
        out: dict[str, Any] = {"chats": chats, "count": len(chats), "ranking": "embedding",
                               "model": embedder.model}
        if source_id:
            out["source_session_id"] = source_id
        else:
            out["query"] = text
        return out

    async def get(self, chat: dict[str, Any], fmt: str) -> dict[str, Any]:
        events = []
        after = (-1, 0)
        while True:
            page = await self.sessions.events(self.tenant_id, chat["id"], after=after, limit=1000)
            for place, e in page:
                events.append({"run_id": e.run_id, "seq": e.seq, "type": e.type, **e.payload})
                after = (place, e.seq)
            if len(page) < 1000:
                break
        if fmt == "markdown":
            return {**chat, "markdown": _markdown(chat, events)}
        if fmt == "conversation":
            return {**chat, "format": "conversation", "markdown": conversation(events)}
        return {**chat, "events": events}


def _markdown(chat: dict[str, Any], events: list[dict[str, Any]]) -> str:
    lines = [f"# {chat.get('title') or chat['id']}", "", f"agent `{chat['agent']}`, started {chat['created_at']}", ""]
    for e in events:
        if e["type"] == EventType.USER_INPUT:
            text = " ".join(str(b.get("text", "")) for seg in e.get("segments") or [] if seg.get("role") == "user"
                            for b in seg.get("content") or [] if isinstance(b, dict))
            lines += ["**user:** " + text, ""]
        elif e["type"] == EventType.TEXT:
            lines += ["**assistant:** " + str(e.get("text", "")), ""]
        elif e["type"] == EventType.TOOL_CALL:
            tu = e.get("tool_use") or {}
            lines += [f"*tool call* `{tu.get('name')}`", ""]
        elif e["type"] == EventType.CONTEXT_COMPACTION:
            lines += ["*(the conversation was compacted here)*", ""]
    return "\n".join(lines)


def conversation(events: list[dict[str, Any]]) -> str:
    """loomcycle's `format: conversation`: the user turns and the assistant's replies, in order, and
    nothing else — no header, no tool traffic, no system framing (what a memory extractor reads)."""
    out: list[str] = []
    reply: list[str] = []

    def flush() -> None:
        text = "".join(reply).strip()
        if text:
            out.append(f"### assistant\n\n{text}\n\n")
        reply.clear()

    for e in events:
        if e["type"] == EventType.USER_INPUT:
            flush()
            parts = [str(b.get("text", "")).strip() for seg in e.get("segments") or [] if seg.get("role") == "user"
                     for b in seg.get("content") or [] if isinstance(b, dict) and b.get("type") != "image"]
            text = "\n\n".join(p for p in parts if p)
            if text:
                out.append(f"### user\n\n{text}\n\n")
        elif e["type"] == EventType.TEXT:
            reply.append(str(e.get("text", "")))
        elif e["type"] == EventType.TOOL_CALL:
            flush()
    flush()
    return "".join(out)


def _fuse(*rankings: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Reciprocal rank fusion (k = 60) of rankings of chats: a chat high in either ranks high."""
    score: dict[str, float] = {}
    chat: dict[str, dict[str, Any]] = {}
    for ranking in rankings:
        for rank, c in enumerate(ranking):
            score[c["id"]] = score.get(c["id"], 0.0) + 1 / (60 + rank + 1)
            chat.setdefault(c["id"], c)
    best = sorted(score, key=lambda i: -score[i])[:limit]
    return [{**chat[i], "score": round(score[i], 6)} for i in best]


def _cosine(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _str(args: dict[str, Any], key: str) -> str | None:
    v = args.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ToolError(f"History: {key} must be a string")
    return v


def _when(args: dict[str, Any], key: str) -> datetime | None:
    v = _str(args, key)
    if not v:
        return None
    try:
        return datetime.fromisoformat(v)
    except ValueError:
        raise ToolError(f"History: {key} must be an ISO 8601 time") from None
