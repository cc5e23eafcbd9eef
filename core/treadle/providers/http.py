"""What every wire driver shares: a pooled httpx client per provider, the SSE reader, timeouts
(first byte / idle / total), the concurrency cap, HTTP error classification and key redaction.

A driver builds the request body, hands `stream()` a consumer that turns SSE events into content
blocks, and says how its vendor spells errors (`parse_error`). Everything that can go wrong on
the way becomes a `ProviderError` subclass (see `treadle.errors`); nothing else escapes.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol
from urllib.parse import urlsplit

import httpx

from treadle.domain.content import Block
from treadle.errors import (
    ContextLengthExceeded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderProtocolError,
    RetryableProviderError,
    UnknownModel,
)
from treadle.providers.base import RUN_PROVIDER_KEYS, DeltaSink, ModelResponse, Usage
from treadle.security.network import is_loopback_host

log = logging.getLogger("treadle.providers")

# key shapes redacted from any provider text even when we do not hold that key
KEY_PATTERNS = re.compile(r"(sk-[A-Za-z0-9_\-*.]{8,}|AIza[0-9A-Za-z_\-]{20,}|Bearer\s+[A-Za-z0-9_\-.=]{8,})")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One configured provider, resolved against its driver's preset."""

    provider_id: str
    driver: str
    base_url: str
    api_key_env: str | None
    key_required: bool
    max_concurrent: int = 16
    connect_s: float = 10.0
    first_byte_s: float = 120.0
    idle_s: float = 120.0
    total_s: float = 900.0
    retries: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    #: a tenant credential by name (`api_key: ${credential.NAME}`): the run's value wins over the
    #: operator's key (providers/base.py RUN_PROVIDER_KEYS)
    credential: str | None = None


@dataclass(slots=True)
class VendorError:
    """What a driver read from an error body (or an in-stream error event)."""

    message: str
    code: str | None = None  # the vendor's own error type/code, e.g. "rate_limit_error"
    auth: bool = False
    context_exceeded: bool = False
    unknown_model: bool = False
    retryable: bool = False
    retry_after_s: float | None = None


class StreamConsumer(Protocol):
    @property
    def done(self) -> bool: ...  # the vendor's end-of-message marker was seen

    async def feed(self, event: str, data: str) -> None: ...


class StreamAssembly:
    """What every driver's stream consumer keeps while a response streams in: the model asked for
    and the one the vendor reports, usage, the text and reasoning so far (each delta forwarded to
    the live sink as it arrives), and the ModelResponse they make. Vendors subclass it with their
    own `feed`, `done` and `blocks`."""

    def __init__(self, driver: HttpDriver, model: str, on_delta: DeltaSink | None) -> None:
        self.driver = driver
        self.req_model = model
        self.on_delta = on_delta
        self.model = ""
        self.usage = Usage()
        self.text: list[str] = []
        self.reasoning: list[str] = []

    async def emit(self, kind: str, text: str) -> None:
        """Forward a live delta (`text` or `thinking`); nothing is stored here."""
        if self.on_delta is not None and text:
            await self.on_delta(kind, text)

    async def add_text(self, text: str) -> None:
        self.text.append(text)
        await self.emit("text", text)

    async def add_reasoning(self, text: str) -> None:
        self.reasoning.append(text)
        await self.emit("thinking", text)

    def response(self, content: list[Block], stop_reason: str, *, model: str | None = None,
                 **extra: Any) -> ModelResponse:
        return ModelResponse(content=content, stop_reason=stop_reason, usage=self.usage,
                             model=self.model or model or self.req_model, provider=self.driver.name, **extra)


