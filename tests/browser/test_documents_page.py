"""The documents tab of the web page (issue 41 item 3), in a real headless Chromium against a real
`treadle serve`: a scope's documents listed, one document's chunk tree drawn with each chunk's
type, status and revision (a child indented under its parent), and a chunk's fields, body and
body revisions. Skipped where no Chromium is installed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.browser.conftest import TOKEN
from tests.support.browser import Browser, ok
from tests.support.e2e import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def _doc(api: httpx.Client, **body: Any) -> Any:
    return ok(api.post("/v1/_document", params={"scope_id": "planner"}, json={"scope": "agent", **body}))


def test_documents_tab_lists_documents_and_draws_the_chunk_tree(page: Browser, served: ServerProcess,
                                                               api: httpx.Client) -> None:
    made = _doc(api, op="create_document", title="Launch plan", type="plan")
    _doc(api, op="define_type", name="task", fields={"type": "object", "properties": {"owner": {"type": "string"}}})
    phase = _doc(api, op="create_chunk", document_id=made["document_id"], title="Phase one", type="phase")
    task = _doc(api, op="create_chunk", document_id=made["document_id"], parent_id=phase["id"], title="Write docs",
                type="task", status="open", fields={"owner": "ada"}, body="first draft", tags=["docs"])
    _doc(api, op="update_chunk", id=task["id"], revision=1, body="second draft", status="doing")

    page.open(served.url, "documents", token=TOKEN)
    page.pick("#doc-scope", "agent")
    page.fill("#doc-scope-id", "planner")
    page.css("#doc-browse button").click()
    page.wait_text("#doc-list", "Launch plan")
    assert "3 chunks" in page.text("#doc-list") and "plan" in page.text("#doc-list")

    page.click(f'#doc-list li[data-document="{made["document_id"]}"]')
    page.wait_text("#doc-tree", "Write docs")
    rows = [r.text for r in page.all("#doc-tree li")]
    assert [r.split("\n")[0] for r in rows] == ["Launch plan", "Phase one", "Write docs"]  # parents first
    assert "type task · status doing · rev 2" in rows[2] and "type phase · rev 1" in rows[1]
    assert page.attr(f'#doc-tree li[data-chunk="{task["id"]}"]', "class") == "depth-2"

    page.click(f'#doc-tree li[data-chunk="{task["id"]}"]')
    page.wait_text("#chunk-body", "second draft")
    assert "revision 2" in page.text("#chunk-meta") and "tags docs" in page.text("#chunk-meta")
    assert '"owner": "ada"' in page.text("#chunk-fields")
    revisions = page.text("#chunk-revisions")
    assert revisions.index("revision 2") < revisions.index("revision 1")  # newest first
