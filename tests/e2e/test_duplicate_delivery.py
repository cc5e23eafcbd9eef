"""At-least-once delivery, exactly-once effects (invariant 1), through the real Postgres queue of
`treadle serve`: a trigger on `jobs` inserts a copy of every job row, so every step message is
delivered twice. The runs must produce the same transcripts as the same runs in a database
without the trigger, run every tool exactly once, and consume every copy."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.e2e import execute, query
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

N_EACH = 8  # runs per agent
LATENCY = {"latency_ms": 20, "jitter_ms": 20}
SCRIPT = [
    {"tool": "Memory", "input": {"op": "set", "scope": "user", "key": "note", "value": {"n": 1}}},
    {"tool": "Memory", "input": {"op": "incr", "scope": "user", "key": "calls"}},
    {"tool": "Memory", "input": {"op": "incr", "scope": "user", "key": "calls", "delta": 5}},
    {"tool": "Memory", "input": {"op": "get", "scope": "user", "key": "calls"}},
    {"text": "finished"},
]
AGENTS: dict[str, Any] = {
    # tool results of `tc` read an agent-wide counter, so their values depend on interleaving
    "tc": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3, **LATENCY}},
    # `sc` works on its own user's keys: its whole transcript is deterministic
    "sc": {"model": "script", "tools": ["Memory"], "mock": {"script": SCRIPT, **LATENCY}},
}

# Logs every job inserted and every job deleted (claimed); with 'duplicate' it also inserts a copy
# of every job row (the copy's own trigger runs at depth 2 and does not copy again).
JOB_TRIGGERS = """
CREATE TABLE e2e_job_log (
    id      bigserial PRIMARY KEY,
    op      text NOT NULL,
    job_id  bigint NOT NULL,
    run_id  text NOT NULL,
    step_no integer NOT NULL,
    copy    boolean NOT NULL
);
CREATE FUNCTION e2e_job_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO e2e_job_log (op, job_id, run_id, step_no, copy)
        VALUES ('delete', OLD.id, OLD.run_id, OLD.step_no, false);
        RETURN OLD;
    END IF;
    INSERT INTO e2e_job_log (op, job_id, run_id, step_no, copy)
    VALUES ('insert', NEW.id, NEW.run_id, NEW.step_no, pg_trigger_depth() > 1);
    IF TG_ARGV[0] = 'duplicate' AND pg_trigger_depth() = 1 THEN
        INSERT INTO jobs (tenant_id, run_id, step_no, run_at)
        VALUES (NEW.tenant_id, NEW.run_id, NEW.step_no, NEW.run_at);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER e2e_jobs_insert AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION e2e_job_log('{mode}');
