"""Documents (issue 41 item 3), op by op on a real database: loomcycle's answers, chunk types
with field schemas, moves without cycles, cascades, edges, queries, revisions, Markdown both
ways, refusals by name, and stores kept apart by scope and tenant."""

from __future__ import annotations

from typing import Any

import pytest

from treadle.builtins.document import document_op
from treadle.errors import ToolError
from treadle.store.dirents import DirentStore, Tree

ALICE = Tree("acme", "user", "alice")


@pytest.fixture
async def doc(open_rt: Any) -> Any:
    rt, _ = await open_rt({})
    dirents = DirentStore(rt.pool)

    async def call(op: str, tree: Tree = ALICE, **args: Any) -> Any:
        return await document_op(dirents, tree, {"op": op, **args}, "alice")

    async def refused(op: str, code: str, tree: Tree = ALICE, **args: Any) -> str:
        with pytest.raises(ToolError) as info:
            await call(op, tree, **args)
        assert info.value.code == code, info.value.message
        return info.value.message

    call.refused = refused  # type: ignore[attr-defined]
    return call


async def test_documents_chunks_and_revisions(doc: Any) -> None:
    made = await doc("create_document", title="Launch plan", path="/docs/launch")
    assert set(made) == {"document_id", "root_chunk_id", "title", "path"} and made["path"] == "/docs/launch"
    d, root = made["document_id"], made["root_chunk_id"]
    assert await doc("get_document", path="/docs/launch") == {
        "document_id": d,
        "title": "Launch plan",
        "root_chunk_id": root,
    }
    ship = await doc(
        "create_chunk",
        document_id=d,
        title="Ship date",
        type="decision",
        status="open",
        body="## Ship date\n2026-07-01",
        fields={"owner": "ana"},
    )
    assert ship == {
        "id": ship["id"],
        "document_id": d,
        "parent_id": root,
        "position": 0,
        "title": "Ship date",
        "revision": 1,
        "type": "decision",
        "status": "open",
        "body": "## Ship date\n2026-07-01",
        "fields": {"owner": "ana"},
    }
    risk = await doc("create_chunk", document_id=d, title="Risks", body="none yet")
    first = await doc("create_chunk", document_id=d, title="Context", after_id=ship["id"])
    assert [first["position"], risk["position"]] == [1, 1]  # inserted after ship; risk is shifted on read
    assert (await doc("get_chunk", id=risk["id"]))["position"] == 2

    updated = await doc("update_chunk", id=ship["id"], revision=1, status="done", body="2026-08-01")
    assert updated["revision"] == 2 and updated["status"] == "done" and updated["fields"] == {"owner": "ana"}
    message = await doc.refused("update_chunk", "stale_revision", id=ship["id"], revision=1, body="lost")
    assert "you passed 1, current is 2" in message
    assert (await doc("get_chunk", id=ship["id"]))["body"] == "2026-08-01"  # the stale edit changed nothing
    await doc("update_chunk", id=ship["id"], revision=2, title="Ship")  # no body: no new body revision
    history = await doc("history", id=ship["id"])
    assert [r["revision"] for r in history["revisions"]] == [2, 1]
    assert all(r["actor"] == "alice" and isinstance(r["created_at"], int) for r in history["revisions"])
    assert (await doc("get_version", id=ship["id"], revision=1))["body"] == "## Ship date\n2026-07-01"
    await doc.refused("get_version", "no_such_revision", id=ship["id"], revision=3)

    # the root's type and status are the document's
    await doc("update_chunk", id=root, revision=1, type="plan", status="draft")
    assert (await doc("get_document", id=d))["status"] == "draft"

    # move: same document, never into its own subtree
    child = await doc("create_chunk", document_id=d, parent_id=risk["id"], title="Vendor")
    await doc.refused("move_chunk", "invalid_input", id=risk["id"], new_parent_id=child["id"])
    assert await doc("move_chunk", id=child["id"], new_parent_id=ship["id"], position=0) == {
        "ok": True,
        "id": child["id"],
        "new_parent_id": ship["id"],
        "position": 0,
    }
    assert await doc("reorder_chunk", id=risk["id"], direction="up") == {
        "reordered": True,
        "id": risk["id"],
        "direction": "up",
    }

    # edges (within and across documents), and the cascade
    other = await doc("create_document", title="Budget")
    assert other["path"] == "/documents/Budget"
    line = await doc("create_chunk", document_id=other["document_id"], title="Line")
    await doc("link_chunks", from_id=line["id"], to_id=ship["id"], kind="targets")
    await doc("link_chunks", from_id=ship["id"], to_id=risk["id"], kind="promotes")
    edges = (await doc("get_edges", document_id=d))["edges"]
    assert {(e["from_id"], e["kind"], e["to_title"]) for e in edges} == {
        (line["id"], "targets", "Ship"),
        (ship["id"], "promotes", "Risks"),
    }
    await doc.refused("link_chunks", "no_such_chunk", from_id=ship["id"], to_id="nope", kind="x")
    assert await doc("delete_chunk", id=ship["id"]) == {"deleted": True, "cascade_deleted_descendants": 1}
    assert (await doc("get_edges", document_id=d))["edges"] == []  # both directions went with it
    await doc.refused("get_chunk", "no_such_chunk", id=child["id"])
    await doc.refused("delete_chunk", "invalid_input", id=root)

    assert await doc("delete_document", id=d) == {"deleted": True, "document_id": d, "n_chunks_deleted": 3}
    await doc.refused("get_document", "no_such_path", path="/docs/launch")  # its name went too


