"""Per-run credentials: `user_credentials` on POST /v1/runs (name → value), for MCP headers only.

Where the values live between iterations: in `run_credentials.sealed`, written with the run row
(one statement), AES-256-GCM under a 32-byte key from `TREADLE_CREDENTIALS_KEY` (base64) — a key
the database never holds, so a dump, a replica or a stolen backup reveals nothing. The tenant is
authenticated data: a sealed blob cannot be opened under another tenant. Any worker of the
deployment holding the key opens them for the step that needs them, substitutes them into the MCP
request headers at the transport boundary, and forgets them; they never enter an event, a log
line, a span or the model's view (a result that echoes one gets it masked); the statement that
ends the run deletes them (a trigger, migration 0016). Without the variable
each process uses a random key of its own: credentials then work only where the run was created
(the sidecar runs its own workers; a cloud deployment must set the key, else a worker answers
`credential_unavailable`)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Mapping
from functools import cache
from typing import Annotated

from pydantic import Field, StringConstraints

from treadle.errors import ConfigError, ToolError
from treadle.security.redact import SECRETS
from treadle.specs.mcp import CREDENTIAL_REF
from treadle.store.db import Pool

KEY_ENV = "TREADLE_CREDENTIALS_KEY"
#: `user_credentials` as a request field: at most 32 names, each value at most 8 KiB
UserCredentials = Annotated[
    dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")],
         Annotated[str, StringConstraints(min_length=1, max_length=8192)]],
    Field(max_length=32),
]
_VERSION = b"\x01"
MASK = "[redacted:credential]"


class CredentialMissing(ToolError):
    code = "credential_missing"


class CredentialUnavailable(ToolError):
    code = "credential_unavailable"


class CredentialSealer:
    """Seals a run's credentials for the database and opens them for a step."""

    def __init__(self, key: bytes, *, ephemeral: bool = False) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # on first use: not in cold starts

        if len(key) != 32:
            raise ConfigError(f"{KEY_ENV} must be 32 bytes, base64-encoded")
        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(key).digest()[:4]
        self.ephemeral = ephemeral

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CredentialSealer:
        raw = (env if env is not None else os.environ).get(KEY_ENV, "").strip()
        if not raw:
            return cls(os.urandom(32), ephemeral=True)
        try:
            key = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{KEY_ENV} is not valid base64") from None
        return cls(key)

    def seal(self, tenant_id: str, credentials: Mapping[str, str]) -> bytes:
        nonce = os.urandom(12)
        plain = json.dumps(dict(credentials), separators=(",", ":")).encode()
        return _VERSION + self.key_id + nonce + self._aead.encrypt(nonce, plain, _aad(tenant_id))

    def open(self, tenant_id: str, sealed: bytes) -> dict[str, str]:
        if sealed[:1] != _VERSION or sealed[1:5] != self.key_id:
            raise CredentialUnavailable(
                "this run's credentials were sealed with a key this process does not hold "
                f"(set the same {KEY_ENV} on every treadle process)")
        from cryptography.exceptions import InvalidTag

        try:
            plain = self._aead.decrypt(sealed[5:17], sealed[17:], _aad(tenant_id))
        except InvalidTag:
            raise CredentialUnavailable("this run's credentials cannot be opened (tampered, or another tenant's)") \
                from None
        value = json.loads(plain)
        return {str(k): str(v) for k, v in value.items()}


def _aad(tenant_id: str) -> bytes:
    return b"treadle-run-credentials:" + tenant_id.encode()


@cache
def process_sealer() -> CredentialSealer:
    """The process's sealer (read from the environment once)."""
    return CredentialSealer.from_env()


def seal_credentials(tenant_id: str, credentials: Mapping[str, str] | None) -> bytes | None:
    """The sealed blob; the values join this process's secrets first, so the run's prompt and
    anything else this process stores for it has them redacted (`[redacted:credential]`)."""
    if not credentials:
        return None
    remember(credentials)
    return process_sealer().seal(tenant_id, credentials)


def remember(credentials: Mapping[str, str]) -> None:
    """The values redacted from everything this process stores, logs or sends to a model."""
    for value in credentials.values():
        SECRETS.add_dynamic(value, "credential")


async def load_credentials(pool: Pool, tenant_id: str, run_id: str) -> dict[str, str]:
    """The run's credentials — its own, else its root run's (a sub-agent acts for the same caller);
    {} when it has none."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.sealed FROM runs r JOIN run_credentials c ON c.run_id IN (r.id, r.root_run_id)"
            " WHERE r.id = %s AND r.tenant_id = %s AND c.tenant_id = r.tenant_id"
            " ORDER BY (c.run_id = r.id) DESC LIMIT 1",
            (run_id, tenant_id),
        )
        row = await cur.fetchone()
    if row is None:
        return {}
    sealed = row["sealed"] if isinstance(row, Mapping) else row[0]
    credentials = process_sealer().open(tenant_id, bytes(sealed))
    remember(credentials)
    return credentials


def credential_refs(headers: Mapping[str, str]) -> set[str]:
    return {m for v in headers.values() for m in CREDENTIAL_REF.findall(v)}


def substitute(
    headers: Mapping[str, str], credentials: Mapping[str, str], *, server: str, drop_missing: bool = False
) -> dict[str, str]:
    """The headers with every `${run.credentials.NAME}` replaced; CredentialMissing (naming the
    credential, never a value) when the run has no such credential — or, with `drop_missing`
    (listing a server's tools), the headers that need one are left out (loomcycle's rule)."""
    missing = sorted(credential_refs(headers) - set(credentials))
    if missing and drop_missing:
        headers = {k: v for k, v in headers.items() if not set(CREDENTIAL_REF.findall(v)) - set(credentials)}
    elif missing:
        raise CredentialMissing(
            f"MCP server {server!r} needs the run credential(s) {', '.join(missing)}: pass them in "
            "user_credentials when starting the run")
    return {k: CREDENTIAL_REF.sub(lambda m: credentials[m.group(1)], v) for k, v in headers.items()}


def mask(text: str, credentials: Mapping[str, str]) -> str:
    """`text` with every credential value (4+ characters, longest first) masked."""
    for value in sorted((v for v in credentials.values() if len(v) >= 4), key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


