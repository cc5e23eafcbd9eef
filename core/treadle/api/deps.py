"""FastAPI dependencies: the runtime and the calling principal (authenticated, its scope for the
route checked: treadle.api.auth)."""

from __future__ import annotations

from fastapi import Request

from treadle.api.auth import TENANT_HEADER, Authenticator, authorize
from treadle.api.tenantscope import bind_request
from treadle.errors import StoreError
from treadle.runtime import Runtime
from treadle.security.principal import Principal


def get_runtime(request: Request) -> Runtime:
    rt = getattr(request.app.state, "runtime", None)
    if rt is None:
        raise StoreError("treadle is starting; the runtime is not ready yet")
    return rt  # type: ignore[no-any-return,unused-ignore]


async def get_principal(request: Request) -> Principal:
    auth: Authenticator = request.app.state.authenticator
    rt = getattr(request.app.state, "runtime", None)
    principal = await auth.authenticate(request.headers.get("authorization"), rt)
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    principal = authorize(principal, request.method, path, request.headers.get(TENANT_HEADER))
    bind_request(principal, path)
    return principal
