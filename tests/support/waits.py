"""Waiting in tests without hoping: hold a model call until the test has done what it must do
while the call is under way (`treadle.testing.until` polls a condition under a deadline)."""

from __future__ import annotations

import asyncio

from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Provider
from treadle.providers.mock import MockProvider


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
