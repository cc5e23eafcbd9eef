"""Retention's archive and a subject's erasure in the cloud shape (issue 42 item 4), on S3 (moto):
the maintenance function archives expired run trees into the tenant's `vault` volume per user (S3
objects) before deleting them; the API function's erasure deletes the subject's objects — the file
its run wrote through a worker Lambda and its archived runs — lists them in the receipt, and leaves
no object of the bucket mentioning the subject while another user's stay."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.localcloud import AGENTS

BUCKET = "treadle-archive-test"
USERS = {"ann-" + secrets.token_hex(4): "ann-words-" + secrets.token_hex(6),
         "ben-" + secrets.token_hex(4): "ben-words-" + secrets.token_hex(6)}
WRITERS = {f"w{i}": {"model": "script", "tools": ["Write"], "volumes": ["notes"], "mock": {"script": [
    {"tool": "Write", "input": {"path": f"by/{user}.md", "content": words}}, {"text": f"noted {words}"}]}}
    for i, (user, words) in enumerate(USERS.items())}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cloudarchivecfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({"agents": {**AGENTS, **WRITERS}, "volumes": {"notes": {}, "vault": {}},
                                    "retention": {"days": 30, "archive": {"volume": "vault"}}}))
    return path


@pytest.fixture
def s3(aws: dict[str, str], cloud_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("TREADLE_VOLUMES_BUCKET", BUCKET)
    yield client


def objects(s3: Any) -> dict[str, bytes]:
    return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def test_maintenance_archives_to_s3_and_erasure_deletes_the_subjects_objects(
    s3: Any, sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, worker, maintenance = LambdaEnv("api"), LambdaEnv("worker"), LambdaEnv("maintenance")
    try:
        runs: dict[str, list[str]] = {}
        for i, user in enumerate(USERS):
            for agent in (f"w{i}", "echo"):
                status, body, _ = call(api, "POST", "/v1/runs", {"agent": agent, "prompt": "go", "user_id": user})
                assert status == 202, body
                runs.setdefault(user, []).append(body["run_id"])
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
        every = [r for rs in runs.values() for r in rs]
        esm.run_until(lambda: all_terminal(cloud_db, every), timeout_s=60)
        with psycopg.connect(cloud_db) as conn:  # age the echo runs past the 30 days
            conn.execute("UPDATE runs SET completed_at = now() - interval '40 days' WHERE id = ANY(%s)",
                         ([rs[1] for rs in runs.values()],))
        done = maintenance.invoke({})
        assert done.get("retention_deleted") == 2, done
        stored = objects(s3)
        archived = {k: v for k, v in stored.items() if "/v/vault/retention/runs/u/" in k}
        assert len(archived) == 2
        for user, rs in runs.items():
            [body] = [v for k, v in archived.items() if f"/u/{user}/" in k]
            assert [json.loads(line)["run"]["id"] for line in body.decode().splitlines()] == [rs[1]]

        ann, ben = list(USERS)
        status, receipt, _ = call(api, "POST", "/v1/_erasure", {"subject": ann, "dry_run": False, "confirm": ann})
        assert status == 200, receipt
        assert len(receipt["files"]) == 2 and receipt["deleted"]["volume_files"] == 2, receipt
        assert any(f.endswith(f"/v/notes/by/{ann}.md") for f in receipt["files"])
    finally:
        for env in (api, worker, maintenance):
            env.close()
    left = objects(s3)
    assert [k for k, v in left.items() if ann in k or USERS[ann].encode() in v or ann.encode() in v] == []
    assert [k for k, v in left.items() if USERS[ben].encode() in v and k.endswith(f"/by/{ben}.md")]
    assert [k for k in left if f"/u/{ben}/" in k]
