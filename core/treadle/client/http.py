"""The earlier dict-returning async client (kept for the code and tests that use it); new code
uses `treadle.client.AsyncTreadle` / `Treadle`, typed and retried (docs/client.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from treadle.client._base import SseDecoder, SseEvent, api_error
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
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    async def __aenter__(self) -> TreadleClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    @staticmethod
    def _check(resp: httpx.Response) -> dict[str, Any]:
        if resp.status_code >= 400:
            raise api_error(resp)
        answer: dict[str, Any] = resp.json()
        return answer

    async def health(self) -> dict[str, Any]:
        return self._check(await self.http.get("/healthz"))

    async def start_run(self, agent: str, prompt: str | None = None, **fields: Any) -> dict[str, Any]:
        body = {"agent": agent, **({"prompt": prompt} if prompt is not None else {}), **fields}
        return self._check(await self.http.post("/v1/runs", json=body))

    async def get_run(self, run_id: str) -> dict[str, Any]:
        return self._check(await self.http.get(f"/v1/runs/{run_id}"))

    async def events(self, run_id: str, from_seq: int = 0) -> list[dict[str, Any]]:
        body = self._check(await self.http.get(f"/v1/runs/{run_id}/events", params={"from_seq": from_seq}))
        events: list[dict[str, Any]] = body["events"]
        return events

    async def cancel(self, run_id: str, reason: str | None = None) -> dict[str, Any]:
        """Cancel the whole run (scope "run": without it an interactive run's turn is cancelled)."""
        payload: dict[str, Any] = {"scope": "run", **({"reason": reason} if reason else {})}
        return self._check(await self.http.post(f"/v1/runs/{run_id}/cancel", json=payload))

    async def _sse(self, method: str, url: str, **kw: Any) -> AsyncIterator[SseEvent]:
        headers = {"Accept": "text/event-stream", **kw.pop("headers", {})}
        async with self.http.stream(method, url, headers=headers, timeout=None, **kw) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                self._check(resp)
            async for ev in parse_sse(resp.aiter_lines()):
                yield ev

    def stream(self, run_id: str, from_seq: int = 0) -> AsyncIterator[SseEvent]:
        return self._follow(
            self._sse("GET", f"/v1/runs/{run_id}/stream", params={"from_seq": from_seq}), run_id, from_seq
        )

    def run_streaming(self, agent: str, prompt: str | None = None, **fields: Any) -> AsyncIterator[SseEvent]:
        body = {"agent": agent, **({"prompt": prompt} if prompt is not None else {}), **fields}
        return self._follow(self._sse("POST", "/v1/runs", json=body), None, 0)

    async def _follow(
        self, first: AsyncIterator[SseEvent], run_id: str | None, from_seq: int
    ) -> AsyncIterator[SseEvent]:
        """Events of one run across responses: a response that ends before the run does (the
        cloud shape ends each one after a time budget) is resumed after the last seq seen.
        loomcycle's id-less first frames (`session`, `agent`) come from the first response only."""
        last, source, resumed = from_seq, first, False
        while True:
            seen = False
            async for ev in source:
                if ev.id is None and ev.event in ("session", "agent"):
                    if not resumed:
                        yield ev
                    continue
                seen = True
                last = ev.id if ev.id is not None else last
                if run_id is None and ev.event == "started":
                    run_id = ev.data.get("run_id")
                yield ev
                if ev.event in ("done", "error"):
                    return
            if run_id is None:
                return
            if not seen and (await self.get_run(run_id))["status"] in ("completed", "failed", "cancelled"):
                return
            source, resumed = self._sse("GET", f"/v1/runs/{run_id}/stream", params={"from_seq": last}), True
