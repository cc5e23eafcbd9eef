"""Documents (loomcycle's RFC AK): chunked-graph documents — each chunk a unit with an id, a place
in a hierarchy, an optional type and status, structured `fields`, a Markdown body, edges to other
chunks, and a revision. Ops and answers are loomcycle's (store/documents.py keeps the rows).

- Documents: create_document (named in the Path tree: `path`, default /documents/<title>),
  get_document (`id` or `path`), delete_document (its chunks, edges, revisions and names go),
  set_path.
- Chunks: create_chunk (`parent_id` or `after_id`, `position`), get_chunk, update_chunk (needs
  the `revision` it read: a stale one is refused, `stale_revision`, and changes nothing),
  delete_chunk (with its subtree; never a root), move_chunk (no cycles, same document),
  reorder_chunk (`direction` up|down).
- Edges: link_chunks, unlink_chunks, get_edges. Types: define_type (`fields`: a JSON Schema
  object validates the `fields` of that type's chunks; anything else is kept as documentation),
  list_types. Queries: query_chunks (document_id, type, status, parent_id, under_path; light rows).
- Revisions: history, get_version. Markdown: export_md, import_md (knowledge/docmarkdown.py).

- Tags (migration 0087): add_tags, remove_tags, list_tags; `tags` on create_document,
  create_chunk and update_chunk replace the set; query_chunks filters by `tag` / `tag_prefix`.
- Discovery: diff (a unified diff of two body revisions), backlinks (edges into a chunk),
  search (chunk bodies nearest a query, where an embedder is configured: bodies are embedded as
  they are written, chunk_embeddings).

loomcycle's other ops (facts and entities, assets, canvas, related, remote sync, …) are refused
by name (`op_not_supported`, naming what to use instead), as is query_chunks' raw `sql`
(`sql_not_supported`: the rows live in treadle's own database, not in a per-scope one an agent
may query)."""

from __future__ import annotations

import difflib
import logging
import re
import secrets
from typing import Any, Protocol

import jsonschema

from treadle.errors import ToolError, TreadleError
from treadle.knowledge import docmarkdown
from treadle.knowledge.pathtree import MAX_SEGMENT_LEN, PathTree, children_prefix, normalize, split
from treadle.store.dirents import Tree
from treadle.store.documents import DocumentStore

OPS = (
    "create_document",
    "get_document",
    "delete_document",
    "set_path",
    "create_chunk",
    "get_chunk",
    "update_chunk",
    "delete_chunk",
    "move_chunk",
    "reorder_chunk",
    "link_chunks",
    "unlink_chunks",
    "get_edges",
    "query_chunks",
    "define_type",
    "list_types",
    "history",
    "get_version",
    "export_md",
    "import_md",
    "diff",
    "add_tags",
    "remove_tags",
    "list_tags",
    "backlinks",
    "search",
    "query_documents",
)
_FACTS = ("loomcycle's fact and entity layer is not built on treadle: remember facts with Memory op=add "
          "(infer: true) or op=set with provenance, and find them with Memory op=recall or op=search "
          "sources=[facts]")
#: loomcycle's ops treadle does not implement: refused by name, each saying what to use instead
UNSUPPORTED_OPS: dict[str, str] = {
    "documents_summary": "list a document's chunks with query_chunks (document_id) or export_md",
    "propose_entity": _FACTS,
    "judge_fact": _FACTS,
    "upsert_chunk": "create_chunk, or update_chunk with the revision you read",
    "supersede_chunk": "update_chunk the chunk (its history keeps every earlier body) or link_chunks a "
                       "'supersedes' edge",
    "graph_recall": _FACTS + "; follow edges with get_edges and backlinks",
    "list_facts": _FACTS,
    "verbatim_answer": _FACTS,
    "verification_stats": _FACTS,
    "remember": _FACTS,
    "set_asset": "keep image bytes in a volume (VolumeDef / the workspace) and put its path in the chunk body",
    "get_asset": "keep image bytes in a volume (VolumeDef / the workspace) and put its path in the chunk body",
    "export_canvas": "use export_md (a round-trippable Markdown export)",
    "import_canvas": "use import_md",
    "related": "use search with the chunk's own text, or backlinks / get_edges",
    "unlinked_mentions": "use search, or link_chunks the mentions you find",
    "set_remote": "documents do not sync between runtimes on treadle: export_md on one, import_md on the other",
    "sync": "documents do not sync between runtimes on treadle: export_md on one, import_md on the other",
    "diff_remote": "documents do not sync between runtimes on treadle: export_md on one, import_md on the other",
}
_UPDATABLE = ("title", "type", "status", "body", "fields")
log = logging.getLogger(__name__)


