"""Redaction that holds (issue 42, done-when 1): a served treadle whose scripted model echoes every
kind of secret — a provider key, an operator-declared secret (TREADLE_REDACT_ENV), the run's own
`user_credentials` and the tenant's CredentialDef — into a tool's input, a tool's result (an HTTP
endpoint on loopback that answers them back), a Memory value, a channel message, a document and its
final text, each in every encoding: literal, base64 (standard and URL-safe), URL-encoded, hex and
JSON-escaped. Afterwards a real `pg_dump` of the database, the server's log and every span (and
metric) it exported over OTLP hold 0 copies of any of them, while the redaction markers show the
values did pass through."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg

from tests.support.loopback import Answer, Loopback, Seen
from treadle.client.http import TreadleClient

PROVIDER_KEY = "sk-proj-" + secrets.token_urlsafe(30)
DECLARED = 'declared"quote\\slash-' + secrets.token_hex(8)  # JSON escapes it: \" and \\
RUN_CRED = "run-cred-ümlaut-" + secrets.token_hex(8)  # JSON (ASCII) escapes it: \u00fc
TENANT_CRED = "tenant/cred+" + secrets.token_hex(8)  # URL-encoding changes it: %2F, %2B
SECRETS = {"provider key": PROVIDER_KEY, "declared": DECLARED, "run credential": RUN_CRED,
           "tenant credential": TENANT_CRED}


def forms(value: str) -> dict[str, str]:
    """Every encoding an upstream, a tool or the model may echo a secret in (made here, not by treadle)."""
    raw = value.encode()
    return {"literal": value, "base64": base64.b64encode(raw).decode(),
            "base64url": base64.urlsafe_b64encode(raw).decode().rstrip("="), "url": quote(value, safe=""),
            "hex": raw.hex(), "HEX": raw.hex().upper(), "json": json.dumps(value)[1:-1],
            "json-utf8": json.dumps(value, ensure_ascii=False)[1:-1]}


def every_form() -> dict[str, str]:
    return {f"{name}/{kind}": form for name, value in SECRETS.items() for kind, form in forms(value).items()}


def blob() -> str:
    return " | ".join(f"{k}={v}" for k, v in every_form().items())


def script(echo_url: str) -> list[dict[str, Any]]:
    doc = "# Leaks\n\n" + "\n\n".join(f"## {k}\n\n{v}" for k, v in every_form().items()) + "\n"
    return [
        {"tool": "HTTP", "input": {"method": "POST", "url": echo_url, "body": blob()}},  # input, and the result
        {"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "leak", "value": every_form()}},
        {"tool": "Channel", "input": {"op": "publish", "channel": "feed", "value": every_form()}},
        {"tool": "Document", "input": {"op": "import_md", "markdown": doc, "path": "/leaks"}},
        {"text": "final " + blob()},
    ]


def pg_dump(url: str) -> str:
    """A real pg_dump of the data: the embedded server's own binary for PG 16+, the machine's for 15."""
    import pgserver

    with psycopg.connect(url) as conn:
        [(version,)] = conn.execute("SHOW server_version_num").fetchall()
    binary = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
    if int(version) < 160000:
        binary = Path("/usr/bin/pg_dump")
    out = subprocess.run([str(binary), "--data-only", "--no-owner", "-d", url], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
    assert out.returncode == 0, out.stderr
    return out.stdout


async def test_no_form_of_any_secret_is_in_the_dump_the_log_or_the_spans(make_db: Any, start_server: Any) -> None:
    def echo(seen: Seen) -> Answer:  # an upstream that answers every secret back, in every form
        return Answer.text("you sent: " + seen.body.decode() + "\nand here they are again: " + blob())

    def collected(seen: Seen) -> Answer:
        return Answer(200, {"Content-Type": "application/x-protobuf"}, b"")

    async with Loopback({"/echo": echo, "/v1/traces": collected, "/v1/metrics": collected}) as lo:
        url = make_db("adversarial")
        agents = {"leaky": {"model": "script", "tools": ["HTTP", "Memory", "Channel", "Document"],
                            "mock": {"script": script(lo.url("/echo"))}}}
        env = {"OPENAI_API_KEY": PROVIDER_KEY, "PLAIN_SETTING": DECLARED, "TREADLE_REDACT_ENV": "PLAIN_SETTING",
               "TREADLE_CREDENTIALS_KEY": base64.b64encode(os.urandom(32)).decode(),
               "TREADLE_HTTP_ALLOWED_HOSTS": "127.0.0.1", "TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": "127.0.0.1",
               "OTEL_EXPORTER_OTLP_ENDPOINT": lo.url("").rstrip("/"), "OTEL_SERVICE_NAME": "adversarial",
               "OTEL_BSP_SCHEDULE_DELAY": "200",
               "TREADLE_LOG_LEVEL": "debug"}
        srv = await start_server(url, agents, name="adversarial",
                                 extra_config={"channels": {"feed": {"scope": "global", "semantic": "broadcast"}}},
                                 **env)
        async with httpx.AsyncClient(base_url=srv.url, timeout=10) as http:
            made = await http.post("/v1/_credentialdef", json={"op": "create", "scope": "tenant", "name": "vault",
                                                               "value": TENANT_CRED})
            assert made.status_code == 200, made.text
        async with TreadleClient(srv.url, timeout=10) as client:
            async with asyncio.timeout(60):
                frames = [f async for f in client.run_streaming(
                    "leaky", f"use {RUN_CRED} and {DECLARED}", user_id="mallory",
                    user_credentials={"vault": RUN_CRED})]
        assert frames[-1].event == "done" and frames[-1].data["stop_reason"] == "end_turn", frames[-1]
        assert len([s for s in lo.seen if s.path == "/echo"]) == 1
        # its shutdown flushes the spans and metrics still buffered: the collector (this event loop)
        # must keep answering meanwhile
        await asyncio.to_thread(srv.stop)
        exported = [s.body for s in lo.seen if s.path in ("/v1/traces", "/v1/metrics")]
    assert any(s.path == "/v1/traces" for s in lo.seen)
    dump = pg_dump(url)
    log = srv.log_tail(100_000_000, all_starts=True)
    spans = b"".join(exported)
    found = [f"{name} in {where}" for name, form in every_form().items()
             for where, text in (("pg_dump", dump), ("log", log)) if form in text]
    found += [f"{name} in the exported spans" for name, form in every_form().items() if form.encode() in spans]
    assert found == []
    for marker in ("[redacted:OPENAI_API_KEY]", "[redacted:PLAIN_SETTING]", "[redacted:credential]"):
        assert marker in dump, marker
    assert "leak" in dump and "# Leaks" not in log  # the rows are there, redacted


async def test_a_replica_that_never_saw_a_tenant_credential_still_redacts_it(
    make_db: Any, start_server: Any
) -> None:
    """The credential is created through replica A; replica B — which never created nor resolved
    it — takes the run whose prompt, Memory value and final text hold it: B redacts it too (its
    request and its steps first load the tenant's CredentialDef values into its redaction set)."""
    value = "only-on-a-" + secrets.token_hex(12)
    url = make_db("tworeplicas", migrated=True)
    agents = {"leaky": {"model": "script", "tools": ["Memory"], "mock": {"script": [
        {"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "k", "value": forms(value)}},
        {"text": f"final {value} {forms(value)['base64']}"}]}}}
    env = {"TREADLE_CREDENTIALS_KEY": base64.b64encode(os.urandom(32)).decode()}
    a = await start_server(url, agents, name="replica-a", TREADLE_WORKERS="0", **env)
    b = await start_server(url, agents, name="replica-b", **env)
    async with httpx.AsyncClient(base_url=a.url, timeout=10) as http:
        made = await http.post("/v1/_credentialdef", json={"op": "create", "scope": "tenant", "name": "k",
                                                           "value": value})
        assert made.status_code == 200, made.text
    async with TreadleClient(b.url, timeout=10) as client:
        async with asyncio.timeout(60):
            frames = [f async for f in client.run_streaming("leaky", f"remember {value}")]
    assert frames[-1].event == "done", frames[-1]
    await asyncio.to_thread(a.stop)
    await asyncio.to_thread(b.stop)
    dump = pg_dump(url)
    logs = a.log_tail(10_000_000, all_starts=True) + b.log_tail(10_000_000, all_starts=True)
    assert [k for k, f in forms(value).items() if f in dump or f in logs] == []
    assert dump.count("[redacted:credential]") >= 3  # the prompt, the Memory value, the final text
