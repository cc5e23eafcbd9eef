"""Secrets never land (issue 16, 5): a served treadle whose scripted agent echoes a provider key,
an operator-declared secret (TREADLE_REDACT_ENV) and a secret-named variable into its prompt, tool
inputs, Memory values, Channel payloads and final text — literally, base64-encoded, URL-encoded
and without the vendor prefix. Afterwards a dump of every table and the server's log hold none of
those forms; the redaction markers show the values did pass through."""

from __future__ import annotations

import asyncio
import base64
import secrets
from typing import Any
from urllib.parse import quote

from tests.support.e2e import dump_all
from treadle.client.http import TreadleClient

PROVIDER_KEY = "sk-proj-" + secrets.token_urlsafe(30)
PASSWORD = "pw-" + secrets.token_hex(12)
DECLARED = "declared-" + secrets.token_hex(10)  # its variable's name marks nothing: declared by the operator
ENV = {"OPENAI_API_KEY": PROVIDER_KEY, "BILLING_PASSWORD": PASSWORD, "PLAIN_SETTING": DECLARED,
       "TREADLE_REDACT_ENV": "PLAIN_SETTING"}


def forms(value: str) -> dict[str, str]:
    """The forms an upstream may echo a secret in (built here, not by treadle's own code)."""
    out = {"literal": value, "url": quote(value, safe=""), "base64": base64.b64encode(value.encode()).decode(),
           "base64url": base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")}
    if value.startswith("sk-proj-"):
        out["unprefixed"] = value[len("sk-proj-"):]
    return out


SCRIPT: list[dict[str, Any]] = [
    {"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "k1",
                                 "value": {"echo": PROVIDER_KEY, "b64": forms(PASSWORD)["base64"]}}},
    {"tool": "Channel", "input": {"op": "publish", "channel": "feed",
                                  "value": {"url": forms(DECLARED)["url"], "key": forms(PROVIDER_KEY)["unprefixed"]}}},
    {"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "k2",
                                 "value": "header " + forms(PROVIDER_KEY)["base64url"]}},
    {"text": f"final {PROVIDER_KEY} {PASSWORD} {DECLARED}"},
]
AGENTS = {"leaky": {"model": "script", "tools": ["Memory", "Channel"], "mock": {"script": SCRIPT}}}
EXTRA = {"channels": {"feed": {"scope": "global", "semantic": "broadcast"}}}


async def test_no_secret_form_reaches_the_database_or_the_log(make_db: Any, start_server: Any) -> None:
    url = make_db("secrets")
    srv = await start_server(url, AGENTS, name="leaky", extra_config=EXTRA, **ENV)
    async with TreadleClient(srv.url, timeout=10) as client:
        async with asyncio.timeout(30):
            frames = [f async for f in client.run_streaming("leaky", f"use {PASSWORD} and {DECLARED}")]
    assert frames[-1].event == "done" and frames[-1].data["stop_reason"] == "end_turn", frames[-1]
    srv.stop()
    dump = await dump_all(url)
    log = srv.log_tail(10_000_000, all_starts=True)
    found = [f"{name}/{kind} in {where}"
             for name, value in (("provider key", PROVIDER_KEY), ("password", PASSWORD), ("declared", DECLARED))
             for kind, form in forms(value).items()
             for where, text in (("dump", dump), ("log", log)) if form in text]
    assert found == []
    for marker in ("[redacted:OPENAI_API_KEY]", "[redacted:BILLING_PASSWORD]", "[redacted:PLAIN_SETTING]"):
        assert marker in dump, marker
