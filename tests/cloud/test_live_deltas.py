"""Live text deltas in the cloud shape (treadle_cloud/live.py): the worker's engine relays its
deltas and commit pokes through Postgres NOTIFY to the stream function's readers.

- the relay and the listener on a real Postgres: frames of a watched run arrive (coalesced,
  long text cut and whole again), frames of a run nobody watches are never sent;
- end to end: the stream function as a real process, the worker's real handler module stepping
  a run whose model is a loopback fake of Anthropic's streaming API, and a real HTTP client that
  reads the answer's deltas before the worker's invocation has returned."""

from __future__ import annotations

import asyncio
import json
import queue as queues
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml

from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN
from tests.support.streamfn import stream_server
from tests.support.vendors.anthropic import FakeAnthropic
from tests.support.vendors.base import text
from treadle.engine.hub import LiveFrame, RunEventHub
from treadle.store.db import Pool, open_pool
from treadle.testing import until
from treadle_cloud.live import PRESENCE_NS, TEXT_PER_NOTIFY, LiveListener, RelayHub, WatchedHub, presence_key

AUTH = {"authorization": f"Bearer {API_TOKEN}"}
KEY_ENV = "TREADLE_TEST_LIVE_ANTHROPIC_KEY"


@pytest.fixture
async def pool(cloud_db: str) -> AsyncIterator[Pool]:
    p = await open_pool(cloud_db, 2, name="live-test")
    yield p
    await p.close()


@pytest.fixture
async def listening(cloud_db: str) -> AsyncIterator[tuple[WatchedHub, LiveListener]]:
    hub = WatchedHub()
    listener = LiveListener(hub, cloud_db, poll_s=0.02)
    task = asyncio.create_task(listener.run())
    await asyncio.wait_for(listener.ready.wait(), 10)
    yield hub, listener
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def delta(run_id: str, piece: str, iteration: int = 1) -> tuple[str, str, dict[str, Any]]:
    return run_id, "text_delta", {"text": piece, "iteration": iteration, "attempt": 0, "provider": "p"}


async def test_a_watched_runs_frames_arrive_and_an_unwatched_runs_are_never_sent(
    pool: Pool, listening: tuple[WatchedHub, LiveListener]
) -> None:
    hub, listener = listening
    relay = RelayHub(RunEventHub(), pool, presence_ttl_s=0.0, absence_ttl_s=0.0)
    watched, unwatched = f"r_{secrets.token_hex(6)}", f"r_{secrets.token_hex(6)}"
    with hub.subscribe(watched) as sub:
        await until(lambda: watched in listener.locked)  # the presence lock is held
        for piece in ("Hel", "lo, ", "world"):
            relay.publish(*delta(watched, piece))
        relay.publish(*delta(unwatched, "nobody reads this"))
        relay.notify(watched)  # a commit
        await relay.flush()
        assert (relay.sent, relay.unwatched) == (2, 1)  # one coalesced delta and one poke; nothing for the other
        frames: list[LiveFrame] = []

        def drained() -> list[LiveFrame]:
            frames.extend(sub.drain())
            return frames

        await until(drained)
        assert [(f.event, f.data) for f in frames] == [
            ("text_delta", {"text": "Hello, world", "iteration": 1, "attempt": 0, "provider": "p"})]
        await until(lambda: listener.received == 2)  # the poke woke the reader too

        long = "".join(chr(0x4E00 + i % 500) for i in range(3 * TEXT_PER_NOTIFY + 7))  # 3 bytes each in UTF-8
        relay.publish(*delta(watched, long, iteration=2))
        await relay.flush()
        got: list[LiveFrame] = []

        def whole_again() -> bool:
            got.extend(sub.drain())
            return "".join(f.data["text"] for f in got) == long

        await until(whole_again)
        assert len(got) == 4 and {f.data["iteration"] for f in got} == {2}
    # the reader left: the lock is released and nothing more is sent
    await until(lambda: watched not in listener.locked)
    sent = relay.sent
    relay.publish(*delta(watched, "late"))
    await relay.flush()
    assert relay.sent == sent


async def test_without_a_listener_the_relay_sends_nothing(pool: Pool) -> None:
    relay = RelayHub(RunEventHub(), pool)
    run_id = f"r_{secrets.token_hex(6)}"
    relay.publish(*delta(run_id, "x"))
    relay.notify(run_id)
    await relay.flush()
    assert (relay.sent, relay.unwatched) == (0, 2)


