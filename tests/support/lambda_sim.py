"""Lambda, imitated closely enough to run the real handler modules locally.

- `LambdaEnv`: one execution environment — the handler module loaded fresh (as Lambda imports
  `functions.<name>.handler`), invoked on a thread of its own, one invocation at a time.
- `FakeContext`: the context object's fields, with a real deadline.
- `http_event`: API Gateway HTTP API (payload format 2.0) events.
- `EventSourceMapping`: Lambda's SQS poller — receive a batch, invoke the worker, delete what
  succeeded, leave `batchItemFailures` to come back after their visibility timeout.

Run as a script (`python tests/support/lambda_sim.py worker-once QUEUE_URL QUEUE_ARN`) it is one worker
environment that takes one batch; the chaos test kills it mid-batch.
"""

from __future__ import annotations

import base64
import importlib.util
import itertools
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
ACCOUNT = "123456789012"
_load_seq = itertools.count(1)


def load_handler_module(name: str) -> ModuleType:
    """Import `functions/<name>/handler.py` as a new module (a fresh container each time)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    path = ROOT / "functions" / name / "handler.py"
    spec = importlib.util.spec_from_file_location(f"functions.{name}.handler_{next(_load_seq)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeContext:
    def __init__(self, function_name: str = "treadle-fn", timeout_s: float = 60.0, memory_mb: int = 1024) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function_name}"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2025/01/01/[$LATEST]0123456789abcdef"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class LambdaEnv:
    """One execution environment of function `name`."""

    def __init__(self, name: str, timeout_s: float = 60.0) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"lambda-{name}")
        self.module = self._thread.submit(load_handler_module, name).result()
        self.handler = self.module.handler
        self.invocations = 0

    def invoke(self, event: Any, timeout_s: float | None = None) -> Any:
        ctx = FakeContext(f"treadle-{self.name}", timeout_s or self.timeout_s)
        self.invocations += 1
        return self._thread.submit(self.handler, event, ctx).result()

    def close(self) -> None:
        self._thread.submit(self.handler.container.close).result()
        self._thread.shutdown()


def http_event(
    method: str,
    path: str,
    *,
    query: str = "",
    headers: dict[str, str] | None = None,
    body: Any = None,
    route_key: str = "ANY /{proxy+}",
) -> dict[str, Any]:
    """An API Gateway HTTP API event, payload format 2.0, as a Lambda integration receives it."""
    hdrs = {k.lower(): v for k, v in (headers or {}).items()}
    hdrs.setdefault("host", f"abc123defg.execute-api.{REGION}.amazonaws.com")
    hdrs.setdefault("user-agent", "treadle-tests/1.0")
    hdrs.setdefault("x-forwarded-for", "203.0.113.7")
    hdrs.setdefault("x-forwarded-proto", "https")
    hdrs.setdefault("x-forwarded-port", "443")
    raw_body: str | None = None
    b64 = False
    if body is not None:
        if isinstance(body, bytes):
            raw_body, b64 = base64.b64encode(body).decode(), True
        elif isinstance(body, str):
            raw_body = body
        else:
            raw_body = json.dumps(body)
            hdrs.setdefault("content-type", "application/json")
        hdrs["content-length"] = str(len(body) if isinstance(body, bytes) else len(raw_body.encode()))
    now = time.time()
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": hdrs,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "abc123defg",
            "domainName": hdrs["host"],
            "domainPrefix": "abc123defg",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.7",
                "userAgent": hdrs["user-agent"],
            },
            "requestId": uuid.uuid4().hex[:16] + "=",
            "routeKey": route_key,
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": b64,
    }
    if query:
        params: dict[str, str] = {}
        for k, v in parse_qsl(query, keep_blank_values=True):
            params[k] = f"{params[k]},{v}" if k in params else v
        event["queryStringParameters"] = params
    if "{proxy+}" in route_key:
        prefix = route_key.split(" ", 1)[1].split("{proxy+}")[0]
        event["pathParameters"] = {"proxy": path[len(prefix):]}
    if raw_body is not None:
        event["body"] = raw_body
    return event


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """Lambda's SQS event for messages as ReceiveMessage returned them."""
    records = []
    for m in messages:
        attrs = m.get("Attributes", {})
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": attrs.get("ApproximateReceiveCount", "1"),
                    "SentTimestamp": attrs.get("SentTimestamp", str(int(time.time() * 1000))),
                    "SenderId": attrs.get("SenderId", "AIDAEXAMPLE"),
                    "ApproximateFirstReceiveTimestamp": attrs.get(
                        "ApproximateFirstReceiveTimestamp", str(int(time.time() * 1000))
                    ),
                },
                "messageAttributes": {  # as Lambda spells them
                    k: {"stringValue": v.get("StringValue"), "stringListValues": [], "binaryListValues": [],
                        "dataType": v.get("DataType", "String")}
                    for k, v in m.get("MessageAttributes", {}).items()
                },
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
        )
    return {"Records": records}


