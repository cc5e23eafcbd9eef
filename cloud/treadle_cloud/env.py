"""Cloud settings from the environment, and secrets from Secrets Manager into the environment."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, MutableMapping
from functools import cache
from typing import Any

from pydantic import Field

from treadle.envsettings import EnvSettings
from treadle.errors import ConfigError

log = logging.getLogger("treadle.cloud")

# Names a provider-keys secret may not set: the runtime's own wiring and the platform's.
_RESERVED = re.compile(r"^(AWS_|LAMBDA_|TREADLE_|_|LD_|PYTHON)|^(DATABASE_URL|PATH|HOME|TZ)$")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")


class CloudSettings(EnvSettings):
    """`TREADLE_*` settings only the cloud shape reads (the rest are the core's `Settings`)."""

    queue_url: str = ""
    db_secret_arn: str | None = None
    db_host: str | None = None  # overrides the secret's host: the RDS Proxy endpoint
    db_port: int | None = None
    db_name: str | None = None
    db_sslmode: str = "require"
    api_token_secret_arn: str | None = None
    provider_keys_secret_arn: str | None = None
    #: a JSON object of webhook signing secrets ({"GITHUB_WEBHOOK_SECRET": "..."}), for the webhook function
    webhook_secrets_secret_arn: str | None = None
    sse_budget_seconds: float = Field(default=25.0, gt=0)
    #: behind the HTTP API (which delivers a response only when it ends), an SSE response ends
    #: this long after its first frame rather than at the budget
    sse_linger_seconds: float = Field(default=1.0, ge=0)
    #: time kept back at the end of a worker invocation (commit, report the batch)
    step_safety_seconds: float = Field(default=5.0, ge=0)
    #: a record is not started with less time than this left; it goes back to the queue
    min_step_seconds: float = Field(default=10.0, gt=0)
    #: a worker chains a run's next step only while at least this much time is left (a model
    #: call started later would likely be handed back at the deadline, wasted)
    chain_reserve_seconds: float = Field(default=120.0, ge=0)
    #: the S3 bucket (and key prefix) holding the agents' volumes; unset: no volumes in the cloud
    volumes_bucket: str = ""
    volumes_prefix: str = "volumes"
    #: the S3 bucket (and key prefix) for bodies over Lambda's 6 MB payload limit (large snapshot
    #: exports and restores: treadle_cloud/transfers.py); unset: none
    transfers_bucket: str = ""
    transfers_prefix: str = "transfers"
    #: a response body over this many bytes goes to S3 and is answered with a 303 to it
    transfer_inline_bytes: int = Field(default=5_000_000, ge=1024, le=6_000_000)
    #: how long a presigned transfer URL (download or upload) is valid
    transfer_url_seconds: int = Field(default=900, ge=60, le=7 * 24 * 3600)
    #: the worker relays live text deltas and commit pokes to the stream function's readers
    #: through Postgres NOTIFY (treadle_cloud/live.py)
    live_deltas: bool = True
    #: the host the stream function's live listener connects to when the pools go through RDS
    #: Proxy (the Aurora cluster endpoint: a LISTEN session must not pin a proxy connection)
    live_db_host: str | None = None
    #: the WebSocket API stage's management endpoint (https://{api}.execute-api.{region}.amazonaws.com/{stage}):
    #: the worker, the ws and the maintenance functions push runs' events to its connections
    #: (treadle_cloud/wswatch.py); unset: no WebSocket watchers
    ws_endpoint: str = ""
    #: how long the worker re-sends a step whose database is unreachable (with a delay, its
    #: receive count untouched) before the step counts toward the dead-letter queue
    db_outage_seconds: float = Field(default=12 * 3600.0, ge=0)


@cache
def aws_client(service: str) -> Any:
    """A boto3 client per service and container (boto3 is imported on first use: it costs
    ~150 ms, which only the invocations that talk to AWS should pay)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=3, read_timeout=10),
    )


SecretReader = Callable[[str], str]


def read_secret(arn: str) -> str:
    return str(aws_client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"])


def database_url_from_secret(secret: str, cloud: CloudSettings) -> str:
    """A libpq URL from an RDS secret (`username`, `password`, `host`, `port`, `dbname`)."""
    from psycopg.conninfo import make_conninfo

    try:
        data = json.loads(secret)
        user, password = data["username"], data["password"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError("TREADLE_DB_SECRET_ARN: the secret is not an RDS secret (username/password)") from exc
    host = cloud.db_host or data.get("host")
    if not host:
        raise ConfigError("TREADLE_DB_SECRET_ARN: no host in the secret and TREADLE_DB_HOST is unset")
    return make_conninfo(
        "",
        host=host,
        port=str(cloud.db_port or data.get("port") or 5432),
        dbname=cloud.db_name or data.get("dbname") or "postgres",
        user=user,
        password=password,
        sslmode=cloud.db_sslmode,
        application_name="treadle",
    )


def export_secrets(
    cloud: CloudSettings,
    environ: MutableMapping[str, str] | None = None,
    reader: SecretReader = read_secret,
) -> list[str]:
    """Put the database URL, the API token and the provider keys into the environment, where
    the core's settings and the providers read them. A variable already set wins (an explicit
    override). Returns the names exported (never the values)."""
    env = os.environ if environ is None else environ
    exported: list[str] = []
    if not env.get("DATABASE_URL") and cloud.db_secret_arn:
        env["DATABASE_URL"] = database_url_from_secret(reader(cloud.db_secret_arn), cloud)
        exported.append("DATABASE_URL")
    if cloud.api_token_secret_arn and not env.get("TREADLE_AUTH_TOKEN"):
        token = reader(cloud.api_token_secret_arn).strip()
        if not token:
            raise ConfigError("TREADLE_API_TOKEN_SECRET_ARN: the secret is empty")
        env["TREADLE_AUTH_TOKEN"] = token
        exported.append("TREADLE_AUTH_TOKEN")
    for setting, arn, example in (
        ("TREADLE_PROVIDER_KEYS_SECRET_ARN", cloud.provider_keys_secret_arn, "ANTHROPIC_API_KEY"),
        ("TREADLE_WEBHOOK_SECRETS_SECRET_ARN", cloud.webhook_secrets_secret_arn, "GITHUB_WEBHOOK_SECRET"),
    ):
        if arn:
            exported.extend(_export_json_map(setting, reader(arn), example, env))
    return exported


def _export_json_map(setting: str, raw: str, example: str, env: MutableMapping[str, str]) -> list[str]:
    """Export a secret holding {"VAR_NAME": "value", ...} into the environment (set names win)."""
    try:
        keys = json.loads(raw) if raw.strip() else {}
    except ValueError:
        keys = None
    if not isinstance(keys, dict):
        raise ConfigError(f'{setting}: expected a JSON object {{"{example}": "..."}}')
    exported: list[str] = []
    for name, value in keys.items():
        if not _ENV_NAME.match(name) or _RESERVED.search(name):
            log.warning("%s: ignoring %r (not an allowed variable name)", setting, name)
            continue
        if isinstance(value, str) and value and not env.get(name):
            env[name] = value
            exported.append(name)
    return exported
