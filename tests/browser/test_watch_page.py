"""The web page in a real headless Chromium against a real `treadle serve`: the runs tree with a
sub-agent's question shown on its parent, answering from the inbox, the agent picker and expandable
tool output, a resident sub-agent's badge and close button, the distinct "invalid token" message,
the library (create, fork, promote, diff), a schedule paused and resumed, channels, a session (its
runs in order; renamed, pinned, archived), and a 375 px phone viewport without horizontal scroll —
with no console errors (a CSP violation is one). Skipped where no Chromium is installed."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests.browser.conftest import HOOK_TOKEN, TOKEN
from tests.support.browser import Browser, ok, wait_api
from tests.support.e2e import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
ROOT = Path(__file__).resolve().parents[2]


def parked_family(api: httpx.Client) -> tuple[str, str]:
    """Start `boss`, which spawns `asker`, which asks; (parent, child) once the question is pending."""
    boss = ok(api.post("/v1/runs", json={"agent": "boss", "prompt": "go"}))["run_id"]

    def child_asks() -> str | None:
        kids = [r for r in ok(api.get("/v1/runs", params={"limit": 500}))["runs"] if r["parent_run_id"] == boss]
        if kids and ok(api.get(f"/v1/runs/{kids[0]['run_id']}/interrupts", params={"status": "pending"}))["interrupts"]:
            return str(kids[0]["run_id"])
        return None

    return boss, wait_api("the sub-agent's question", child_asks)


def test_the_tree_shows_a_childs_question_on_its_parent_and_the_inbox_answers_it(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    boss, child = parked_family(api)
    page.open(served.url, boss, token=TOKEN)
    # the tree: the child right under its parent, indented, and the parent says a sub-agent asks
    page.wait("the child under its parent", lambda: page.all(f'#runs li[data-run="{child}"]'))
    order = page.attrs("#runs li", "data-run")
    assert order.index(child) == order.index(boss) + 1
    assert "depth-1" in page.attr(f'#runs li[data-run="{child}"]', "class")
    assert "1 in sub-agent" in page.text(f'#runs li[data-run="{boss}"]')
    assert "? asks" in page.text(f'#runs li[data-run="{child}"]')
    # the parent's detail shows the child's question, and links to the child
    page.wait_text("#questions", "ship the release?")
    assert "asked by a sub-agent" in page.text("#questions")
    assert "sub-agents (1)" in page.text("#run-family")
    # the header counts it; the inbox lists it and answers it
    page.wait_text("#counts", "1 question")
    page.click('#tabs a[data-tab="inbox"]')
    page.wait_text("#inbox", "ship the release?")
    assert page.text("#inbox-count") == "1"
    assert f"sub-agent of {boss[:14]}" in page.text("#inbox .question")
    assert page.text("#inbox .question button") == "yes"
    page.click("#inbox .question button")
    wait_api("both runs to finish", lambda: all(
        ok(api.get(f"/v1/runs/{r}"))["status"] == "completed" for r in (boss, child)))
    [answered] = ok(api.get(f"/v1/runs/{child}/interrupts"))["interrupts"]
    assert (answered["status"], answered["answer"], answered["resolved_by"]) == ("resolved", "yes", "webui")
    page.wait_text("#inbox-notice", "no pending questions")


def test_a_resident_sub_agent_is_badged_in_the_tree_and_closed_from_its_run_view(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    keeper = ok(api.post("/v1/runs", json={"agent": "keeper", "prompt": "go"}))["run_id"]

    def resident() -> str | None:
        rows = [r for r in ok(api.get("/v1/_resident"))["resident"] if r["parent_run_id"] == keeper]
        return str(rows[0]["child_run_id"]) if rows and rows[0]["state"] == "awaiting_input" else None

    child = wait_api("the resident to park for input", resident)
    page.open(served.url, child, token=TOKEN)
    page.wait("the resident under its parent", lambda: page.all(f'#runs li[data-run="{child}"] .pill.resident'))
    assert "resident · awaiting input" in page.text(f'#runs li[data-run="{child}"]')
    page.wait_text("#run-family", "resident sub-agent (awaiting input)")
    page.click("#resident-close")
    wait_api("the closed resident to end", lambda: ok(api.get(f"/v1/runs/{child}"))["status"] == "cancelled")
    page.wait("the badge to go", lambda: not page.all(f'#runs li[data-run="{child}"] .pill.resident'))
    ok(api.post(f"/v1/runs/{keeper}/cancel", json={"scope": "run"}))


def test_start_from_the_agent_picker_with_live_counts_timestamps_and_expandable_output(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    page.open(served.url, token=TOKEN)
    page.pick("#agent", "big")
    assert {o.get_attribute("value") for o in page.all("#agent option")} >= {"echo", "asker", "boss", "big"}
    page.fill("#prompt", "store it")
    page.css("#start button").click()
    page.wait_text("#events", "■ done")
    run_id = page.driver.execute_script("return location.hash.slice(1)")
    run = ok(api.get(f"/v1/runs/{run_id}"))
    assert run["agent"] == "big" and run["status"] == "completed"
    page.wait_text("#run-meta", f"iterations {run['iterations']}")
    assert f"{run['usage']['input_tokens']} in" in page.text("#run-meta")
    # every stored event has its time; the long tool input is cut, with the whole of it one click away
    assert len(page.all("#events li time")) == run["last_seq"]
    summary = page.css("#events li.tool_call details summary")
    assert summary.text.endswith("…") and len(summary.text) < 500
    full = page.css("#events li.tool_call details pre")
    assert not full.is_displayed()
    summary.click()
    assert full.is_displayed() and "x" * 900 in full.text


def test_a_token_that_may_only_run_still_gets_the_agent_picker(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    runner = ok(api.post("/v1/_operatortokendef", json={
        "op": "create", "name": "runner", "scopes": ["runs:read", "runs:create"]}))["token"]
    page.open(served.url, token=runner)
    page.pick("#agent", "echo")  # from GET /v1/models: this token may not list the defs
    assert not page.visible("#agent-text")
    page.fill("#prompt", "hi from a runner")
    page.css("#start button").click()
    page.wait_text("#events", "■ done")
    # Chromium logs the refused GET /v1/_agentdef/names (403) itself; nothing else may be there
    assert all("/v1/_agentdef/names" in e and "403" in e for e in page.errors())


def test_a_refused_start_is_explained_beside_the_form(page: Browser, served: ServerProcess, api: httpx.Client) -> None:
    ok(api.post("/v1/_agentdef", json={"op": "create", "name": "fleeting", "overlay": {"model": "echo"}}))
    page.open(served.url, token=TOKEN)
    page.pick("#agent", "fleeting")
    ok(api.post("/v1/_agentdef", json={"op": "retire", "name": "fleeting"}))  # retired meanwhile, elsewhere
    page.fill("#prompt", "hello")
    page.css("#start button").click()
    message = page.wait_text("#start-error", "fleeting")
    assert "unknown_agent" in message
    form = page.css("#start").rect
    error = page.css("#start-error").rect
    assert form["y"] <= error["y"] < form["y"] + form["height"]  # inside the form, not far away
    errors = page.errors()  # Chromium logs the refused POST itself; nothing else may be there
    assert len(errors) == 1 and "/v1/runs" in errors[0] and "400" in errors[0], errors


def test_an_invalid_token_gets_its_own_message(chromium: Browser, served: ServerProcess) -> None:
    chromium.console()
    chromium.open(served.url)  # no token
    chromium.wait_text("#auth-msg", "needs a bearer token")
    chromium.fill("#token", "not-the-token")
    chromium.css("#auth button").click()
    chromium.wait_text("#auth-msg", "invalid token")
    assert chromium.visible("#auth")
    chromium.fill("#token", TOKEN)
    chromium.css("#auth button").click()
    chromium.wait_text("#who", "tenant default")
    chromium.wait("the auth box to close", lambda: not chromium.visible("#auth"))
    # the only errors are the refused calls themselves (Chromium logs every 401 response)
    errors = chromium.errors()
    assert errors and all("401" in e for e in errors), errors


def test_the_library_creates_forks_promotes_and_diffs_an_agent(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    page.open(served.url, "library", token=TOKEN)
    page.wait("the library list", lambda: page.all('#lib-list li[data-name="echo"]'))
    # a bad body is refused beside the form
    page.css("#lib-create-box summary").click()
    page.fill("#lib-create-name", "helper")
    page.fill("#lib-create-body", "{not json")
    page.css("#lib-create button").click()
    page.wait_text("#lib-create-error", "not valid JSON")
    page.fill("#lib-create-body", '{"model": "echo", "system_prompt": "be kind"}')
    page.css("#lib-create button").click()
    page.wait_text("#lib-title", "helper · v1 (active)")
    # fork: a new version, not active until promoted
    page.fill("#lib-fork-body", '{"model": "echo", "system_prompt": "be brief"}')
    page.fill("#lib-fork-desc", "shorter")
    page.css("#lib-fork button").click()
    page.wait_text("#lib-title", "helper · v2")
    assert "active" not in page.text("#lib-title")
    active = ok(api.post("/v1/_agentdef", json={"op": "get", "name": "helper"}))
    assert active["version"] == 1
    # the diff between the two versions
    page.css("#lib-diff button").click()
    page.wait_text("#lib-diff-out", "+   \"system_prompt\": \"be brief\"")
    assert '-   "system_prompt": "be kind"' in page.text("#lib-diff-out")
    page.css("#lib-promote").click()
    page.wait_text("#lib-title", "helper · v2 (active)")
    active = ok(api.post("/v1/_agentdef", json={"op": "get", "name": "helper"}))
    assert (active["version"], active["body"]["system_prompt"], active["description"]) == (2, "be brief", "shorter")
    # a promoted def is in the agent picker
    page.click('#tabs a[data-tab="runs"]')
    page.pick("#agent", "helper")
    # retire it: gone from the names new runs can use
    page.click('#tabs a[data-tab="library"]')
    page.click('#lib-list li[data-name="helper"]')
    page.wait_text("#lib-title", "helper · v2 (active)")
    page.css("#lib-retire").click()
    page.wait_text("#lib-title", "(retired)")
    assert "helper" not in ok(api.get("/v1/_agentdef/names"))["names"]


def test_a_schedule_is_paused_resumed_and_run_now(page: Browser, served: ServerProcess, api: httpx.Client) -> None:
    ok(api.post("/v1/_scheduledef", json={"op": "create", "name": "nightly", "overlay": {
        "agent": "echo", "schedule": "0 3 * * *", "prompt": "good night"}}))
    page.open(served.url, "schedules", token=TOKEN)
    page.click("#sched-list li")
    page.wait_text("#sched-state", "active")
    assert "0 3 * * *" in page.text("#sched-meta")
    page.css("#sched-pause").click()
    page.wait_text("#sched-state", "paused")
    assert ok(api.get("/v1/_schedules/nightly/state"))["paused"] is True
    page.css("#sched-resume").click()
    page.wait_text("#sched-state", "active")
    assert ok(api.get("/v1/_schedules/nightly/state"))["paused"] is False
    page.css("#sched-run").click()
    page.wait("a recent fire", lambda: page.all("#sched-fires li a"))
    [fire] = ok(api.get("/v1/_schedules/nightly/state"))["recent_fires"]
    assert fire["run_id"][:14] in page.text("#sched-fires") and fire["source"] in page.text("#sched-fires")


def test_a_channel_is_published_to_and_peeked(page: Browser, served: ServerProcess, api: httpx.Client) -> None:
    page.open(served.url, "channels", token=TOKEN)
    page.click('#chan-list li[data-channel="news"]')
    page.wait_text("#chan-messages", "no messages")
    page.fill("#chan-value", '{"headline": "<b>shown as text</b>"}')
    page.css("#chan-publish button").click()
    page.wait_text("#chan-messages", '"headline": "<b>shown as text</b>"')
    assert page.all("#chan-messages b") == []  # text, never HTML
    peeked = ok(api.get("/v1/_channels/news/peek"))["messages"]
    assert [m["value"] for m in peeked] == [{"headline": "<b>shown as text</b>"}]


def test_a_webhooks_recent_deliveries(page: Browser, served: ServerProcess, api: httpx.Client) -> None:
    ok(api.post("/v1/_webhookdef", json={"op": "create", "name": "greet", "overlay": {
        "agent": "echo", "auth": {"kind": "bearer", "bearer_token_env": "BROWSER_HOOK_TOKEN"}}}))
    with httpx.Client(base_url=f"{served.url}/v1/_webhooks", timeout=10) as sender:
        accepted = sender.post("/greet", content=b"hello", headers={"authorization": f"Bearer {HOOK_TOKEN}"})
        refused = sender.post("/greet", content=b"hello", headers={"authorization": "Bearer wrong"})
    assert accepted.status_code < 300 and refused.status_code == 401, (accepted.text, refused.text)
    page.open(served.url, "webhooks", token=TOKEN)
    page.click('#hook-list li[data-hook="greet"]')
    page.wait("two deliveries", lambda: len(page.all("#hook-deliveries li")) == 2)
    shown = page.text("#hook-deliveries")
    deliveries = ok(api.get("/v1/_webhooks/greet/recent-deliveries"))["deliveries"]
    assert sorted(d["verdict"] for d in deliveries)[0] == "accepted" and len(deliveries) == 2
    assert all(d["verdict"] in shown and (d["delivery_id"] or "") in shown for d in deliveries), shown
    [run_id] = [d["run_id"] for d in deliveries if d.get("run_id")]
    assert run_id[:14] in shown


def test_a_session_shows_its_runs_in_order_and_is_renamed_pinned_archived(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    first = ok(api.post("/v1/runs", json={"agent": "echo", "prompt": "hi", "user_id": "sue"}))
    sid = first["session_id"]
    wait_api("the first turn", lambda: ok(api.get(f"/v1/sessions/{sid}"))["live_run_id"] is None or None)
    second = ok(api.post(f"/v1/sessions/{sid}/messages", json={"prompt": "again"}))
    wait_api("the second turn", lambda: ok(api.get(f"/v1/sessions/{sid}"))["live_run_id"] is None or None)
    page.open(served.url, "sessions", token=TOKEN)
    page.click(f'#sess-list li[data-session="{sid}"]')
    page.wait_text("#sess-meta", "2 turns")
    assert [a.text for a in page.all("#sess-runs a")] == [first["run_id"], second["run_id"]]
    page.fill("#sess-new-title", "<i>Trip</i>")
    page.css("#sess-rename button").click()
    page.wait_text("#sess-title", "<i>Trip</i>")
    assert page.all("#sess-title i") == []  # text, never HTML
    page.css("#sess-pin").click()
    page.wait_text("#sess-pin", "unpin")
    page.css("#sess-archive").click()
    page.wait_text("#sess-state", "archived")
    session = ok(api.get(f"/v1/sessions/{sid}"))
    assert (session["title"], session["pinned"], session["archived"]) == ("<i>Trip</i>", True, True)


@pytest.mark.parametrize("tab", ["runs", "inbox", "library", "schedules", "webhooks", "channels", "sessions",
                                 "documents"])
def test_a_phone_viewport_has_no_horizontal_scroll(
    page: Browser, served: ServerProcess, api: httpx.Client, tab: str
) -> None:
    run_id = ok(api.post("/v1/runs", json={"agent": "big", "prompt": "a phone"}))["run_id"]
    page.open(served.url, run_id if tab == "runs" else tab, token=TOKEN, width=375)
    assert page.driver.execute_script("return document.documentElement.clientWidth") == 375
    if tab == "runs":
        page.wait_text("#events", "■ done")
        page.css("#events li.tool_call details summary").click()  # the long, unbroken tool input opened
    elif tab == "library":
        page.click("#lib-list li")
        page.wait("its body", lambda: page.text("#lib-body"))
    else:
        page.wait(f"the {tab} tab", lambda: page.visible(f"#tab-{tab}"))
    assert page.overflow_x() == 0


@pytest.mark.skipif(not os.environ.get("REFRESH_WATCH_SCREENSHOT"),
                    reason="set REFRESH_WATCH_SCREENSHOT=1 to refresh docs/img/watch.png")
def test_refresh_the_readme_screenshot(page: Browser, served: ServerProcess, api: httpx.Client) -> None:
    """`REFRESH_WATCH_SCREENSHOT=1 pytest tests/browser -k screenshot` rewrites docs/img/watch.png:
    a parent run whose sub-agent waits on a question."""
    boss, _ = parked_family(api)
    ok(api.post("/v1/runs", json={"agent": "big", "prompt": "store it"}))
    page.open(served.url, boss, token=TOKEN)
    page.wait_text("#questions", "ship the release?")
    page.wait_text("#events", "Agent")
    page.driver.set_window_size(1280, 760)
    assert page.driver.save_screenshot(str(ROOT / "docs" / "img" / "watch.png"))
