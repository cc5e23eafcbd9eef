"""Watchers without a Lambda each: a run's events pushed to API Gateway WebSocket connections.

An open stream of the stream function holds a Lambda environment for as long as it is open. Here
API Gateway holds the connection, and the functions that already run push to it:

- the `ws` function (treadle_cloud/ws.py) answers `$connect` (the bearer checked as the HTTP API
  checks it; the connection recorded in `ws_connections`), `subscribe {run_id, from_seq}` (the run
  checked to be the connection's tenant's; a row of `ws_watchers` with `cursor = from_seq`, and
  only then the stored events replayed) and `$disconnect`;
- the worker's relay flush (treadle_cloud/live.py), the one place its commit pokes and live
  deltas meet, calls `WsPusher.push`: for each run with watchers, each watcher's row is locked,
  the events past its cursor are posted with the management API's `PostToConnection`, and the
  cursor advanced with `greatest(cursor, last posted seq)` before the lock is released — so two
  pushers (a worker and a replaying subscribe, two workers) never post a seq twice, and post a
  watcher's events in seq order. The coalesced deltas follow, without a seq.
- a connection that is gone (`GoneException`, 410) is deleted with its watchers; a watcher whose
  run posted `done` or `error` is deleted (the connection stays: it may watch other runs);
- the maintenance function (`catch_up`) posts what any watcher is behind (a failed post, a worker
  that died between its commit and its flush), keeps quiet connections alive, and forgets watchers
  of runs that ended or were purged.

Messages (JSON text frames): `{"run_id", "seq", "event", "data"}` for a stored event (the SSE
stream's shapes), `{"run_id", "event": "text_delta"|"thinking_delta", "data"}` for a live delta
(a client drops the deltas of an iteration whose `text` it has), `{"event": "subscribed", "run_id",
"from_seq"}`, `{"event": "refused", "run_id"?, "data": {"code", "message"}}`, `{"event":
"keepalive"}`. A stored event over `MAX_MESSAGE_BYTES` is sent as `{"run_id", "seq", "event":
"too_large", "data": {"type"}}`: read it with `GET /v1/runs/{id}/events?from_seq=`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from treadle.api.sse import wire_event
from treadle.domain.events import TERMINAL
from treadle.store.db import Pool

log = logging.getLogger("treadle.cloud.ws")

#: API Gateway's WebSocket message limit is 128 KB; frames are billed per 32 KB
MAX_MESSAGE_BYTES = 120_000
#: events posted to one watcher per lock (a long replay takes several)
EVENTS_PER_CLAIM = 200
#: the maintenance function's keepalive: API Gateway closes a connection idle for 10 minutes
KEEPALIVE_AFTER_S = 300
#: posts in flight at once (one connection's messages stay in order, on one thread): at 50 ms a
#: post, 134 keepalives/s measured against 18/s one at a time (docs/deploy-aws.md)
POST_CONCURRENCY = 16


class ConnectionGone(Exception):
    """The connection is closed (the management API answered 410 GoneException)."""


def management_client(endpoint_url: str) -> Any:
    """A boto3 client of the API Gateway management API for one stage
    (`https://{api}.execute-api.{region}.amazonaws.com/{stage}`)."""
    import boto3
    from botocore.config import Config

    return boto3.client("apigatewaymanagementapi", endpoint_url=endpoint_url,
                        config=Config(retries={"mode": "standard", "max_attempts": 3},
                                      connect_timeout=3, read_timeout=10,
                                      max_pool_connections=POST_CONCURRENCY))


@dataclass
class Connections:
    """PostToConnection / DeleteConnection on a client made on first use."""

    endpoint_url: str
    client_factory: Callable[[str], Any] = management_client
    _client: Any = field(default=None, init=False, repr=False)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.client_factory(self.endpoint_url)
        return self._client

    def post(self, connection_id: str, message: dict[str, Any]) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.post_to_connection(ConnectionId=connection_id, Data=encode(message))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "GoneException":
                raise ConnectionGone(connection_id) from None
            raise

    def close(self, connection_id: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.delete_connection(ConnectionId=connection_id)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "GoneException":
                raise


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def event_message(run_id: str, seq: int, etype: str, payload: dict[str, Any]) -> dict[str, Any]:
    event, data = wire_event(etype, payload)
    message = {"run_id": run_id, "seq": seq, "event": event, "data": data}
    if len(encode(message)) > MAX_MESSAGE_BYTES:
        return {"run_id": run_id, "seq": seq, "event": "too_large", "data": {"type": etype}}
    return message


_LOCK_WATCHERS = """
    SELECT w.connection_id, w.run_id, w.tenant_id, w.cursor FROM ws_watchers w JOIN runs r ON r.id = w.run_id
    WHERE w.run_id = ANY(%(runs)s) AND w.cursor < r.last_seq
      AND (%(conn)s::text IS NULL OR w.connection_id = %(conn)s)
    ORDER BY w.connection_id, w.run_id
    FOR UPDATE OF w"""


@dataclass
class WsPusher:
    """Posts runs' events (and live deltas) to their WebSocket watchers. Sends block on HTTP:
    they run on threads (`asyncio.to_thread`, then up to `POST_CONCURRENCY`), each connection's
    posts in order."""

    pool: Pool
    connections: Connections
    #: counters (tests, logs)
    posted: int = 0
    gone: int = 0

    async def watched(self, runs: Iterable[str]) -> set[str]:
        """The runs among `runs` with at least one watcher (one query)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT DISTINCT run_id FROM ws_watchers WHERE run_id = ANY(%s)", (list(runs),))
            return {row["run_id"] for row in await cur.fetchall()}

    async def push(self, runs: Iterable[str], connection_id: str | None = None) -> int:
        """Post every watcher of `runs` (or only `connection_id`'s) the events past its cursor.
        Returns the events posted."""
        run_ids = sorted(set(runs))
        total = 0
        while run_ids:
            n, more = await self._push_once(run_ids, connection_id)
            total += n
            run_ids = more
        return total

    async def _push_once(self, run_ids: list[str], connection_id: str | None) -> tuple[int, list[str]]:
        posted = 0
        more: set[str] = set()
        gone: set[str] = set()
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(_LOCK_WATCHERS, {"runs": run_ids, "conn": connection_id})
            watchers = await cur.fetchall()
            if not watchers:
                return 0, []
            events: dict[str, list[dict[str, Any]]] = {}
            for run_id in {w["run_id"] for w in watchers}:
                mine = [w for w in watchers if w["run_id"] == run_id]
                cur = await conn.execute(
                    "SELECT seq, type, payload FROM events WHERE run_id = %s AND tenant_id = %s AND seq > %s"
                    " ORDER BY seq LIMIT %s",
                    (run_id, mine[0]["tenant_id"], min(w["cursor"] for w in mine), EVENTS_PER_CLAIM))
                events[run_id] = list(await cur.fetchall())
            plan = []
            for w in watchers:
                todo = [e for e in events[w["run_id"]] if e["seq"] > w["cursor"]][:EVENTS_PER_CLAIM]
                if todo:
                    plan.append((w, todo))
            sent = await asyncio.to_thread(self._post_plan, plan, gone)
            ended: list[tuple[str, str]] = []
            for (w, todo), last in zip(plan, sent, strict=True):
                if last is None:
                    continue
                posted += sum(1 for e in todo if e["seq"] <= last)
                if any(e["type"] in TERMINAL for e in todo if e["seq"] <= last):
                    ended.append((w["connection_id"], w["run_id"]))
                elif last == todo[-1]["seq"] and len(todo) == EVENTS_PER_CLAIM:
                    more.add(w["run_id"])
                await conn.execute(
                    "UPDATE ws_watchers SET cursor = greatest(cursor, %s) WHERE connection_id = %s AND run_id = %s",
                    (last, w["connection_id"], w["run_id"]))
            if ended:
                await conn.execute(
                    "DELETE FROM ws_watchers w USING unnest(%s::text[], %s::text[]) AS e(c, r)"
                    " WHERE w.connection_id = e.c AND w.run_id = e.r",
                    ([c for c, _ in ended], [r for _, r in ended]))
            touched = sorted({w["connection_id"] for (w, _), last in zip(plan, sent, strict=True) if last} - gone)
            if touched:
                await conn.execute("UPDATE ws_connections SET pushed_at = now() WHERE connection_id = ANY(%s)",
                                   (touched,))
            if gone:
                await conn.execute("DELETE FROM ws_connections WHERE connection_id = ANY(%s)", (sorted(gone),))
        self.posted += posted
        self.gone += len(gone)
        return posted, sorted(more)

    def _post_plan(self, plan: list[tuple[dict[str, Any], list[dict[str, Any]]]], gone: set[str]) -> list[int | None]:
        """Posts each watcher's events in order, from up to `POST_CONCURRENCY` threads (one
        connection's watchers in plan order on one of them); the last seq posted to each (None: none)."""
        out: list[int | None] = [None] * len(plan)
        by_connection: dict[str, list[int]] = {}
        for i, (w, _) in enumerate(plan):
            by_connection.setdefault(w["connection_id"], []).append(i)

        def send(connection_id: str, indexes: list[int]) -> None:
            for i in indexes:
                w, todo = plan[i]
                for e in todo:
                    if connection_id in gone:
                        return
                    try:
                        self.connections.post(connection_id, event_message(w["run_id"], e["seq"], e["type"],
                                                                           e["payload"]))
                    except ConnectionGone:
                        gone.add(connection_id)
                        return
                    except Exception as exc:  # the rest waits for the next pusher (the cursor stays)
                        log.warning("posting to %s failed: %s", connection_id, exc)
                        break
                    out[i] = e["seq"]

        if len(by_connection) <= 1:
            for item in by_connection.items():
                send(*item)
            return out
        _ = self.connections.client  # made once, before the threads share it
        with ThreadPoolExecutor(min(POST_CONCURRENCY, len(by_connection)), thread_name_prefix="ws-post") as ex:
            list(ex.map(lambda item: send(*item), by_connection.items()))
        return out

    async def post_deltas(self, frames: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Live frames (no seq) to every watcher of their runs; best effort."""
        if not frames:
            return
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT connection_id, run_id FROM ws_watchers WHERE run_id = ANY(%s)",
                                     (sorted({r for r, _, _ in frames}),))
            rows = await cur.fetchall()
        targets: dict[str, list[str]] = {}
        for row in rows:
            targets.setdefault(row["run_id"], []).append(row["connection_id"])
        await self._post_each([(connection_id, {"run_id": run_id, "event": event, "data": data})
                                for run_id, event, data in frames for connection_id in targets.get(run_id, [])],
                               "a live frame")

    async def _post_each(self, posts: list[tuple[str, dict[str, Any]]], what: str) -> set[str]:
        """Post each message (best effort) from up to `POST_CONCURRENCY` threads, one connection's
        messages in order on one of them; skip connections found gone and forget them; answers
        those gone."""
        gone: set[str] = set()
        by_connection: dict[str, list[dict[str, Any]]] = {}
        for connection_id, message in posts:
            by_connection.setdefault(connection_id, []).append(message)

        def send(connection_id: str, messages: list[dict[str, Any]]) -> None:
            for message in messages:
                try:
                    self.connections.post(connection_id, message)
                except ConnectionGone:
                    gone.add(connection_id)
                    return
                except Exception as exc:
                    log.warning("%s to %s was not posted: %s", what, connection_id, exc)

        def send_all() -> None:
            if len(by_connection) == 1:
                send(*next(iter(by_connection.items())))
                return
            _ = self.connections.client  # made once, before the threads share it
            with ThreadPoolExecutor(min(POST_CONCURRENCY, len(by_connection)), thread_name_prefix="ws-post") as ex:
                list(ex.map(lambda item: send(*item), by_connection.items()))

        if by_connection:
            await asyncio.to_thread(send_all)
        if gone:
            await self.forget(gone)
        return gone

    async def forget(self, connection_ids: Iterable[str]) -> None:
        ids = sorted(set(connection_ids))
        self.gone += len(ids)
        async with self.pool.connection() as conn:
            await conn.execute("DELETE FROM ws_connections WHERE connection_id = ANY(%s)", (ids,))

    async def catch_up(self, *, keepalive_after_s: float = KEEPALIVE_AFTER_S) -> dict[str, int]:
        """The maintenance function's pass: every watcher behind its run caught up, quiet
        connections sent a keepalive, watchers of ended or purged runs forgotten."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT DISTINCT w.run_id FROM ws_watchers w JOIN runs r ON r.id = w.run_id"
                " WHERE w.cursor < r.last_seq")
            behind = [row["run_id"] for row in await cur.fetchall()]
        caught_up = await self.push(behind) if behind else 0
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM ws_watchers w WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = w.run_id"
                " AND NOT (r.status IN ('completed', 'failed', 'cancelled') AND w.cursor >= r.last_seq))")
            forgotten = cur.rowcount
            cur = await conn.execute(
                "SELECT connection_id FROM ws_connections WHERE pushed_at < now() - make_interval(secs => %s)",
                (keepalive_after_s,))
            quiet = [row["connection_id"] for row in await cur.fetchall()]
        gone = await self._post_each([(cid, {"event": "keepalive"}) for cid in quiet], "a keepalive")
        alive = sorted(set(quiet) - gone)
        if alive:
            async with self.pool.connection() as conn:
                await conn.execute("UPDATE ws_connections SET pushed_at = now() WHERE connection_id = ANY(%s)",
                                   (alive,))
        return {"caught_up": caught_up, "keepalives": len(alive), "gone": len(gone), "forgotten": forgotten}
