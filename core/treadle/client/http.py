"""The earlier dict-returning async client (kept for the code and tests that use it); new code
uses `treadle.client.AsyncTreadle` / `Treadle`, typed and retried (docs/client.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from treadle.client._async.client import AsyncTreadle
from treadle.client._base import JSON, NO_RETRY, Call, SseDecoder, SseEvent, StreamCursor
from treadle.client.errors import ApiError

__all__ = ["ApiError", "SseEvent", "TreadleClient", "parse_sse"]


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    decoder = SseDecoder()
    async for line in lines:
        ev = decoder.line(line)
        if ev is not None:
            yield ev
    last = decoder.flush()
    if last is not None:
        yield last


class TreadleClient:
    """The earlier async client, returning the answers as dicts; a thin layer over AsyncTreadle
    (its transport and its resumable run stream), without retries (as before)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.api = AsyncTreadle(base_url, token, timeout=timeout, transport=transport, retry=NO_RETRY)
        self.http = self.api.http

    async def __aenter__(self) -> TreadleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.api.aclose()

    async def _json(self, call: Call) -> dict[str, Any]:
        answer: dict[str, Any] = await self.api.json(call)
        return answer

    async def health(self) -> dict[str, Any]:
        return await self._json(Call("GET", "/healthz"))

    async def start_run(self, agent: str, prompt: str | None = None, **fields: Any) -> dict[str, Any]:
        body = {"agent": agent, **({"prompt": prompt} if prompt is not None else {}), **fields}
        return await self._json(Call("POST", "/v1/runs", json=body, headers=dict(JSON)))

    async def get_run(self, run_id: str) -> dict[str, Any]:
        return await self._json(Call("GET", f"/v1/runs/{run_id}"))

    async def events(self, run_id: str, from_seq: int = 0) -> list[dict[str, Any]]:
        body = await self._json(Call("GET", f"/v1/runs/{run_id}/events", params={"from_seq": from_seq}))
        events: list[dict[str, Any]] = body["events"]
        return events

    async def cancel(self, run_id: str, reason: str | None = None) -> dict[str, Any]:
        """Cancel the whole run (scope "run": without it an interactive run's turn is cancelled)."""
        payload: dict[str, Any] = {"scope": "run", **({"reason": reason} if reason else {})}
        return await self._json(Call("POST", f"/v1/runs/{run_id}/cancel", json=payload))

    def stream(self, run_id: str, from_seq: int = 0) -> AsyncIterator[SseEvent]:
        """The run's events after `from_seq`, resumed after the last seq when a response ends
        before the run does (the cloud shape ends each one after a time budget)."""
        return self.api.runs.stream(run_id, from_seq)

    def run_streaming(self, agent: str, prompt: str | None = None, **fields: Any) -> AsyncIterator[SseEvent]:
        """Start a run and stream it; `detach: true` unless given (leaving the stream leaves the run going)."""
        body = {"agent": agent, **({"prompt": prompt} if prompt is not None else {}), "detach": True, **fields}
        return self.api.events(Call("POST", "/v1/runs", json=body), StreamCursor(None, 0))
