"""Live frames across functions: the worker's text deltas and commit pokes reach the stream
function's readers through Postgres `NOTIFY`.

In the sidecar the engine and the SSE readers share one process and one `RunEventHub`. In the
cloud the engine runs in a worker invocation and the readers in the stream function, so a delta
published by the engine reached nobody, and a reader learned of a commit only by polling. Here:

- the worker's engine gets a `RelayHub`: every live frame (`text_delta`, `thinking_delta`) and
  every commit poke is queued, coalesced for `RELAY_WINDOW_S` (consecutive deltas of one model
  attempt become one frame), and sent with `pg_notify('treadle_live', …)` — one statement per
  flush, on a pooled connection, never awaited by the model stream. Only frames of *watched* runs
  are sent: the stream function holds a shared advisory lock per run it streams, and the relay
  looks them up in `pg_locks` (one query per flush, cached `PRESENCE_TTL_S`). Nobody watching →
  nothing sent. Best effort, like the sidecar's hub: a lost frame costs a reader nothing that the
  stored `text` event does not carry.
- the stream function's runtime gets a `WatchedHub` (it counts the readers of each run) and a
  `LiveListener`: one connection of its own that `LISTEN`s, takes and releases the presence
  locks as readers come and go, and hands each frame to the hub — where `api/sse.py` merges it
  exactly as in the sidecar (held until the store has caught up; a delta of a stored turn is
  dropped), and a poke wakes the readers at once instead of at their next poll.

The listener's connection holds a session (LISTEN, advisory locks): it must not go through
RDS Proxy (it would pin a proxy connection for its life) — the stream function connects to the
database directly, as with the proxy off (the default). `TREADLE_LIVE_DELTAS=false` turns both
sides off.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from treadle.engine.hub import LiveSubscription, RunEventHub
from treadle.store.db import Pool

if TYPE_CHECKING:
    from treadle.runtime import Runtime
    from treadle_cloud.wswatch import WsPusher

log = logging.getLogger("treadle.cloud.live")

CHANNEL = "treadle_live"
#: the advisory lock namespace (first key) of the presence locks: "trlv"
PRESENCE_NS = 0x74726C76
#: how long the relay gathers frames before one NOTIFY statement sends them
RELAY_WINDOW_S = 0.05
#: how long the relay trusts what it read of a run's watchers (that someone reads; that no one
#: does — shorter: a reader who just came misses at most this much of the deltas)
PRESENCE_TTL_S = 1.0
ABSENCE_TTL_S = 0.25
#: the characters of delta text per notification (Postgres refuses a payload of 8000 bytes or
#: more; JSON escapes a character into at most 6 bytes)
TEXT_PER_NOTIFY = 1200
POKE = "poke"


def listener_url(database_url: str, direct_host: str | None) -> str:
    """The listener's URL: the pools' own, or the same database on `direct_host` (past RDS Proxy)."""
    if not direct_host:
        return database_url
    from psycopg.conninfo import make_conninfo

    return make_conninfo(database_url, host=direct_host)


def presence_key(run_id: str) -> int:
    """The second key of a run's presence lock: 31 bits of its id's hash (a collision costs a
    notification nobody reads)."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:4], "big") & 0x7FFFFFFF