class BodyVectors(Protocol):
    """Embeddings of chunk bodies (substrate/memory.py's MemoryService): None where no embedder
    or no pgvector is configured."""

    async def embed_body(self, text: str) -> tuple[str, str, list[float]] | None: ...

    async def search_bodies(self, tenant: str, scope: str, scope_id: str, query: str, k: int,
                            document_id: str | None) -> list[dict[str, Any]]: ...


def _tags(args: dict[str, Any], op: str, *, required: bool = False) -> list[str] | None:
    """loomcycle's sanitizeTags: trimmed, empty and repeated ones dropped."""
    value = args.get("tags")
    if value is None:
        if required:
            raise refuse(op, "invalid_input", "missing required field: tags")
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise refuse(op, "invalid_input", "tags must be an array of strings")
    out: list[str] = []
    for v in value:
        v = v.strip()
        if v and v not in out:
            if len(v) > 200:
                raise refuse(op, "invalid_input", "a tag is at most 200 characters")
            out.append(v)
    if required and not out:
        raise refuse(op, "invalid_input", "missing required field: tags")
    return out
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def refuse(op: str, code: str, message: str) -> ToolError:
    return ToolError(f"Document.{op}: {code}: {message}", code=code)


def new_id() -> str:
    return secrets.token_hex(16)


def _str(args: dict[str, Any], name: str, op: str, *, required: bool = False) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        if required:
            raise refuse(op, "invalid_input", f"missing required field: {name}")
        return None
    if not isinstance(value, str):
        raise refuse(op, "invalid_input", f"{name} must be a string")
    return value


