"""The live view of a run (`treadle run`, `treadle attach`): streamed text, each tool call and
result, a spinner with the elapsed time of the current iteration, the time each iteration took
(time parked is not iteration time: it is shown apart), pending questions with the command that
answers them, and while the run is parked what it waits on with the command that unblocks it —
down its sub-agent runs (a child's question to a human, say; cli/waits.py); and Ctrl-C: once detaches (the run goes on;
the attach command is printed), twice within GRACE_S cancels the run. When the CLI serves
in-process, the first Ctrl-C stops that server cleanly instead (the run stays in the database
and goes on at the next `treadle serve`)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from rich.console import Console
from rich.status import Status
from rich.text import Text

from treadle.cli.ui import animated, console, escape
from treadle.cli.waits import Blocker, blockers
from treadle.client import ApiError, AsyncTreadle, SseEvent
from treadle.domain.events import EventType
from treadle.domain.tasks import cancel_and_wait

GRACE_S = 2.0
#: how often a parked run's blockers are read again (a child may ask later than its parent parks)
BLOCKERS_EVERY_S = 1.0
OK_STOPS = ("end_turn", "max_iterations")


def _dur(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 60 else f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


class _Ticker:
    """The spinner's text, computed at each redraw (so the seconds tick)."""

    def __init__(self, view: LiveView) -> None:
        self.view = view

    def __rich__(self) -> Text:
        v = self.view
        now = time.monotonic()
        if v.waiting:
            return Text(f"{v.waiting} · {_dur(now - v.wait_since)}", style="yellow")
        return Text(f"iteration {v.iteration} · {_dur(now - v.iter_since)}  (run {_dur(now - v.started)})",
                    style="dim")


