"""The cloud's stream function (`python -m treadle_cloud.stream`, what the Lambda Web Adapter
runs) as a real process on loopback, ready when its readiness path answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.e2e import free_port

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def stream_server(env: dict[str, str]) -> Iterator[str]:
    """Start the stream server with `env` on top of this process's environment; yields its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "treadle_cloud.stream"],
                            env={**os.environ, **env, "PORT": str(port), "TREADLE_SSE_BUDGET_SECONDS": "120"},
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # what the adapter does before the first invocation: wait for the readiness path
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the stream server did not become ready"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
