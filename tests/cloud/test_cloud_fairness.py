"""Fairness in the cloud shape: with TREADLE_TENANT_MAX_RUNNING, a worker Lambda does not lease a
step of a tenant already at its cap — it sends the step again with a delay and acknowledges the
record (a released record would count toward the dead-letter queue) — and runs it once a slot is
free."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.cloud.test_cloud_path import all_terminal, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv


@pytest.fixture
def tenant_cap(cloud_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_TENANT_MAX_RUNNING", "1")


@pytest.fixture
def capped(tenant_cap: None, api: LambdaEnv, worker: LambdaEnv) -> dict[str, LambdaEnv]:
    """The api and worker Lambdas, started with a cap of one running step per tenant."""
    return {"api": api, "worker": worker}


def test_a_step_of_a_tenant_at_its_cap_waits_for_a_free_slot(
    capped: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, worker = capped["api"], capped["worker"]
    holder = start_run(api, "calc", "holds the tenant's one slot")
    with psycopg.connect(cloud_db, autocommit=True) as conn:  # another worker holds it, for now
        conn.execute("UPDATE runs SET lease_owner = 'elsewhere', lease_until = now() + interval '10 minutes',"
                     " status = 'running' WHERE id = %s", (holder,))
    waiting = start_run(api, "calc", "must wait")
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
    esm.run_until(lambda: worker.handler.results.get("deferred", 0) >= 2, timeout_s=30)
    assert not all_terminal(cloud_db, [waiting])  # deferred, again and again, while the slot is taken
    assert esm.failures == 0  # never released as a failure: no receive count toward the DLQ
    with psycopg.connect(cloud_db, autocommit=True) as conn:  # the slot frees
        conn.execute("UPDATE runs SET lease_owner = NULL, lease_until = now() - interval '1 second',"
                     " status = 'cancelled', completed_at = now() WHERE id = %s", (holder,))
    esm.run_until(lambda: all_terminal(cloud_db, [waiting]), timeout_s=60)
    with psycopg.connect(cloud_db) as conn:
        row = conn.execute("SELECT status FROM runs WHERE id = %s", (waiting,)).fetchone()
    assert row == ("completed",)
