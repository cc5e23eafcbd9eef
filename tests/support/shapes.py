"""One contract, two shapes (issue 43 item 1): the same scenarios, written once against the Python
client (`treadle.client.Treadle`), run against

- the sidecar: `treadle serve`'s app on a loopback port (uvicorn in a thread of its own, its
  in-process workers and sweeper), and
- the local cloud: the real handler modules in imitated Lambda environments
  (tests/support/lambda_sim.py) behind an API Gateway stand-in (`ApiGatewayTransport`: the HTTP
  API's routes, one event per request), the worker driven by an SQS event source mapping on moto
  with the stack's batch size (1), a real Postgres.

A `Shape` is what a scenario may use beyond the client: `fire_schedule` is the one "fire now" hook
both shapes share — it fires the schedule's current minute through the shape's own firing path (the
sidecar's sweeper, EventBridge Scheduler's invocation of the scheduler function) and answers the
fire's run id."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import psycopg

from tests.support.lambda_sim import EventSourceMapping, FrozenLambdaEnv, http_event
from treadle.client import Treadle

TOKEN = "shape-token-0123456789"
WEBHOOK_SECRET_ENV = "SHAPES_GITHUB_SIGNING_KEY"
WEBHOOK_SECRET = "gh-shapes-secret-0123456789"
LOOKUP = {"name": "lookup_order", "description": "Look an order up in the shop's database",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}


def _script(*steps: dict[str, Any], tools: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"model": "script", "tools": tools or [], "mock": {"script": list(steps)}, **extra}


#: the agents, channels, schedule and webhook every shape serves (one treadle.yaml)
CONFIG: dict[str, Any] = {
    "agents": {
        "echo": {"model": "echo"},
        "calc": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3}},
        "slow": {"model": "tool-caller", "tools": ["Memory"], "max_iterations": 60,
                 "mock": {"tool_calls": 50, "latency_ms": 200}},
        "listener": _script({"tool": "Channel", "input": {"op": "subscribe", "channel": "news",
                                                          "wait_ms": 3_600_000}},
                            {"text": "heard it"}, tools=["Channel"]),
        "asker": _script({"tool": "Interruption", "input": {"op": "ask", "question": "proceed?",
                                                            "options": ["yes", "no"]}},
                         {"text": "asked"}, tools=["Interruption"]),
        "shopper": _script({"tool": "lookup_order", "input": {"order_id": "A-17"}}, {"text": "found it"}),
        "boss": _script({"tool": "Agent", "input": {"op": "spawn", "name": "echo", "prompt": "ping"}},
                        {"text": "the child answered"}, tools=["Agent"]),
    },
    "channels": {"news": {"scope": "global", "semantic": "broadcast"}},
    # every minute: the hook fires the current one; a natural fire of the same minute is the same fire
    "scheduled_runs": {"minutely": {"agent": "echo", "schedule": "* * * * *", "prompt": "scheduled hello"}},
    "webhooks": {"github": {"agent": "echo",
                            "auth": {"header": "X-Hub-Signature-256", "signing_secret_env": WEBHOOK_SECRET_ENV},
                            "payload_mapping": {"title": "$.issue.title"}}},
}


class Shape(Protocol):
    name: str
    client: Treadle
    #: how many times the cutting transport cut a stream (tests/support/shapes.py CuttingTransport)
    cutter: CuttingTransport

    def fire_schedule(self, name: str) -> str: ...


def current_minute() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


# -- cutting streams -------------------------------------------------------------------------------


class _CutStream(httpx.SyncByteStream):
    """A response body that ends in a lost connection after `frames` complete SSE frames."""

    def __init__(self, inner: httpx.SyncByteStream, frames: int) -> None:
        self.inner = inner
        self.frames = frames

    def __iter__(self) -> Iterator[bytes]:
        buf = b""
        for chunk in self.inner:
            buf += chunk
            ends = [i for i in range(len(buf)) if buf.startswith(b"\n\n", i)]
            if len(ends) >= self.frames:
                yield buf[: ends[self.frames - 1] + 2]
                raise httpx.ReadError("connection lost (cut by the test)")
        yield buf  # fewer frames than the cut: the body as it came

    def close(self) -> None:
        self.inner.close()


class CuttingTransport(httpx.BaseTransport):
    """Passes requests to `inner`; while `armed`, the next SSE response is cut after `frames` frames
    (the connection lost mid-stream, as a client sees it)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.armed = 0
        self.cuts = 0

    def arm(self, frames: int) -> None:
        self.armed = frames

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = self.inner.handle_request(request)
        if self.armed and resp.headers.get("content-type", "").startswith("text/event-stream"):
            frames, self.armed = self.armed, 0
            self.cuts += 1
            assert isinstance(resp.stream, httpx.SyncByteStream)
            return httpx.Response(resp.status_code, headers=resp.headers, stream=_CutStream(resp.stream, frames),
                                  request=request)
        return resp

    def close(self) -> None:
        self.inner.close()


