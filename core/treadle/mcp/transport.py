"""The network guard (security/network.py) for MCP over HTTP.

The `mcp` SDK talks HTTP through `httpx2`; this is `security/egress.py`'s GuardedTransport for it:
each request's host is checked against the host policy (the operator's floor ∩ the agent's ∩ the
run's allowed_hosts), resolved through the guard, every address checked (private, loopback,
link-local and metadata addresses refused unless exempted), and the request sent to the checked IP
— the name is never resolved again, so a DNS answer that changes after the check is never used.
TLS keeps the name (SNI, certificate), and so does the Host header. No connection is kept alive,
proxies from the environment are ignored; the SDK follows no redirect off the server's origin."""

from __future__ import annotations

from typing import Any

import httpx2

from treadle.security.network import NetworkGuard


class GuardedTransport2(httpx2.AsyncBaseTransport):
    def __init__(self, guard: NetworkGuard) -> None:
        self._guard = guard
        self._inner = httpx2.AsyncHTTPTransport(
            verify=guard.tls if guard.tls is not None else True, trust_env=False, retries=0,
            limits=httpx2.Limits(max_keepalive_connections=0),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        host, port = self._guard.check_target(url.scheme, url.raw_host.decode("ascii"), url.port)
        failure: httpx2.ConnectError | None = None
        for ip in await self._guard.resolve(host, port):
            extensions: dict[str, Any] = dict(request.extensions)
            if url.scheme == "https":
                extensions["sni_hostname"] = host
            pinned = httpx2.Request(request.method, url.copy_with(host=ip), headers=request.headers,
                                    stream=request.stream, extensions=extensions)
            try:
                return await self._inner.handle_async_request(pinned)
            except httpx2.ConnectError as exc:  # the next checked address, if the name has several
                failure = exc
        assert failure is not None
        raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()


def guarded_client(guard: NetworkGuard, headers: dict[str, str], timeout_s: float) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=GuardedTransport2(guard), headers=headers, trust_env=False,
        timeout=httpx2.Timeout(timeout_s, read=max(timeout_s, 300.0)),
    )
