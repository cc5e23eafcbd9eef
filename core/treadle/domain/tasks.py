"""Ending a helper task without losing a cancel of the caller.

`task.cancel()` then `with suppress(CancelledError): await task` is the usual way to end a helper
task, and it has a hole: a cancel of the *caller* that lands while it awaits the helper raises
the same CancelledError there, and the suppress swallows it. The caller then goes on as if never
cancelled: a worker whose step ended while `WorkerPool.stop` cancelled it kept polling for jobs,
and the stop waited for ever (seen as a hang of scripts/bench_cancel.py)."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended, whatever it raises — except a cancel of the
    calling task itself, which propagates."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:
        pass
