"""`treadle serve | run | init | doctor`."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from treadle import __version__
from treadle.cli.starter import STARTER_YAML
from treadle.errors import ConfigError, TreadleError
from treadle.telemetry.logs import configure_logging


def _settings(args: argparse.Namespace) -> Any:
    from treadle.config import load_settings

    overrides: dict[str, Any] = {}
    if getattr(args, "config", None):
        overrides["config"] = Path(args.config)
    if getattr(args, "listen", None):
        overrides["listen"] = args.listen
    if getattr(args, "workers", None) is not None:
        overrides["workers"] = args.workers
    return load_settings(**overrides)


# -- serve -----------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from treadle.config import load_config

    settings = _settings(args)
    config = load_config(settings.config)
    from treadle_sidecar.server import serve

    from treadle.cli.envcheck import unknown_variables

    for message in unknown_variables():
        print(f"warning: {message}", file=sys.stderr)

    def announce(url: str) -> None:  # once the address is bound
        print(f"treadle {__version__} serving on {url}  (watch runs: /ui, API docs: /docs)", file=sys.stderr)

    serve(settings, config, log_level=args.log_level, announce=announce)
    return 0


# -- init ------------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.config or os.environ.get("TREADLE_CONFIG", "treadle.yaml"))
    if path.exists() and not args.force:
        print(f"{path} exists; leaving it as it is (use --force to overwrite)", file=sys.stderr)
        return 0
    path.write_text(STARTER_YAML)
    print(f"wrote {path} (agents: demo, echo, scripted)")
    return 0


# -- run -------------------------------------------------------------------------------------------


class Renderer:
    """Prints a run's events as they arrive: streamed text, each tool call and result, usage."""

    def __init__(self, out: Any = sys.stdout, color: bool | None = None) -> None:
        self.out = out
        self.color = out.isatty() if color is None else color
        self._streamed: set[object] = set()  # iterations whose text arrived as live deltas

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def _p(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def event(self, etype: str, data: dict[str, Any]) -> None:
        if etype == "text_delta":
            self._streamed.add(data.get("iteration"))
            print(str(data.get("text", "")), end="", file=self.out, flush=True)
        elif etype == "started":
            self._p(self._c("1", f"▶ run {data.get('run_id')} · agent {data.get('agent')}"))
        elif etype == "text":
            if data.get("iteration") in self._streamed:
                self._p("")  # the deltas already showed it; end the line
            else:
                self._p(self._c("0", str(data.get("text", ""))))
        elif etype == "thinking":
            self._p(self._c("2", f"(thinking) {data.get('text', '')}"))
        elif etype == "tool_call":
            tu = data.get("tool_use") or {}
            self._p(self._c("36", f"→ {tu.get('name')} {json.dumps(tu.get('input'), sort_keys=True)}"))
        elif etype == "tool_result":
            tu = data.get("tool_use") or {}
            mark = self._c("31", "✗") if data.get("is_error") else self._c("32", "←")
            text = str(data.get("text", ""))
            self._p(f"{mark} {tu.get('name')} {text if len(text) <= 300 else text[:300] + '…'}")
        elif etype == "retry":
            r = data.get("retry") or {}
            self._p(self._c("33", f"↻ retry {r.get('attempt')} in {r.get('wait_ms')} ms ({r.get('reason')})"))
        elif etype == "usage":
            u = data.get("usage") or {}
            self._p(
                self._c(
                    "2",
                    f"  · iteration {data.get('iteration')}: {u.get('input_tokens')} in /"
                    f" {u.get('output_tokens')} out tokens ({u.get('provider')}/{u.get('model')})",
                )
            )
        elif etype == "done":
            u = data.get("usage") or {}
            self._p(
                self._c(
                    "1",
                    f"■ done: {data.get('stop_reason')} · {u.get('input_tokens', 0)} in /"
                    f" {u.get('output_tokens', 0)} out tokens",
                )
            )
        elif etype == "error":
            self._p(self._c("31;1", f"■ error {data.get('code')}: {data.get('error')}"))


async def _reachable(url: str) -> bool:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=0.5) as http:
            return (await http.get(f"{url}/healthz")).status_code == 200
    except httpx.HTTPError:
        return False


