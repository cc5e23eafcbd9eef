"""The maintenance function, invoked every minute by EventBridge Scheduler.

It re-enqueues every step whose lease expired (its worker died or timed out) or whose re-queue
deadline passed (its message was lost, or it waits longer than SQS can delay a message), and wakes
the parked runs whose wait deadline passed (timers); WebSocket watchers behind their run are
caught up and quiet connections kept alive (treadle_cloud/wswatch.py); retention deletes one
batch per class past its tenant's days (archived to the S3 volume first with `retention.archive`). The lease sweep is a
singleton per database (advisory lock) and a woken run is enqueued once, so overlapping
invocations are harmless.
"""

from __future__ import annotations

import logging
from typing import Any

from treadle.engine.workers import Sweeper
from treadle_cloud.container import Container, remaining_s
from treadle_cloud.metrics import observed_invocation
from treadle_cloud.wswatch import Connections, WsPusher

log = logging.getLogger("treadle.cloud.maintenance")

#: stop sweeping with this much time left
MARGIN_S = 5.0


class MaintenanceFunction:
    def __init__(self, container: Container | None = None) -> None:
        self.container = container or Container()
        self.ws: WsPusher | None = None

    @observed_invocation  # EMF metrics, spans flushed (treadle_cloud/metrics.py)
    def __call__(self, event: dict[str, Any] | None, context: Any) -> dict[str, Any]:
        rt = self.container.runtime()
        sweeper = Sweeper(rt.engine, rt.dispatcher, interval_s=60.0, wake_due=rt.wake_due)
        total = 0
        while True:  # each sweep takes a bounded batch; what it took is not due again soon
            n = self.container.run(sweeper.sweep_once())
            total += n
            if n == 0 or remaining_s(context) < MARGIN_S:
                break
        hooks = self.container.run(rt.triggers.hooks.run_once())  # on_complete hooks of finished triggered runs
        purged = self.container.run(rt.volumes.purge_ended())  # ephemeral volumes a crash left behind
        self.container.run(rt.tidy_sql_memory())  # ended runs' SQL scopes; a restore a crash left half-way
        # retention (config `retention:`): one batch per class, archived to S3 first when asked
        retained = self.container.run(rt.enforce_retention(force=True))
        if rt.triggers.schedules.scheduler is not None:  # only where the stack grants scheduler:* (the API today)
            self.container.run(rt.triggers.schedules.reconcile())
        ws: dict[str, int] = {}
        cloud = self.container.cloud
        if cloud is not None and cloud.ws_endpoint:  # WebSocket watchers: caught up, kept alive
            if self.ws is None:
                self.ws = WsPusher(rt.pool, Connections(cloud.ws_endpoint))
            ws = {k: v for k, v in self.container.run(self.ws.catch_up()).items() if v}
        return {"requeued": total, **({"hooks": hooks} if hooks else {}), **({"ws": ws} if ws else {}),
                **({"volume_files_purged": purged} if purged else {}),
                **({"retention_deleted": retained} if retained else {})}
