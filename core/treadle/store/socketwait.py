"""Waiting for the server's answer on a connection that keeps its socket registered with the loop.

psycopg's asyncio wait (3.3: `psycopg.waiting.wait_async`) registers the connection's socket with
the event loop for each wait and removes it afterwards, with a timer beside it: two `epoll_ctl`
calls, a loop handle and a timer handle per statement (measured on 4 connections: 37 µs of client
CPU per trivial statement with it, 22 µs with this; ~2 % of a worker's CPU per loop iteration,
whose one statement carries much more: docs/benchmarks.md).

`SocketReader` registers a connection's socket once and keeps it registered while statements
come and go: a readable socket resolves the current waiter's future; with nobody waiting (the
server closed the connection, say) the reader unregisters itself and the next wait registers it
again. A wakeup with nothing to read yet (the loop reported the previous answer's bytes once
more before they were read) is harmless: psycopg's generators read what there is and wait again.
It unregisters whenever the connection is closed or collected, and whenever a wait ends in
an exception (libpq closes the socket on a lost connection; a file descriptor number a closed
socket leaves registered would shadow the next socket given that number).

Only the plain case is handled here: the generator waits to read. A wait for writing (a
statement larger than the socket's buffer), a wait with a timeout, and a wait interrupted by a
cancel go to psycopg's own wait (`NotReadOnly`, `Resumed`), which owns those cases — the
cancel of a running query on the server among them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from psycopg.waiting import Ready, Wait

PQGen = Generator[Any, Any, Any]


class NotReadOnly(Exception):
    """The generator asked for something other than a read: `resumed` yields that first."""

    def __init__(self, resumed: Resumed) -> None:
        self.resumed = resumed


class Resumed:
    """A generator that first yields a state already taken from `gen` — or raises `error` — then
    goes on with `gen` (psycopg's wait drives it with `next` and `send` only)."""

    def __init__(self, gen: PQGen, state: Any = None, error: BaseException | None = None) -> None:
        self.gen, self.state, self.error, self.started = gen, state, error, False

    def __iter__(self) -> Resumed:
        return self

    def __next__(self) -> Any:
        if not self.started:
            self.started = True
            if self.error is not None:
                raise self.error
            return self.state
        return next(self.gen)

    def send(self, value: Any) -> Any:
        if not self.started:
            return next(self)
        return self.gen.send(value)


class SocketReader:
    """One connection's socket, registered with one loop for reading while it is in use."""

    __slots__ = ("fd", "future", "loop", "registered")

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop, self.fd = loop, fd
        self.future: asyncio.Future[None] | None = None
        self.registered = False

    def _readable(self) -> None:
        future = self.future
        if future is not None and not future.done():
            future.set_result(None)
        else:  # nobody waits: stop listening until somebody does
            self.drop()

    def drop(self) -> None:
        """Unregister the socket (idempotent; a closed loop has nothing to unregister)."""
        if self.registered:
            self.registered = False
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)

    async def wait(self, gen: PQGen) -> Any:
        """Drive `gen` (a psycopg generator) to its end; its return value."""
        try:
            state = next(gen)
            while True:
                if state != Wait.R:
                    self.drop()
                    raise NotReadOnly(Resumed(gen, state))
                future = self.future = self.loop.create_future()
                if not self.registered:
                    self.loop.add_reader(self.fd, self._readable)
                    self.registered = True
                try:
                    await future
                finally:
                    self.future = None
                state = gen.send(Ready.R)
        except StopIteration as done:
            return done.value
        except BaseException:  # (NotReadOnly included: it dropped the registration already)
            self.drop()
            raise
