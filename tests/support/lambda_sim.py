"""Lambda, imitated closely enough to run the real handler modules locally.

- `LambdaEnv`: one execution environment — the handler module loaded fresh (as Lambda imports
  `functions.<name>.handler`), invoked on a thread of its own, one invocation at a time.
- `FakeContext`: the context object's fields, with a real deadline.
- `http_event`: API Gateway HTTP API (payload format 2.0) events.
- `FrozenLambdaEnv`: the same in a process of its own, where it matters that it behaves like
  Lambda: frozen (SIGSTOP) between invocations, so nothing it left running runs meanwhile, and
  killed at its timeout (the invocation fails, the next one is a cold start).
- `EventSourceMapping`: Lambda's SQS poller — receive a batch (of the stack's size, 1), invoke the
  worker, delete what succeeded, leave `batchItemFailures` (or a failed invocation's whole batch)
  to come back after their visibility timeout.

Run as a script (`python tests/support/lambda_sim.py worker-once QUEUE_URL QUEUE_ARN`) it is one worker
environment that takes one batch; the chaos test kills it mid-batch.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import itertools
import json
import os
import signal
import subprocess
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
#: the worker's event source mapping's batch size in the stack (infra/ worker_batch_size; a test
#: in tests/cloud/test_infra.py holds the two equal)
WORKER_BATCH_SIZE = 1


def load_handler_module(name: str, path: Path | None = None) -> ModuleType:
    """Import `functions/<name>/handler.py` (or `path`) as a new module (a fresh container each time)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    path = path or ROOT / "functions" / name / "handler.py"
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


class InvocationFailed(Exception):
    """The invocation ended without an answer: Lambda reports it as a function error (an SQS
    batch goes back to the queue whole)."""


class LambdaTimeout(InvocationFailed):
    """The invocation outlived its timeout: Lambda kills the environment."""


class FrozenLambdaEnv:
    """One execution environment of function `name` in a process of its own, as Lambda runs it
    where that matters: INIT at the first invocation (or `start()`), the process frozen between
    invocations (SIGSTOP: threads, timers and connections' keepalives it left behind do not run),
    thawed for the next one, and killed when an invocation outlives `timeout_s` — that invocation
    fails and the next one starts a new environment (a cold start). The process inherits this
    process's environment at its start (the functions' variables are set before)."""

    def __init__(self, name: str, timeout_s: float = 60.0, env: dict[str, str | None] | None = None,
                 path: Path | None = None) -> None:
        self.name = name
        #: the handler module (default: functions/<name>/handler.py)
        self.path = path or ROOT / "functions" / name / "handler.py"
        self.timeout_s = timeout_s
        #: the function's own variables over this process's (None: unset for it)
        self.env = env or {}
        self.invocations = 0
        self.cold_starts = 0
        self.timeouts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """A new environment (INIT), frozen until its first invocation."""
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), "serve", self.name, str(r_in), str(w_out), str(self.path)],
            pass_fds=(r_in, w_out), cwd=ROOT, env=self._environment(),
        )
        os.close(r_in)
        os.close(w_out)
        self._send = os.fdopen(w_in, "w", buffering=1)
        self._recv = os.fdopen(r_out, "r")
        line = self._readline(120.0)
        assert line.strip() == "ready", f"{self.name}: INIT failed ({line!r})"
        self.cold_starts += 1
        os.kill(self._proc.pid, signal.SIGSTOP)

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for k, v in self.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def _readline(self, timeout_s: float) -> str:
        import select

        assert self._proc is not None
        ready, _, _ = select.select([self._recv], [], [], max(0.0, timeout_s))
        if not ready:
            raise LambdaTimeout(f"{self.name}: no answer within {timeout_s:.1f} s")
        line = self._recv.readline()
        if not line:
            raise InvocationFailed(f"{self.name}: the environment exited ({self._proc.wait()})")
        return line

    def invoke(self, event: Any, timeout_s: float | None = None) -> Any:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self.start()
            assert self._proc is not None
            timeout = timeout_s or self.timeout_s
            self.invocations += 1
            os.kill(self._proc.pid, signal.SIGCONT)
            try:
                self._send.write(json.dumps({"event": event, "timeout_s": timeout}) + "\n")
                answer = json.loads(self._readline(timeout))
            except InvocationFailed as exc:
                if isinstance(exc, LambdaTimeout):
                    self.timeouts += 1
                self._kill()
                raise
            os.kill(self._proc.pid, signal.SIGSTOP)
            if "error" in answer:
                raise InvocationFailed(f"{self.name}: {answer['error']}")
            return answer["result"]

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._send.close()
            self._recv.close()
            self._proc = None

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                os.kill(self._proc.pid, signal.SIGCONT)
                self._send.write(json.dumps({"close": True}) + "\n")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(30)
            self._kill()


def _serve(name: str, r_fd: int, w_fd: int, path: str) -> None:
    """The child of a FrozenLambdaEnv: INIT, then one invocation per line until told to close."""
    module = load_handler_module(name, Path(path))
    out = os.fdopen(w_fd, "w", buffering=1)
    out.write("ready\n")
    for line in os.fdopen(r_fd, "r"):
        msg = json.loads(line)
        if msg.get("close"):
            container = getattr(module.handler, "container", None)
            if container is not None:
                container.close()
            return
        ctx = FakeContext(f"treadle-{name}", msg["timeout_s"])
        try:
            answer = {"result": module.handler(msg["event"], ctx)}
        except Exception as exc:  # Lambda reports any error as the invocation's
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer, default=str) + "\n")


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
        batch_size: int = WORKER_BATCH_SIZE,
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
            try:
                failed = _failed_ids(self.workers[next(self._rr)].invoke(event))
            except InvocationFailed:  # a function error (or a timeout): the whole batch comes back
                failed = {m["MessageId"] for m in messages}
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
    # a batch of several (the stack takes one, but the worker handles a batch: the chaos test
    # kills it between two of its records)
    esm = EventSourceMapping(sqs, queue_url, queue_arn, [env], batch_size=10)
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
    elif len(sys.argv) == 6 and sys.argv[1] == "serve":
        _serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit("usage: lambda_sim.py worker-once QUEUE_URL QUEUE_ARN | serve NAME READ_FD WRITE_FD HANDLER_PATH")
