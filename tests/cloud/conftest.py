"""The local cloud: moto's server (SQS, Secrets Manager) on a loopback port with dummy
credentials, a real Postgres database, and the real handler modules in imitated Lambda
environments (see tests/support/lambda_sim.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.db import create_database, drop_database, server_without_pgvector
from tests.support.lambda_sim import LambdaEnv
from tests.support.localcloud import A2A_CARDS, AGENTS, API_TOKEN

_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@pytest.fixture
def db_without_pgvector(server_url: str) -> Iterator[str]:
    """An empty database on a server without pgvector (skipped where this machine has none)."""
    server = server_without_pgvector(server_url)
    if server is None:
        pytest.skip("no PostgreSQL server without pgvector on this machine")
    url = create_database(server, "nopgvector")
    yield url
    drop_database(server, url)


@pytest.fixture(scope="session")
def aws(moto_url: str) -> Iterator[dict[str, str]]:
    """Process environment pointing boto3 at moto (never at AWS)."""
    env = {**_AWS_ENV, "AWS_ENDPOINT_URL": moto_url}
    saved = {k: os.environ.get(k) for k in [*env, "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"]}
    os.environ.pop("AWS_PROFILE", None)
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    os.environ.update(env)
    from treadle_cloud.env import aws_client

    aws_client.cache_clear()
    yield env
    aws_client.cache_clear()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def sqs(aws: dict[str, str]) -> Any:
    import boto3

    return boto3.client("sqs")


@pytest.fixture
def queue(sqs: Any, request: pytest.FixtureRequest) -> dict[str, str]:
    """A fresh standard queue with a dead-letter queue and redrive, like the stack's (but a
    2 s visibility timeout, so a dead worker's messages come back quickly)."""
    name = f"treadle-{request.node.name[:40].replace('[', '-').replace(']', '')}-{os.urandom(3).hex()}"
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "2",
            "RedrivePolicy": f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"10"}}',
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return {"url": url, "arn": arn, "dlq_url": dlq_url}


@pytest.fixture(scope="module")
def cloud_db(server_url: str) -> Iterator[str]:
    """An empty database per module: the functions migrate it themselves on their cold start."""
    url = create_database(server_url, "cloud")
    yield url
    drop_database(server_url, url)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cloudcfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({"agents": AGENTS, "a2a_server_cards": A2A_CARDS}))
    return path


@pytest.fixture
def cloud_env(
    aws: dict[str, str], queue: dict[str, str], cloud_db: str, config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The environment the CDK construct gives the functions, pointed at the local cloud."""
    env = {
        "DATABASE_URL": cloud_db,
        "TREADLE_QUEUE_URL": queue["url"],
        "TREADLE_CONFIG": str(config_file),
        "TREADLE_AUTH_TOKEN": API_TOKEN,
        "TREADLE_LEASE_SECONDS": "3",
        "TREADLE_REQUEUE_AFTER_SECONDS": "4",
        "TREADLE_SSE_BUDGET_SECONDS": "25",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("TREADLE_DB_SECRET_ARN", "TREADLE_API_TOKEN_SECRET_ARN", "TREADLE_PROVIDER_KEYS_SECRET_ARN"):
        monkeypatch.delenv(k, raising=False)
    return {**aws, **env}


@pytest.fixture
def api(cloud_env: dict[str, str]) -> Iterator[LambdaEnv]:
    """The api Lambda (an environment of its own), on `cloud_env`."""
    env = LambdaEnv("api")
    yield env
    env.close()


@pytest.fixture
def worker(cloud_env: dict[str, str]) -> Iterator[LambdaEnv]:
    """The worker Lambda (an environment of its own), on `cloud_env`."""
    env = LambdaEnv("worker")
    yield env
    env.close()
