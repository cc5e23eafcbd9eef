"""Usage and cost as OpenTelemetry metrics in the cloud shape (issue 42 item 1): with
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT set, the worker Lambdas export `treadle.usage.*` at the end of
each invocation to a loopback collector, with the report's dimensions, and the sums equal the
roll-up's rows (usage_daily)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.observability.test_usage_metrics import ANN, BOB, COLUMN, DIMS, points
from tests.support.e2e import query
from tests.support.lambda_sim import LambdaEnv, http_event, sqs_event
from tests.support.localcloud import API_TOKEN
from tests.support.loopback import Seen


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Seen]]:
    posts: list[Seen] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            posts.append(Seen("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    from treadle_cloud.metrics import uninstall

    uninstall()  # a function invoked earlier in this process installed without a meter provider
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"http://127.0.0.1:{server.server_port}/v1/metrics")
    monkeypatch.delenv("OTEL_METRICS_EXPORTER", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    try:
        yield posts
    finally:
        uninstall()
        server.shutdown()
        server.server_close()


def test_worker_lambdas_export_usage_metrics(
    cloud_env: dict[str, str], sqs: Any, queue: dict[str, str], collector: list[Seen],
) -> None:
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        for user in (ANN, BOB):
            resp = api.invoke(http_event("POST", "/v1/runs", headers={"authorization": f"Bearer {API_TOKEN}"},
                                         body={"agent": "calc", "prompt": "go", "user_id": user}))
            assert resp["statusCode"] == 202, resp
        deadline = time.monotonic() + 60
        finished = 0
        while finished < 2:
            assert time.monotonic() < deadline, f"{finished} run(s) finished"
            got = sqs.receive_message(QueueUrl=queue["url"], MaxNumberOfMessages=1).get("Messages", [])
            if not got:
                time.sleep(0.1)
                continue
            result = worker.invoke(sqs_event(got, queue["arn"]))
            assert result == {"batchItemFailures": []}, result
            sqs.delete_message(QueueUrl=queue["url"], ReceiptHandle=got[0]["ReceiptHandle"])
            finished = worker.handler.results.get("finished", 0)
    finally:
        api.close()
        worker.close()
    got = points([p for p in collector if p.path == "/v1/metrics"])
    rows = asyncio.run(query(cloud_env["DATABASE_URL"],
                       "SELECT tenant_id, user_id, agent, def_id, provider, model, sum(calls) AS calls,"
                       " sum(input_tokens) AS i, sum(output_tokens) AS o FROM usage_daily WHERE user_id IN (%s, %s)"
                       " GROUP BY 1, 2, 3, 4, 5, 6", (ANN, BOB)))
    assert {r["user_id"] for r in rows} == {ANN, BOB}, json.dumps(rows, default=str)
    for r in rows:
        dims = tuple(r[COLUMN[d]] for d in DIMS)
        assert got["treadle.usage.calls"][(*dims, None)] == r["calls"] > 0
        assert got["treadle.usage.tokens"][(*dims, "input")] == r["i"]
        assert got["treadle.usage.tokens"][(*dims, "output")] == r["o"]
