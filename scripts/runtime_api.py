"""A local stand-in for Lambda's Runtime API (the endpoints AWS's runtime interface client,
`awslambdaric`, calls), for the cold-start benchmark (scripts/coldstart.py --ric).

    GET  /2018-06-01/runtime/invocation/next          the next event (blocks until one is sent)
    POST /2018-06-01/runtime/invocation/{id}/response  an invocation's answer
    POST /2018-06-01/runtime/invocation/{id}/error     an invocation's error
    POST /2018-06-01/runtime/init/error                INIT failed
    GET  /2018-06-01/runtime/restore/next              SnapStart: INIT and the before-snapshot
                                                       hooks are done; answered at the "restore"
    POST /2018-06-01/runtime/restore/error             an after-restore hook failed

Every arrival is timestamped (time.perf_counter) so the caller can tell INIT, restore and each
invocation apart. One runtime (one process) per RuntimeApi."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/2018-06-01/runtime"


class RuntimeApi:
    def __init__(self, function_name: str = "treadle-fn", timeout_s: float = 60.0) -> None:
        self.function_name = function_name
        self.timeout_s = timeout_s
        #: (what, perf_counter) in arrival order: next, response, error, init_error, restore_next
        self.marks: list[tuple[str, float]] = []
        self.errors: list[Any] = []
        self._events: queue.Queue[Any] = queue.Queue()
        self._answers: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._restore = threading.Event()
        self._arrived = threading.Condition()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: bytes = b"{}", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # http.server's name
                if self.path == f"{PREFIX}/invocation/next":
                    api._mark("next")
                    event = api._events.get()
                    request_id = str(uuid.uuid4())
                    deadline_ms = int((time.time() + api.timeout_s) * 1000)
                    self._reply(200, json.dumps(event).encode(), {
                        "Content-Type": "application/json",
                        "Lambda-Runtime-Aws-Request-Id": request_id,
                        "Lambda-Runtime-Deadline-Ms": str(deadline_ms),
                        "Lambda-Runtime-Invoked-Function-Arn":
                            f"arn:aws:lambda:us-east-1:123456789012:function:{api.function_name}",
                        "Lambda-Runtime-Trace-Id": f"Root=1-{int(time.time()):x}-{uuid.uuid4().hex[:24]};Sampled=0",
                    })
                elif self.path == f"{PREFIX}/restore/next":
                    api._mark("restore_next")
                    api._restore.wait()
                    self._reply(200)
                else:
                    self._reply(404)

            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/response"):
                    api._mark("response")
                    api._answers.put(("response", json.loads(body) if body else None))
                elif self.path.endswith("/error"):
                    kind = "init_error" if "/init/" in self.path else "error"
                    api._mark(kind)
                    api.errors.append(body.decode(errors="replace"))
                    api._answers.put((kind, body.decode(errors="replace")))
                self._reply(202)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _mark(self, what: str) -> None:
        with self._arrived:
            self.marks.append((what, time.perf_counter()))
            self._arrived.notify_all()

    def wait_for(self, what: str, count: int = 1, timeout_s: float = 120.0) -> float:
        """When the `count`-th `what` arrived (waits for it)."""
        deadline = time.monotonic() + timeout_s
        with self._arrived:
            while True:
                seen = [t for w, t in self.marks if w == what]
                if len(seen) >= count:
                    return seen[count - 1]
                if "init_error" in (w for w, _ in self.marks):
                    raise RuntimeError(f"INIT failed: {self.errors}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {what} #{count} within {timeout_s} s")
                self._arrived.wait(left)

    def restore(self) -> float:
        """Answer restore/next (the snapshot is "restored"); when."""
        t = time.perf_counter()
        self._restore.set()
        return t

    def invoke(self, event: Any, timeout_s: float = 120.0) -> tuple[float, float, Any]:
        """Hand `event` to the waiting runtime: (sent at, answered at, answer)."""
        t = time.perf_counter()
        self._events.put(event)
        kind, answer = self._answers.get(timeout=timeout_s)
        done = [m for m in self.marks if m[0] in ("response", "error")][-1][1]
        if kind != "response":
            raise RuntimeError(f"the invocation failed: {answer}")
        return t, done, answer

    def close(self) -> None:
        self._restore.set()
        self._server.shutdown()
        self._server.server_close()
