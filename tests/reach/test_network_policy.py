"""The network guard's rules without I/O: host patterns, the allowlist intersection (operator floor ∩
agent ∩ caller — a caller narrows, never widens), the two postures, and which addresses are refused."""

from __future__ import annotations

import ipaddress

import pytest

from treadle.config import parse_config
from treadle.errors import ConfigError
from treadle.security.network import (
    AddressRules,
    HostPolicy,
    NetworkGuard,
    NetworkRefused,
    NetworkSetup,
    address_refusal,
)
from treadle.specs.hosts import HostPattern, normalize_host


def allowed(policy: HostPolicy, host: str, port: int = 443) -> bool:
    return policy.refusal(normalize_host(host), port) is None


# -- patterns -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "host", "port", "hit"),
    [
        ("example.com", "example.com", 443, True),
        ("example.com", "EXAMPLE.com.", 80, True),
        ("example.com", "api.example.com", 443, False),  # a bare host is that host only
        ("*.example.com", "api.example.com", 443, True),
        ("*.example.com", "a.b.example.com", 443, True),
        ("*.example.com", "example.com", 443, False),
        ("*.example.com", "evilexample.com", 443, False),
        ("example.com:8443", "example.com", 8443, True),
        ("example.com:8443", "example.com", 443, False),
        ("*", "anything.org", 8080, True),
        ("10.0.0.7", "10.0.0.7", 80, True),
        ("[::1]:8080", "::1", 8080, True),
        ("::1", "0:0:0:0:0:0:0:1", 80, True),
        ("bücher.de", "xn--bcher-kva.de", 443, True),
    ],
)
def test_host_patterns(pattern: str, host: str, port: int, hit: bool) -> None:
    assert HostPattern.parse(pattern).matches(normalize_host(host), port) is hit


@pytest.mark.parametrize("bad", ["", "https://example.com", "example.com/path", "a*.example.com", "*.10.0.0.1",
                                 "example.com:0", "example.com:http", "user@example.com", "exa mple.com", "-x-.com"])
def test_malformed_patterns_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        HostPattern.parse(bad)


def test_yaml_allowed_hosts_are_checked_at_start_and_stored_normalized() -> None:
    cfg = parse_config({"http": {"allowed_hosts": ["API.Example.com", "*.Docs.example.com:8443"]},
                        "agents": {"a": {"allowed_hosts": ["api.example.com"]}}})
    assert cfg.http.allowed_hosts == ["api.example.com", "*.docs.example.com:8443"]
    assert cfg.agents["a"].allowed_hosts == ["api.example.com"]
    assert parse_config({"agents": {"a": {}}}).agents["a"].allowed_hosts is None  # not given: no narrowing
    with pytest.raises(ConfigError, match=r"agents\.a\.allowed_hosts\.0"):
        parse_config({"agents": {"a": {"allowed_hosts": ["https://api.example.com/"]}}})
    with pytest.raises(ConfigError, match=r"http\.max_redirects"):
        parse_config({"http": {"max_redirects": 50}})
    with pytest.raises(ConfigError, match=r"search\.driver"):
        parse_config({"search": {"driver": "bing", "base_url": "https://x"}})


# -- the intersection -----------------------------------------------------------------------------


def test_managed_posture_with_no_floor_allows_nothing() -> None:
    policy = HostPolicy.build("managed", [])
    assert not allowed(policy, "example.com")
    assert "allows no host" in (policy.refusal("example.com", 443) or "")


def test_agentic_posture_with_no_floor_allows_any_host_but_a_floor_still_binds() -> None:
    assert allowed(HostPolicy.build("agentic", []), "example.com")
    assert not allowed(HostPolicy.build("agentic", ["api.example.com"]), "example.com")


def test_the_agent_narrows_the_floor() -> None:
    policy = HostPolicy.build("managed", ["*.example.com"], agent=["api.example.com"])
    assert allowed(policy, "api.example.com")
    assert not allowed(policy, "docs.example.com")
    assert "agent allowed_hosts" in (policy.refusal("docs.example.com", 443) or "")


def test_a_caller_narrows_and_never_widens() -> None:
    floor = ["*.example.com"]
    narrowed = HostPolicy.build("managed", floor, caller=["docs.example.com"])
    assert allowed(narrowed, "docs.example.com") and not allowed(narrowed, "api.example.com")
    widened = HostPolicy.build("managed", floor, caller=["evil.org", "*", "docs.example.com"])
    assert not allowed(widened, "evil.org")  # `*` from a caller is still inside the floor
    assert allowed(widened, "api.example.com") and allowed(widened, "docs.example.com")
    assert "operator floor" in (widened.refusal("evil.org", 443) or "")


