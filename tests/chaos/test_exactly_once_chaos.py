"""Exactly-once effects under chaos: two `treadle serve` replicas on one database, a few hundred
runs of a scripted agent whose every tool call leaves a countable trace in the database,
duplicated step deliveries, and replicas SIGKILLed (then restarted) and SIGSTOPped past their
lease (then continued) at seeded moments while the runs are in flight.

Each run of `chaos` (user u0000, u0001, ...) makes six transactional tool calls, one per turn:

  1. Memory incr   user:<u>/k1        → the counter must be exactly 1, the transcript says 1
  2. Channel publish feed (user scope) → exactly one message in stream <u>, the id the transcript names
  3. Memory incr   agent:chaos/total  → one hot row shared by every run: the values the transcripts
                                        saw are exactly 1..N and the row holds N
  4. Agent spawn   helper             → exactly one child run; it increments user:<u>/child once
  5. Channel publish wire (global)     → one hot stream: exactly N messages, each named by one transcript
  6. Memory incr   user:<u>/k2        → exactly 1

Duplicates: a trigger on `jobs` copies the first job of ~10 % of the steps (chosen by a hash of the
seed, the run and the step; half the copies due at once, half up to 1.5 s later), and an injector
adds a job for the current step of a random unfinished run every few hundred milliseconds.
Writes to `memory` and `channel_messages` are slowed (an AFTER trigger sleeps) so that faults
land between a tool's write and its step's commit.

Faults: four kills and four stops in a seeded order, each fired when the work done (tool results
committed) passes a seeded threshold, at a random replica. A kill is SIGKILL, then a restart. A
stop is SIGSTOP for at least the lease plus a margin and until the other replica has taken over
every run the frozen one held, then SIGCONT: the frozen worker wakes up to a lost lease (or a
session Postgres ended for idling in its transaction) and must write nothing. A takeover that
has not happened TAKEOVER_BOUND_S after the hold is a LIVENESS failure (the stop ends then).

The seed: TREADLE_CHAOS_SEED, else a random one; it is printed, with a summary, either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import os
import random
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos import Db, Replica, scalar, write_config
from tests.support.e2e import check_paired, execute, query
from treadle.client import TreadleClient
from treadle.store.runs import JOBS_CHANNEL
from treadle.testing import until

pytestmark = pytest.mark.e2e  # real processes; part of the normal `pytest` run

SEED = int(os.environ.get("TREADLE_CHAOS_SEED") or secrets.randbelow(1_000_000))
N_RUNS = int(os.environ.get("TREADLE_CHAOS_RUNS") or 240)
FAULTS = ["kill"] * 4 + ["stop"] * 4
#: while faults remain, more runs are started whenever fewer than FEED_FLOOR are unfinished (in
#: batches of FEED_BATCH, up to FEED_MAX_FACTOR x N_RUNS parents in all)
FEED_FLOOR = 40
FEED_BATCH = 20
FEED_MAX_FACTOR = 4
DUP_PERCENT = 10  # of the step jobs the replicas enqueue, copied by the trigger
LEASE_S = 2.0
SLOW_WRITE_S = 0.03
#: how long past its hold a stop waits for the other replica to take over (a convoy of frozen step
#: transactions on one hot lock may legitimately take a lease each: workers x lease = 16 s, plus the
#: sweeps and claims behind it)
TAKEOVER_BOUND_S = 30.0
ENV = {
    "TREADLE_LEASE_SECONDS": str(LEASE_S),
    "TREADLE_SWEEP_INTERVAL_SECONDS": "0.25",
    "TREADLE_REQUEUE_AFTER_SECONDS": "2",
    "TREADLE_WORKERS": "8",
    "TREADLE_CHAIN_STEPS": "1",  # every step is a job on the queue, so every step can be duplicated
}
TERMINAL = ("completed", "failed", "cancelled")
PARENT_SCRIPT: list[dict[str, Any]] = [
    {"tool": "Memory", "input": {"op": "incr", "scope": "user", "key": "k1"}},
    {"tool": "Channel", "input": {"op": "publish", "channel": "feed", "value": {"from": "chaos", "n": 1}}},
    {"tool": "Memory", "input": {"op": "incr", "scope": "agent", "key": "total"}},
    {"tool": "Agent", "input": {"op": "spawn", "name": "helper", "prompt": "count once"}},
    {"tool": "Channel", "input": {"op": "publish", "channel": "wire", "value": {"from": "chaos", "n": 2}}},
    {"tool": "Memory", "input": {"op": "incr", "scope": "user", "key": "k2"}},
    {"text": "done"},
]
CHILD_SCRIPT: list[dict[str, Any]] = [
    {"tool": "Memory", "input": {"op": "incr", "scope": "user", "key": "child"}},
    {"text": "child done"},
]
CONFIG: dict[str, Any] = {
    "channels": {
        "feed": {"scope": "user", "semantic": "broadcast"},
        "wire": {"scope": "global", "semantic": "broadcast"},
    },
    "agents": {
        "chaos": {
            "model": "script",
            "tools": ["Memory", "Channel", "Agent"],
            "mock": {"script": PARENT_SCRIPT, "latency_ms": 40, "jitter_ms": 60, "seed": SEED},
        },
        "helper": {
            "model": "script",
            "tools": ["Memory"],
            "mock": {"script": CHILD_SCRIPT, "latency_ms": 40, "jitter_ms": 60, "seed": SEED},
        },
    },
}
TOOL_TURNS = len(PARENT_SCRIPT) - 1
RESULTS_PER_RUN = TOOL_TURNS + len(CHILD_SCRIPT) - 1  # tool results of a parent and its child

# The job log, the duplicating trigger and the slow writes. A job inserted by a replica is an
# 'original'; one inserted by the test's injector (application_name chaos-injector) 'injected';
# one inserted by this trigger a 'copy'. Claimed jobs (deleted by a worker) are logged too.
TRIGGERS = """
CREATE TABLE chaos_job_log (
    id       bigserial PRIMARY KEY,
    op       text NOT NULL,
    kind     text NOT NULL,
    job_id   bigint NOT NULL,
    run_id   text NOT NULL,
    step_no  integer NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX chaos_job_log_step_ix ON chaos_job_log (run_id, step_no);
CREATE FUNCTION chaos_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    k text;
    h bigint;
    first boolean;
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO chaos_job_log (op, kind, job_id, run_id, step_no)
        VALUES ('claim', '', OLD.id, OLD.run_id, OLD.step_no);
        RETURN OLD;
    END IF;
    k := CASE WHEN pg_trigger_depth() > 1 THEN 'copy'
              WHEN current_setting('application_name') = 'chaos-injector' THEN 'injected'
              ELSE 'original' END;
    -- the first job of a step (later ones come from sweeps and wake-ups) is the one copied
    first := k = 'original' AND NOT EXISTS (SELECT 1 FROM chaos_job_log l WHERE l.run_id = NEW.run_id
                                            AND l.step_no = NEW.step_no AND l.kind = 'original');
    INSERT INTO chaos_job_log (op, kind, job_id, run_id, step_no) VALUES ('insert', k, NEW.id, NEW.run_id, NEW.step_no);
    h := abs(hashtext(NEW.run_id || ':' || NEW.step_no || ':{seed}')::bigint);
    IF first AND h % 100 < {dup_percent} THEN
        INSERT INTO jobs (tenant_id, run_id, step_no, run_at)
        VALUES (NEW.tenant_id, NEW.run_id, NEW.step_no,
                NEW.run_at + CASE WHEN h % 2 = 0 THEN interval '0' ELSE make_interval(secs => (h % 1500) / 1000.0) END);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_jobs_insert AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION chaos_jobs();
CREATE TRIGGER chaos_jobs_delete AFTER DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION chaos_jobs();

CREATE FUNCTION chaos_slow_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep({slow});
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_slow_memory AFTER INSERT OR UPDATE ON memory
    FOR EACH ROW EXECUTE FUNCTION chaos_slow_write();
CREATE TRIGGER chaos_slow_channel AFTER INSERT ON channel_messages
    FOR EACH ROW EXECUTE FUNCTION chaos_slow_write();
"""


@pytest.fixture
def chaos_db(migrated_db_url: str) -> str:
    return migrated_db_url


# -- the chaos -----------------------------------------------------------------------------------------


def owned_by(pid: int) -> str:
    """A SQL condition: the run is leased by a worker of process `pid` (owner host:pid:rand:n)."""
    return f"lease_owner ~ ':{int(pid)}:[0-9a-f]+:[0-9]+$'"


class Chaos:
    def __init__(self, url: str, replicas: list[Replica], rng: random.Random) -> None:
        self.url = url
        self.replicas = replicas
        self.rng = rng
        self.faults: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self.db = Db(url)  # one connection for all the polling
        #: replicas killed or stopped right now; a fault is injected under `gate`, so the feeder
        #: (which starts runs under it too) never sends a start to a replica about to go down
        self.down: set[str] = set()
        self.gate = asyncio.Lock()

    async def progress(self) -> int:
        return await self.db.scalar("SELECT count(*) FROM events WHERE type = 'tool_result'")

    async def unfinished(self) -> int:
        return await self.db.scalar(f"SELECT count(*) FROM runs WHERE status NOT IN {TERMINAL}")

    async def leases_of(self, pid: int) -> list[dict[str, Any]]:
        return await self.db.query(
            f"SELECT id, step_no, status, lease_owner FROM runs WHERE {owned_by(pid)} AND lease_until > now()"
        )

    async def run_faults(self, thresholds: list[int]) -> None:
        kinds = list(FAULTS)
        self.rng.shuffle(kinds)
        for kind, threshold in zip(kinds, thresholds, strict=True):
            victim = self.rng.choice(self.replicas)
            hold = LEASE_S + self.rng.uniform(0.5, 1.5)  # drawn for every fault: the plan is the seed's

            async def reached(t: int = threshold) -> bool:
                return await self.progress() >= t or await self.unfinished() == 0

            await until(reached, timeout=90, interval=0.05, what=f"{threshold} tool results")
            if await self.unfinished() == 0:  # a long takeover let the work finish first
                self.faults.append({"kind": kind, "skipped": "every run had ended", "threshold": threshold})
                print(f"[chaos] {self.faults[-1]}")
            elif kind == "kill":
                await self.kill(victim, threshold)
            else:
                await self.stop(victim, threshold, hold)

    async def kill(self, victim: Replica, threshold: int) -> None:
        assert victim.pid is not None
        pid = victim.pid
        async with self.gate:
            self.down.add(victim.name)
            victim.kill9()
        held = await self.leases_of(pid)  # the dead cannot renew: what they held is what they had
        fault = {"kind": "kill", "replica": victim.name, "pid": pid, "at_s": round(time.monotonic() - self.t0, 1),
                 "threshold": threshold, "results": await self.progress(), "unfinished": await self.unfinished(),
                 "leases_held": len(held)}
        self.faults.append(fault)
        print(f"[chaos] {fault}")
        await victim.restart()
        self.down.discard(victim.name)

    async def stop(self, victim: Replica, threshold: int, hold: float) -> None:
        """SIGSTOP, then SIGCONT once `hold` has passed and no run the frozen replica held is
        still its — or once TAKEOVER_BOUND_S more have passed (then the fault says
        taken_over: False, a liveness problem the checks report)."""
        assert victim.pid is not None
        pid = victim.pid
        async with self.gate:
            self.down.add(victim.name)
            victim.sigstop()
        stopped_at = time.monotonic()
        held = await self.leases_of(pid)
        fault: dict[str, Any] = {
            "kind": "stop", "replica": victim.name, "pid": pid, "at_s": round(stopped_at - self.t0, 1),
            "threshold": threshold, "results": await self.progress(), "unfinished": await self.unfinished(),
            "leases_held": len(held),
        }
        held_steps = {(r["id"], r["step_no"]) for r in held}
        holders: dict[int, dict[str, Any]] = {}

        async def taken_over() -> bool:
            if not held_steps:
                return True
            rows = await self.db.query(f"SELECT id, step_no FROM runs WHERE {owned_by(pid)} AND id = ANY(%s)",
                                       ([r for r, _ in held_steps],))
            return not any((r["id"], r["step_no"]) in held_steps for r in rows)

        try:
            while True:
                elapsed = time.monotonic() - stopped_at
                for h in await self.frozen_holders():
                    holders[h["pid"]] = h  # the latest sighting: the longest idle time
                if elapsed >= hold and await taken_over():
                    fault["taken_over"] = True
                    break
                if elapsed > hold + 3.0 and "slow_takeover" not in fault:
                    fault["slow_takeover"] = await self.blockers()
                if elapsed > hold + TAKEOVER_BOUND_S:
                    fault["taken_over"] = False
                    fault["blockers"] = await self.blockers()
                    break
                await asyncio.sleep(0.1)
        finally:
            fault["stopped_s"] = round(time.monotonic() - stopped_at, 2)
            if holders:
                fault["frozen_holders"] = list(holders.values())
            self.faults.append(fault)
            print(f"[chaos] {fault}")
            victim.sigcont()
            self.down.discard(victim.name)

    async def frozen_holders(self) -> list[dict[str, Any]]:
        """Sessions idle in a transaction for longer than the lease while another session waits
        on them. Postgres ends a step transaction idle for a lease (StepStore.transaction), so
        these are other transactions of a frozen process — nothing bounds how long they block."""
        rows = await self.db.query(
            "SELECT a.pid, round(extract(epoch FROM now() - a.state_change)::numeric, 1) AS idle_s,"
            " left(a.query, 90) AS query,"
            " (SELECT count(*) FROM pg_stat_activity b WHERE a.pid = ANY(pg_blocking_pids(b.pid))) AS blocks"
            " FROM pg_stat_activity a WHERE a.datname = current_database() AND a.state = 'idle in transaction'"
            " AND a.state_change < now() - make_interval(secs => %s)",
            (LEASE_S + 1.0,),
        )
        return [{"pid": r["pid"], "idle_s": float(r["idle_s"]), "blocks": int(r["blocks"]),
                 "query": " ".join(r["query"].split())} for r in rows if r["blocks"] > 0]

    async def blockers(self) -> dict[str, Any]:
        """Who waits on whom in this database (for a takeover that takes long), and the advisory
        locks of sessions idle in a transaction."""
        activity = await self.db.query(
            "SELECT pid, application_name AS app, state, wait_event_type AS wtype, wait_event AS wait,"
            " pg_blocking_pids(pid) AS blocked_by, round(extract(epoch FROM now() - xact_start)::numeric, 2) AS xact_s,"
            " left(query, 160) AS query FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND (state <> 'idle' OR cardinality(pg_blocking_pids(pid)) > 0)",
        )
        advisory = await self.db.query(
            "SELECT l.pid, l.objid, a.state FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND a.datname = current_database()"
        )
        return {
            "waiting": dict(Counter(f"{a['wtype']}:{a['wait']}" for a in activity if a["state"] == "active")),
            "idle_in_transaction": [
                {"pid": a["pid"], "xact_s": float(a["xact_s"] or 0), "query": " ".join(a["query"].split())[:90],
                 "blocks": sum(1 for b in activity if a["pid"] in b["blocked_by"]),
                 "advisory": [int(x["objid"]) for x in advisory if x["pid"] == a["pid"]]}
                for a in activity if a["state"] == "idle in transaction"
            ],
        }

    async def inject(self, stop: asyncio.Event) -> None:
        """Every 0.1-0.5 s, a job for the current step of a random unfinished run (its own
        connection, application_name chaos-injector, so the job log tells these apart). Its own
        RNG stream: how many it injects depends on timing, the faults' draws must not."""
        rng = random.Random(f"{SEED}:injector")
        async with Db(self.url, application_name="chaos-injector") as db:
            while not stop.is_set():
                rows = await db.query(f"SELECT id FROM runs WHERE status NOT IN {TERMINAL} ORDER BY id")
                ids = [r["id"] for r in rows]
                if ids:
                    await db.query("INSERT INTO jobs (tenant_id, run_id, step_no) SELECT tenant_id, id, step_no"
                                   " FROM runs WHERE id = %s", (rng.choice(ids),))
                    await db.query(f"SELECT pg_notify('{JOBS_CHANNEL}', '')")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), rng.uniform(0.1, 0.5))


