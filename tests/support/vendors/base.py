"""What every fake vendor shares: a script of model turns / failures, request recording, and
the rule that a request the real API would reject is answered with that API's 400 (and noted in
`violations`, which every test asserts empty)."""

from __future__ import annotations

import json
import secrets
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_http import FakeHTTPServer, Reply, Request


@dataclass
class ToolCall:
    name: str
    input: dict[str, Any]
    id: str | None = None


@dataclass
class Turn:
    """The fake model's next answer."""

    text: list[str] = field(default_factory=list)  # streamed in these pieces
    tools: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None  # Anthropic thinking / DeepSeek reasoning_content / Gemini thought text
    signature: bool = True  # Gemini: sign the turn (thoughtSignature)
    cut_after: int | None = None  # close the connection after this many SSE events
    malformed_at: int | None = None  # replace this SSE event with broken JSON
    error_at: int | None = None  # replace this SSE event with the vendor's in-stream error (then stop)
    chunk_delay_s: float = 0.0
    first_byte_delay_s: float = 0.0
    stop: str | None = None  # override the vendor's stop/finish reason


@dataclass
class Fail:
    """An HTTP error exactly as the vendor documents it."""

    kind: str  # rate_limit | server | overloaded | auth | context | unknown_model | bad_request
    retry_after: str | None = None


def text(*pieces: str, **kw: Any) -> Turn:
    return Turn(text=list(pieces), **kw)


def tools(*calls: tuple[str, dict[str, Any]], text: tuple[str, ...] = (), **kw: Any) -> Turn:
    return Turn(text=list(text), tools=[ToolCall(n, i) for n, i in calls], **kw)


def sse(event: str | None, data: Any) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {body}\n\n".encode()


def new_id(prefix: str, n: int = 12) -> str:
    return prefix + secrets.token_hex(n)


class VendorFake:
    """Subclasses: `route(req)`, `authorized(req)`, `auth_reply(req)`, `validate(req, body)`,
    `fail_reply(fail, req)`, `turn_reply(turn, body, req)`, `bad_request(msg)`."""

    name = "vendor"

    def __init__(self, key: str = "test-key-0123456789abcdef") -> None:
        self.key = key
        self.script: deque[Turn | Fail] = deque()
        self.calls: list[dict[str, Any]] = []  # JSON bodies of the model calls that reached the script
        self.violations: list[str] = []
        self.server = FakeHTTPServer(self.handle)

    def then(self, *items: Turn | Fail) -> VendorFake:
        self.script.extend(items)
        return self

    @property
    def url(self) -> str:
        return self.server.url

    async def __aenter__(self) -> VendorFake:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()

    def handle(self, req: Request) -> Reply:
        try:
            return self._handle(req)
        except Exception as exc:  # a bug in the fake fails the test instead of hiding
            self.violations.append(f"fake vendor crashed: {type(exc).__name__}: {exc}")
            return Reply.json(500, {"error": {"message": "fake vendor crashed"}})

    def accept(self, req: Request) -> tuple[Reply | None, Any]:
        """What every fake does first: its extra routes, the key, the body's validity (a
        violation is recorded and answered 400); else `(None, body)`, the body recorded in
        `calls`."""
        other = self.route(req)
        if other is not None:
            return other, None
        if not self.authorized(req):
            return self.auth_reply(req), None
        body = req.json()
        problems = self.validate(req, body)
        if problems:
            self.violations.extend(problems)
            return self.bad_request("; ".join(problems)), None
        self.calls.append(body)
        return None, body

    def _handle(self, req: Request) -> Reply:
        refused, body = self.accept(req)
        if refused is not None:
            return refused
        if not self.model_ok(req, body):
            return self.fail_reply(Fail("unknown_model"), req)
        if not self.script:
            self.violations.append("unexpected model call: the script is empty")
            return self.fail_reply(Fail("server"), req)
        item = self.script.popleft()
        if isinstance(item, Fail):
            return self.fail_reply(item, req)
        return self.turn_reply(item, body, req)

    # -- hooks -------------------------------------------------------------------------------------

    def route(self, req: Request) -> Reply | None:
        return None

    def authorized(self, req: Request) -> bool:
        return True

    def model_ok(self, req: Request, body: Any) -> bool:
        return True

    def auth_reply(self, req: Request) -> Reply:
        raise NotImplementedError

    def validate(self, req: Request, body: Any) -> list[str]:
        return []

    def fail_reply(self, fail: Fail, req: Request) -> Reply:
        raise NotImplementedError

    def turn_reply(self, turn: Turn, body: Any, req: Request) -> Reply:
        raise NotImplementedError

    def bad_request(self, message: str) -> Reply:
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------------------------

    def stream_error(self) -> bytes:
        """The vendor's error event inside a 200 stream (an overload, as vendors send them)."""
        raise NotImplementedError

    def stream_reply(self, events: list[bytes], turn: Turn, headers: dict[str, str]) -> Reply:
        if turn.malformed_at is not None:
            events = list(events)
            events[turn.malformed_at] = b'data: {"broken": \n\n'
        if turn.error_at is not None:
            events = [*events[: turn.error_at], self.stream_error()]
        return Reply(
            200,
            {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", **headers},
            events,
            stream=True,
            chunk_delay_s=turn.chunk_delay_s,
            first_byte_delay_s=turn.first_byte_delay_s,
            cut_after=turn.cut_after,
        )
