"""The network guard: every outbound call an agent can steer (HTTP, WebFetch; the WebSearch
endpoint too) goes through a `NetworkGuard` built here. Two checks, both on every hop of every redirect:

1. **Which hosts** (`HostPolicy`): the operator floor ∩ the agent's `allowed_hosts` ∩ the
   caller's per-run `allowed_hosts`. The floor is yaml `http.allowed_hosts` plus
   `TREADLE_HTTP_ALLOWED_HOSTS` (comma-separated). Posture (`TREADLE_NETWORK_POSTURE`):
   `managed` (default) — an empty floor allows nothing; `agentic` — an empty floor allows any
   public host. An agent's or a caller's list only narrows: a host must match every list given
   (None = that level does not narrow; [] = nothing). Patterns: treadle/specs/hosts.py.
2. **Which addresses** (`AddressRules`): the guard resolves the name itself (an injectable
   `Resolver`), refuses it when *any* resolved address is loopback, private (RFC 1918),
   link-local, carrier-grade NAT (100.64/10), unique-local IPv6, unspecified, multicast,
   reserved, or a cloud metadata endpoint — also when written as IPv4-mapped/-compatible, NAT64
   or 6to4 IPv6 — and then connects to the address it checked (security/egress.py pins the IP
   while TLS SNI, certificate checks and `Host` keep the name), so a DNS answer that changes
   between check and connect is never used. `TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST` names hosts
   (exactly, optionally with a port; no wildcards) that may resolve to private or loopback
   addresses — for development and tests. Metadata endpoints are refused even for those.

The requests themselves: `treadle.security.egress.request(guard, ...)` — a separate module so
that httpx is imported only when a request is made, never at import time.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ConfigDict

from treadle.envsettings import EnvSettings
from treadle.errors import ToolError
from treadle.specs.hosts import DEFAULT_PORTS, HostPattern, normalize_host, parse_host_patterns, split_host_list

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Posture = Literal["managed", "agentic"]
#: resolve (host, port) to IP address strings
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "fd00:ec2::23")
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_ULA = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")


class NetworkRefused(ToolError):
    """The guard refused a request (host not allowed, address refused, bad URL, too many redirects)."""

    code = "network_refused"


class NetworkEnv(EnvSettings):
    """TREADLE_NETWORK_POSTURE, TREADLE_HTTP_ALLOWED_HOSTS, TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST."""

    model_config = ConfigDict(defer_build=True)  # read when a tool or hook first reaches out
    network_posture: Posture = "managed"
    http_allowed_hosts: str = ""
    http_private_host_allowlist: str = ""


def is_loopback_host(host: str) -> bool:
    """True for `localhost` and loopback IP literals (127.0.0.0/8, ::1)."""
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- which hosts --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Named layers of patterns; a host is allowed when it matches a pattern of every layer."""

    layers: tuple[tuple[str, tuple[HostPattern, ...]], ...]

    @classmethod
    def build(
        cls, posture: Posture, operator: Sequence[str], agent: Sequence[str] | None = None,
        caller: Sequence[str] | None = None,
    ) -> HostPolicy:
        """Floor ∩ agent ∩ caller. Raises ValueError naming a bad entry."""
        floor = parse_host_patterns(operator)
        if not floor and posture == "agentic":
            floor = (HostPattern(""),)
        layers = [("operator floor", floor)]
        if agent is not None:
            layers.append(("agent allowed_hosts", parse_host_patterns(agent)))
        if caller is not None:
            layers.append(("run allowed_hosts", parse_host_patterns(caller)))
        return cls(tuple(layers))

    @classmethod
    def anywhere(cls) -> HostPolicy:
        """For endpoints the operator configured (the search provider): address rules only."""
        return cls((("operator endpoint", (HostPattern(""),)),))

    def refusal(self, host: str, port: int) -> str | None:
        """Why `host` (normalized) on `port` is not allowed, or None."""
        for name, patterns in self.layers:
            if not any(p.matches(host, port) for p in patterns):
                if not patterns:
                    return f"the {name} allows no host" + (
                        " (set http.allowed_hosts or TREADLE_HTTP_ALLOWED_HOSTS, or TREADLE_NETWORK_POSTURE=agentic)"
                        if name == "operator floor" else "")
                return f"not in the {name} ({', '.join(map(str, patterns))})"
        return None


