"""Tenant credentials (issue 42 item 3) — loomcycle's CredentialDef (RFC AR): named secrets per
tenant, user or agent that configuration references by name and the runtime binds server-side; the
model never sees a value.

Sealing: AES-256-GCM under a key derived per tenant (HKDF-SHA256, info `treadle-credential-def:` +
tenant) from the deployment key `TREADLE_CREDENTIALS_KEY` (32 bytes, base64); the row's tenant,
scope, scope_id and name are the authenticated data, so a row copied to another tenant or name
does not open. Rotation: put the new key in `TREADLE_CREDENTIALS_KEY` and the old one in
`TREADLE_CREDENTIALS_KEY_PREVIOUS`; rows sealed under either open, writes use the new one, and
`op: rotate` re-seals a tenant's rows under it. Fail-closed: without the variable nothing can be
created (a process-local random key would lose every credential at restart).

Resolution (`resolve`): a run's reference `${credential.NAME}` (or loomcycle's `$cred:NAME`) takes
the most specific row — agent > user > tenant (loomcycle's precedence). A resolved value joins the
process's redaction set at once (security/redact.py), so an echo of it in a tool result, the
model's text, an event, a log line or a span is stored as `[redacted:credential]`.

A process that never created nor resolved a credential still redacts it (`remember_tenant`): a
step's worker and an API request of a tenant first add every value of that tenant's CredentialDefs
to the redaction set — read at most once every `REMEMBER_S` per tenant and process (a value
created through another replica is redacted here within that time, or at once once resolved)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from treadle.errors import ConfigError, ToolError, TreadleError
from treadle.security.redact import SECRETS
from treadle.store.db import Pool

KEY_ENV = "TREADLE_CREDENTIALS_KEY"
PREVIOUS_KEY_ENV = "TREADLE_CREDENTIALS_KEY_PREVIOUS"
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: `${credential.NAME}` (treadle's) and `$cred:NAME` (loomcycle's) in a header value
REF = re.compile(r"\$\{credential\.([A-Za-z0-9_-]{1,64})\}|\$cred:([A-Za-z0-9_-]{1,64})")
SCOPES = ("tenant", "user", "agent")
_VERSION = b"\x01"
#: how long a process trusts that it holds a tenant's credential values for redaction
REMEMBER_S = 30.0
_remembered: dict[str, float] = {}


class CredentialKeyMissing(TreadleError):
    """No deployment key: nothing can be sealed (never stored in plaintext)."""

    code = "credential_key_missing"
    status = 503


class CredentialUnreadable(ToolError):
    code = "credential_unavailable"


def _key(raw: str, env: str) -> bytes:
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{env} is not valid base64") from None
    if len(key) != 32:
        raise ConfigError(f"{env} must be 32 bytes, base64-encoded")
    return key


class TenantSealer:
    """Seals and opens CredentialDef values under per-tenant keys derived from the deployment's."""

    def __init__(self, current: bytes | None, previous: bytes | None = None) -> None:
        self._keys: dict[bytes, bytes] = {}
        self.current_id: bytes | None = None
        for key in (previous, current):  # the current one last: it wins a (theoretical) id clash
            if key is not None:
                self._keys[hashlib.sha256(key).digest()[:4]] = key
        if current is not None:
            self.current_id = hashlib.sha256(current).digest()[:4]

    @property
    def has_keys(self) -> bool:
        """Whether any key is held (without one, nothing was sealed that this process could open)."""
        return bool(self._keys)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TenantSealer:
        env = env if env is not None else os.environ
        current = env.get(KEY_ENV, "").strip()
        previous = env.get(PREVIOUS_KEY_ENV, "").strip()
        return cls(_key(current, KEY_ENV) if current else None, _key(previous, PREVIOUS_KEY_ENV) if previous else None)

    def _aead(self, key_id: bytes, tenant_id: str) -> Any:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        master = self._keys.get(key_id)
        if master is None:
            raise CredentialUnreadable(
                f"a credential was sealed with a key this process does not hold (set {KEY_ENV}, and "
                f"{PREVIOUS_KEY_ENV} while rotating)")
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=b"treadle-credential-def:" + tenant_id.encode()).derive(master)
        return AESGCM(derived)

    def seal(self, tenant_id: str, scope: str, scope_id: str, name: str, value: str) -> tuple[bytes, bytes]:
        """(sealed, key_id) under the current key."""
        if self.current_id is None:
            raise CredentialKeyMissing(f"tenant credentials need {KEY_ENV} (32 bytes, base64): nothing is stored "
                                       "in plaintext")
        nonce = os.urandom(12)
        body = self._aead(self.current_id, tenant_id).encrypt(nonce, value.encode(), _aad(tenant_id, scope,
                                                                                            scope_id, name))
        return _VERSION + nonce + body, self.current_id

    def open(self, tenant_id: str, scope: str, scope_id: str, name: str, sealed: bytes, key_id: bytes) -> str:
        from cryptography.exceptions import InvalidTag

        if sealed[:1] != _VERSION:
            raise CredentialUnreadable(f"credential {name!r}: unknown sealing version")
        try:
            plain = self._aead(key_id, tenant_id).decrypt(sealed[1:13], sealed[13:],
                                                          _aad(tenant_id, scope, scope_id, name))
        except InvalidTag:
            raise CredentialUnreadable(f"credential {name!r} cannot be opened (tampered, or moved)") from None
        return str(plain.decode())


