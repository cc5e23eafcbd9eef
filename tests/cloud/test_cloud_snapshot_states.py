"""Snapshots between the shapes at scale (issue 36's done-when): a sidecar with 54 runs in every
state — ended, queued, mid-way, parked on a channel, on a question, on an application tool, a
parent parked on its child (and the child queued) — and a ScheduleDef, exported; the export holds
no secret value of the source (checked against a real `pg_dump` of it: the sealed tenant
credential and the parked runs' sealed credentials are in the dump, none is in the export, nor
any plaintext); restored
into the local cloud (the api function, moto SQS, two worker environments, every batch delivered
twice, real Postgres), where the schedule gets its EventBridge schedule at once and every run
finishes — each parked one once its channel, question or tool is answered through the api
function — with each Memory increment once; then a snapshot of the cloud with runs queued and
parked there restores back into a sidecar, where they finish too."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, envs, events_of, start_run
from tests.cloud.test_cloud_snapshots import back_db
from tests.mcp.test_tenant_credentials import deployment_key
from tests.support.e2e import check_paired, query
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.localcloud import A2A_CARDS, AGENTS
from tests.support.tenancy import api as sidecar_api
from tests.support.waiting import answer, scripted, spawner, start, status
from treadle.mcp.credentials import seal_credentials

__all__ = ["back_db", "deployment_key", "envs"]  # fixtures, shared

SECRET = "sk-live-tenant-credential-0123456789SECRET"
RUN_SECRET = "Bearer run-credential-9876543210SECRET"
CHANNELS = {"news": {"semantic": "broadcast"}, "alerts": {"semantic": "broadcast"}}
MINE: dict[str, Any] = {
    "listener": scripted([{"tool": "Channel", "input": {"op": "subscribe", "channel": "news", "wait_ms": 600_000}},
                          {"text": "got the news"}], ["Channel"]),
    # the runs parked in the cloud that go back (a new subscriber of `news` would read its message)
    "pager": scripted([{"tool": "Channel", "input": {"op": "subscribe", "channel": "alerts", "wait_ms": 600_000}},
                       {"text": "paged"}], ["Channel"]),
    "boss": spawner([{"name": "echo", "prompt": "child"}]),
}
TOOL = {"name": "lookup_order", "input_schema": {"type": "object"}}
GROUP = "treadle-snapshot-states"
ROLE = "arn:aws:iam::123456789012:role/treadle-scheduler"
TARGET = "arn:aws:lambda:us-east-1:123456789012:function:treadle-scheduler"
PER_STATE = {"ended": 8, "queued": 8, "midway": 8, "channel": 6, "question": 6, "app_tool": 6, "parent": 6}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local cloud's treadle.yaml, with this module's agents and channel."""
    path = tmp_path_factory.mktemp("cloudcfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({"agents": {**AGENTS, **MINE}, "a2a_server_cards": A2A_CARDS,
                                    "channels": CHANNELS}))
    return path


