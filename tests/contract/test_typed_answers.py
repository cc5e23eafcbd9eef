"""Every operation's real answers, on real data, match the served spec: a scenario creates a run,
a channel, memory, a hook, defs, a schedule and a webhook (which random requests rarely reach),
calls every route on them, and checks each answer's status is documented for the operation and
its body validates against the documented schema (schemathesis' validator)."""

from __future__ import annotations

import datetime
import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis

from tests.support.contract import ServedInThread
from treadle.testing import ACCEPT_JSON
from treadle.wire import DefList, DefView

SECRET_ENV = "TREADLE_TEST_CONTRACT_WEBHOOK_TOKEN"


class Checked:
    """An HTTP client that checks every answer against the served spec."""

    def __init__(self, served: ServedInThread) -> None:
        self.http = httpx.Client(base_url=served.url, headers={**ACCEPT_JSON, **served.auth}, timeout=30.0)
        self.spec = self.http.get("/openapi.json").json()
        self.schema = schemathesis.openapi.from_dict(self.spec)
        self.seen: set[tuple[str, str]] = set()

    def call(self, method: str, template: str, status: int | tuple[int, ...], *,
             path: dict[str, str] | None = None, **kwargs: Any) -> Any:
        url = template.format(**(path or {}))
        resp = self.http.request(method, url, **kwargs)
        documented = self.spec["paths"][template][method.lower()]["responses"]
        assert str(resp.status_code) in documented, f"{method} {url}: {resp.status_code} undocumented: {resp.text}"
        assert resp.status_code in (status if isinstance(status, tuple) else (status,)), \
            f"{method} {url}: {resp.status_code} {resp.text}"
        self.schema[template][method].validate_response(resp)
        self.seen.add((method.lower(), template))
        if resp.headers.get("content-type", "").startswith("application/json"):
            return resp.json()
        return resp.text


@pytest.fixture
def api(served_api: ServedInThread) -> Iterator[Checked]:
    checked = Checked(served_api)
    yield checked
    checked.http.close()


