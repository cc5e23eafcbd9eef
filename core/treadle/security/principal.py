"""Who is calling: every query filters on the principal's tenant."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from treadle.errors import Unauthorized

DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: str
    subject: str
    scopes: tuple[str, ...] = ("substrate:admin",)
    open_mode: bool = False


OPEN_PRINCIPAL = Principal(DEFAULT_TENANT, "default", open_mode=True)


def bearer_from_header(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class BearerAuthenticator:
    """One static operator token (`TREADLE_AUTH_TOKEN`) → the default tenant. Comparison is
    constant-time over SHA-256 digests, so neither content nor length leaks through timing."""

    def __init__(self, token: str | None) -> None:
        self._digest = hashlib.sha256(token.encode()).digest() if token else None

    @property
    def open_mode(self) -> bool:
        return self._digest is None

    def authenticate(self, authorization: str | None) -> Principal:
        if self._digest is None:
            return OPEN_PRINCIPAL
        token = bearer_from_header(authorization)
        if token is None:
            raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
        if not hmac.compare_digest(hashlib.sha256(token.encode()).digest(), self._digest):
            raise Unauthorized("invalid bearer token")
        return Principal(DEFAULT_TENANT, "operator")
