"""The scheduler function: the target of EventBridge Scheduler's schedules.

Each ScheduleDef has one AWS schedule (`treadle.triggers.eventbridge`) whose target input names
it; EventBridge fills in the fire time:

    {"schedule_id": "<sch_…>", "version": <n>, "scheduled_time": "<aws.scheduler.scheduled-time>"}

The core fires that time once (`Firing.fire_event`): a redelivered invocation finds the fire
already recorded and starts nothing. A schedule that cannot fire (unknown, retired, paused,
missed beyond catch_up_max) is acknowledged with `fired: false` and a reason — an error would
make EventBridge retry it.
"""

from __future__ import annotations

import logging
from typing import Any

from treadle.triggers.eventbridge import target_input
from treadle_cloud.container import Container
from treadle_cloud.metrics import observed_invocation

log = logging.getLogger("treadle.cloud.scheduler")
__all__ = ["SchedulerFunction", "target_input"]


class SchedulerFunction:
    def __init__(self, container: Container | None = None) -> None:
        self.container = container or Container()

    @observed_invocation  # EMF metrics, spans flushed (treadle_cloud/metrics.py)
    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        schedule_id = event.get("schedule_id") if isinstance(event, dict) else None
        if not isinstance(schedule_id, str) or not schedule_id:
            raise ValueError(f"scheduler event without a schedule_id: {event!r}")
        rt = self.container.runtime()
        out = self.container.run(rt.triggers.schedules.firing.fire_event(event))
        if not out.get("fired"):
            log.info("schedule %s at %s not fired: %s", schedule_id, out.get("scheduled_for"), out.get("reason"))
        return out
