"""Operator bearer tokens: `trd_` + 32 random bytes (URL-safe base64), shown once, stored only as
a keyed hash (HMAC-SHA256 with the operator's pepper, `TREADLE_TOKEN_PEPPER`). The token carries
256 bits of randomness, so its hash cannot be reversed by guessing; the pepper additionally keeps a
database dump alone from confirming an imported (possibly weaker) token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "trd_"
#: used when the operator sets no pepper (documented; a pepper is recommended)
DEFAULT_PEPPER = "treadle-operator-token-v1"
MIN_IMPORTED_LENGTH = 24


def mint() -> str:
    return PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def suffix(token: str) -> str:
    """What lists show to tell tokens apart: the first 6 characters after the prefix."""
    body = token[len(PREFIX):] if token.startswith(PREFIX) else token
    return body[:6]


def token_hash(token: str, pepper: str | None) -> str:
    key = (pepper or DEFAULT_PEPPER).encode()
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()