# -- what the database says ----------------------------------------------------------------------------


async def observe(url: str) -> dict[str, Any]:
    runs = await query(url, "SELECT id, agent, user_id, parent_run_id, status, stop_reason, error, step_no,"
                            " last_seq, iterations, lease_owner FROM runs")
    events: dict[str, list[dict[str, Any]]] = {r["id"]: [] for r in runs}
    for e in await query(url, "SELECT run_id, seq, type, payload, tool_use_id FROM events ORDER BY run_id, seq"):
        events.setdefault(e["run_id"], []).append(
            {"seq": e["seq"], "type": e["type"], "_tuid": e["tool_use_id"], **e["payload"]}
        )
    return {
        "runs": runs,
        "events": events,
        "memory": await query(url, "SELECT scope, scope_id, key, value FROM memory ORDER BY scope, scope_id, key"),
        "messages": await query(url, "SELECT id, channel, scope_id, payload FROM channel_messages ORDER BY id"),
        "job_log": await query(url, "SELECT op, kind, job_id, run_id, step_no FROM chaos_job_log ORDER BY id"),
        "jobs_left": await query(url, "SELECT id, run_id, step_no, run_at FROM jobs"),
    }


def expected_parent_types() -> list[str]:
    types = ["user_input", "started"]
    for turn in PARENT_SCRIPT[:-1]:
        types += ["tool_call", "usage"]
        if turn["tool"] == "Channel":
            types.append("channel_publish")
        if turn["tool"] == "Agent":
            types.append("spawn_child_result")  # tool_parked records are counted apart
        types.append("tool_result")
    return [*types, "text", "usage", "done"]


