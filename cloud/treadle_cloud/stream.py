"""The stream function: a run's events over Lambda response streaming, as they are committed.

API Gateway's HTTP API buffers a Lambda response until it ends, so its `/stream` can only hand a
client what arrived before the response ended (`treadle_cloud.http`). This function sits behind
a Lambda function URL in `RESPONSE_STREAM` invoke mode instead, where bytes reach the client as
the function writes them, for up to the function's timeout.

Lambda's managed Python runtime cannot write a streamed response itself (response streaming is
native to the Node.js runtimes; other languages need a custom runtime or the Lambda Web Adapter).
So the function runs the Lambda Web Adapter — an extension from an AWS-published layer — on the
managed Python 3.12 runtime: the adapter starts `functions/stream/run.sh`, which runs this module
(uvicorn serving the runs API on 127.0.0.1:$PORT), waits for `/healthz`, and relays each
invocation as an HTTP request, and the response, chunk by chunk, as the stream is written.

Live text deltas: the worker relays its engine's `text_delta`/`thinking_delta` frames and commit
pokes through Postgres NOTIFY to the runs this process streams (treadle_cloud/live.py), so a reader
sees the answer as the model writes it, and each commit at once rather than at its next poll.

OpenAI's Responses routes are served here too, so a background response's events
(`GET /v1/responses/{id}?stream=true&starting_after=N`) reach an OpenAI SDK as its run commits them.

Auth is the API's own: the bearer token from Secrets Manager (the function URL's auth type is
NONE; every /v1 route refuses a request without the token). A stream ends with the run, or at
`TREADLE_SSE_BUDGET_SECONDS` (the stack sets the function's timeout minus a margin) with the
usual `: budget exhausted; resume with from_seq` — the client resumes from its last id.
"""

from __future__ import annotations

import asyncio
import logging
import os

from treadle.api import runs
from treadle.api.app import create_app
from treadle.api.openai_compat import responses
from treadle.domain.tasks import cancel_and_wait
from treadle_cloud.container import open_cloud_runtime
from treadle_cloud.env import CloudSettings, export_secrets
from treadle_cloud.live import LiveListener, WatchedHub, listener_url

log = logging.getLogger("treadle.cloud.stream")


async def serve(cloud: CloudSettings, host: str, port: int) -> None:
    """Open the runtime, then serve the runs API until the process is stopped."""
    import uvicorn

    rt = await open_cloud_runtime(cloud, sync_triggers=False)
    rt.sse_budget_s = cloud.sse_budget_seconds  # ends cleanly before Lambda's timeout cuts it
    listening: asyncio.Task[None] | None = None
    if cloud.live_deltas and rt.settings.database_url:
        # the worker's text deltas and commit pokes, from Postgres NOTIFY (treadle_cloud/live.py)
        hub = WatchedHub()
        rt.hub = hub  # the SSE readers' hub (api/runs.py); no engine runs in this process
        url = listener_url(rt.settings.database_url, cloud.live_db_host)
        listening = asyncio.get_running_loop().create_task(LiveListener(hub, url).run())
    app = create_app(auth_token=rt.settings.auth_token, max_request_bytes=rt.settings.max_request_bytes,
                     routers=[runs.router, responses.router], watch_page=False)
    app.state.runtime = rt
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="off", log_level="warning",
                                           access_log=False, timeout_graceful_shutdown=1))
    try:
        await server.serve()
    finally:
        if listening is not None:
            await cancel_and_wait(listening)
        await rt.close()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cloud = CloudSettings()
    exported = export_secrets(cloud)
    if exported:
        log.info("from Secrets Manager: %s", ", ".join(exported))
    port = int(os.environ.get("AWS_LWA_PORT") or os.environ.get("PORT") or "8080")
    asyncio.run(serve(cloud, os.environ.get("TREADLE_STREAM_HOST", "127.0.0.1"), port))


if __name__ == "__main__":
    main()
