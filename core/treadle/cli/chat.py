"""`treadle chat AGENT`: a conversation in the terminal (issue 34). Each line you type is the next
turn of one session — the first opens it (`POST /v1/runs`), every later one continues it
(`POST /v1/sessions/{id}/messages`) — and the agent's answer streams back. `--session ID`
continues an earlier conversation. An empty line, `/exit` or end of input ends the chat; the
session stays (`treadle chat AGENT --session ID` picks it up again).

    treadle chat assistant [--session s_…] [--user-id ada] [--url http://…]
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

import click

from treadle.cli.console import _run, url_option
from treadle.cli.ui import console, escape
from treadle.domain.events import EventType

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from treadle.client import AsyncTreadle, SseEvent

EXIT = ("", "/exit", "/quit")


async def _read_line(prompt: str) -> str | None:
    """A line of input (None: end of input); the prompt only on a terminal."""
    if sys.stdin.isatty():
        sys.stdout.write(prompt)
        sys.stdout.flush()
    line = await asyncio.to_thread(sys.stdin.readline)
    return None if line == "" else line.rstrip("\n")


@click.command("chat", short_help="a conversation with an agent (a session) in the terminal",
               help="talk with an agent: each line is the next turn of one session (empty line or /exit ends)")
@click.argument("agent")
@click.option("--session", "session_id", help="continue this session (its agent must be AGENT)")
@click.option("--user-id", help="the session's user (a new session only)")
@url_option
def chat_command(agent: str, session_id: str | None, user_id: str | None, url: str | None) -> int:
    async def body(client: AsyncTreadle) -> int:
        out = console()
        sid = session_id
        if sid is not None:
            session = await client.sessions.get(sid)
            if session.agent != agent:
                out.print(f"[red]session {escape(sid)} belongs to agent {escape(session.agent)}[/]")
                return 1
            out.print(f"[dim]session {escape(sid)} ({session.run_count} turns so far)[/]")
        while (line := await _read_line("you> ")) is not None and line.strip() not in EXIT:
            events: AsyncIterator[SseEvent] = (
                client.runs.start_streaming(agent, line, user_id=user_id) if sid is None
                else client.sessions.send_streaming(sid, line))
            async for ev in events:
                if ev.event == EventType.SESSION and sid is None:
                    sid = str(ev.data.get("text"))
                    out.print(f"[dim]session {escape(sid)}[/]")
                elif ev.event == EventType.TEXT:
                    out.print(f"[bold]{escape(agent)}>[/] {escape(str(ev.data.get('text', '')))}")
                elif ev.event == EventType.ERROR:
                    out.print(f"[red]error: {escape(str(ev.data.get('code')))}: "
                              f"{escape(str(ev.data.get('error') or ev.data.get('message') or ''))}[/]")
        if sid is not None:
            out.print(f"[dim]continue with: treadle chat {escape(agent)} --session {escape(sid)}[/]")
        return 0

    return _run(body, url)
