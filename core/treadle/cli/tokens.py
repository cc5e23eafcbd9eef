"""`treadle token create | rotate | retire | list` — OperatorTokenDef ops against the database
(DATABASE_URL, else the embedded Postgres), for the operator at the machine. A new token is
printed once; treadle keeps only its keyed hash."""

from __future__ import annotations

import asyncio
import json
import sys
from types import SimpleNamespace as Args
from typing import Any

import click

from treadle.errors import TreadleError


def token_group() -> click.Group:
    @click.group("token", help="create, rotate, retire or list operator bearer tokens")
    def token() -> None:
        pass

    as_json = click.option("--json", "json_", is_flag=True, help="print the answer as JSON")
    tenant = click.option("--tenant", required=True)

    @token.command("create", help="mint a token for a tenant (printed once)")
    @click.argument("name", required=False)
    @tenant
    @click.option("--subject", required=True)
    @click.option("--scopes", required=True, help="comma-separated (substrate:admin for an administrator)")
    @click.option("--description")
    @as_json
    def create(**kw: Any) -> int:
        return cmd_token(Args(token_op="create", **_json(kw)))

    @token.command("rotate", help="mint the next token of NAME; the old one lives on for --grace-seconds")
    @click.argument("name")
    @tenant
    @click.option("--grace-seconds", type=int, default=86400, show_default=True)
    @as_json
    def rotate(**kw: Any) -> int:
        return cmd_token(Args(token_op="rotate", **_json(kw)))

    @token.command("retire", help="end NAME's token now")
    @click.argument("name")
    @tenant
    @as_json
    def retire(**kw: Any) -> int:
        return cmd_token(Args(token_op="retire", **_json(kw)))

    @token.command("list", help="a tenant's tokens (never the tokens themselves)")
    @tenant
    @click.option("--retired", is_flag=True, help="include retired versions")
    @as_json
    def list_(**kw: Any) -> int:
        return cmd_token(Args(token_op="list", **_json(kw)))

    return token


def _json(kw: dict[str, Any]) -> dict[str, Any]:
    return {("json" if k == "json_" else k): v for k, v in kw.items()}


def _op(args: Args) -> dict[str, Any]:
    if args.token_op == "create":
        op: dict[str, Any] = {"op": "create", "name": args.name or args.subject, "subject": args.subject,
                              "scopes": [s.strip() for s in args.scopes.split(",") if s.strip()]}
        if args.description:
            op["description"] = args.description
        return op
    if args.token_op == "rotate":
        return {"op": "rotate", "name": args.name, "grace_seconds": args.grace_seconds}
    if args.token_op == "retire":
        return {"op": "retire", "name": args.name}
    return {"op": "list", "retired": args.retired}


async def _token(args: Args) -> dict[str, Any]:
    from treadle.config import load_settings
    from treadle.store.db import open_pool, resolve_database_url
    from treadle.store.defs import DefStore
    from treadle.store.migrate import migrate
    from treadle.store.tokens import AuthTokenStore
    from treadle.substrate.tokens import OperatorTokens

    settings = load_settings()
    url = resolve_database_url(settings.database_url, settings.home)
    await migrate(url)
    pool = await open_pool(url, 2, name="treadle-token")
    try:
        family = OperatorTokens(DefStore(pool), AuthTokenStore(pool), settings.token_pepper)
        return await family.dispatch(args.tenant, _op(args))
    finally:
        await pool.close()


def cmd_token(args: Args) -> int:
    try:
        out = asyncio.run(_token(args))
    except TreadleError as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    if "token" in out:
        print(out["token"])
        print(f"# {out['name']} (tenant {args.tenant}, subject {out['body']['subject']}, scopes "
              f"{','.join(out['body']['scopes'])}): {out['warning']}", file=sys.stderr)
        if out.get("previous_expires_at"):
            print(f"# the previous token stays valid until {out['previous_expires_at']}", file=sys.stderr)
        return 0
    rows = out.get("defs", [out])
    for d in rows:
        state = "active" if d.get("active") else (f"expires {d['expires_at']}" if d.get("expires_at") else d["status"])
        print(f"{d['name']:<24} v{d['version']:<3} {d['body']['subject']:<20} {','.join(d['body']['scopes']):<40}"
              f" …{d['body']['token_suffix']}  {state}")
    return 0
