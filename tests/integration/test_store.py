"""RunStore against a real Postgres: create/get/events/list/cancel, idempotency keys, tenant isolation."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest

from treadle.store.db import Pool, open_pool
from treadle.store.runs import NewRun, RunStore, new_run_id
from treadle.testing import user_text


def tenant() -> str:
    return f"t_{secrets.token_hex(6)}"


@pytest.fixture(scope="module")
async def pool(db_url: str) -> AsyncIterator[Pool]:
    p = await open_pool(db_url, 8, name="test-store")
    yield p
    await p.close()


@pytest.fixture
def runs(pool: Pool) -> RunStore:
    # jobs_in_db=False: no job rows land in the shared database for another test's workers
    return RunStore(pool, jobs_in_db=False, requeue_after_s=60.0)


async def test_create_get_and_initial_events(runs: RunStore) -> None:
    t = tenant()
    run, created = await runs.create(
        NewRun(tenant_id=t, agent="demo", segments=user_text("hello"), user_id="u1", metadata={"k": [1, 2]})
    )
    assert created
    assert run.id.startswith("r_") and run.tenant_id == t
    assert (run.agent, run.user_id, run.status, run.step_no, run.last_seq, run.iterations) == (
        "demo", "u1", "queued", 0, 2, 0,
    )
    assert run.metadata == {"k": [1, 2]} and not run.cancel_requested and not run.terminal
    assert run.usage() == {
        "input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
    }

    got = await runs.get(t, run.id)
    assert got is not None and got.to_api() == run.to_api()

    events = await runs.events(t, run.id)
    assert [(e.seq, e.type) for e in events] == [(1, "user_input"), (2, "started")]
    assert events[0].payload == {"segments": user_text("hello")}
    assert events[1].payload == {"agent": "demo", "run_id": run.id, "user_id": "u1"}
    api = events[1].to_api()
    assert api["seq"] == 2 and api["type"] == "started" and api["agent"] == "demo" and "ts" in api


async def test_run_to_api_fields(runs: RunStore) -> None:
    t = tenant()
    run, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("x")))
    api = run.to_api()
    assert set(api) == {
        "run_id", "agent", "user_id", "status", "stop_reason", "error", "iterations", "usage", "metadata",
        "interactive", "last_seq", "created_at", "updated_at", "completed_at",
        "parent_run_id", "root_run_id", "depth", "def_id", "def_content_sha256", "skill_def_ids",
        "agent_id", "session_id", "parent_context",  # loomcycle's (issue 18)
    }
    assert api["run_id"] == run.id and api["status"] == "queued" and api["completed_at"] is None
    assert api["metadata"] == {} and api["user_id"] is None


async def test_events_from_seq_and_limit(runs: RunStore) -> None:
    t = tenant()
    run, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("x")))
    assert [e.seq for e in await runs.events(t, run.id, from_seq=1)] == [2]
    assert [e.seq for e in await runs.events(t, run.id, from_seq=2)] == []
    assert [e.seq for e in await runs.events(t, run.id, limit=1)] == [1]


async def test_another_tenant_sees_nothing(runs: RunStore) -> None:
    owner, other = tenant(), tenant()
    run, _ = await runs.create(NewRun(tenant_id=owner, agent="demo", segments=user_text("secret")))
    assert await runs.get(other, run.id) is None
    assert await runs.events(other, run.id) == []
    assert all(r.id != run.id for r in await runs.list_runs(other, None, 500))
    assert await runs.request_cancel(other, run.id, "not yours") is None
    mine = await runs.get(owner, run.id)
    assert mine is not None and not mine.cancel_requested


async def test_unknown_run(runs: RunStore) -> None:
    t = tenant()
    assert await runs.get(t, new_run_id()) is None
    assert await runs.events(t, new_run_id()) == []
    assert await runs.request_cancel(t, new_run_id(), "x") is None


async def test_idempotency_key_returns_the_same_run(runs: RunStore) -> None:
    t = tenant()
    first, created1 = await runs.create(
        NewRun(tenant_id=t, agent="demo", segments=user_text("one"), idempotency_key="key-1")
    )
    again, created2 = await runs.create(
        NewRun(tenant_id=t, agent="demo", segments=user_text("two"), idempotency_key="key-1")
    )
    assert created1 and not created2
    assert again.id == first.id
    events = await runs.events(t, first.id)
    assert len(events) == 2 and events[0].payload == {"segments": user_text("one")}
    assert len(await runs.list_runs(t, None, 50)) == 1

    other_key, created3 = await runs.create(
        NewRun(tenant_id=t, agent="demo", segments=user_text("x"), idempotency_key="key-2")
    )
    assert created3 and other_key.id != first.id
    no_key_a, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("x")))
    no_key_b, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("x")))
    assert no_key_a.id != no_key_b.id


async def test_idempotency_keys_are_per_tenant(runs: RunStore) -> None:
    a, b = tenant(), tenant()
    ra, _ = await runs.create(NewRun(tenant_id=a, agent="demo", segments=user_text("x"), idempotency_key="same"))
    rb, created = await runs.create(NewRun(tenant_id=b, agent="demo", segments=user_text("x"), idempotency_key="same"))
    assert created and ra.id != rb.id and rb.tenant_id == b


async def test_concurrent_creates_with_one_key_make_one_run(runs: RunStore) -> None:
    t = tenant()
    results = await asyncio.gather(
        *(runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text(str(i)), idempotency_key="k"))
          for i in range(6))
    )
    assert len({r.id for r, _ in results}) == 1
    assert sum(1 for _, created in results if created) == 1
    assert len(await runs.list_runs(t, None, 50)) == 1
    assert len(await runs.events(t, results[0][0].id)) == 2


async def test_list_runs_newest_first_with_status_filter_and_limit(runs: RunStore, pool: Pool) -> None:
    t = tenant()
    ids = []
    for i in range(3):
        run, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text(str(i))))
        ids.append(run.id)
    async with pool.connection() as conn:
        await conn.execute("UPDATE runs SET status = 'completed', completed_at = now() WHERE id = %s", (ids[1],))
    listed = await runs.list_runs(t, None, 50)
    assert [r.id for r in listed] == ids[::-1]
    assert [r.id for r in await runs.list_runs(t, "completed", 50)] == [ids[1]]
    assert [r.id for r in await runs.list_runs(t, "queued", 50)] == [ids[2], ids[0]]
    assert [r.id for r in await runs.list_runs(t, None, 1)] == [ids[2]]


async def test_request_cancel_flags_an_active_run_and_leaves_a_finished_one(runs: RunStore, pool: Pool) -> None:
    t = tenant()
    active, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("x")))
    flagged = await runs.request_cancel(t, active.id, "stop please")
    assert flagged is not None and flagged.cancel_requested and flagged.status == "queued"
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT cancel_reason FROM runs WHERE id = %s", (active.id,))
        assert (await cur.fetchone())["cancel_reason"] == "stop please"  # type: ignore[index]

    done, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("x")))
    async with pool.connection() as conn:
        await conn.execute("UPDATE runs SET status = 'completed' WHERE id = %s", (done.id,))
    unchanged = await runs.request_cancel(t, done.id, "too late")
    assert unchanged is not None and unchanged.status == "completed" and not unchanged.cancel_requested
    assert unchanged.terminal


async def test_create_with_jobs_in_db_enqueues_step_zero(migrated_db_url: str) -> None:
    p = await open_pool(migrated_db_url, 2, name="test-store-jobs")
    try:
        store = RunStore(p, jobs_in_db=True, requeue_after_s=60.0)
        run, _ = await store.create(NewRun(tenant_id="t", agent="demo", segments=user_text("x"), idempotency_key="i"))
        await store.create(NewRun(tenant_id="t", agent="demo", segments=user_text("x"), idempotency_key="i"))
        async with p.connection() as conn:
            cur = await conn.execute("SELECT tenant_id, run_id, step_no FROM jobs")
            rows = await cur.fetchall()
        assert rows == [{"tenant_id": "t", "run_id": run.id, "step_no": 0}]  # the replay made no second job
    finally:
        await p.close()


async def test_deleting_runs_deletes_their_events_and_nothing_else(runs: RunStore, pool: Pool) -> None:
    """events.run_id has no foreign key (migration 0024: its check cost every step commit); a
    statement trigger deletes a deleted run's events, as the cascade did — whoever deletes."""
    t = tenant()
    gone, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("a")))
    kept, _ = await runs.create(NewRun(tenant_id=t, agent="demo", segments=user_text("b")))
    async with pool.connection() as conn:
        fks = await (await conn.execute(
            "SELECT count(*) AS n FROM pg_constraint WHERE conrelid = 'events'::regclass AND contype = 'f'"
        )).fetchone()
        assert fks is not None and fks["n"] == 0
        await conn.execute("DELETE FROM runs WHERE id = %s", (gone.id,))
        rows = await (await conn.execute(
            "SELECT run_id, count(*) AS n FROM events WHERE run_id = ANY(%s) GROUP BY run_id", ([gone.id, kept.id],)
        )).fetchall()
    assert {r["run_id"]: r["n"] for r in rows} == {kept.id: 2}


async def test_jsonb_round_trips_exactly(pool: Pool) -> None:
    """The stores encode and read jsonb with orjson where it is exact (store/db.py), the stdlib
    elsewhere: integers past 64 bits (orjson would read a float), tiny floats, non-ASCII text."""
    from psycopg.types.json import Jsonb

    values = [
        {"big": 2**70, "neg": -(2**63) - 1, "u64": 2**64 - 1, "f": 1.5e-300, "digits": "12345678901234567890123"},
        {"text": "é ü \u2028 \"quoted\" \\ back", "list": [1, 2.5, None, True, {"k": []}]},
        [-(2**63), 2**63 - 1, 0.1],
    ]
    async with pool.connection() as conn:
        for value in values:
            row = await (await conn.execute("SELECT %s::jsonb AS v", (Jsonb(value),))).fetchone()
            assert row is not None
            got = row["v"]
            assert got == value and type(got) is type(value)
            if isinstance(value, dict) and "big" in value:
                assert isinstance(got, dict) and isinstance(got["big"], int) and got["big"] == 2**70
