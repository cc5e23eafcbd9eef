"""The EventBridge Scheduler adapter against moto (CRUD only: moto never fires a schedule, so the
scheduler handler is invoked directly with the input the schedule would send)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from treadle.triggers.eventbridge import EventBridgeScheduler, schedule_name

GROUP = "treadle-test"
ROLE = "arn:aws:iam::123456789012:role/treadle-scheduler"
TARGET = "arn:aws:lambda:us-east-1:123456789012:function:treadle-scheduler"
NIGHTLY = {"agent": "echo", "schedule": "0 3 * * 1-5", "timezone": "America/New_York", "prompt": "report"}


@pytest.fixture
def scheduler_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    with moto.mock_aws():
        client = boto3.client("scheduler", region_name="us-east-1")
        client.create_schedule_group(Name=GROUP)
        yield client


def remote(client: Any, schedule_id: str) -> dict[str, Any] | None:
    try:
        return dict(client.get_schedule(Name=schedule_name(schedule_id), GroupName=GROUP))
    except client.exceptions.ResourceNotFoundException:
        return None


async def test_schedule_lifecycle_is_mirrored_in_eventbridge(open_rt: Any, scheduler_client: Any) -> None:
    rt, _ = await open_rt()
    rt.triggers.schedules.scheduler = EventBridgeScheduler(scheduler_client, GROUP, ROLE, TARGET)
    svc = rt.triggers.schedules
    created = await svc.family.dispatch("default", {"op": "create", "name": "nightly", "overlay": NIGHTLY})
    sid = created["schedule_id"]
    assert created["schedule"]["synced_state"] == "v1:enabled" and created["schedule"]["sync_error"] is None
    got = remote(scheduler_client, sid)
    assert got is not None
    assert got["ScheduleExpression"] == "cron(0 3 ? * 2-6 *)"
    assert got["ScheduleExpressionTimezone"] == "America/New_York" and got["State"] == "ENABLED"
    assert got["FlexibleTimeWindow"] == {"Mode": "OFF"} and got["Target"]["Arn"] == TARGET
    assert got["Target"]["RoleArn"] == ROLE
    assert json.loads(got["Target"]["Input"]) == {
        "schedule_id": sid, "version": 1, "scheduled_time": "<aws.scheduler.scheduled-time>"
    }

    await svc.family.dispatch("default", {"op": "fork", "name": "nightly", "overlay": {"schedule": "*/30 * * * *"}})
    got = remote(scheduler_client, sid)
    assert got is not None and got["ScheduleExpression"] == "cron(0,30 * * * ? *)"
    assert json.loads(got["Target"]["Input"])["version"] == 2

    await svc.pause("default", sid)
    assert remote(scheduler_client, sid)["State"] == "DISABLED"  # type: ignore[index]
    await svc.resume("default", sid)
    assert remote(scheduler_client, sid)["State"] == "ENABLED"  # type: ignore[index]

    # drift (someone deleted it by hand) is repaired by reconcile
    scheduler_client.delete_schedule(Name=schedule_name(sid), GroupName=GROUP)
    async with rt.pool.connection() as conn:
        await conn.execute("UPDATE schedules SET sync_error = 'gone' WHERE schedule_id = %s", (sid,))
    assert await svc.reconcile() == 1
    assert remote(scheduler_client, sid) is not None
    assert await svc.reconcile() == 0

    await svc.family.dispatch("default", {"op": "retire", "name": "nightly"})
    assert remote(scheduler_client, sid) is None


async def test_sync_failures_are_recorded_and_retried(open_rt: Any, scheduler_client: Any) -> None:
    rt, _ = await open_rt()
    rt.triggers.schedules.scheduler = EventBridgeScheduler(scheduler_client, "no-such-group", ROLE, TARGET)
    svc = rt.triggers.schedules
    created = await svc.family.dispatch("default", {"op": "create", "name": "n", "overlay": NIGHTLY})
    assert created["schedule"]["sync_error"] and created["schedule"]["synced_state"] is None
    rt.triggers.schedules.scheduler = EventBridgeScheduler(scheduler_client, GROUP, ROLE, TARGET)
    assert await svc.reconcile() == 1
    state = await svc.resolve("default", "n")
    assert (state.synced_state, state.sync_error) == ("v1:enabled", None)


async def test_the_handler_fires_by_the_invocations_scheduled_time(open_rt: Any, scheduler_client: Any) -> None:
    rt, _ = await open_rt()
    rt.triggers.schedules.scheduler = EventBridgeScheduler(scheduler_client, GROUP, ROLE, TARGET)
    svc = rt.triggers.schedules
    created = await svc.family.dispatch(
        "default", {"op": "create", "name": "twice", "overlay": {**NIGHTLY, "max_fires": 2, "timezone": "UTC",
                                                                 "schedule": "0 * * * *"}}
    )
    sid = created["schedule_id"]
    template = remote(scheduler_client, sid)["Target"]["Input"]  # type: ignore[index]
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)

    def invocation(at: datetime) -> dict[str, Any]:
        return dict(json.loads(template.replace("<aws.scheduler.scheduled-time>", at.strftime("%Y-%m-%dT%H:%M:%SZ"))))

    first = await svc.firing.fire_event(invocation(now), now=now + timedelta(seconds=2))
    assert first["fired"] and first["scheduled_for"] == now.isoformat()
    run = await rt.runs.get("default", first["run_id"])
    assert run.metadata["schedule_id"] == sid and run.metadata["trigger"] == "schedule:eventbridge"
    assert run.metadata["scheduled_for"] == now.isoformat()
    dup = await svc.firing.fire_event(invocation(now), now=now + timedelta(seconds=40))
    assert (dup["fired"], dup["reason"], dup["run_id"]) == (False, "duplicate", first["run_id"])

    # a late retry after downtime: the default catch_up_max of 1 runs only the newest missed time
    late_now = now + timedelta(hours=3, seconds=30)  # +1 h and +2 h are missed; +3 h is on time
    old = await svc.firing.fire_event(invocation(now + timedelta(hours=1)), now=late_now)
    assert (old["fired"], old["reason"]) == (False, "missed")
    second = await svc.firing.fire_event(invocation(now + timedelta(hours=2)), now=late_now)
    assert second["fired"] and second["retired"]  # max_fires: 2 reached
    # the scheduler function has no scheduler:* permission in the stack; the API's reconcile deletes it
    state = await svc.resolve("default", "twice")
    assert state.status == "retired"
    third = await svc.firing.fire_event(invocation(now + timedelta(hours=3)), now=late_now)
    assert (third["fired"], third["reason"]) == (False, "retired")
    assert remote(scheduler_client, sid) is None  # this runtime has the adapter, so it synced at once

    stale = await svc.firing.fire_event({"schedule_id": "sch_unknown", "scheduled_time": now.isoformat()})
    assert stale["reason"] == "unknown_schedule"
    with pytest.raises(ValueError, match="schedule_id"):
        await svc.firing.fire_event({"detail": {}})


async def test_a_stale_version_invocation_is_ignored(open_rt: Any, scheduler_client: Any) -> None:
    rt, _ = await open_rt()
    svc = rt.triggers.schedules
    created = await svc.family.dispatch("default", {"op": "create", "name": "v", "overlay": {
        **NIGHTLY, "schedule": "0 3 * * *", "timezone": "UTC"}})
    await svc.family.dispatch("default", {"op": "fork", "name": "v", "overlay": {"schedule": "0 4 * * *"}})
    at = datetime.now(UTC).replace(hour=3, minute=0, second=0, microsecond=0)
    out = await svc.firing.fire_event({"schedule_id": created["schedule_id"], "version": 1,
                                       "scheduled_time": at.isoformat()}, now=at + timedelta(seconds=1))
    assert out["reason"] == "stale_version"
    at4 = at.replace(hour=4)
    out = await svc.firing.fire_event({"schedule_id": created["schedule_id"], "version": 1,
                                       "scheduled_time": at4.isoformat()}, now=at4 + timedelta(seconds=1))
    assert out["fired"]  # an old target whose time matches the current cron still fires (once)
