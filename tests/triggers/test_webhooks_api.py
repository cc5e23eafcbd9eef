"""POST /v1/_webhooks/{name} end to end over the ASGI app and a real Postgres: GitHub, Stripe,
Linear and generic signatures, idempotency, mapping, limits, channel delivery, triage routes."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest

from tests.support.signing import generic_signature, github_headers, linear_headers, stripe_header
from tests.support.triggers import client_for
from treadle.tools.base import ToolResult

GH_SECRET = "gh-" + uuid.uuid4().hex
STRIPE_SECRET = "whsec_" + uuid.uuid4().hex
LINEAR_SECRET = "lin-" + uuid.uuid4().hex
GENERIC_SECRET = "gen-" + uuid.uuid4().hex
BEARER = "tok-" + uuid.uuid4().hex

WEBHOOKS: dict[str, Any] = {
    "github": {
        "agent": "echo",
        "auth": {"header": "X-Hub-Signature-256", "signing_secret_env": "TEST_GH_SECRET"},
        "payload_mapping": {
            "title": "$.issue.title",
            "number": "$.issue.number",
            "labels": {"path": "$.issue.labels", "required": False},
            "user_id": "$.sender.login",
        },
        "metadata": {"source": "github"},
    },
    "stripe": {
        "agent": "echo",
        "auth": {"header": "Stripe-Signature", "signing_secret_env": "TEST_STRIPE_SECRET"},
        "payload_mapping": {"type": "$.type", "amount": "$.data.object.amount"},
    },
    "linear": {
        "agent": "echo",
        "auth": {"header": "Linear-Signature", "signing_secret_env": "TEST_LINEAR_SECRET"},
    },
    "generic": {
        "agent": "echo",
        "auth": {"signing_secret_env": "TEST_GENERIC_SECRET", "delivery_id_header": "X-Request-Id"},
        "rate_limit": {"requests_per_minute": 1, "burst": 2},
        "body_size_limit_bytes": 256,
    },
    "token": {"agent": "echo", "auth": {"kind": "bearer", "bearer_token_env": "TEST_BEARER"}},
    "unset": {"agent": "echo", "auth": {"signing_secret_env": "TEST_NOT_SET_ANYWHERE"}},
    "forbidden": {"agent": "echo", "auth": {"signing_secret_env": "DATABASE_URL"}},
    "off": {"enabled": False, "agent": "echo", "auth": {"signing_secret_env": "TEST_GH_SECRET"}},
    "events": {
        "delivery": "channel",
        "channel": "events",
        "auth": {"header": "X-Hub-Signature-256", "signing_secret_env": "TEST_GH_SECRET"},
    },
}

ISSUE = {
    "action": "opened",
    "issue": {"number": 42, "title": "Build is red <script>", "labels": [{"name": "bug"}]},
    "sender": {"login": "octocat"},
}


@pytest.fixture
async def hooks(open_rt: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in {"TEST_GH_SECRET": GH_SECRET, "TEST_STRIPE_SECRET": STRIPE_SECRET,
                        "TEST_LINEAR_SECRET": LINEAR_SECRET, "TEST_GENERIC_SECRET": GENERIC_SECRET,
                        "TEST_BEARER": BEARER, "DATABASE_URL": "postgresql://nope"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TEST_NOT_SET_ANYWHERE", raising=False)
    rt, disp = await open_rt({"webhooks": WEBHOOKS})
    await rt.triggers.sync_static()
    async with client_for(rt) as client:
        yield rt, disp, client


def body_of(payload: Any) -> bytes:
    return json.dumps(payload).encode()


async def run_count(rt: Any) -> int:
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM runs")
        return int((await cur.fetchone())["n"])


async def test_github_delivery_spawns_a_run_with_untrusted_input(hooks: Any) -> None:
    rt, disp, c = hooks
    body = body_of(ISSUE)
    headers = github_headers(GH_SECRET, body)
    r = await c.post("/v1/_webhooks/github", content=body, headers=headers)
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["webhook_name"] == "github" and out["delivery_id"] == headers["X-GitHub-Delivery"]
    run = await rt.runs.get("default", out["run_id"])
    assert run.agent == "echo" and run.user_id == "octocat"
    assert run.metadata["source"] == "github" and run.metadata["delivery_id"] == out["delivery_id"]
    [first] = await rt.runs.events("default", run.id, 0, 1)
    [segment] = first.payload["segments"]
    trusted, *blocks = segment["content"]
    assert trusted["type"] == "trusted-text" and "github" in trusted["text"]
    assert all(b["type"] == "untrusted-block" for b in blocks)
    assert [b["text"] for b in blocks] == [
        'labels: [{"name": "bug"}]', "number: 42", "title: Build is red <script>"
    ]  # by target name
    await disp.drain()
    events = await rt.runs.events("default", run.id)
    [text] = [e.payload["text"] for e in events if e.type == "text"]
    assert "&lt;script>" in text  # the echo model saw the block fenced as untrusted

    # redelivery: 200 duplicate, the original run, nothing new
    n = await run_count(rt)
    again = await c.post("/v1/_webhooks/github", content=body, headers=headers)
    assert again.status_code == 200 and again.json() == {**out, "duplicate": True}
    assert await run_count(rt) == n
    # the tenant form of the route reaches the same webhook
    other = github_headers(GH_SECRET, body)
    r = await c.post("/v1/_webhooks/default/github", content=body, headers=other)
    assert r.status_code == 202 and r.json()["run_id"] != out["run_id"]


@pytest.mark.parametrize(
    "tamper",
    ["forged", "truncated", "re-encoded", "missing", "other-secret", "bad-prefix"],
)
async def test_bad_github_signatures_are_rejected_before_any_parse(hooks: Any, tamper: str) -> None:
    rt, _, c = hooks
    body = body_of(ISSUE)
    headers = github_headers(GH_SECRET, body)
    sent = body
    if tamper == "forged":
        headers["X-Hub-Signature-256"] = "sha256=" + "0" * 64
    elif tamper == "truncated":
        sent = body[:-5]
    elif tamper == "re-encoded":
        sent = json.dumps(ISSUE, indent=2).encode()  # same JSON, different bytes
    elif tamper == "missing":
        del headers["X-Hub-Signature-256"]
    elif tamper == "other-secret":
        headers = github_headers("not-the-secret", body)
    else:
        headers["X-Hub-Signature-256"] = headers["X-Hub-Signature-256"].removeprefix("sha256=")
    n = await run_count(rt)
    r = await c.post("/v1/_webhooks/github", content=sent, headers=headers)
    assert r.status_code == 401 and r.json()["code"] == "invalid_signature", r.text
    assert await run_count(rt) == n
    garbage = await c.post("/v1/_webhooks/github", content=b"\xff{not json", headers=headers)
    assert garbage.status_code == 401  # the signature is checked before the body is parsed
    recent = (await c.get("/v1/_webhooks/github/recent-deliveries")).json()["deliveries"]
    assert recent[0]["verdict"] == "rejected_sig" and "delivery_id" in recent[0]


async def test_stripe_signatures_tolerance_and_event_id_dedup(hooks: Any) -> None:
    _, _, c = hooks
    event = {"id": "evt_" + uuid.uuid4().hex[:24], "type": "charge.succeeded",
             "data": {"object": {"amount": 1999}}}
    body = body_of(event)
    header = stripe_header(STRIPE_SECRET, body)
    r = await c.post("/v1/_webhooks/stripe", content=body, headers={"Stripe-Signature": header})
    assert r.status_code == 202, r.text
    assert r.json()["delivery_id"] == event["id"]
    fresh = stripe_header(STRIPE_SECRET, body)  # Stripe retries with a new timestamp
    r2 = await c.post("/v1/_webhooks/stripe", content=body, headers={"Stripe-Signature": fresh})
    assert r2.status_code == 200 and r2.json()["run_id"] == r.json()["run_id"] and r2.json()["duplicate"]

    stale = stripe_header(STRIPE_SECRET, body, int(time.time()) - 301)
    r3 = await c.post("/v1/_webhooks/stripe", content=body, headers={"Stripe-Signature": stale})
    assert r3.status_code == 401 and "tolerance" in r3.json()["error"]
    recent = (await c.get("/v1/_webhooks/stripe/recent-deliveries?limit=1")).json()["deliveries"]
    assert [d["verdict"] for d in recent] == ["rejected_stale"]
    future = stripe_header(STRIPE_SECRET, body, int(time.time()) + 3600)
    assert (await c.post("/v1/_webhooks/stripe", content=body, headers={"Stripe-Signature": future})).status_code == 401


async def test_linear_generic_and_bearer(hooks: Any) -> None:
    _, _, c = hooks
    body = body_of({"action": "create", "data": {"id": "ISS-1"}})
    r = await c.post("/v1/_webhooks/linear", content=body, headers=linear_headers(LINEAR_SECRET, body, "lin-1"))
    assert r.status_code == 202 and r.json()["delivery_id"] == "lin-1"
    bad = linear_headers(LINEAR_SECRET, body + b" ", "lin-2")
    assert (await c.post("/v1/_webhooks/linear", content=body, headers=bad)).status_code == 401

    sig = generic_signature(GENERIC_SECRET, body)
    for i, value in enumerate((sig, f"sha256={sig}")):
        r = await c.post("/v1/_webhooks/generic", content=body,
                         headers={"X-Treadle-Signature": value, "X-Request-Id": f"req-{i}"})
        assert r.status_code == 202, r.text
    r = await c.post("/v1/_webhooks/generic", content=body, headers={"X-Request-Id": "req-0",
                                                                      "X-Treadle-Signature": sig})
    assert r.status_code == 200 and r.json()["duplicate"]
    # without a delivery id header the body's hash is the id
    r = await c.post("/v1/_webhooks/linear", content=b"{}", headers={"Linear-Signature": generic_signature(
        LINEAR_SECRET, b"{}")})
    assert r.json()["delivery_id"].startswith("sha256:")

    assert (await c.post("/v1/_webhooks/token", content=body,
                         headers={"Authorization": f"Bearer {BEARER}"})).status_code == 202
    r = await c.post("/v1/_webhooks/token", content=body, headers={"Authorization": "Bearer wrong"})
    assert (r.status_code, r.json()["code"]) == (401, "invalid_signature")


async def test_limits_and_errors_are_code_error_json(hooks: Any) -> None:
    _, _, c = hooks
    small = b'{"a":1}'
    sig = generic_signature(GENERIC_SECRET, small)

    big = b"x" * 300
    r = await c.post("/v1/_webhooks/generic", content=big,
                     headers={"X-Treadle-Signature": generic_signature(GENERIC_SECRET, big)})
    assert (r.status_code, r.json()["code"]) == (413, "body_too_large")

    r = await c.post("/v1/_webhooks/nope", content=small, headers={"X-Treadle-Signature": sig})
    assert (r.status_code, r.json()["code"]) == (404, "unknown_webhook")
    r = await c.post("/v1/_webhooks/off", content=small, headers={"X-Treadle-Signature": sig})
    assert (r.status_code, r.json()["code"]) == (404, "unknown_webhook")
    r = await c.post("/v1/_webhooks/unset", content=small, headers={"X-Treadle-Signature": sig})
    assert (r.status_code, r.json()["code"]) == (503, "secret_unresolvable")
    assert "TEST_NOT_SET_ANYWHERE" not in r.text  # the variable's name is for the operator only
    r = await c.post("/v1/_webhooks/forbidden", content=small, headers={"X-Treadle-Signature": sig})
    assert (r.status_code, r.json()["code"]) == (503, "secret_unresolvable")
    assert "postgresql" not in r.text and "DATABASE_URL" not in r.text
    triage = (await c.get("/v1/_webhooks/forbidden/recent-deliveries")).json()["deliveries"]
    assert triage[0]["verdict"] == "unresolvable_secret" and "DATABASE_URL" in triage[0]["error"]

    # burst 2, then 429 with Retry-After (1 request/minute refills slowly)
    codes = []
    for i in range(3):
        r = await c.post("/v1/_webhooks/generic", content=small,
                         headers={"X-Treadle-Signature": sig, "X-Request-Id": f"rl-{i}"})
        codes.append(r.status_code)
    assert codes == [202, 202, 429]
    assert r.json()["code"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
    dup = await c.post("/v1/_webhooks/generic", content=small, headers={"X-Treadle-Signature": sig,
                                                                        "X-Request-Id": "rl-0"})
    assert dup.status_code == 200  # a redelivery needs no token


async def test_mapping_failures_start_nothing(hooks: Any) -> None:
    rt, _, c = hooks
    n = await run_count(rt)
    body = body_of({"issue": {"number": 1}, "sender": {"login": "octocat"}})  # no title
    r = await c.post("/v1/_webhooks/github", content=body, headers=github_headers(GH_SECRET, body))
    assert (r.status_code, r.json()["code"]) == (422, "mapping_failed") and "title" in r.json()["error"]
    body = b"not json"
    r = await c.post("/v1/_webhooks/github", content=body, headers=github_headers(GH_SECRET, body))
    assert (r.status_code, r.json()["code"]) == (400, "bad_payload")
    body = body_of({**ISSUE, "sender": {"login": "not an ident!"}})
    r = await c.post("/v1/_webhooks/github", content=body, headers=github_headers(GH_SECRET, body))
    assert (r.status_code, r.json()["code"]) == (422, "mapping_failed")
    assert await run_count(rt) == n
    verdicts = [d["verdict"] for d in (await c.get("/v1/_webhooks/github/recent-deliveries")).json()["deliveries"]]
    assert verdicts[:3] == ["rejected_mapping"] * 3


async def test_concurrent_identical_deliveries_start_one_run(hooks: Any) -> None:
    rt, _, c = hooks
    body = body_of(ISSUE)
    headers = github_headers(GH_SECRET, body)
    n = await run_count(rt)
    replies = await asyncio.gather(*(c.post("/v1/_webhooks/github", content=body, headers=headers)
                                     for _ in range(8)))  # within the burst of 10
    assert sorted(r.status_code for r in replies) == [200] * 7 + [202]
    assert len({r.json()["run_id"] for r in replies}) == 1
    assert await run_count(rt) == n + 1


async def test_dry_run_has_no_effects(hooks: Any) -> None:
    rt, _, c = hooks
    body = body_of(ISSUE)
    headers = github_headers(GH_SECRET, body)
    n = await run_count(rt)
    r = await c.post("/v1/_webhooks/github/test", content=body, headers=headers)
    out = r.json()
    assert r.status_code == 200 and out["ok"] and out["signature"] == {"checked": True, "valid": True}
    assert out["agent"] == "echo" and out["user_id"] == "octocat" and out["duplicate_of"] is None
    assert out["input"][0]["content"][3]["text"].startswith("title: ")
    unsigned = await c.post("/v1/_webhooks/github/test", content=b'{"issue": {}}')
    assert unsigned.json()["signature"]["checked"] is False and unsigned.json()["code"] == "mapping_failed"
    assert await run_count(rt) == n
    real = await c.post("/v1/_webhooks/github", content=body, headers=headers)
    assert real.status_code == 202  # the dry run took no claim and no rate token


async def test_webhookdef_ops_over_http(hooks: Any) -> None:
    _, _, c = hooks
    overlay = {"agent": "echo", "auth": {"header": "Linear-Signature", "signing_secret_env": "TEST_LINEAR_SECRET"},
               "payload_mapping": {"id": "$.data.id"}}
    r = await c.post("/v1/_webhookdef", json={"op": "create", "name": "lin2", "overlay": overlay})
    assert r.status_code == 200, r.text
    created = r.json()
    assert created["version"] == 1 and created["url_path"] == "/v1/_webhooks/lin2"
    assert "secret" not in json.dumps(created["body"]).replace("signing_secret_env", "")
    r = await c.post("/v1/_webhookdef", json={"op": "fork", "name": "lin2",
                                              "overlay": {"payload_mapping": {"id": "$..id"}}})
    assert (r.status_code, r.json()["code"]) == (422, "tool_refused") and "strict path" in r.json()["error"]
    r = await c.post("/v1/_webhookdef", json={"op": "fork", "name": "lin2", "overlay": {"metadata": {"v": 2}}})
    assert r.json()["version"] == 2 and r.json()["parent_def_id"] == created["def_id"]
    body = body_of({"data": {"id": "X"}})
    r = await c.post("/v1/_webhooks/lin2", content=body, headers=linear_headers(LINEAR_SECRET, body))
    assert r.status_code == 202
    assert "lin2" in (await c.get("/v1/_webhookdef/names")).json()["names"]
    r = await c.post("/v1/_webhookdef", json={"op": "retire", "name": "lin2"})
    assert r.json()["status"] == "retired"
    r = await c.post("/v1/_webhooks/lin2", content=body, headers=linear_headers(LINEAR_SECRET, body))
    assert r.status_code == 404
    bad = {"agent": "echo", "auth": {"kind": "hmac"}}
    r = await c.post("/v1/_webhookdef", json={"op": "create", "name": "x", "overlay": bad})
    assert r.status_code == 422 and "signing_secret_env" in r.json()["error"]


async def test_channel_delivery_wakes_a_parked_run(hooks: Any) -> None:
    rt, disp, c = hooks
    from treadle.store.runs import NewRun

    segs = [{"role": "user", "content": [{"type": "trusted-text", "text": "wait"}]}]
    consumer, _ = await rt.start_run(NewRun(tenant_id="default", agent="listener", segments=segs))
    await disp.drain()
    assert (await rt.runs.get("default", consumer.id)).status == "waiting"
    body = body_of({"ping": 1})
    r = await c.post("/v1/_webhooks/events", content=body, headers=github_headers(GH_SECRET, body))
    assert r.status_code == 202, r.text
    assert r.json()["channel"] == "events" and r.json()["woken"] == 1
    await disp.drain()
    assert (await rt.runs.get("default", consumer.id)).status == "completed"
    again = await c.post("/v1/_webhooks/events", content=body,
                         headers={**github_headers(GH_SECRET, body), "X-GitHub-Delivery": r.json()["delivery_id"]})
    assert again.status_code == 200 and again.json()["duplicate"]


async def test_channel_delivery_without_channels_is_503(hooks: Any) -> None:
    from treadle.triggers.hooks import ScopedPublisher

    rt, _, c = hooks
    rt.triggers.webhooks.publisher = None  # a runtime without a channel publisher
    body = body_of({"ping": 1})
    headers = github_headers(GH_SECRET, body)
    r = await c.post("/v1/_webhooks/events", content=body, headers=headers)
    assert (r.status_code, r.json()["code"]) == (503, "channels_unavailable")
    rt.triggers.webhooks.publisher = ScopedPublisher(rt.channels, rt)
    # the failed delivery left no claim: the sender's retry is processed afresh
    deliveries = (await c.get("/v1/_webhooks/events/recent-deliveries")).json()["deliveries"]
    assert deliveries[0]["verdict"] == "rejected_delivery"


async def test_on_complete_hooks_follow_a_webhook_run(open_rt: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_GH_SECRET", GH_SECRET)
    spec = {**WEBHOOKS["github"], "on_complete": [{"kind": "memory.set", "scope": "agent", "key": "last-issue"}]}
    rt, disp = await open_rt({"webhooks": {"gh": spec}})
    await rt.triggers.sync_static()
    body = body_of(ISSUE)
    async with client_for(rt) as c:
        r = await c.post("/v1/_webhooks/gh", content=body, headers=github_headers(GH_SECRET, body))
        assert r.status_code == 202
        await disp.drain()
        assert await rt.triggers.hooks.run_once() == 1
        found, value = await rt.memory.get("default", "agent", "echo", "last-issue")
        assert found and value["webhook_name"] == "gh" and value["run_id"] == r.json()["run_id"]
        recent = (await c.get("/v1/_webhooks/gh/recent-deliveries")).json()["deliveries"]
        assert recent[0]["hooks_status"] == "done"


async def test_webhookdef_tool_is_default_deny(open_rt: Any) -> None:
    from tests.support.triggers import AGENTS
    from treadle.builtins.webhookdef import WebhookDefTool
    from treadle.errors import ToolError
    from treadle.tools.base import ToolContext

    agents = {**AGENTS, "plain": {"model": "echo", "tools": ["WebhookDef"]},
              "selfish": {"model": "echo", "tools": ["WebhookDef"], "webhook_def_scopes": ["self"]}}
    rt, _ = await open_rt({"agents": agents})

    def ctx(agent: str) -> ToolContext:
        return rt.tool_context("default", "r_x", agent, tool_use_id="t")  # type: ignore[no-any-return]

    tool = WebhookDefTool()
    auth = {"signing_secret_env": "SOME_SECRET"}
    with pytest.raises(ToolError, match="default-deny"):
        await tool.invoke(ctx("plain"), {"op": "create", "name": "w", "overlay": {"agent": "plain", "auth": auth}})
    with pytest.raises(ToolError, match="without an agent"):
        await tool.invoke(ctx("selfish"), {"op": "create", "name": "w", "overlay": {
            "delivery": "channel", "channel": "events", "auth": auth}})
    ok = await tool.invoke(ctx("selfish"), {"op": "create", "name": "w", "overlay": {"agent": "selfish", "auth": auth}})
    assert isinstance(ok, ToolResult) and not ok.is_error
    assert json.loads(ok.content)["url_path"] == "/v1/_webhooks/w"
