"""Signatures the way the vendors document producing them (written from their docs, not from
treadle's verifier), for tests.

- GitHub: `X-Hub-Signature-256: sha256=` + hex(HMAC-SHA256(secret, raw body)); delivery id in
  `X-GitHub-Delivery` (a GUID).
- Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex(HMAC-SHA256(secret, "<t>.<raw body>"))>`; the
  whole `whsec_…` string is the key; the event id is the body's `id`.
- Linear: `Linear-Signature: ` hex(HMAC-SHA256(secret, raw body)); delivery id in `Linear-Delivery`.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid


def _hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def github_headers(secret: str, body: bytes, delivery: str | None = None) -> dict[str, str]:
    return {
        "X-Hub-Signature-256": "sha256=" + _hex(secret, body),
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-GitHub-Event": "issues",
        "Content-Type": "application/json",
    }


def stripe_header(secret: str, body: bytes, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_hex(secret, f'{t}.'.encode() + body)}"


def linear_headers(secret: str, body: bytes, delivery: str | None = None) -> dict[str, str]:
    return {
        "Linear-Signature": _hex(secret, body),
        "Linear-Delivery": delivery or str(uuid.uuid4()),
        "Linear-Event": "Issue",
        "Content-Type": "application/json",
    }


def generic_signature(secret: str, body: bytes) -> str:
    return _hex(secret, body)
