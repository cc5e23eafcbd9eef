"""`treadle token create | rotate | retire | list` — OperatorTokenDef ops against the database
(DATABASE_URL, else the embedded Postgres), for the operator at the machine. A new token is
printed once; treadle keeps only its keyed hash."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from treadle.errors import TreadleError


def add_token_parser(sub: Any) -> None:
    t = sub.add_parser("token", help="create, rotate, retire or list operator bearer tokens")
    ops = t.add_subparsers(dest="token_op", required=True)
    c = ops.add_parser("create", help="mint a token for a tenant (printed once)")
    c.add_argument("name", nargs="?", help="the token's name (default: <subject>)")
    c.add_argument("--tenant", required=True)
    c.add_argument("--subject", required=True)
    c.add_argument("--scopes", default="substrate:admin", help="comma-separated (default: substrate:admin)")
    c.add_argument("--description")
    r = ops.add_parser("rotate", help="mint the next token of NAME; the old one lives on for --grace-seconds")
    r.add_argument("name")
    r.add_argument("--tenant", required=True)
    r.add_argument("--grace-seconds", type=int, default=86400)
    x = ops.add_parser("retire", help="end NAME's token now")
    x.add_argument("name")
    x.add_argument("--tenant", required=True)
    ls = ops.add_parser("list", help="a tenant's tokens (never the tokens themselves)")
    ls.add_argument("--tenant", required=True)
    ls.add_argument("--retired", action="store_true", help="include retired versions")
    for p in (c, r, x, ls):
        p.add_argument("--json", action="store_true", help="print the answer as JSON")
    t.set_defaults(func=cmd_token)


def _op(args: argparse.Namespace) -> dict[str, Any]:
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


async def _token(args: argparse.Namespace) -> dict[str, Any]:
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


def cmd_token(args: argparse.Namespace) -> int:
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