# -- which addresses ----------------------------------------------------------------------------


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries: mapped (::ffff:a.b.c.d), compatible
    (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) or 6to4 (2002:aabb:ccdd::)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (ip in _V4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_metadata(ip: IPAddress) -> bool:
    inner = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    return ip in METADATA_ADDRESSES or (inner is not None and inner in METADATA_ADDRESSES)


def address_refusal(ip: IPAddress) -> str | None:
    """What kind of non-public address `ip` is, or None for a public unicast address."""
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            reason = address_refusal(inner)
            return f"{reason} (IPv4 {inner} inside IPv6)" if reason else None
    checks: tuple[tuple[bool, str], ...] = (
        (ip.is_unspecified or ip in _THIS_NETWORK, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip in _CGNAT, "carrier-grade NAT"),
        (ip in _ULA, "unique-local"),
        (ip.is_reserved, "reserved"),
        (ip.is_private, "private"),
        (not ip.is_global, "non-public"),
    )
    return next((reason for hit, reason in checks if hit), None)


@dataclass(frozen=True, slots=True)
class AddressRules:
    """The address check, with the operator's explicit private-host exemptions."""

    private_hosts: tuple[HostPattern, ...] = ()

    @classmethod
    def from_env(cls, csv: str) -> AddressRules:
        entries = split_host_list(csv)
        patterns = parse_host_patterns(entries)
        for entry, p in zip(entries, patterns, strict=True):
            if p.any or p.wildcard:
                raise ValueError(f"{entry!r}: private hosts are named one by one (no wildcards)")
        return cls(patterns)

    def refusal(self, host: str, port: int, ip: IPAddress) -> str | None:
        reason = address_refusal(ip)
        if reason is None:
            return None
        if is_metadata(ip) or not any(p.matches(host, port) for p in self.private_hosts):
            return reason
        return None


async def system_resolver(host: str, port: int) -> list[str]:
    """The machine's resolver (getaddrinfo), every address it returns, in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


# -- the guard ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NetworkGuard:
    hosts: HostPolicy
    addresses: AddressRules = field(default_factory=AddressRules)
    resolver: Resolver = system_resolver
    #: the TLS context for https (None: httpx's default trust store)
    tls: ssl.SSLContext | None = None

    def check_target(self, scheme: str, host: str, port: int | None) -> tuple[str, int]:
        """The normalized host and effective port of a request target, when the host policy
        allows it; NetworkRefused otherwise."""
        if scheme not in DEFAULT_PORTS:
            raise NetworkRefused(f"only http and https URLs are allowed, not {scheme or 'no scheme'!r}", code="bad_url")
        if not host:
            raise NetworkRefused("the URL has no host", code="bad_url")
        try:
            name = normalize_host(host)
        except ValueError as exc:
            raise NetworkRefused(str(exc), code="bad_url") from None
        effective = port or DEFAULT_PORTS[scheme]
        reason = self.hosts.refusal(name, effective)
        if reason is not None:
            raise NetworkRefused(f"host {name!r} is not allowed: {reason}", code="host_not_allowed")
        return name, effective

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for `host` (normalized), each one checked; NetworkRefused
        when the name does not resolve or any address it resolves to is refused."""
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            found = [literal]
        else:
            try:
                answers = await self.resolver(host, port)
            except OSError as exc:
                raise NetworkRefused(f"cannot resolve {host!r}: {exc}", code="dns_failed") from None
            found = list(dict.fromkeys(ipaddress.ip_address(a.split("%")[0]) for a in answers))
            if not found:
                raise NetworkRefused(f"cannot resolve {host!r}: no address", code="dns_failed")
        for ip in found:
            reason = self.addresses.refusal(host, port, ip)
            if reason is not None:
                where = "" if literal is not None else f" resolves to {ip}, which"
                raise NetworkRefused(f"{host!r}{where} is a {reason} address: refused", code="address_refused")
        return [str(ip) for ip in found]


@dataclass(frozen=True, slots=True)
class NetworkSetup:
    """Where the guard reads its process settings: `env` (default: the process environment, read
    at each call), the resolver (default: the system's) and the TLS context (default: httpx's
    trust store). Tests inject them."""

    env: Mapping[str, str] | None = None
    resolver: Resolver | None = None
    tls: ssl.SSLContext | None = None

    def settings(self) -> NetworkEnv:
        try:
            env = NetworkEnv.from_env(self.env if self.env is not None else os.environ)
        except ValueError as exc:
            raise NetworkRefused(f"invalid TREADLE_NETWORK_POSTURE: {exc}", code="network_misconfigured") from None
        assert isinstance(env, NetworkEnv)
        return env

    def guard(
        self, operator_hosts: Sequence[str], agent_hosts: Sequence[str] | None, caller_hosts: Sequence[str] | None
    ) -> NetworkGuard:
        """The guard for an agent's call: floor (yaml + env) ∩ agent ∩ caller."""
        env = self.settings()
        floor = [*operator_hosts, *split_host_list(env.http_allowed_hosts)]
        try:
            hosts = HostPolicy.build(env.network_posture, floor, agent_hosts, caller_hosts)
        except ValueError as exc:
            raise NetworkRefused(f"invalid allowed_hosts entry: {exc}", code="network_misconfigured") from None
        return NetworkGuard(hosts, self._addresses(env), self.resolver or system_resolver, self.tls)

    def operator_guard(self) -> NetworkGuard:
        """The guard for an endpoint the operator configured: any host, the address rules."""
        addresses = self._addresses(self.settings())
        return NetworkGuard(HostPolicy.anywhere(), addresses, self.resolver or system_resolver, self.tls)

    @staticmethod
    def _addresses(env: NetworkEnv) -> AddressRules:
        try:
            return AddressRules.from_env(env.http_private_host_allowlist)
        except ValueError as exc:
            raise NetworkRefused(f"TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST: {exc}", code="network_misconfigured") from None


# -- requests -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_request_bytes: int = 256 * 1024
    max_response_bytes: int = 256 * 1024
    timeout_s: float = 30.0
    max_redirects: int = 5


@dataclass(slots=True)
class Fetched:
    """A response read through the guard (after redirects), its body capped."""

    method: str
    url: str  # as requested
    final_url: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    truncated: bool
    redirects: int = 0

    def header(self, name: str) -> str | None:
        lower = name.lower()
        return next((v for k, v in self.headers if k.lower() == lower), None)

    @property
    def media_type(self) -> str:
        return (self.header("content-type") or "").split(";")[0].strip().lower()

    @property
    def charset(self) -> str | None:
        for part in (self.header("content-type") or "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                return value.strip("\"' ").lower()
        return None
