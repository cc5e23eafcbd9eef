"""EventBridge Scheduler adapter: one AWS schedule per ScheduleDef.

The client is injected (a boto3 `scheduler` client in the cloud shape, built by
`treadle_cloud`); the core never imports boto3. Each schedule is named `treadle-<schedule_id>` in
the stack's schedule group, runs the translated cron in the def's timezone, and invokes the
scheduler function with `{"schedule_id", "version", "scheduled_time"}` — EventBridge fills in
`<aws.scheduler.scheduled-time>`, the time the handler fires by.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

from treadle.specs.cron import Cron, CronError
from treadle.triggers.scheduler import ScheduleTarget

ENV_GROUP = "TREADLE_SCHEDULE_GROUP"
ENV_ROLE = "TREADLE_SCHEDULER_ROLE_ARN"
ENV_TARGET = "TREADLE_SCHEDULER_TARGET_ARN"
#: how long EventBridge keeps retrying an invocation that failed (the handler is idempotent)
MAX_EVENT_AGE_S = 3600
MAX_RETRIES = 20


def schedule_name(schedule_id: str) -> str:
    return f"treadle-{schedule_id}"


def target_input(schedule_id: str, version: int) -> str:
    return json.dumps(
        {"schedule_id": schedule_id, "version": version, "scheduled_time": "<aws.scheduler.scheduled-time>"}
    )


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code") or "")
    return ""


class EventBridgeScheduler:
    name = "eventbridge"

    def __init__(self, client: Any, group: str, role_arn: str, target_arn: str) -> None:
        self.client = client
        self.group = group
        self.role_arn = role_arn
        self.target_arn = target_arn

    @classmethod
    def from_env(
        cls, client_factory: Callable[[], Any], environ: dict[str, str] | None = None
    ) -> EventBridgeScheduler | None:
        """From the variables the CDK construct sets on the API function; None when they are unset."""
        env = os.environ if environ is None else environ
        group, role, target = env.get(ENV_GROUP), env.get(ENV_ROLE), env.get(ENV_TARGET)
        if not (group and role and target):
            return None
        return cls(_LazyClient(client_factory), group, role, target)

    def validate(self, cron: str, timezone: str) -> None:
        try:
            Cron(cron, timezone).to_eventbridge()
        except CronError as exc:
            raise ValueError(str(exc)) from None

    def request(self, s: ScheduleTarget) -> dict[str, Any]:
        """The CreateSchedule / UpdateSchedule parameters for `s` (UpdateSchedule replaces all)."""
        return {
            "Name": schedule_name(s.schedule_id),
            "GroupName": self.group,
            "ScheduleExpression": Cron(s.cron, s.timezone).to_eventbridge(),
            "ScheduleExpressionTimezone": s.timezone,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "ENABLED" if s.enabled else "DISABLED",
            "Description": f"treadle schedule {s.name} (tenant {s.tenant_id}, v{s.version})"[:512],
            "Target": {
                "Arn": self.target_arn,
                "RoleArn": self.role_arn,
                "Input": target_input(s.schedule_id, s.version),
                "RetryPolicy": {"MaximumEventAgeInSeconds": MAX_EVENT_AGE_S, "MaximumRetryAttempts": MAX_RETRIES},
            },
        }

    async def upsert(self, schedule: ScheduleTarget) -> None:
        params = self.request(schedule)
        await asyncio.to_thread(self._upsert, params)

    def _upsert(self, params: dict[str, Any]) -> None:
        try:
            self.client.update_schedule(**params)
        except Exception as exc:
            if _error_code(exc) != "ResourceNotFoundException":
                raise
            self.client.create_schedule(**params)

    async def delete(self, schedule_id: str) -> None:
        await asyncio.to_thread(self._delete, schedule_name(schedule_id))

    def _delete(self, name: str) -> None:
        try:
            self.client.delete_schedule(Name=name, GroupName=self.group)
        except Exception as exc:
            if _error_code(exc) != "ResourceNotFoundException":
                raise

    def get(self, schedule_id: str) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = self.client.get_schedule(Name=schedule_name(schedule_id), GroupName=self.group)
        except Exception as exc:
            if _error_code(exc) == "ResourceNotFoundException":
                return None
            raise
        return out


class _LazyClient:
    """The real client is built on first use (boto3 costs ~150 ms to import)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._factory()
        return getattr(self._client, name)
