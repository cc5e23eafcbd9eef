"""Who is calling: every query filters on the principal's tenant."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: str
    subject: str
    scopes: tuple[str, ...] = ("substrate:admin",)
    open_mode: bool = False
    #: the legacy single `TREADLE_AUTH_TOKEN` (an admin of the default tenant)
    legacy: bool = False
    #: the OperatorTokenDef version (`def_…`) or yaml principal (`cfg:<name>`) that authenticated
    token_id: str | None = None

    @property
    def is_operator(self) -> bool:
        """An admin of the default tenant: may act on another tenant (X-Treadle-Tenant)."""
        return self.tenant_id == DEFAULT_TENANT and "substrate:admin" in self.scopes


OPEN_PRINCIPAL = Principal(DEFAULT_TENANT, "default", open_mode=True)


def bearer_from_header(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