def wait_finished(api: Checked, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = api.call("GET", "/v1/runs/{run_id}", 200, path={"run_id": run_id})
        if run["status"] in ("completed", "failed", "cancelled") or time.monotonic() > deadline:
            return run
        with api.http.stream("GET", f"/v1/runs/{run_id}/stream", params={"from_seq": run["last_seq"]}) as s:
            for _ in s.iter_lines():  # the stream ends when the run does
                break


def runs_and_agents(api: Checked) -> None:
    user = "u" + secrets.token_hex(4)
    created = api.call("POST", "/v1/runs", 202, json={"agent": "helper", "prompt": "hi", "user_id": user,
                                                         "metadata": {"k": 1}})
    run_id, agent_id, session_id = created["run_id"], created["agent_id"], created["session_id"]
    assert wait_finished(api, run_id)["status"] == "completed"
    api.call("GET", "/v1/runs", 200, params={"user_id": user})
    api.call("GET", "/v1/runs/{run_id}/events", 200, path={"run_id": run_id})
    forked = api.call("POST", "/v1/runs/{run_id}/fork", 202, path={"run_id": run_id}, json={"at_seq": 1})
    assert wait_finished(api, forked["run_id"])["status"] == "completed"
    api.call("POST", "/v1/runs/{run_id}/fork", 400, path={"run_id": run_id}, json={"at_seq": 0})
    api.call("POST", "/v1/runs/{run_id}/fork", 404, path={"run_id": "r_nope"}, json={"at_seq": 1})
    replay = api.call("POST", "/v1/runs/{run_id}/fork", 202, path={"run_id": run_id},
                      json={"at_seq": 1, "mode": "replay"})
    assert replay["mode"] == "replay" and wait_finished(api, replay["run_id"])["status"] == "completed"
    api.call("GET", "/v1/runs/{run_id}/interrupts", 200, path={"run_id": run_id})
    api.call("GET", "/v1/users/{user_id}/interrupts", 200, path={"user_id": user}, params={"status": "all"})
    api.call("GET", "/v1/interrupts", 200, params={"status": "all"})
    api.call("POST", "/v1/runs/{run_id}/interrupts/{interrupt_id}/resolve", 404,
             path={"run_id": run_id, "interrupt_id": "i_nope"}, json={"answer": "yes"})
    api.call("GET", "/v1/agents/{agent_id}", 200, path={"agent_id": agent_id})
    api.call("GET", "/v1/users/{user_id}/agents", 200, path={"user_id": user})
    api.call("GET", "/v1/sessions/{session_id}/transcript", 200, path={"session_id": session_id})
    api.call("GET", "/v1/sessions/{session_id}", 200, path={"session_id": session_id})
    api.call("PATCH", "/v1/sessions/{session_id}", 200, path={"session_id": session_id}, json={"title": "t"})
    api.call("GET", "/v1/sessions", 200, params={"user_id": user})
    api.call("GET", "/v1/users/{user_id}/sessions", 200, path={"user_id": user})
    continued = api.call("POST", "/v1/sessions/{session_id}/messages", 202, path={"session_id": session_id},
                         json={"prompt": "again"})
    assert continued["session_id"] == session_id
    assert wait_finished(api, continued["run_id"])["status"] == "completed"
    api.call("POST", "/v1/sessions/{session_id}/messages", 404, path={"session_id": "s_nope"}, json={"prompt": "x"})
    replayed = api.call("POST", "/v1/sessions/{session_id}/replay", 200, path={"session_id": session_id},
                        json={"agent": "helper"})
    assert replayed["events_copied"] >= 4 and replayed["new_session_id"] != session_id
    api.call("POST", "/v1/sessions/{session_id}/replay", 404, path={"session_id": "s_nope"}, json={"agent": "helper"})
    api.call("POST", "/v1/sessions/{session_id}/replay", 409, path={"session_id": session_id},
             json={"agent": "nobody"})
    compacted = api.call("POST", "/v1/runs/{run_id}/compact", 200, path={"run_id": run_id}, json={})
    assert compacted["applied"] in ("noop", "marker")
    api.call("POST", "/v1/runs/{run_id}/compact", 404, path={"run_id": "r_nope"}, json={})
    chats = api.call("POST", "/v1/_history", 200, json={"op": "list", "scope": "tenant"})
    assert session_id in [c["id"] for c in chats["chats"]]
    api.call("POST", "/v1/_history", 404, json={"op": "get", "session_id": "s_nope"})
    api.call("POST", "/v1/runs/{run_id}/cancel", 200, path={"run_id": run_id}, json={"scope": "run"})
    api.call("POST", "/v1/agents/{agent_id}/cancel", 200, path={"agent_id": agent_id})
    api.call("POST", "/v1/runs/{run_id}/input", 409, path={"run_id": run_id}, json={"text": "more"})
    api.call("POST", "/v1/runs/{run_id}/tool_results", 404, path={"run_id": run_id},
             json={"tool_use_id": "t1", "content": "x"})
    api.call("GET", "/v1/runs/{run_id}", 404, path={"run_id": "r_nope"})
    interactive = api.call("POST", "/v1/runs", 202, json={"agent": "helper", "prompt": "hi", "interactive": True})
    api.call("POST", "/v1/runs/{run_id}/cancel", 200, path={"run_id": interactive["run_id"]})  # its turn
    api.call("POST", "/v1/runs/{run_id}/cancel", 200, path={"run_id": interactive["run_id"]}, json={"scope": "run"})
    batch = api.call("POST", "/v1/runs:batch", 200, json={"spawns": [{"agent": "helper", "prompt": "a"},
                                                                     {"agent": "nobody", "prompt": "b"}],
                                                          "timeout_ms": 20_000})
    assert [r["status"] for r in batch["results"]] == ["completed", "failed"]
    api.call("POST", "/v1/runs", 400, json={"agent": "nobody", "prompt": "x"})
    err = api.call("POST", "/v1/runs", 422, json={"agent": "helper"})
    assert err["code"] == "validation_error" and err["details"]


def channels_memory_hooks(api: Checked, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "c-" + secrets.token_hex(4)
    api.call("POST", "/v1/_channels", 201, json={"name": name})
    api.call("GET", "/v1/_channels", 200)
    api.call("POST", "/v1/_channels/{name}/publish", 202, path={"name": name}, json={"value": {"n": 1}})
    api.call("GET", "/v1/_channels/{name}/peek", 200, path={"name": name})
    api.call("POST", "/v1/_channels/_await", 200, json={"channels": [name]})
    got = api.call("POST", "/v1/_channels/{name}/subscribe", 200, path={"name": name}, json={})
    api.call("POST", "/v1/_channels/{name}/ack", 200, path={"name": name}, json={"cursor": got["next_cursor"]})
    api.call("PATCH", "/v1/_channels/{name}", 200, path={"name": name}, json={"description": "patched"})
    api.call("POST", "/v1/_channels/_broadcast", 200, json={"channels": [name], "payload": {"n": 2}})
    api.call("POST", "/v1/_channels/{name}/purge", 200, path={"name": name})
    user_ch = f"{name}-u"
    api.call("POST", "/v1/_channels", 201, json={"name": user_ch, "scope": "user"})
    on_user = {"user_id": "contract-u", "name": user_ch}
    api.call("POST", "/v1/users/{user_id}/channels/{name}/publish", 202, path=on_user, json={"payload": 1})
    api.call("GET", "/v1/users/{user_id}/channels/{name}/peek", 200, path=on_user)
    got = api.call("POST", "/v1/users/{user_id}/channels/{name}/subscribe", 200, path=on_user, json={})
    api.call("POST", "/v1/users/{user_id}/channels/{name}/ack", 200, path=on_user, json={"cursor": got["next_cursor"]})
    api.call("DELETE", "/v1/_channels/{name}", 200, path={"name": user_ch})
    api.call("DELETE", "/v1/_channels/{name}", 200, path={"name": name})
    api.call("DELETE", "/v1/_channels/{name}", 404, path={"name": name})

    where = {"scope": "user", "scope_id": "u" + secrets.token_hex(4)}
    api.call("GET", "/v1/_memory/scopes", 200)
    api.call("PUT", "/v1/_memory/scopes/{scope}/{scope_id}/keys/{key}", 200, path={**where, "key": "a/b"},
             json={"value": [1, "two"], "ttl_seconds": 60})
    api.call("GET", "/v1/_memory/scopes/{scope}/{scope_id}/keys/{key}", 200, path={**where, "key": "a/b"})
    api.call("GET", "/v1/_memory/scopes/{scope}/{scope_id}/keys", 200, path=where)
    # 501 where this Postgres has no pgvector (the search needs it)
    api.call("POST", "/v1/_memory/search", (200, 501), json={**where, "query": "two"})
    api.call("DELETE", "/v1/_memory/scopes/{scope}/{scope_id}/keys/{key}", 200, path={**where, "key": "a/b"})
    # loomcycle's embedding maintenance (503 without pgvector or an embedder)
    api.call("GET", "/v1/_memory/embed_stats", (200, 503), params={"scope": "user"})
    for sweep in ("/v1/_memory/reembed", "/v1/_memory/backfill_embeddings"):
        api.call("POST", sweep, 400, params={"scope": "nope", "tenant": "default"})
        api.call("POST", sweep, (200, 503), params={**where, "tenant": "default"})  # a preview
    api.call("GET", "/v1/_memory/scopes/{scope}/{scope_id}/keys/{key}", 404, path={**where, "key": "a/b"})

    monkeypatch.setenv("TREADLE_HOOKS_SECRET", "contract-hook-secret")
    hook = api.call("POST", "/v1/hooks", 201, json={"owner": "contract", "name": "h" + secrets.token_hex(3),
                                                    "phase": "pre", "callback_url": "http://127.0.0.1:9/hook"})
    api.call("GET", "/v1/hooks", 200)
    api.call("DELETE", "/v1/hooks/{hook_id}", 204, path={"hook_id": hook["id"]})
    api.call("DELETE", "/v1/hooks/{hook_id}", 404, path={"hook_id": hook["id"]})


def defs_triggers_and_admin(api: Checked, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = secrets.token_hex(3)
    agent = api.call("POST", "/v1/_agentdef", 200, json={"op": "create", "name": f"ad-{tag}",
                                                          "overlay": {"model": "echo", "system_prompt": "be brief"}})
    got = api.call("POST", "/v1/_agentdef", 200, json={"op": "get", "def_id": agent["def_id"]})
    listed = api.call("POST", "/v1/_agentdef", 200, json={"op": "list"})
    # the op answers are free objects in the spec; treadle.wire types the def views for clients
    assert DefView.model_validate(agent).def_id == DefView.model_validate(got).def_id == agent["def_id"]
    assert agent["def_id"] in [d.def_id for d in DefList.model_validate(listed).defs]
    api.call("POST", "/v1/_agentdef", 422, json={"op": "bogus"})
    api.call("POST", "/v1/_agentdef", 400, content=b"[1, 2]", headers={"content-type": "application/json"})
    api.call("GET", "/v1/_agentdef/names", 200)
    api.call("POST", "/v1/_skilldef", 200, json={"op": "create", "name": f"sk-{tag}", "overlay": {"body": "do it"}})
    api.call("GET", "/v1/_skilldef/names", 200)
    api.call("POST", "/v1/_teamdef", 200, json={"op": "create", "name": f"tm-{tag}", "overlay": {
        "entry": "a", "states": [{"state": "a", "handler": {"kind": "agent", "agent": "helper"}},
                                 {"state": "b", "handler": {"kind": "terminal"}}],
        "transitions": [{"from": "a", "to": "b", "on": "success"}]}})
    api.call("POST", "/v1/_teamdef", 422, json={"op": "create", "name": f"tm2-{tag}", "overlay": {"entry": "a"}})
    api.call("GET", "/v1/_teamdef/names", 200)
    api.call("GET", "/v1/_volumedef/names", 200)
    api.call("GET", "/v1/_mcpserverdef/names", 200)
    run = api.call("POST", "/v1/runs", 202, json={"agent": "helper", "prompt": "score me"})
    wait_finished(api, run["run_id"])
    api.call("POST", "/v1/_evaluation", 200, json={"op": "submit", "run_id": run["run_id"], "score": 0.5})
    api.call("POST", "/v1/_evaluation", 200, json={"op": "list_for_run", "run_id": run["run_id"]})

    sched = f"sc-{tag}"
    api.call("POST", "/v1/_scheduledef", 200, json={"op": "create", "name": sched, "overlay": {
        "agent": "helper", "schedule": "0 3 * * *", "prompt": "nightly"}})
    api.call("GET", "/v1/_scheduledef/names", 200)
    api.call("GET", "/v1/_schedules/list-all", 200)
    api.call("GET", "/v1/_schedules/{ident}/state", 200, path={"ident": sched})
    api.call("POST", "/v1/_schedules/{ident}/pause", 200, path={"ident": sched})
    api.call("POST", "/v1/_schedules/{ident}/resume", 200, path={"ident": sched})
    api.call("POST", "/v1/_schedules/{ident}/run-now", 200, path={"ident": sched})
    api.call("GET", "/v1/_schedules/{ident}/state", 404, path={"ident": "sc-none"})

    monkeypatch.setenv(SECRET_ENV, "contract-webhook-token")
    hook = f"wh-{tag}"
    api.call("POST", "/v1/_webhookdef", 200, json={"op": "create", "name": hook, "overlay": {
        "agent": "helper", "auth": {"kind": "bearer", "bearer_token_env": SECRET_ENV}}})
    api.call("GET", "/v1/_webhookdef/names", 200)
    api.call("POST", "/v1/_webhooks/{name}", 202, path={"name": hook}, content=b'{"id": 1}',
             headers={"Authorization": "Bearer contract-webhook-token", "content-type": "application/json"})
    api.call("POST", "/v1/_webhooks/{name}", 401, path={"name": hook}, content=b"{}",
             headers={"Authorization": "Bearer wrong", "content-type": "application/json"})
    api.call("POST", "/v1/_webhooks/{tenant}/{name}", 404, path={"tenant": "default", "name": "wh-none"},
             content=b"{}")
    api.call("GET", "/v1/_webhooks/{name}/recent-deliveries", 200, path={"name": hook})
    api.call("POST", "/v1/_webhooks/{name}/test", 200, path={"name": hook}, content=b'{"id": 2}',
             headers={"content-type": "application/json"})  # treadle's bearer: the check reports the hook's

    api.call("GET", "/v1/_whoami", 200)
    api.call("GET", "/v1/_me", 200)
    api.call("GET", "/v1/_concurrency", 200)
    api.call("GET", "/v1/_operatortokendef/names", 200)
    api.call("GET", "/v1/_admin/runs", 200)
    api.call("GET", "/v1/_usage", 200, params={"group_by": "tenant,day"})
    api.call("GET", "/v1/_models", 200)
    api.call("GET", "/v1/_routing", 200)
    api.call("GET", "/v1/_runnable-agents", 200)
    api.call("PUT", "/v1/_limits", 200, json={"scope": "agent", "scope_id": f"a{tag}", "soft_limit": 10})
    api.call("PUT", "/v1/_limits", 400, json={"scope": "user", "hard_limit": 1})
    api.call("GET", "/v1/_limits", 200)
    api.call("DELETE", "/v1/_limits", 204, params={"scope": "agent", "scope_id": f"a{tag}"})
    api.call("DELETE", "/v1/_limits", 404, params={"scope": "agent", "scope_id": f"a{tag}"})
    api.call("POST", "/v1/_credentialdef", 200, json={"op": "list"})
    api.call("GET", "/v1/_retention", 200)
    api.call("POST", "/v1/_erasure", 200, json={"subject": f"nobody{tag}"})
    api.call("POST", "/v1/_erasure", 400, json={"subject": f"nobody{tag}", "dry_run": False})
    api.call("POST", "/v1/_credentialdef", 404, json={"op": "get", "scope": "tenant", "name": f"c{tag}"})
    api.call("POST", "/v1/_credentialdef", 400, json={"op": "get", "scope": "agent", "name": f"c{tag}"})
    api.call("POST", "/v1/_path", 200, json={"op": "mkdir", "scope": "user", "path": f"/docs/d{tag}"})
    api.call("POST", "/v1/_path", 200, json={"op": "ls", "scope": "user", "path": "/docs"})
    api.call("POST", "/v1/_path", 422, json={"op": "rm", "scope": "user", "path": f"/nothing{tag}"})
    api.call("POST", "/v1/_path", 400, content=b"[]")
    made = api.call("POST", "/v1/_document", 200, json={"op": "create_document", "title": f"doc{tag}",
                                                         "path": f"/docs/doc{tag}"})
    api.call("POST", "/v1/_document", 200, json={"op": "create_chunk", "document_id": made["document_id"],
                                                 "title": "c", "body": "b"})
    api.call("POST", "/v1/_document", 422, json={"op": "get_chunk", "id": f"nothing{tag}"})
    api.call("POST", "/v1/_document", 400, content=b"not json")
    # the runtime's pause is runtime-wide (other tests share this database): its state, a refused
    # pause, a resume of a running runtime (tests/waiting/test_pause.py pauses one of its own)
    api.call("GET", "/v1/_state", 200)
    api.call("POST", "/v1/_pause", 422, json={"timeout_ms": -1})
    api.call("POST", "/v1/_resume", 409)
    # snapshots (tests/waiting/test_snapshots.py restores them into a database of their own): here an
    # empty document restores, so the shared database gets nothing back
    api.call("POST", "/v1/_snapshots", 413, json={"max_bytes": 1})
    snap = api.call("POST", "/v1/_snapshots", 201, json={"label": f"c{tag}"})["id"]
    api.call("GET", "/v1/_snapshots", 200, params={"label_contains": f"c{tag}"})
    api.call("GET", "/v1/_snapshots/{snapshot_id}", 200, path={"snapshot_id": snap})
    api.call("GET", "/v1/_snapshots/{snapshot_id}/export", 200, path={"snapshot_id": snap})
    api.call("POST", "/v1/_snapshots/{snapshot_id}/restore", 200, path={"snapshot_id": snap},
             json={"json": {"schema_version": 1, "sections": {}}})
    api.call("POST", "/v1/_snapshots/{snapshot_id}/restore", 422, path={"snapshot_id": snap},
             json={"json": {"schema_version": 1}})
    api.call("DELETE", "/v1/_snapshots/{snapshot_id}", 204, path={"snapshot_id": snap})
    api.call("GET", "/v1/_snapshots/{snapshot_id}", 404, path={"snapshot_id": snap})
    # resident sub-agents (tests/waiting/test_residents_http.py opens real ones)
    api.call("GET", "/v1/_resident", 200, params={"include_closed": "true"})
    api.call("GET", "/v1/_resident", 400, params={"tenant": "no such tenant"})
    api.call("POST", "/v1/_resident/{run_id}/close", 404, path={"run_id": f"r_none{tag}"})
    api.call("POST", "/v1/_resident/{run_id}/cancel", 404, path={"run_id": f"r_none{tag}"})
    other = "t" + tag
    api.call("POST", "/v1/_admin/tenants/{tenant_id}/cancel", 200, path={"tenant_id": other})
    api.call("GET", "/v1/_admin/tenants/{tenant_id}/export", 200, path={"tenant_id": other})
    api.call("DELETE", "/v1/_admin/tenants/{tenant_id}", 200, path={"tenant_id": other}, params={"confirm": other})
    api.call("DELETE", "/v1/_admin/tenants/{tenant_id}", 422, path={"tenant_id": other})
    api.call("GET", "/healthz", 200)
    api.call("GET", "/readyz", 200)
    api.call("GET", "/metrics", 200)


def openai_routes_and_the_gateway(api: Checked) -> None:
    api.call("GET", "/v1/models", 200)
    api.call("GET", "/v1/models/{model_id}", 200, path={"model_id": "helper"})
    missing = api.call("GET", "/v1/models/{model_id}", 404, path={"model_id": "nope"})
    assert missing["error"]["code"] == "model_not_found"  # OpenAI's error shape here
    api.call("POST", "/v1/chat/completions", 200, json={"model": "helper", "messages": [
        {"role": "user", "content": "hi"}]})
    api.call("POST", "/v1/chat/completions", 400, json={"model": "helper", "messages": []})
    api.call("POST", "/v1/embeddings", 200, json={"model": "fake-embed-384", "input": "hello"})
    api.call("POST", "/v1/responses", 200, json={"model": "helper", "input": "hi"})
    gone = {"response_id": "resp_unknown"}  # nothing is stored yet (docs/openai.md): OpenAI's 404
    api.call("GET", "/v1/responses/{response_id}", 404, path=gone)
    api.call("GET", "/v1/responses/{response_id}/input_items", 404, path=gone)
    api.call("POST", "/v1/responses/{response_id}/cancel", 404, path=gone)
    api.call("DELETE", "/v1/responses/{response_id}", 404, path=gone)
    api.call("POST", "/v1/_llm/chat", 200, json={"provider": "mock", "model": "echo", "messages": [
        {"role": "user", "content": "hi"}]})


def introspection(api: Checked) -> None:
    api.call("GET", "/v1/_resolver", 200)
    api.call("POST", "/v1/_resolve/probe", 200)
    api.call("GET", "/v1/_providers/{provider_id}/models", 200, path={"provider_id": "mock"})
    api.call("GET", "/v1/_providers/{provider_id}/models", 404, path={"provider_id": "nope"})
    api.call("GET", "/v1/config", 200)


#: not called here: the run stream and a user's run-state stream (SSE, tests/e2e, tests/loomcycle),
#: the ops of kinds that need outside parts (VolumeDef: a volume root; MCPServerDef: an MCP server)
#: or that would turn the test's token off
#: (OperatorTokenDef: the first admin token retires the legacy one)
EXEMPT = {("get", "/v1/runs/{run_id}/stream"), ("get", "/v1/users/{user_id}/agents/stream"),
          ("post", "/v1/_operatortokendef"), ("post", "/v1/_volumedef"),
          ("post", "/v1/_mcpserverdef")}


def test_every_operation_answers_as_documented_on_real_data(api: Checked, monkeypatch: pytest.MonkeyPatch) -> None:
    runs_and_agents(api)
    channels_memory_hooks(api, monkeypatch)
    defs_triggers_and_admin(api, monkeypatch)
    openai_routes_and_the_gateway(api)
    introspection(api)
    documented = {(m, p) for p, item in api.spec["paths"].items() for m in item}
    assert documented - api.seen - EXEMPT == set()  # a new route joins the scenario


def sse_events(body: bytes) -> list[tuple[str, dict[str, Any] | str]]:
    """(event, data) of each frame, as the SSE format reads them (comment lines skipped)."""
    out: list[tuple[str, dict[str, Any] | str]] = []
    for block in body.decode().split("\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.splitlines():
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields.setdefault(name, []).append(value)
        if "data" in fields:
            data = "\n".join(fields["data"])
            out.append((fields.get("event", ["message"])[0], data if data == "[DONE]" else json.loads(data)))
    return out


def sse_response(status: int, body: bytes, request: httpx.Request) -> httpx.Response:
    """An SSE answer as read so far, whole (what schemathesis' validator takes)."""
    resp = httpx.Response(status, headers={"content-type": "text/event-stream"}, content=body, request=request)
    resp.elapsed = datetime.timedelta(0)
    return resp


def stream(api: Checked, method: str, template: str, *, path: dict[str, str] | None = None,
           until: str | None = None, **kwargs: Any) -> list[tuple[str, dict[str, Any] | str]]:
    """Call an SSE route and check every frame against the `itemSchema` its spec documents
    (schemathesis' validator: each frame's fields, and its JSON `data` against `contentSchema`).
    `until`: an endless stream is read until a frame of that event, then judged as far as read."""
    url = template.format(**(path or {}))
    with api.http.stream(method, url, headers={"accept": "text/event-stream"}, **kwargs) as resp:
        body = b""
        for chunk in resp.iter_bytes():
            body += chunk
            if until is not None and f"event: {until}\n".encode() in body and body.endswith(b"\n\n"):
                break
    assert resp.headers["content-type"].startswith("text/event-stream"), (url, resp.status_code, body[:500])
    api.schema[template][method.lower()].validate_response(sse_response(resp.status_code, body, resp.request))
    api.seen.add((method.lower(), template))
    return sse_events(body)


def test_every_stream_sends_the_frames_its_spec_describes(api: Checked) -> None:
    """The SSE answers (runs, sessions, a user's run states, chat completions, Responses, the LLM
    gateway) match the frames their spec documents; a doctored frame does not."""
    user = "u" + secrets.token_hex(4)
    events = stream(api, "POST", "/v1/runs", json={"agent": "counter", "prompt": "count", "user_id": user})
    kinds = [e for e, _ in events]
    assert kinds[:2] == ["session", "agent"] and {"tool_call", "tool_result", "done"} <= set(kinds), kinds
    agent = events[1][1]
    assert isinstance(agent, dict)
    run_id, session_id = str(agent["run_id"]), str(agent["session_id"])
    replay = stream(api, "GET", "/v1/runs/{run_id}/stream", path={"run_id": run_id})
    assert replay[0][0] == "agent" and replay[-1][0] == "done"
    again = stream(api, "POST", "/v1/sessions/{session_id}/messages", path={"session_id": session_id},
                   json={"prompt": "again"})
    assert again[-1][0] == "done"

    with httpx.Client(base_url=str(api.http.base_url), headers=api.http.headers, timeout=30) as other:
        def start_one() -> None:
            time.sleep(0.5)  # after the stream opened: only later transitions are sent
            other.post("/v1/runs", json={"agent": "helper", "prompt": "hi", "user_id": user})

        starter = threading.Thread(target=start_one)
        starter.start()
        states = stream(api, "GET", "/v1/users/{user_id}/agents/stream", path={"user_id": user}, until="run_state")
        starter.join()
    assert [e for e, _ in states][:2] == ["stream_open", "run_state"], states

    chunks = stream(api, "POST", "/v1/chat/completions", json={
        "model": "helper", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert chunks[-1] == ("message", "[DONE]")
    deltas = stream(api, "POST", "/v1/responses", json={"model": "helper", "input": "hi", "stream": True})
    assert deltas[0][0] == "response.created" and deltas[-1][0] == "response.completed"
    gateway = stream(api, "POST", "/v1/_llm/chat", json={"provider": "mock", "model": "echo", "stream": True,
                                                         "messages": [{"role": "user", "content": "hi"}]})
    assert gateway[0][0] == "provider_chosen" and gateway[-1][0] == "done"

    # the check can fail: a stored event's frame without its `seq`, a frame of an unknown event
    op = api.schema["/v1/runs/{run_id}/stream"]["get"]
    for bad in (b'id: 3\nevent: text\ndata: {"type":"text","text":"hi"}\n\n', b"event: nonsense\ndata: {}\n\n"):
        with pytest.raises(AssertionError):
            op.validate_response(sse_response(200, bad, httpx.Request("GET", f"{api.http.base_url}/v1/runs/r/stream")))
