"""The scheduler function: the target of EventBridge Scheduler's schedules.

A schedule's target input names the schedule; EventBridge fills in the fire time:

    {"schedule_id": "<id>", "scheduled_time": "<aws.scheduler.scheduled-time>"}

(`target_input(schedule_id)` builds it.) Schedules themselves are not in this build: a fire is
acknowledged as `not_implemented`, without an error (an error would make EventBridge retry it).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from treadle_cloud.container import Container

log = logging.getLogger("treadle.cloud.scheduler")


def target_input(schedule_id: str) -> str:
    return json.dumps({"schedule_id": schedule_id, "scheduled_time": "<aws.scheduler.scheduled-time>"})


class SchedulerFunction:
    def __init__(self, container: Container | None = None) -> None:
        self.container = container or Container()

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        schedule_id = event.get("schedule_id") if isinstance(event, dict) else None
        if not isinstance(schedule_id, str) or not schedule_id:
            raise ValueError(f"scheduler event without a schedule_id: {event!r}")
        self.container.runtime()
        log.warning("schedule %s fired at %s: schedules are not available in this build",
                    schedule_id, event.get("scheduled_time"))
        return {"schedule_id": schedule_id, "fired": False, "reason": "not_implemented"}