# -- end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def anthropic() -> Iterator[FakeAnthropic]:
    """A loopback fake of Anthropic's streaming Messages API, on an event loop of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fake = FakeAnthropic()
    asyncio.run_coroutine_threadsafe(fake.server.start(), loop).result(timeout=10)
    yield fake
    asyncio.run_coroutine_threadsafe(fake.server.close(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory, anthropic: FakeAnthropic) -> Path:
    path = tmp_path_factory.mktemp("livecfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({
        "providers": {"fake": {"driver": "anthropic", "base_url": anthropic.server.url, "api_key_env": KEY_ENV}},
        "agents": {"talker": {"provider": "fake", "model": "claude-sonnet-4-5"}},
    }))
    return path


@pytest.fixture
def stream_url(cloud_env: dict[str, str], anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(KEY_ENV, anthropic.key)
    with stream_server({**cloud_env, KEY_ENV: anthropic.key}) as url:
        yield url


def read_all_frames(url: str, run_id: str, out: queues.Queue[tuple[float, dict[str, Any]]]) -> None:
    """Every SSE frame as it arrives (live ones have no id)."""
    with httpx.stream("GET", f"{url}/v1/runs/{run_id}/stream", headers={**AUTH, "accept": "text/event-stream"},
                      timeout=httpx.Timeout(60.0)) as resp:
        assert resp.status_code == 200
        fields: dict[str, str] = {}
        for line in resp.iter_lines():
            if line == "":
                if "event" in fields:
                    out.put((time.monotonic(), {"id": fields.get("id"), "event": fields["event"],
                                                "data": json.loads(fields.get("data") or "null")}))
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
    out.put((time.monotonic(), {"event": "<end>"}))


def test_a_streaming_client_reads_the_answer_as_the_model_writes_it(
    stream_url: str, sqs: Any, queue: dict[str, str], anthropic: FakeAnthropic, cloud_db: str
) -> None:
    pieces = ["The ", "answer ", "comes ", "piece ", "by ", "piece."]
    anthropic.then(text(*pieces, chunk_delay_s=0.3))  # the vendor streams for ~1.5 s
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        resp = api.invoke(http_event("POST", "/v1/runs", headers=AUTH, body={"agent": "talker", "prompt": "hi"}))
        assert resp["statusCode"] in (200, 201, 202), resp
        run_id = json.loads(resp["body"])["run_id"]
        frames: queues.Queue[tuple[float, dict[str, Any]]] = queues.Queue()
        threading.Thread(target=read_all_frames, args=(stream_url, run_id, frames), daemon=True).start()
        while frames.get(timeout=30)[1]["event"] != "user_input":
            pass  # the reader is subscribed once it has sent the stored events
        with psycopg.connect(cloud_db, autocommit=True) as conn:  # and its presence lock is held
            deadline = time.monotonic() + 30
            while not conn.execute("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::oid"
                                   " AND objid = %s::oid AND objsubid = 2",
                                   (PRESENCE_NS, presence_key(run_id))).fetchone():
                assert time.monotonic() < deadline, "the stream function never took the presence lock"
                time.sleep(0.02)
        returned = threading.Event()
        returned_at: list[float] = []
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], batch_size=1)

        def step() -> None:
            assert esm.poll_once(wait_s=1) == 1
            returned_at.append(time.monotonic())
            returned.set()

        stepping = threading.Thread(target=step, daemon=True)
        stepping.start()
        seen: list[dict[str, Any]] = []
        first_delta_while_stepping: bool | None = None
        delta_at: list[float] = []
        while not seen or seen[-1]["event"] != "<end>":
            t, frame = frames.get(timeout=30)
            if frame["event"] == "text_delta":
                if first_delta_while_stepping is None:
                    first_delta_while_stepping = not returned.is_set()
                delta_at.append(t)
            seen.append(frame)
        stepping.join(timeout=30)
        assert returned.is_set()
        assert not anthropic.violations
        events = [f["event"] for f in seen]
        deltas = [f["data"]["text"] for f in seen if f["event"] == "text_delta"]
        assert deltas and "".join(deltas) == "".join(pieces)  # the whole answer, live
        assert first_delta_while_stepping is True  # read while the worker's invocation was still running
        assert events.index("text") > events.index("text_delta")  # the stored text follows its deltas
        assert all(f.get("id") is None for f in seen if f["event"] == "text_delta")  # never stored
        assert events[-2:] == ["done", "<end>"]
        print(f"\nlive deltas: {len(deltas)} frames for {len(pieces)} pieces; the first read"
              f" {1000 * (returned_at[0] - delta_at[0]):.0f} ms before the worker's invocation returned")
    finally:
        api.close()
        worker.close()


def test_the_listener_goes_past_the_proxy_when_told() -> None:
    from psycopg.conninfo import conninfo_to_dict

    from treadle_cloud.live import listener_url

    url = "postgresql://treadle:pw@proxy.example:5432/treadle?sslmode=require"
    assert listener_url(url, None) == url
    direct = conninfo_to_dict(listener_url(url, "cluster.example"))
    assert {k: direct[k] for k in ("host", "user", "password", "dbname", "sslmode")} == {
        "host": "cluster.example", "user": "treadle", "password": "pw", "dbname": "treadle", "sslmode": "require"}


async def test_the_relay_replaces_the_hub_wherever_the_engine_holds_it(cloud_db: str) -> None:
    from treadle.testing import open_test_runtime
    from treadle_cloud.live import install_relay

    async with open_test_runtime({"echo": {"model": "echo"}}, database_url=cloud_db) as (rt, _disp):
        inner = rt.hub
        relay = install_relay(rt)
        assert relay.inner is inner
        assert rt.hub is relay and rt.engine.hub is relay and rt.engine.steering.hub is relay and rt.waker.hub is relay
