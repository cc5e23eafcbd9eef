"""Watchers without a Lambda each (treadle_cloud/ws.py, wswatch.py): the ws function's routes, the
worker's relay pushing to WebSocket connections, the maintenance function's catch-up.

The API Gateway management API is a loopback HTTP server speaking its wire format (`POST
/{stage}/@connections/{id}` with the message as the body; 410 with `x-amzn-ErrorType:
GoneException` for a closed connection) — reached by the real boto3 client. moto serves
`apigatewaymanagementapi` too, but never answers 410. The database is the real Postgres; the
functions are the real handler modules in imitated Lambda environments."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import psycopg
import pytest

from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN
from treadle.store.db import Connection, open_pool
from treadle_cloud.wswatch import EVENTS_PER_CLAIM, POST_CONCURRENCY, Connections, WsPusher

AUTH = {"authorization": f"Bearer {API_TOKEN}"}
STAGE = "live"


class ManagementApi:
    """A loopback stand-in for one stage's `@connections` API: records what is posted."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, Any]]] = []
        #: (connection id, seq) → when it arrived (wall clock, for the figures)
        self.arrived: dict[tuple[str, int], float] = {}
        self.deleted: list[str] = []
        self.gone: set[str] = set()
        self.lock = threading.Lock()
        #: each post answers after this long (the management API's latency); and the most posts
        #: that were in flight at once
        self.latency_s = 0.0
        self.in_flight = self.max_in_flight = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _connection(self) -> str | None:
                prefix = f"/{STAGE}/@connections/"
                return unquote(self.path[len(prefix):]) if self.path.startswith(prefix) else None

            def _answer(self, status: int, body: bytes = b"", gone: bool = False) -> None:
                self.send_response(status)
                if gone:
                    self.send_header("x-amzn-ErrorType", "GoneException")
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                cid = self._connection()
                data = self.rfile.read(int(self.headers.get("content-length") or 0))
                if cid is None:
                    return self._answer(404, b'{"message":"not found"}')
                if cid in api.gone:
                    return self._answer(410, b'{"message":"gone"}', gone=True)
                message = json.loads(data)
                with api.lock:
                    api.in_flight += 1
                    api.max_in_flight = max(api.max_in_flight, api.in_flight)
                time.sleep(api.latency_s)  # the latency an API Gateway post has (not a wait on a state)
                with api.lock:
                    api.in_flight -= 1
                    api.posted.append((cid, message))
                    if "seq" in message:
                        api.arrived[(cid, message["seq"])] = time.time()
                self._answer(200)

            def do_DELETE(self) -> None:
                cid = self._connection()
                with api.lock:
                    api.deleted.append(cid or "")
                self._answer(204)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/{STAGE}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def to(self, connection_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [m for cid, m in self.posted if cid == connection_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mgmt() -> Iterator[ManagementApi]:
    api = ManagementApi()
    yield api
    api.close()


@pytest.fixture
def ws_env(cloud_env: dict[str, str], mgmt: ManagementApi, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("TREADLE_WS_ENDPOINT", mgmt.url)
    return {**cloud_env, "TREADLE_WS_ENDPOINT": mgmt.url}


def ws_event(route: str, connection_id: str, *, headers: dict[str, str] | None = None,
             body: Any = None) -> dict[str, Any]:
    """An API Gateway WebSocket API event, as its Lambda proxy integration receives it."""
    ctx = {"routeKey": route, "connectionId": connection_id, "stage": STAGE, "apiId": "abc123",
           "domainName": "abc123.execute-api.us-east-1.amazonaws.com", "requestId": secrets.token_hex(8),
           "eventType": {"$connect": "CONNECT", "$disconnect": "DISCONNECT"}.get(route, "MESSAGE")}
    event: dict[str, Any] = {"requestContext": ctx, "isBase64Encoded": False}
    if headers is not None:
        event["headers"] = headers
    if body is not None:
        event["body"] = json.dumps(body)
    return event


def new_connection_id() -> str:
    return secrets.token_urlsafe(9)[:11] + "="  # API Gateway's shape: base64, an `=` at the end


def rows(db: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(db, autocommit=True) as conn:
        return list(conn.execute(sql, args).fetchall())


def last_seq(db: str, run_id: str) -> int:
    return int(rows(db, "SELECT last_seq FROM runs WHERE id = %s", run_id)[0][0])


def start_run(api: LambdaEnv, agent: str = "calc") -> str:
    resp = api.invoke(http_event("POST", "/v1/runs", headers=AUTH, body={"agent": agent, "prompt": "hi"}))
    assert resp["statusCode"] == 202, resp
    return str(json.loads(resp["body"])["run_id"])


def start_echo_run() -> str:
    """An `echo` run started through an API function of its own (closed again)."""
    api = LambdaEnv("api")
    try:
        return start_run(api, "echo")
    finally:
        api.close()


async def add_watcher(conn: Connection, cid: str, run_id: str, *, cursor_at_end: bool) -> None:
    """A WebSocket connection `cid` of the default tenant watching `run_id` from its start (or
    from its last seq: nothing stored is owed to it)."""
    await conn.execute("INSERT INTO ws_connections (connection_id, tenant_id, subject) VALUES (%s, 'default', 't')",
                       (cid,))
    if cursor_at_end:
        await conn.execute("INSERT INTO ws_watchers (connection_id, run_id, tenant_id, cursor)"
                           " SELECT %s, id, tenant_id, last_seq FROM runs WHERE id = %s", (cid, run_id))
    else:
        await conn.execute("INSERT INTO ws_watchers (connection_id, run_id, tenant_id) VALUES (%s, %s, 'default')",
                           (cid, run_id))


def seqs(messages: list[dict[str, Any]], run_id: str) -> list[int]:
    return [m["seq"] for m in messages if m.get("run_id") == run_id and "seq" in m]


def test_connect_takes_the_apis_bearer_and_refuses_others(ws_env: dict[str, str], cloud_db: str,
                                                          mgmt: ManagementApi) -> None:
    ws = LambdaEnv("ws")
    try:
        refused = new_connection_id()
        assert ws.invoke(ws_event("$connect", refused, headers={}))["statusCode"] == 401
        assert ws.invoke(ws_event("$connect", refused, headers={"Authorization": "Bearer nope"}))["statusCode"] == 401
        assert ws.invoke(ws_event("$connect", refused, headers={
            "Sec-WebSocket-Protocol": "treadle.v1, treadle.bearer.nope"}))["statusCode"] == 401
        assert rows(cloud_db, "SELECT 1 FROM ws_connections WHERE connection_id = %s", refused) == []

        by_header, by_protocol, bare = new_connection_id(), new_connection_id(), new_connection_id()
        assert ws.invoke(ws_event("$connect", by_header, headers={"Authorization": f"Bearer {API_TOKEN}"})) == {
            "statusCode": 200}
        # a browser offers the token as a subprotocol; the answer names one it offered
        assert ws.invoke(ws_event("$connect", by_protocol, headers={
            "Sec-WebSocket-Protocol": f"treadle.v1, treadle.bearer.{API_TOKEN}"})) == {
            "statusCode": 200, "headers": {"Sec-WebSocket-Protocol": "treadle.v1"}}
        answer = ws.invoke(ws_event("$connect", bare,
                                    headers={"Sec-WebSocket-Protocol": f"treadle.bearer.{API_TOKEN}"}))
        assert answer["headers"] == {"Sec-WebSocket-Protocol": f"treadle.bearer.{API_TOKEN}"}
        assert sorted(r[0] for r in rows(cloud_db, "SELECT connection_id FROM ws_connections WHERE connection_id"
                                         " = ANY(%s)", [by_header, by_protocol, bare])) == sorted(
            [by_header, by_protocol, bare])
        # an unknown action and a malformed subscribe are refused with a stable code
        ws.invoke(ws_event("hello", by_header, body={"action": "hello"}))
        ws.invoke(ws_event("subscribe", by_header, body={"action": "subscribe", "run_id": "r_x", "from_seq": -1}))
        assert [m["data"]["code"] for m in mgmt.to(by_header)] == ["invalid_request", "invalid_request"]
        assert ws.invoke(ws_event("$disconnect", by_header)) == {"statusCode": 200}
        assert rows(cloud_db, "SELECT 1 FROM ws_connections WHERE connection_id = %s", by_header) == []
    finally:
        ws.close()


def test_another_tenants_run_is_refused(ws_env: dict[str, str], cloud_db: str, mgmt: ManagementApi) -> None:
    api, ws = LambdaEnv("api"), LambdaEnv("ws")
    try:
        run_id = start_run(api, "echo")  # the default tenant's
        # the operator acting as another tenant (X-Treadle-Tenant): that tenant's connection
        other = new_connection_id()
        assert ws.invoke(ws_event("$connect", other, headers={
            "Authorization": f"Bearer {API_TOKEN}", "X-Treadle-Tenant": "tenant-b"}))["statusCode"] == 200
        assert ws.invoke(ws_event("subscribe", other, body={"action": "subscribe", "run_id": run_id,
                                                            "from_seq": 0}))["statusCode"] == 404
        assert mgmt.to(other) == [{"event": "refused", "run_id": run_id,
                                   "data": {"code": "run_not_found", "message": f"no run {run_id}"}}]
        assert rows(cloud_db, "SELECT 1 FROM ws_watchers WHERE connection_id = %s", other) == []
        # the same run, the owning tenant: replayed
        mine = new_connection_id()
        ws.invoke(ws_event("$connect", mine, headers={"Authorization": f"Bearer {API_TOKEN}"}))
        assert ws.invoke(ws_event("subscribe", mine, body={"action": "subscribe", "run_id": run_id}))[
            "statusCode"] == 200
        got = mgmt.to(mine)
        assert got[0] == {"event": "subscribed", "run_id": run_id, "from_seq": 0}
        assert seqs(got, run_id) == list(range(1, last_seq(cloud_db, run_id) + 1))
    finally:
        api.close()
        ws.close()


def test_replay_and_live_pushes_arrive_in_order_once_while_the_worker_commits(
    ws_env: dict[str, str], cloud_db: str, mgmt: ManagementApi, sqs: Any, queue: dict[str, str]
) -> None:
    api, ws, worker = LambdaEnv("api"), LambdaEnv("ws"), LambdaEnv("worker")
    try:
        run_id = start_run(api, "slow")  # 2 tool calls, a model call of 0.7 s each: 3 steps
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], batch_size=1)
        assert esm.poll_once(wait_s=1) == 1  # the first step committed before anyone watches
        before = last_seq(cloud_db, run_id)
        watcher, gone = new_connection_id(), new_connection_id()
        for cid in (watcher, gone):
            ws.invoke(ws_event("$connect", cid, headers={"Authorization": f"Bearer {API_TOKEN}"}))
        # one subscribes before the worker goes on, and goes away; the other while it commits
        ws.invoke(ws_event("subscribe", gone, body={"action": "subscribe", "run_id": run_id, "from_seq": before}))
        mgmt.gone.add(gone)  # the client went away: the next push finds it gone
        stepping = threading.Thread(target=esm.run_until, kwargs={"done": lambda: rows(
            cloud_db, "SELECT status FROM runs WHERE id = %s", run_id)[0][0] in ("completed", "failed"),
            "timeout_s": 60})
        stepping.start()
        ws.invoke(ws_event("subscribe", watcher, body={"action": "subscribe", "run_id": run_id, "from_seq": 0}))
        replayed = max(seqs(mgmt.to(watcher), run_id), default=0)
        # the run still has steps to go (two model calls of 0.7 s each): what follows, the worker pushes
        assert rows(cloud_db, "SELECT status FROM runs WHERE id = %s", run_id)[0][0] not in ("completed", "failed")
        stepping.join(timeout=90)
        assert not stepping.is_alive()
        final = last_seq(cloud_db, run_id)
        assert final > before
        got = mgmt.to(watcher)
        assert seqs(got, run_id) == list(range(1, final + 1)), got  # in order, each once
        assert [m["event"] for m in got if "seq" in m][-1] == "done"
        assert rows(cloud_db, "SELECT 1 FROM ws_watchers WHERE connection_id = %s", watcher) == []  # its run ended
        assert rows(cloud_db, "SELECT 1 FROM ws_connections WHERE connection_id = %s", watcher) != []
        assert rows(cloud_db, "SELECT 1 FROM ws_connections WHERE connection_id = %s", gone) == []  # 410: forgotten
        assert final > replayed  # the worker's relay pushed the rest (no other pusher ran)
        created = {seq: float(ts) for seq, ts in rows(
            cloud_db, "SELECT seq, extract(epoch FROM created_at) FROM events WHERE run_id = %s", run_id)}
        lags = sorted(1000 * (mgmt.arrived[(watcher, s)] - created[s]) for s in range(replayed + 1, final + 1))
        print(f"\nws: event written (transaction start) → posted, pushed by the worker: min {lags[0]:.0f} ms,"
              f" median {lags[len(lags) // 2]:.0f} ms, max {lags[-1]:.0f} ms")
        print(f"ws: {len(seqs(got, run_id))} events to the watcher, {replayed} replayed at subscribe,"
              f" {final - replayed} pushed by the worker;"
              f" {sum(1 for m in got if m.get('event') in ('text_delta', 'thinking_delta'))} live deltas")
    finally:
        api.close()
        ws.close()
        worker.close()


def test_maintenance_catches_up_a_watcher_and_keeps_quiet_connections_alive(
    ws_env: dict[str, str], cloud_db: str, mgmt: ManagementApi
) -> None:
    api, ws, maintenance = LambdaEnv("api"), LambdaEnv("ws"), LambdaEnv("maintenance")
    try:
        run_id = start_run(api, "echo")
        behind, quiet = new_connection_id(), new_connection_id()
        for cid in (behind, quiet):
            ws.invoke(ws_event("$connect", cid, headers={"Authorization": f"Bearer {API_TOKEN}"}))
        # a watcher registered before commits no relay pushed (the API's own)
        rows(cloud_db, "INSERT INTO ws_watchers (connection_id, run_id, tenant_id, cursor)"
             " VALUES (%s, %s, 'default', 0) RETURNING 1", behind, run_id)
        rows(cloud_db, "UPDATE ws_connections SET pushed_at = now() - interval '6 minutes' WHERE connection_id = %s"
             " RETURNING 1", quiet)
        result = maintenance.invoke({"source": "treadle.maintenance"})
        assert result["ws"]["caught_up"] == last_seq(cloud_db, run_id)
        assert seqs(mgmt.to(behind), run_id) == list(range(1, last_seq(cloud_db, run_id) + 1))
        assert mgmt.to(quiet) == [{"event": "keepalive"}]
        again = maintenance.invoke({"source": "treadle.maintenance"})
        assert "ws" not in again or not again["ws"].get("keepalives")  # pushed a moment ago
    finally:
        api.close()
        ws.close()
        maintenance.close()


def test_keepalives_are_posted_concurrently_within_a_bound(
    ws_env: dict[str, str], cloud_db: str, mgmt: ManagementApi
) -> None:
    """60 quiet connections at 0.2 s a post: one at a time that is 12 s of a 60 s function."""
    maintenance = LambdaEnv("maintenance")
    try:
        quiet = [new_connection_id() for _ in range(60)]
        # warm: the runtime opened and the database migrated (the test may run first in its module);
        # every other connection it keeps alive here is then recent and left out below
        maintenance.invoke({"source": "treadle.maintenance"})
        rows(cloud_db, "INSERT INTO ws_connections (connection_id, tenant_id, subject, pushed_at)"
             " SELECT c, 'default', 't', now() - interval '6 minutes' FROM unnest(%s::text[]) c RETURNING 1", quiet)
        mgmt.posted.clear()
        mgmt.latency_s = 0.2
        result = maintenance.invoke({"source": "treadle.maintenance"})
        assert result["ws"]["keepalives"] == 60
        assert sorted(cid for cid, _ in mgmt.posted) == sorted(quiet)
        # posted concurrently, within the bound (one at a time, 60 posts at 0.2 s are 12 s)
        assert 1 < mgmt.max_in_flight <= POST_CONCURRENCY
    finally:
        maintenance.close()


async def test_two_pushers_never_post_a_seq_twice(cloud_db: str, ws_env: dict[str, str], mgmt: ManagementApi) -> None:
    """A worker's flush and a subscribe's replay (or two workers) push the same watcher at once:
    the row lock and the cursor's greatest() give each seq to one of them, in order."""
    run_id = start_echo_run()
    pool = await open_pool(cloud_db, 4, name="ws-test")
    try:
        cid = new_connection_id()
        async with pool.connection() as conn:
            n = last_seq(cloud_db, run_id)
            # more events than one claim takes, so the pushers interleave over several rounds
            top = n + 2 * EVENTS_PER_CLAIM + 5
            await conn.execute(
                "INSERT INTO events (run_id, tenant_id, seq, type, payload) SELECT %s, 'default', s, 'note',"
                " jsonb_build_object('i', s) FROM generate_series(%s::int, %s::int) s", (run_id, n + 1, top))
            await conn.execute("UPDATE runs SET last_seq = %s WHERE id = %s", (top, run_id))
            await add_watcher(conn, cid, run_id, cursor_at_end=False)
        pushers = [WsPusher(pool, Connections(mgmt.url)) for _ in range(3)]
        counts = await asyncio.gather(*(p.push([run_id]) for p in pushers))
        total = last_seq(cloud_db, run_id)
        assert sum(counts) == total
        assert seqs(mgmt.to(cid), run_id) == list(range(1, total + 1))
    finally:
        await pool.close()


async def test_a_push_posts_many_watchers_concurrently_each_in_order(
    cloud_db: str, ws_env: dict[str, str], mgmt: ManagementApi
) -> None:
    """The worker's flush and the maintenance catch-up (`push`): 40 connections behind one run's 3
    events at 0.1 s a post take 12 s one at a time; it posts from several threads at once, at most
    POST_CONCURRENCY. Each connection still gets its seqs once, in order."""
    run_id = start_echo_run()
    pool = await open_pool(cloud_db, 4, name="ws-test")
    try:
        async with pool.connection() as conn:
            n = last_seq(cloud_db, run_id)
            await conn.execute(
                "INSERT INTO events (run_id, tenant_id, seq, type, payload) SELECT %s, 'default', s, 'note',"
                " jsonb_build_object('i', s) FROM generate_series(%s::int, 3) s", (run_id, n + 1))
            await conn.execute("UPDATE runs SET last_seq = greatest(last_seq, 3) WHERE id = %s", (run_id,))
            cids = [new_connection_id() for _ in range(40)]
            for cid in cids:
                await add_watcher(conn, cid, run_id, cursor_at_end=False)
        total = last_seq(cloud_db, run_id)
        connections = Connections(mgmt.url)
        _ = connections.client  # boto3's client made before the clock starts (a warm worker has it)
        mgmt.latency_s = 0.1
        posted = await WsPusher(pool, connections).push([run_id])
        assert posted == 40 * total
        assert all(seqs(mgmt.to(cid), run_id) == list(range(1, total + 1)) for cid in cids)
        assert 1 < mgmt.max_in_flight <= POST_CONCURRENCY
    finally:
        await pool.close()


def test_the_watcher_tables_are_unlogged_and_tenant_isolated(ws_env: dict[str, str], cloud_db: str) -> None:
    ws = LambdaEnv("ws")  # its cold start migrates
    try:
        ws.invoke(ws_event("$connect", new_connection_id(), headers={}))
        got = rows(cloud_db, "SELECT relname, relpersistence, relrowsecurity FROM pg_class WHERE relname IN"
                   " ('ws_connections', 'ws_watchers') ORDER BY relname")
        assert got == [("ws_connections", "u", True), ("ws_watchers", "u", True)]
    finally:
        ws.close()



async def test_the_relay_posts_live_deltas_and_drops_those_a_commit_stored(
    cloud_db: str, ws_env: dict[str, str], mgmt: ManagementApi
) -> None:
    from treadle.engine.hub import RunEventHub
    from treadle_cloud.live import RelayHub

    run_id = start_echo_run()
    pool = await open_pool(cloud_db, 2, name="ws-relay-test")
    try:
        cid = new_connection_id()
        async with pool.connection() as conn:
            await add_watcher(conn, cid, run_id, cursor_at_end=True)
        relay = RelayHub(RunEventHub(), pool, notify=False, ws=WsPusher(pool, Connections(mgmt.url)))
        frame = {"iteration": 1, "attempt": 0, "provider": "p"}
        for piece in ("Hel", "lo"):
            relay.publish(run_id, "text_delta", {**frame, "text": piece})
        await relay.flush()
        assert mgmt.to(cid) == [{"run_id": run_id, "event": "text_delta", "data": {**frame, "text": "Hello"}}]
        # a delta, then the commit of its turn, then the next turn's delta: the first is stored, not posted
        relay.publish(run_id, "text_delta", {**frame, "text": " world"})
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO events (run_id, tenant_id, seq, type, payload) SELECT id, tenant_id,"
                               " last_seq + 1, 'text', %s FROM runs WHERE id = %s",
                               (json.dumps({"text": "Hello world"}), run_id))
            await conn.execute("UPDATE runs SET last_seq = last_seq + 1 WHERE id = %s", (run_id,))
        relay.notify(run_id)
        relay.publish(run_id, "text_delta", {**frame, "iteration": 2, "text": "Next"})
        await relay.flush()
        assert mgmt.to(cid)[1:] == [
            {"run_id": run_id, "seq": last_seq(cloud_db, run_id), "event": "text", "data": {"text": "Hello world"}},
            {"run_id": run_id, "event": "text_delta", "data": {**frame, "iteration": 2, "text": "Next"}}]
    finally:
        await pool.close()


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, (None, None)),
    ({"authorization": "Bearer t"}, ("Bearer t", None)),
    ({"authorization": "Bearer t", "sec-websocket-protocol": "treadle.v1"}, ("Bearer t", "treadle.v1")),
    ({"sec-websocket-protocol": "treadle.v1, treadle.bearer.t"}, ("Bearer t", "treadle.v1")),
    ({"sec-websocket-protocol": "treadle.bearer.t"}, ("Bearer t", "treadle.bearer.t")),
    ({"sec-websocket-protocol": "chat, other"}, (None, None)),
])
def test_where_the_bearer_comes_from(headers: dict[str, str], expected: tuple[str | None, str | None]) -> None:
    from treadle_cloud.ws import credentials

    assert credentials(headers) == expected
