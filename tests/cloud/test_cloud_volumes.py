"""The cloud shape's workspace: a run whose iterations alternate between two worker Lambda
environments writes, edits and reads one file in an S3 volume (moto), and its ephemeral volume
is gone once the run ends — no `/tmp` carries anything between iterations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.localcloud import AGENTS

BUCKET = "treadle-volumes-test"
SCRIPT = [
    {"tool": "Write", "input": {"path": "notes/plan.md", "content": "step one\nstep two\n"}},
    {"tool": "Write", "input": {"path": "tmp.txt", "content": "scratch", "volume": "scratch"}},
    {"tool": "Edit", "input": {"path": "notes/plan.md", "old_string": "step two", "new_string": "step 2"}},
    {"tool": "Read", "input": {"path": "notes/plan.md"}},
    {"tool": "Grep", "input": {"pattern": "step", "output_mode": "count"}},
    {"text": "planned"},
]
VOLUME_AGENTS = {**AGENTS, "planner": {"model": "script", "tools": ["Write", "Edit", "Read", "Grep"],
                                       "volumes": ["work", "scratch"], "mock": {"script": SCRIPT}}}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cloudvolcfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({"agents": VOLUME_AGENTS, "volumes": {
        "work": {"mode": "rw", "default": True}, "scratch": {"mode": "rw", "ephemeral": True}}}))
    return path


@pytest.fixture
def s3(aws: dict[str, str], cloud_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("TREADLE_VOLUMES_BUCKET", BUCKET)
    yield client


@pytest.fixture
def envs(s3: Any, cloud_env: dict[str, str]) -> Iterator[dict[str, LambdaEnv]]:
    """Lambda environments by name (created on first use, after the bucket's variable is set)."""
    opened: dict[str, LambdaEnv] = {}
    for name in ("api", "worker#a", "worker#b"):
        opened[name] = LambdaEnv(name.split("#", 1)[0])
    yield opened
    for env in opened.values():
        env.close()


def _keys(s3: Any) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_a_run_across_two_worker_environments_shares_its_s3_volume(
    s3: Any, envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, a, b = envs["api"], envs["worker#a"], envs["worker#b"]
    run_id = start_run(api, "planner")
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [a, b], batch_size=1)
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=60)
    assert a.invocations > 0 and b.invocations > 0  # the iterations really moved between environments

    status, run, _ = call(api, "GET", f"/v1/runs/{run_id}")
    assert status == 200 and run["status"] == "completed", run
    results = [e for e in events_of(api, run_id) if e["type"] == "tool_result"]
    assert [r["is_error"] for r in results] == [False] * 5, results
    assert results[3]["text"] == "     1\tstep one\n     2\tstep 2"
    assert results[4]["text"] == "notes/plan.md:2"

    keys = _keys(s3)
    plan = [k for k in keys if k.endswith("/v/work/notes/plan.md")]
    assert len(plan) == 1 and plan[0].startswith("volumes/t/")
    assert s3.get_object(Bucket=BUCKET, Key=plan[0])["Body"].read() == b"step one\nstep 2\n"
    assert not [k for k in keys if "/e/" in k]  # the ephemeral volume went with the run
