""""Fork from here" on the web page (issue 36 item 4), in a real headless Chromium against a real
`treadle serve`: every event of a top-level run has the button; it sets the fork form to that
event's seq, and a replay fork started from it opens the new run, whose tool call was answered from
the original's recorded result. Skipped where no Chromium is installed."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.conftest import TOKEN
from tests.support.browser import Browser, ok, wait_api
from tests.support.e2e import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_fork_from_an_event_in_replay_mode_opens_the_fork(page: Browser, served: ServerProcess,
                                                          api: httpx.Client) -> None:
    original = ok(api.post("/v1/runs", json={"agent": "big", "prompt": "store it"}))["run_id"]
    wait_api("the run to finish", lambda: ok(api.get(f"/v1/runs/{original}"))["status"] == "completed" or None)
    events = ok(api.get(f"/v1/runs/{original}/events"))["events"]
    result = next(e for e in events if e["type"] == "tool_result")
    page.open(served.url, original, token=TOKEN)
    page.wait_text("#events", "■ done")
    assert len(page.all("#events button.fork-here")) == len(events)  # one per stored event
    page.click(f'#events button.fork-here[data-seq="{result["seq"]}"]')
    page.wait_text("#fork-at", f"fork at seq {result['seq']}")
    page.pick("#fork-mode", "replay")
    page.css("#fork button").click()  # empty turn: the last user turn at or before it, asked again

    def opened() -> str | None:
        shown = str(page.driver.execute_script("return location.hash.slice(1)"))
        return shown if shown != original else None

    fork = page.wait("the fork's page", opened)
    page.wait_text("#events", "■ done")
    assert f"↺ (replayed from seq {result['seq']}) Memory" in page.text("#events")
    assert page.css("#fork").get_attribute("hidden") is not None
    run = ok(api.get(f"/v1/runs/{fork}"))
    assert run["status"] == "completed" and run["agent"] == "big"
    [replayed] = [e for e in ok(api.get(f"/v1/runs/{fork}/events"))["events"] if e["type"] == "tool_result"]
    assert replayed["replayed"] == {"run_id": original, "seq": result["seq"]}
