"""Governance in the cloud shape (issue 42). Budgets: /v1/_limits served by the API function (its
lazy route table), the worker Lambda ending a run at its next iteration boundary once the tenant's
hard limit is spent (stop reason `budget_exceeded`), and the API function refusing the next run
with loomcycle's 429 body until the limit is deleted. Tenant credentials: /v1/_credentialdef
through the API function, sealed in the row."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cloud.test_cloud_path import AUTH, all_terminal, call, events_of, run_rows, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event


@pytest.fixture
def lambdas(api: LambdaEnv, worker: LambdaEnv) -> dict[str, LambdaEnv]:
    return {"api": api, "worker": worker}


def test_a_hard_limit_stops_a_run_on_the_worker_and_refuses_the_next_at_the_api(
    lambdas: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, worker = lambdas["api"], lambdas["worker"]
    status, row, _ = call(api, "PUT", "/v1/_limits", {"scope": "tenant", "hard_limit": 1})
    assert status == 200 and row["hard_limit"] == 1 and row["used"] == 0, row
    run_id = start_run(api, "calc")  # nothing used yet: admitted
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=60)
    row = run_rows(cloud_db, [run_id])[run_id]
    assert (row["status"], row["stop_reason"], row["iterations"]) == ("completed", "budget_exceeded", 1)
    events = events_of(api, run_id)
    assert [e["limit"]["severity"] for e in events if e["type"] == "limit"] == ["hard"]

    status, body, _ = call(api, "POST", "/v1/runs", {"agent": "calc", "prompt": "again"})
    assert status == 429 and body["code"] == "token_limit_exceeded" and body["scope"] == "tenant", body
    assert body["limit"] == 1 and body["used"] >= 1 and body["window"] == "month"
    status, listed, _ = call(api, "GET", "/v1/_limits")
    assert status == 200 and listed["limits"][0]["used"] == body["used"]
    deleted = api.invoke(http_event("DELETE", "/v1/_limits", headers=AUTH, query="scope=tenant"))
    assert deleted["statusCode"] == 204 and not deleted["body"]
    start_run(api, "echo")  # lifted


def test_tenant_credentials_through_the_api_function(
    lambdas: dict[str, LambdaEnv], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import os

    import psycopg

    from treadle.governance import credentials as creds

    monkeypatch.setenv(creds.KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    creds.process_sealer.cache_clear()
    try:
        api = lambdas["api"]
        secret = "cloud-secret-" + os.urandom(8).hex()
        status, body, _ = call(api, "POST", "/v1/_credentialdef",
                               {"op": "create", "scope": "agent", "scope_id": "calc", "name": "tok", "value": secret})
        assert status == 200 and body["credential"]["scope_id"] == "calc" and secret not in str(body), body
        status, body, _ = call(api, "POST", "/v1/_credentialdef", {"op": "list"})
        assert status == 200 and [c["name"] for c in body["credentials"]] == ["tok"]
        with psycopg.connect(cloud_db) as conn:  # sealed: the value is not in the row
            row = conn.execute("SELECT sealed FROM credential_defs WHERE name = 'tok'").fetchone()
        assert row is not None and secret.encode() not in bytes(row[0])
        status, body, _ = call(api, "POST", "/v1/_credentialdef",
                               {"op": "delete", "scope": "agent", "scope_id": "calc", "name": "tok"})
        assert status == 200 and body["deleted"] is True
    finally:
        creds.process_sealer.cache_clear()


def test_the_retention_report_through_the_api_function(lambdas: dict[str, LambdaEnv]) -> None:
    status, body, _ = call(lambdas["api"], "GET", "/v1/_retention")
    assert status == 200 and set(body["policy"]) == {"runs", "channel_messages", "memory", "responses"}, body
    assert body["batch"] == 500 and "default" in body  # the cloud test's bearer is the operator's


def test_a_subjects_erasure_through_the_api_function(
    lambdas: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    import psycopg

    api, worker = lambdas["api"], lambdas["worker"]
    status, body, _ = call(api, "POST", "/v1/runs", {"agent": "echo", "prompt": "hello", "user_id": "cloud-erased"})
    assert status == 202, body
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
    esm.run_until(lambda: all_terminal(cloud_db, [body["run_id"]]), timeout_s=60)
    status, receipt, _ = call(api, "POST", "/v1/_erasure",
                              {"subject": "cloud-erased", "dry_run": False, "confirm": "cloud-erased"})
    assert status == 200 and receipt["deleted"]["runs"] == 1 and receipt["deleted"]["events"] >= 2, receipt
    with psycopg.connect(cloud_db) as conn:
        left = conn.execute("SELECT count(*) FROM runs WHERE user_id = 'cloud-erased'").fetchone()
    assert left == (0,)
