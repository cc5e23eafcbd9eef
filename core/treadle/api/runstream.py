"""POST /v1/runs' answer, as loomcycle gives it: the run's SSE stream by default, and a client
that leaves that stream before it ends cancels the run ("client disconnected").

Content negotiation: `Accept` is read with its q-values (RFC 9110 §12.5.1: each type's quality is
that of the most specific range naming it). The stream is the answer unless JSON is preferred to
`text/event-stream` — `Accept: application/json` (or JSON at a higher q than the rest) gets
`202 {run_id, …}`; no `Accept`, `*/*` or `text/event-stream` get the stream. Where a response
cannot stream (the cloud's api function: API Gateway buffers it), JSON is the default instead and
the stream is the answer only when the request names `text/event-stream`, at a q no lower than
JSON's (`Runtime.runs_stream_by_default`).

Leaving: the run is cancelled when the client's connection goes (the server reads an
`http.disconnect` or a write fails) before the stream ended — not when the stream ends by itself
(the run finished, or the time budget of the cloud shape passed: the client resumes with
`GET /v1/runs/{id}/stream?from_seq=`), not when the server is shutting down (`Runtime.draining`:
the streams end so that the server can stop, and the run goes on after the restart), and not for
a run started with `detach: true` or `interactive: true` (loomcycle's interactive runs outlive
their stream too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

#: the reason a run cancelled by its client leaving records (loomcycle's words)
CLIENT_DISCONNECTED = "client disconnected"
JSON = "application/json"
SSE = "text/event-stream"


def _ranges(accept: str) -> list[tuple[str, str, float]]:
    """`Accept`'s media ranges as (type, subtype, q); a range without a valid q has q = 1."""
    out = []
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        kind, _, sub = media.lower().partition("/")
        if not kind or not sub:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    q = 1.0
        out.append((kind, sub, q))
    return out


def quality(accept: str, media_type: str) -> tuple[float, int]:
    """The q `accept` gives `media_type` — that of the most specific range matching it (0: none) —
    and how specific that range was (2: the type itself, 1: `type/*`, 0: `*/*`, -1: none)."""
    kind, _, sub = media_type.partition("/")
    best, q_best = -1, 0.0
    for r_kind, r_sub, q in _ranges(accept):
        if (r_kind, r_sub) == (kind, sub):
            specificity = 2
        elif r_kind == kind and r_sub == "*":
            specificity = 1
        elif (r_kind, r_sub) == ("*", "*"):
            specificity = 0
        else:
            continue
        if specificity > best:
            best, q_best = specificity, q
    return q_best, best


def answers_with_stream(accept: str | None, *, stream_by_default: bool) -> bool:
    """Whether a run route answers with its SSE stream (module docstring). Streaming by default:
    the stream unless JSON has a higher q than `text/event-stream`. JSON by default: the stream
    only when `text/event-stream` is named (not through a wildcard) at a q no lower than JSON's —
    so loomcycle's client (`text/event-stream, application/json`) streams on every shape."""
    if not accept or not accept.strip():
        return stream_by_default
    (q_json, _), (q_sse, named) = quality(accept, JSON), quality(accept, SSE)
    if stream_by_default:
        return q_sse >= q_json
    return named == 2 and q_sse > 0 and q_sse >= q_json


class RunStream(StreamingResponse):
    """An SSE stream that calls `on_leave` when its client leaves before the body ended, unless
    `draining()` says the server is shutting down."""

    def __init__(self, content: AsyncIterator[bytes], *, headers: dict[str, str],
                 on_leave: Callable[[], Awaitable[object]] | None, draining: Callable[[], bool]) -> None:
        super().__init__(content, media_type=SSE, headers=headers)
        self._on_leave = on_leave
        self._draining = draining

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ended = False  # the body was sent to its end

        async def stream(cancel: anyio.CancelScope) -> None:
            nonlocal ended
            try:
                await self.stream_response(send)
                ended = True
            except OSError:  # the connection went while a frame was written
                pass
            cancel.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream, tg.cancel_scope)
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()  # the client left: stop writing
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:  # leave the run's hub subscription now, not when collected
                with anyio.CancelScope(shield=True):
                    await aclose()
        if not ended and self._on_leave is not None and not self._draining():
            with anyio.CancelScope(shield=True):  # the request is over: finish the cancel anyway
                await self._on_leave()
