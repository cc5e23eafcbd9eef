"""The console's output: Rich consoles that honour NO_COLOR (https://no-color.org: no ANSI escape
at all, and no spinner, which redraws with escapes) and plain pipes, and one-line errors."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from rich.console import Console


def no_color() -> bool:
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def console(*, stderr: bool = False) -> Console:
    """stdout (or stderr) as Rich sees it now (so test capture and redirection are followed)."""
    plain = no_color()
    file = sys.stderr if stderr else sys.stdout
    # a pipe has no width: tables are not squeezed to 80 columns there (run ids stay whole)
    width = None if file.isatty() or os.environ.get("COLUMNS") else 250
    return Console(file=file, color_system=None if plain else "auto", no_color=plain, highlight=False,
                   emoji=False, soft_wrap=True, width=width)


def animated(con: Console) -> bool:
    """Whether a spinner may redraw a line: a terminal, and colour allowed."""
    return con.is_terminal and not no_color()


def fail(message: str, hint: str | None = None) -> int:
    """One error line (and one hint line) on stderr; the exit status 1."""
    err = console(stderr=True)
    err.print(f"[bold red]error:[/] {escape(message)}")
    if hint:
        err.print(f"  {escape(hint)}")
    return 1


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


#: what a console command that talks to a server says when none answers (only `treadle run` can
#: run in this process instead: it passes its own hint)
SERVER_HINT = "start one with `treadle serve`, or point --url (or $TREADLE_URL) at a running one"


def guarded(body: Callable[[], Coroutine[Any, Any, int]], url: str | None, hint: str = SERVER_HINT) -> int:
    """Run a console command; the API's error and a server that is down become one or two lines."""
    import httpx

    from treadle.client import ApiError

    try:
        return asyncio.run(body())
    except ApiError as exc:
        return fail(f"{exc.code}: {exc.message}")
    except httpx.TransportError as exc:  # a server that is down or went away: one line, not a traceback
        where = url or os.environ.get("TREADLE_URL") or "the treadle server"
        return fail(f"cannot reach {where}: {exc.__class__.__name__}: {exc or 'connection failed'}", hint)
