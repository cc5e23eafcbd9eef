"""Fixtures for the browser tests: one `treadle serve` per module (a real subprocess on loopback,
its own database, a bearer token) and one headless Chromium per module. Both skip cleanly where
no Chromium (or chromedriver, or selenium) is installed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.browser import Browser, why_no_browser
from tests.support.db import clone_database, drop_database
from tests.support.e2e import ServerProcess, write_config
from tests.support.waiting import scripted
from treadle.testing import ACCEPT_JSON

TOKEN = "browser-test-token-0123456789"
HOOK_TOKEN = "browser-hook-token-9876543210"  # what a webhook's sender presents


ASK = {"tool": "Interruption", "input": {"op": "ask", "question": "ship the release?", "options": ["yes", "no"]}}
AGENTS: dict[str, Any] = {
    "echo": {"model": "echo"},
    # asks one question, then answers
    "asker": scripted([ASK, {"text": "asked and answered"}], ["Interruption"]),
    # spawns `asker` and waits for it: the parent of a child that waits on a question
    "boss": scripted([{"tool": "Agent", "input": {"op": "spawn", "name": "asker", "prompt": "ask them"}},
                      {"text": "the sub-agent is done"}], ["Agent"]),
    # opens an `echo` resident sub-agent, then waits on a question of its own (holding the resident)
    "keeper": scripted([{"tool": "Agent", "input": {"op": "open", "name": "echo", "prompt": "stay"}},
                        {"tool": "Interruption", "input": {"op": "ask", "question": "keep it?"}},
                        {"text": "kept"}], ["Agent", "Interruption"]),
    # a tool call whose input is longer than the page shows at first
    "big": scripted([{"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "long", "value": "x" * 900}},
                     {"text": "stored"}], ["Memory"]),
}


# a team whose second state's agent asks a question: a team run waits in `ask` until it is answered
FLOW_TEAM: dict[str, Any] = {
    "entry": "work",
    "states": [{"state": "work", "handler": {"kind": "agent", "agent": "echo"}},
               {"state": "ask", "handler": {"kind": "agent", "agent": "asker"}},
               {"state": "done", "handler": {"kind": "terminal"}}],
    "transitions": [{"from": "work", "to": "ask", "on": "success"}, {"from": "ask", "to": "done", "on": "success"}],
}


@pytest.fixture
def api(served: ServerProcess) -> Iterator[httpx.Client]:
    """treadle's API on the served treadle, with the token."""
    headers = {**ACCEPT_JSON, "authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=10) as c:
        yield c


@pytest.fixture
def page(chromium: Browser) -> Iterator[Browser]:
    """The module's browser, its log drained; the test fails on any console error it leaves."""
    chromium.console()
    yield chromium
    assert chromium.errors() == []


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    reason = why_no_browser()
    if reason is not None:
        pytest.skip(reason)
    browser = Browser()
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
async def served(
    server_url: str, migrated_template: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ServerProcess]:
    reason = why_no_browser()
    if reason is not None:
        pytest.skip(reason)
    url = clone_database(server_url, migrated_template, "browser")
    workdir: Path = tmp_path_factory.mktemp("browser")
    config = write_config(workdir / "treadle.yaml", AGENTS, {"channels": {"news": {"semantic": "broadcast"}},
                                                              "teams": {"flow": FLOW_TEAM}})
    srv = ServerProcess(database_url=url, config_path=config, workdir=workdir, name="browser",
                        env={"TREADLE_AUTH_TOKEN": TOKEN, "BROWSER_HOOK_TOKEN": HOOK_TOKEN})
    srv.start()
    try:
        await srv.wait_ready()
        yield srv
    finally:
        srv.stop()
        print(f"\n===== {srv.name}: logs in {srv.workdir}\n{srv.log_tail(3000)}")
        drop_database(server_url, url)
