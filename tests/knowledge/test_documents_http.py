"""POST /v1/_document on a served sidecar (real HTTP on loopback), as loomcycle's clients call
it: a document an agent run of alice's made is hers over HTTP (scope user = the bearer's
subject); chunk edits with revisions, a stale one refused 422 `tool_refused` with reason
`stale_revision`; Markdown out and in; another tenant sees none of it."""

from __future__ import annotations

from typing import Any

from tests.support.sidecar import run_ended, sidecar_client, sidecar_settings
from tests.support.tenancy import bearer, tenant_user
from treadle.config import parse_config

OPERATOR = "op-" + "s3cret"
AGENTS = {
    "author": {
        "model": "script",
        "tools": ["Document"],
        "mock": {
            "script": [
                {"tool": "Document", "input": {"op": "create_document", "title": "By agent", "path": "/docs/agent"}},
                {"text": "done"},
            ]
        },
    }
}


async def test_documents_over_http(migrated_db_url: str) -> None:
    async with sidecar_client(sidecar_settings(migrated_db_url, token=OPERATOR), parse_config({"agents": AGENTS})) as c:
        operator = bearer(OPERATOR)
        alice, eve = await tenant_user(c, operator, "acme", "alice"), await tenant_user(c, operator, "evil", "eve")

        async def doc(who: dict[str, str], expect: int = 200, **body: Any) -> Any:
            r = await c.post("/v1/_document", json=body, headers=who)
            assert r.status_code == expect, r.text
            return r.json()

        _, run = await run_ended(c, alice, "author", "go", "alice")
        assert run["status"] == "completed"
        made = await doc(alice, op="get_document", path="/docs/agent")  # scope user by default: alice's
        assert made["title"] == "By agent"
        chunk = await doc(
            alice,
            op="create_chunk",
            document_id=made["document_id"],
            title="Ship date",
            type="decision",
            status="open",
            body="July",
        )
        assert chunk["revision"] == 1 and chunk["parent_id"] == made["root_chunk_id"]
        edited = await doc(alice, op="update_chunk", id=chunk["id"], revision=1, body="August")
        assert edited["revision"] == 2
        stale = await doc(alice, 422, op="update_chunk", id=chunk["id"], revision=1, body="lost")
        assert stale["code"] == "tool_refused" and stale["tool"] == "Document" and stale["reason"] == "stale_revision"
        found = await doc(alice, op="query_chunks", type="decision", status="open")
        assert [x["id"] for x in found["chunks"]] == [chunk["id"]]

        md = await doc(alice, op="export_md", document_id=made["document_id"])
        assert "## Ship date" in md["markdown"] and "<!-- loom: " in md["markdown"]
        copy = await doc(alice, op="import_md", markdown=md["markdown"], path="/docs/copy")
        assert copy["chunks_created"] == 2
        assert (await doc(alice, op="get_document", path="/docs/copy"))["title"] == "By agent"
        path = await c.post("/v1/_path", json={"op": "ls", "scope": "user", "path": "/docs"}, headers=alice)
        assert [e["name"] for e in path.json()["entries"]] == ["agent", "copy"]

        # another tenant: nothing, not even by id; the operator may look in
        assert (await doc(eve, 422, op="get_chunk", id=chunk["id"]))["reason"] == "no_such_chunk"
        assert (await doc(eve, 422, op="get_document", path="/docs/agent"))["reason"] == "no_such_path"
        r = await c.post(
            "/v1/_document",
            json={"op": "get_chunk", "id": chunk["id"]},
            headers=bearer(OPERATOR),
            params={"tenant": "acme", "scope_id": "alice"},
        )
        assert r.status_code == 200 and r.json()["body"] == "August"
        assert (await doc(alice, 422, op="sync"))["reason"] == "op_not_supported"
