"""Built-in `Memory`: a small key/value store per scope (agent, user, tenant), with optional TTL,
and a vector facet: `set` with `embed: true` stores an embedding of the value, `search` ranks a
scope's embedded keys by meaning (substrate/memory.py). Values and scopes have byte quotas.

TTL: `ttl_seconds` (treadle's spelling, > 0) or `ttl` (loomcycle's: seconds, 0 = no expiry, and
on an existing key keep its expiry); both given must agree. `set` without either stores the value
without expiry; `incr` and `merge` without either keep the key's expiry. Arguments the input schema does not
name are refused (code unknown_field), and a TTL on an op that does not write is refused."""

from __future__ import annotations

import json
from typing import Any

from treadle.builtins import memory_consolidation as consolidation
from treadle.builtins.args import refuse_fields, refuse_unknown, ttl_arg
from treadle.builtins.path import dirents_of
from treadle.errors import ToolError, TreadleError
from treadle.knowledge.pathtree import PathTree
from treadle.ports import VectorMemory
from treadle.store.dirents import Tree
from treadle.store.folding import FoldedWrite
from treadle.store.memory import DEFAULT_MAX_VALUE_BYTES, INCR, incr_params
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

MAX_VALUE_BYTES = DEFAULT_MAX_VALUE_BYTES
MAX_KEY_LEN = 512
OPS = ("set", "get", "delete", "list", "incr", "merge", "search", "add", "recall", *consolidation.OPS)
SCOPES = ("agent", "user", "tenant")
#: loomcycle's SQL memory ops (knowledge/sqlmemory.py), gated by the agent's sql_scopes
SQL_OPS = ("sql_query", "sql_exec", "sql_begin", "sql_commit", "sql_rollback")
SQL_SCOPES = ("agent", "user", "run", "tenant")


#: `incr` as a folded write: the new value's digits spliced into the result's JSON
_FOLDED_INCR = INCR.format(returning="%(tool_head)s || (m.value #>> '{}') || '}' AS text")