async def _run(args: argparse.Namespace) -> int:
    from treadle.client import TreadleClient

    settings = _settings(args)
    url = args.url or os.environ.get("TREADLE_URL")
    background = None
    if not url:
        host, port = settings.listen_host_port()
        candidate = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
        if await _reachable(candidate):
            url = candidate
        else:
            from treadle_sidecar.server import BackgroundServer

            from treadle.config import load_config

            print("no treadle server running; starting one in this process", file=sys.stderr)
            background = BackgroundServer(settings, load_config(settings.config))
            url = await background.start()
    renderer = Renderer()
    status = 1
    try:
        async with TreadleClient(url, token=settings.auth_token) as client:
            fields: dict[str, Any] = {}
            if args.user_id:
                fields["user_id"] = args.user_id
            async for ev in client.run_streaming(args.agent, args.prompt, **fields):
                if args.json:
                    print(json.dumps({"event": ev.event, **ev.data}), flush=True)
                else:
                    renderer.event(ev.event, ev.data)
                if ev.event == "done":
                    status = 0 if ev.data.get("stop_reason") in ("end_turn", "max_iterations") else 1
                elif ev.event == "error":
                    status = 1
    finally:
        if background is not None:
            await background.stop()
    return status


def cmd_run(args: argparse.Namespace) -> int:
    import httpx

    from treadle.client import ApiError

    try:
        return asyncio.run(_run(args))
    except ApiError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except httpx.TransportError as exc:  # a server that is down or went away: one line, not a traceback
        where = args.url or os.environ.get("TREADLE_URL") or "the treadle server"
        print(f"error: cannot reach {where}: {exc.__class__.__name__}: {exc or 'connection failed'}\n"
              "  start one with `treadle serve`, or drop --url to run in this process", file=sys.stderr)
        return 1


# -- doctor ----------------------------------------------------------------------------------------


async def _doctor(args: argparse.Namespace) -> int:
    import psycopg

    from treadle.builtins.registry import default_registry
    from treadle.config import load_config
    from treadle.engine.agents import resolve_agents
    from treadle.providers.registry import build_providers, key_report
    from treadle.store.db import redact_url, resolve_database_url
    from treadle.store.migrate import applied_versions, available_migrations

    failed = False

    def line(level: str, what: str) -> None:
        nonlocal failed
        failed = failed or level == "FAIL"
        print(f"{level:<4} {what}")

    try:
        settings = _settings(args)
        line("PASS", f"environment (listen {settings.listen}, workers {settings.workers})")
        from treadle.cli.envcheck import unknown_variables

        for message in unknown_variables():
            line("WARN", message)
    except ConfigError as exc:
        line("FAIL", str(exc))
        return 1
    try:
        config = load_config(settings.config)
        agents = resolve_agents(config, default_registry(), build_providers(config), source=str(settings.config))
        line("PASS", f"config {settings.config}: {len(agents)} agent(s): {', '.join(agents) or '-'}")
        used = {c.provider_id for a in agents.values() for c in a.candidates}
        for pid, driver, env, is_set, required in key_report(config):
            who = f"provider {pid} (driver {driver})"
            if is_set:
                line("PASS", f"{who}: {env} is set")
            elif not required:
                line("PASS", f"{who}: no key needed ({env} is not set)")
            elif pid in used:
                line("FAIL", f"{who}: {env} is not set (agents using it will fail with missing_api_key)")
            else:
                line("WARN", f"{who}: {env} is not set (no agent uses it)")
    except ConfigError as exc:
        line("FAIL", str(exc))
    if not settings.auth_token:
        line("WARN", "TREADLE_AUTH_TOKEN is not set: the API is open (loopback only)")
    else:
        line("PASS", "TREADLE_AUTH_TOKEN is set")
    if not settings.database_url and not (settings.home / "pg").exists():
        # the doctor only looks: it never creates the embedded cluster (~40 MB) itself
        line("WARN", f"no database yet: the embedded Postgres is created in {settings.home / 'pg'} by the first "
                     "`treadle serve` (or set DATABASE_URL)")
        return 1 if failed else 0
    try:
        url = resolve_database_url(settings.database_url, settings.home)
    except TreadleError as exc:
        line("FAIL", f"database: {hide_password(str(exc), settings.database_url)}")
        return 1
    where = redact_url(url) if settings.database_url else f"embedded Postgres in {settings.home / 'pg'}"
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=5) as conn:
            cur = await conn.execute("SHOW server_version")
            row = await cur.fetchone()
            line("PASS", f"database reachable: {where} (PostgreSQL {row[0] if row else '?'})")
            done = await applied_versions(conn)
            wanted = {m.version for m in available_migrations()}
            missing = sorted(wanted - done)
            if missing:
                line("WARN", f"migrations pending: {missing} (applied on the next `treadle serve`)")
            else:
                line("PASS", f"migrations applied ({len(done)})")
            cur = await conn.execute(
                "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
                " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"
            )
            installed, available = (await cur.fetchone()) or (None, None)
            if installed or available:
                line("PASS", f"pgvector {installed or available} {'installed' if installed else 'available'}")
            else:
                line("WARN", "pgvector not installed on this server (vector Memory will be unavailable)")
    except psycopg.Error as exc:  # libpq may quote a malformed URL whole: never print its password
        line("FAIL", hide_password(f"database unreachable: {where}: {exc}".strip(), url))
    return 1 if failed else 0


