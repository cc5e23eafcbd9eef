"""OperatorTokenDef: bearer tokens bound to {tenant, subject, scopes}, on the shared def lifecycle.

Ops (loomcycle's): create, rotate, retire, get, list. A version's body holds the subject, the
scopes and the token's keyed hash and suffix — never the token, which `create` and `rotate` answer
once. Authentication reads `auth_tokens` (kept in step through `on_activate` / `on_retire`):
`retire` ends a token at once; `rotate` mints the next version and lets the previous token live on
for `grace_seconds` (default 24 h). `fork`, `promote` and `verify` are not offered: reviving an
old version would revive its token. A create without `scopes` gets the least, `[runs:read]`
(loomcycle's default is `substrate:admin`): an administrator's token is asked for by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from treadle.defs.args import opt_str
from treadle.defs.gates import Gate
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain.defs import DefRecord, content_sha256
from treadle.domain.ids import is_identifier
from treadle.domain.scopes import RUNS_READ, parse_scopes
from treadle.errors import DefRefused, ValidationFailed
from treadle.security import tokens
from treadle.store.defs import DefStore
from treadle.store.tokens import AuthTokenStore, TokenRow

DEFAULT_GRACE_SECONDS = 24 * 3600
MAX_GRACE_SECONDS = 30 * 24 * 3600
_SECRET_FIELDS = ("token_hash",)
WARNING = "store this token now: treadle keeps only its hash and cannot show it again"

#: what a token created without `scopes` may do: read runs, nothing else
LEAST_SCOPE = RUNS_READ


class OperatorTokens(DefLifecycle):
    kind = "operator_token"
    label = "OperatorTokenDef"
    create_promotes = True
    excluded_ops = ("fork", "promote", "verify")
    extra_ops = ("rotate",)

    def __init__(self, defs: DefStore, store: AuthTokenStore, pepper: str | None,
                 on_change: Callable[[], None] = lambda: None) -> None:
        super().__init__(defs)
        self.auth = store
        self.pepper = pepper
        self.on_change = on_change  # flushes the authenticator's cache

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        unknown = set(body) - {"subject", "scopes", "token_hash", "token_suffix"}
        if unknown:
            raise DefRefused(f"{self.label}: unknown field(s) {', '.join(sorted(unknown))}")
        subject = body.get("subject") or f"tok-{name}"
        if not isinstance(subject, str) or not is_identifier(subject) or len(subject) > 64:
            raise DefRefused(f"{self.label}: subject must match [A-Za-z0-9_-]{{1,64}}")
        try:
            # without `scopes` the least (loomcycle's default is admin: treadle never widens by default,
            # an admin token is asked for by name)
            scopes = parse_scopes(body.get("scopes", [LEAST_SCOPE]), what=f"{self.label}: scopes")
        except ValidationFailed as exc:
            raise DefRefused(exc.message) from None
        token_hash, suffix = body.get("token_hash"), body.get("token_suffix")
        if not isinstance(token_hash, str) or not isinstance(suffix, str):
            raise DefRefused(f"{self.label}: the token is minted by treadle (or given as import_token)")
        return {"subject": subject, "scopes": list(scopes), "token_hash": token_hash, "token_suffix": suffix}

    def content_hash(self, body: dict[str, Any]) -> str:
        return content_sha256(body)

    async def on_activate(self, tenant: str, record: DefRecord) -> None:
        body = record.body
        await self.auth.add(TokenRow(body["token_hash"], record.def_id, tenant, record.name, body["subject"],
                                      tuple(body["scopes"]), record.created_at, None))
        self.on_change()

    async def on_retire(self, tenant: str, record: DefRecord) -> None:
        await self.auth.expire(record.def_id)
        self.on_change()

    async def view(self, tenant: str, record: DefRecord) -> dict[str, Any]:
        out = self.record_view(record)
        out["body"] = {k: v for k, v in record.body.items() if k not in _SECRET_FIELDS}
        out["tenant_id"] = tenant
        row = await self.auth.of_def(record.def_id) if record.def_id else None
        out["expires_at"] = row.expires_at.isoformat() if row and row.expires_at else None
        return out

    def _token(self, args: dict[str, Any], what: str) -> str:
        imported = args.pop("import_token", None)
        if imported is None:
            return tokens.mint()
        if not isinstance(imported, str) or imported != imported.strip() or len(imported) < tokens.MIN_IMPORTED_LENGTH:
            raise DefRefused(f"{what}: import_token must be at least {tokens.MIN_IMPORTED_LENGTH} characters, "
                             "without surrounding whitespace")
        return imported

    def _with_token(self, args: dict[str, Any], token: str) -> dict[str, Any]:
        overlay = dict(args.get("overlay") or {})
        for key in ("subject", "scopes"):  # loomcycle passes them at the top level
            if key in args:
                overlay[key] = args[key]
        overlay["token_hash"] = tokens.token_hash(token, self.pepper)
        overlay["token_suffix"] = tokens.suffix(token)
        return {k: v for k, v in args.items() if k not in ("subject", "scopes")} | {"overlay": overlay}

    async def op_create(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        args = dict(args)
        if isinstance(args.get("overlay"), dict) and set(args["overlay"]) & {"token_hash", "token_suffix"}:
            raise DefRefused(f"{self.what('create')}: the token is minted by treadle (or given as import_token)")
        token = self._token(args, self.what("create"))
        if "overlay" not in args:
            args["overlay"] = {}
        out = await super().op_create(tenant, self._with_token(args, token), gate, run_id)
        return {**out, "token": token, "token_suffix": tokens.suffix(token), "warning": WARNING}

    async def op_rotate(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("rotate")
        args = dict(args)
        grace = args.get("grace_seconds", DEFAULT_GRACE_SECONDS)
        if not isinstance(grace, int) or isinstance(grace, bool) or not 0 <= grace <= MAX_GRACE_SECONDS:
            raise DefRefused(f"{what}: grace_seconds must be an integer in 0..{MAX_GRACE_SECONDS}")
        old = await self.resolve(tenant, args, static_ok=False)
        if not old.active:
            raise DefRefused(f"{what}: {old.name!r} version {old.version} is not the active token")
        token = self._token(args, what)
        body = {k: v for k, v in old.body.items()} | {
            "token_hash": tokens.token_hash(token, self.pepper), "token_suffix": tokens.suffix(token)}
        body = await self.normalize(tenant, old.name, body)
        description = opt_str(args, "description", max_len=4096, what=what)
        record = await self.store(tenant, old.name, body, parent_def_id=old.def_id, promote=True, run_id=run_id,
                                  description=old.description if description is None else description)
        expires = await self.auth.expire(old.def_id, after_seconds=grace)
        self.on_change()
        return {**await self.view(tenant, record), "rotated_from": old.def_id,
                "previous_expires_at": expires.isoformat() if expires else None,
                "token": token, "token_suffix": tokens.suffix(token), "warning": WARNING}