def is_loopback_url(url: str) -> bool:
    return is_loopback_host(urlsplit(url).hostname or "")


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """`retry-after-ms` (OpenAI), else `retry-after` in seconds or as an HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def json_or_none(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


class HttpDriver:
    """Base of the HTTP drivers. Subclasses set `driver`, `reasoning_format`, implement `call`
    and `parse_error`."""

    driver: ClassVar[str] = ""
    reasoning_format: ClassVar[str | None] = None

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.name = endpoint.provider_id
        self._client: httpx.AsyncClient | None = None
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- credentials ---------------------------------------------------------------------------

    def run_key(self) -> str | None:
        """The run's tenant credential for this provider (its `api_key` reference), if resolved."""
        if self.endpoint.credential is None:
            return None
        keys = RUN_PROVIDER_KEYS.get()
        return keys.get(self.name) if keys else None

    def api_key(self) -> str | None:
        run_key = self.run_key()
        if run_key:
            return run_key
        env = self.endpoint.api_key_env
        return (os.environ.get(env) or None) if env else None

    def require_key(self, model: str) -> str | None:
        key = self.api_key()
        if key is None and (self.endpoint.key_required or self.endpoint.credential):
            where = f"environment variable {self.endpoint.api_key_env} is not set"
            if self.endpoint.credential:
                where = (f"the run's tenant holds no credential {self.endpoint.credential!r}"
                         + (f" and {where}" if self.endpoint.api_key_env else ""))
            raise ProviderAuthError(f"{self.name}: {where}", code="missing_api_key", details=self.details(model))
        return key

    def redact(self, text: str) -> str:
        key = self.api_key()
        if key and len(key) >= 4:
            label = f"credential.{self.endpoint.credential}" if key == self.run_key() else self.endpoint.api_key_env
            text = text.replace(key, f"[redacted:{label}]")
        return KEY_PATTERNS.sub("[redacted]", text)

    def details(self, model: str, **more: Any) -> dict[str, Any]:
        return {"provider": self.name, "model": model, **{k: v for k, v in more.items() if v is not None}}

    # -- transport --------------------------------------------------------------------------------

    def client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections and the semaphore belong to one event loop
            self._client, self._sem, self._loop = None, None, loop
        if self._client is None:
            ep = self.endpoint
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(connect=ep.connect_s, read=None, write=ep.connect_s, pool=None),
                limits=httpx.Limits(max_connections=ep.max_concurrent, max_keepalive_connections=ep.max_concurrent),
                trust_env=not is_loopback_url(ep.base_url),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _semaphore(self) -> asyncio.Semaphore:
        self.client()
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.endpoint.max_concurrent)
        return self._sem

    async def post_json(self, url: str, headers: dict[str, str], body: dict[str, Any], timeout_s: float) -> Any:
        """A small non-streaming call (metadata lookups); returns parsed JSON or None on any failure."""
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self.client().post(url, headers=headers, json=body)
            return resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, TimeoutError, ValueError):
            return None

    async def get_json(self, url: str, headers: dict[str, str], timeout_s: float) -> Any:
        """A small GET (the vendor's model list): its JSON, or ProviderError `provider_list_failed`
        naming the status or the failure (redacted)."""
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self.client().get(url, headers=headers)
            if resp.status_code != 200:
                reason = self.parse_error(resp.status_code, resp.content).message
                raise ProviderError(self.redact(f"{self.name}: HTTP {resp.status_code}: {reason}"),
                                    code="provider_list_failed")
            return resp.json()
        except TimeoutError:
            raise ProviderError(f"{self.name}: no answer within {timeout_s:g} s", code="provider_list_failed") from None
        except (httpx.HTTPError, ValueError) as exc:
            raise ProviderError(self.redact(f"{self.name}: {type(exc).__name__}: {exc}"),
                                code="provider_list_failed") from None

    def listed(self, doc: Any, items: str, field: str, prefix: str = "") -> list[str]:
        """`doc[items][*][field]` (without `prefix`): a model list page; ProviderError if it is not one."""
        rows = doc.get(items) if isinstance(doc, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get(field), str) for r in rows):
            raise ProviderError(f"{self.name}: the model list is not {{{items}: [{{{field}}}]}}",
                                code="provider_list_failed")
        return [str(r[field]).removeprefix(prefix) for r in rows]

    async def stream(
        self,
        url: str,
        headers: dict[str, str],
        body: dict[str, Any],
        consumer: StreamConsumer,
        *,
        model: str,
        first_byte_s: float | None = None,
    ) -> None:
        """POST `body`, read the SSE response into `consumer`; raise a ProviderError on failure."""
        ep = self.endpoint
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ep.total_s
        first = min(first_byte_s or ep.first_byte_s, ep.total_s)
        phase = "waiting for the first byte"
        content = json.dumps(body, separators=(",", ":")).encode()
        async with self._semaphore():
            try:
                async with asyncio.timeout(first) as budget:
                    request = self.client().build_request("POST", url, headers=headers, content=content)
                    response = await self.client().send(request, stream=True)
                    try:
                        if response.status_code >= 400:
                            phase = "reading the error body"
                            raw = await response.aread()
                            raise self._http_error(response.status_code, response.headers, raw, model)
                        ctype = response.headers.get("content-type", "")
                        if "text/event-stream" not in ctype:
                            raw = await response.aread()
                            raise ProviderProtocolError(
                                self.redact(
                                    f"{self.name}: expected text/event-stream, got {ctype or 'no content-type'}:"
                                    f" {raw[:300]!r}"
                                ),
                                details=self.details(model, status=response.status_code),
                            )
                        phase = "streaming"
                        await _read_sse(response, consumer, budget, loop, ep.idle_s, deadline)
                    finally:
                        await response.aclose()
            except TimeoutError:
                expired = loop.time() >= deadline - 0.001
                limit = "total" if expired else ("idle" if phase == "streaming" else "first_byte")
                secs = {"total": ep.total_s, "idle": ep.idle_s, "first_byte": first}[limit]
                raise RetryableProviderError(
                    f"{self.name}: timed out {phase} ({limit} timeout {secs:g}s)",
                    code="provider_timeout",
                    details=self.details(model),
                ) from None
            except ProviderError:
                raise
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise RetryableProviderError(
                    self.redact(f"{self.name}: cannot connect to {ep.base_url}: {exc}"),
                    code="provider_unreachable",
                    details=self.details(model),
                ) from None
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if phase != "streaming":
                    raise RetryableProviderError(
                        self.redact(f"{self.name}: connection failed {phase}: {exc}"),
                        code="provider_unavailable",
                        details=self.details(model),
                    ) from None
                raise RetryableProviderError(
                    self.redact(f"{self.name}: the stream was cut before the message ended ({exc})"),
                    code="stream_truncated",
                    details=self.details(model),
                ) from None
            except httpx.HTTPError as exc:
                raise RetryableProviderError(
                    self.redact(f"{self.name}: transport error {phase}: {type(exc).__name__}: {exc}"),
                    code="provider_unavailable",
                    details=self.details(model),
                ) from None
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
                # the vendor sent JSON of a shape its protocol does not allow
                raise self.malformed(model, f"{type(exc).__name__}: {exc}") from None
        if not consumer.done:
            raise RetryableProviderError(
                f"{self.name}: the stream ended before the message was complete",
                code="stream_truncated",
                details=self.details(model),
            )

    # -- errors -----------------------------------------------------------------------------------

    def parse_error(self, status: int, body: bytes) -> VendorError:
        """The vendor's error body → VendorError (drivers override)."""
        doc = json_or_none(body)
        msg = str(doc) if doc is not None else body.decode("utf-8", "replace")
        return VendorError(msg[:500] or f"HTTP {status}")

    def _http_error(self, status: int, headers: httpx.Headers, body: bytes, model: str) -> ProviderError:
        ve = self.parse_error(status, body)
        if ve.retry_after_s is None:
            ve.retry_after_s = parse_retry_after(headers)
        return self.error_from(ve, model, status=status)

    def error_from(self, ve: VendorError, model: str, *, status: int | None = None) -> ProviderError:
        """Classify a vendor error (from an HTTP status or an in-stream error event)."""
        head = f"{self.name}: " + (f"HTTP {status} " if status else "") + (f"{ve.code}: " if ve.code else "")
        message = self.redact(head + ve.message)
        details = self.details(model, status=status, provider_code=ve.code)
        if status in (401, 403) or ve.auth:
            return ProviderAuthError(message, details=details)
        if status == 429:
            return RetryableProviderError(message, retry_after_s=ve.retry_after_s, code="rate_limited", details=details)
        if ve.context_exceeded:
            return ContextLengthExceeded(message, details=details)
        if ve.unknown_model:
            return UnknownModel(message, details=details)
        if ve.retryable or (status is not None and (status >= 500 or status in (408, 409))):
            return RetryableProviderError(message, retry_after_s=ve.retry_after_s, details=details)
        if status == 404:
            return UnknownModel(message, details=details)
        if status == 413:
            return ProviderBadRequest(message, code="request_too_large", details=details)
        if status is not None and 400 <= status < 500:
            return ProviderBadRequest(message, details=details)
        return ProviderError(message, details=details)

    def malformed(self, model: str, what: str) -> ProviderProtocolError:
        return ProviderProtocolError(self.redact(f"{self.name}: malformed stream: {what}"), details=self.details(model))


async def _read_sse(
    response: httpx.Response,
    consumer: StreamConsumer,
    budget: asyncio.Timeout,
    loop: asyncio.AbstractEventLoop,
    idle_s: float,
    deadline: float,
) -> None:
    """Feed each SSE event (`event:` name, joined `data:` lines) to the consumer; each line read
    re-arms the idle timer (never past the total deadline)."""
    event = ""
    data: list[str] = []
    async for line in response.aiter_lines():
        budget.reschedule(min(loop.time() + idle_s, deadline))
        if not line:
            if data:
                await consumer.feed(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line[0] == ":":
            continue
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        await consumer.feed(event or "message", "\n".join(data))