class MemoryTool:
    name = "Memory"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Persistent key/value memory. op: set|get|delete|list|incr|merge|search|add|recall. scope: agent "
        "(shared by every run of this agent), user (this run's user), tenant (everyone in the tenant; needs "
        "permission). set takes value (any JSON), optional ttl_seconds (or ttl: seconds, 0 = no expiry / keep the "
        "key's expiry), and embed: true (with optional embed_text) to make "
        "the entry findable by meaning; search takes query and optional k (or top_k), min_score (cosine similarity), "
        "recency_weight (0..1), prefix, and loomcycle's rank, dedup and sources, and returns keys ranked by score. "
        "add takes messages [{role, content}] and infer (default true: the model extracts durable facts); recall "
        "takes query, top_k and threshold and returns remembered facts. list takes optional prefix and "
        "limit; incr takes optional delta (default 1); merge deep-merges value (a JSON object) into the key's "
        "object (nested objects merge, anything else replaces) and returns the merged value. SQL memory (only in "
        "the agent's sql_scopes): sql_query runs "
        "one read-only statement, sql_exec one DDL/DML statement (args bind $1, $2, …) in a per-scope Postgres "
        "schema: agent, user, tenant (durable) or run (this run's scratch)."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": [*OPS, *SQL_OPS]},
            "scope": {"type": "string", "enum": [*SCOPES, "run"],
                      "description": "run: SQL ops only (a scratch database of this run)"},
            "key": {"type": "string"},
            "value": {},
            "ttl_seconds": {"type": "number", "exclusiveMinimum": 0,
                            "description": "set/incr/merge: expire after"},
            "ttl": {
                "type": "number", "minimum": 0,
                "description": "set/incr/merge: loomcycle's spelling of ttl_seconds; 0 = no expiry (an existing "
                               "key keeps its expiry)",
            },
            "embed": {"type": "boolean", "description": "set: also store an embedding of the value"},
            "embed_text": {"type": "string", "description": "set: embed this text instead of the value"},
            "query": {"type": "string", "description": "search: what to look for"},
            "k": {"type": "integer", "minimum": 1, "description": "search: how many results (default 10)"},
            "top_k": {"type": "integer", "minimum": 1, "description": "search: loomcycle's spelling of k"},
            "min_score": {"type": "number", "description": "search: drop results less similar than this"},
            "recency_weight": {"type": "number", "minimum": 0, "maximum": 1},
            "recency_half_life_hours": {"type": "number", "exclusiveMinimum": 0},
            "include_values": {"type": "boolean"},
            "prefix": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            "delta": {"type": "integer"},
            **consolidation.SCHEMA,
            "statement": {"type": "string",
                          "description": "sql_query (read-only) / sql_exec (DDL, DML): one statement"},
            "args": {"type": "array", "description": "sql_query / sql_exec: values of $1, $2, …", "items": {}},
            "timeout_ms": {"type": "integer", "minimum": 1,
                           "description": "sql_query / sql_exec: a shorter statement timeout than the server's"},
            "rank": {
                "type": "object",
                "description": "search: hybrid ranking weights (omit: pure semantic). rank_score = "
                               "semantic_weight·cosine + recency_weight·2^(-age/recency_half_life_hours) + "
                               "frequency_weight·ln(1+times returned); source_weight is reserved (0, answered "
                               "with rank_note)",
                "properties": {"semantic_weight": {"type": "number"}, "recency_weight": {"type": "number"},
                               "recency_half_life_hours": {"type": "number"}, "source_weight": {"type": "number"},
                               "frequency_weight": {"type": "number"}},
                "additionalProperties": False,
            },
            "dedup": {
                "type": "object",
                "description": "search: collapse near-duplicates after ranking: enabled, threshold (cosine similarity, "
                               "default 0.92), mode drop (default) | merge (kept hit's value gains merged_from) | keep "
                               "(counted only)",
                "properties": {"enabled": {"type": "boolean"}, "threshold": {"type": "number"},
                               "mode": {"type": "string", "enum": ["drop", "merge", "keep"]}},
                "additionalProperties": False,
            },
            "sources": {
                "type": "array", "items": {"type": "string", "enum": ["facts", "notes", "documents"]},
                "description": "search / recall: facts (entries with provenance: add with infer, set with provenance), "
                               "notes (entries without), documents (Document chunk bodies). search defaults to all, "
                               "recall to facts; documents with only one of facts/notes is refused",
            },
            "messages": {
                "type": "array", "description": "add: the conversation turns to remember",
                "items": {"type": "object", "properties": {
                    "role": {"type": "string", "enum": ["user", "assistant", "system"]}, "content": {"type": "string"}},
                    "required": ["role", "content"]},
            },
            "infer": {"type": "boolean",
                      "description": "add: true (default) = the model extracts durable facts (stored with provenance; "
                                     "contradictions with known facts reported, never acted on); false = the turns "
                                     "stored verbatim as one entry"},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"},
                         "description": "add: context recorded in each fact's provenance"},
            "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                          "description": "recall: drop facts less similar than this (0 = none)"},
            "provenance": {
                "type": "object", "additionalProperties": False,
                "description": "set: where this fact came from (makes the entry a fact, not a note)",
                "properties": {"class": {"type": "string"}, "source_session_id": {"type": "string"},
                               "source_run_id": {"type": "string"}},
            },
            "path": {"type": "string",
                     "description": "set: also name the entry in the Path tree (e.g. /notes/today); get: read the "
                                    "entry this path names instead of giving key"},
        },
        "required": ["op", "scope"],
    }

    @staticmethod
    def effects_for(args: dict[str, Any]) -> ToolEffects:
        """add (a model call, the embedder), search and recall (the embedder) run outside the step's
        transaction, as History's recap and search do: a slow call never holds it open past the
        lease. A re-run of the step repeats them harmlessly: add writes each fact under a digest of
        its text (a paraphrase of a known fact falls in the merge band and is not stored again), a
        verbatim add under a key of the call; search only counts returns. The other ops commit with
        the step."""
        return "external" if args.get("op") in ("add", "search", "recall") else "transactional"

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        if args.get("op") in SQL_OPS:
            from treadle.knowledge.sqlmemory import sql_op  # the knowledge layer's; loaded on first use

            refuse_unknown(args, self.input_schema, "Memory")
            return await sql_op(ctx, args)
        op, scope, scope_id = self._target(ctx, args)
        try:
            return await self._op(ctx, op, scope, scope_id, args)
        except TreadleError as exc:
            if isinstance(exc, ToolError):
                raise
            raise ToolError(f"Memory.{op}: {exc.code}: {exc.message.removeprefix(exc.code + ': ')}") from None

    def fold(self, ctx: ToolContext, args: dict[str, Any]) -> FoldedWrite | None:
        """`incr` as one statement the step's commit carries (store/folding.py), with the result
        text `invoke` gives — the same statement, the new value's digits spliced into its JSON.
        Other ops: None (they run as calls). Raises what `invoke` would raise for bad input."""
        if args.get("op") != "incr":
            return None
        _, scope, scope_id = self._target(ctx, args)
        ttl, _ = ttl_arg(args, "Memory")
        key, delta = _key(args), _delta(args)
        head = '{"key":' + json.dumps(key) + ',"value":'  # ToolResult.json's form: compact, keys sorted
        return FoldedWrite(
            _FOLDED_INCR,
            {**incr_params(ctx.tenant_id, scope, scope_id, key, delta, ttl), "tool_head": head},
            failed=_not_an_integer(key),
        )

    def _target(self, ctx: ToolContext, args: dict[str, Any]) -> tuple[str, str, str]:
        """(op, scope, scope_id) of a call whose fields, op, scope and permission are valid."""
        refuse_unknown(args, self.input_schema, "Memory")
        op = args.get("op")
        if op not in OPS:
            raise ToolError(f"Memory: op must be one of {', '.join((*OPS, *SQL_OPS))}")
        refuse_fields(args, ("statement", "args", "timeout_ms"), "Memory", op, "the sql_* ops")
        if op not in ("set", "get"):
            refuse_fields(args, ("path",), "Memory", op, "set and get")
        if op != "search":
            refuse_fields(args, ("rank", "dedup"), "Memory", op, "search")
        if op not in ("search", "recall"):
            refuse_fields(args, ("sources",), "Memory", op, "search and recall")
        if op != "add":
            refuse_fields(args, ("messages", "infer", "metadata"), "Memory", op, "add")
        if op != "recall":
            refuse_fields(args, ("threshold",), "Memory", op, "recall")
        if op != "set":
            refuse_fields(args, ("provenance", "from_pending"), "Memory", op, "set")
        if op not in consolidation.OPS:
            refuse_fields(args, consolidation.FIELDS, "Memory", op, "the consolidation ops")
        scope = args.get("scope")
        if scope not in SCOPES:
            raise ToolError(f"Memory: scope must be one of {', '.join(SCOPES)}")
        if scope not in ctx.memory_scopes:
            raise ToolError(
                f"Memory: scope {scope!r} is not permitted for agent {ctx.agent!r}"
                f" (its memory_scopes: {', '.join(ctx.memory_scopes) or 'none'})"
            )
        return op, scope, _scope_id(ctx, scope)

    async def _op(self, ctx: ToolContext, op: str, scope: str, scope_id: str, args: dict[str, Any]) -> ToolResult:
        mem, tenant = ctx.memory, ctx.tenant_id
        if op not in ("set", "incr", "merge"):
            refuse_fields(args, ("ttl", "ttl_seconds"), "Memory", op, "set, incr and merge")
        ttl, keep_expiry = ttl_arg(args, "Memory")
        if op == "list":
            prefix = args.get("prefix") or ""
            if not isinstance(prefix, str):
                raise ToolError("Memory.list: prefix must be a string")
            limit = args.get("limit", 100)
            if not isinstance(limit, int) or not 1 <= limit <= 1000:
                raise ToolError("Memory.list: limit must be an integer in 1..1000")
            entries = await mem.list(tenant, scope, scope_id, prefix, limit)
            return ToolResult.json({"scope": scope, "entries": entries, "count": len(entries)})
        if op == "search":
            return ToolResult.json(await _search(ctx, scope, scope_id, args))
        if op == "recall":
            return ToolResult.json(await _recall(ctx, scope, scope_id, args))
        if op == "add":
            return ToolResult.json(await _add(ctx, scope, scope_id, args))
        if op in consolidation.OPS:
            return ToolResult.json(await consolidation.run_op(ctx, op, scope, scope_id, args))

        if op == "get" and args.get("path") is not None and args.get("key") is None:
            found_at = await PathTree(dirents_of(ctx, "Memory")).lookup(
                Tree(tenant, scope, scope_id), args["path"], "memory_entry")
            args = {**args, "key": found_at.resource_ref.get("key")}
        key = _key(args)
        if op == "set":
            if "value" not in args:
                raise ToolError("Memory.set: value is required")
            embed, embed_text = args.get("embed", False), args.get("embed_text")
            if not isinstance(embed, bool):
                raise ToolError("Memory.set: embed must be a boolean")
            if embed_text is not None and not isinstance(embed_text, str):
                raise ToolError("Memory.set: embed_text must be a string")
            quota = getattr(ctx.agent_config, "memory_quota_bytes", None) if scope == "agent" else None
            provenance = _provenance(ctx, args.get("provenance"))
            stamped = await consolidation.origin(ctx, scope, scope_id, args.get("from_pending"))
            if stamped is not None:  # a consolidator's write: origin stamped here, never the model's
                provenance = {**(provenance or {"source_run_id": ctx.run_id}), **stamped}
            out = await service(ctx).set(tenant, scope, scope_id, key, args["value"], ttl, embed=embed,
                                         embed_text=embed_text, quota_bytes=quota, keep_expiry=keep_expiry,
                                         provenance=provenance)
            result: dict[str, Any] = {"ok": True, "key": key, "scope": scope}
            if out.get("embedding"):
                result["embedding"] = out["embedding"]
            if args.get("path") is not None:
                ref = {"scope": scope, "scope_id": scope_id, "key": key, "facet": "kv"}
                result["path"] = await PathTree(dirents_of(ctx, "Memory")).name(
                    Tree(tenant, scope, scope_id), args["path"], "memory_entry", ref)
            return ToolResult.json(result)
        if op == "merge":
            extra = sorted(set(args) - {"op", "scope", "key", "value", "ttl", "ttl_seconds"})
            if extra:
                raise ToolError(f"Memory.merge: {extra[0]} applies to other ops only (merge takes key, value, ttl)",
                                code="field_not_applicable")
            patch = args.get("value")
            if not isinstance(patch, dict):
                raise ToolError("Memory.merge: value must be a JSON object" if "value" in args
                                else "Memory.merge: missing required field: value")
            quota = getattr(ctx.agent_config, "memory_quota_bytes", None) if scope == "agent" else None
            merged = await mem.merge(tenant, scope, scope_id, key, patch, ttl, quota_bytes=quota)
            return ToolResult.json({"key": key, "value": merged})
        if op == "get":
            found, value = await mem.get(tenant, scope, scope_id, key)
            return ToolResult.json({"found": found, "key": key, "value": value})
        if op == "delete":
            deleted = await mem.delete(tenant, scope, scope_id, key)
            return ToolResult.json({"deleted": deleted, "key": key})
        value = await mem.incr(tenant, scope, scope_id, key, _delta(args), ttl)  # no ttl (or ttl 0): keeps the expiry
        if value is None:
            raise ToolError(_not_an_integer(key))
        return ToolResult.json({"key": key, "value": value})


