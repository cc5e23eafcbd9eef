"""The same trigger code behind the real Lambda handler modules (functions/*/handler.py, run the
way tests/support/lambda_sim.py imitates Lambda), on moto (SQS, EventBridge Scheduler CRUD) and a
real Postgres: the API function mirrors yaml schedules into EventBridge at its cold start, the
scheduler function fires by the invocation's scheduled time, the webhook function verifies and
deduplicates exactly like the sidecar's route."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.signing import github_headers

GROUP = "treadle-schedules"
ROLE = "arn:aws:iam::123456789012:role/treadle-scheduler"
TARGET = "arn:aws:lambda:us-east-1:123456789012:function:treadle-scheduler"
SECRET = "gh-" + uuid.uuid4().hex
TOKEN = "cloud-token-" + uuid.uuid4().hex[:8]
CONFIG = {
    "agents": {"echo": {"model": "echo"}},
    "scheduled_runs": {"hourly": {"agent": "echo", "schedule": "0 * * * *", "prompt": "hourly digest"}},
    "webhooks": {
        "github": {
            "agent": "echo",
            "auth": {"header": "X-Hub-Signature-256", "signing_secret_env": "TRIG_GH_SECRET"},
            "payload_mapping": {"title": "$.issue.title"},
        }
    },
}


@pytest.fixture
def lambdas(migrated_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    pytest.importorskip("mangum")
    from tests.support.lambda_sim import LambdaEnv
    from treadle_cloud.env import aws_client

    config = tmp_path / "treadle.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "DATABASE_URL": migrated_db_url, "TREADLE_CONFIG": str(config),
        "TREADLE_AUTH_TOKEN": TOKEN, "TRIG_GH_SECRET": SECRET,
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "TREADLE_DB_SECRET_ARN", "TREADLE_API_TOKEN_SECRET_ARN",
              "TREADLE_PROVIDER_KEYS_SECRET_ARN", "TREADLE_SCHEDULE_GROUP"):
        monkeypatch.delenv(k, raising=False)
    aws_client.cache_clear()
    opened: list[Any] = []
    with moto.mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        monkeypatch.setenv("TREADLE_QUEUE_URL", sqs.create_queue(QueueName="steps")["QueueUrl"])
        scheduler = boto3.client("scheduler", region_name="us-east-1")
        scheduler.create_schedule_group(Name=GROUP)

        def open_env(name: str) -> Any:
            if name == "api":  # only the API function gets the scheduler variables (infra/)
                monkeypatch.setenv("TREADLE_SCHEDULE_GROUP", GROUP)
                monkeypatch.setenv("TREADLE_SCHEDULER_ROLE_ARN", ROLE)
                monkeypatch.setenv("TREADLE_SCHEDULER_TARGET_ARN", TARGET)
            else:
                for k in ("TREADLE_SCHEDULE_GROUP", "TREADLE_SCHEDULER_ROLE_ARN", "TREADLE_SCHEDULER_TARGET_ARN"):
                    monkeypatch.delenv(k, raising=False)
            lam = LambdaEnv(name)
            opened.append(lam)
            return lam

        yield {"open": open_env, "scheduler": scheduler, "sqs": sqs}
        for lam in opened:
            lam.close()
    aws_client.cache_clear()


def test_cloud_functions_share_the_trigger_code(lambdas: dict[str, Any]) -> None:
    from tests.support.lambda_sim import http_event

    scheduler_fn = lambdas["open"]("scheduler")  # cold start: yaml triggers into the database, no AWS schedule
    out = scheduler_fn.invoke({"schedule_id": "sch_nope", "scheduled_time": "2030-01-01T00:00:00Z"})
    assert out["reason"] == "unknown_schedule"

    api = lambdas["open"]("api")  # cold start: reconcile → one EventBridge schedule per ScheduleDef
    status = api.invoke(http_event("GET", "/v1/_schedules/hourly/state",
                                   headers={"authorization": f"Bearer {TOKEN}"}))
    state = json.loads(status["body"])
    assert status["statusCode"] == 200 and state["synced_state"] == "v1:enabled", state
    remote = lambdas["scheduler"].get_schedule(Name=f"treadle-{state['schedule_id']}", GroupName=GROUP)
    assert remote["ScheduleExpression"] == "cron(0 * * * ? *)" and remote["Target"]["Arn"] == TARGET

    at = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    event = json.loads(remote["Target"]["Input"].replace("<aws.scheduler.scheduled-time>",
                                                         at.strftime("%Y-%m-%dT%H:%M:%SZ")))
    # on time, or late (the function was down) but the newest missed fire: it runs (catch_up_max 1)
    fired = scheduler_fn.invoke(event)
    assert fired["fired"] and fired["run_id"].startswith("r_"), fired
    again = scheduler_fn.invoke(event)
    assert (again["fired"], again["reason"], again["run_id"]) == (False, "duplicate", fired["run_id"])
    queue_url = lambdas["sqs"].list_queues()["QueueUrls"][0]
    messages = lambdas["sqs"].receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["run_id"] for m in messages] == [fired["run_id"]]

    webhook = lambdas["open"]("webhook")
    body = json.dumps({"issue": {"title": "red build"}}).encode()
    headers = github_headers(SECRET, body)
    route = "ANY /v1/_webhooks/{proxy+}"
    first = webhook.invoke(http_event("POST", "/v1/_webhooks/github", headers=headers, body=body, route_key=route))
    assert first["statusCode"] == 202, first
    run_id = json.loads(first["body"])["run_id"]
    dup = webhook.invoke(http_event("POST", "/v1/_webhooks/github", headers=headers, body=body, route_key=route))
    assert dup["statusCode"] == 200 and json.loads(dup["body"])["run_id"] == run_id
    forged = {**headers, "X-Hub-Signature-256": "sha256=" + "f" * 64}
    bad = webhook.invoke(http_event("POST", "/v1/_webhooks/github", headers=forged, body=body, route_key=route))
    assert bad["statusCode"] == 401 and json.loads(bad["body"])["code"] == "invalid_signature"
