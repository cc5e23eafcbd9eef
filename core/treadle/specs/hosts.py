"""Host patterns: the entries of every network allowlist (yaml `http.allowed_hosts`, an agent's
`allowed_hosts`, a run's, `TREADLE_HTTP_ALLOWED_HOSTS`, `TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST`).

    example.com          that host exactly (any port)
    example.com:8443     that host on that port only
    *.example.com        any subdomain of example.com (a.example.com, a.b.example.com), not the apex
    10.0.0.7, [::1]:8080 an address literal (IPv6 in brackets when a port follows)
    *                    any host

Unlike loomcycle, a bare host does not cover its subdomains: write `*.example.com` for those.
Names compare lower-case, without a trailing dot, IDNA-encoded; addresses in their canonical form.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

_LABELS = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")
DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_host(host: str) -> str:
    """The form hosts compare in: lower-case, no brackets or trailing dot, IDNA, canonical IP."""
    h = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        pass
    if not h.isascii():
        try:
            h = h.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"{host!r} is not a valid host name") from None
    return h


@dataclass(frozen=True, slots=True)
class HostPattern:
    host: str  # normalized; "" for `*`
    wildcard: bool = False  # `*.host`: any subdomain of host
    port: int | None = None

    @property
    def any(self) -> bool:
        return self.host == ""

    @classmethod
    def parse(cls, entry: str) -> HostPattern:
        """One allowlist entry; ValueError says what is wrong with it."""
        raw = entry.strip()
        if raw == "*":
            return cls("")
        if not raw or "://" in raw or "/" in raw or "@" in raw or any(c.isspace() for c in raw):
            raise ValueError(f"{entry!r} is not a host pattern (a host, *.domain, host:port or *; no scheme or path)")
        host, port = _split_port(raw, entry)
        wildcard = host.startswith("*.")
        if wildcard:
            host = host[2:]
        if "*" in host:
            raise ValueError(f"{entry!r}: a wildcard is allowed only as a leading `*.`")
        name = normalize_host(host)
        is_ip = _is_ip(name)
        if wildcard and is_ip:
            raise ValueError(f"{entry!r}: `*.` applies to domain names, not addresses")
        if not is_ip and not _LABELS.match(name):
            raise ValueError(f"{entry!r} is not a valid host name")
        return cls(name, wildcard, port)

    def matches(self, host: str, port: int) -> bool:
        """`host` normalized (normalize_host); `port` the effective port (80/443 when implied)."""
        if self.port is not None and port != self.port:
            return False
        if self.any:
            return True
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        if self.any:
            return "*"
        host = f"[{self.host}]" if ":" in self.host and self.port is not None else self.host
        return ("*." if self.wildcard else "") + host + (f":{self.port}" if self.port is not None else "")


def _split_port(raw: str, entry: str) -> tuple[str, int | None]:
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{entry!r} is not a host pattern")
        return host, _port(rest[1:], entry) if rest else None
    if raw.count(":") > 1:  # a bare IPv6 address: no port
        return raw, None
    host, sep, port = raw.partition(":")
    return host, _port(port, entry) if sep else None


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_host_patterns(entries: Iterable[str]) -> tuple[HostPattern, ...]:
    return tuple(HostPattern.parse(e) for e in entries)


def split_host_list(csv: str) -> list[str]:
    """An environment variable's comma-separated entries (blank entries dropped)."""
    return [e.strip() for e in csv.split(",") if e.strip()]


def _host_pattern(v: str) -> str:
    return str(HostPattern.parse(v))


#: one allowlist entry, checked and stored normalized
HostPatternStr = Annotated[str, AfterValidator(_host_pattern)]
