"""The client's sans-I/O core, shared by `AsyncTreadle` and `Treadle`: where to connect, how a
request is retried, how an answer or an error is decoded, and how SSE lines become events. The
async client (_async/client.py) is the one implementation of every route; the sync client
(_sync/client.py) is generated from it by unasync (`python -m treadle.client.generate`), and a test
keeps the generated file current."""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel

from treadle.client.errors import ApiError
from treadle.domain.events import EventType

DEFAULT_URL = "http://127.0.0.1:8787"
TOKEN_ENVS = ("TREADLE_TOKEN", "TREADLE_AUTH_TOKEN")
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


def resolve_url(url: str | None) -> str:
    """`url`, else $TREADLE_URL, else the default `treadle serve` address."""
    return (url or os.environ.get("TREADLE_URL") or DEFAULT_URL).rstrip("/")


def resolve_token(token: str | None) -> str | None:
    """`token`, else $TREADLE_TOKEN, else $TREADLE_AUTH_TOKEN (the server's own bearer)."""
    return token or next((os.environ[k] for k in TOKEN_ENVS if os.environ.get(k)), None)


@dataclass(frozen=True, slots=True)
class Retry:
    """Retries on connection loss. A request that never reached the server (connect errors) is
    always retried; one that may have (a dropped read) only when it is idempotent: GET/PUT/DELETE,
    or a POST carrying an `Idempotency-Key` (the client sends one with every run it starts).
    The waits grow exponentially with full jitter, capped at `max_backoff`."""

    attempts: int = 5
    backoff: float = 0.2
    max_backoff: float = 5.0

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))

    def may_retry(self, exc: httpx.TransportError, method: str, headers: dict[str, str]) -> bool:
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return True
        lost = isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError | httpx.WriteError | httpx.ReadTimeout)
        return lost and (method in IDEMPOTENT_METHODS or "Idempotency-Key" in headers)


NO_RETRY = Retry(attempts=1)
#: the header that asks a run route for its JSON answer (POST /v1/runs streams by default)
JSON = {"Accept": "application/json"}


@dataclass(slots=True)
class Call:
    """One request, before any I/O."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def clean(params: dict[str, Any]) -> dict[str, Any]:
    """Query or body fields without the ones left unset (None): the server's defaults apply."""
    return {k: v for k, v in params.items() if v is not None}


def body_of(request: BaseModel) -> dict[str, Any]:
    """A request model as its JSON body: the fields that were given, nothing the caller left out
    (the server applies its own defaults)."""
    body: dict[str, Any] = request.model_dump(mode="json", exclude_unset=True)
    return body


def decode(resp: httpx.Response) -> Any:
    """The JSON body of a 2xx answer (None for 204), or ApiError with the server's code."""
    if resp.status_code >= 400:
        raise api_error(resp)
    if resp.status_code == 204 or not resp.content:
        return None
    return resp.json()


def api_error(resp: httpx.Response) -> ApiError:
    """treadle's error body is `{code, error, details?}` (docs/api.md)."""
    try:
        body = resp.json()
    except ValueError:
        return ApiError(resp.status_code, "error", resp.text)
    if not isinstance(body, dict):
        return ApiError(resp.status_code, "error", resp.text)
    retry_after = resp.headers.get("Retry-After")
    return ApiError(resp.status_code, str(body.get("code", "error")), str(body.get("error", resp.text)),
                    details=body.get("details"), retry_after=float(retry_after) if retry_after and
                    retry_after.replace(".", "", 1).isdigit() else None)


@dataclass(slots=True)
class SseEvent:
    """One server-sent event: its name, its JSON data, and its `id` (the run event's seq; live
    `text_delta` frames and loomcycle's first `session`/`agent` frames have none)."""

    event: str
    data: dict[str, Any]
    id: int | None


class SseDecoder:
    """SSE lines in, events out (the WHATWG rules treadle's server uses: `event`, `data`, `id`,
    comments ignored, a blank line ends an event)."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []
        self._id: int | None = None

    def line(self, line: str) -> SseEvent | None:
        if line == "":
            return self.flush()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and value.isascii() and value.isdigit():
            self._id = int(value)
        return None

    def flush(self) -> SseEvent | None:
        out = SseEvent(self._event, json.loads("\n".join(self._data)), self._id) if self._data else None
        self._event, self._data, self._id = "message", [], None
        return out


class StreamCursor:
    """What a resumable run stream has seen: the last seq, so a new response picks up after it
    (`from_seq`), and whether loomcycle's id-less preamble frames were already passed on."""

    def __init__(self, run_id: str | None, from_seq: int) -> None:
        self.run_id = run_id
        self.last = from_seq
        self.resumed = False
        self.done = False

    def accept(self, ev: SseEvent) -> bool:
        """Whether to pass `ev` on; records its seq and the end of the run."""
        if ev.id is None and ev.event in (EventType.SESSION, EventType.AGENT):
            return not self.resumed
        if ev.id is not None:
            if ev.id <= self.last:
                return False  # already passed on before a reconnect
            self.last = ev.id
        if self.run_id is None and ev.event == EventType.STARTED:
            self.run_id = str(ev.data.get("run_id"))
        if ev.event in (EventType.DONE, EventType.ERROR):
            self.done = True
        return True
