"""Binds each API request to its principal's tenant, so that the database itself filters every
query the request makes (treadle.store.scope; migration 0021).

The middleware opens an empty binding per request; the auth dependency (api/deps.py) fills in
the tenant once the principal is known. Routes that act across tenants by design — the
operator's `/v1/_admin/*` and token management — stay unbound; the webhook and health routes
have no principal and stay unbound too.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from treadle.domain.ids import is_identifier
from treadle.errors import BadRequest, Forbidden
from treadle.security.principal import Principal
from treadle.store import scope as tenant_scope

#: path prefixes of routes that act across tenants (operator-only by their scope)
CROSS_TENANT_PREFIXES = ("/v1/_admin/", "/v1/_operatortokendef", "/v1/_pause", "/v1/_resume", "/v1/_state")


class TenantBindingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with tenant_scope.request_binding():
            await self.app(scope, receive, send)


def bind_request(principal: Principal, path: str) -> None:
    """Bind the current request to the principal's tenant, unless its route is cross-tenant."""
    if not path.startswith(CROSS_TENANT_PREFIXES):
        tenant_scope.bind(principal.tenant_id)


def focused_tenant(who: Principal, tenant: str | None, *, doing: str) -> str | None:
    """The tenant an operator-or-tenant route acts on (usage, retention, erasure): an operator's
    `?tenant=` (None: every tenant), with the request's tenant binding lifted; a tenant's caller
    its own tenant — naming another is 403."""
    if tenant is not None and (not is_identifier(tenant) or len(tenant) > 64):
        raise BadRequest("tenant: must match [A-Za-z0-9_-]{1,64}")
    if who.open_mode or who.is_operator:
        tenant_scope.unbind()
        return tenant
    if tenant not in (None, who.tenant_id):
        raise Forbidden(f"a tenant's caller {doing} its own tenant only", scope="substrate:admin")
    return who.tenant_id
