"""Built-in `Document` (loomcycle's RFC AK): chunked-graph documents an agent and people co-author
(knowledge/documents.py). `scope`: `user` (default, the run's user), `agent` (this agent's), or
`tenant` — shared by everyone in the tenant, so, as in loomcycle, only for an agent granted both
`memory_scopes: [tenant]` and `sql_scopes: [tenant]`.

Transactional: a document's rows are treadle's, written in the step's transaction — two agents
editing one chunk at once serialize on its row; the later `update_chunk` finds the revision it
read gone and is refused (`stale_revision`), never applied over the other. `POST /v1/_document`
runs the same ops (`document_op`) for a principal instead of a run. A field is honoured by the
ops it belongs to and refused elsewhere; loomcycle's fields for ops treadle lacks are refused by
name (`field_not_supported`)."""

from __future__ import annotations

from typing import Any

from treadle.builtins.path import dirents_of, tree_of
from treadle.errors import ToolError
from treadle.knowledge.documents import OPS, UNSUPPORTED_OPS, BodyVectors, Documents
from treadle.knowledge.pathtree import PathTree
from treadle.store.dirents import DirentStore, Tree
from treadle.store.documents import DocumentStore
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

_S = {"type": "string"}
_I = {"type": "integer"}
#: the fields each op reads (op and scope: every op)
OP_FIELDS: dict[str, tuple[str, ...]] = {
    "create_document": ("title", "path", "type", "status", "tags"),
    "get_document": ("id", "path"),
    "delete_document": ("id", "path"),
    "set_path": ("id", "document_id", "path"),
    "create_chunk": ("document_id", "parent_id", "after_id", "position", "type", "status", "title", "body", "fields",
                     "tags"),
    "get_chunk": ("id",),
    "update_chunk": ("id", "revision", "title", "type", "status", "body", "fields", "tags"),
    "delete_chunk": ("id",),
    "move_chunk": ("id", "new_parent_id", "position"),
    "reorder_chunk": ("id", "direction"),
    "link_chunks": ("from_id", "to_id", "kind"),
    "unlink_chunks": ("from_id", "to_id", "kind"),
    "get_edges": ("document_id",),
    "query_chunks": ("document_id", "type", "status", "parent_id", "under_path", "sql", "limit", "tag", "tag_prefix"),
    "define_type": ("name", "fields", "document_id"),
    "list_types": ("document_id",),
    "history": ("id", "limit"),
    "get_version": ("id", "revision"),
    "export_md": ("document_id", "id", "path", "include_metadata"),
    "import_md": ("markdown", "document_id", "parent_id", "path"),
    "diff": ("id", "from_revision", "to_revision"),
    "add_tags": ("id", "document_id", "tags"),
    "remove_tags": ("id", "document_id", "tags"),
    "list_tags": ("id", "document_id"),
    "backlinks": ("id",),
    "search": ("query", "limit", "document_id"),
    "query_documents": ("type", "status", "tag", "under_path", "limit"),
}
#: loomcycle's Document fields for what treadle does not implement (facts, assets, canvas, sync, …)
UNSUPPORTED_FIELDS = (
    "document_ids",
    "parent",
    "seed_ids",
    "hops",
    "as_of",
    "include_retired",
    "text",
    "min_score",
    "include_refuted",
    "claims_only",
    "verdict",
    "reason",
    "subject",
    "source_quote",
    "natural_key",
    "supersedes_id",
    "valid_at",
    "invalid_at",
    "class",
    "confidence",
    "media_type",
    "data",
    "filename",
    "canvas",
    "source",
    "remote_ref",
)

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "op": {"type": "string", "enum": list(OPS)},
        "scope": {
            "type": "string",
            "enum": ["agent", "user", "tenant"],
            "description": "Which store (default user). agent = this agent; user = this end-user (needs a "
            "user_id on the run); tenant = shared by every user and agent in the tenant (needs "
            "memory_scopes and sql_scopes with tenant).",
        },
        "id": {
            "type": "string",
            "description": "Document id (get/delete_document, set_path, export_md) or chunk id "
            "(get/update/delete/move/reorder_chunk, history, get_version).",
        },
        "path": {
            "type": "string",
            "description": "create_document: name the document in the Path tree (default "
            "/documents/<title>). set_path: the path to attach. get/delete_"
            "document, export_md: address by path instead of id. import_md: "
            "the new document's path.",
        },
        "title": _S,
        "document_id": _S,
        "parent_id": {
            "type": "string",
            "description": "create_chunk: the parent chunk (omit: a child of the root). "
            "import_md: import under this chunk.",
        },
        "new_parent_id": {"type": "string", "description": "move_chunk: the new parent (omit: the root)."},
        "after_id": {"type": "string", "description": "create_chunk: insert right after this sibling."},
        "direction": {"type": "string", "enum": ["up", "down"], "description": "reorder_chunk"},
        "type": {"type": "string", "description": "Optional supertag-like chunk type."},
        "status": _S,
        "body": {"type": "string", "description": "Markdown body."},
        "fields": {
            "description": "Type-specific structured fields (an object). define_type: the type's fields — "
            "a JSON Schema object validates chunks of that type."
        },
        "position": _I,
        "revision": {
            "type": "integer",
            "description": "update_chunk: the chunk's current revision (optimistic "
            "concurrency). get_version: which body revision to read.",
        },
        "from_id": _S,
        "to_id": _S,
        "kind": {"type": "string", "description": "link/unlink_chunks: edge kind (promotes/targets/...)."},
        "under_path": {
            "type": "string",
            "description": "query_chunks: only documents at or under this Path-tree path.",
        },
        "sql": {
            "type": "string",
            "description": "query_chunks: loomcycle's raw SQL escape hatch — refused (sql_not_supported) on treadle.",
        },
        "limit": _I,
        "name": {"type": "string", "description": "define_type: the type name."},
        "include_metadata": {
            "type": "boolean",
            "description": "export_md: embed round-trippable chunk metadata + edges as HTML comments (default true).",
        },
        "markdown": {"type": "string", "description": "import_md: an export_md-shaped Markdown document."},
        "query": {"type": "string", "description": "search: text matched by meaning against chunk bodies."},
        "from_revision": {"type": "integer", "description": "diff: the earlier body revision (from history)."},
        "to_revision": {"type": "integer", "description": "diff: the later body revision."},
        "tags": {"type": "array", "items": {"type": "string"},
                 "description": "create_document/create_chunk/update_chunk: replace the whole tag set ([] clears). "
                                "add_tags/remove_tags: the tags to add/remove. Nested tags use a slash: area/sub."},
        "tag": {"type": "string", "description": "query_chunks: only chunks carrying exactly this tag."},
        "tag_prefix": {"type": "string",
                       "description": "query_chunks: chunks tagged this or nested under it (area matches area/sub)."},
    },
    "required": ["op"],
}