def _delta(args: dict[str, Any]) -> int:
    delta = args.get("delta", 1)
    if not isinstance(delta, int) or isinstance(delta, bool):
        raise ToolError("Memory.incr: delta must be an integer")
    return delta


def _not_an_integer(key: str) -> str:
    return f"Memory.incr: the value at {key!r} is not an integer"


def service(ctx: ToolContext) -> VectorMemory:
    return ctx.services.vector_memory


async def _search(ctx: ToolContext, scope: str, scope_id: str, args: dict[str, Any]) -> dict[str, Any]:
    k, top_k = args.get("k"), args.get("top_k")
    if k is not None and top_k is not None and k != top_k:
        raise ToolError("Memory.search: k and top_k are two spellings of one field and disagree; give one of them")
    k = k if k is not None else top_k
    if k is not None and (not isinstance(k, int) or isinstance(k, bool)):
        raise ToolError("Memory.search: k must be an integer")
    numbers = {}
    for name in ("min_score", "recency_weight", "recency_half_life_hours"):
        v = args.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise ToolError(f"Memory.search: {name} must be a number")
        numbers[name] = None if v is None else float(v)
    query = args.get("query")
    if not isinstance(query, str):
        raise ToolError("Memory.search: query (text) is required")
    prefix = args.get("prefix") or ""
    include_values = args.get("include_values", True)
    if not isinstance(prefix, str) or not isinstance(include_values, bool):
        raise ToolError("Memory.search: prefix must be a string and include_values a boolean")
    return await service(ctx).search(
        ctx.tenant_id, scope, scope_id, query, k=k, min_score=numbers["min_score"],
        recency_weight=numbers["recency_weight"] or 0.0, half_life_hours=numbers["recency_half_life_hours"],
        prefix=prefix, include_values=include_values, rank=args.get("rank"), dedup=args.get("dedup"),
        sources=args.get("sources"),
    )


