"""The bearer authenticator (without a database: the legacy token) and the sidecar's refusal to
listen openly on a network address. Tokens in the database: tests/tenancy."""

from __future__ import annotations

import pytest
from treadle_sidecar.app import check_listen

from treadle.api.auth import Authenticator
from treadle.config import Settings
from treadle.errors import ConfigError, Unauthorized, ValidationFailed
from treadle.security.network import is_loopback_host
from treadle.security.principal import DEFAULT_TENANT, OPEN_PRINCIPAL, bearer_from_header


class BearerAuthenticator:
    """The authenticator with no runtime behind it: only the legacy token."""

    def __init__(self, token: str | None) -> None:
        self.inner = Authenticator(token)

    @property
    def open_mode(self) -> bool:
        return self.inner.legacy_token is None

    def authenticate(self, header: str | None) -> object:
        import asyncio

        return asyncio.run(self.inner.authenticate(header, None))


def test_open_mode_lets_everyone_in_as_the_default_tenant() -> None:
    auth = BearerAuthenticator(None)
    assert auth.open_mode
    for header in (None, "", "Bearer anything", "Basic Zm9v"):
        p = auth.authenticate(header)
        assert p == OPEN_PRINCIPAL and p.open_mode and p.tenant_id == DEFAULT_TENANT
    assert BearerAuthenticator("").open_mode  # an empty token is no token


@pytest.mark.parametrize("blank", [" ", "  \t", "\n"])
def test_a_blank_token_is_refused_at_start(blank: str) -> None:
    with pytest.raises(ValidationFailed, match="blank"):
        Authenticator(blank)
    with pytest.raises(ConfigError, match="blank"):
        check_listen(Settings(listen="0.0.0.0:8787", auth_token=blank))


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   ", "Basic c2VjcmV0", "secret", "Token secret"])
def test_missing_token(header: str | None) -> None:
    auth = BearerAuthenticator("secret")
    assert not auth.open_mode
    with pytest.raises(Unauthorized, match="missing bearer token") as info:
        auth.authenticate(header)
    assert info.value.status == 401 and info.value.code == "unauthorized"


@pytest.mark.parametrize("header", ["Bearer wrong", "Bearer secret2", "Bearer secre", "Bearer SECRET"])
def test_invalid_token(header: str) -> None:
    with pytest.raises(Unauthorized, match="invalid bearer token"):
        BearerAuthenticator("secret").authenticate(header)


@pytest.mark.parametrize("header", ["Bearer secret", "bearer secret", "BEARER   secret  "])
def test_valid_token(header: str) -> None:
    p = BearerAuthenticator("secret").authenticate(header)
    assert p.tenant_id == DEFAULT_TENANT and p.subject == "operator" and not p.open_mode  # type: ignore[attr-defined]


def test_bearer_from_header() -> None:
    assert bearer_from_header("Bearer abc") == "abc"
    assert bearer_from_header("Bearer  a b ") == "a b"
    assert bearer_from_header("Basic abc") is None
    assert bearer_from_header(None) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com", "localhost.evil"])
def test_non_loopback_hosts(host: str) -> None:
    assert not is_loopback_host(host)


@pytest.mark.parametrize("listen", ["127.0.0.1:8787", "[::1]:9000", "localhost:1"])
def test_check_listen_allows_loopback_without_a_token(listen: str) -> None:
    host, port = check_listen(Settings(listen=listen, auth_token=None))
    assert is_loopback_host(host) and port > 0


@pytest.mark.parametrize("listen", ["0.0.0.0:8787", "[::]:8787", "10.1.2.3:80", "myhost:8787"])
def test_check_listen_refuses_open_network_listen(listen: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_listen(Settings(listen=listen, auth_token=None))
    msg = str(info.value)
    assert f"TREADLE_LISTEN={listen}" in msg and "TREADLE_AUTH_TOKEN" in msg


def test_check_listen_allows_network_with_a_token() -> None:
    assert check_listen(Settings(listen="0.0.0.0:8787", auth_token="s3cret")) == ("0.0.0.0", 8787)
