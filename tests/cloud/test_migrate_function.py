"""The migrate function (the deploy's custom resource, the operator's doctor) against a real
Postgres: the real handler module in an imitated Lambda environment, CloudFormation custom
resource events as CDK's Provider framework sends them."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.lambda_sim import LambdaEnv
from treadle.store.migrate import available_migrations
from treadle_cloud.migrate import MigrationFailed


def cfn_event(request: str, **props: str) -> dict[str, object]:
    return {
        "RequestType": request,
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider-framework",
        "ResponseURL": "https://cloudformation-custom-resource-response.invalid/",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/Treadle/guid",
        "RequestId": "req-1",
        "LogicalResourceId": "Migrations",
        "ResourceType": "Custom::TreadleMigrations",
        "ResourceProperties": {"ServiceToken": "x", **props},
        **({"PhysicalResourceId": "treadle-migrations"} if request != "Create" else {}),
    }


@pytest.fixture
def migrate_env(db_without_pgvector: str, config_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaEnv]:
    monkeypatch.setenv("DATABASE_URL", db_without_pgvector)
    monkeypatch.setenv("TREADLE_CONFIG", str(config_file))
    for k in ("TREADLE_DB_SECRET_ARN", "TREADLE_API_TOKEN_SECRET_ARN", "TREADLE_PROVIDER_KEYS_SECRET_ARN"):
        monkeypatch.delenv(k, raising=False)
    env = LambdaEnv("migrate")
    yield env
    env._thread.shutdown()  # no Container to close: the function opens one connection per call


def applied(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM treadle_migrations ORDER BY version")]


def test_create_migrates_an_empty_database_and_update_is_idempotent(
    migrate_env: LambdaEnv, db_without_pgvector: str
) -> None:
    # this server has no pgvector: the deploy may proceed only when the stack does not require it
    out = migrate_env.invoke(cfn_event("Create", RequirePgvector="false"))
    wanted = [m.version for m in available_migrations()]
    assert out["PhysicalResourceId"] == "treadle-migrations"
    assert out["Data"]["Applied"] == ",".join(map(str, wanted))
    assert applied(db_without_pgvector) == wanted
    out = migrate_env.invoke(cfn_event("Update", RequirePgvector="false"))
    assert out["Data"]["Applied"] == "none" and applied(db_without_pgvector) == wanted


def test_a_missing_pgvector_fails_the_deploy_when_required(migrate_env: LambdaEnv, db_without_pgvector: str) -> None:
    with pytest.raises(MigrationFailed, match="pgvector is not available on this server"):
        migrate_env.invoke(cfn_event("Create", RequirePgvector="true"))
    # the migrations themselves ran (the schema is usable); the deploy still stops here
    assert applied(db_without_pgvector) == [m.version for m in available_migrations()]


def test_a_failing_migration_fails_the_deploy_and_applies_nothing_of_it(
    migrate_env: LambdaEnv, db_without_pgvector: str
) -> None:
    with psycopg.connect(db_without_pgvector, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (id text)")  # what 0001 creates: its CREATE TABLE fails
    with pytest.raises(MigrationFailed, match=r"migrations failed on .*relation \"runs\" already exists"):
        migrate_env.invoke(cfn_event("Create", RequirePgvector="false"))
    with psycopg.connect(db_without_pgvector) as conn:  # the failed migration's transaction rolled back whole
        assert conn.execute("SELECT to_regclass('events')").fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM treadle_migrations").fetchone() == (0,)


def test_an_unreachable_database_fails_the_deploy(
    migrate_env: LambdaEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DATABASE_URL", f"postgresql://treadle@127.0.0.1:{port}/treadle?connect_timeout=2")
    with pytest.raises(MigrationFailed, match="database unreachable"):
        migrate_env.invoke(cfn_event("Update", RequirePgvector="false"))
    # deleting the resource never touches the database (the stack's teardown cannot hang on it)
    assert migrate_env.invoke(cfn_event("Delete")) == {"PhysicalResourceId": "treadle-migrations"}


def test_doctor_prints_the_same_lines_as_treadle_doctor(migrate_env: LambdaEnv, db_without_pgvector: str) -> None:
    out = migrate_env.invoke({"action": "doctor", "require_pgvector": False})
    assert out["ok"] is True
    levels = {line.split()[0] for line in out["lines"]}
    assert levels <= {"PASS", "WARN"}
    assert any("migrations pending" in line for line in out["lines"])  # doctor only reads
    assert any(line.startswith("WARN") and "pgvector" in line for line in out["lines"])
    out = migrate_env.invoke({"action": "migrate", "require_pgvector": False})
    assert out["ok"] is True and out["applied"] == [m.version for m in available_migrations()]
    out = migrate_env.invoke({"action": "doctor"})  # the stack's default: pgvector required
    assert out["ok"] is False and any(line.startswith("FAIL") and "pgvector" in line for line in out["lines"])
    with pytest.raises(ValueError, match="unknown action"):
        migrate_env.invoke({"action": "drop"})