# -- the sidecar -----------------------------------------------------------------------------------


@dataclass
class SidecarShape:
    """`treadle serve`'s app on a loopback port, served from a thread with its own event loop."""

    db_url: str
    name: str = "sidecar"
    url: str = ""
    client: Treadle = field(init=False)
    cutter: CuttingTransport = field(init=False)
    _stop: Callable[[], None] = field(init=False)

    def start(self) -> None:
        from treadle_sidecar.server import BackgroundServer

        from tests.support.db import TEST_HOME
        from treadle.config import Settings, parse_config

        ready = threading.Event()
        state: dict[str, Any] = {}

        async def main() -> None:
            stop = asyncio.Event()
            state["loop"], state["stop"] = asyncio.get_running_loop(), stop
            try:
                settings = Settings(database_url=self.db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                                    auth_token=TOKEN, sweep_interval_seconds=0.2)
                server = BackgroundServer(settings, parse_config(CONFIG))
                state["url"] = await server.start()
            except BaseException as exc:
                state["error"] = exc
                ready.set()
                raise
            ready.set()
            try:
                await stop.wait()
            finally:
                await server.stop()

        thread = threading.Thread(target=asyncio.run, args=(main(),), name="shape-sidecar", daemon=True)
        thread.start()
        if not ready.wait(60) or "error" in state:
            raise RuntimeError("the sidecar did not start") from state.get("error")
        self.url = state["url"]

        def stop() -> None:
            state["loop"].call_soon_threadsafe(state["stop"].set)
            thread.join(30)

        self._stop = stop
        self.cutter = CuttingTransport(httpx.HTTPTransport())
        self.client = Treadle(self.url, TOKEN, transport=self.cutter, timeout=30.0)

    def close(self) -> None:
        self.client.close()
        self._stop()

    def fire_schedule(self, name: str) -> str:
        """The sidecar's firing path: the schedule's next fire moved back to this minute (a row
        timestamp), the sweeper (every 0.2 s here) fires it; the fire's run id."""
        at = current_minute()
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            row = conn.execute("UPDATE schedules SET next_fire_at = %s WHERE name = %s AND status = 'active' "
                               "RETURNING schedule_id", (at, name)).fetchone()
            assert row is not None, f"no schedule {name!r}"
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                fire = conn.execute("SELECT run_id FROM schedule_fires WHERE schedule_id = %s AND scheduled_for = %s",
                                    (row[0], at)).fetchone()
                if fire is not None and fire[0]:
                    return str(fire[0])
                time.sleep(0.05)
        raise TimeoutError(f"the sweeper did not fire {name!r} at {at}")


# -- the local cloud -------------------------------------------------------------------------------


class ApiGatewayTransport(httpx.BaseTransport):
    """API Gateway's HTTP API as the stack routes it (infra/treadle_infra/runtime.py): /v1/_webhooks/*
    to the webhook function, everything else to the api function; each request one invocation with
    a payload-format-2.0 event, the function's answer turned back into a response."""

    def __init__(self, api: FrozenLambdaEnv, webhook: FrozenLambdaEnv) -> None:
        self.routes = [("/v1/_webhooks/", webhook, "ANY /v1/_webhooks/{proxy+}"), ("/", api, "ANY /{proxy+}")]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        env, route_key = next((e, rk) for prefix, e, rk in self.routes if path.startswith(prefix))
        body = request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        event = http_event(request.method, path, query=request.url.query.decode(), headers=headers,
                           body=body or None, route_key=route_key)
        out = env.invoke(event)
        raw = out.get("body") or ""
        content = base64.b64decode(raw) if out.get("isBase64Encoded") else raw.encode()
        resp_headers = list((out.get("headers") or {}).items())
        resp_headers += [("set-cookie", c) for c in out.get("cookies") or []]
        return httpx.Response(out["statusCode"], headers=resp_headers, content=content, request=request)