class LiveView:
    """Renders a run's events on `out` (Rich)."""

    def __init__(self, run_id: str | None = None, out: Console | None = None) -> None:
        self.out = out or console()
        self.run_id = run_id
        self.animate = animated(self.out)
        self.started = self.iter_since = self.wait_since = time.monotonic()
        self.iteration = 1
        self.waiting = ""
        #: the current park's start (None: not parked), and the time parked in this iteration
        self.parked_since: float | None = None
        self.parked_s = 0.0
        self.streaming = False
        self._streamed: set[object] = set()
        self._status: Status | None = None

    # the spinner ----------------------------------------------------------------------------------

    def spin(self) -> None:
        if self.animate and self._status is None and not self.streaming:
            self._status = Status(_Ticker(self), console=self.out, spinner="dots")
            self._status.start()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _p(self, text: str | Text, style: str | None = None) -> None:
        self.out.print(text, style=style, markup=False, highlight=False)

    def _end_stream(self) -> None:
        if self.streaming:
            self.out.file.write("\n")
            self.out.file.flush()
            self.streaming = False

    # events ---------------------------------------------------------------------------------------

    def event(self, ev: SseEvent) -> None:
        etype, data = ev.event, ev.data
        if etype == EventType.TEXT_DELTA:
            self.stop()
            self.streaming = True
            self._streamed.add(data.get("iteration"))
            self.out.file.write(str(data.get("text", "")))
            self.out.file.flush()
            return
        if etype in (EventType.THINKING_DELTA, EventType.SESSION, EventType.AGENT):
            return
        if etype != EventType.TEXT:
            self._end_stream()
        self.stop()
        self._render(etype, data)
        if etype not in (EventType.DONE, EventType.ERROR):
            self.spin()

    def _render(self, etype: str, data: dict[str, Any]) -> None:
        if etype == EventType.STARTED:
            self.run_id = str(data.get("run_id") or self.run_id)
            self._p(f"▶ run {self.run_id} · agent {data.get('agent')}", "bold")
            self.iter_since = time.monotonic()
        elif etype == EventType.TEXT:
            if data.get("iteration") in self._streamed:
                self._end_stream()
            else:
                self._p(str(data.get("text", "")))
        elif etype == EventType.THINKING:
            self._p(f"(thinking) {data.get('text', '')}", "dim")
        elif etype == EventType.TOOL_CALL:
            tu = data.get("tool_use") or {}
            self._p(f"→ {tu.get('name')} {json.dumps(tu.get('input'), sort_keys=True)}", "cyan")
        elif etype == EventType.TOOL_RESULT:
            tu = data.get("tool_use") or {}
            text = str(data.get("text", ""))
            text = text if len(text) <= 300 else text[:300] + "…"
            if data.get("is_error"):
                self._p(f"✗ {tu.get('name')} {text}", "red")
            else:
                self._p(f"← {tu.get('name')} {text}", "green")
            self.unpark()
        elif etype == EventType.RETRY:
            r = data.get("retry") or {}
            self._p(f"↻ retry {r.get('attempt')} in {r.get('wait_ms')} ms ({r.get('reason')})", "yellow")
        elif etype == EventType.USAGE:
            u = data.get("usage") or {}
            now = time.monotonic()
            parked = f" (+{_dur(self.parked_s)} parked)" if self.parked_s >= 0.05 else ""
            took = max(0.0, now - self.iter_since - self.parked_s)  # a park dated by its event's own time
            self._p(f"  · iteration {data.get('iteration')} took {_dur(took)}"
                    f"{parked} · {u.get('input_tokens')} in / {u.get('output_tokens')} out tokens "
                    f"({u.get('provider')}/{u.get('model')})", "dim")
            self.iteration = int(data.get("iteration") or self.iteration) + 1
            self.iter_since, self.parked_s = now, 0.0
        elif etype == EventType.TOOL_PARKED:
            wait = data.get("wait") or {}
            self.park(_since(data))
            kind = wait.get("kind")
            if kind == "agent":
                extra = wait.get("extra") or {}
                self.waiting = f"waiting on {extra.get('count', 'its')} sub-agent run(s)"
            elif kind != "interruption":  # a question says so itself
                self.waiting = f"parked: {kind}"
        elif etype == EventType.INTERRUPTION_PENDING:
            self.question(data)
        elif etype == EventType.AWAITING_INPUT:
            self.waiting = "waiting for input"
            self.wait_since = _since(data)
            self.park(self.wait_since)
            self._p(f"… the run waits for your input: treadle input {self.run_id} \"your message\"", "yellow")
        elif etype in (EventType.USER_INPUT, EventType.STEER):
            self.unpark()
            if data.get("source") in ("input", "steer"):
                text = data.get("user_input", {}).get("text") if etype == EventType.STEER else _segments_text(data)
                self._p(f"» {text}", "magenta")
        elif etype == EventType.TURN_CANCELLED:
            self._p(f"■ turn cancelled ({data.get('reason')})", "yellow")
        elif etype == EventType.DONE:
            u = data.get("usage") or {}
            self._p(f"■ done: {data.get('stop_reason')} · {u.get('input_tokens', 0)} in / "
                    f"{u.get('output_tokens', 0)} out tokens · {_dur(time.monotonic() - self.started)}", "bold")
        elif etype == EventType.ERROR:
            self._p(f"■ error {data.get('code')}: {data.get('error')}", "bold red")

    def park(self, since: float) -> None:
        if self.parked_since is None:
            self.parked_since = self.wait_since = since

    def unpark(self) -> None:
        self.waiting = ""
        if self.parked_since is not None:
            self.parked_s += max(0.0, time.monotonic() - self.parked_since)
            self.parked_since = None

    @property
    def parked(self) -> bool:
        return self.parked_since is not None

    def blockers(self, found: list[Blocker]) -> None:
        """What the parked run waits on (cli/waits.py), each with the command that unblocks it."""
        self.stop()
        self._end_stream()
        for b in found:
            who = "" if b.run_id == self.run_id else f"sub-agent {b.run_id} ({b.agent}) waits on "
            self._p(f"… {'  ' * b.depth}{who}{b.what}", "yellow")
            if b.command:
                self._p(f"  {'  ' * b.depth}→ {b.command}", "yellow")
        self.spin()

    def question(self, data: dict[str, Any]) -> None:
        """A pending question, its options, and how to answer it."""
        iid = data.get("interrupt_id")
        self.waiting = "waiting for an answer"
        self.wait_since = _since(data)
        self.park(self.wait_since)
        self._p(f"? {data.get('question')}", "bold yellow")
        options = data.get("options") or []
        for n, opt in enumerate(options, 1):
            label = opt.get("label") if isinstance(opt, dict) else opt
            self._p(f"    {n}. {label}", "yellow")
        how = f"treadle answer {self.run_id} \"your answer\""
        self._p(f"  answer: {how}" + ("   or: --option N" if options else "") + f"   (question {iid})", "yellow")

    def print_note(self, text: str, style: str = "yellow") -> None:
        self.stop()
        self._end_stream()
        console(stderr=True).print(escape(text), style=style, highlight=False)


