"""A cancel signal a waiter can listen to without a task of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class CancelSignal(asyncio.Event):
    """An `asyncio.Event` that also calls its listeners, synchronously, when it becomes set.

    The cancel watchers (store/cancels.py) set it when they hear a run's cancel; the engine's
    `interruptible` (engine/cancelling.py) listens while the step awaits a model or tool call, in
    the step's own task — instead of running the call in a task of its own and waiting on the
    signal in another, which cost two tasks per awaited call on the hot path."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[Callable[[], None]] = []

    def set(self) -> None:
        if self.is_set():
            return
        super().set()
        for listener in tuple(self._listeners):
            listener()

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.remove(listener)
