"""HTTP functions (api, webhook, mcp): the FastAPI app with the function's routers, through mangum.

API Gateway's HTTP API cannot stream, and mangum buffers a streaming response into one body, so a
`text/event-stream` response ends after a time budget (`TREADLE_SSE_BUDGET_SECONDS`, never past
the invocation's own deadline) with a comment telling the client to resume with `from_seq` /
`Last-Event-ID`. Because nothing reaches the client before the response ends, it ends
`TREADLE_SSE_LINGER_SECONDS` after its first frame (new events), not at the budget; a client that
wants events as they are committed uses the stream function's URL (`treadle_cloud.stream`).

Routers may be given lazily (`treadle_cloud.routes.LazyRouter`): the API function imports a
router when a request first needs it. Either way a router's routes are added to the app as they
are — FastAPI's `include_router` would build every route a second time (its dependencies, its
pydantic fields), on the cold start's first request. And a route itself is built when a request
first matches it (`treadle.api.lazyroute`): the routes an environment never serves cost nothing
but their declaration; the OpenAPI document builds them all on its first request. A SnapStart
INIT builds every route before the snapshot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, FastAPI
from mangum import Mangum

from treadle.api.app import create_app, mount
from treadle.api.lazyroute import build_all, prime_fastapi
from treadle.errors import TreadleError
from treadle_cloud.container import Container, remaining_s
from treadle_cloud.metrics import observed_invocation
from treadle_cloud.routes import EVERY_ROUTER_PATHS, LazyRouter, modules, needed
from treadle_cloud.transfers import Transfers

log = logging.getLogger("treadle.cloud")

#: kept back from the invocation's deadline when sizing an SSE response
SSE_MARGIN_S = 3.0


def error_response(status: int, code: str, message: str) -> dict[str, Any]:
    """An API Gateway (payload 2.0) response in treadle's error shape."""
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"code": code, "error": message}),
        "isBase64Encoded": False,
    }


class HttpFunction:
    def __init__(self, routers: Sequence[APIRouter | LazyRouter], container: Container | None = None, *,
                 snapshot_imports: Sequence[str] = ()) -> None:
        """`snapshot_imports`: modules a first request imports besides the routers' (into a SnapStart snapshot)."""
        self.lazy = [r if isinstance(r, LazyRouter) else LazyRouter("", (), _routers=[r]) for r in routers]
        self.container = container or Container(
            snapshot_imports=(*modules(r for r in self.lazy if not r.loaded), *snapshot_imports))
        if self.container.snapshot:
            build_all()  # every router was imported for the snapshot: its routes go in built
        else:
            prime_fastapi()  # what FastAPI does once, on whichever route a request first builds
        self.app: FastAPI | None = None
        self._adapter: Mangum | None = None
        self._base_routes: list[Any] = []
        self._mounted = False
        self._transfers_: Transfers | None = None

    @property
    def routers(self) -> list[APIRouter]:
        """The routers imported so far, in mount order."""
        return [router for lr in self.lazy if lr.loaded for router in lr.routers()]

    def _load(self, path: str) -> None:
        """Import the routers a request for `path` needs; the app's routes stay in mount order."""
        assert self.app is not None
        if path not in EVERY_ROUTER_PATHS and any(
            getattr(r, "path_regex", None) is not None and r.path_regex.match(path) for r in self._base_routes
        ):
            todo = []  # the app's own routes (/healthz, /metrics, the watch page) need no router
        else:
            todo = needed(self.lazy, path)
        if not todo and self._mounted:
            return
        for lr in todo:
            lr.routers()
        self.app.router.routes[:] = self._base_routes
        mount(self.app, self.routers)
        self._mounted = True

    @observed_invocation  # EMF metrics, spans flushed (treadle_cloud/metrics.py)
    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        try:
            rt = self.container.runtime()
        except TreadleError as exc:  # e.g. the database is unreachable: answer, don't crash
            log.error("runtime unavailable: %s", exc.message)
            return error_response(503, "unavailable", f"treadle is unavailable: {exc.message}")
        if self._adapter is None:
            self.app = create_app(
                auth_token=rt.settings.auth_token,
                max_request_bytes=rt.settings.max_request_bytes,
                routers=[],
                public_docs=rt.settings.public_docs,
            )
            self.app.state.runtime = rt
            self._base_routes = list(self.app.router.routes)
            self.container.activate()
            self._adapter = Mangum(self.app, lifespan="off")
        cloud = self.container.cloud
        budget = cloud.sse_budget_seconds if cloud else 25.0
        rt.sse_budget_s = max(1.0, min(budget, remaining_s(context) - SSE_MARGIN_S))
        rt.sse_linger_s = cloud.sse_linger_seconds if cloud else 1.0
        # API Gateway buffers a response until it ends: POST /v1/runs answers JSON unless the
        # client asks for the stream (loomcycle streams by default; docs/loomcycle.md)
        rt.runs_stream_by_default = False
        transfers = self._transfers()
        if transfers is not None:  # bodies over Lambda's 6 MB limit (treadle_cloud/transfers.py)
            from treadle_cloud.transfers import is_transfers_request, transfers_answer, whoami_probe

            if is_transfers_request(event):
                self._load("/v1/_whoami")
                self.container.activate()
                return transfers_answer(self._adapter(whoami_probe(event), context), transfers)
            uploaded = transfers.with_uploaded_body(event)
            if uploaded is not None and "statusCode" in uploaded:
                return uploaded
            event = uploaded or event
        self._load(str(event.get("rawPath") or event.get("path") or "/"))
        self.container.activate()
        resp: dict[str, Any] = self._adapter(event, context)
        return transfers.offload(resp) if transfers is not None else resp

    def _transfers(self) -> Transfers | None:
        cloud = self.container.cloud
        if cloud is None or not cloud.transfers_bucket:
            return None
        if self._transfers_ is None:
            from treadle_cloud.env import aws_client

            self._transfers_ = Transfers(lambda: aws_client("s3"), cloud.transfers_bucket, cloud.transfers_prefix,
                                         cloud.transfer_inline_bytes, cloud.transfer_url_seconds)
        return self._transfers_