def _since(data: dict[str, Any]) -> float:
    """The monotonic time of a stored event (its `ts`), so a replayed wait shows its real age."""
    now = time.monotonic()
    try:
        ts = datetime.fromisoformat(str(data["ts"]))
    except (KeyError, ValueError):
        return now
    return now - max(0.0, (datetime.now(UTC) - ts).total_seconds())


def _segments_text(data: dict[str, Any]) -> str:
    return " ".join(str(b.get("text", "")) for seg in data.get("segments") or []
                    for b in seg.get("content") or [] if isinstance(b, dict))


def exit_status(ev: SseEvent | None) -> int:
    if ev is None:
        return 0
    if ev.event == EventType.DONE:
        return 0 if ev.data.get("stop_reason") in OK_STOPS else 1
    return 1 if ev.event == EventType.ERROR else 0


async def follow(
    client: AsyncTreadle,
    run_id: str,
    *,
    from_seq: int = 0,
    as_json: bool = False,
    in_process: bool = False,
) -> int:
    """Stream the run until it ends, or until Ctrl-C (module docstring). `in_process`: the run's
    server lives in this process (the caller stops it once this returns)."""
    view = LiveView(run_id)
    last: list[SseEvent] = []

    async def watch_blockers() -> None:
        """While the run is parked on something other than its own question: what it (and its
        sub-agent runs) wait on, each new blocker printed once."""
        shown: set[tuple[str, str]] = set()
        while True:
            if view.parked:
                try:
                    now_blocking = await blockers(client, await client.runs.get(run_id))
                except (ApiError, httpx.TransportError):  # the stream says what is wrong, if anything
                    now_blocking = []
                found = [b for b in now_blocking if (b.run_id, b.what) not in shown
                         and not (b.run_id == run_id and b.what.startswith("an answer to"))]  # on the screen already
                shown.update((b.run_id, b.what) for b in found)
                if found:
                    view.blockers(found)
            else:
                shown.clear()
            await asyncio.sleep(BLOCKERS_EVERY_S)

    async def consume() -> int:
        if not as_json:  # JSON lines are for programs: no spinner between them
            view.spin()
        watcher = None if as_json else asyncio.create_task(watch_blockers())
        try:
            async for ev in client.runs.stream(run_id, from_seq):
                if as_json:
                    print(json.dumps({"event": ev.event, "id": ev.id, **ev.data}), flush=True)
                else:
                    view.event(ev)
                if ev.id is not None:
                    last[:] = [ev]
        finally:
            if watcher is not None:
                await cancel_and_wait(watcher)
        view.stop()
        return exit_status(last[0] if last else None)

    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    try:
        task = asyncio.create_task(consume())
        stop = asyncio.create_task(interrupted.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            stop.cancel()
            return task.result()
        await cancel_and_wait(task)
        view.stop()
        interrupted.clear()
        if not in_process:
            view.print_note(f"detached: run {run_id} keeps running. Attach again: treadle attach {run_id}\n"
                            f"  (Ctrl-C again within {GRACE_S:.0f} s cancels the run)")
        else:
            view.print_note(f"stopping the in-process server: run {run_id} stays in the database and goes on "
                            f"at the next `treadle serve` (then: treadle attach {run_id})\n"
                            f"  (Ctrl-C again within {GRACE_S:.0f} s cancels the run)")
        try:
            await asyncio.wait_for(interrupted.wait(), GRACE_S)
        except TimeoutError:
            return 130
        result = await client.runs.cancel(run_id, "cancelled from the console (Ctrl-C twice)")
        view.print_note(f"cancelled run {run_id} (status {result.status})", "red")
        return 130
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        view.stop()
