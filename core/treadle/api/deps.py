"""FastAPI dependencies: the runtime and the calling principal (authenticated, its scope for the
route checked: treadle.api.auth)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

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


#: the OpenAPI security scheme (Swagger's Authorize button); the Authenticator reads the header itself
bearer = HTTPBearer(auto_error=False, scheme_name="bearer",
                    description="An operator token (OperatorTokenDef), a `principals:` token or TREADLE_AUTH_TOKEN")


async def get_principal(
    request: Request, _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None
) -> Principal:
    auth: Authenticator = request.app.state.authenticator
    rt = getattr(request.app.state, "runtime", None)
    principal = await auth.authenticate(request.headers.get("authorization"), rt)
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    principal = authorize(principal, request.method, path, request.headers.get(TENANT_HEADER))
    bind_request(principal, path)
    remember = getattr(rt, "remember_tenant_secrets", None)
    if remember is not None:  # what this request writes is redacted of its tenant's credentials, too
        await remember(principal.tenant_id)
    return principal


#: the two dependencies every router's handlers take: the runtime and the calling principal
Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]
