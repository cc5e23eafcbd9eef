"""The typed client against a real `treadle serve` on loopback: the sync and the async client
(one implementation), every resource family, typed answers and ApiError codes, TREADLE_URL and
TREADLE_TOKEN from the environment, retries when a proxy drops connections, and a run stream
that resumes after the last seq when its connection is cut."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.client.served import DroppingProxy
from tests.support.e2e import ServerProcess
from treadle.client import ApiError, AsyncTreadle, Retry, Treadle, models
from treadle.client.generate import TARGET, render


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    assert TARGET.read_text() == render(), "run `python -m treadle.client.generate`"


def test_the_sync_client_runs_and_reads(server: ServerProcess) -> None:
    with Treadle(server.url) as tl:
        assert tl.health().ok
        started = tl.runs.start("echo", "hello there", user_id="u1", metadata={"k": "v"})
        assert isinstance(started, models.RunCreated) and started.created
        run = tl.runs.wait(started.run_id)
        assert isinstance(run, models.Run) and run.status == "completed" and run.status in models.TERMINAL
        assert run.metadata == {"k": "v"} and run.user_id == "u1"
        page = tl.runs.events(started.run_id)
        types = [e.type for e in page.events]
        assert types[0] == "user_input" and types[-1] == "done"
        assert [e.seq for e in page.events] == list(range(1, len(page.events) + 1))
        texts = [e.model_dump()["text"] for e in page.events if e.type == "text"]
        assert texts == ["hello there"]
        listed = tl.runs.list(agent="echo", user_id="u1")
        assert started.run_id in [r.run_id for r in listed.runs]
        assert all(r.agent == "echo" for r in listed.runs)
        assert started.run_id in [r.run_id for r in tl.runs.iterate(status="completed", page_size=1)]
        with pytest.raises(ApiError) as err:
            tl.runs.get("r_nope")
        assert (err.value.status, err.value.code) == (404, "run_not_found")


async def test_the_async_client_reads_the_environment(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_URL", server.url)
    monkeypatch.setenv("TREADLE_TOKEN", "tok-from-env")
    async with AsyncTreadle() as tl:
        assert tl.url == server.url and tl.http.headers["Authorization"] == "Bearer tok-from-env"
        assert (await tl.health()).ok
        assert (await tl.whoami()).tenant_id and (await tl.me()).tenant_id


async def test_a_question_is_answered_and_an_interactive_run_takes_input(server: ServerProcess) -> None:
    async with AsyncTreadle(server.url) as tl:
        run_id = (await tl.runs.start("asker", "go", user_id="alice")).run_id
        async for ev in tl.runs.stream(run_id):
            if ev.event == "interruption_pending":
                break
        pending = (await tl.runs.interrupts(run_id, status="pending")).interrupts
        assert [(q.question, q.options) for q in pending] == [("Which colour?", ["red", "blue"])]
        inbox = await tl.runs.user_interrupts("alice")
        assert [q.interrupt_id for q in inbox.interrupts] == [pending[0].interrupt_id]
        done = await tl.runs.answer(run_id, pending[0].interrupt_id, "blue")
        assert done.status == "resolved"
        final = await tl.runs.wait(run_id)
        assert final.status == "completed"

        chat = (await tl.runs.start("chat", "first", interactive=True)).run_id
        async for ev in tl.runs.stream(chat):
            if ev.event == "awaiting_input":
                break
        sent = await tl.runs.input(chat, "second")
        assert sent.delivered
        texts: list[str] = []
        async for ev in tl.runs.stream(chat):
            if ev.event == "text":
                texts.append(ev.data["text"])
            if ev.event == "awaiting_input" and len(texts) == 2:
                break
        assert texts == ["first", "second"]
        cancelled = await tl.runs.cancel(chat)
        assert cancelled.cancel_requested
        assert (await tl.runs.wait(chat)).status == "cancelled"


async def test_memory_channels_defs_schedules_hooks_and_webhooks(server: ServerProcess) -> None:
    async with AsyncTreadle(server.url) as tl:
        assert {s.name for s in (await tl.memory.scopes()).scopes} == {"agent", "user", "tenant"}
        await tl.memory.put("user", "bob", "colour", {"fav": "blue"})
        assert (await tl.memory.get("user", "bob", "colour")).value == {"fav": "blue"}
        assert (await tl.memory.list("user", "bob", prefix="col")).count == 1
        await tl.memory.put("tenant", "_", "motd", "hi")
        assert (await tl.memory.get("tenant", "_", "motd")).value == "hi"
        assert (await tl.memory.delete("user", "bob", "colour")).deleted
        with pytest.raises(ApiError) as err:
            await tl.memory.get("user", "bob", "colour")
        assert err.value.code == "not_found"
        with pytest.raises(ApiError) as err:
            await tl.memory.search("user", "blue", "bob")
        assert err.value.status == 501  # no embedder configured: the server's code, passed on

        channel = await tl.channels.create("news", semantic="broadcast")
        assert isinstance(channel, models.Channel) and channel.semantic == "broadcast"
        assert "news" in [c.name for c in (await tl.channels.list()).channels]
        await tl.channels.publish("news", {"n": 1})
        assert (await tl.channels.wait_for(["news"])).satisfied
        assert [m.value for m in (await tl.channels.peek("news")).messages] == [{"n": 1}]
        took = await tl.channels.subscribe("news", consumer="me")
        assert [m.value for m in took.messages] == [{"n": 1}]
        assert (await tl.channels.ack("news", took.next_cursor or "0", consumer="me")).acked
        assert (await tl.channels.delete("news")).deleted

        assert set(await tl.agentdefs.names()) >= {"echo", "asker"}
        created = await tl.skilldefs.op("create", name="style", overlay={"body": "Be brief."})
        assert (created.model_extra or {})["name"] == "style"
        assert "style" in [d["name"] for d in (await tl.skilldefs.op("list")).model_dump()["defs"]]
        assert (await tl.schedules.list()).schedules == []
        assert (await tl.hooks.list()).hooks == []
        with pytest.raises(ApiError) as err:
            await tl.webhooks.deliveries("nope")
        assert err.value.status == 404
        with pytest.raises(ApiError) as err:
            await tl.schedules.state("nope")
        assert err.value.code == "unknown_schedule"


async def test_requests_are_retried_when_the_connection_drops(server: ServerProcess) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    async with DroppingProxy(port) as proxy, AsyncTreadle(proxy.url, retry=Retry(attempts=4, backoff=0.01)) as tl:
        proxy.drop_next(2)
        assert (await tl.health()).ok  # a GET: retried twice
        assert proxy.dropped == 2
        proxy.drop_next(2)
        started = await tl.runs.start("echo", "once", metadata={"marker": "retry"})  # POST + Idempotency-Key
        assert proxy.dropped == 4
        await tl.runs.wait(started.run_id)
        assert (await tl.memory.put("tenant", "_", "x", 1)).scope_id == "_"
        # the answer of a start is lost after the server created the run: the retry carries the
        # same Idempotency-Key and gets that run back, not a second one
        proxy.lose_answers(1)
        again = await tl.runs.start("echo", "twice?", metadata={"marker": "lost"})
        assert proxy.lost == 1 and not again.created
        page = await tl.runs.list(agent="echo")
        assert [r.run_id for r in page.runs if (r.metadata or {}).get("marker") == "retry"] == [started.run_id]
        assert [r.run_id for r in page.runs if (r.metadata or {}).get("marker") == "lost"] == [again.run_id]
        # a POST without an idempotency key may have reached the server: it is never sent twice
        await tl.channels.create("once")
        proxy.drop_next(1)
        with pytest.raises(httpx.TransportError):
            await tl.channels.publish("once", {"n": 1})
        assert (await tl.channels.peek("once")).messages == []


async def test_a_cut_stream_resumes_after_the_last_seq(server: ServerProcess) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    async with DroppingProxy(port) as proxy, AsyncTreadle(proxy.url, retry=Retry(attempts=4, backoff=0.01)) as tl:
        run_id = (await tl.runs.start("slow", "count")).run_id
        ids: list[int] = []
        events: list[str] = []
        async for ev in tl.runs.stream(run_id):
            if ev.id is None:
                continue
            ids.append(ev.id)
            events.append(ev.event)
            if ev.event == "tool_result" and proxy.cuts < 2:
                proxy.cut()  # mid-run: the next event is still to come
        assert proxy.cuts == 2
        assert ids == list(range(1, ids[-1] + 1)), "no gap and no repeat across the cuts"
        assert events.count("done") == 1 and events[-1] == "done"
        assert events.count("tool_result") == 3
        stored = await tl.runs.events(run_id)
        assert [e.seq for e in stored.events] == ids


def test_the_sync_stream_resumes_too(server: ServerProcess) -> None:
    async def scenario() -> tuple[list[int], int]:
        port = int(server.url.rsplit(":", 1)[1])
        async with DroppingProxy(port) as proxy:
            def consume() -> list[int]:
                with Treadle(proxy.url, retry=Retry(attempts=4, backoff=0.01)) as tl:
                    run_id = tl.runs.start("slow", "count").run_id
                    seen: list[int] = []
                    for ev in tl.runs.stream(run_id):
                        if ev.id is not None:
                            seen.append(ev.id)
                        if ev.event == "tool_result" and proxy.cuts == 0:
                            loop.call_soon_threadsafe(proxy.cut)
                    return seen

            loop = asyncio.get_running_loop()
            seen = await asyncio.to_thread(consume)
            return seen, proxy.cuts

    seen, cuts = asyncio.run(scenario())
    assert cuts == 1
    assert seen == list(range(1, seen[-1] + 1))


async def test_a_streaming_start_whose_answer_is_lost_is_sent_again_not_twice(server: ServerProcess) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    async with DroppingProxy(port) as proxy, AsyncTreadle(proxy.url, retry=Retry(attempts=4, backoff=0.01)) as tl:
        proxy.lose_answers(1)
        frames = [ev async for ev in tl.runs.start_streaming("echo", "lost once", metadata={"marker": "sse-lost"})]
        assert proxy.lost == 1
        assert [f.event for f in frames[:2]] == ["session", "agent"]  # loomcycle's first frames, once
        ids = [f.id for f in frames if f.id is not None]
        assert ids == list(range(1, len(ids) + 1)) and frames[-1].event == "done"
        page = await tl.runs.list(agent="echo")
        assert len([r for r in page.runs if (r.metadata or {}).get("marker") == "sse-lost"]) == 1


async def test_a_run_forked_in_replay_mode_gets_the_recorded_answers(server: ServerProcess) -> None:
    async with AsyncTreadle(server.url) as tl:
        started = await tl.runs.start("slow", "what time is it?")
        await tl.runs.wait(started.run_id)
        original = [e.model_dump() for e in (await tl.runs.events(started.run_id)).events]
        fork = await tl.runs.fork(started.run_id, 1, mode="replay", idempotency_key="fork-" + started.run_id)
        assert isinstance(fork, models.ForkResult) and fork.mode == "replay" and fork.forked_from == started.run_id
        again = await tl.runs.fork(started.run_id, 1, mode="replay", idempotency_key="fork-" + started.run_id)
        assert again.run_id == fork.run_id  # the same key: the same fork
        assert (await tl.runs.wait(fork.run_id)).status == "completed"
        forked = [e.model_dump() for e in (await tl.runs.events(fork.run_id)).events]
        results = [e for e in forked if e["type"] == "tool_result"]
        recorded = [e for e in original if e["type"] == "tool_result"]
        assert [e["text"] for e in results] == [e["text"] for e in recorded]  # the clock as the original read it
        assert [e["replayed"]["seq"] for e in results] == [e["seq"] for e in recorded]