def _aad(tenant_id: str, scope: str, scope_id: str, name: str) -> bytes:
    return "\x00".join(("treadle-credential-def", tenant_id, scope, scope_id, name)).encode()


@cache
def process_sealer() -> TenantSealer:
    return TenantSealer.from_env()


@dataclass(frozen=True, slots=True)
class CredentialMeta:
    tenant_id: str
    scope: str
    scope_id: str
    name: str
    created_at: str
    updated_at: str
    updated_by: str

    def to_json(self) -> dict[str, Any]:
        return {"tenant_id": self.tenant_id, "scope": self.scope, "scope_id": self.scope_id, "name": self.name,
                "created_at": self.created_at, "updated_at": self.updated_at, "updated_by": self.updated_by}


def _meta(r: Mapping[str, Any]) -> CredentialMeta:
    return CredentialMeta(r["tenant_id"], r["scope"], r["scope_id"], r["name"], r["created_at"].isoformat(),
                          r["updated_at"].isoformat(), r["updated_by"])


_META = "tenant_id, scope, scope_id, name, created_at, updated_at, updated_by"


class TenantCredentials:
    """CredentialDef rows: create (or replace the value), get/list (metadata only — never a
    value), delete, rotate (re-seal under the current key), and a run's resolution."""

    def __init__(self, pool: Pool, sealer: TenantSealer | None = None) -> None:
        self.pool = pool
        self._sealer = sealer

    @property
    def sealer(self) -> TenantSealer:
        return self._sealer if self._sealer is not None else process_sealer()

    async def create(self, tenant_id: str, scope: str, scope_id: str, name: str, value: str, *,
                     updated_by: str) -> CredentialMeta:
        sealed, key_id = self.sealer.seal(tenant_id, scope, scope_id, name, value)
        SECRETS.add_dynamic(value, "credential")  # this process redacts it from here on
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO credential_defs (tenant_id, scope, scope_id, name, sealed, key_id, updated_by)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant_id, scope, scope_id, name) DO UPDATE SET"
                " sealed = EXCLUDED.sealed, key_id = EXCLUDED.key_id, updated_at = now(),"
                f" updated_by = EXCLUDED.updated_by RETURNING {_META}",
                (tenant_id, scope, scope_id, name, sealed, key_id, updated_by))
            row = await cur.fetchone()
        assert row is not None
        return _meta(row)

    async def list(self, tenant_id: str, scope: str | None = None, scope_id: str | None = None,
                   name: str | None = None) -> list[CredentialMeta]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_META} FROM credential_defs WHERE tenant_id = %s"
                " AND (%s::text IS NULL OR scope = %s) AND (%s::text IS NULL OR scope_id = %s)"
                " AND (%s::text IS NULL OR name = %s) ORDER BY scope, scope_id, name",
                (tenant_id, scope, scope, scope_id, scope_id, name, name))
            return [_meta(r) for r in await cur.fetchall()]

    async def delete(self, tenant_id: str, scope: str, scope_id: str, name: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM credential_defs WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND name = %s",
                (tenant_id, scope, scope_id, name))
            return cur.rowcount > 0

    async def rotate(self, tenant_id: str) -> int:
        """Re-seal every row of the tenant not sealed under the current key; how many."""
        sealer = self.sealer
        if sealer.current_id is None:
            raise CredentialKeyMissing(f"rotating needs {KEY_ENV}")
        n = 0
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT scope, scope_id, name, sealed, key_id FROM credential_defs"
                " WHERE tenant_id = %s AND key_id <> %s FOR UPDATE", (tenant_id, sealer.current_id))
            for r in await cur.fetchall():
                value = sealer.open(tenant_id, r["scope"], r["scope_id"], r["name"], bytes(r["sealed"]),
                                    bytes(r["key_id"]))
                sealed, key_id = sealer.seal(tenant_id, r["scope"], r["scope_id"], r["name"], value)
                await conn.execute(
                    "UPDATE credential_defs SET sealed = %s, key_id = %s, updated_at = now()"
                    " WHERE tenant_id = %s AND scope = %s AND scope_id = %s AND name = %s",
                    (sealed, key_id, tenant_id, r["scope"], r["scope_id"], r["name"]))
                n += 1
        return n

    async def resolve(self, tenant_id: str, user_id: str | None, agent: str | None,
                      names: Iterable[str]) -> dict[str, str]:
        """The values of `names` for a run of `agent` for `user_id`: the agent's row, else the
        user's, else the tenant's; a name with none is left out. Each value joins the redaction set."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT DISTINCT ON (name) scope, scope_id, name, sealed, key_id FROM credential_defs"
                " WHERE tenant_id = %(t)s AND name = ANY(%(names)s) AND (scope = 'tenant'"
                "  OR (scope = 'user' AND scope_id = %(u)s) OR (scope = 'agent' AND scope_id = %(a)s))"
                " ORDER BY name, CASE scope WHEN 'agent' THEN 0 WHEN 'user' THEN 1 ELSE 2 END",
                {"t": tenant_id, "names": wanted, "u": user_id or "", "a": agent or ""})
            rows = await cur.fetchall()
        out: dict[str, str] = {}
        for r in rows:
            value = self.sealer.open(tenant_id, r["scope"], r["scope_id"], r["name"], bytes(r["sealed"]),
                                     bytes(r["key_id"]))
            SECRETS.add_dynamic(value, "credential")
            out[r["name"]] = value
        return out


    async def remember_tenant(self, tenant_id: str) -> None:
        """Every value of the tenant's CredentialDefs joins this process's redaction set — at most
        once every REMEMBER_S per tenant; nothing to do without a deployment key."""
        now = time.monotonic()
        if not self.sealer.has_keys or now - _remembered.get(tenant_id, float("-inf")) < REMEMBER_S:
            return
        _remembered[tenant_id] = now
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT scope, scope_id, name, sealed, key_id FROM credential_defs"
                                     " WHERE tenant_id = %s", (tenant_id,))
            rows = await cur.fetchall()
        for r in rows:
            try:
                SECRETS.add_dynamic(self.sealer.open(tenant_id, r["scope"], r["scope_id"], r["name"],
                                                     bytes(r["sealed"]), bytes(r["key_id"])), "credential")
            except CredentialUnreadable:
                continue  # sealed under a key this process lacks: it cannot leak what it cannot open

    async def resolve_for_run(self, tenant_id: str, run_id: str | None, names: Iterable[str]) -> dict[str, str]:
        """`resolve` for the run's user and agent (None: no run — a hook, a def's discovery — the
        tenant's rows only)."""
        user_id = agent = None
        if run_id is not None:
            async with self.pool.connection() as conn:
                cur = await conn.execute("SELECT user_id, agent FROM runs WHERE id = %s AND tenant_id = %s",
                                         (run_id, tenant_id))
                row = await cur.fetchone()
            if row is not None:
                user_id, agent = row["user_id"], row["agent"]
        return await self.resolve(tenant_id, user_id, agent, names)


def refs(values: Iterable[str]) -> set[str]:
    """The credential names `${credential.NAME}` / `$cred:NAME` references in `values`."""
    return {a or b for v in values for a, b in REF.findall(v)}


def substitute_headers(headers: Mapping[str, str], credentials: Mapping[str, str]) -> dict[str, str]:
    """The headers with every reference replaced; a header naming a credential the run cannot
    resolve is left out (loomcycle's rule: no literal reference is ever sent)."""
    out = {}
    for k, v in headers.items():
        if refs([v]) - set(credentials):
            continue
        out[k] = REF.sub(lambda m: credentials[m.group(1) or m.group(2)], v)
    return out