class EventSourceMapping:
    """Lambda's SQS event source mapping with ReportBatchItemFailures, for `workers`.

    `duplicate=True` hands every batch to two worker environments at once (at-least-once
    delivery at its worst: the same messages, concurrently)."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        queue_arn: str,
        workers: list[Any],
        *,
        batch_size: int = 10,
        duplicate: bool = False,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.workers = workers
        self.batch_size = batch_size
        self.duplicate = duplicate
        self.batches = 0
        self.records = 0
        self.failures = 0
        self._rr = itertools.cycle(range(len(workers)))

    def receive(self, wait_s: float = 0.0) -> list[dict[str, Any]]:
        resp = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=int(wait_s),
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(resp.get("Messages", []))

    def poll_once(self, wait_s: float = 0.0) -> int:
        messages = self.receive(wait_s)
        if not messages:
            return 0
        event = sqs_event(messages, self.queue_arn)
        if self.duplicate and len(self.workers) > 1:
            first, second = self.workers[0], self.workers[1]
            results: list[Any] = [None, None]

            def run(i: int, env: Any) -> None:
                results[i] = env.invoke(json.loads(json.dumps(event)))

            threads = [threading.Thread(target=run, args=(i, env)) for i, env in enumerate((first, second))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            failed = set.intersection(*(_failed_ids(r) for r in results))
        else:
            failed = _failed_ids(self.workers[next(self._rr)].invoke(event))
        self.batches += 1
        self.records += len(messages)
        self.failures += len(failed)
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        return len(messages)

    def run_until(
        self,
        done: Callable[[], bool],
        *,
        timeout_s: float = 60.0,
        idle: Callable[[], object] | None = None,
    ) -> None:
        """Poll until `done()`; `idle()` (e.g. the maintenance function) runs when the queue is empty."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not done after {timeout_s} s ({self.batches} batches, {self.records} records)")
            if self.poll_once(wait_s=0) == 0:
                if idle is not None:
                    idle()
                time.sleep(0.2)


def _failed_ids(response: Any) -> set[str]:
    assert isinstance(response, dict) and "batchItemFailures" in response, response
    return {f["itemIdentifier"] for f in response["batchItemFailures"]}


def _worker_once(queue_url: str, queue_arn: str) -> None:
    """One worker environment: warm up, take one batch, process it (the test kills us)."""
    import boto3

    env = LambdaEnv("worker", timeout_s=120.0)
    env._thread.submit(env.handler.container.runtime).result()
    sqs = boto3.client("sqs")
    esm = EventSourceMapping(sqs, queue_url, queue_arn, [env])
    print("ready", flush=True)
    while True:
        messages = esm.receive(wait_s=1)
        if messages:
            print(f"invoking {len(messages)}", flush=True)
            env.invoke(sqs_event(messages, queue_arn))
            print("survived", flush=True)
            return


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker-once":
        _worker_once(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: lambda_sim.py worker-once QUEUE_URL QUEUE_ARN")