def expected_child_types() -> list[str]:
    return ["user_input", "started", "tool_call", "usage", "tool_result", "text", "usage", "done"]


def result_json(e: dict[str, Any]) -> Any:
    try:
        return json.loads(e["text"])
    except (KeyError, ValueError):
        return None


def find_problems(obs: dict[str, Any], parent_ids: list[str]) -> tuple[list[str], set[str], dict[str, int]]:
    """Every check of the final state. Returns (problems, the runs they concern, counts of what
    was checked)."""
    problems: list[str] = []
    bad: set[str] = set()
    checked = Counter[str]()

    def problem(run_id: str | None, text: str) -> None:
        problems.append(text)
        if run_id:
            bad.add(run_id)

    runs = {r["id"]: r for r in obs["runs"]}
    events: dict[str, list[dict[str, Any]]] = obs["events"]
    parents = [r for r in obs["runs"] if r["agent"] == "chaos"]
    children = [r for r in obs["runs"] if r["agent"] == "helper"]
    if sorted(r["id"] for r in parents) != sorted(parent_ids):
        problems.append(f"parent runs in the database {len(parents)} != started {len(parent_ids)}")
    kids_of: dict[str, list[dict[str, Any]]] = {}
    for c in children:
        kids_of.setdefault(c["parent_run_id"], []).append(c)
    for pid, kids in kids_of.items():
        if pid not in runs:
            problem(pid, f"child runs {[k['id'] for k in kids]} of an unknown parent {pid}")
    if len(obs["runs"]) != len(parents) + len(children):
        problems.append(f"runs of other agents: {[r for r in obs['runs'] if r['agent'] not in ('chaos', 'helper')]}")

    # -- every run completed, with a whole, paired transcript ----------------------------------------
    for run in obs["runs"]:
        rid, evs = run["id"], events.get(run["id"], [])
        checked["runs"] += 1
        if (run["status"], run["stop_reason"]) != ("completed", "end_turn"):
            problem(rid, f"{rid}: {run['status']}/{run['stop_reason']} error={run['error']}")
        if run["lease_owner"] is not None:
            problem(rid, f"{rid}: still leased by {run['lease_owner']}")
        seqs = [e["seq"] for e in evs]
        if seqs != list(range(1, len(evs) + 1)) or run["last_seq"] != len(evs):
            problem(rid, f"{rid}: transcript seqs {seqs} (last_seq {run['last_seq']})")
        for p in check_paired(evs):
            problem(rid, f"{rid}: {p}")
        for e in evs:
            if e["type"] == "tool_result":
                checked["tool_results"] += 1
                if e["is_error"]:
                    problem(rid, f"{rid}: tool_result seq {e['seq']} is an error: {e['text']}")
                if e["_tuid"] != e["tool_use"]["id"]:
                    problem(rid, f"{rid}: tool_result seq {e['seq']} keyed {e['_tuid']}")
        types = [e["type"] for e in evs if e["type"] != "tool_parked"]
        want = expected_parent_types() if run["agent"] == "chaos" else expected_child_types()
        if types != want:
            problem(rid, f"{rid}: event types {types}, want {want}")
        want_iterations = len(PARENT_SCRIPT) if run["agent"] == "chaos" else len(CHILD_SCRIPT)
        if run["iterations"] != want_iterations:
            problem(rid, f"{rid}: iterations {run['iterations']} != {want_iterations}")

    def results(rid: str, tool: str, **match: Any) -> list[tuple[dict[str, Any], Any]]:
        return [(e, result_json(e)) for e in events.get(rid, []) if e["type"] == "tool_result"
                and e["tool_use"]["name"] == tool
                and all(e["tool_use"]["input"].get(k) == v for k, v in match.items())]

    # -- effects: every counter exactly once, and the transcript says what the row holds ---------------
    memory = {(m["scope"], m["scope_id"], m["key"]): m["value"] for m in obs["memory"]}
    expected_memory: dict[tuple[str, str, str], int] = {("agent", "chaos", "total"): len(parents)}
    totals_seen: list[Any] = []
    feed: dict[str, Any] = {}
    for m in obs["messages"]:
        if m["channel"] == "feed":
            feed.setdefault(m["scope_id"], []).append(m)
    wire = [m for m in obs["messages"] if m["channel"] == "wire"]
    wire_ids_seen: list[Any] = []
    for run in parents:
        rid, user = run["id"], run["user_id"]
        for key in ("k1", "k2", "child"):
            expected_memory[("user", user, key)] = 1
        # user counters k1, k2: the transcript's value is 1
        for key in ("k1", "k2"):
            got = results(rid, "Memory", key=key)
            checked["incr_results"] += len(got)
            if [r for _, r in got] != [{"key": key, "value": 1}]:
                problem(rid, f"{rid}: Memory.incr {key} results {[r for _, r in got]}, want one with value 1")
        totals_seen += [r.get("value") if isinstance(r, dict) else r for _, r in results(rid, "Memory", key="total")]
        # the user-scoped publish: one message in the user's stream, the one the transcript names
        got = results(rid, "Channel", channel="feed")
        rows = feed.get(user, [])
        checked["publishes"] += 1
        published = [e["channel"]["message_id"] for e in events.get(rid, []) if e["type"] == "channel_publish"
                     and e["channel"]["channel"] == "feed"]
        if len(rows) != 1 or len(got) != 1 or published != [rows[0]["id"]] or got[0][1] != {
            "channel": "feed", "dropped_oldest": 0, "message_id": rows[0]["id"], "scope": "user", "scope_id": user
        }:
            problem(rid, f"{rid}: feed messages of {user} {rows}; transcript results {[r for _, r in got]},"
                         f" channel_publish ids {published}")
        # the global publish: its id, once
        got = results(rid, "Channel", channel="wire")
        wire_ids_seen += [r.get("message_id") if isinstance(r, dict) else r for _, r in got]
        # the spawn: exactly one child, the one the transcript names, which counted once
        kids = kids_of.get(rid, [])
        got = results(rid, "Agent")
        checked["spawns"] += 1
        if len(kids) != 1:
            problem(rid, f"{rid}: {len(kids)} child runs {[k['id'] for k in kids]}")
        elif [r for _, r in got] != [{"agent": "helper", "index": 0, "ok": True, "output": "child done",
                                      "run_id": kids[0]["id"], "stop_reason": "end_turn"}]:
            problem(rid, f"{rid}: spawn results {[r for _, r in got]}, child {kids[0]['id']}")
        for kid in kids:
            if kid["user_id"] != user:
                problem(rid, f"{rid}: child {kid['id']} has user {kid['user_id']}")
            got = results(kid["id"], "Memory", key="child")
            checked["incr_results"] += len(got)
            if [r for _, r in got] != [{"key": "child", "value": 1}]:
                problem(rid, f"{rid}: child {kid['id']} Memory.incr child results {[r for _, r in got]}")
                bad.add(kid["id"])

    for k in sorted(expected_memory.keys() | memory.keys()):
        checked["counters"] += 1
        if memory.get(k) != expected_memory.get(k):
            owner = next((r["id"] for r in parents if k[0] == "user" and r["user_id"] == k[1]), None)
            problem(owner, f"EXACTLY-ONCE: memory {k} = {memory.get(k)!r}, want {expected_memory.get(k)!r}")
    if sorted(totals_seen, key=str) != sorted(range(1, len(parents) + 1), key=str):
        dup = sorted(v for v, n in Counter(totals_seen).items() if n > 1)
        missing = sorted(set(range(1, len(parents) + 1)) - set(totals_seen))
        problems.append(f"EXACTLY-ONCE: agent counter values seen by transcripts: {len(totals_seen)} values,"
                        f" repeated {dup}, missing {missing} (the row holds {memory.get(('agent', 'chaos', 'total'))})")
        bad.update(r["id"] for r in parents
                   if any((res or {}).get("value") in dup for _, res in results(r["id"], "Memory", key="total")))
    checked["publishes"] += len(wire_ids_seen)
    if len(wire) != len(parents) or sorted(wire_ids_seen, key=str) != sorted((m["id"] for m in wire), key=str):
        named = Counter(wire_ids_seen)
        problems.append(f"EXACTLY-ONCE: {len(wire)} messages in 'wire' for {len(parents)} runs; ids named twice"
                        f" {[i for i, n in named.items() if n > 1]}; rows no transcript names"
                        f" {[m for m in wire if m['id'] not in named]}")
    for user, rows in feed.items():
        if not any(r["user_id"] == user for r in parents):
            problems.append(f"feed messages of an unknown user {user}: {rows}")

    # -- the queue: every job was consumed --------------------------------------------------------------
    inserted = {r["job_id"] for r in obs["job_log"] if r["op"] == "insert"}
    claimed = {r["job_id"] for r in obs["job_log"] if r["op"] == "claim"}
    if obs["jobs_left"] or inserted != claimed:
        problems.append(f"jobs left {obs['jobs_left']}; inserted but never claimed {sorted(inserted - claimed)}")
    return problems, bad, dict(checked)