def hide_password(text: str, url: str | None) -> str:
    """`text` without the password of `url` (however malformed the URL is)."""
    import re

    if not url:
        return text
    found = re.search(r"(?:^|://)[^:/@\s]*:([^@\s]+)@", url.strip()) or re.search(r"password=([^\s]+)", url)
    return text.replace(found.group(1), "***") if found and found.group(1) else text


def cmd_doctor(args: argparse.Namespace) -> int:
    return asyncio.run(_doctor(args))


def cmd_hash(args: argparse.Namespace) -> int:
    """The content hash of a treadle.yaml agent or skill, as AgentDef/SkillDef compute it (drift checks:
    compare with `{"op": "verify", "name": ..., "content_sha256": ...}`): loomcycle's hash, the one
    `loomcycle hash` prints for the same definition; `--treadle` prints treadle's earlier one."""
    from treadle.config import load_config
    from treadle.substrate.agentdefs import agent_hash, agent_loomcycle_hash
    from treadle.substrate.skilldefs import skill_body, skill_content_sha256, skill_loomcycle_sha256

    config = load_config(_settings(args).config)
    if args.kind == "agent":
        if args.name not in config.agents:
            print(f"error: no agent {args.name!r} in the config (agents: {', '.join(config.agents) or '-'})",
                  file=sys.stderr)
            return 1
        cfg = config.agents[args.name]
        print(agent_hash(cfg) if args.treadle else agent_loomcycle_hash(args.name, cfg))
        return 0
    if args.name not in config.skills:
        print(f"error: no skill {args.name!r} in the config (skills: {', '.join(config.skills) or '-'})",
              file=sys.stderr)
        return 1
    body = skill_body(config.skills[args.name])
    print(skill_content_sha256(body) if args.treadle else skill_loomcycle_sha256(args.name, body))
    return 0


# -- main ------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="treadle", description="treadle — a durable agent runtime")
    p.add_argument("--version", action="version", version=f"treadle {__version__}")
    p.add_argument("--config", help="operator YAML (default: $TREADLE_CONFIG or ./treadle.yaml)")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="serve the API with in-process workers and sweeper")
    s.add_argument("--listen", help="HOST:PORT (default: $TREADLE_LISTEN or 127.0.0.1:8787)")
    s.add_argument("--workers", type=int, help="worker coroutines (default: $TREADLE_WORKERS or 8)")
    s.add_argument("--log-level", default="info")
    s.set_defaults(func=cmd_serve)

    r = sub.add_parser("run", help="start a run and render it live")
    r.add_argument("agent")
    r.add_argument("prompt")
    r.add_argument("--url", help="a running treadle (default: $TREADLE_URL, else TREADLE_LISTEN, else in-process)")
    r.add_argument("--user-id")
    r.add_argument("--json", action="store_true", help="print raw events as JSON lines")
    r.set_defaults(func=cmd_run)

    i = sub.add_parser("init", help="write a starter treadle.yaml with mock demo agents")
    i.add_argument("--force", action="store_true")
    i.set_defaults(func=cmd_init)

    d = sub.add_parser("doctor", help="check config, database, migrations and pgvector")
    d.set_defaults(func=cmd_doctor)

    h = sub.add_parser("hash", help="print the content_sha256 of a treadle.yaml agent or skill (drift checks)")
    h.add_argument("kind", choices=["agent", "skill"])
    h.add_argument("name")
    h.add_argument("--treadle", action="store_true",
                   help="treadle's earlier hash (treadle_sha256) instead of loomcycle's")
    h.set_defaults(func=cmd_hash)

    from treadle.cli import importer
    from treadle.cli import mcp as mcp_cli
    from treadle.cli.tokens import add_token_parser

    add_token_parser(sub)
    mcp_cli.add_parser(sub)
    importer.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        configure_logging(logging.WARNING)  # TREADLE_LOG_FORMAT=json: one JSON object per line
        return int(args.func(args))
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
