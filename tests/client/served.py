"""`treadle serve` as a real subprocess on loopback for the client and console tests (one per test
module: a fresh database and a config of agents that ask, chat and run slowly), and a loopback TCP
proxy in front of it that can drop connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support import db
from tests.support.e2e import ServerProcess, write_config

AGENTS = {
    "echo": {"provider": "mock", "model": "echo"},
    # calls Context three times (300 ms a call), then answers: slow enough to cut mid-stream
    "slow": {"provider": "mock", "model": "tool-caller", "tools": ["Context"],
             "mock": {"tool_calls": 3, "latency_ms": 300}},
    # asks a question with options, then answers
    "asker": {"provider": "mock", "model": "script", "tools": ["Interruption"],
              "mock": {"script": [
                  {"tool": "Interruption", "input": {"op": "ask", "question": "Which colour?",
                                                     "options": ["red", "blue"]}},
                  {"text": "Thanks for answering."},
              ]}},
    "chat": {"provider": "mock", "model": "echo"},
    # parked on a sub-agent run that asks a human (tests/console: what a parent waits on, recursively)
    "boss": {"provider": "mock", "model": "script", "tools": ["Agent"],
             "mock": {"script": [{"tool": "Agent", "input": {"op": "spawn", "name": "asker", "prompt": "ask them"}},
                                 {"text": "The child was answered."}]}},
}


@contextlib.asynccontextmanager
async def served(workdir: Path, name: str) -> AsyncIterator[ServerProcess]:
    admin = db.server_url()
    url = db.create_database(admin, name)
    config = write_config(workdir / "treadle.yaml", AGENTS)
    srv = ServerProcess(database_url=url, config_path=config, workdir=workdir, name=name)
    srv.start()
    try:
        await srv.wait_ready(90)
        yield srv
    finally:
        srv.stop()
        db.drop_database(admin, url)


class DroppingProxy:
    """A loopback TCP proxy to `upstream` that can drop connections: `drop_next(n)` closes the
    next n accepted connections before a byte is forwarded; `cut()` closes every open one."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.to_drop = 0
        self.dropped = 0
        self.to_lose = 0
        self.lost = 0
        self.cuts = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    def drop_next(self, n: int) -> None:
        """Drop the next n connections; the open ones are closed first (the client's pooled
        keep-alive connection would otherwise carry the next request)."""
        for w in list(self._open):
            w.transport.abort()
        self._open.clear()
        self.to_drop = n

    def lose_answers(self, n: int) -> None:
        """The next n connections reach the server, but its answer is cut off before the client
        gets a byte of it (the server did the work; the client cannot know)."""
        self.drop_next(0)
        self.to_lose = n

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.transport.abort()

    def cut(self) -> None:
        for w in list(self._open):
            w.transport.abort()
        self.cuts += bool(self._open)
        self._open.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._forward(reader, writer)
        finally:
            self._handlers.discard(task)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.to_drop > 0:
            self.to_drop -= 1
            self.dropped += 1
            with contextlib.suppress(Exception):
                await reader.read(1)  # the request has started: it is lost mid-way
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._open.update((writer, up_writer))
        if self.to_lose > 0:
            self.to_lose -= 1
            self.lost += 1
            forward = asyncio.ensure_future(self._pipe(reader, up_writer))
            with contextlib.suppress(Exception):
                await up_reader.read(1)  # the server answers …
            writer.transport.abort()  # … and the client never hears it
            up_writer.transport.abort()
            await asyncio.gather(forward, return_exceptions=True)
            return

        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._open.discard(writer)
        self._open.discard(up_writer)