def transcript_dump(obs: dict[str, Any], run_id: str) -> str:
    lines = [f"  run {run_id}: {next((r for r in obs['runs'] if r['id'] == run_id), None)}"]
    for e in obs["events"].get(run_id, []):
        body = {k: v for k, v in e.items() if k not in ("seq", "type", "_tuid")}
        lines.append(f"    {e['seq']:>3} {e['type']:<18} {json.dumps(body, sort_keys=True, default=str)[:400]}")
    user = next((r["user_id"] for r in obs["runs"] if r["id"] == run_id), None)
    lines += [f"    memory {m}" for m in obs["memory"] if m["scope_id"] == user]
    lines += [f"    message {m}" for m in obs["messages"] if m["scope_id"] == user]
    return "\n".join(lines)


def self_check(obs: dict[str, Any], parent_ids: list[str]) -> None:
    """The checks can fail: doctored copies of the real final state (one counter incremented
    twice, one transcript that disagrees with its row, one extra publish, one unanswered call)
    must each be reported."""
    parent = next(r for r in obs["runs"] if r["agent"] == "chaos")
    user = parent["user_id"]
    doctored = []

    twice = copy.deepcopy(obs)
    next(m for m in twice["memory"] if m["scope_id"] == user and m["key"] == "k1")["value"] = 2
    doctored.append(("a counter incremented twice", twice))

    says_two = copy.deepcopy(obs)
    res = next(e for e in says_two["events"][parent["id"]] if e["type"] == "tool_result"
               and e["tool_use"]["input"].get("key") == "k2")
    res["text"] = json.dumps({"key": "k2", "value": 2})
    doctored.append(("a transcript that disagrees with its counter", says_two))

    extra = copy.deepcopy(obs)
    extra["messages"].append({**next(m for m in extra["messages"] if m["channel"] == "wire"), "id": 10**9})
    doctored.append(("a publish applied twice", extra))

    unanswered = copy.deepcopy(obs)
    evs = unanswered["events"][parent["id"]]
    evs.remove(next(e for e in evs if e["type"] == "tool_result"))
    doctored.append(("a tool_call without its result", unanswered))

    for what, doc in doctored:
        found, _, _ = find_problems(doc, parent_ids)
        assert found, f"the checks missed {what}"


