"""Ending a helper task without losing a cancel of the caller.

`task.cancel()` then `with suppress(CancelledError): await task` is the usual way to end a helper
task, and it has a hole: a cancel of the *caller* that lands while it awaits the helper raises
the same CancelledError there, and the suppress swallows it. The caller then goes on as if never
cancelled: a worker whose step ended while `WorkerPool.stop` cancelled it kept polling for jobs,
and the stop waited for ever (seen as a hang of scripts/bench_cancel.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended, whatever it raises — except a cancel of the
    calling task itself, which propagates."""
    await cancel_all_and_wait([task])


async def cancel_all_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel every task once, then wait for each to end, as `cancel_and_wait`. Once: a second
    cancel lands in the task's own clean-up of the first — a worker cancelling its query on the
    server then gives up on it and closes its connection instead."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception:
            pass
