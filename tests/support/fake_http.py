"""A tiny HTTP/1.1 server on 127.0.0.1 (ephemeral port) for the vendor fakes.

It speaks real HTTP over a real socket — keep-alive, Content-Length bodies, chunked streaming —
and can misbehave the ways a network does: wait before answering, pause between chunks, or
close the connection in the middle of a streamed body.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 529: "Site Overloaded"}  # fmt: skip


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    stream: bool = False  # Transfer-Encoding: chunked, one HTTP chunk per item
    first_byte_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    cut_after: int | None = None  # close the connection after this many chunks (body left incomplete)

    @classmethod
    def json(cls, status: int, doc: Any, headers: dict[str, str] | None = None) -> Reply:
        return cls(status, {"content-type": "application/json", **(headers or {})}, [json.dumps(doc).encode()])


Handler = Callable[[Request], Reply | Awaitable[Reply]]


class FakeHTTPServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self.errors: list[str] = []  # handler crashes (answered 500)
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._conns):  # idle keep-alive connections: EOF ends their loops
                writer.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def __aenter__(self) -> FakeHTTPServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while True:
                req = await _read_request(reader)
                if req is None:
                    return
                self.requests.append(req)
                try:
                    reply = self.handler(req)
                    if inspect.isawaitable(reply):
                        reply = await reply
                except Exception as exc:  # a bug in a fake must show up in the test, not as a hang
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    reply = Reply.json(500, {"error": {"message": f"fake vendor crashed: {exc}"}})
                if not await _write_reply(writer, reply):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            self._conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        h = (await reader.readline()).decode("latin-1").rstrip("\r\n")
        if not h:
            break
        name, _, value = h.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    return Request(method, target, headers, body)


async def _write_reply(writer: asyncio.StreamWriter, reply: Reply) -> bool:
    """Write one response; False when the connection was deliberately cut."""
    if reply.first_byte_delay_s:
        await asyncio.sleep(reply.first_byte_delay_s)
    head = [f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Status')}"]
    headers = {k.lower(): v for k, v in reply.headers.items()}
    if reply.stream:
        headers["transfer-encoding"] = "chunked"
    else:
        headers["content-length"] = str(sum(len(c) for c in reply.chunks))
    head += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if not reply.stream:
        writer.write(b"".join(reply.chunks))
        await writer.drain()
        return True
    await writer.drain()
    for i, chunk in enumerate(reply.chunks):
        if reply.cut_after is not None and i >= reply.cut_after:
            writer.close()  # mid-body: the chunked encoding is never terminated
            return False
        if reply.chunk_delay_s and i:
            await asyncio.sleep(reply.chunk_delay_s)
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
    if reply.cut_after is not None:
        writer.close()
        return False
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True
