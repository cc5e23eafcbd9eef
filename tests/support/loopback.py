"""A small HTTP/1.1 server on 127.0.0.1 (ephemeral port) for the network-tool tests: real sockets,
one request per connection, answers from a route table. Nothing here reaches another host."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import json
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.fake_http import Request

#: a request as the server received it (the fake vendors' request type)
Seen = Request


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def text(cls, body: str, content_type: str = "text/plain; charset=utf-8", status: int = 200) -> Answer:
        return cls(status, {"Content-Type": content_type}, body.encode())

    @classmethod
    def json(cls, doc: Any, status: int = 200) -> Answer:
        return cls(status, {"Content-Type": "application/json"}, json.dumps(doc).encode())

    @classmethod
    def redirect(cls, location: str, status: int = 302) -> Answer:
        return cls(status, {"Location": location})


Route = Callable[[Seen], Answer | Awaitable[Answer]]


class Loopback:
    """`async with Loopback({"/path": route, ...}) as srv:` — `srv.port`, `srv.url(path)`, `srv.seen`."""

    def __init__(self, routes: dict[str, Route] | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = dict(routes or {})
        self.tls = tls
        self.seen: list[Seen] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def __aenter__(self) -> Loopback:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).decode("latin-1").rstrip("\r\n")
            if not line:
                return
            method, target, _ = line.split(" ", 2)
            headers: dict[str, str] = {}
            while h := (await reader.readline()).decode("latin-1").rstrip("\r\n"):
                name, _, value = h.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            seen = Seen(method, target, headers, body)
            self.seen.append(seen)
            route = self.routes.get(seen.path)
            answer = route(seen) if route is not None else Answer.text("no such route", status=404)
            if inspect.isawaitable(answer):
                answer = await answer
            head = [f"HTTP/1.1 {answer.status} {_REASONS.get(answer.status, 'Status')}",
                    *(f"{k}: {v}" for k, v in answer.headers.items()),
                    f"Content-Length: {len(answer.body)}", "Connection: close"]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + answer.body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()


_REASONS = {200: "OK", 201: "Created", 301: "Moved Permanently", 302: "Found", 303: "See Other",
            307: "Temporary Redirect", 308: "Permanent Redirect", 403: "Forbidden", 404: "Not Found",
            500: "Internal Server Error"}


class TableResolver:
    """A test resolver: names → addresses from `table` (others fail like an unknown name); every
    lookup is recorded in `calls`."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return list(self.table[host])


@dataclass
class LocalTLS:
    """A throwaway CA and a server certificate for `names`: `server` (records the SNI names it is
    offered in `sni`) and `client` (trusts only that CA)."""

    server: ssl.SSLContext
    client: ssl.SSLContext
    sni: list[str | None]


def make_tls(*names: str) -> LocalTLS:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
             ca: bool) -> x509.Certificate:
        issuer_name, issuer_key = issuer or (subject, key)
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(hours=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                                            critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = cert("treadle test CA", ca_key, None, True)
    leaf = cert(names[0], leaf_key, ("treadle test CA", ca_key), False)
    pem = serialization.Encoding.PEM
    with tempfile.TemporaryDirectory() as tmp:
        cert_file, key_file = Path(tmp, "leaf.pem"), Path(tmp, "leaf.key")
        cert_file.write_bytes(leaf.public_bytes(pem))
        key_file.write_bytes(leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(cert_file, key_file)
    sni: list[str | None] = []
    server.sni_callback = lambda _sock, name, _ctx: sni.append(name)
    client = ssl.create_default_context(cadata=ca_cert.public_bytes(pem).decode())
    return LocalTLS(server, client, sni)
