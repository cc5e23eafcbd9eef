"""The guarded client on real loopback sockets: the address rules at connect time (on the resolved
address, the connection pinned to it), redirects re-checked hop by hop, caps, timeouts, TLS that
keeps the name while connecting to the checked IP. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
import pytest

from tests.support.loopback import Answer, Loopback, Seen, TableResolver, make_tls
from treadle.errors import ToolError
from treadle.security.egress import GuardedTransport, request
from treadle.security.network import HttpLimits, NetworkGuard, NetworkRefused, NetworkSetup, Resolver

LIMITS = HttpLimits(max_response_bytes=1024, timeout_s=5, max_redirects=5)


def guard(
    floor: Sequence[str] = ("*",), private: str = "", resolver: Resolver | None = None, **env: str
) -> NetworkGuard:
    setup = NetworkSetup(env={"TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": private, **env}, resolver=resolver)
    return setup.guard(list(floor), None, None)


async def refused(g: NetworkGuard, url: str, code: str = "address_refused") -> str:
    with pytest.raises(NetworkRefused) as err:
        await request(g, "GET", url, limits=LIMITS)
    assert err.value.code == code, err.value.message
    return err.value.message


async def test_a_round_trip_to_an_explicitly_allowed_private_host() -> None:
    async with Loopback({"/hello": lambda s: Answer.text(f"hi {s.method} {s.body.decode()}")}) as srv:
        got = await request(guard(private="127.0.0.1"), "POST", srv.url("/hello"), body=b"there", limits=LIMITS)
    assert (got.status, got.reason, got.body, got.truncated) == (200, "OK", b"hi POST there", False)
    assert ("Content-Type", "text/plain; charset=utf-8") in got.headers


async def test_loopback_is_refused_without_the_exemption_and_nothing_connects() -> None:
    async with Loopback({"/": lambda s: Answer.text("reached")}) as srv:
        message = await refused(guard(), srv.url())
        assert "loopback" in message
        assert srv.seen == []


async def test_localhost_is_refused_on_its_resolved_address() -> None:
    async with Loopback({"/": lambda s: Answer.text("reached")}) as srv:
        assert "loopback" in await refused(guard(), srv.url(host="localhost"))
        assert srv.seen == []


async def test_a_name_that_resolves_to_loopback_is_refused() -> None:
    names = TableResolver({"innocent.example": ["127.0.0.1"]})
    async with Loopback({"/": lambda s: Answer.text("reached")}) as srv:
        message = await refused(guard(resolver=names), srv.url(host="innocent.example"))
        assert "resolves to 127.0.0.1" in message and srv.seen == []


@pytest.mark.parametrize("host", ["[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "0.0.0.0",
                                  "[::]", "2130706433", "127.1"])
async def test_ipv6_and_odd_spellings_of_loopback_are_refused(host: str) -> None:
    async with Loopback({"/": lambda s: Answer.text("reached")}) as srv:
        with pytest.raises(NetworkRefused):
            await request(guard(), "GET", srv.url(host=host), limits=LIMITS)
        assert srv.seen == []


async def test_the_connection_goes_to_the_checked_address_with_the_name_kept() -> None:
    # `pinned.test` resolves nowhere but in the guard's resolver: an answer proves httpx connected
    # to the address the guard checked instead of resolving the name again
    names = TableResolver({"pinned.test": ["127.0.0.1"]})
    async with Loopback({"/": lambda s: Answer.text(s.headers["host"])}) as srv:
        g = guard(private="pinned.test", resolver=names)
        got = await request(g, "GET", srv.url(host="pinned.test"), limits=LIMITS)
    assert got.body == f"pinned.test:{srv.port}".encode()
    assert names.calls == ["pinned.test"]


async def test_a_redirect_to_loopback_or_to_the_metadata_endpoint_is_refused() -> None:
    names = TableResolver({"hop.test": ["127.0.0.1"]})
    g = guard(floor=["hop.test", "127.0.0.1", "169.254.169.254"], private="hop.test", resolver=names)
    async with Loopback() as srv:
        srv.routes = {"/to-loopback": lambda s: Answer.redirect(srv.url("/secret")),
                      "/to-metadata": lambda s: Answer.redirect("http://169.254.169.254/latest/meta-data/"),
                      "/secret": lambda s: Answer.text("internal")}
        assert "loopback" in await refused(g, srv.url("/to-loopback", host="hop.test"))
        assert "cloud metadata" in await refused(g, srv.url("/to-metadata", host="hop.test"))
        assert [s.path for s in srv.seen] == ["/to-loopback", "/to-metadata"]  # the targets were never reached


async def test_a_redirect_leaving_the_allowlist_is_refused() -> None:
    names = TableResolver({"hop.test": ["127.0.0.1"], "elsewhere.test": ["127.0.0.1"]})
    g = guard(floor=["hop.test"], private="hop.test, elsewhere.test", resolver=names)
    async with Loopback() as srv:
        srv.routes = {"/": lambda s: Answer.redirect(srv.url("/x", host="elsewhere.test"))}
        message = await refused(g, srv.url(host="hop.test"), code="host_not_allowed")
    assert "elsewhere.test" in message and len(srv.seen) == 1


async def test_redirects_are_followed_within_the_rules() -> None:
    names = TableResolver({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]})
    g = guard(floor=["a.test", "b.test"], private="a.test, b.test", resolver=names)
    async with Loopback() as srv:
        srv.routes = {"/start": lambda s: Answer.redirect(srv.url("/next", host="b.test"), 303),
                      "/next": lambda s: Answer.redirect("/final", 307),
                      "/final": lambda s: Answer.text("arrived")}
        got = await request(g, "POST", srv.url("/start", host="a.test"), body=b"payload",
                            headers={"Authorization": "Bearer secret", "Content-Type": "text/plain"}, limits=LIMITS)
    assert (got.status, got.body, got.redirects, got.method) == (200, b"arrived", 2, "POST")
    assert got.final_url == srv.url("/final", host="b.test")
    first, second, third = srv.seen
    assert (first.method, first.body, first.headers["authorization"]) == ("POST", b"payload", "Bearer secret")
    assert (second.method, second.body) == ("GET", b"")  # 303: GET without the body
    assert "authorization" not in second.headers  # a redirect to another origin drops credentials
    assert third.method == "GET" and third.headers["host"] == f"b.test:{srv.port}"


async def test_at_most_five_redirects() -> None:
    async with Loopback() as srv:
        srv.routes = {"/loop": lambda s: Answer.redirect("/loop")}
        message = await refused(guard(private="127.0.0.1"), srv.url("/loop"), code="too_many_redirects")
    assert "more than 5" in message and len(srv.seen) == 6


async def test_the_response_is_capped() -> None:
    async with Loopback({"/big": lambda s: Answer.text("x" * 5000)}) as srv:
        got = await request(guard(private="127.0.0.1"), "GET", srv.url("/big"), limits=LIMITS)
    assert got.truncated and got.body == b"x" * 1024


async def test_a_slow_answer_times_out() -> None:
    async def slow(s: Seen) -> Answer:
        await asyncio.sleep(5)
        return Answer.text("late")

    async with Loopback({"/slow": slow}) as srv:
        with pytest.raises(ToolError) as err:
            await request(guard(private="127.0.0.1"), "GET", srv.url("/slow"),
                          limits=HttpLimits(timeout_s=0.3))
    assert err.value.code == "timeout"


async def test_tls_keeps_the_name_while_connecting_to_the_checked_address() -> None:
    tls = make_tls("secure.test")
    names = TableResolver({"secure.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    setup = NetworkSetup(env={"TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": "secure.test, other.test"}, resolver=names,
                         tls=tls.client)
    g = setup.guard(["*"], None, None)
    async with Loopback({"/": lambda s: Answer.text("over tls")}, tls=tls.server) as srv:
        got = await request(g, "GET", f"https://secure.test:{srv.port}/", limits=LIMITS)
        assert got.body == b"over tls" and tls.sni == ["secure.test"]
        assert srv.seen[0].headers["host"] == f"secure.test:{srv.port}"
        with pytest.raises(ToolError) as err:  # the certificate is checked against the name, not the IP
            await request(g, "GET", f"https://other.test:{srv.port}/", limits=LIMITS)
    assert err.value.code == "http_error" and "CERTIFICATE_VERIFY_FAILED" in err.value.message


async def test_the_pinned_request_carries_the_name_for_sni_and_host() -> None:
    sent: list[httpx.Request] = []

    def answer(req: httpx.Request) -> httpx.Response:
        sent.append(req)
        return httpx.Response(200, text="ok")

    names = TableResolver({"api.example.com": ["93.184.216.34"]})
    g = guard(floor=["api.example.com"], resolver=names)
    transport = GuardedTransport(g, inner=httpx.MockTransport(answer))
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get("https://api.example.com/v1?q=1")).text == "ok"
    [pinned] = sent
    assert str(pinned.url) == "https://93.184.216.34/v1?q=1"
    assert pinned.headers["host"] == "api.example.com"
    assert pinned.extensions["sni_hostname"] == "api.example.com"
