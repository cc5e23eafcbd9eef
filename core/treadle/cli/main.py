"""The `treadle` command (Click, output through Rich): serve, init, run, doctor, hash, token, mcp,
import, and the console — runs, attach, cancel, answer, input, events (docs/console.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace as Args
from typing import Any

import click

from treadle import __version__
from treadle.cli.starter import STARTER_YAML
from treadle.errors import ConfigError, TreadleError
from treadle.telemetry.logs import configure_logging, treadle_log_level


def _settings(args: Args) -> Any:
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


def cmd_serve(args: Args) -> int:
    from treadle.config import load_config

    settings = _settings(args)
    config = load_config(settings.config)
    from treadle_sidecar.server import serve

    from treadle.cli.envcheck import unknown_variables

    for message in unknown_variables():
        print(f"warning: {message}", file=sys.stderr)

    def announce(url: str) -> None:  # once the address is bound
        print(f"treadle {__version__} serving on {url}  (watch runs: /ui, API docs: /docs)", file=sys.stderr)

    # uvicorn's own lines follow $TREADLE_LOG_LEVEL unless --log-level says otherwise (the demo
    # runs at warning: its output is the run, not the server's start-up lines)
    log_level = args.log_level or logging.getLevelName(treadle_log_level()).lower()
    serve(settings, config, log_level=log_level, announce=announce)
    return 0


# -- init ------------------------------------------------------------------------------------------


def cmd_init(args: Args) -> int:
    path = Path(args.config or os.environ.get("TREADLE_CONFIG", "treadle.yaml"))
    if path.exists() and not args.force:
        print(f"{path} exists; leaving it as it is (use --force to overwrite)", file=sys.stderr)
        return 0
    path.write_text(STARTER_YAML)
    print(f"wrote {path} (agents: demo, echo, scripted)")
    return 0


# -- run -------------------------------------------------------------------------------------------


async def _reachable(url: str) -> bool:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=0.5) as http:
            return (await http.get(f"{url}/healthz")).status_code == 200
    except httpx.HTTPError:
        return False


async def _run(args: Args) -> int:
    from treadle.cli.live import follow
    from treadle.client import AsyncTreadle, Retry

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
    try:
        async with AsyncTreadle(url, token=settings.auth_token, retry=Retry(attempts=3)) as client:
            started = await client.runs.start(args.agent, args.prompt, user_id=args.user_id)
            return await follow(client, started.run_id, as_json=args.json, in_process=background is not None)
    finally:
        if background is not None:
            await background.stop()


def cmd_run(args: Args) -> int:
    from treadle.cli.ui import guarded

    # what made it talk to a server rather than run in this process (issue 43 item 9: it always said --url)
    if args.url:
        hint = "start one with `treadle serve`, or drop --url to run in this process"
    elif os.environ.get("TREADLE_URL"):
        hint = "start one with `treadle serve`, or unset TREADLE_URL to run in this process"
    else:  # the server found at the listen address went away meanwhile
        hint = "the server at TREADLE_LISTEN stopped: run again (with none there, this process runs one)"
    return guarded(lambda: _run(args), args.url, hint)


# -- doctor ----------------------------------------------------------------------------------------


async def _doctor(args: Args) -> int:
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
    """`text` without the password of `url` (however malformed the URL is): a URL's (`user:…@`, up
    to the last `@`, an unencoded `@` in it included, and each part of it libpq may quote), a query's
    `password=…` and a keyword string's `password=…` (quoted or not), percent-decoded too."""
    import re
    from urllib.parse import unquote

    if not url:
        return text
    found: list[str] = []
    _, sep, rest = url.strip().partition("://")
    rest = rest if sep else url.strip()  # `user:password@host/db` without a scheme too
    if "@" in rest:
        creds = rest[:rest.rfind("@")]
        if ":" in creds.split("@", 1)[0] and "=" not in creds.split(":", 1)[0]:
            password = creds.split(":", 1)[1]
            found += [password, *(part for part in password.split("@") if len(part) >= 3)]
    found += re.findall(r"password\s*=\s*'((?:[^'\\]|\\.)*)'?", url)  # a keyword string's quoted value
    found += re.findall(r"password\s*=\s*([^\s&']+)", url)
    for secret in sorted({f for s in found for f in (s, unquote(s)) if f}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def cmd_doctor(args: Args) -> int:
    return asyncio.run(_doctor(args))


def cmd_hash(args: Args) -> int:
    """The content hash of a treadle.yaml agent, skill or team, as the *Def kinds compute it (drift checks:
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
    if args.kind == "team":
        if args.name not in config.teams:
            print(f"error: no team {args.name!r} in the config (teams: {', '.join(config.teams) or '-'})",
                  file=sys.stderr)
            return 1
        from treadle.errors import DefRefused
        from treadle.teams.graph import parse, validate
        from treadle.teams.hashing import team_sha256

        try:
            d = parse(config.teams[args.name])
            validate(d)
        except DefRefused as exc:
            print(f"error: teams.{args.name}: {exc.message}", file=sys.stderr)
            return 1
        print(team_sha256(args.name, d))  # loomcycle's teamgraph.Sign; treadle has no earlier team hash
        return 0
    if args.name not in config.skills:
        print(f"error: no skill {args.name!r} in the config (skills: {', '.join(config.skills) or '-'})",
              file=sys.stderr)
        return 1
    body = skill_body(config.skills[args.name])
    print(skill_content_sha256(body) if args.treadle else skill_loomcycle_sha256(args.name, body))
    return 0


# -- main ------------------------------------------------------------------------------------------

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT, help="treadle — a durable agent runtime")
@click.version_option(__version__, "--version", prog_name="treadle", message="%(prog)s %(version)s")
@click.option("--config", multiple=True,
              help="operator YAML (default: $TREADLE_CONFIG or ./treadle.yaml); given again, the files layer "
                   "left to right as loomcycle's (a bundle over a base layer; as TREADLE_CONFIG=a.yaml:b.yaml)")
@click.pass_context
def cli(ctx: click.Context, config: tuple[str, ...]) -> None:
    ctx.obj = Args(config=os.pathsep.join(config) or None)


def _args(**kw: Any) -> Args:
    return Args(config=click.get_current_context().find_root().obj.config, **kw)


@cli.command("serve", help="serve the API with in-process workers and sweeper")
@click.option("--listen", help="HOST:PORT (default: $TREADLE_LISTEN or 127.0.0.1:8787)")
@click.option("--workers", type=int, help="worker coroutines (default: $TREADLE_WORKERS or 8)")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug", "trace"]),
              help="the server's (uvicorn's) level (default: $TREADLE_LOG_LEVEL, else info)")
def serve_command(**kw: Any) -> int:
    return cmd_serve(_args(**kw))


@cli.command("run", short_help="start a run and watch it live",
             help="start a run and render it live (Ctrl-C: detach; twice: cancel)")
@click.argument("agent")
@click.argument("prompt")
@click.option("--url", help="a running treadle (default: $TREADLE_URL, else TREADLE_LISTEN, else in-process)")
@click.option("--user-id")
@click.option("--json", "json_", is_flag=True, help="print raw events as JSON lines")
def run_command(json_: bool, **kw: Any) -> int:
    return cmd_run(_args(json=json_, **kw))


@cli.command("init", help="write a starter treadle.yaml with mock demo agents")
@click.option("--force", is_flag=True)
def init_command(force: bool) -> int:
    return cmd_init(_args(force=force))


@cli.command("doctor", help="check config, database, migrations and pgvector")
def doctor_command() -> int:
    return cmd_doctor(_args())


@cli.command("hash", short_help="print the content hash of an agent, skill or team",
             help="print the content_sha256 of a treadle.yaml agent, skill or team (drift checks)")
@click.argument("kind", type=click.Choice(["agent", "skill", "team"]))
@click.argument("name")
@click.option("--treadle", is_flag=True, help="treadle's earlier hash (treadle_sha256) instead of loomcycle's")
def hash_command(**kw: Any) -> int:
    return cmd_hash(_args(**kw))


def _register() -> None:
    from treadle.cli import console, importer
    from treadle.cli import mcp as mcp_cli
    from treadle.cli.tokens import token_group

    cli.add_command(token_group())
    cli.add_command(mcp_cli.mcp_group())
    cli.add_command(importer.import_command)
    for command in console.COMMANDS:
        cli.add_command(command)
    from treadle.cli.chat import chat_command
    from treadle.cli.usage import usage_command

    cli.add_command(chat_command)
    cli.add_command(usage_command)


_register()


def main(argv: list[str] | None = None) -> int:
    try:
        configure_logging(logging.WARNING)  # TREADLE_LOG_FORMAT=json: one JSON object per line
        result = cli.main(args=argv, prog_name="treadle", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        return 130
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