def _coalesce(frames: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    """Consecutive deltas of one model attempt → one frame; one poke per run, after its frames."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    poked: list[str] = []
    for run_id, event, data in frames:
        if event == POKE:
            if run_id not in poked:
                poked.append(run_id)
            continue
        if out:
            prev_run, prev_event, prev = out[-1]
            same = {k: v for k, v in prev.items() if k != "text"} == {k: v for k, v in data.items() if k != "text"}
            if prev_run == run_id and prev_event == event and same:
                out[-1] = (run_id, event, {**prev, "text": str(prev.get("text", "")) + str(data.get("text", ""))})
                continue
        out.append((run_id, event, dict(data)))
    return out + [(run_id, POKE, {}) for run_id in poked]


def encode(run_id: str, event: str, data: dict[str, Any]) -> list[str]:
    """A frame as notification payloads: its text cut into pieces that fit one notification."""
    text = data.get("text")
    if not isinstance(text, str) or len(text) <= TEXT_PER_NOTIFY:
        return [json.dumps({"r": run_id, "e": event, "d": data}, ensure_ascii=False, separators=(",", ":"))]
    return [json.dumps({"r": run_id, "e": event, "d": {**data, "text": text[i:i + TEXT_PER_NOTIFY]}},
                       ensure_ascii=False, separators=(",", ":"))
            for i in range(0, len(text), TEXT_PER_NOTIFY)]


def decode(payload: str) -> tuple[str, str, dict[str, Any]] | None:
    try:
        doc = json.loads(payload)
        run_id, event, data = doc["r"], doc["e"], doc["d"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(run_id, str) or not isinstance(event, str) or not isinstance(data, dict):
        return None
    return run_id, event, data


class RelayHub(RunEventHub):
    """The worker's hub: the engine's live frames and commit pokes, relayed to the stream
    functions watching the run (module docstring). Waiting and subscribing stay in-process."""

    def __init__(self, inner: RunEventHub, pool: Pool, *, window_s: float = RELAY_WINDOW_S,
                 presence_ttl_s: float = PRESENCE_TTL_S, absence_ttl_s: float = ABSENCE_TTL_S,
                 notify: bool = True, ws: WsPusher | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.pool = pool
        #: NOTIFY the stream functions' listeners (TREADLE_LIVE_DELTAS)
        self.notify_listeners = notify
        #: push to WebSocket watchers (treadle_cloud/wswatch.py; TREADLE_WS_ENDPOINT)
        self.ws = ws
        self.window_s = window_s
        self.presence_ttl_s = presence_ttl_s
        self.absence_ttl_s = absence_ttl_s
        self._pending: list[tuple[str, str, dict[str, Any]]] = []
        self._timer: asyncio.Task[None] | None = None
        self._watched: dict[str, tuple[bool, float]] = {}
        #: notifications sent / frames dropped because nobody watched (tests, logs)
        self.sent = 0
        self.unwatched = 0

    # the engine's side of RunEventHub
    def notify(self, run_id: str) -> None:
        self.inner.notify(run_id)
        self._queue(run_id, POKE, {})

    async def wait(self, run_id: str, timeout: float) -> bool:
        return await self.inner.wait(run_id, timeout)

    def has_live(self, run_id: str) -> bool:
        return True  # a reader may be watching from another function: the flush asks Postgres

    def publish(self, run_id: str, event: str, data: dict[str, Any]) -> None:
        self.inner.publish(run_id, event, data)
        self._queue(run_id, event, data)

    @contextlib.contextmanager
    def subscribe(self, run_id: str) -> Iterator[LiveSubscription]:
        with self.inner.subscribe(run_id) as sub:
            yield sub

    # relaying
    def _queue(self, run_id: str, event: str, data: dict[str, Any]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the engine's loop: nothing to relay with
            return
        self._pending.append((run_id, event, data))
        if self._timer is None or self._timer.done():
            self._timer = loop.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.window_s)
        await self.flush()

    async def flush(self) -> None:
        """Send what is queued now (the worker calls it before its invocation returns: a frozen
        environment would hold the frames until its next invocation)."""
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()  # what it would send goes now
            self._timer = None
        frames, self._pending = self._pending, []
        if not frames:
            return
        if self.ws is not None:
            await self._push_ws(frames)
        if not self.notify_listeners:
            return
        try:
            watched = await self._watched_runs({run_id for run_id, _, _ in frames})
            payloads: list[str] = []
            for run_id, event, data in _coalesce(frames):
                if run_id in watched:
                    payloads.extend(encode(run_id, event, data))
                else:
                    self.unwatched += 1
            if payloads:
                async with self.pool.connection() as conn:
                    await conn.execute("SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (CHANNEL, payloads))
                self.sent += len(payloads)
        except Exception as exc:  # best effort: the stored events carry everything
            log.warning("live frames of %d run(s) not relayed: %s", len({f[0] for f in frames}), exc)

    async def _push_ws(self, frames: list[tuple[str, str, dict[str, Any]]]) -> None:
        """The committed events past each WebSocket watcher's cursor, then the deltas still
        live (one query when no run of the flush has a watcher)."""
        assert self.ws is not None
        try:
            watched = await self.ws.watched({run_id for run_id, _, _ in frames})
            if not watched:
                return
            poked = {run_id for run_id, event, _ in frames if event == POKE and run_id in watched}
            if poked:
                await self.ws.push(poked)
            deltas = _coalesce([f for f in live_frames_to_post(frames) if f[0] in watched])
            if deltas:
                await self.ws.post_deltas(deltas)
        except Exception as exc:  # best effort: the maintenance function catches the watchers up
            log.warning("WebSocket watchers of %d run(s) not pushed: %s", len({f[0] for f in frames}), exc)

    async def _watched_runs(self, runs: set[str]) -> set[str]:
        now = time.monotonic()
        def fresh(run_id: str) -> bool:
            seen = self._watched.get(run_id)
            return seen is not None and now - seen[1] <= (self.presence_ttl_s if seen[0] else self.absence_ttl_s)

        stale = {r for r in runs if not fresh(r)}
        if stale:
            keys = {presence_key(r): r for r in stale}
            async with self.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT DISTINCT objid::int8 AS key FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::oid"
                    " AND objsubid = 2 AND objid = ANY(%s::oid[])", (PRESENCE_NS, list(keys)))
                held = {int(row["key"]) for row in await cur.fetchall()}
            for key, run_id in keys.items():
                self._watched[run_id] = (key in held, now)
            if len(self._watched) > 4096:  # a long-lived environment: forget runs not asked about lately
                self._watched = {r: v for r, v in self._watched.items() if now - v[1] <= self.presence_ttl_s}
        return {r for r in runs if self._watched[r][0]}


def install_relay(rt: Runtime, *, notify: bool = True, ws: WsPusher | None = None) -> RelayHub:
    """The runtime's hub replaced by a relay wherever the engine's parts hold it (the engine's
    deltas and commits, steering's appended inputs, the waker's wake-ups). The core builds one
    hub in `Runtime.__post_init__` and has no parameter for it; a `hub=` argument of
    `Runtime.open` would make this a plain argument."""
    inner = rt.hub
    relay = RelayHub(inner, rt.pool, notify=notify, ws=ws)
    for holder in (rt, rt.engine, rt.engine.steering, rt.waker):
        if getattr(holder, "hub", None) is inner:
            holder.hub = relay
    return relay


class WatchedHub(RunEventHub):
    """The stream function's hub: counts each run's readers; a change wakes the listener."""

    def __init__(self) -> None:
        super().__init__()
        self.readers: Counter[str] = Counter()
        self.changed = asyncio.Event()

    @contextlib.contextmanager
    def subscribe(self, run_id: str) -> Iterator[LiveSubscription]:
        self.readers[run_id] += 1
        self.changed.set()
        try:
            with super().subscribe(run_id) as sub:
                yield sub
        finally:
            self.readers[run_id] -= 1
            if self.readers[run_id] <= 0:
                del self.readers[run_id]
            self.changed.set()


class LiveListener:
    """The stream function's connection: LISTEN, presence locks for the runs being read, and each
    notification handed to the hub. Reconnects after an error; `run` ends only when cancelled."""

    def __init__(self, hub: WatchedHub, database_url: str, *, poll_s: float = 0.1) -> None:
        self.hub = hub
        self.database_url = database_url
        self.poll_s = poll_s
        #: runs whose presence lock is held on the current connection
        self.locked: set[str] = set()
        self.ready = asyncio.Event()  # set once LISTEN is in place (tests)
        self.received = 0

    async def run(self) -> None:
        import psycopg

        backoff = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn:
                    self.locked = set()
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.ready.set()
                    backoff = 0.5
                    while True:
                        await self._sync_locks(conn)
                        async for note in conn.notifies(timeout=self.poll_s):
                            self._deliver(note.payload)
                            if self.hub.changed.is_set():
                                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.ready.clear()
                log.warning("live listener: %s; reconnecting in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _sync_locks(self, conn: Any) -> None:
        self.hub.changed.clear()
        want = set(self.hub.readers)
        for run_id in want - self.locked:
            await conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", (PRESENCE_NS, presence_key(run_id)))
            self.locked.add(run_id)
        for run_id in self.locked - want:
            await conn.execute("SELECT pg_advisory_unlock_shared(%s, %s)", (PRESENCE_NS, presence_key(run_id)))
            self.locked.discard(run_id)

    def _deliver(self, payload: str) -> None:
        frame = decode(payload)
        if frame is None:
            log.warning("live listener: a malformed notification was ignored")
            return
        run_id, event, data = frame
        if run_id not in self.hub.readers:
            return
        self.received += 1
        if event == POKE:
            self.hub.notify(run_id)
        else:
            self.hub.publish(run_id, event, data)


def live_frames_to_post(frames: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    """Of a flush's coalesced frames, the deltas worth posting: a run's deltas queued before its
    last commit poke belong to a turn that commit stored (its `text` event carries them)."""
    last_poke = {run_id: i for i, (run_id, event, _) in enumerate(frames) if event == POKE}
    return [(run_id, event, data) for i, (run_id, event, data) in enumerate(frames)
            if event != POKE and i > last_poke.get(run_id, -1)]