def check_fields(args: dict[str, Any]) -> None:
    op = args.get("op")
    known = INPUT_SCHEMA["properties"]
    for name, value in args.items():
        if name in ("op", "scope") or value is None:
            continue
        if name in UNSUPPORTED_FIELDS:
            raise ToolError(
                f"Document.{op}: field_not_supported: treadle does not implement loomcycle's {name!r}"
                f" (facts and entities, assets, canvas and remote sync are not built)",
                code="field_not_supported",
            )
        if name not in known:
            raise ToolError(
                f"Document.{op}: unknown field {name!r} (accepted: {', '.join(sorted(known))})", code="unknown_field"
            )
        if op in OP_FIELDS and name not in OP_FIELDS[op]:
            raise ToolError(
                f"Document.{op}: {name} does not apply to {op} (it takes: {', '.join(OP_FIELDS[op])})",
                code="field_not_applicable",
            )


def documents(dirents: DirentStore, vectors: BodyVectors | None = None) -> Documents:
    return Documents(DocumentStore(dirents.pool), PathTree(dirents), vectors)


async def document_op(dirents: DirentStore, tree: Tree, args: dict[str, Any], actor: str | None,
                      vectors: BodyVectors | None = None) -> dict[str, Any]:
    """One op on `tree` (resolved by the caller from the run or the principal, never the input);
    `vectors`: Memory's embedder, for chunk bodies (search)."""
    if args.get("op") not in UNSUPPORTED_OPS:
        check_fields(args)
    return await documents(dirents, vectors).dispatch(tree, args, actor)


class DocumentTool:
    name = "Document"
    effects: ToolEffects = "transactional"
    description = (
        "A chunked-graph document: each chunk is a first-class unit (id, hierarchy, type, fields, graph edges, "
        "Markdown body, revision) that agents and humans co-author and query. Ops: create_document (optional path "
        "in the Path tree, default /documents/<title>), get_document (id or path), delete_document, set_path, "
        "create_chunk, get_chunk, update_chunk (pass the revision you read; a stale one is refused: re-read and "
        "retry), delete_chunk, move_chunk, reorder_chunk, link_chunks, unlink_chunks, get_edges, query_chunks "
        "(document_id/type/status/parent_id/under_path), define_type/list_types (fields: a JSON Schema for the "
        "type's chunk fields), history/get_version/diff (a chunk's body revisions), export_md, import_md, "
        "add_tags/remove_tags/list_tags (tags also on create/update; query_chunks tag/tag_prefix), backlinks, "
        "search (chunk bodies by meaning), query_documents (type/status/tag/under_path). Scope is user "
        "(default), agent or tenant."
    )
    input_schema = INPUT_SCHEMA

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        scope = args.get("scope") or "user"
        if scope == "tenant":
            missing = [
                f"{key}: [tenant]"
                for key in ("memory_scopes", "sql_scopes")
                if "tenant" not in (getattr(ctx.agent_config, key, None) or [])
            ]
            if missing:
                raise ToolError(
                    f"Document: scope_not_permitted: scope=tenant is not granted to this agent — a tenant "
                    f"document is readable and writable by everyone in the tenant; missing on the agent: "
                    f"{' and '.join(missing)}",
                    code="scope_not_permitted",
                )
        tree = tree_of(ctx, scope, "Document", "user")
        return ToolResult.json(await document_op(dirents_of(ctx, "Document"), tree, args, ctx.user_id or ctx.agent,
                                                 ctx.services.vector_memory))
