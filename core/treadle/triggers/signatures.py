"""Webhook authentication over the raw body, before anything parses it. Comparisons are
constant-time (`hmac.compare_digest`).

Formats (`auth.format`, else inferred from `auth.header`):
- github  — `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`
- stripe  — `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>[,v1=…]`; the
            timestamp must be within 5 minutes of now (either way)
- linear  — `Linear-Signature: <hex HMAC-SHA256(secret, body)>`
- generic — `<auth.header or X-Treadle-Signature>: <hex>` or `sha256=<hex>`, HMAC-SHA256 of the body;
            with no `auth.header`, loomcycle's `X-Loomcycle-Signature` is accepted too (when
            X-Treadle-Signature is absent), in loomcycle's envelopes: `t=<unix>,v1=<hex>` (Stripe's,
            its default), `sha256=<hex>` or bare hex
- bearer (`auth.kind: bearer`) — `Authorization: Bearer <secret>`, or the bare secret in `auth.header`

The secret comes from the environment variable the def names; infrastructure variables are never
usable as webhook secrets, and `TREADLE_WEBHOOKS_ENV_ALLOWLIST`, when set, is the only list allowed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from treadle.errors import BadDeliveryId as BadDeliveryId  # re-exported: raised here
from treadle.errors import SecretUnresolvable as SecretUnresolvable  # re-exported: raised here
from treadle.errors import Unauthorized
from treadle.specs.webhook import WebhookAuth

STRIPE_TOLERANCE_S = 300
MAX_STRIPE_SIGNATURES = 8
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
DELIVERY_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
#: never a webhook secret: the runtime's own credentials
_DENY = re.compile(
    r"^(DATABASE_URL|PG[A-Z_]*|AWS_[A-Z0-9_]*|TREADLE_(AUTH_TOKEN|DB_[A-Z0-9_]*|[A-Z0-9_]*SECRET[A-Z0-9_]*)"
    r"|ANTHROPIC_API_KEY|OPENAI_API_KEY|GEMINI_API_KEY|DEEPSEEK_API_KEY|OLLAMA_API_KEY)$"
)
DEFAULT_DELIVERY_HEADER = {"github": "X-GitHub-Delivery", "linear": "Linear-Delivery"}


class InvalidSignature(Unauthorized):
    code = "invalid_signature"

    def __init__(self, message: str, *, verdict: str = "rejected_sig") -> None:
        super().__init__(message)
        self.verdict = verdict


def resolve_secret(name: str, allowlist: frozenset[str] = frozenset(), environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    if _DENY.match(name) or (allowlist and name not in allowlist):
        raise SecretUnresolvable(f"the secret variable {name} is not allowed for webhooks")
    value = env.get(name)
    if not value:
        raise SecretUnresolvable(f"the secret variable {name} is not set")
    return value


def hmac_hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _same_hex(expected_hex: str, given: str) -> bool:
    given = given.strip()
    if not _HEX64.match(given):
        return False
    return hmac.compare_digest(expected_hex.encode(), given.lower().encode())


def _header(headers: Mapping[str, str], name: str) -> str | None:
    return headers.get(name.lower())


LOOMCYCLE_HEADER = "X-Loomcycle-Signature"


def given_signature(auth: WebhookAuth, headers: Mapping[str, str]) -> tuple[str, str | None]:
    """(header, value) of a delivery's HMAC signature: the def's header; for a generic def that
    names none, loomcycle's X-Loomcycle-Signature when treadle's header is absent."""
    header = auth.signature_header()
    value = _header(headers, header)
    if not value and auth.header is None and auth.signature_format() == "generic":
        alt = _header(headers, LOOMCYCLE_HEADER)
        if alt:
            return LOOMCYCLE_HEADER, alt
    return header, value


def verify(
    auth: WebhookAuth,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
    allowlist: frozenset[str] = frozenset(),
    environ: Mapping[str, str] | None = None,
) -> None:
    """Raise InvalidSignature (401) or SecretUnresolvable (503); `headers` have lower-case names."""
    if auth.kind == "bearer":
        assert auth.bearer_token_env is not None
        secret = resolve_secret(auth.bearer_token_env, allowlist, environ)
        if auth.header:
            given = (_header(headers, auth.header) or "").strip()
        else:
            scheme, _, token = (_header(headers, "authorization") or "").partition(" ")
            given = token.strip() if scheme.lower() == "bearer" else ""
        ok = hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(secret.encode()).digest())
        if not given or not ok:
            raise InvalidSignature("missing or wrong bearer token")
        return
    assert auth.signing_secret_env is not None
    secret = resolve_secret(auth.signing_secret_env, allowlist, environ)
    header, value = given_signature(auth, headers)
    if not value:
        raise InvalidSignature(f"missing {header} header")
    fmt = auth.signature_format()
    if fmt == "stripe" or (header == LOOMCYCLE_HEADER and "v1=" in value):
        _verify_stripe(secret, value, body, time.time() if now is None else now)
        return
    if fmt == "github":
        if not value.startswith("sha256="):
            raise InvalidSignature(f"{header} must be sha256=<hex>")
        given = value[len("sha256="):]
    elif fmt == "generic" and value.startswith("sha256="):
        given = value[len("sha256="):]
    else:
        given = value
    if not _same_hex(hmac_hex(secret, body), given):
        raise InvalidSignature(f"{header} does not match the body")


def _verify_stripe(secret: str, value: str, body: bytes, now: float) -> None:
    timestamp: int | None = None
    candidates: list[str] = []
    for part in value.split(","):
        key, sep, val = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            if not val.isascii() or not val.isdigit() or len(val) > 12:
                raise InvalidSignature("Stripe-Signature: t is not a unix timestamp")
            timestamp = int(val)
        elif key == "v1" and len(candidates) < MAX_STRIPE_SIGNATURES:
            candidates.append(val)
    if timestamp is None or not candidates:
        raise InvalidSignature("Stripe-Signature needs t=<unix> and v1=<hex>")
    if abs(now - timestamp) > STRIPE_TOLERANCE_S:
        raise InvalidSignature(
            f"Stripe-Signature timestamp is {int(now - timestamp)} s away from now (tolerance {STRIPE_TOLERANCE_S} s)",
            verdict="rejected_stale",
        )
    expected = hmac_hex(secret, f"{timestamp}.".encode() + body)
    matches = [_same_hex(expected, c) for c in candidates]  # compare every candidate: no early exit
    if not any(matches):
        raise InvalidSignature("Stripe-Signature v1 does not match the body")


def delivery_id(auth: WebhookAuth, headers: Mapping[str, str], body: bytes) -> str:
    """The sender's delivery id (header, or a Stripe event's `id`), else `sha256:<hex of body>`.
    Called only after the signature is verified."""
    name = auth.delivery_id_header or DEFAULT_DELIVERY_HEADER.get(auth.signature_format())
    value: Any = _header(headers, name) if name else None
    if not value and auth.kind == "hmac" and auth.signature_format() == "stripe":
        try:
            event = json.loads(body)
        except ValueError:
            event = None
        value = event.get("id") if isinstance(event, dict) else None
    if not value:
        return "sha256:" + hashlib.sha256(body).hexdigest()
    if not isinstance(value, str) or not DELIVERY_ID.match(value.strip()):
        raise BadDeliveryId("the delivery id must match [A-Za-z0-9_.:-]{1,200}")
    return value.strip()