async def _recall(ctx: ToolContext, scope: str, scope_id: str, args: dict[str, Any]) -> dict[str, Any]:
    query, top_k = args.get("query"), args.get("top_k", args.get("k"))
    if not isinstance(query, str) or not query.strip():
        raise ToolError("Memory.recall: missing required field: query")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
        raise ToolError("Memory.recall: top_k must be an integer")
    return await service(ctx).recall(ctx.tenant_id, scope, scope_id, query, top_k=top_k,
                                     threshold=args.get("threshold") or 0.0, sources=args.get("sources"))


async def _add(ctx: ToolContext, scope: str, scope_id: str, args: dict[str, Any]) -> dict[str, Any]:
    infer = args.get("infer", True)
    if not isinstance(infer, bool):
        raise ToolError("Memory.add: infer must be a boolean")
    if infer and consolidation.consolidator_deployed(list(ctx.services.config.agents.values())):
        return await _enqueue(ctx, scope, scope_id, args)
    asker = ctx.services.asker

    async def ask(system: str, prompt: str, purpose: str, model: str | None) -> str:
        assert asker is not None
        return await asker.ask_model(ctx.tenant_id, ctx.run_id, ctx.agent, ctx.def_id, system, prompt, purpose,
                                     model)

    quota = getattr(ctx.agent_config, "memory_quota_bytes", None) if scope == "agent" else None
    return await service(ctx).add(ctx.tenant_id, scope, scope_id, args.get("messages"), infer=infer,
                                  metadata=args.get("metadata"), ask=ask if asker is not None else None,
                                  run_id=ctx.run_id, tool_use_id=ctx.tool_use_id, quota_bytes=quota)