CREATE TRIGGER e2e_jobs_delete AFTER DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION e2e_job_log('count');
"""

COUNTER_VALUE = re.compile(r'"value":\s*\d+')


async def run_workload(make_db: Any, start_server: Any, mode: str) -> dict[str, Any]:
    """Serve a fresh database (job triggers in `mode`), start the same runs in the same order,
    wait for them to end, and return what the tests compare."""
    url = make_db(f"dup_{mode}", migrated=True)
    await execute(url, JOB_TRIGGERS.format(mode=mode))
    # one job per step (no chaining), so that every step message is really delivered twice
    srv = await start_server(url, AGENTS, name=f"dup-{mode}", TREADLE_WORKERS="8", TREADLE_CHAIN_STEPS="1")
    specs = [("tc", f"t{i}") for i in range(N_EACH)] + [("sc", f"u{i}") for i in range(N_EACH)]
    async with TreadleClient(srv.url, timeout=10) as client:
        run_ids = [(await client.start_run(agent, f"{agent} run {user}", user_id=user))["run_id"]
                   for agent, user in specs]

        async def all_done() -> bool:
            rows = await query(url, "SELECT count(*) AS n FROM runs WHERE status IN ('queued','running','waiting')")
            return bool(rows[0]["n"] == 0)

        await until(all_done, timeout=60, interval=0.1, what=f"the {mode} runs to end")

        async def queue_drained() -> bool:
            return bool((await query(url, "SELECT count(*) AS n FROM jobs"))[0]["n"] == 0)

        await until(queue_drained, timeout=15, interval=0.1, what=f"the {mode} job queue to drain")
        runs = [await client.get_run(r) for r in run_ids]
        transcripts = [await client.events(r) for r in run_ids]

    log = await query(url, "SELECT op, job_id, run_id, step_no, copy FROM e2e_job_log ORDER BY id")
    steps = await query(url, "SELECT sum(step_no) AS n FROM runs")
    counter = await query(url, "SELECT value FROM memory WHERE scope = 'agent' AND scope_id = 'tc' AND key = 'calls'")
    user_counters = await query(url, "SELECT scope_id, value FROM memory WHERE scope = 'user' AND key = 'calls'")
    return {
        "specs": specs,
        "runs": runs,
        "transcripts": transcripts,
        "log": log,
        "steps": int(steps[0]["n"]),
        "agent_counter": counter[0]["value"] if counter else None,
        "user_counters": {r["scope_id"]: r["value"] for r in user_counters},
    }


def shape(events: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    """A transcript without run ids, timestamps and run-specific tool_use ids (numbered by first
    appearance instead). For `tc`, the agent-wide counter values (and the token counts that
    depend on their width) are blanked."""
    ids: dict[str, int] = {}
    out = []
    for e in events:
        d = {k: v for k, v in e.items() if k not in ("ts", "run_id")}
        if "tool_use" in d:
            d["tool_use"] = {**d["tool_use"], "id": ids.setdefault(d["tool_use"]["id"], len(ids))}
        if agent == "tc":
            if d["type"] == "tool_result":
                d["text"] = COUNTER_VALUE.sub('"value":#', d["text"])
            if "usage" in d:
                d["usage"] = sorted(d["usage"])
        out.append(d)
    return out


def counter_values(transcripts: list[list[dict[str, Any]]], specs: list[tuple[str, str]]) -> list[int]:
    vals = []
    for (agent, _user), events in zip(specs, transcripts, strict=True):
        if agent == "tc":
            vals += [json.loads(e["text"])["value"] for e in events if e["type"] == "tool_result"]
    return sorted(vals)


def check_log(result: dict[str, Any], *, copies_expected: bool) -> dict[str, int]:
    log = result["log"]
    inserted = [r for r in log if r["op"] == "insert"]
    originals = [r for r in inserted if not r["copy"]]
    copies = [r for r in inserted if r["copy"]]
    claimed = [r for r in log if r["op"] == "delete"]
    copy_ids = {r["job_id"] for r in copies}
    # one job per step: the run's first step at creation, then one per step that continued
    assert len(originals) == result["steps"], (len(originals), result["steps"])
    assert len(copies) == (len(originals) if copies_expected else 0)
    if copies_expected:
        assert sorted((r["run_id"], r["step_no"]) for r in copies) == sorted(
            (r["run_id"], r["step_no"]) for r in originals
        )
    # every job row, copies included, was claimed off the queue by a worker
    assert sorted(r["job_id"] for r in claimed) == sorted(r["job_id"] for r in inserted)
    return {
        "steps": result["steps"],
        "claimed": len(claimed),
        "copies_claimed": sum(1 for r in claimed if r["job_id"] in copy_ids),
    }


async def test_every_step_delivered_twice_gives_the_same_transcripts(make_db: Any, start_server: Any) -> None:
    once = await run_workload(make_db, start_server, "count")
    twice = await run_workload(make_db, start_server, "duplicate")

    a = check_log(once, copies_expected=False)
    b = check_log(twice, copies_expected=True)
    assert a["claimed"] == a["steps"]
    assert b["steps"] == a["steps"]
    assert b["claimed"] == 2 * b["steps"] > b["steps"], b
    assert b["copies_claimed"] == b["steps"], b

    for result in (once, twice):
        for (agent, _user), run, events in zip(result["specs"], result["runs"], result["transcripts"], strict=True):
            assert (run["status"], run["stop_reason"]) == ("completed", "end_turn"), run
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            assert run["last_seq"] == len(events)
            want_iterations = 4 if agent == "tc" else len(SCRIPT)
            assert run["iterations"] == want_iterations
            assert sum(1 for e in events if e["type"] == "tool_result") == want_iterations - 1

    # the same transcripts, run by run
    for i, (agent, user) in enumerate(once["specs"]):
        assert twice["specs"][i] == (agent, user)
        assert shape(twice["transcripts"][i], agent) == shape(once["transcripts"][i], agent), (agent, user)
        if agent == "sc":  # deterministic down to the token counts on the run row
            assert twice["runs"][i]["usage"] == once["runs"][i]["usage"]

    # every tool ran exactly once: the agent-wide counter saw each increment once, in both worlds
    n_tc_calls = 3 * N_EACH
    assert once["agent_counter"] == twice["agent_counter"] == n_tc_calls
    assert counter_values(once["transcripts"], once["specs"]) == list(range(1, n_tc_calls + 1))
    assert counter_values(twice["transcripts"], twice["specs"]) == list(range(1, n_tc_calls + 1))
    assert once["user_counters"] == twice["user_counters"] == {f"u{i}": 6 for i in range(N_EACH)}
    sc_get = [e for e in twice["transcripts"][N_EACH] if e["type"] == "tool_result"][-1]
    assert json.loads(sc_get["text"]) == {"found": True, "key": "calls", "value": 6}