def _int(args: dict[str, Any], name: str, op: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(op, "invalid_input", f"{name} must be an integer")
    return value


def default_segment(title: str, doc_id: str) -> str:
    """loomcycle's /documents/<title> segment: runs of other characters become one '-'."""
    seg = _SLUG.sub("-", title).strip("-._")[:MAX_SEGMENT_LEN].strip("-._")
    return seg or doc_id


def chunk_view(row: Any) -> dict[str, Any]:
    out = {
        "id": row["id"],
        "document_id": row["document_id"],
        "position": row["position"],
        "title": row["title"],
        "revision": row["revision"],
    }
    for key in ("parent_id", "type", "status"):
        if row[key]:
            out[key] = row[key]
    if "body" in row:
        out["body"] = row["body"]
        if row["fields"]:
            out["fields"] = row["fields"]
    return out


class Documents:
    """The ops over one store; every call names its scope (`tree`, resolved by the caller from the
    run or the principal) and the actor recorded on revisions."""

    def __init__(self, store: DocumentStore, paths: PathTree, vectors: BodyVectors | None = None) -> None:
        self.store = store
        self.paths = paths
        self.vectors = vectors

    async def dispatch(self, tree: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = args.get("op")
        if op in UNSUPPORTED_OPS:
            raise refuse(str(op), "op_not_supported",
                         f"treadle does not implement loomcycle's {op} op: {UNSUPPORTED_OPS[str(op)]}")
        if op not in OPS:
            raise refuse(
                str(op or ""),
                "invalid_input",
                f"unknown op {op!r} (one of: {', '.join(OPS)})" if op else "missing required field: op",
            )
        result: dict[str, Any] = await getattr(self, str(op))(tree, args, actor)
        return result

    # -- documents ------------------------------------------------------------------------------

    async def create_document(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "create_document"
        title = _str(args, "title", op, required=True)
        assert title is not None
        doc_id, root_id = new_id(), new_id()
        raw_path = args.get("path") or "/documents/" + default_segment(title, doc_id)
        normalize(raw_path)  # refused before anything is written
        tags = _tags(args, op)
        await self.store.create_document(
            t, doc_id, root_id, title, _str(args, "type", op), _str(args, "status", op), actor
        )
        path = await self._name(t, doc_id, raw_path)
        out: dict[str, Any] = {"document_id": doc_id, "root_chunk_id": root_id, "title": title, "path": path}
        if tags:
            out["tags"] = await self.store.set_tags(t, "document_tags", doc_id, tags, replace=True)
        return out

    async def get_document(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        doc = await self._document(t, args, "get_document")
        out = {"document_id": doc["id"], "title": doc["title"], "root_chunk_id": doc["root_chunk_id"]}
        for key in ("type", "status"):
            if doc[key]:
                out[key] = doc[key]
        return out

    async def delete_document(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        doc = await self._document(t, args, "delete_document")
        n = await self.store.delete_document(t, doc["id"])
        await self.paths.dirents.delete_pointing_at(t, "document", {"document_id": doc["id"]})
        return {"deleted": True, "document_id": doc["id"], "n_chunks_deleted": n or 0}

    async def set_path(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "set_path"
        doc_id = _str(args, "id", op) or _str(args, "document_id", op)
        if doc_id is None:
            raise refuse(op, "invalid_input", "missing required field: id (the document_id)")
        _str(args, "path", op, required=True)
        if await self.store.document(t, doc_id) is None:
            raise refuse(op, "no_such_document", f"no such document: {doc_id}")
        return {"document_id": doc_id, "path": await self._name(t, doc_id, args["path"])}

    # -- chunks ---------------------------------------------------------------------------------

    async def create_chunk(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "create_chunk"
        doc_id = _str(args, "document_id", op, required=True)
        title = _str(args, "title", op, required=True)
        assert doc_id is not None
        doc = await self.store.document(t, doc_id)
        if doc is None:
            raise refuse(op, "no_such_document", f"no such document: {doc_id}")
        parent_id, position = _str(args, "parent_id", op), _int(args, "position", op)
        after_id = _str(args, "after_id", op)
        if after_id is not None:
            sibling = await self._chunk(t, after_id, op, "after_id", doc_id)
            parent_id, position = sibling["parent_id"], sibling["position"] + 1
        elif parent_id is not None:
            await self._chunk(t, parent_id, op, "parent_id", doc_id)
        else:
            parent_id = doc["root_chunk_id"]  # loomcycle: no parent_id = a child of the root
        type_ = _str(args, "type", op)
        fields = await self._fields(t, doc_id, type_, args.get("fields"), op)
        tags = _tags(args, op)
        body = _body(args, op)
        chunk_id = new_id()
        await self.store.insert_chunk(
            t,
            {
                "id": chunk_id,
                "document_id": doc_id,
                "parent_id": parent_id,
                "position": position,
                "type": type_,
                "status": _str(args, "status", op),
                "title": title,
                "body": body,
                "fields": fields,
            },
            shift=after_id is not None,
            actor=actor,
        )
        if tags:
            await self.store.set_tags(t, "chunk_tags", chunk_id, tags, replace=True)
        await self._embed(t, chunk_id, body)
        return await self.get_chunk(t, {"id": chunk_id}, actor)

    async def get_chunk(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        chunk_id = _str(args, "id", "get_chunk", required=True)
        assert chunk_id is not None
        out = chunk_view(await self._chunk(t, chunk_id, "get_chunk", "id", body=True))
        tags = [r["tag"] for r in await self.store.tag_counts(t, chunk_id=chunk_id)]
        if tags:
            out["tags"] = tags
        return out

    async def update_chunk(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "update_chunk"
        chunk_id = _str(args, "id", op, required=True)
        revision = _int(args, "revision", op)
        assert chunk_id is not None
        if revision is None:
            raise refuse(
                op,
                "invalid_input",
                "missing required field: revision (optimistic concurrency — pass the chunk's current revision)",
            )
        row = await self._chunk(t, chunk_id, op, "id")
        changes: dict[str, Any] = {}
        for name in _UPDATABLE:
            if name in args:
                value = args[name]
                if name == "body":
                    value = _body(args, op)
                elif name != "fields":
                    value = _str(args, name, op) if name != "title" else _str(args, name, op, required=True)
                changes[name] = value
        if "fields" in changes or (changes.get("type")):
            current = await self.store.chunk(t, chunk_id, body=True)
            fields = changes.get("fields", current["fields"] if current else None)
            type_ = changes["type"] if "type" in changes else row["type"]
            changes["fields"] = await self._fields(t, row["document_id"], type_, fields, op)
        tags = _tags(args, op)
        new_revision = await self.store.update_chunk(t, chunk_id, revision, changes, actor)
        if new_revision is None:
            now = await self.store.chunk(t, chunk_id)
            if now is None:
                raise refuse(op, "no_such_chunk", f"no such chunk: {chunk_id}")
            raise refuse(
                op,
                "stale_revision",
                f"revision conflict (you passed {revision}, current is "
                f"{now['revision']}) — re-read the chunk and retry",
            )
        if "type" in changes or "status" in changes:
            await self.store.mirror_root(t, chunk_id)
        if tags is not None:
            await self.store.set_tags(t, "chunk_tags", chunk_id, tags, replace=True)
        if "body" in changes:
            await self._embed(t, chunk_id, changes["body"])
        return await self.get_chunk(t, {"id": chunk_id}, actor)

    async def delete_chunk(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "delete_chunk"
        chunk_id = _str(args, "id", op, required=True)
        assert chunk_id is not None
        row = await self._chunk(t, chunk_id, op, "id")
        if row["parent_id"] is None:
            raise refuse(op, "invalid_input", "refusing to delete a document's root chunk — use delete_document")
        n = await self.store.delete_chunk(t, chunk_id)
        return {"deleted": True, "cascade_deleted_descendants": n - 1}

    async def move_chunk(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "move_chunk"
        chunk_id = _str(args, "id", op, required=True)
        assert chunk_id is not None
        row = await self._chunk(t, chunk_id, op, "id")
        if row["parent_id"] is None:
            raise refuse(op, "invalid_input", "a document's root chunk stays the root")
        new_parent = _str(args, "new_parent_id", op)
        if new_parent is None:  # loomcycle's "to the top level": under the root, which stays the only one
            doc = await self.store.document(t, row["document_id"])
            new_parent = str(doc["root_chunk_id"]) if doc else ""
        await self._chunk(t, new_parent, op, "new_parent_id", row["document_id"])
        if await self.store.is_within(t, new_parent, chunk_id):
            raise refuse(op, "invalid_input", "cannot move a chunk into its own subtree (would create a cycle)")
        position = _int(args, "position", op) or 0
        await self.store.move_chunk(t, chunk_id, new_parent, position)
        return {"ok": True, "id": chunk_id, "new_parent_id": new_parent, "position": position}

    async def reorder_chunk(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "reorder_chunk"
        chunk_id = _str(args, "id", op, required=True)
        direction = args.get("direction")
        assert chunk_id is not None
        if direction not in ("up", "down"):
            raise refuse(op, "invalid_input", 'direction must be "up" or "down"')
        row = await self._chunk(t, chunk_id, op, "id")
        ids = await self.store.siblings(t, row["document_id"], row["parent_id"])
        i = ids.index(chunk_id)
        j = i - 1 if direction == "up" else i + 1
        if not 0 <= j < len(ids):
            return {"reordered": False, "id": chunk_id}
        ids[i], ids[j] = ids[j], ids[i]
        await self.store.renumber(t, ids)
        return {"reordered": True, "id": chunk_id, "direction": direction}

    # -- edges ----------------------------------------------------------------------------------

    async def link_chunks(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "link_chunks"
        ends = [_str(args, k, op, required=True) for k in ("from_id", "to_id", "kind")]
        from_id, to_id, kind = (str(e) for e in ends)
        await self._chunk(t, from_id, op, "from_id")
        await self._chunk(t, to_id, op, "to_id")
        await self.store.link(t, from_id, to_id, kind)
        return {"ok": True, "from_id": from_id, "to_id": to_id, "kind": kind}

    async def unlink_chunks(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "unlink_chunks"
        from_id, to_id, kind = (str(_str(args, k, op, required=True)) for k in ("from_id", "to_id", "kind"))
        return {"removed": await self.store.unlink(t, from_id, to_id, kind)}

    async def get_edges(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        doc_id = str(_str(args, "document_id", "get_edges", required=True))
        edges = []
        for r in await self.store.edges(t, doc_id):
            edges.append({k: v for k, v in r.items() if v is not None} | {"auto": False})
        return {"edges": edges}

    # -- queries and types ----------------------------------------------------------------------

    async def query_chunks(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "query_chunks"
        if args.get("sql"):
            raise refuse(
                op,
                "sql_not_supported",
                "the raw sql escape hatch is not available on treadle (documents "
                "live in its own database); use the structured filters",
            )
        filters = {k: v for k in ("document_id", "type", "status", "parent_id") if (v := _str(args, k, op))}
        limit = _int(args, "limit", op) or 100
        limit = limit if 0 < limit <= 1000 else 100
        doc_ids: list[str] | None = None
        if args.get("under_path") is not None:
            doc_ids = await self._under(t, args["under_path"])
        rows = await self.store.query(t, filters, doc_ids, limit, tag=_str(args, "tag", op),
                                      tag_prefix=_str(args, "tag_prefix", op))
        return {"chunks": [chunk_view(r) for r in rows]}

    async def define_type(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "define_type"
        name = str(_str(args, "name", op, required=True))
        doc_id = _str(args, "document_id", op) or ""
        fields = args.get("fields", [])
        if isinstance(fields, dict):
            try:
                jsonschema.Draft202012Validator.check_schema(fields)
            except jsonschema.SchemaError as exc:
                raise refuse(op, "invalid_input", f"fields is not a valid JSON Schema: {exc.message}") from None
        elif not isinstance(fields, list):
            raise refuse(op, "invalid_input", "fields must be a JSON Schema object or a list")
        await self.store.define_type(t, doc_id, name, fields)
        return {"ok": True, "name": name, "document_id": doc_id}

    async def list_types(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        doc_id = _str(args, "document_id", "list_types") or ""
        return {"types": [dict(r) for r in await self.store.types(t, doc_id)]}

    # -- revisions ------------------------------------------------------------------------------

    async def history(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        chunk_id = str(_str(args, "id", "history", required=True))
        limit = _int(args, "limit", "history") or 100
        rows = await self.store.revisions(t, chunk_id, max(1, min(limit, 1000)))
        return {"chunk_id": chunk_id, "revisions": [{**r, "actor": r["actor"] or ""} for r in rows]}

    async def get_version(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "get_version"
        chunk_id = str(_str(args, "id", op, required=True))
        revision = _int(args, "revision", op)
        if revision is None:
            raise refuse(op, "invalid_input", "missing required field: revision")
        body = await self.store.revision_body(t, chunk_id, revision)
        if body is None:
            raise refuse(op, "no_such_revision", f"no such revision {revision} for chunk {chunk_id}")
        return {"chunk_id": chunk_id, "revision": revision, "body": body}

    # -- Markdown -------------------------------------------------------------------------------

    async def export_md(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "export_md"
        doc_id = _str(args, "document_id", op)
        doc = await self._document(t, {**args, "id": doc_id} if doc_id else args, op)
        metadata = args.get("include_metadata", True)
        if not isinstance(metadata, bool):
            raise refuse(op, "invalid_input", "include_metadata must be a boolean")
        chunks = [dict(r) for r in await self.store.document_chunks(t, doc["id"])]
        edges = [
            (e["from_id"], e["to_id"], e["kind"]) for e in await self.store.edges(t, doc["id"], outgoing_only=True)
        ]
        markdown = docmarkdown.render(chunks, sorted(edges), metadata=metadata)
        return {"markdown": markdown, "document_id": doc["id"], "title": doc["title"]}

    async def import_md(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        op = "import_md"
        text = _str(args, "markdown", op, required=True)
        parsed = docmarkdown.parse(str(text))
        if not parsed.chunks:
            raise refuse(op, "invalid_input", "no headings found — a document needs at least one '# Heading'")
        old_to_new: dict[str, str] = {}
        chunks = parsed.chunks
        doc_id = _str(args, "document_id", op)
        if doc_id is None:
            first = chunks[0]
            made = await self.create_document(
                t,
                {
                    "title": first.title or "Untitled",
                    "path": args.get("path"),
                    "type": first.type,
                    "status": first.status,
                },
                actor,
            )
            doc_id, base = made["document_id"], made["root_chunk_id"]
            if first.body or first.fields is not None:
                await self.store.update_chunk(t, base, 1, {"body": first.body, "fields": first.fields}, actor)
                await self._embed(t, base, first.body or "")
            if first.old_id:
                old_to_new[first.old_id] = base
            stack, created, rest = [(first.level, base)], 1, chunks[1:]
        else:
            doc = await self.store.document(t, doc_id)
            if doc is None:
                raise refuse(op, "no_such_document", f"no such document: {doc_id}")
            base = _str(args, "parent_id", op) or doc["root_chunk_id"]
            await self._chunk(t, base, op, "parent_id", doc_id)
            stack, created, rest = [(0, base)], 0, chunks
        for c in rest:
            while len(stack) > 1 and stack[-1][0] >= c.level:
                stack.pop()
            made = await self.create_chunk(
                t,
                {
                    "document_id": doc_id,
                    "parent_id": stack[-1][1],
                    "title": c.title or "Untitled",
                    "type": c.type,
                    "status": c.status,
                    "body": c.body,
                    "fields": c.fields,
                },
                actor,
            )
            if c.old_id:
                old_to_new[c.old_id] = made["id"]
            stack.append((c.level, made["id"]))
            created += 1
        for old_from, old_to, kind in parsed.edges:
            if old_from in old_to_new and old_to in old_to_new:
                await self.store.link(t, old_to_new[old_from], old_to_new[old_to], kind)
        return {"document_id": doc_id, "root_chunk_id": base, "chunks_created": created}

    # -- diff, tags, discovery ------------------------------------------------------------------

    async def diff(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        """loomcycle's diff: a unified diff (3 lines of context) between two body revisions."""
        op = "diff"
        chunk_id = str(_str(args, "id", op, required=True))
        from_rev, to_rev = _int(args, "from_revision", op), _int(args, "to_revision", op)
        if from_rev is None or to_rev is None:
            raise refuse(op, "invalid_input", "from_revision and to_revision are required")
        revs = (from_rev, to_rev)
        bodies = []
        for rev in revs:
            body = await self.store.revision_body(t, chunk_id, rev)
            if body is None:
                raise refuse(op, "no_such_revision", f"no such revision {rev} for chunk {chunk_id}")
            bodies.append(body)
        text = "".join(difflib.unified_diff(bodies[0].splitlines(keepends=True), bodies[1].splitlines(keepends=True),
                                            fromfile=f"rev {revs[0]}", tofile=f"rev {revs[1]}", n=3))
        return {"chunk_id": chunk_id, "from_revision": revs[0], "to_revision": revs[1], "diff": text}

    async def add_tags(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        return await self._mutate_tags(t, args, "add_tags")

    async def remove_tags(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        return await self._mutate_tags(t, args, "remove_tags")

    async def _mutate_tags(self, t: Tree, args: dict[str, Any], op: str) -> dict[str, Any]:
        tags = _tags(args, op, required=True)
        assert tags is not None
        remove = op == "remove_tags"
        if (chunk_id := _str(args, "id", op)) is not None:
            await self._chunk(t, chunk_id, op, "id")
            return {"chunk_id": chunk_id,
                    "tags": await self.store.set_tags(t, "chunk_tags", chunk_id, tags, replace=False, remove=remove)}
        if (doc_id := _str(args, "document_id", op)) is not None:
            if await self.store.document(t, doc_id) is None:
                raise refuse(op, "no_such_document", f"no such document: {doc_id}")
            return {"document_id": doc_id,
                    "tags": await self.store.set_tags(t, "document_tags", doc_id, tags, replace=False, remove=remove)}
        raise refuse(op, "invalid_input", "target a chunk (id) or a document (document_id)")

    async def list_tags(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        rows = await self.store.tag_counts(t, chunk_id=_str(args, "id", "list_tags"),
                                           document_id=_str(args, "document_id", "list_tags"))
        return {"tags": [{"tag": r["tag"], "count": int(r["count"])} for r in rows]}

    async def query_documents(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        """loomcycle's query_documents: the scope's documents by type / status / tag / under_path."""
        op = "query_documents"
        limit = _int(args, "limit", op) or 100
        doc_ids = None
        if args.get("under_path") is not None:
            doc_ids = await self._under(t, args["under_path"])
        rows = await self.store.query_documents(
            t, type_=_str(args, "type", op), status=_str(args, "status", op), tag=_str(args, "tag", op),
            document_ids=doc_ids, limit=limit if 0 < limit <= 1000 else 100)
        docs = []
        for r in rows:
            doc = {"document_id": r["id"], "title": r["title"], "root_chunk_id": r["root_chunk_id"],
                   "chunks": int(r["chunks"]), "created_at": r["created_at"].isoformat(),
                   "updated_at": r["updated_at"].isoformat()}
            docs.append(doc | {k: r[k] for k in ("type", "status") if r[k]})
        return {"documents": docs}

    async def backlinks(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        """What links here: every edge into the chunk, with its source's title, type, status."""
        chunk_id = str(_str(args, "id", "backlinks", required=True))
        links = []
        for r in await self.store.backlinks(t, chunk_id):
            links.append({k: v for k, v in r.items() if v is not None} | {"auto": False})
        return {"backlinks": links}

    async def search(self, t: Tree, args: dict[str, Any], actor: str | None) -> dict[str, Any]:
        """Chunks whose bodies are nearest the query (cosine), best first, with their titles."""
        op = "search"
        query = (_str(args, "query", op) or "").strip()
        if not query:
            raise refuse(op, "invalid_input", "missing required field: query (the text to match against chunk bodies)")
        if self.vectors is None:
            raise refuse(op, "embedder_not_configured", "search needs an embedder (treadle.yaml memory.embedder)")
        limit = _int(args, "limit", op) or 10
        try:
            hits = await self.vectors.search_bodies(t.tenant_id, t.scope, t.scope_id, query, max(1, min(limit, 50)),
                                                    _str(args, "document_id", op))
        except TreadleError as exc:
            raise refuse(op, exc.code, exc.message) from None
        chunks = []
        for h in hits:
            chunk = {"chunk_id": h["chunk_id"], "score": h["similarity"], "document_id": h["document_id"]}
            chunk |= {k: h[k] for k in ("title", "type") if h.get(k)}
            chunks.append(chunk)
        return {"chunks": chunks}

    async def _embed(self, t: Tree, chunk_id: str, body: str) -> None:
        """Keep the chunk's body embedding current (search, Memory search's `documents` source).
        Best effort: a failing embedder costs the embedding, never the edit."""
        if self.vectors is None:
            return
        got = None
        if body.strip():
            try:
                got = await self.vectors.embed_body(body)
            except TreadleError as exc:
                log.warning("chunk %s: its body was not embedded (%s)", chunk_id, exc.code)
        if got is None:
            await self.store.drop_embedding(t, chunk_id)
        else:
            await self.store.set_embedding(t, chunk_id, *got)

    # -- helpers --------------------------------------------------------------------------------

    async def _under(self, t: Tree, raw: Any) -> list[str]:
        """The ids of the documents named at or under a path of the tree."""
        canonical = normalize(raw)
        found = await self.paths.dirents.under(t, children_prefix(canonical))
        if canonical != "/":
            named = await self.paths.dirents.get(t, *split(canonical))
            found += [named] if named is not None else []
        return [str(d.resource_ref.get("document_id")) for d in found if d.kind == "document"]

    async def _name(self, t: Tree, doc_id: str, raw_path: Any) -> str:
        return await self.paths.name(t, raw_path, "document", {"document_id": doc_id})

    async def _document(self, t: Tree, args: dict[str, Any], op: str) -> Any:
        doc_id = _str(args, "id", op)
        if doc_id is None:
            raw = _str(args, "path", op)
            if raw is None:
                raise refuse(op, "invalid_input", "missing required field: id (or path)")
            doc_id = str((await self.paths.lookup(t, raw, "document")).resource_ref.get("document_id"))
        doc = await self.store.document(t, doc_id)
        if doc is None:
            raise refuse(op, "no_such_document", f"no such document: {doc_id}")
        return doc

    async def _chunk(
        self, t: Tree, chunk_id: str, op: str, field: str, document_id: str | None = None, *, body: bool = False
    ) -> Any:
        row = await self.store.chunk(t, chunk_id, body=body)
        if row is None:
            raise refuse(op, "no_such_chunk", f"{field}: no such chunk: {chunk_id}")
        if document_id is not None and row["document_id"] != document_id:
            raise refuse(
                op,
                "invalid_input",
                f"{field} {chunk_id!r} belongs to document {row['document_id']!r}, "
                f"not {document_id!r} — a chunk cannot be parented across documents",
            )
        return row

    async def _fields(self, t: Tree, doc_id: str, type_: str | None, fields: Any, op: str) -> Any:
        """`fields` checked against the chunk type's JSON Schema (if it has one)."""
        if fields is not None and not isinstance(fields, dict):
            raise refuse(op, "invalid_input", "fields must be an object")
        if not type_:
            return fields
        schema = await self.store.type_fields(t, doc_id, type_)
        if isinstance(schema, dict):
            errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(fields or {}), key=lambda e: e.path)
            if errors:
                where = "/".join(str(p) for p in errors[0].absolute_path) or "fields"
                raise refuse(op, "fields_invalid", f"fields do not match type {type_!r}: {where}: {errors[0].message}")
        return fields


def _body(args: dict[str, Any], op: str) -> str:
    body = args.get("body", "")
    if body is None:
        return ""
    if not isinstance(body, str):
        raise refuse(op, "invalid_input", "body must be a string (Markdown)")
    return body
