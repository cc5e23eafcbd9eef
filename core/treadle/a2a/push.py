"""Push notifications to the peers that follow this treadle's A2A tasks (A2A 1.0
`tasks/pushNotificationConfig/*`, api/a2a/handler.py stores the configs).

Delivery is a pass of the maintenance loop (the sidecar's sweeper, the cloud's maintenance
function: `Runtime.wake_due`), not a hook of the step: a config is due when its run's status moved
off the one its last look saw (store/a2a.py `A2APushStore.due`). A look reads the task; if its A2A
state differs from the last one delivered, it POSTs the task (a `StreamResponse` with `task`, as
the SDK's own sender does: `X-A2A-Notification-Token`, `Authorization` from the config) through the
network guard — the operator's floor, as every URL a caller chose — and records it. A failure is
retried with backoff (2 s doubling to 5 min) until it lands. Rows, not memory: a restart
delivers what was not delivered, so each state reaches the peer at least once; the body carries the
task id and state, which is how a peer dedupes."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

from treadle.a2a.tasks import Runtime, run_state, task_of
from treadle.config import TreadleConfig
from treadle.errors import TreadleError
from treadle.security.network import HttpLimits, NetworkSetup
from treadle.store.a2a import A2APushStore, DueLook

log = logging.getLogger("treadle.a2a.push")

MAX_BACKOFF_S = 300.0


def backoff_s(attempts: int) -> float:
    return float(min(2.0 * 2 ** min(attempts, 16), MAX_BACKOFF_S))


class PushDelivery:
    def __init__(self, rt: Runtime, config: TreadleConfig, network: NetworkSetup) -> None:
        self.rt = rt
        self.config = config
        self.network = network
        self.store = A2APushStore(rt.pool)
        self.delivered = 0

    async def deliver_due(self) -> int:
        """One pass: every due config looked at; returns how many notifications were delivered."""
        n = 0
        for look in await self.store.due():
            try:
                n += await self._look(look)
            except Exception as exc:  # one config's failure never stops the others
                log.warning("A2A push to task %s config %s failed: %s", look.config.task_id, look.config.config_id,
                            exc)
                await self.store.looked(look.config, look.run_status, None, failed=True,
                                        retry_at=datetime.now(UTC) + timedelta(seconds=backoff_s(look.config.attempts)))
        self.delivered += n
        return n

    async def _look(self, look: DueLook) -> int:
        c = look.config
        run = await self.rt.runs.get(c.tenant_id, c.task_id)
        if run is None:
            return 0
        state = await run_state(self.rt, run)
        if state.state == c.delivered_state:
            await self.store.looked(c, run.status, None, failed=False)
            return 0
        task = await task_of(self.rt, run, state=state)
        await self._post(look, task)
        await self.store.looked(c, run.status, state.state, failed=False)
        return 1

    async def _post(self, look: DueLook, task: object) -> None:
        from a2a.types import a2a_pb2 as pb
        from google.protobuf.json_format import MessageToDict

        from treadle.security.egress import request

        assert isinstance(task, pb.Task)
        c = look.config
        headers = {"Content-Type": "application/json"}
        if c.token:
            headers["X-A2A-Notification-Token"] = c.token
        if c.auth_scheme and c.auth_sealed is not None:
            from treadle.mcp.credentials import process_sealer

            credentials = process_sealer().open(c.tenant_id, c.auth_sealed).get("credentials", "")
            headers["Authorization"] = f"{c.auth_scheme} {credentials}"
        body = json.dumps(MessageToDict(pb.StreamResponse(task=task))).encode()
        guard = self.network.guard(self.config.http.allowed_hosts, None, None)
        fetched = await request(guard, "POST", c.url, headers=headers, body=body,
                                limits=HttpLimits(timeout_s=10.0, max_redirects=0))
        if not 200 <= fetched.status < 300:
            raise TreadleError(f"the peer answered HTTP {fetched.status}")


__all__ = ["PushDelivery", "backoff_s"]
