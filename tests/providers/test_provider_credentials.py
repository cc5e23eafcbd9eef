"""A provider's key from a tenant credential (issue 42 item 3): `api_key: ${credential.NAME}` on a
provider makes each run call with its agent's, else its user's, else its tenant's CredentialDef of
that name, and a tenant without one falls back to the operator's key (api_key_env). Against a real
HTTP fake of Anthropic on loopback that records the key of every call; a vendor that echoes the key
back is stored redacted, and no table, log line or span holds a credential's value."""

from __future__ import annotations

import base64
import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.e2e import dump_all
from tests.support.fake_http import Request
from tests.support.providers import MakeHarness, of
from tests.support.spans import leaked, recording_spans
from tests.support.vendors.anthropic import FakeAnthropic
from tests.support.vendors.base import text
from treadle.config import parse_config
from treadle.governance import credentials as creds
from treadle.governance.credentials import TenantCredentials
from treadle.store.runs import NewRun

TENANT_KEY = "sk-ant-api03-tenant-" + secrets.token_hex(12)
USER_KEY = "sk-ant-api03-user-" + secrets.token_hex(12)
OPERATOR_KEY = "sk-ant-api03-operator-" + secrets.token_hex(12)


class KeyedAnthropic(FakeAnthropic):
    """Accepts the tenant's and the user's key (not the operator's); records each call's key."""

    def __init__(self) -> None:
        super().__init__(TENANT_KEY)
        self.seen: list[str] = []

    def authorized(self, req: Request) -> bool:
        key = req.headers.get("x-api-key") or ""
        self.seen.append(key)
        return key in (TENANT_KEY, USER_KEY)


@pytest.fixture(autouse=True)
def deployment_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(creds.KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    monkeypatch.setenv("TREADLE_TEST_OPERATOR_ANTHROPIC_KEY", OPERATOR_KEY)
    creds.process_sealer.cache_clear()
    yield
    creds.process_sealer.cache_clear()


async def test_a_providers_key_is_the_runs_credential_else_the_operators(
    treadle: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake = KeyedAnthropic()
    await fake.server.start()
    try:
        fake.then(text("your key is ", TENANT_KEY), text("hello user"))
        config = {"providers": {"claude": {"driver": "anthropic", "base_url": fake.url,
                                           "api_key": "${credential.anthropic}",
                                           "api_key_env": "TREADLE_TEST_OPERATOR_ANTHROPIC_KEY", "retries": 0}},
                  "agents": {"a": {"provider": "claude", "model": "claude-sonnet-4-5"}}}
        h = await treadle(config)
        store = TenantCredentials(h.rt.pool)
        await store.create("acme", "tenant", "", "anthropic", TENANT_KEY, updated_by="test")
        await store.create("acme", "user", "u1", "anthropic", USER_KEY, updated_by="test")

        async def run(tenant: str, user: str | None = None) -> tuple[Any, list[Any]]:
            segs = [{"role": "user", "content": [{"type": "trusted-text", "text": "hi"}]}]
            started, _ = await h.rt.start_run(NewRun(tenant_id=tenant, agent="a", segments=segs, user_id=user))
            await h.disp.drain()
            return await h.rt.runs.get(tenant, started.id), await h.rt.runs.events(tenant, started.id)

        with recording_spans() as spans:
            tenant_run, tenant_events = await run("acme")
            user_run, _ = await run("acme", "u1")
            other_run, _ = await run("other")
        assert fake.seen == [TENANT_KEY, USER_KEY, OPERATOR_KEY]  # the user's over the tenant's, else the operator's
        assert (tenant_run.status, user_run.status) == ("completed", "completed")
        assert of(tenant_events, "text")[0]["text"] == "your key is [redacted:credential]"  # an echo is masked
        assert other_run.status == "failed"  # the operator's key is not this vendor's
        assert "authentication_error" in str(other_run.error) or "401" in str(other_run.error), other_run.error
        assert fake.violations == []
        dump = await dump_all(h.rt.database_url)
        assert TENANT_KEY not in dump and USER_KEY not in dump
        assert not [r for r in caplog.records if TENANT_KEY in r.getMessage() or USER_KEY in r.getMessage()]
        assert leaked(spans.get_finished_spans(), [TENANT_KEY, USER_KEY]) == []
    finally:
        await fake.server.close()


async def test_a_run_without_the_credential_and_no_operator_key_fails_saying_which(treadle: MakeHarness) -> None:
    fake = KeyedAnthropic()
    await fake.server.start()
    try:
        config = {"providers": {"claude": {"driver": "anthropic", "base_url": fake.url, "api_key": "$cred:anthropic",
                                           "api_key_env": "TREADLE_TEST_UNSET_KEY_VARIABLE"}},
                  "agents": {"a": {"provider": "claude", "model": "claude-sonnet-4-5"}}}
        h = await treadle(config)
        run, _ = await h.run("a")
        assert run.status == "failed" and fake.seen == []
        assert "holds no credential 'anthropic'" in str(run.error), run.error
    finally:
        await fake.server.close()


def test_api_key_takes_a_reference_never_a_key() -> None:
    with pytest.raises(Exception, match=r"never goes in treadle\.yaml"):
        parse_config({"providers": {"c": {"driver": "anthropic", "api_key": "sk-ant-literal-0123456789"}}})
    cfg = parse_config({"providers": {"c": {"driver": "anthropic", "api_key": "${credential.team_key}"}}})
    assert cfg.providers["c"].credential == "team_key"
