"""Streams a test stops reading early: the SSE readers (`TreadleClient.stream`, the API's
`stream_run_events`) are declared as async iterators and are async generators, which a test that
hangs up must close (the connection, the hub subscription) instead of leaving to the collector."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

T = TypeVar("T")


def closable(stream: AsyncIterator[T]) -> AsyncGenerator[T, None]:
    """`stream` as the async generator it is (for `aclose()` / `contextlib.aclosing`); fails when
    it is not one, which would leave a hung-up reader open."""
    assert isinstance(stream, AsyncGenerator), f"{type(stream).__name__} cannot be closed early"
    return stream
