"""`POST /a2a/push`: where peers post push notifications about the tasks this treadle's runs wait
on (treadle/a2a/client.py). No bearer — a peer has none of ours: the notification's token
(`X-A2A-Notification-Token`, made per call and sent with the call's push config) names the call,
and the task id in the body must be the call's remote task. A verified push only pokes the call's
wait key: the woken call reads the task from the peer itself (GetTask), so a push's body is never
taken as the task's truth. Unknown token or task: 401 (nothing said about which)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from treadle.store.a2a import A2ACallStore

PUSH_PATH = "/a2a/push"
TOKEN_HEADER = "x-a2a-notification-token"
#: a notification is a StreamResponse; a larger body is not one of ours
MAX_BODY = 1 << 20


def task_id_of(body: Any) -> str | None:
    """The task a StreamResponse is about (`task.id`, or an update's `taskId`)."""
    if not isinstance(body, dict):
        return None
    for field, key in (("task", "id"), ("statusUpdate", "taskId"), ("artifactUpdate", "taskId"),
                       ("message", "taskId")):
        inner = body.get(field)
        if isinstance(inner, dict) and isinstance(inner.get(key), str) and inner[key]:
            return str(inner[key])
    return None


async def push_route(request: Request) -> Response:
    rt = getattr(request.app.state, "runtime", None)
    if rt is None:
        return JSONResponse({"error": "starting"}, status_code=503)
    token = request.headers.get(TOKEN_HEADER, "")
    raw = await request.body()
    if len(raw) > MAX_BODY:
        return JSONResponse({"error": "payload_too_large"}, status_code=413)
    try:
        task_id = task_id_of(json.loads(raw))
    except ValueError:
        task_id = None
    if not token or task_id is None:
        return JSONResponse({"error": "invalid_notification", "message": "a token and a task id are needed"},
                            status_code=400)
    call = await A2ACallStore(rt.pool).pushed(token, task_id)
    if call is None:
        return JSONResponse({"error": "unauthorized"}, status_code=401)
    await rt.poke(call.tenant_id, [call.wait_key])
    return JSONResponse({"ok": True})


__all__ = ["PUSH_PATH", "push_route", "task_id_of"]
