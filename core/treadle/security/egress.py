"""The guarded HTTP client: `request(guard, ...)` makes one exchange through a `NetworkGuard`
(security/network.py). Import this module where the request is made, not at module level: it
imports httpx, which stays out of cold starts.

`GuardedTransport` resolves each request's host through the guard, checks every address, and
hands httpx a copy of the request whose URL names the checked IP: httpx never resolves the name
itself, so a DNS answer that changes after the check cannot be used. TLS keeps the name (the
`sni_hostname` extension: SNI and certificate verification), so does the `Host` header. No
connection is kept alive (a pinned connection is never reused for another name), proxies from the
environment are ignored, and redirects are followed here, one hop at a time, each re-checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx

from treadle.errors import ToolError
from treadle.security.network import Fetched, HttpLimits, NetworkGuard, NetworkRefused

REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: dropped when a redirect leaves the origin
CREDENTIAL_HEADERS = ("authorization", "cookie", "proxy-authorization")
USER_AGENT = "treadle (agent tool)"


class GuardedTransport(httpx.AsyncBaseTransport):
    def __init__(self, guard: NetworkGuard, inner: httpx.AsyncBaseTransport | None = None) -> None:
        """`inner`: what sends the pinned request (default: httpx's own transport; tests pass a mock)."""
        self._guard = guard
        self._inner = inner or httpx.AsyncHTTPTransport(
            verify=guard.tls if guard.tls is not None else True, trust_env=False, retries=0,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        host, port = self._guard.check_target(url.scheme, url.raw_host.decode("ascii"), url.port)
        failure: httpx.ConnectError | None = None
        for ip in await self._guard.resolve(host, port):
            extensions: dict[str, Any] = dict(request.extensions)
            if url.scheme == "https":
                extensions["sni_hostname"] = host
            pinned = httpx.Request(
                request.method, url.copy_with(host=ip), headers=request.headers, stream=request.stream,
                extensions=extensions,
            )
            try:
                return await self._inner.handle_async_request(pinned)
            except httpx.ConnectError as exc:  # the next checked address, if the name has several
                failure = exc
        assert failure is not None
        raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()


async def request(
    guard: NetworkGuard, method: str, url: str, *, headers: Mapping[str, str] | None = None,
    body: bytes | None = None, limits: HttpLimits | None = None,
) -> Fetched:
    """One HTTP exchange through the guard: redirects followed by hand (each hop re-checked),
    the response body read up to `limits.max_response_bytes`, the whole under `limits.timeout_s`.
    Raises NetworkRefused (refused), ToolError code `timeout` or `http_error` (failed)."""
    limits = limits or HttpLimits()
    try:
        current = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise NetworkRefused(f"invalid URL {url!r}: {exc}", code="bad_url") from None
    guard.check_target(current.scheme, current.raw_host.decode("ascii"), current.port)  # refuse before any I/O
    hdrs = {"user-agent": USER_AGENT, "accept-encoding": "identity",
            **{k.lower(): v for k, v in (headers or {}).items()}}
    transport = GuardedTransport(guard)
    requested = method
    try:
        async with (
            asyncio.timeout(limits.timeout_s),
            httpx.AsyncClient(transport=transport, follow_redirects=False, trust_env=False,
                              timeout=httpx.Timeout(limits.timeout_s)) as client,
        ):
            for hop in range(limits.max_redirects + 1):
                req = client.build_request(method, current, headers=hdrs, content=body)
                resp = await client.send(req, stream=True)
                try:
                    location = resp.headers.get("location")
                    if resp.status_code not in REDIRECTS or not location:
                        data, truncated = await _read_capped(resp, limits.max_response_bytes, method)
                        return Fetched(
                            method=requested, url=url, final_url=str(current), status=resp.status_code,
                            reason=resp.reason_phrase,
                            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.headers.raw],
                            body=data, truncated=truncated, redirects=hop,
                        )
                finally:
                    await resp.aclose()
                if hop == limits.max_redirects:
                    raise NetworkRefused(f"too many redirects (more than {limits.max_redirects})",
                                         code="too_many_redirects")
                target = current.join(location)
                if (target.scheme, target.raw_host, target.port) != (current.scheme, current.raw_host, current.port):
                    for name in CREDENTIAL_HEADERS:
                        hdrs.pop(name, None)
                status = resp.status_code
                if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
                    method, body = "GET", None
                    for name in ("content-type", "content-length"):
                        hdrs.pop(name, None)
                current = target
    except TimeoutError:
        raise ToolError(f"no complete answer within {limits.timeout_s:g} s", code="timeout") from None
    except httpx.TimeoutException as exc:
        raise ToolError(f"timed out ({type(exc).__name__})", code="timeout") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ToolError(f"request failed: {type(exc).__name__}: {exc}", code="http_error") from None
    raise AssertionError("unreachable")


async def _read_capped(resp: httpx.Response, cap: int, method: str) -> tuple[bytes, bool]:
    if method == "HEAD":
        return b"", False
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        if size + len(chunk) > cap:
            parts.append(chunk[: cap - size])
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), False
