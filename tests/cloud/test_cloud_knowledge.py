"""The Path tree and Documents in the cloud shape (issue 41): an agent run stepped by the worker
Lambda from moto SQS (every batch delivered twice) writes a document the Path tree names, once;
the API function serves POST /v1/_document and /v1/_path on the same rows — a stale revision is
loomcycle's 422 with reason stale_revision."""

from __future__ import annotations

import json
from typing import Any

from tests.cloud.test_cloud_path import all_terminal, call, envs, events_of, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv

__all__ = ["envs"]  # the fixture, shared with test_cloud_path


def test_documents_through_the_worker_and_the_api_function(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api = envs["api"]
    run_id = start_run(api, "librarian")
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=60)
    results = [json.loads(e["text"]) for e in events_of(api, run_id) if e["type"] == "tool_result"]
    made, listed = results
    assert made["path"] == "/docs/cloud"
    assert [e["full_path"] for e in listed["entries"]] == ["/docs/cloud"]

    # the API function: the agent's store, browsed by scope_id
    q = "scope_id=librarian"
    status, got, _ = call(
        api, "POST", "/v1/_document", {"op": "get_document", "scope": "agent", "path": "/docs/cloud"}, query=q
    )
    assert status == 200 and got["document_id"] == made["document_id"], got
    status, chunk, _ = call(
        api,
        "POST",
        "/v1/_document",
        {"op": "create_chunk", "scope": "agent", "document_id": made["document_id"], "title": "c"},
        query=q,
    )
    assert status == 200 and chunk["revision"] == 1, chunk
    edit = {"op": "update_chunk", "scope": "agent", "id": chunk["id"], "revision": 1, "body": "b"}
    assert call(api, "POST", "/v1/_document", edit, query=q)[0] == 200
    status, stale, _ = call(api, "POST", "/v1/_document", edit, query=q)
    assert status == 422 and stale["code"] == "tool_refused" and stale["reason"] == "stale_revision", stale
    status, tree, _ = call(
        api, "POST", "/v1/_path", {"op": "ls", "scope": "agent", "path": "/", "recursive": True}, query=q
    )
    assert status == 200 and [e["full_path"] for e in tree["entries"]] == ["/docs/cloud"], tree
