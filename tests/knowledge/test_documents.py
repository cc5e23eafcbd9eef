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


async def test_diff_tags_backlinks_query_documents_and_what_stays_refused(doc: Any) -> None:
    """loomcycle's diff, tags, backlinks and query_documents (issue 41 item 3); search without an
    embedder and the ops treadle does not build are refused by name, saying what to use."""
    made = await doc("create_document", title="Board", path="/teams/board", tags=["team/a", "team/a"], type="board")
    assert made["tags"] == ["team/a"]
    other = await doc("create_document", title="Notes")
    a = await doc("create_chunk", document_id=made["document_id"], title="a", body="one\ntwo\nthree\n",
                  tags=["area", "area/sub"])
    b = await doc("create_chunk", document_id=made["document_id"], title="b", tags=["other"])
    await doc("update_chunk", id=a["id"], revision=1, body="one\n2\nthree\n", tags=["area/sub"])
    diff = await doc("diff", id=a["id"], from_revision=1, to_revision=2)
    assert diff["diff"].splitlines() == ["--- rev 1", "+++ rev 2", "@@ -1,3 +1,3 @@", " one", "-two", "+2", " three"]
    await doc.refused("diff", "no_such_revision", id=a["id"], from_revision=1, to_revision=9)
    assert (await doc("get_chunk", id=a["id"]))["tags"] == ["area/sub"]  # tags on update replace the set
    assert (await doc("add_tags", id=b["id"], tags=["area", " x "]))["tags"] == ["area", "other", "x"]
    assert (await doc("remove_tags", id=b["id"], tags=["x"]))["tags"] == ["area", "other"]
    assert (await doc("add_tags", document_id=other["document_id"], tags=["n"]))["tags"] == ["n"]
    await doc.refused("add_tags", "invalid_input", id=b["id"], tags=[])
    await doc.refused("add_tags", "no_such_chunk", id="nope", tags=["t"])
    listed = (await doc("list_tags"))["tags"]
    assert listed == [{"tag": "area", "count": 1}, {"tag": "area/sub", "count": 1}, {"tag": "n", "count": 1},
                      {"tag": "other", "count": 1}, {"tag": "team/a", "count": 1}]
    by_prefix = await doc("query_chunks", tag_prefix="area")
    assert sorted(c["id"] for c in by_prefix["chunks"]) == sorted([a["id"], b["id"]])
    assert [c["id"] for c in (await doc("query_chunks", tag="area/sub"))["chunks"]] == [a["id"]]
    await doc("link_chunks", from_id=b["id"], to_id=a["id"], kind="blocks")
    [link] = (await doc("backlinks", id=a["id"]))["backlinks"]
    assert link == {"from_id": b["id"], "kind": "blocks", "from_title": "b", "from_document_id": made["document_id"],
                    "auto": False}
    docs = (await doc("query_documents"))["documents"]
    assert [d["title"] for d in docs] == ["Board", "Notes"] and docs[0]["chunks"] == 3 and docs[0]["type"] == "board"
    assert [d["title"] for d in (await doc("query_documents", tag="n"))["documents"]] == ["Notes"]
    assert [d["title"] for d in (await doc("query_documents", under_path="/teams"))["documents"]] == ["Board"]
    await doc.refused("search", "embedder_not_configured", query="anything")
    message = await doc.refused("sync", "op_not_supported", id=made["document_id"])
    assert "export_md on one, import_md on the other" in message
    assert "Memory op=add" in await doc.refused("list_facts", "op_not_supported")
