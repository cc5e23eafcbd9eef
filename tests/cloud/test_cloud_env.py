"""Secrets Manager → environment, against moto, and through the api function."""

from __future__ import annotations

import json
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.support.lambda_sim import LambdaEnv, http_event
from tests.support.localcloud import db_host_parts
from treadle.errors import ConfigError
from treadle_cloud.env import CloudSettings, database_url_from_secret, export_secrets


def test_database_url_from_an_rds_secret_with_the_proxy_host() -> None:
    secret = json.dumps({"username": "treadle", "password": "p@ss word", "host": "cluster.example",
                         "port": 5432, "dbname": "treadle", "engine": "postgres"})
    url = database_url_from_secret(secret, CloudSettings(db_host="proxy.example"))
    parts = conninfo_to_dict(url)
    assert parts["host"] == "proxy.example" and parts["password"] == "p@ss word"
    assert parts["sslmode"] == "require" and parts["dbname"] == "treadle"
    with pytest.raises(ConfigError, match="not an RDS secret"):
        database_url_from_secret('{"user": "x"}', CloudSettings())


def test_export_secrets_keeps_explicit_values_and_refuses_reserved_names() -> None:
    values = {
        "db": json.dumps({"username": "u", "password": "p", "host": "h"}),
        "token": " tok \n",
        "keys": json.dumps({"ANTHROPIC_API_KEY": "sk-a", "OPENAI_API_KEY": "sk-o", "AWS_SECRET_ACCESS_KEY": "x",
                            "TREADLE_AUTH_TOKEN": "x", "DATABASE_URL": "x", "lower": "x", "LD_PRELOAD": "x"}),
    }
    env = {"OPENAI_API_KEY": "explicit"}
    cloud = CloudSettings(db_secret_arn="db", api_token_secret_arn="token", provider_keys_secret_arn="keys")
    exported = export_secrets(cloud, env, reader=values.__getitem__)
    assert exported == ["DATABASE_URL", "TREADLE_AUTH_TOKEN", "ANTHROPIC_API_KEY"]
    assert env["TREADLE_AUTH_TOKEN"] == "tok" and env["OPENAI_API_KEY"] == "explicit"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "LD_PRELOAD" not in env
    with pytest.raises(ConfigError, match="JSON object"):
        export_secrets(CloudSettings(provider_keys_secret_arn="k"), {}, reader=lambda _a: "[1]")


def test_the_api_function_reads_its_database_and_token_from_secrets_manager(
    cloud_env: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    sm = boto3.client("secretsmanager")
    parts = db_host_parts(cloud_db)
    db_secret = sm.create_secret(Name=f"treadle-db-{id(parts)}", SecretString=json.dumps({
        "username": parts.get("user", "postgres"), "password": parts.get("password", ""),
        "host": parts.get("host", "localhost"), "port": int(parts.get("port", 5432)), "dbname": parts["dbname"],
    }))["ARN"]
    token_secret = sm.create_secret(Name=f"treadle-token-{id(parts)}", SecretString="from-secrets-manager")["ARN"]
    keys_secret = sm.create_secret(Name=f"treadle-keys-{id(parts)}",
                                   SecretString=json.dumps({"ANTHROPIC_API_KEY": "sk-test"}))["ARN"]
    for name in ("DATABASE_URL", "TREADLE_AUTH_TOKEN", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "")  # unset for the function; restored afterwards
    monkeypatch.setenv("TREADLE_DB_SECRET_ARN", db_secret)
    monkeypatch.setenv("TREADLE_DB_SSLMODE", "disable")
    monkeypatch.setenv("TREADLE_API_TOKEN_SECRET_ARN", token_secret)
    monkeypatch.setenv("TREADLE_PROVIDER_KEYS_SECRET_ARN", keys_secret)

    api = LambdaEnv("api")
    try:
        resp: Any = api.invoke(http_event("GET", "/v1/runs", headers={"authorization": "Bearer from-secrets-manager"}))
        assert resp["statusCode"] == 200, resp
        resp = api.invoke(http_event("GET", "/v1/runs", headers={"authorization": "Bearer test-token-0123456789"}))
        assert resp["statusCode"] == 401
        import os

        assert os.environ["ANTHROPIC_API_KEY"] == "sk-test"
    finally:
        api.close()


def test_an_unreachable_database_answers_503_not_a_crash(
    cloud_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1")
    api = LambdaEnv("api")
    try:
        resp = api.invoke(http_event("GET", "/healthz"))
        assert resp["statusCode"] == 503 and json.loads(resp["body"])["code"] == "unavailable"
    finally:
        api.close()
