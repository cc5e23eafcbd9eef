"""FastAPI dependencies: the runtime and the calling principal."""

from __future__ import annotations

from fastapi import Request

from treadle.errors import StoreError
from treadle.runtime import Runtime
from treadle.security.principal import BearerAuthenticator, Principal


def get_runtime(request: Request) -> Runtime:
    rt = getattr(request.app.state, "runtime", None)
    if rt is None:
        raise StoreError("treadle is starting; the runtime is not ready yet")
    return rt  # type: ignore[no-any-return,unused-ignore]


def get_principal(request: Request) -> Principal:
    auth: BearerAuthenticator = request.app.state.authenticator
    return auth.authenticate(request.headers.get("authorization"))
