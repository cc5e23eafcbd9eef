"""Chained step commits update the run row in place (issue 12; migration 0023): a commit that hands
the lease to the chain's next step rewrites only columns no index of `runs` holds, so Postgres
writes a heap-only tuple instead of an entry in each of the table's indexes."""

from __future__ import annotations

import contextlib
import re
import secrets
from typing import Any

import psycopg

from treadle.engine.lease import Lease
from treadle.engine.workers import WorkerPool
from treadle.store.runs import NewRun

TENANT = f"t_hot_{secrets.token_hex(4)}"

#: what a chained commit (StepStore._commit with a chain owner) changes on the run row; the lease
#: deadline is kept while half a lease is left, `status` stays 'running'
CHAINED_COMMIT_CHANGES = (
    "last_seq", "step_no", "step_failures", "lease_owner", "iterations", "input_tokens", "output_tokens",
    "cache_creation_tokens", "cache_read_tokens", "updated_at",
)


def test_no_index_of_runs_holds_a_column_a_chained_commit_changes(migrated_db_url: str) -> None:
    with psycopg.connect(migrated_db_url) as conn:
        defs = [r[0] for r in conn.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'runs'::regclass").fetchall()]
    assert len(defs) >= 9
    held = {(col, d) for d in defs for col in CHAINED_COMMIT_CHANGES if re.search(rf"\b{col}\b", d)}
    assert held == set(), "an index on these columns makes every chained commit a non-HOT update"


async def test_a_chain_keeps_its_lease_deadline_and_the_commits_are_heap_only(open_runtime: Any) -> None:
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 5}}
    rt, disp = await open_runtime({"hot": agent}, chain_steps=10, chain_budget_seconds=60)
    inner = rt.engine._call_model
    seen: list[tuple[int, Any]] = []

    async def recording(lease: Lease, agent: Any, transcript: Any, iteration: int, retry: Any) -> Any:
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT step_no, lease_until FROM runs WHERE id = %s", (lease.run.run_id,))
            row = await cur.fetchone()
        assert row is not None
        seen.append((row["step_no"], row["lease_until"]))
        return await inner(lease, agent, transcript, iteration, retry)

    rt.engine._call_model = recording
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="hot", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    assert await disp.drain() == 1  # one lease chain ran every step
    stored = await rt.runs.get(TENANT, run.id)
    assert stored is not None and (stored.status, stored.iterations) == ("completed", 6)
    assert [s for s, _ in seen] == list(range(len(seen))) and len(seen) == 6
    assert len({deadline for _, deadline in seen}) == 1  # every chained step under the first deadline


async def test_a_step_that_keeps_the_run_running_leaves_status_out_of_its_update(
        open_runtime: Any, migrated_db_url: str) -> None:
    """`UPDATE OF status` triggers (run_credentials_forget) are considered only for updates that
    set `status`: the chained steps of a running run do not, the lease that starts it and the
    commit that ends it do."""
    with psycopg.connect(migrated_db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE status_updates (run_id text, status text)")
        conn.execute("CREATE FUNCTION note_status_update() RETURNS trigger LANGUAGE plpgsql AS $$"
                     " BEGIN INSERT INTO status_updates VALUES (NEW.id, NEW.status); RETURN NULL; END $$")
        conn.execute("CREATE TRIGGER note_status_update AFTER UPDATE OF status ON runs"
                     " FOR EACH ROW EXECUTE FUNCTION note_status_update()")
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 5}}
    rt, disp = await open_runtime({"keeps": agent}, url=migrated_db_url, chain_steps=10, chain_budget_seconds=60)
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="keeps", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    assert await disp.drain() == 1
    stored = await rt.runs.get(TENANT, run.id)
    assert stored is not None and (stored.status, stored.iterations) == ("completed", 6)
    with psycopg.connect(migrated_db_url) as conn:
        seen = [r[0] for r in conn.execute("SELECT status FROM status_updates WHERE run_id = %s", (run.id,))]
    assert seen == ["running", "completed"]  # the lease, then the end: none of the 5 chained steps



async def prepared_statements(rt: Any, size: int) -> list[str]:
    """The statements prepared on each of the `size` connections of the runtime's pool."""
    async with contextlib.AsyncExitStack() as stack:
        conns = [await stack.enter_async_context(rt.pool.inner.connection()) for _ in range(size)]
        found: list[str] = []
        for conn in conns:
            cur = await conn.execute("SELECT statement FROM pg_prepared_statements")
            found += [r["statement"] for r in await cur.fetchall()]
        return found


async def test_a_steps_statements_are_prepared_at_their_first_run(open_runtime: Any) -> None:
    """store/db.py `prepare_now`: the claim and the step commits are prepared on the server the
    first time they run on a connection (psycopg's own rule waits for a statement's 6th run, and
    the server parses and plans each run before it in full). A 2-step run, one claim: each of
    its statements runs once."""
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 1}}
    rt, queue = await open_runtime({"once": agent}, inline=False, db_pool_size=2, chain_steps=10,
                                   chain_budget_seconds=60)
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="once", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    workers = WorkerPool(rt.engine, queue, 1)
    assert await workers._claim_and_run()  # the claim, then its whole chain (a task of its own)
    await workers.settle()
    stored = await rt.runs.get(TENANT, run.id)
    assert stored is not None and (stored.status, stored.iterations) == ("completed", 2)
    found = [" ".join(s.split()) for s in await prepared_statements(rt, 2)]
    assert any(s.startswith("WITH s AS (SELECT set_config(") and "DELETE FROM jobs" in s for s in found)  # claim
    assert any(s.startswith("WITH tool AS (INSERT INTO memory") for s in found)  # step 1, its Memory.incr folded
    assert any(s.startswith("WITH g AS ( UPDATE runs SET") and "DELETE FROM run_waits" in s for s in found)  # the end


async def test_the_sqs_paths_lease_is_prepared_at_its_first_run(open_runtime: Any) -> None:
    """The lease the SQS worker takes per message (StepStore.lease → `_lease_on`) is prepared at
    its first run on a connection, like the Postgres queue's claim it mirrors."""
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 1}}
    rt, _ = await open_runtime({"once": agent}, inline=False, db_pool_size=1)
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="once", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "hi"}]}]))
    leased = await rt.engine.steps.lease(run.id, run.step_no, rt.engine.new_owner())
    assert leased is not None and leased.run_id == run.id
    found = [" ".join(s.split()) for s in await prepared_statements(rt, 1)]
    assert any(s.startswith("UPDATE runs SET") and "set_config('synchronous_commit'" in s for s in found)