async def test_types_validate_fields_and_queries_filter(doc: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"owner": {"type": "string"}},
        "required": ["owner"],
        "additionalProperties": False,
    }
    await doc("define_type", name="decision", fields=schema)
    await doc.refused("define_type", "invalid_input", name="bad", fields={"type": "nope"})
    d = (await doc("create_document", title="Plan", path="/p/plan"))["document_id"]
    await doc("define_type", name="note", document_id=d, fields=["text"])  # a list: documentation only
    listed = await doc("list_types")
    assert listed == {"types": [{"document_id": "", "name": "decision", "fields": schema}]}
    assert [t["name"] for t in (await doc("list_types", document_id=d))["types"]] == ["note"]
    message = await doc.refused(
        "create_chunk", "fields_invalid", document_id=d, title="x", type="decision", fields={"owner": 7}
    )
    assert "owner" in message
    await doc.refused("create_chunk", "fields_invalid", document_id=d, title="x", type="decision")
    a = await doc("create_chunk", document_id=d, title="A", type="decision", status="open", fields={"owner": "x"})
    await doc("create_chunk", document_id=d, title="B", type="decision", status="done", fields={"owner": "y"})
    await doc("create_chunk", document_id=d, title="C", type="note", status="open", fields={"anything": 1})
    await doc.refused("update_chunk", "fields_invalid", id=a["id"], revision=1, fields={"owner": "x", "more": 1})

    open_decisions = await doc("query_chunks", type="decision", status="open")
    assert [c["title"] for c in open_decisions["chunks"]] == ["A"] and "body" not in open_decisions["chunks"][0]
    other = (await doc("create_document", title="Elsewhere", path="/q/x"))["document_id"]
    await doc("create_chunk", document_id=other, title="D", status="open")
    assert {c["title"] for c in (await doc("query_chunks", status="open"))["chunks"]} == {"A", "C", "D"}
    assert {c["title"] for c in (await doc("query_chunks", status="open", under_path="/p"))["chunks"]} == {"A", "C"}
    assert {c["title"] for c in (await doc("query_chunks", status="open", under_path="/q/x"))["chunks"]} == {"D"}
    assert (await doc("query_chunks", under_path="/nothing"))["chunks"] == []
    await doc.refused("query_chunks", "sql_not_supported", sql="SELECT * FROM chunks")


