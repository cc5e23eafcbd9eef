"""Waiting in tests without hoping: poll a condition under a deadline, or hold a model call until
the test has done what it must do while the call is under way."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Provider
from treadle.providers.mock import MockProvider


async def until(condition: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.01,
                what: str = "the condition") -> Any:
    """Poll `condition()` (sync or async) until it returns something truthy, and return that;
    AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await asyncio.sleep(interval)


class GatedProvider:
    """A provider (the mock, unless another is given) whose calls wait at a gate: `entered` is set
    when a call arrives, and every call waits for `open()` before it answers. Lets a test act
    while a model call is certainly under way, instead of sleeping and hoping it is."""

    def __init__(self, inner: Provider | None = None) -> None:
        self.inner: Provider = inner or MockProvider()
        self.name = self.inner.name
        self.entered = asyncio.Event()
        self._open = asyncio.Event()

    def open(self) -> None:
        self._open.set()

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        self.entered.set()
        await self._open.wait()
        return await self.inner.call(req, on_delta)