# -- the test --------------------------------------------------------------------------------------------


async def test_exactly_once_under_kills_stops_and_duplicates(chaos_db: str, tmp_path: Path) -> None:
    url = chaos_db
    t_start = time.monotonic()
    rng = random.Random(SEED)
    print(f"\n[chaos] seed {SEED} (reproduce: TREADLE_CHAOS_SEED={SEED}), {N_RUNS} runs, faults {FAULTS}")
    await execute(url, TRIGGERS.replace("{seed}", str(SEED)).replace("{dup_percent}", str(DUP_PERCENT))
                  .replace("{slow}", str(SLOW_WRITE_S)))
    config = write_config(tmp_path / "treadle.yaml", CONFIG)
    replicas = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        replicas.append(Replica(name=name, database_url=url, config_path=config, workdir=tmp_path / name, env=ENV))
    chaos = Chaos(url, replicas, rng)
    stop_injecting = asyncio.Event()
    injector: asyncio.Task[None] | None = None
    try:
        for r in replicas:
            r.start()
        await asyncio.gather(*(r.wait_ready() for r in replicas))

        # -- a few hundred runs, started through both replicas ---------------------------------------
        async with TreadleClient(replicas[0].url, timeout=30) as ca, TreadleClient(replicas[1].url, timeout=30) as cb:
            sem = asyncio.Semaphore(16)
            parent_ids: list[str] = []

            async def start(i: int, client: TreadleClient | None = None) -> None:
                async with sem:
                    run = await (client or (ca if i % 2 == 0 else cb)).start_run(
                        "chaos", f"chaos run {i}", user_id=f"u{i:04d}")
                    parent_ids.append(str(run["run_id"]))

            await asyncio.gather(*(start(i) for i in range(N_RUNS)))
            chaos.t0 = time.monotonic()
            total = N_RUNS * RESULTS_PER_RUN
            # one threshold per fault, each in its own slice of 3 %..85 % of the work
            edges = [0.03 + (0.85 - 0.03) * i / len(FAULTS) for i in range(len(FAULTS) + 1)]
            thresholds = [int(total * rng.uniform(lo, hi)) for lo, hi in itertools.pairwise(edges)]
            faults_done = asyncio.Event()

            async def feed() -> None:
                """Runs finish faster than faults take (a stop lasts its lease and a takeover): while
                faults remain, keep FEED_FLOOR runs unfinished so that every fault hits live work."""
                async with Db(url, application_name="chaos-feeder") as db:  # its own: chaos.db is the faults'
                    while not faults_done.is_set() and len(parent_ids) < N_RUNS * FEED_MAX_FACTOR:
                        if await db.scalar(f"SELECT count(*) FROM runs WHERE status NOT IN {TERMINAL}") < FEED_FLOOR:
                            # through a replica that stays up while it answers (on its port of this start)
                            async with chaos.gate:
                                up = next(r for r in replicas if r.name not in chaos.down)
                                async with TreadleClient(up.url, timeout=30) as client:
                                    base = len(parent_ids)
                                    await asyncio.gather(*(start(base + i, client) for i in range(FEED_BATCH)))
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(faults_done.wait(), 0.1)

            injector = asyncio.create_task(chaos.inject(stop_injecting))
            feeder = asyncio.create_task(feed())

            async def all_terminal() -> bool:
                return await chaos.unfinished() == 0

            try:
                await chaos.run_faults(thresholds)
                faults_done.set()
                await feeder
                t_faults = time.monotonic()
                await until(all_terminal, timeout=90, interval=0.25, what="every run to end (90 s after the faults)")
            except TimeoutError as exc:  # liveness: the work stopped moving
                stuck = await query(url, "SELECT id, agent, status, step_no, lease_owner, lease_until, updated_at"
                                         f" FROM runs WHERE status NOT IN {TERMINAL} ORDER BY id LIMIT 20")
                raise AssertionError(
                    f"seed {SEED} (TREADLE_CHAOS_SEED={SEED}): {exc}\nunfinished runs (first 20): {stuck}\n"
                    f"blockers: {await chaos.blockers()}\nfaults: {chaos.faults}\n"
                    + "\n".join(r.log_tail(3000) for r in replicas)
                ) from None
            finally:
                faults_done.set()
                if not feeder.done():
                    feeder.cancel()
        t_done = time.monotonic()
        stop_injecting.set()
        await injector

        async def queue_drained() -> bool:
            return await scalar(url, "SELECT count(*) FROM jobs") == 0

        await until(queue_drained, timeout=20, interval=0.1, what="the job queue to drain")
        obs = await observe(url)
    finally:
        stop_injecting.set()
        if injector is not None and not injector.done():
            injector.cancel()
        for r in replicas:
            r.stop()
        await chaos.db.close()

    # -- checks ------------------------------------------------------------------------------------------
    problems, bad, checked = find_problems(obs, parent_ids)
    landed = [f for f in chaos.faults if "skipped" not in f]
    for f in landed:
        if f["kind"] == "stop" and not f["taken_over"]:
            problems.insert(0, f"LIVENESS: replica {f['replica']} (pid {f['pid']}) frozen at {f['at_s']} s: the runs it"
                               f" held were not taken over within {TAKEOVER_BOUND_S} s past the lease; blockers:"
                               f" {json.dumps(f.get('blockers'), default=str)}")
    holders = [h for f in landed for h in f.get("frozen_holders", [])]
    log = obs["job_log"]
    inserted = Counter(r["kind"] for r in log if r["op"] == "insert")
    first_jobs = len({(r["run_id"], r["step_no"]) for r in log if r["op"] == "insert" and r["kind"] == "original"})
    steps = sum(r["step_no"] for r in obs["runs"])
    parks = Counter(sum(1 for e in evs if e["type"] == "tool_parked") for evs in obs["events"].values())
    lease_lost = sum(len(r.log_grep("lease lost")) for r in replicas)
    crashed = sum(len(r.log_grep("crashed")) for r in replicas)
    summary = {
        "seed": SEED,
        "runs": len(obs["runs"]),
        "parents": len(parent_ids),
        "steps": steps,
        "jobs_original": inserted["original"],
        "jobs_reenqueued": inserted["original"] - first_jobs,  # by sweeps and wake-ups
        "duplicates_copied": inserted["copy"],
        "duplicates_injected": inserted["injected"],
        "jobs_claimed": sum(1 for r in log if r["op"] == "claim"),
        "kills": sum(1 for f in landed if f["kind"] == "kill"),
        "stops": sum(1 for f in landed if f["kind"] == "stop"),
        "faults_skipped": len(chaos.faults) - len(landed),
        "leases_held_by_victims": sum(f["leases_held"] for f in landed),
        "takeover_s": [f["stopped_s"] for f in landed if f["kind"] == "stop"],
        "frozen_holders_past_lease": len(holders),
        "replica_starts": {r.name: r.starts for r in replicas},
        "lease_lost_log_lines": lease_lost,
        "step_crashed_log_lines": crashed,
        "tool_parked_per_run": dict(sorted(parks.items())),
        "effects_checked": checked,
        "seconds": {"total": round(time.monotonic() - t_start, 1), "faults": round(t_faults - chaos.t0, 1),
                    "drain_after_faults": round(t_done - t_faults, 1)},
    }
    print(f"[chaos] summary {json.dumps(summary)}")
    for h in holders:  # see test_frozen_transaction.py: nothing ends these, and they stall the sweeper
        print(f"[chaos] WARNING a frozen replica's transaction stayed open past the lease, blocking others: {h}")
    if problems:
        shown = sorted(bad)[:5]
        raise AssertionError(
            f"seed {SEED} (TREADLE_CHAOS_SEED={SEED}): {len(problems)} problem(s)\n"
            + "\n".join(problems[:60])
            + f"\n\nfaults: {json.dumps(chaos.faults, default=str)}\nsummary: {json.dumps(summary)}"
            + "\n\noffending runs:\n"
            + "\n".join(transcript_dump(obs, rid) for rid in shown)
            + "\n\nlogs: "
            + ", ".join(str(p) for r in replicas for p in r.logs)
        )

    # the chaos really happened: all but at most one fault of each kind hit unfinished work (a long
    # takeover can let the work finish before the last one), and faults of both kinds hit held leases
    for kind in set(FAULTS):
        hit = [f for f in landed if f["kind"] == kind and f["unfinished"] > 0]
        assert len(hit) >= FAULTS.count(kind) - 1, f"only {len(hit)} {kind}s hit unfinished work: {chaos.faults}"
        assert sum(f["leases_held"] for f in hit) > 0, f"no {kind} hit a replica holding a lease: {chaos.faults}"
    assert first_jobs * DUP_PERCENT / 100 / 2 <= inserted["copy"] <= first_jobs * DUP_PERCENT / 100 * 2, summary
    assert inserted["injected"] > 0, summary
    self_check(obs, parent_ids)