@pytest.fixture
def eventbridge(aws: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """EventBridge Scheduler on moto, its variables set as the CDK construct sets them on the api
    function."""
    import boto3

    client = boto3.client("scheduler")
    names = [g["Name"] for g in client.list_schedule_groups()["ScheduleGroups"]]
    if GROUP not in names:
        client.create_schedule_group(Name=GROUP)
    for k, v in (("TREADLE_SCHEDULE_GROUP", GROUP), ("TREADLE_SCHEDULER_ROLE_ARN", ROLE),
                 ("TREADLE_SCHEDULER_TARGET_ARN", TARGET)):
        monkeypatch.setenv(k, v)
    yield client


def pg_dump(url: str) -> str:
    """A real pg_dump of the database's data: the embedded server's own binary for a PG 16+ server
    (the machine's PG 15 tool refuses a newer server), the machine's for its own server."""
    import pgserver

    [(version,)] = _db(url, "SHOW server_version_num")
    binary = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
    if int(version) < 160000:
        binary = Path("/usr/bin/pg_dump")
    out = subprocess.run([str(binary), "--data-only", "--no-owner", "-d", url], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
    assert out.returncode == 0, out.stderr
    return out.stdout


async def sidecar_with_every_state(rt: Any, disp: Any) -> dict[str, list[str]]:
    runs: dict[str, list[str]] = {k: [] for k in PER_STATE}
    sealed = seal_credentials("default", {"vault": RUN_SECRET})
    for _ in range(PER_STATE["ended"]):
        runs["ended"].append(await start(rt, "calc"))
    for _ in range(PER_STATE["channel"]):  # with per-run credentials (a run's end forgets them)
        runs["channel"].append(await start(rt, "listener", sealed_credentials=sealed))
    for _ in range(PER_STATE["question"]):
        runs["question"].append(await start(rt, "asker"))
    for _ in range(PER_STATE["app_tool"]):
        runs["app_tool"].append(await start(rt, "shopper", client_tools=[TOOL]))
    await disp.drain()  # ended, or parked on their channel, question or tool
    for _ in range(PER_STATE["parent"]):
        runs["parent"].append(await start(rt, "boss"))
        await rt.engine.handle(disp.queue.pop(0))  # spawns its child and parks on it
        disp.queue.clear()  # the child stays queued
    for _ in range(PER_STATE["midway"]):
        runs["midway"].append(await start(rt, "calc"))
        await rt.engine.handle(disp.queue.pop(0))  # one iteration; the next is due
        disp.queue.clear()
    for _ in range(PER_STATE["queued"]):
        runs["queued"].append(await start(rt, "calc"))
        disp.queue.clear()
    want = {"ended": "completed", "queued": "queued", "midway": "running", "channel": "waiting",
            "question": "waiting", "app_tool": "waiting", "parent": "waiting"}
    for kind, ids in runs.items():
        assert {await status(rt, r) for r in ids} == {want[kind]}, kind
    children = await query(rt.database_url, "SELECT id, status FROM runs WHERE parent_run_id = ANY(%s)",
                           (runs["parent"],))
    assert len(children) == PER_STATE["parent"] and {c["status"] for c in children} == {"queued"}
    runs["child"] = [c["id"] for c in children]
    return runs


def _db(db: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


def answer_everything_in_the_cloud(api: LambdaEnv, db: str, runs: dict[str, list[str]]) -> None:
    """Each parked run's answer, through the api function."""
    code, out, _ = call(api, "POST", "/v1/_channels/news/publish", {"value": {"headline": "restored"}})
    assert code in (200, 201, 202), out
    for run_id in runs.get("question", []):
        [(iid,)] = _db(db, "SELECT id FROM interrupts WHERE run_id = %s AND status = 'pending'", (run_id,))
        code, out, _ = call(api, "POST", f"/v1/runs/{run_id}/interrupts/{iid}/resolve", {"answer": "yes"})
        assert code == 200, out
    for run_id in runs.get("app_tool", []):
        [pending] = [e for e in events_of(api, run_id) if e["type"] == "tool_pending"]
        code, out, _ = call(api, "POST", f"/v1/runs/{run_id}/tool_results",
                            {"tool_use_id": pending["tool_use"]["id"], "content": "shipped"})
        assert code == 200, out


async def test_fifty_runs_in_every_state_go_to_the_cloud_finish_there_and_come_back(
    deployment_key: None,
    back_db: str,
    open_runtime: Any,
    migrated_db_url: str,
    envs: dict[str, LambdaEnv],
    sqs: Any,
    queue: dict[str, str],
    cloud_db: str,
    eventbridge: Any,
) -> None:
    src, disp = await open_runtime({**AGENTS, **MINE}, url=migrated_db_url, config={"channels": CHANNELS})
    runs = await sidecar_with_every_state(src, disp)
    ids = [r for group in runs.values() for r in group]
    assert len(ids) == 54
    async with sidecar_api(src) as c:
        r = await c.post("/v1/_credentialdef",
                         json={"op": "create", "scope": "tenant", "name": "stripe_key", "value": SECRET})
        assert r.status_code == 200, r.text
        r = await c.post("/v1/_scheduledef", json={"op": "create", "name": "nightly", "overlay": {
            "agent": "echo", "schedule": "0 3 * * *", "prompt": "nightly"}})
        assert r.status_code == 200, r.text
        snap = (await c.post("/v1/_snapshots", json={"label": "to the cloud", "include_history": True})).json()
        exported = (await c.get(f"/v1/_snapshots/{snap['id']}/export")).text
    doc_runs = [row["id"] for row in json.loads(exported)["sections"]["runs"]["entries"]]
    assert sorted(doc_runs) == sorted(ids)

    # 0 secret values: what the source's pg_dump holds sealed is not in the export, nor any plaintext
    dump = pg_dump(migrated_db_url)
    sealed = [row["h"] for row in await query(
        migrated_db_url, "SELECT encode(sealed, 'hex') AS h FROM credential_defs"
                         " UNION ALL SELECT encode(sealed, 'hex') FROM run_credentials")]
    assert len(sealed) == 1 + PER_STATE["channel"]
    assert all(h in dump for h in sealed)  # the dump holds them: the check below looks for something real
    assert not [h for h in sealed if h in exported]
    assert SECRET not in exported and RUN_SECRET not in exported
    assert SECRET not in dump and RUN_SECRET not in dump

    # into the cloud: the schedule gets its EventBridge schedule now; every run finishes there
    api = envs["api"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    code, out, _ = call(api, "POST", "/v1/_snapshots/any/restore", {"json": json.loads(exported),
                                                                     "include_history": True})
    assert code == 200, out
    assert out["restored"]["runs"] == 54 and out["schedules_synced"] == 1, out
    [(schedule_id,)] = _db(cloud_db, "SELECT schedule_id FROM schedules WHERE name = 'nightly'")
    remote = eventbridge.get_schedule(Name=f"treadle-{schedule_id}", GroupName=GROUP)
    assert remote["ScheduleExpression"] == "cron(0 3 * * ? *)" and remote["Target"]["Arn"] == TARGET
    parked = runs["channel"] + runs["question"] + runs["app_tool"]
    esm.run_until(lambda: all_terminal(cloud_db, runs["queued"] + runs["midway"] + runs["parent"] + runs["child"]),
                  timeout_s=180)
    assert {s for (s,) in _db(cloud_db, "SELECT status FROM runs WHERE id = ANY(%s)", (parked,))} == {"waiting"}
    answer_everything_in_the_cloud(api, cloud_db, runs)
    esm.run_until(lambda: all_terminal(cloud_db, ids), timeout_s=180)
    assert {s for (s,) in _db(cloud_db, "SELECT status FROM runs WHERE id = ANY(%s)", (ids,))} == {"completed"}
    for run_id in ids:
        events = events_of(api, run_id)
        assert check_paired(events) == [] and [e["type"] for e in events].count("done") == 1, run_id
    calc_runs = runs["ended"] + runs["queued"] + runs["midway"]
    [(calls,)] = _db(cloud_db, "SELECT value FROM memory WHERE key = 'calls' AND scope_id = 'calc'")
    assert calls == 3 * len(calc_runs)  # each increment once: those done in the sidecar came with the snapshot
    texts = {run_id: [e["text"] for e in events_of(api, run_id) if e["type"] == "text"] for run_id in parked}
    assert {t[-1] for t in texts.values()} == {"got the news", "asked", "found it"}

    # and back: runs queued and parked in the cloud, a snapshot of it, restored into a sidecar
    back = {"question": [start_run(api, "asker") for _ in range(2)]}
    back["channel"] = [start_run(api, "pager") for _ in range(2)]
    esm.run_until(lambda: {s for (s,) in _db(cloud_db, "SELECT status FROM runs WHERE id = ANY(%s)",
                                               (back["question"] + back["channel"],))} == {"waiting"}, timeout_s=60)
    back["queued"] = [start_run(api, "calc") for _ in range(3)]  # their messages wait in SQS
    code, csnap, _ = call(api, "POST", "/v1/_snapshots", {"label": "and back"})
    assert code == 201, csnap
    code, cloud_doc, _ = call(api, "GET", f"/v1/_snapshots/{csnap['id']}/export")
    assert code == 200
    moved = sorted(r for group in back.values() for r in group)
    live = sorted(r["id"] for r in cloud_doc["sections"]["runs"]["entries"] if r["status"] != "completed")
    assert live == moved
    dst, ddisp = await open_runtime({**AGENTS, **MINE}, url=back_db, config={"channels": CHANNELS})
    async with sidecar_api(dst) as c:
        r = await c.post("/v1/_snapshots/any/restore", json={"json": cloud_doc})
        assert r.status_code == 200, r.text
        await ddisp.drain()
        for run_id in back["question"]:
            assert await status(dst, run_id) == "waiting"
            await answer(dst, run_id, "yes")
        r = await c.post("/v1/_channels/alerts/publish", json={"value": {"headline": "back home"}})
        assert r.status_code in (200, 201, 202), r.text
        await ddisp.drain()
        for run_id in moved:
            assert await status(dst, run_id) == "completed", run_id
            events = (await c.get(f"/v1/runs/{run_id}/events")).json()["events"]
            assert check_paired(events) == [] and [e["type"] for e in events].count("done") == 1
