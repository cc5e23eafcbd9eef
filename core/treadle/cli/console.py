"""The console's run commands, against a running treadle (`--url`, else $TREADLE_URL, else the
address `treadle serve` listens on; the bearer from $TREADLE_TOKEN or $TREADLE_AUTH_TOKEN):

    treadle runs [--status S] [--agent A] [--user U] [--parent RUN] [--since T] [--until T] [--limit N] [--json]
    treadle describe RUN [--json]                   one screen: the run, what it waits on (and the
                                                    command that unblocks it), its sub-agent tree
    treadle attach RUN [--from-seq N] [--json]      replay, then the live tail (Ctrl-C: detach)
    treadle cancel RUN [--turn] [--reason TEXT]
    treadle answer RUN                              the pending questions, with their options
    treadle answer RUN "text" | --option N | --decline  [--id INTERRUPT]
    treadle input RUN "text" | -                    the next user turn (interactive runs, steering)
    treadle events RUN [--from-seq N] [--json] [--follow]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from treadle.cli.ui import console, escape, fail, guarded

if TYPE_CHECKING:
    from treadle.client import AsyncTreadle
    from treadle.client.models import Interrupt, Run, RunStatus

F = TypeVar("F", bound=Callable[..., Any])
Body = Callable[["AsyncTreadle"], Awaitable[int]]


def _url(url: str | None) -> str:
    if url or os.environ.get("TREADLE_URL"):
        return (url or os.environ["TREADLE_URL"]).rstrip("/")
    from treadle.config import load_settings

    host, port = load_settings().listen_host_port()
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"


def _client(url: str | None) -> AsyncTreadle:
    from treadle.client import AsyncTreadle, Retry

    return AsyncTreadle(_url(url), retry=Retry(attempts=3))


def url_option(f: F) -> F:
    return click.option("--url", help="the treadle to talk to (default: $TREADLE_URL, else TREADLE_LISTEN)")(f)


def _run(body: Body, url: str | None) -> int:
    async def go() -> int:
        async with _client(url) as client:
            return await body(client)

    return guarded(go, _url(url))


def _age(iso: str | None) -> str:
    if not iso:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


STATUS_STYLE = {"completed": "green", "failed": "red", "cancelled": "dim", "waiting": "yellow", "running": "cyan"}


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def when(text: str | None) -> datetime | None:
    """`--since`/`--until`: an age (`90s`, `30m`, `2h`, `7d`, `1w`: that long ago) or an RFC 3339
    time (without a zone: UTC)."""
    if text is None:
        return None
    t = text.strip()
    if t[:-1].replace(".", "", 1).isdigit() and t[-1:] in UNITS:
        return datetime.now(UTC) - timedelta(seconds=float(t[:-1]) * UNITS[t[-1]])
    try:
        at = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r}: an age like 30m, 2h, 7d, or a time like 2026-11-29T08:00") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@click.command("runs", help="list runs, newest first (filter by status, agent, user, parent, creation time)")
@click.option("--status", type=click.Choice(["queued", "running", "waiting", "completed", "failed", "cancelled"]))
@click.option("--agent")
@click.option("--user", "user_id")
@click.option("--parent", "parent_run_id", help="only this run's sub-agent runs")
@click.option("--since", help="created at or after: an age (30m, 2h, 7d) or a time (RFC 3339, UTC by default)")
@click.option("--until", help="created before: an age or a time, as --since")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@click.option("--json", "json_", is_flag=True, help="one JSON object per run")
@url_option
def runs_command(status: str | None, agent: str | None, user_id: str | None, parent_run_id: str | None,
                 since: str | None, until: str | None, limit: int, json_: bool, url: str | None) -> int:
    after, before = when(since), when(until)

    async def body(client: AsyncTreadle) -> int:
        page = await client.runs.list(status=cast("RunStatus | None", status), agent=agent, user_id=user_id,
                                      parent_run_id=parent_run_id, created_after=after, created_before=before,
                                      limit=limit)
        if json_:
            for run in page.runs:
                print(json.dumps(run.model_dump(mode="json")))
            return 0
        from rich.table import Table

        out = console()
        if not page.runs:
            out.print("no runs" + (" match" if status or agent or user_id or parent_run_id or after or before
                                    else " yet"))
            return 0
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("RUN", "AGENT", "STATUS", "ITER", "TOKENS", "CREATED", "WAITS ON"):
            table.add_column(col, no_wrap=col in ("RUN", "STATUS"), min_width=34 if col == "RUN" else None)
        for run in page.runs:
            tokens = f"{run.usage.input_tokens}/{run.usage.output_tokens}" if run.usage else "-"
            waits = ", ".join(sorted({w.kind for w in run.waits or []}))
            table.add_row(run.run_id, run.agent, f"[{STATUS_STYLE.get(run.status, '')}]{run.status}[/]",
                          str(run.iterations), tokens, _age(run.created_at), escape(waits))
        out.print(table)
        if page.next_cursor:
            out.print(f"[dim]… more: --limit {min(500, limit * 2)}[/]")
        return 0

    return _run(body, url)


@click.command("attach", short_help="replay a run, then follow it live",
               help="replay a run's events, then follow it live (Ctrl-C: detach; twice: cancel)")
@click.argument("run_id")
@click.option("--from-seq", type=click.IntRange(0), default=0, help="replay after this seq (0: from the start)")
@click.option("--json", "json_", is_flag=True, help="print raw events as JSON lines")
@url_option
def attach_command(run_id: str, from_seq: int, json_: bool, url: str | None) -> int:
    from treadle.cli.live import follow

    async def body(client: AsyncTreadle) -> int:
        await client.runs.get(run_id)  # 404 before anything is drawn
        return await follow(client, run_id, from_seq=from_seq, as_json=json_)

    return _run(body, url)


@click.command("cancel", short_help="cancel a run (or --turn: its current turn)",
               help="cancel a run (with its sub-agents), or with --turn the current turn of an interactive run")
@click.argument("run_id")
@click.option("--turn", is_flag=True, help="stop only the current turn; the run waits for input again")
@click.option("--reason")
@url_option
def cancel_command(run_id: str, turn: bool, reason: str | None, url: str | None) -> int:
    async def body(client: AsyncTreadle) -> int:
        if turn:
            await client.runs.cancel_turn(run_id, reason)
            console().print(f"turn of run {run_id} cancelled; the run waits for input")
            return 0
        result = await client.runs.cancel(run_id, reason)
        if result.status == "cancelled" or result.cancel_requested:
            console().print(f"run {run_id}: cancel requested (status {result.status})")
        else:
            console().print(f"run {run_id} had already finished ({result.status})")
        return 0

    return _run(body, url)


def _show_questions(run_id: str, pending: list[Interrupt]) -> None:
    out = console()
    for q in pending:
        out.print(f"[bold yellow]?[/] {escape(q.question)}  [dim]({q.interrupt_id}, {q.kind})[/]")
        for n, opt in enumerate(q.options or [], 1):
            label = opt.get("label") if isinstance(opt, dict) else opt
            out.print(f"    {n}. {escape(str(label))}")
        how = f'treadle answer {run_id} "your answer"'
        if len(pending) > 1:
            how += f" --id {q.interrupt_id}"
        out.print(f"  answer: {escape(how)}" + ("   or: --option N" if q.options else "") + "   or: --decline")


def _option(options: list[Any], n: int) -> str:
    picked = options[n - 1]
    return str(picked.get("label") if isinstance(picked, dict) else picked)


@click.command("answer", short_help="show a run's pending questions, or answer one",
               help="show a run's pending questions (with their options), or answer one")
@click.argument("run_id")
@click.argument("answer", required=False)
@click.option("--id", "interrupt_id", help="which question (needed when several are pending)")
@click.option("--option", "option", type=click.IntRange(1), help="answer with option N (1-based)")
@click.option("--decline", is_flag=True, help="decline to answer")
@url_option
def answer_command(run_id: str, answer: str | None, interrupt_id: str | None, option: int | None, decline: bool,
                   url: str | None) -> int:
    given = sum(x is not None and x is not False for x in (answer, option, decline or None))
    if given > 1:
        return fail("give one of ANSWER, --option N or --decline")

    async def body(client: AsyncTreadle) -> int:
        pending = (await client.runs.interrupts(run_id, status="pending")).interrupts
        if interrupt_id is not None:
            pending = [q for q in pending if q.interrupt_id == interrupt_id] or pending
        text = answer
        if given == 0:
            if not pending:
                console().print(f"run {run_id} has no pending question")
                return 0
            _show_questions(run_id, pending)
            if len(pending) > 1 or not (sys.stdin.isatty() and sys.stdout.isatty()):
                return 0
            # on a terminal, one question: ask for the answer here
            typed = str(await asyncio.to_thread(
                click.prompt, "your answer (a number picks that option; empty: leave it)", default="",
                show_default=False)).strip()
            if not typed:
                return 0
            options = pending[0].options or []
            text = _option(options, int(typed)) if typed.isdigit() and 1 <= int(typed) <= len(options) else typed
        chosen = [q for q in pending if q.interrupt_id == interrupt_id] if interrupt_id else pending
        if not chosen:
            return fail(f"run {run_id} has no pending question" + (f" {interrupt_id}" if interrupt_id else ""))
        if len(chosen) > 1:
            fail(f"run {run_id} has {len(chosen)} pending questions: say which with --id")
            _show_questions(run_id, chosen)
            return 1
        q = chosen[0]
        if option is not None:
            options = q.options or []
            if option > len(options):
                return fail(f"--option {option}: the question has {len(options)} option(s)")
            text = _option(options, option)
        done = await client.runs.answer(run_id, q.interrupt_id, text, decline=decline, resolved_by="cli")
        console().print(f"{done.status}: {escape(q.question)}" + (f" → {escape(text)}" if text else ""))
        return 0

    return _run(body, url)


@click.command("input", short_help="send a run its next user turn",
               help="send the next user turn to a run (an interactive run waiting for input, or steering a running "
                    "one); TEXT '-' reads stdin")
@click.argument("run_id")
@click.argument("text")
@url_option
def input_command(run_id: str, text: str, url: str | None) -> int:
    message = sys.stdin.read() if text == "-" else text

    async def body(client: AsyncTreadle) -> int:
        result = await client.runs.input(run_id, message)
        console().print(f"delivered to run {run_id}" + (" (it woke up)" if result.woke else ""))
        return 0

    return _run(body, url)


@click.command("events", short_help="print a run's events",
               help="print a run's stored events (--follow: then the live ones)")
@click.argument("run_id")
@click.option("--from-seq", type=click.IntRange(0), default=0)
@click.option("--json", "json_", is_flag=True, help="one JSON object per event (seq, type, ts, fields)")
@click.option("--follow", "-f", is_flag=True, help="keep printing new events until the run ends")
@url_option
def events_command(run_id: str, from_seq: int, json_: bool, follow: bool, url: str | None) -> int:
    async def body(client: AsyncTreadle) -> int:
        out = console()
        last = from_seq

        def show(seq: int, etype: str, data: dict[str, Any]) -> None:
            if json_:
                print(json.dumps({**data, "seq": seq, "type": etype}), flush=True)
            else:
                fields = {k: v for k, v in data.items() if k not in ("seq", "type", "ts")}
                line = json.dumps(fields, default=str)
                out.print(f"[dim]{seq:>5}[/] [bold]{etype}[/] {escape(line if len(line) <= 200 else line[:200] + '…')}")

        while True:
            page = await client.runs.events(run_id, from_seq=last)
            for ev in page.events:
                show(ev.seq, ev.type, ev.model_dump())
                last = ev.seq
            if not page.events:
                break
        if follow:
            async for live in client.runs.stream(run_id, last):
                if live.id is not None:
                    show(live.id, live.event, live.data)
        return 0

    return _run(body, url)


def _duration(run: Run) -> str:
    start = datetime.fromisoformat(run.created_at)
    end = datetime.fromisoformat(run.completed_at) if run.completed_at else datetime.now(UTC)
    seconds = (end - start).total_seconds()
    return f"{seconds:.1f}s" if seconds < 60 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


@click.command("describe", short_help="one screen: a run, what it waits on, its sub-agent tree",
               help="a run on one screen: its state, what it waits on with the command that unblocks it "
                    "(down its sub-agent runs: a child's question to a human, say), and its sub-agent tree")
@click.argument("run_id")
@click.option("--json", "json_", is_flag=True, help="the run, its blockers and its tree as one JSON object")
@url_option
def describe_command(run_id: str, json_: bool, url: str | None) -> int:
    from treadle.cli.waits import MAX_DEPTH, blockers

    async def tree(client: AsyncTreadle, run: Run, depth: int) -> list[tuple[int, Run]]:
        rows = [(depth, run)]
        if depth < MAX_DEPTH:
            for child in reversed((await client.runs.list(parent_run_id=run.run_id, limit=100)).runs):
                rows += await tree(client, child, depth + 1)
        return rows

    async def body(client: AsyncTreadle) -> int:
        run = await client.runs.get(run_id)
        blocked = await blockers(client, run)
        rows = await tree(client, run, 0)
        if json_:
            print(json.dumps({"run": run.model_dump(mode="json"),
                              "waits_on": [{"run_id": b.run_id, "agent": b.agent, "depth": b.depth, "what": b.what,
                                            "command": b.command} for b in blocked],
                              "tree": [{"depth": d, "run_id": r.run_id, "agent": r.agent, "status": r.status}
                                       for d, r in rows]}))
            return 0
        out = console()
        tokens = f"{run.usage.input_tokens} in / {run.usage.output_tokens} out" if run.usage else "-"
        out.print(f"[bold]{run.run_id}[/] · agent {escape(run.agent)} · "
                  f"[{STATUS_STYLE.get(run.status, '')}]{run.status}[/]"
                  + (f" ({escape(run.stop_reason)})" if run.stop_reason else ""))
        out.print(f"  user {escape(run.user_id or '-')} · {run.iterations} iterations · {tokens} tokens · "
                  f"created {_age(run.created_at)} · {'took' if run.completed_at else 'for'} {_duration(run)}")
        if run.parent_run_id:
            out.print(f"  sub-agent run of {run.parent_run_id} (depth {run.depth})")
        if run.error:
            out.print(f"  [red]error: {escape(run.error)}[/]")
        if blocked:
            out.print("[bold yellow]waits on[/]")
            for b in blocked:
                who = "" if b.run_id == run.run_id else f"{b.run_id} ({escape(b.agent)}): "
                out.print(f"  {'  ' * b.depth}• {who}{escape(b.what)}")
                if b.command:
                    out.print(f"  {'  ' * b.depth}  [yellow]→ {escape(b.command)}[/]")
        if len(rows) > 1:
            out.print("[bold]sub-agent runs[/]")
            for d, r in rows[1:]:
                out.print(f"  {'  ' * (d - 1)}└ {r.run_id} {escape(r.agent)} "
                          f"[{STATUS_STYLE.get(r.status, '')}]{r.status}[/] · {r.iterations} it · {_duration(r)}")
        return 0

    return _run(body, url)


COMMANDS = [runs_command, describe_command, attach_command, cancel_command, answer_command, input_command,
            events_command]
