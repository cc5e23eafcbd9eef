"""The web page past 200 runs and a run as JSON (issue 43 item 9): the list shows the newest 200
and an "older runs…" button that loads the next page (kept across refreshes); a run's JSON — its
state and every event — is shown on the page and offered as a `<run id>.json` download. A real
headless Chromium against a real `treadle serve`; skipped where no Chromium is installed."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.browser.conftest import TOKEN
from tests.support.browser import Browser, ok
from tests.support.e2e import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_older_runs_and_a_runs_json(page: Browser, served: ServerProcess, api: httpx.Client) -> None:
    made: list[str] = []
    while len(made) < 205:  # loomcycle's batch spawn: 32 runs a call
        spawns = [{"agent": "echo", "prompt": f"run {len(made) + i}"} for i in range(min(32, 205 - len(made)))]
        made += [r["run_id"] for r in ok(api.post("/v1/runs:batch", json={"spawns": spawns}))["results"]]
    oldest = made[0]
    page.open(served.url, token=TOKEN)
    page.wait("the first 200 runs", lambda: len(page.all("#runs li")) == 200)
    assert page.visible("#runs-more") and not page.all(f'#runs li[data-run="{oldest}"]')
    page.click("#runs-more")
    page.wait("the older runs", lambda: page.all(f'#runs li[data-run="{oldest}"]'))
    assert len(page.all("#runs li")) >= 205 and not page.visible("#runs-more")

    # a run's JSON, on the page and as a download
    page.click(f'#runs li[data-run="{oldest}"]')
    page.wait_text("#run-title", oldest)
    page.click("#run-json summary")
    text = page.wait_text("#run-json-text", '"events"')
    doc = json.loads(text)
    assert doc["run"]["run_id"] == oldest and "started" in [e["type"] for e in doc["events"]]
    assert [e["seq"] for e in doc["events"]] == list(range(1, len(doc["events"]) + 1))
    assert page.attr("#run-download", "download") == f"{oldest}.json"
    assert page.attr("#run-download", "href").startswith("blob:") and page.visible("#run-download")
