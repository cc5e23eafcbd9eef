"""Snapshots over Lambda's 6 MB payload limit (issue 36, the cloud shape): a 7 MB snapshot's export
and get answer `303 See Other` to a presigned S3 object holding the document (the Lambda's own
answer stays small), and a restore of it goes up through an upload (`POST /v1/_transfers`, PUT to
S3, the request sent with `X-Treadle-Body-Upload`): every row comes back. moto S3, the real api
handler, real Postgres; the sidecar has no such limit and is unchanged."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.cloud.test_cloud_path import call, envs
from tests.support.lambda_sim import LambdaEnv, http_event

__all__ = ["envs"]  # the fixture, shared with test_cloud_path

LAMBDA_LIMIT = 6 * 1024 * 1024
ROWS, ROW_BYTES = 70, 100_000
AUTH = {"authorization": "Bearer test-token-0123456789"}


@pytest.fixture
def bucket(aws: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A transfers bucket on moto, named to the api function as the stack names it; restores of
    large documents need a request limit that lets them in."""
    import boto3

    name = "treadle-transfers-" + secrets.token_hex(4)
    boto3.client("s3").create_bucket(Bucket=name)
    monkeypatch.setenv("TREADLE_TRANSFERS_BUCKET", name)
    monkeypatch.setenv("TREADLE_MAX_REQUEST_BYTES", str(32 << 20))
    yield name


def _fill_memory(db: str) -> None:
    with psycopg.connect(db) as conn:
        for i in range(ROWS):
            conn.execute("INSERT INTO memory (tenant_id, scope, scope_id, key, value) VALUES"
                         " ('default', 'tenant', '_', %s, to_jsonb(%s::text))",
                         (f"blob-{i:03d}", secrets.token_hex(ROW_BYTES // 2)))


def _payload_bytes(resp: dict[str, Any]) -> int:
    return len(json.dumps(resp).encode())


def test_a_seven_megabyte_snapshot_exports_and_restores_through_s3(
    bucket: str, envs: dict[str, LambdaEnv], cloud_db: str
) -> None:
    api = envs["api"]
    code, _, _ = call(api, "GET", "/v1/_snapshots")  # cold start: the database is migrated
    assert code == 200
    _fill_memory(cloud_db)
    code, snap, _ = call(api, "POST", "/v1/_snapshots", {"label": "big"})
    assert code == 201 and snap["byte_size"] > LAMBDA_LIMIT, snap

    resp = api.invoke(http_event("GET", f"/v1/_snapshots/{snap['id']}/export", headers=AUTH))
    assert resp["statusCode"] == 303 and _payload_bytes(resp) < 4096, resp["statusCode"]
    location = resp["headers"]["location"]
    assert json.loads(resp["body"])["bytes"] == snap["byte_size"]
    got = httpx.get(location, timeout=60)  # a presigned URL: no bearer
    assert got.status_code == 200 and len(got.content) == snap["byte_size"]
    assert got.headers["content-type"] == "application/json"
    assert got.headers["content-disposition"] == f'attachment; filename="{snap["id"]}.json"'
    doc = got.json()
    assert len(doc["sections"]["memory"]["entries"]) == ROWS

    resp = api.invoke(http_event("GET", f"/v1/_snapshots/{snap['id']}", headers=AUTH))  # loomcycle's get
    assert resp["statusCode"] == 303
    full = httpx.get(resp["headers"]["location"], timeout=60).json()
    assert full["id"] == snap["id"] and full["json_content"] == doc
    small = api.invoke(http_event("GET", "/v1/_snapshots", headers=AUTH))  # under the limit: inline, as ever
    assert small["statusCode"] == 200

    # the restore: its body (the 7 MB document) goes up to S3 first
    with psycopg.connect(cloud_db) as conn:
        conn.execute("DELETE FROM memory WHERE key LIKE 'blob-%'")
    code, up, _ = call(api, "POST", "/v1/_transfers")
    assert code == 201 and up["method"] == "PUT" and up["header"] == "X-Treadle-Body-Upload", up
    put = httpx.put(up["url"], content=json.dumps({"json": doc}).encode(), timeout=60)
    assert put.status_code == 200, put.text
    code, out, _ = call(api, "POST", "/v1/_snapshots/any/restore",
                        headers={"X-Treadle-Body-Upload": up["upload_id"], "content-type": "application/json"})
    assert code == 200 and out["memory_restored"] == ROWS, out
    with psycopg.connect(cloud_db) as conn:
        [(n,)] = conn.execute("SELECT count(*) FROM memory WHERE key LIKE 'blob-%'").fetchall()
    assert n == ROWS

    # refusals: an upload asked without a bearer, an upload never PUT
    denied = api.invoke(http_event("POST", "/v1/_transfers"))
    assert denied["statusCode"] == 401
    code, out, _ = call(api, "POST", "/v1/_snapshots/any/restore", headers={"X-Treadle-Body-Upload": "up_" + "0" * 32})
    assert code == 400 and out["code"] == "upload_missing", out