async def test_markdown_round_trip(doc: Any) -> None:
    md = "\n".join(
        [
            "# Launch plan",
            '<!-- loom: {"id":"r","type":"plan","status":"draft"} -->',
            "",
            "Intro text.",
            "",
            "## Ship date",
            '<!-- loom: {"id":"s","type":"decision","fields":{"owner":"ana"}} -->',
            "",
            "We ship in July.",
            "",
            "```python",
            "# not a heading",
            "```",
            "",
            "### Flow",
            '<!-- loom: {"id":"f","type":"mermaid"} -->',
            "",
            "```mermaid",
            "graph TD; a-->b",
            "```",
            "",
            "## Risks",
            "",
            "None.",
            "",
            "<!-- loom-edges:",
            "s -> f [promotes]",
            "f -> r [targets]",
            "-->",
            "",
        ]
    )
    made = await doc("import_md", markdown=md, path="/docs/imported")
    assert made["chunks_created"] == 4 and made["root_chunk_id"]
    d = made["document_id"]
    got = await doc("get_document", path="/docs/imported")
    assert got["title"] == "Launch plan" and got["type"] == "plan" and got["status"] == "draft"
    ship = (await doc("query_chunks", document_id=d, type="decision"))["chunks"][0]
    body = await doc("get_chunk", id=ship["id"])
    assert body["body"] == "We ship in July.\n\n```python\n# not a heading\n```" and body["fields"] == {"owner": "ana"}
    flow = (await doc("query_chunks", document_id=d, type="mermaid"))["chunks"][0]
    assert (await doc("get_chunk", id=flow["id"]))["body"] == "graph TD; a-->b" and flow["parent_id"] == ship["id"]
    assert len((await doc("get_edges", document_id=d))["edges"]) == 2

    exported = await doc("export_md", document_id=d)
    again = await doc("import_md", markdown=exported["markdown"])
    re_exported = await doc("export_md", id=again["document_id"])
    assert exported["title"] == "Launch plan" and "## Ship date" in exported["markdown"]
    assert "```mermaid\ngraph TD; a-->b\n```" in exported["markdown"]
    clean_of = [
        (await doc("export_md", document_id=x, include_metadata=False))["markdown"] for x in (d, again["document_id"])
    ]
    assert clean_of[0] == clean_of[1]
    assert exported["markdown"].count(" -> ") == re_exported["markdown"].count(" -> ") == 2
    clean = (await doc("export_md", path="/docs/imported", include_metadata=False))["markdown"]
    assert "<!--" not in clean and clean.startswith("# Launch plan\n\nIntro text.\n")

    # import under an existing chunk
    under = await doc("import_md", markdown="# Extra\n\nmore\n## Deeper\n", document_id=d, parent_id=ship["id"])
    assert under == {"document_id": d, "root_chunk_id": ship["id"], "chunks_created": 2}
    await doc.refused("import_md", "invalid_input", markdown="no headings here")


async def test_refusals_by_name_and_stores_apart(doc: Any) -> None:
    await doc.refused("set_asset", "op_not_supported", id="x")
    await doc.refused("create_chunk", "field_not_supported", document_id="x", title="t", natural_key="a")
    await doc.refused("get_chunk", "field_not_applicable", id="x", body="b")
    await doc.refused("get_chunk", "unknown_field", id="x", colour="red")
    await doc.refused("teleport", "invalid_input")
    await doc.refused("create_document", "invalid_path", title="t", path="/a/../b")
    made = await doc("create_document", title="Mine", path="/docs/mine")
    chunk = await doc("create_chunk", document_id=made["document_id"], title="c")
    for tree in (Tree("acme", "user", "bob"), Tree("other", "user", "alice"), Tree("acme", "agent", "alice")):
        await doc.refused("get_document", "no_such_document", tree, id=made["document_id"])
        await doc.refused("get_chunk", "no_such_chunk", tree, id=chunk["id"])
        await doc.refused("update_chunk", "no_such_chunk", tree, id=chunk["id"], revision=1, body="x")
        await doc.refused("create_chunk", "no_such_document", tree, document_id=made["document_id"], title="t")
        await doc.refused("get_document", "no_such_path", tree, path="/docs/mine")
        assert (await doc("query_chunks", tree))["chunks"] == []
    assert (await doc("get_chunk", id=chunk["id"]))["revision"] == 1
