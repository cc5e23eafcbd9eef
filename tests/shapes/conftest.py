"""The shapes the contract suite runs against (tests/support/shapes.py): `shape` is the sidecar
or the local cloud, each started once per module on a database of its own (each migrates it on
its own start, as `treadle serve` and the cloud's cold start do)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.db import create_database, drop_database
from tests.support.shapes import CONFIG, TOKEN, WEBHOOK_SECRET, WEBHOOK_SECRET_ENV, CloudShape, Shape, SidecarShape

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
SCHEDULER_ROLE = "arn:aws:iam::123456789012:role/treadle-scheduler"
SCHEDULER_TARGET = "arn:aws:lambda:us-east-1:123456789012:function:treadle-scheduler:live"


@pytest.fixture(scope="module")
def module_env() -> Iterator[pytest.MonkeyPatch]:
    mp = pytest.MonkeyPatch()
    mp.setenv(WEBHOOK_SECRET_ENV, WEBHOOK_SECRET)
    yield mp
    mp.undo()


def _cloud(mp: pytest.MonkeyPatch, moto_url: str, db: str, config: Path) -> CloudShape:
    """The environment the CDK construct gives the functions, pointed at moto and `db`."""
    import boto3

    for k, v in {**AWS_ENV, "AWS_ENDPOINT_URL": moto_url}.items():
        mp.setenv(k, v)
    mp.delenv("AWS_PROFILE", raising=False)
    from treadle_cloud.env import aws_client

    aws_client.cache_clear()
    sqs, scheduler = boto3.client("sqs"), boto3.client("scheduler")
    name = f"treadle-shapes-{os.urandom(3).hex()}"
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName=name, Attributes={
        "VisibilityTimeout": "30", "RedrivePolicy": f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"10"}}'},
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    scheduler.create_schedule_group(Name=name)
    for k, v in {"DATABASE_URL": db, "TREADLE_QUEUE_URL": url, "TREADLE_CONFIG": str(config),
                 "TREADLE_AUTH_TOKEN": TOKEN}.items():
        mp.setenv(k, v)
    for k in ("TREADLE_DB_SECRET_ARN", "TREADLE_API_TOKEN_SECRET_ARN", "TREADLE_PROVIDER_KEYS_SECRET_ARN",
              "TREADLE_WEBHOOK_SECRETS_SECRET_ARN", "TREADLE_SCHEDULE_GROUP", "TREADLE_SCHEDULER_ROLE_ARN",
              "TREADLE_SCHEDULER_TARGET_ARN"):
        mp.delenv(k, raising=False)
    schedule_env = {"TREADLE_SCHEDULE_GROUP": name, "TREADLE_SCHEDULER_ROLE_ARN": SCHEDULER_ROLE,
                    "TREADLE_SCHEDULER_TARGET_ARN": SCHEDULER_TARGET}
    return CloudShape(sqs, {"url": url, "arn": arn}, scheduler, name, schedule_env)


@pytest.fixture(scope="module", params=["sidecar", "cloud"])
def shape(request: pytest.FixtureRequest, server_url: str, module_env: pytest.MonkeyPatch,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shape]:
    db = create_database(server_url, f"shape_{request.param}")
    made: Any
    if request.param == "sidecar":
        made = SidecarShape(db)
    else:
        config = tmp_path_factory.mktemp("shapes") / "treadle.yaml"
        config.write_text(yaml.safe_dump(CONFIG))
        made = _cloud(module_env, request.getfixturevalue("moto_url"), db, config)
    made.start()
    try:
        yield made
    finally:
        made.close()
        drop_database(server_url, db)
        if request.param == "cloud":  # a client on moto must not outlive the module's variables
            from treadle_cloud.env import aws_client

            aws_client.cache_clear()
