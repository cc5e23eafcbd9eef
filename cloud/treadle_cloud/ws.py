"""The ws function: the routes of the API Gateway WebSocket API (treadle_cloud/wswatch.py).

- `$connect`: the bearer, as the HTTP API takes it — `Authorization: Bearer <token>`, or (a
  browser cannot set headers on a WebSocket) the subprotocol `treadle.bearer.<token>` in
  `Sec-WebSocket-Protocol` — resolved by the API's own `Authenticator`, with the scope of
  `GET /v1/runs/{run_id}/stream` and the operator's `X-Treadle-Tenant`. A refused token refuses
  the connection (401; 403 without the scope). The connection's tenant is recorded.
- `subscribe {"run_id", "from_seq"}`: the run must be the connection's tenant's (else `refused`
  with `run_not_found`, as the HTTP API's 404); the watcher is recorded with its cursor at
  `from_seq` *before* the stored events are read and posted, so a commit in between is posted
  by whichever pusher locks the watcher first, never missed and never twice.
- `unsubscribe {"run_id"}`; `$disconnect` forgets the connection and its watchers.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from treadle.api.auth import TENANT_HEADER, Authenticator, authorize
from treadle.errors import TreadleError
from treadle.runtime import Runtime
from treadle.store.scope import bound_tenant
from treadle_cloud.container import Container
from treadle_cloud.env import CloudSettings
from treadle_cloud.metrics import observed_invocation
from treadle_cloud.wswatch import ConnectionGone, Connections, WsPusher

log = logging.getLogger("treadle.cloud.ws")

#: the subprotocol a browser offers its token in; `treadle.v1` is echoed when offered with it
BEARER_PROTOCOL = "treadle.bearer."
PROTOCOL = "treadle.v1"
#: the scope a watcher needs: that of the SSE stream
STREAM_ROUTE = ("GET", "/v1/runs/{run_id}/stream")


def _headers(event: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}


def credentials(headers: dict[str, str]) -> tuple[str | None, str | None]:
    """(the Authorization value to check, the subprotocol to answer with)."""
    offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    bearer = next((p for p in offered if p.startswith(BEARER_PROTOCOL)), None)
    # a client (a browser) closes a connection whose answer names none of the subprotocols it offered
    answer = PROTOCOL if PROTOCOL in offered else bearer
    if "authorization" in headers:
        return headers["authorization"], answer
    if bearer is not None:
        return f"Bearer {bearer.removeprefix(BEARER_PROTOCOL)}", answer
    return None, None


class WebSocketFunction:
    def __init__(self, container: Container | None = None) -> None:
        self.container = container or Container(sync_triggers=False)
        self.authenticator: Authenticator | None = None
        self.pusher: WsPusher | None = None

    def _parts(self, event: dict[str, Any]) -> tuple[Runtime, WsPusher, Authenticator]:
        rt = self.container.runtime()
        if self.pusher is None or self.authenticator is None:
            ctx = event.get("requestContext") or {}
            endpoint = (self.container.cloud or CloudSettings()).ws_endpoint or \
                f"https://{ctx.get('domainName')}/{ctx.get('stage')}"
            self.pusher = WsPusher(rt.pool, Connections(endpoint))
            self.authenticator = Authenticator(rt.settings.auth_token, cache_seconds=rt.settings.auth_cache_seconds)
        return rt, self.pusher, self.authenticator

    @observed_invocation  # EMF metrics, spans flushed (treadle_cloud/metrics.py)
    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        ctx = event.get("requestContext") or {}
        route, connection_id = ctx.get("routeKey"), str(ctx.get("connectionId") or "")
        rt, pusher, auth = self._parts(event)
        if route == "$connect":
            return self.container.run(self.connect(rt, auth, connection_id, _headers(event)))
        if route == "$disconnect":
            self.container.run(pusher.forget([connection_id]))
            return {"statusCode": 200}
        try:
            body = json.loads(event.get("body") or "{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self._refuse(pusher, connection_id, None, "invalid_request", "a message is a JSON object")
        action = body.get("action")
        if action == "subscribe":
            return self.container.run(self.subscribe(rt, pusher, connection_id, body))
        if action == "unsubscribe":
            self.container.run(self._unsubscribe(rt, connection_id, str(body.get("run_id"))))
            return {"statusCode": 200}
        return self._refuse(pusher, connection_id, None, "invalid_request",
                            f"unknown action {action!r} (subscribe, unsubscribe)")

    async def connect(self, rt: Runtime, auth: Authenticator, connection_id: str,
                      headers: dict[str, str]) -> dict[str, Any]:
        authorization, protocol = credentials(headers)
        try:
            who = await auth.authenticate(authorization, rt)
            who = authorize(who, *STREAM_ROUTE, headers.get(TENANT_HEADER))
        except TreadleError as exc:
            status = 401 if exc.code == "unauthorized" else 403 if exc.code == "insufficient_scope" else 400
            log.info("connection refused (%s): %s", exc.code, exc)
            return {"statusCode": status}
        async with rt.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO ws_connections (connection_id, tenant_id, subject) VALUES (%s, %s, %s)"
                " ON CONFLICT (connection_id) DO UPDATE SET tenant_id = excluded.tenant_id, subject = excluded.subject",
                (connection_id, who.tenant_id, who.subject))
        return {"statusCode": 200, **({"headers": {"Sec-WebSocket-Protocol": protocol}} if protocol else {})}

    async def subscribe(self, rt: Runtime, pusher: WsPusher, connection_id: str,
                        body: dict[str, Any]) -> dict[str, Any]:
        run_id, from_seq = body.get("run_id"), body.get("from_seq", 0)
        if not isinstance(run_id, str) or not run_id:
            return self._refuse(pusher, connection_id, None, "invalid_request", "subscribe needs a run_id")
        if isinstance(from_seq, bool) or not isinstance(from_seq, int) or from_seq < 0:
            return self._refuse(pusher, connection_id, run_id, "invalid_request", "from_seq: an integer >= 0")
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT tenant_id FROM ws_connections WHERE connection_id = %s", (connection_id,))
            row = await cur.fetchone()
        if row is None:  # lost (the table is unlogged) or never connected: the client connects again
            return self._refuse(pusher, connection_id, run_id, "reconnect", "this connection is unknown; connect again")
        tenant = row["tenant_id"]
        with bound_tenant(tenant):  # the database, too, shows this connection only its tenant's runs
            found = await rt.runs.get(tenant, run_id)
        if found is None:
            return self._refuse(pusher, connection_id, run_id, "run_not_found", f"no run {run_id}")
        try:
            await _post(pusher, connection_id, {"event": "subscribed", "run_id": run_id, "from_seq": from_seq})
        except ConnectionGone:
            await pusher.forget([connection_id])
            return {"statusCode": 410}
        # registered first, then replayed: a commit between the two is posted by whoever locks first
        async with rt.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO ws_watchers (connection_id, run_id, tenant_id, cursor) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (connection_id, run_id) DO UPDATE SET cursor = excluded.cursor, subscribed_at = now()",
                (connection_id, run_id, tenant, from_seq))
        await pusher.push([run_id], connection_id)
        return {"statusCode": 200}

    async def _unsubscribe(self, rt: Runtime, connection_id: str, run_id: str) -> None:
        async with rt.pool.connection() as conn:
            await conn.execute("DELETE FROM ws_watchers WHERE connection_id = %s AND run_id = %s",
                               (connection_id, run_id))

    def _refuse(self, pusher: WsPusher, connection_id: str, run_id: str | None, code: str,
                message: str) -> dict[str, Any]:
        status = {"run_not_found": 404, "reconnect": 410}.get(code, 400)
        try:
            pusher.connections.post(connection_id, {"event": "refused", **({"run_id": run_id} if run_id else {}),
                                                    "data": {"code": code, "message": message}})
        except Exception as exc:  # the status is logged by API Gateway either way
            log.info("refusal to %s not posted: %s", connection_id, exc)
        return {"statusCode": status}


async def _post(pusher: WsPusher, connection_id: str, message: dict[str, Any]) -> None:
    import asyncio

    await asyncio.to_thread(pusher.connections.post, connection_id, message)