async def _enqueue(ctx: ToolContext, scope: str, scope_id: str, args: dict[str, Any]) -> dict[str, Any]:
    """loomcycle's asynchronous add, while a consolidator is deployed: the messages queue for its
    next pass (`pending_drain`) and the answer is `pending` — no read-after-write."""
    messages = args.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ToolError("Memory.add: messages must be a non-empty list of {role, content}")
    try:
        payload = consolidation.payload_of(messages, args.get("metadata"))
    except TypeError:
        raise ToolError("Memory.add: messages and metadata must be JSON") from None
    event_id = consolidation.pending_id(ctx.run_id, ctx.tool_use_id)
    run = await ctx.services.runs.get(ctx.tenant_id, ctx.run_id)
    await consolidation.store(ctx).enqueue(ctx.tenant_id, scope, scope_id, event_id, payload,
                                           origin="agent_explicit", source_run_id=ctx.run_id,
                                           source_session_id=getattr(run, "session_id", None))
    return {"status": "pending", "event_id": event_id}


def _provenance(ctx: ToolContext, block: Any) -> dict[str, Any] | None:
    """`set`'s provenance: the model's descriptive fields (each ≤ 128 characters, as loomcycle
    clamps them), the origin stamped here — a model cannot label its write as an `add`'s."""
    if block is None:
        return None
    if not isinstance(block, dict) or not all(isinstance(v, str) for v in block.values()):
        raise ToolError("Memory.set: provenance must be an object of strings")
    out: dict[str, Any] = {k: v[:128] for k, v in block.items() if v}
    out["origin"] = "set"
    out.setdefault("source_run_id", ctx.run_id)
    return out


def _scope_id(ctx: ToolContext, scope: str) -> str:
    if scope == "agent":
        return ctx.agent
    if scope == "user":
        if not ctx.user_id:
            raise ToolError("Memory: scope 'user' needs a run with a user_id")
        return ctx.user_id
    return ""


def _key(args: dict[str, Any]) -> str:
    key = args.get("key")
    if not isinstance(key, str) or not key:
        raise ToolError("Memory: key is required (a non-empty string)")
    if len(key) > MAX_KEY_LEN:
        raise ToolError(f"Memory: key is longer than {MAX_KEY_LEN} characters")
    return key
