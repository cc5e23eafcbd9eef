"""The contract test's helpers: a served treadle (tests/support/frontdoors.py: the sidecar app on
a loopback port, mock and fake vendors) running in a thread with its own event loop, and
schemathesis' command line run against its served spec."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.frontdoors import TOKEN, served_treadle

#: what the contract run checks: every schemathesis check — each answer's status is documented for
#: its operation, its body, content type and headers match the spec (an undocumented 500 fails),
#: a request the schema allows is accepted and one it forbids is refused; the known divergences
#: (docs/api.md) are per-operation statuses in DIVERGENCES
CHECKS = "all"
DIVERGENCES = Path(__file__).parents[1] / "contract" / "schemathesis.toml"


@dataclass
class ServedInThread:
    url: str
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class _ThreadState:
    """What the server thread hands the test's thread (set before `ready`)."""

    url: str = ""
    error: BaseException | None = None
    loop: asyncio.AbstractEventLoop | None = None
    stop: asyncio.Event | None = None


@contextmanager
def serve_in_thread(db_url: str, timeout: float = 60.0) -> Iterator[ServedInThread]:
    ready = threading.Event()
    state = _ThreadState()

    async def main() -> None:
        stop = asyncio.Event()
        state.loop, state.stop = asyncio.get_running_loop(), stop
        try:
            async with served_treadle(db_url) as served:
                state.url = served.url
                ready.set()
                await stop.wait()
        except BaseException as exc:  # startup failed: the waiting test says why
            state.error = exc
            ready.set()
            raise

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="contract-server", daemon=True)
    thread.start()
    if not ready.wait(timeout):
        raise TimeoutError(f"the served treadle did not start within {timeout}s")
    if state.error is not None:
        raise RuntimeError("the served treadle failed to start") from state.error
    assert state.loop is not None and state.stop is not None
    try:
        yield ServedInThread(state.url, TOKEN)
    finally:
        state.loop.call_soon_threadsafe(state.stop.set)
        thread.join(timeout)


def schemathesis_run(spec_url: str, token: str, *args: str, timeout: float = 240.0,
                     config: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`schemathesis run` (its command line, a subprocess) against the served spec, in a scratch
    directory: schemathesis keeps the failing cases it found (`.schemathesis/`) and replays them
    next time, and a test must not depend on what an earlier run left behind. `config` is a
    schemathesis.toml (the scratch directory has none, so without it none is read)."""
    exe = Path(sys.executable).with_name("schemathesis")
    config_args = ["--config-file", str(config)] if config is not None else []
    cmd = [str(exe) if exe.exists() else "schemathesis", *config_args, "run", spec_url,
           "-H", f"Authorization: Bearer {token}", "--no-color", *args]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": ""}
    with tempfile.TemporaryDirectory(prefix="contract-") as scratch:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=scratch, check=False)


@contextmanager
def serve_app_in_thread(app: object, timeout: float = 30.0) -> Iterator[str]:
    """Any ASGI app on a loopback port (uvicorn in a thread); yields its URL."""
    import socket
    import time

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise TimeoutError("the app did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout)