def test_every_level_must_allow_the_host() -> None:
    policy = HostPolicy.build("agentic", [], agent=["*.example.com"], caller=["api.example.com:443"])
    assert allowed(policy, "api.example.com", 443)
    assert not allowed(policy, "api.example.com", 8443)  # the caller pinned the port
    assert not allowed(policy, "docs.example.com")  # the caller's list
    assert not allowed(policy, "other.org")  # the agent's list (the floor allows it)


def test_an_empty_list_at_any_level_denies_everything() -> None:
    assert not allowed(HostPolicy.build("agentic", [], agent=[]), "example.com")
    assert not allowed(HostPolicy.build("agentic", [], caller=[]), "example.com")


def test_env_floor_adds_to_the_yaml_floor_and_the_posture_comes_from_env() -> None:
    setup = NetworkSetup(env={"TREADLE_HTTP_ALLOWED_HOSTS": "a.example.com, b.example.com"})
    guard = setup.guard(["c.example.com"], None, None)
    for host in ("a.example.com", "b.example.com", "c.example.com"):
        assert guard.hosts.refusal(host, 443) is None
    assert guard.hosts.refusal("d.example.com", 443) is not None
    agentic = NetworkSetup(env={"TREADLE_NETWORK_POSTURE": "agentic"}).guard([], None, None)
    assert agentic.hosts.refusal("d.example.com", 443) is None
    with pytest.raises(NetworkRefused, match="POSTURE"):
        NetworkSetup(env={"TREADLE_NETWORK_POSTURE": "open"}).guard([], None, None)


# -- addresses ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
        ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
        ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"), ("100.127.255.254", "carrier-grade NAT"),
        ("fd12:3456::1", "unique-local"), ("fc00::1", "unique-local"),
        ("169.254.169.254", "cloud metadata"), ("fd00:ec2::254", "cloud metadata"),
        ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"), ("::", "unspecified"),
        ("224.0.0.1", "multicast"), ("239.1.1.1", "multicast"), ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "cloud metadata"), ("::127.0.0.1", "loopback"),
        ("64:ff9b::7f00:1", "loopback"), ("2002:a00:1::", "private"),
        ("240.0.0.1", "reserved"), ("192.0.2.1", "private"),
    ],
)
def test_non_public_addresses_are_refused(address: str, kind: str) -> None:
    reason = address_refusal(ipaddress.ip_address(address))
    assert reason is not None and reason.startswith(kind)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


def test_private_host_allowlist_is_explicit_and_never_covers_metadata() -> None:
    rules = AddressRules.from_env("dev.internal, localhost:8080")
    loop = ipaddress.ip_address("127.0.0.1")
    assert rules.refusal("dev.internal", 80, loop) is None
    assert rules.refusal("localhost", 8080, loop) is None
    assert rules.refusal("localhost", 9090, loop) == "loopback"  # the port was named
    assert rules.refusal("other.internal", 80, loop) == "loopback"
    assert rules.refusal("dev.internal", 80, ipaddress.ip_address("169.254.169.254")) == "cloud metadata"
    for wildcard in ("*", "*.internal"):
        with pytest.raises(ValueError, match="no wildcards"):
            AddressRules.from_env(wildcard)
    assert AddressRules.from_env("").private_hosts == ()


async def test_every_resolved_address_is_checked() -> None:
    async def mixed(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "10.0.0.5"]

    guard = NetworkGuard(HostPolicy.build("agentic", []), AddressRules(), mixed)
    with pytest.raises(NetworkRefused, match=r"resolves to 10\.0\.0\.5.*private") as err:
        await guard.resolve("mixed.example", 443)
    assert err.value.code == "address_refused"


async def test_check_target_refuses_other_schemes_and_unlisted_hosts() -> None:
    guard = NetworkGuard(HostPolicy.build("managed", ["example.com"]))
    assert guard.check_target("https", "Example.COM", None) == ("example.com", 443)
    with pytest.raises(NetworkRefused, match="only http and https") as err:
        guard.check_target("file", "example.com", None)
    assert err.value.code == "bad_url"
    with pytest.raises(NetworkRefused, match="not allowed") as err:
        guard.check_target("http", "example.org", None)
    assert err.value.code == "host_not_allowed"