@dataclass
class CloudShape:
    """The api, webhook, worker, scheduler and maintenance functions on moto and a real Postgres,
    each an environment of its own that is frozen between invocations and killed at its timeout
    (lambda_sim.FrozenLambdaEnv). The worker's event source mapping polls in a thread of its own
    (batch size 1, as the stack), the maintenance function runs whenever the queue is empty."""

    sqs: Any
    queue: dict[str, str]
    scheduler: Any
    group: str
    #: the variables the stack gives only the api and maintenance functions
    schedule_env: dict[str, str]
    name: str = "cloud"
    client: Treadle = field(init=False)
    cutter: CuttingTransport = field(init=False)
    envs: dict[str, FrozenLambdaEnv] = field(default_factory=dict)
    _running: bool = True
    _poller: threading.Thread | None = None
    errors: list[BaseException] = field(default_factory=list)

    def start(self) -> None:
        # each function's timeout as the stack sets it (the worker's 15 min is no use to a test: 2 min)
        unset: dict[str, str | None] = dict.fromkeys(self.schedule_env)
        with_schedules: dict[str, str | None] = {**self.schedule_env}
        self.envs["api"] = FrozenLambdaEnv("api", timeout_s=30.0, env=with_schedules)
        self.envs["webhook"] = FrozenLambdaEnv("webhook", timeout_s=30.0, env=unset)
        self.envs["scheduler"] = FrozenLambdaEnv("scheduler", timeout_s=30.0, env=unset)
        self.envs["maintenance"] = FrozenLambdaEnv("maintenance", timeout_s=60.0, env=with_schedules)
        self.envs["worker"] = FrozenLambdaEnv("worker", timeout_s=120.0, env=unset)
        for env in self.envs.values():
            env.start()
        self.esm = EventSourceMapping(self.sqs, self.queue["url"], self.queue["arn"], [self.envs["worker"]],
                                      batch_size=1)
        self._poller = threading.Thread(target=self._poll, name="shape-esm", daemon=True)
        self._poller.start()
        self.cutter = CuttingTransport(ApiGatewayTransport(self.envs["api"], self.envs["webhook"]))
        self.client = Treadle("https://abc123defg.execute-api.us-east-1.amazonaws.com", TOKEN,
                              transport=self.cutter, timeout=60.0)

    def _poll(self) -> None:
        last_maintenance = 0.0
        while self._running:
            try:
                if self.esm.poll_once(wait_s=0) == 0:
                    if time.monotonic() - last_maintenance > 0.5:  # EventBridge's minute, sped up
                        self.envs["maintenance"].invoke({"source": "aws.scheduler"})
                        last_maintenance = time.monotonic()
                    time.sleep(0.05)
            except BaseException as exc:  # the test reads them
                self.errors.append(exc)
                time.sleep(0.2)

    def close(self) -> None:
        self._running = False
        if self._poller is not None:
            self._poller.join(30)
        self.client.close()
        for env in self.envs.values():
            env.close()
        assert not self.errors, self.errors

    def fire_schedule(self, name: str) -> str:
        """EventBridge Scheduler's invocation: the schedule the api function keeps in the group,
        its target input with this minute as the scheduled time, sent to the scheduler function."""
        state = self.client.schedules.state(name)
        remote = self.scheduler.get_schedule(Name=f"treadle-{state.schedule_id}", GroupName=self.group)
        at = current_minute().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = json.loads(remote["Target"]["Input"].replace("<aws.scheduler.scheduled-time>", at))
        out = self.envs["scheduler"].invoke(event)
        assert out.get("run_id"), out
        return str(out["run_id"])
